"""The last good run: the newest run of an architecture that no open regression had reached, for ``--compare-to``.

An A/B run against the last good commit measures a working tree against the code that last measured well,
on the same architecture. A run is good when it started before the first run of every open regression of
its architecture (:func:`meddpm.history.changepoints.detect`, the rule ``meddpm-history check`` fails on):
the commit of a run at or after such a step carries the regression, whichever cases that run measured. Only
a run of a plain git commit can be checked out again: one of a dirty tree (``sha+dirty``) or of an unknown
commit is passed over.
"""

from __future__ import annotations

import datetime
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from meddpm.errors import UserError
from meddpm.history.acks import covered
from meddpm.history.changepoints import detect
from meddpm.history.models import Acknowledgement, Run
from meddpm.history.series import TREND_KINDS, case_frame, run_processes
from meddpm.history.store import DEFAULT_DB, HistoryLocked, HistoryStore, resolve_target
from meddpm.judge.drift import Attribution, attribute, environment_differences
from meddpm.judge.verdict import Verdict
from meddpm.measure.campaign.result import CarriedEnergy
from meddpm.measure.energy.counter import ENERGY_METHOD, BlockEnergy
from meddpm.measure.processes.revision import checkout_root, resolve_revision

_SHA = re.compile(r"[0-9a-f]{7,40}")
# What --compare-to takes to mean the last good run's commit.
LAST_GOOD = "last-good"
_FIX = "run the suite (or meddpm-bench) with --history first, or give --compare-to REV"


@dataclass(frozen=True)
class LastGood:
    """The run :func:`last_good` chose: its commit, when and where it ran, and what each case measured.

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


def check_known(found: LastGood) -> None:
    """A one-line UserError, saying where the commit came from, when git here lacks the last good run's commit."""
    root = checkout_root()
    try:
        resolve_revision(found.commit, root)
    except UserError:
        raise UserError(
            f"--compare-to=last-good: {found.describe()}, a commit that git does not know in {root}; "
            "fetch it (git fetch), or give --compare-to a revision"
        ) from None


def compare_to_last_good(
    given: str | None, target: str | None, arch: str, kind: str, processes: int
) -> LastGood | None:
    """The last good run where ``--compare-to`` says :data:`LAST_GOOD`, else None (any other revision).

    One measured in ``processes`` processes where there is one, since a median of process medians and one of a
    single process's rounds need not agree to the 0.1 %; else one in any number (its line says how many).
    """
    if given is None or given.strip() != LAST_GOOD:
        return None
    try:
        return last_good(target, arch, kind, processes)
    except HistoryLocked:
        raise  # the lookup in any number of processes would wait for the same lock again
    except UserError:
        return last_good(target, arch, kind)


def last_good(target: str | None, arch: str, kind: str, processes: int | None = None) -> LastGood:
    """The newest good ``kind`` run (``suite`` or ``bench``) on ``arch`` in the history database.

    ``target``: the database as ``--history`` gives it (None: ``$MEDDPM_HISTORY``, else
    ``./perf-history.sqlite``). ``processes``: only runs measured in that many worker processes (None: any).
    No database, no such run, or no good one is a one-line :class:`UserError` naming the fix.
    """
    if kind not in TREND_KINDS:
        raise UserError(f"last good run: kind {kind!r} is not one of {', '.join(TREND_KINDS)}")
    database = resolve_target(target, DEFAULT_DB)
    try:
        with HistoryStore.open(database, create=False) as store:
            runs = store.runs()
            acks = store.acknowledgements()
            label = store.label
        for line in store.skipped:
            print(f"history {label}: {line}", file=sys.stderr)
    except HistoryLocked:
        raise  # a lock is no missing history: running the suite with --history would not help
    except UserError as exc:
        raise UserError(f"no last good run: {exc}; {_FIX}") from None
    wanted = " ".join(filter(None, [kind, "run", f"in {processes} process(es)" if processes else ""]))
    candidates = [
        run
        for run in runs
        if run.arch == arch and run.kind == kind and (processes is None or run_processes(run) == processes)
    ]
    if not candidates:
        raise UserError(f"no last good run: the history {label} holds no {wanted} on {arch}; {_FIX}")
    first_bad = _first_regressed_run(runs, acks, arch)
    before = [run for run in candidates if first_bad is None or _order(run) < _order(first_bad)]
    if not before:
        raise UserError(
            f"no last good run: every {wanted} on {arch} in {label} is at or after the open regression from "
            f"commit {first_bad.commit[:12]} ({first_bad.started_at:%Y-%m-%d %H:%M}; meddpm-history check lists it); "
            "give --compare-to REV"
        )
    # A run whose own verdicts failed a case (against its baselines, or its A/B against the night before) is
    # not good either: the change points see a step only runs after it, and meanwhile the next night would
    # A/B against the regression itself.
    passed = [run for run in before if not any(case.outcome == "regression" for case in run.cases)]
    if not passed:
        raise UserError(
            f"no last good run: every {wanted} on {arch} in {label} before any open regression failed a case of its "
            "own; give --compare-to REV"
        )
    committed = [run for run in passed if _SHA.fullmatch(run.commit)]
    if not committed:
        raise UserError(
            f"no last good run: every good {wanted} on {arch} in {label} ({len(passed)}) measured a dirty tree or "
            "an unknown commit, which cannot be checked out for an A/B run; run the suite with --history on a "
            "clean commit, or give --compare-to REV"
        )
    return _last_good(committed[-1], processes)


def _first_regressed_run(runs: list[Run], acks: list[Acknowledgement], arch: str) -> Run | None:
    """The earliest run at which an open regression of ``arch`` starts, or None where none is open. An
    acknowledged one is known and expected: the runs after it are good, as ``check`` passes them."""
    by_id = {run.id: run for run in runs}
    frame = case_frame([run for run in runs if run.arch == arch])
    starts = [by_id[step.run_id] for step in covered(detect(frame), acks) if step.failing]
    return min(starts, key=_order, default=None)


def _order(run: Run) -> tuple[datetime.datetime, int]:
    """A run's place in the history: the order the store and the change points read runs in."""
    return run.started_at, run.id


def _last_good(run: Run, processes: int | None) -> LastGood:
    return LastGood(
        commit=run.commit,
        run_id=run.id,
        started_at=run.started_at,
        arch=run.arch,
        kind=run.kind,
        processes=processes or run_processes(run),
        gpu_name=run.gpu_name,
        gpu_uuid=run.gpu_uuid,
        driver=run.driver,
        torch=run.torch,
        cuda=run.cuda,
        cudnn=run.cudnn,
        python=run.python,
        environment=dict(run.environment or {}),
        medians_ms={case.case: case.median_ms for case in run.cases},
        energy_blocks={case.case: blocks for case in run.cases if (blocks := _energy_blocks(case.details))},
    )


def _energy_blocks(details: Mapping[str, Any] | None) -> tuple[BlockEnergy, ...]:
    """A stored case's energy blocks; none where it kept none, where another method measured them (its
    ``energy_method``, which this harness's counter windows would not match), or where they do not read back as
    blocks (a row of another writer), so that such a case's side B measures its energy again."""
    details = details or {}
    if details.get("energy_method") != ENERGY_METHOD:
        return ()
    try:
        return tuple(BlockEnergy.from_dict(block) for block in details.get("energy_blocks") or ())
    except (KeyError, TypeError, ValueError, AttributeError):
        return ()
