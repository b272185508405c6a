"""The baseline file's contents as dataclasses: cases, expectations, tolerances, Nsight Compute totals, budgets.

The file's layout and its versions are described in :mod:`meddpm.judge.baseline`; reading, checking and saving
live in :mod:`~meddpm.judge.baseline.document`, :mod:`~meddpm.judge.baseline.checks` and
:mod:`~meddpm.judge.baseline.store`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from meddpm.errors import UserError
from meddpm.measure.energy.counter import ENERGY_METHOD, EnergyEstimate

SCHEMA = "meddpm-baseline/5"
OLD_SCHEMAS = ("meddpm-baseline/1", "meddpm-baseline/2", "meddpm-baseline/3", "meddpm-baseline/4")  # read, upgraded
PROVENANCES = ("measured", "paper", "target")


class BaselineError(UserError):
    """A baseline file that cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class Tolerances:
    """How much worse than the baseline a case may get before it fails.

    Relative limits on the median time, peak allocated memory and energy per iteration,
    and the significance level a time change must reach (one-sided Mann-Whitney U).
    """

    time_rel: float = 0.05
    memory_rel: float = 0.02
    energy_rel: float = 0.10
    alpha: float = 0.01


@dataclass(frozen=True)
class CaseKey:
    """What a case measures: a preset, a combo, a batch size (per GPU) and the number of GPUs."""

    preset: str
    combo: str
    batch_size: int
    world_size: int = 1

    def __str__(self) -> str:
        ddp = f"/ddp{self.world_size}" if self.world_size > 1 else ""
        return f"{self.preset}/{self.combo}/b{self.batch_size}{ddp}"


@dataclass(frozen=True)
class Expectation:
    """A claim about one architecture: metric(combo) / metric(reference) within bounds.

    With ``reference`` None (``"reference": null`` in the file) the bound is on the combo's own
    figure, e.g. an Nsight Compute percentage: a ratio over a reference that can be 0 (strict FP32
    uses no tensor pipe) can never be judged, so such claims are stated absolutely.
    ``provenance`` is ``measured`` (follows this code's runs), ``paper`` (derived from the
    ICPE '26 paper) or ``target`` (a goal the team set, e.g. DDP scaling efficiency, not yet
    backed by a stored measurement). For ``metric: scaling_efficiency`` the ratio is the
    throughput at ``world_size`` GPUs over world_size x the throughput on one.
    """

    preset: str
    metric: str
    combo: str
    reference: str | None
    provenance: str
    source: str
    max: float | None = None
    min: float | None = None
    world_size: int = 1

    @property
    def ratio_name(self) -> str:
        """What is bounded: "opt1/baseline", "opt1@2/opt1@1", or "opt1" for an absolute bound."""
        if self.reference is None:
            return self.combo
        if self.world_size > 1:
            return f"{self.combo}@{self.world_size}/{self.reference}@1"
        return f"{self.combo}/{self.reference}"

    def describe(self) -> str:
        """E.g. "time opt1/baseline <= 0.25 (paper)"."""
        low = f"{self.min:g} <= " if self.min is not None else ""
        high = f" <= {self.max:g}" if self.max is not None else ""
        return f"{self.metric} {low}{self.ratio_name}{high} ({self.provenance})"

    def holds(self, value: float) -> bool:
        """Whether a measured ratio (or absolute figure) lies within the bounds; NaN and infinities never do."""
        within = (self.max is None or value <= self.max) and (self.min is None or value >= self.min)
        return within and math.isfinite(value)


@dataclass(frozen=True)
class Noise:
    """How much a case's time varies between processes on one machine and between runs (machine starts).

    Both are relative standard deviations (0.01 = 1 %). ``between_process_rel`` comes from the
    saving run's processes; ``between_run_rel`` from repeated runs on fresh machines, set by
    hand with its ``between_run_source`` and kept by re-saves, like tolerances.
    """

    between_process_rel: float | None = None
    between_run_rel: float | None = None
    between_run_source: str = ""


