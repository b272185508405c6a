"""The last good run as found in the history (:class:`LastGood`): its commit, where and when it ran, what each case
measured, and what it tells an A/B run against it (which of code or machine moved a case, the energy side B may carry).

Apart from :mod:`meddpm.history.last_good`, which answers ``--compare-to=last-good``, and
:mod:`meddpm.history.last_good_lookup`, which finds the run in the database: both use this record.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from meddpm.judge.drift import Attribution, attribute, environment_differences
from meddpm.judge.verdict import Verdict
from meddpm.measure.campaign.result import CarriedEnergy
from meddpm.measure.energy.counter import BlockEnergy


@dataclass(frozen=True)
class LastGood:
    """The run :func:`meddpm.history.last_good_lookup.last_good` chose: its commit, when and where it ran, and what
    each case measured.

    ``medians_ms``: each case's median (the case key, ``preset/combo/b<batch>``, ``/ddp<N>`` for DDP) in ms;
    ``energy_blocks``: the energy blocks of each case that kept some (its first process's, in a run of several).
    """

    commit: str
    run_id: int
    started_at: datetime.datetime  # UTC, naive
    arch: str
    kind: str
    processes: int
    gpu_name: str | None
    gpu_uuid: str | None
    driver: str | None
    torch: str | None
    cuda: str | None
    cudnn: str | None
    python: str | None
    environment: dict[str, Any]
    medians_ms: dict[str, float]
    energy_blocks: dict[str, tuple[BlockEnergy, ...]] = field(default_factory=dict)

    def describe(self) -> str:
        """One line: which run, when, and its commit."""
        return (
            f"the last good {self.kind} run on {self.arch}, #{self.run_id} of {self.started_at:%Y-%m-%d %H:%M} UTC "
            f"({self.processes} process(es)), commit {self.commit[:12]}"
        )

    @property
    def recorded_environment(self) -> dict[str, Any]:
        """Everything the run recorded of its machine and software, its columns over its environment's fields."""
        columns = ("gpu_name", "gpu_uuid", "driver", "torch", "cuda", "cudnn", "python")
        return {**self.environment, **{name: getattr(self, name) for name in columns if getattr(self, name)}}

    def attribution(self, case: str, ab: Verdict, tolerance: float, environment: Mapping[str, Any]) -> Attribution:
        """Whether the code or the machine moved ``case`` (:func:`meddpm.judge.drift.attribute`): ``ab`` is its A/B
        verdict against this run's commit, ``environment`` the one side A recorded now, set against this run's."""
        differences = environment_differences(self.recorded_environment, environment)
        return attribute(case, ab, self.medians_ms.get(case), tolerance, differences)

    def carried_energy(
        self, thresholds: Mapping[str, float], environment: Mapping[str, Any]
    ) -> tuple[dict[str, CarriedEnergy], str]:
        """The energy of each case of ``thresholds`` (by case key, with its energy threshold) as this run measured it,
        for an A/B's side B to carry instead of measuring it again, where ``environment`` (this machine's now) is the
        card and software this run measured on; else none, and what differs in words.

        Joules follow the card (its leakage, its power cap), the driver and the software, so only the same card (its
        UUID) with nothing else changed carries them (docs/energy.md, "Side B's energy in a nightly").
        """
        differences = [
            d for d in environment_differences(self.recorded_environment, environment) if not d.startswith("gpu_uuid ")
        ]
        if not self.gpu_uuid or environment.get("gpu_uuid") != self.gpu_uuid:
            differences.insert(0, f"card {self.gpu_uuid or 'unrecorded'} -> {environment.get('gpu_uuid') or 'unknown'}")
        if differences:
            return {}, ", ".join(differences)
        carried = {
            case: CarriedEnergy(self.energy_blocks[case], f"run #{self.run_id}", threshold)
            for case, threshold in thresholds.items()
            if self.energy_blocks.get(case)
        }
        return carried, ""

    def as_dict(self) -> dict[str, Any]:
        """The run as results files keep it (its medians are in the history already)."""
        return {
            "run_id": self.run_id,
            "commit": self.commit,
            "started_at": self.started_at.isoformat(),
            "kind": self.kind,
            "processes": self.processes,
            "environment": self.environment,
        }