@dataclass(frozen=True)
class CountRange:
    """The spread of one deterministic count of an iteration (launches, bytes, FLOPs) over the saving run's
    processes: a count outside it has moved (docs/explain.md)."""

    min: int
    max: int

    def nearest(self, value: int) -> int:
        """The stored value nearest ``value``: itself within the range, else the edge it crossed."""
        return min(max(value, self.min), self.max)


@dataclass(frozen=True)
class StoredRow:
    """One row of a stored profile: a kernel (GPU) or aten operator (CPU) in one module type, launched by one aten
    operator, with its calls and milliseconds in each of the saving run's processes."""

    name: str  # the name rows are matched by, long ones cut and ended by a digest (docs/explain.md)
    label: str
    category: str
    module: str  # the module type ("Conv3d", "optimizer", "outside modules"), not the instance
    op: str
    calls: tuple[int, ...]
    ms: tuple[float, ...]


@dataclass(frozen=True)
class FoldedRows:
    """The rows of one group and module type whose share of the iteration's time was under the profile's floor,
    summed per process."""

    category: str
    module: str
    rows: int
    calls: tuple[int, ...]
    ms: tuple[float, ...]


@dataclass(frozen=True)
class StoredProfile:
    """A compact profile of a case's profiled iteration in each of the saving run's processes: the rows that hold
    more than ``floor`` of the iteration's time, the rest folded per group and module type (with a digest of each one's
    key), and the bytes each module type's forward left allocated. What a failure against the baseline is explained
    with (docs/explain.md, :mod:`meddpm.judge.stored_profile`)."""

    processes: int
    floor: float
    rows: tuple[StoredRow, ...]
    folded: tuple[FoldedRows, ...] = ()
    module_bytes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    folded_keys: str = ""  # a digest of each folded row's key, so that a new row is not taken for a folded one

    @property
    def folded_shares(self) -> tuple[float, float]:
        """What the folded rows hold of the iteration: the share of its calls and of its milliseconds (medians over
        the processes of each sum's share)."""
        calls = [sum(f.calls[p] for f in self.folded) / max(1, self._total_calls(p)) for p in range(self.processes)]
        ms = [sum(f.ms[p] for f in self.folded) / (self._total_ms(p) or 1.0) for p in range(self.processes)]
        return sorted(calls)[len(calls) // 2], sorted(ms)[len(ms) // 2]

    def _total_calls(self, p: int) -> int:
        return sum(r.calls[p] for r in self.rows) + sum(f.calls[p] for f in self.folded)

    def _total_ms(self, p: int) -> float:
        return sum(r.ms[p] for r in self.rows) + sum(f.ms[p] for f in self.folded)


@dataclass(frozen=True)
class CaseBaseline:
    """The stored measurement of one case."""

    preset: str
    combo: str
    batch_size: int
    provenance: str
    samples_ms: list[float]
    median_ms: float
    iqr_ms: float
    min_ms: float
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    energy_j_per_iter: float | None
    energy_samples_j: list[float]
    tflops: float
    environment: dict[str, Any]
    tolerances: Tolerances | None = None
    world_size: int = 1
    process_medians_ms: list[float] = field(default_factory=list)  # empty: measured in one process
    noise: Noise = Noise()
    energy_method: str = ""  # "" for energy read around single iterations (before counter windows)
    energy_quantisation: float | None = None
    energy_replicates_j: list[float] = field(default_factory=list)
    counts: dict[str, CountRange] = field(default_factory=dict)  # empty: saved before counts, or none profiled
    profile: StoredProfile | None = None  # None: saved before profiles (version 4 and older), or none profiled

    @property
    def key(self) -> CaseKey:
        return CaseKey(self.preset, self.combo, self.batch_size, self.world_size)

    @property
    def energy(self) -> EnergyEstimate | None:
        """The stored energy as an estimate a verdict can use, or None (none stored, or by another method)."""
        if self.energy_method != ENERGY_METHOD or self.energy_j_per_iter is None or self.energy_quantisation is None:
            return None
        return EnergyEstimate(self.energy_j_per_iter, self.energy_quantisation, tuple(self.energy_replicates_j))


@dataclass(frozen=True)
class NcuBaseline:
    """Stored Nsight Compute totals of one case's iteration, and how they were collected."""

    preset: str
    combo: str
    batch_size: int
    provenance: str
    totals: dict[str, float]
    ncu_version: str
    replay: str
    clock_control: str
    groups: list[str]
    environment: dict[str, Any]

    @property
    def key(self) -> CaseKey:
        return CaseKey(self.preset, self.combo, self.batch_size)


@dataclass(frozen=True)
class SamplingBudget:
    """The time one full reverse diffusion (all T steps) of ``batch_size`` volumes may take under a combo.

    ``provenance`` ``measured``: the budget sits above the figures in ``measured_s`` (each a fresh
    process's full sample), by the file's time tolerance; ``target``: a goal, with no measurement
    behind it in this file.
    """

    preset: str
    combo: str
    batch_size: int
    budget_s: float
    provenance: str
    source: str
    measured_s: list[float] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.preset}/{self.combo}/b{self.batch_size}"


@dataclass(frozen=True)
class BaselineFile:
    """Everything stored for one architecture."""

    arch: str
    tolerances: Tolerances = Tolerances()
    expectations: tuple[Expectation, ...] = ()
    cases: dict[str, CaseBaseline] = field(default_factory=dict)
    ratios: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    description: str = ""
    ncu: dict[str, NcuBaseline] = field(default_factory=dict)
    sampling: dict[str, SamplingBudget] = field(default_factory=dict)

    def case(self, key: CaseKey) -> CaseBaseline | None:
        """The stored case, or None."""
        return self.cases.get(str(key))

    def sampling_budget(self, preset: str, combo: str, batch_size: int) -> SamplingBudget | None:
        """The full-sample time budget of a combo, or None (that sampling case is not guarded)."""
        return self.sampling.get(f"{preset}/{combo}/b{batch_size}")

    def tolerances_for(self, key: CaseKey) -> Tolerances:
        """The case's own tolerances if it has them, else the file's."""
        stored = self.case(key)
        return stored.tolerances if stored and stored.tolerances else self.tolerances

    def expectations_for(
        self, preset: str, metric: str, combo: str, reference: str | None, world_size: int = 1
    ) -> list[Expectation]:
        """Expectations on ``metric`` of ``combo`` against ``reference`` (None: absolute) at ``world_size``."""
        wanted = (preset, metric, combo, reference, world_size)
        return [e for e in self.expectations if (e.preset, e.metric, e.combo, e.reference, e.world_size) == wanted]

    def with_measurements(
        self, cases: list[CaseBaseline], ratios: dict[str, dict[str, dict[str, float]]]
    ) -> BaselineFile:
        """A copy with these cases and ratios replaced or added; every other entry is kept."""
        merged = dict(self.cases)
        for case in cases:
            # A case's own tolerances and its between-run noise are policy or come from other runs:
            # a re-save keeps them.
            kept = self.cases.get(str(case.key))
            if kept:
                noise = replace(
                    case.noise,
                    between_run_rel=kept.noise.between_run_rel,
                    between_run_source=kept.noise.between_run_source,
                )
                case = replace(case, tolerances=kept.tolerances, noise=noise)
            merged[str(case.key)] = case
        return replace(self, cases=dict(sorted(merged.items())), ratios={**self.ratios, **ratios})

    def with_ncu(self, profiles: list[NcuBaseline]) -> BaselineFile:
        """A copy with these Nsight Compute totals replaced or added; every other entry is kept."""
        merged = {**self.ncu, **{str(p.key): p for p in profiles}}
        return replace(self, ncu=dict(sorted(merged.items())))
