"""Per-architecture baseline files (``baselines/<arch>.json``): schema, loading and atomic saving.

Schema ``meddpm-baseline/3`` (documented in ``baselines/README.md``)::

    {
      "schema": "meddpm-baseline/3",
      "arch": "h200",
      "tolerances": {"time_rel": 0.05, "memory_rel": 0.02, "energy_rel": 0.10, "alpha": 0.01},
      "expectations": [{"preset": "paper", "metric": "time", "combo": "opt1", "reference": "baseline",
                        "max": 0.25, "min": null, "provenance": "measured", "source": "..."},
                       {"preset": "paper", "metric": "ncu:tensor_pipe_pct", "combo": "opt1", "reference": null,
                        "min": 7.81, "max": null, "provenance": "paper", "source": "..."}],
      "cases": {"paper/opt1/b1": {"preset": ..., "combo": ..., "batch_size": ..., "provenance": "measured",
                                   "samples_ms": [...], "median_ms": ..., "energy_samples_j": [...], ...,
                                   "process_medians_ms": [...], "noise": {"between_process_rel": ...,
                                   "between_run_rel": ..., "between_run_source": "..."},
                                   "environment": {...}}},
      "ratios": {"paper/b1": {"opt1/baseline": {"median": ..., "q1": ..., "q3": ...}}},
      "ncu": {"paper/opt1/b1": {"provenance": "measured", "totals": {"sm_cycles": ..., ...},
                                "ncu_version": ..., "replay": "range", "clock_control": "none", ...}}
    }

Expectations on Nsight Compute figures name the metric ``ncu:<key>`` (e.g. ``ncu:sm_cycles``,
keys in :mod:`meddpm.measure.profiling.ncu_metrics`); ``ncu`` keeps the measured per-iteration totals.

Version 2 added each case's per-process medians (the unit of its time verdict) and its measured
noise; a version-1 file is read with neither (its cases are judged as before, by rounds).
Version 3 added absolute expectations (``"reference": null``: a bound on the combo's own figure);
a version-1 or 2 file is read as version 3 (it has none: its ``reference: null`` is refused) and
is written back as version 3 by the next save. Every key is checked: an unknown one is refused,
naming the nearest known key, rather than ignored.

Energy is stored with the method it came from (``energy_method``), its counter bound
(``energy_quantisation``) and its replicates (``energy_replicates_j``, J/iter per window or per
process); see ``docs/energy.md``. Cases saved before that have none of the three, and their
``energy_samples_j`` are single-iteration reads of the counter (often 0): their energy is
reported as not comparable until the case is saved again. New saves leave ``energy_samples_j`` empty.

``tolerances`` may be overridden per case. ``ratios`` records the interleaved ratios of the
run that saved the cases, for reviewers; verdicts use ``expectations``. Files are written
with lists of numbers on one line, so a baseline change reads well in a pull request.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from meddpm.atomic import write_text_atomic
from meddpm.errors import UserError
from meddpm.measure.energy.counter import ENERGY_METHOD, EnergyEstimate
from meddpm.measure.profiling.ncu_metrics import METRICS
from meddpm.model.config import PRESETS
from meddpm.run.combos import COMBOS

SCHEMA = "meddpm-baseline/3"
OLD_SCHEMAS = ("meddpm-baseline/1", "meddpm-baseline/2")  # read and upgraded in memory
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


def baseline_path(directory: Path, arch: str) -> Path:
    """Where the baseline of ``arch`` lives."""
    return directory / f"{arch}.json"


# --- reading ---------------------------------------------------------------------------
_FIX = "restore it from version control or re-create it with --save-baseline"
# Stored medians and samples are both rounded to 3 decimals, so they may disagree by up to 0.001 ms.
_ROUNDING_MS = 0.0011
_RATIO_FIELDS = ("median", "q1", "q3", "min", "max")


class _Invalid(ValueError):
    """One thing wrong with a file's contents: the problem, and how to fix it."""

    def __init__(self, problem: str, fix: str = _FIX):
        super().__init__(problem)
        self.problem, self.fix = problem, fix


def load_baseline(path: Path, arch: str) -> BaselineFile | None:
    """The baseline file at ``path``, None if there is none, or a one-line BaselineError.

    Every field is checked before anything is measured: unknown keys (with the nearest known
    one), types (a bool is no number, counts are ints, numbers are finite), and the figures no
    verdict can use (see :func:`validate`).
    """
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"cannot read baseline file {path}: {exc}; {_FIX}") from None
    except json.JSONDecodeError as exc:
        raise BaselineError(f"baseline file {path} is corrupt (not JSON: {exc}); {_FIX}") from None
    found = data.get("schema") if isinstance(data, dict) else type(data).__name__
    if found != SCHEMA and found not in OLD_SCHEMAS:
        raise BaselineError(
            f"baseline file {path} has schema {found!r} but this suite reads {SCHEMA!r}; "
            "re-create it with --save-baseline (see baselines/README.md)"
        )
    try:
        loaded = _from_dict(data, found)
        validate(loaded)
    except _Invalid as exc:
        raise BaselineError(f"baseline file {path} has {exc.problem}; {exc.fix}") from None
    except ValueError as exc:
        raise BaselineError(f"baseline file {path} has {exc}; {_FIX}") from None
    if loaded.arch != arch:
        raise BaselineError(f"baseline file {path} is for arch {loaded.arch!r}, not {arch!r}; rename or re-create it")
    return loaded


def validate(baseline: BaselineFile) -> None:
    """Raise ValueError naming the first stored figure no verdict can use (its field, value and rule).

    A NaN sample never compares as slower, a zero median divides by zero, a negative tolerance
    fails every case and an expectation no run can check or fail passes forever: each would turn
    into a silent pass or a nonsense verdict.
    """
    _check_tolerances("tolerances", baseline.tolerances)
    for key, case in baseline.cases.items():
        where = f"cases[{key!r}]"
        for i, sample in enumerate(case.samples_ms):
            _require(sample > 0 and math.isfinite(sample), f"{where}.samples_ms[{i}]", sample, "a finite time above 0")
        for name in ("median_ms", "min_ms"):
            value = getattr(case, name)
            _require(value > 0 and math.isfinite(value), f"{where}.{name}", value, "a finite time above 0")
        median = statistics.median(case.samples_ms)
        _require(
            abs(case.median_ms - median) <= _ROUNDING_MS,
            f"{where}.median_ms",
            case.median_ms,
            f"the median of its samples_ms ({median:g}) up to rounding; re-save the case or correct the median",
        )
        _require(case.iqr_ms >= 0 and math.isfinite(case.iqr_ms), f"{where}.iqr_ms", case.iqr_ms, "finite, 0 or more")
        _require(case.tflops >= 0, f"{where}.tflops", case.tflops, "0 or more")
        for i, energy in enumerate(case.energy_samples_j):
            # 0 is possible in these old single-iteration reads: the counter had not stepped.
            _require(
                energy >= 0 and math.isfinite(energy), f"{where}.energy_samples_j[{i}]", energy, "finite, 0 or more"
            )
        if case.energy_method:
            _require(case.energy_method == ENERGY_METHOD, f"{where}.energy_method", case.energy_method, ENERGY_METHOD)
            energy, q = case.energy_j_per_iter, case.energy_quantisation
            _require(energy is not None and energy > 0, f"{where}.energy_j_per_iter", energy, "above 0 J")
            _require(q is not None and 0 <= q < 1, f"{where}.energy_quantisation", q, "a fraction from 0 to 1")
            for i, value in enumerate(case.energy_replicates_j):
                _require(
                    value > 0 and math.isfinite(value), f"{where}.energy_replicates_j[{i}]", value, "finite, above 0"
                )
        for name in ("peak_allocated_bytes", "peak_reserved_bytes"):
            value = getattr(case, name)
            _require(
                value is None or (isinstance(value, int) and value >= 0), f"{where}.{name}", value, "bytes, 0 or more"
            )
        _require(case.batch_size >= 1, f"{where}.batch_size", case.batch_size, "1 or more")
        _require(case.world_size >= 1, f"{where}.world_size", case.world_size, "1 or more")
        if case.tolerances is not None:
            _check_tolerances(f"{where}.tolerances", case.tolerances)
        for i, median in enumerate(case.process_medians_ms):
            _require(
                median > 0 and math.isfinite(median),
                f"{where}.process_medians_ms[{i}]",
                median,
                "a finite time above 0",
            )
        for name in ("between_process_rel", "between_run_rel"):
            value = getattr(case.noise, name)
            _require(value is None or 0 <= value < 1, f"{where}.noise.{name}", value, "a fraction from 0 to 1, or null")
    for e in baseline.expectations:
        _check_expectation(e, baseline.ncu)
    for key, entry in baseline.ncu.items():
        for name, value in entry.totals.items():
            _require(value >= 0 and math.isfinite(value), f"ncu[{key!r}].totals.{name}", value, "finite, 0 or more")
    for group, by_name in baseline.ratios.items():
        for name, figures in by_name.items():
            for stat, value in figures.items():
                where = f"ratios[{group!r}][{name!r}].{stat}"
                _require(value > 0 and math.isfinite(value), where, value, "a finite ratio above 0")
    for key, budget in baseline.sampling.items():
        where = f"sampling[{key!r}]"
        _require(budget.budget_s > 0, f"{where}.budget_s", budget.budget_s, "a finite time above 0 s")
        _require(
            budget.batch_size == 1, f"{where}.batch_size", budget.batch_size, "1 (a sampling case times one volume)"
        )
        for i, seconds in enumerate(budget.measured_s):
            _require(
                0 < seconds <= budget.budget_s, f"{where}.measured_s[{i}]", seconds, "above 0 and within the budget"
            )
        _require(
            budget.provenance != "measured" or bool(budget.measured_s),
            f"{where}.measured_s",
            budget.measured_s,
            "the full samples a measured budget rests on",
        )


def _check_expectation(e: Expectation, ncu: dict[str, NcuBaseline]) -> None:
    """Refuse an expectation no run checks (unknown names, a ratio no case computes) or one no run can fail."""
    where = f"expectation {e.ratio_name!r} ({e.metric})"
    for name in ("min", "max"):
        value = getattr(e, name)
        _require(value is None or math.isfinite(value), f"{where}.{name}", value, "a finite number")
    if e.min is not None and e.max is not None:
        _require(e.min <= e.max, f"{where}.min", e.min, f"at most max ({e.max})")
    # Every metric here is 0 or more: a lower bound of 0 or less with no upper bound holds for any measurement.
    _require(
        e.max is not None or (e.min is not None and e.min > 0),
        f"{where}.min",
        e.min,
        "above 0 when there is no max (else the check cannot fail)",
    )
    _require(e.preset in PRESETS, f"{where}.preset", e.preset, f"one of {', '.join(PRESETS)}")
    for name in ("combo", "reference"):
        value = getattr(e, name)
        if value is not None:
            _require(value in COMBOS, f"{where}.{name}", value, f"one of {', '.join(COMBOS)}")
    ncu_keys = [m.key for m in METRICS]
    if e.metric.startswith("ncu:"):
        key = e.metric.removeprefix("ncu:")
        _require(key in ncu_keys, f"{where}.metric", e.metric, f"ncu:<key>, key one of {', '.join(ncu_keys)}")
        _require(e.world_size == 1, f"{where}.world_size", e.world_size, "1 (ncu profiles one GPU)")
        _require(
            e.reference in (None, "baseline"),
            f"{where}.reference",
            e.reference,
            '"baseline" (the only reference profiled against) or null (an absolute bound on the figure itself)',
        )
        if e.reference is not None:
            stored = ncu.get(str(CaseKey(e.preset, e.reference, 1)))
            if stored is not None and stored.totals.get(key) == 0:
                raise _Invalid(
                    f"{where}: a ratio over {e.reference}'s {key}, stored as 0, which no run can judge",
                    'state it as an absolute bound on the combo\'s own figure ("reference": null)',
                )
        return
    if e.metric == "time":
        _require(e.world_size == 1, f"{where}.world_size", e.world_size, "1 (time ratios are single-GPU)")
        timed = '"baseline" (the only reference timed against)'
        _require(e.reference == "baseline", f"{where}.reference", e.reference, timed)
        return
    if e.metric == "scaling_efficiency":
        _require(e.world_size >= 2, f"{where}.world_size", e.world_size, "2 or more")
        _require(e.reference == e.combo, f"{where}.reference", e.reference, f"the combo itself ({e.combo!r})")
        return
    _require(False, f"{where}.metric", e.metric, "time, scaling_efficiency or ncu:<key>")


def _check_tolerances(where: str, tol: Tolerances) -> None:
    for name in ("time_rel", "memory_rel", "energy_rel"):
        value = getattr(tol, name)
        _require(0 < value < 10, f"{where}.{name}", value, "a fraction above 0 and below 10 (0.05 = 5 %)")
    _require(0 < tol.alpha < 1, f"{where}.alpha", tol.alpha, "a significance level between 0 and 1")


def _require(ok: bool, field: str, value: object, rule: str) -> None:
    if not ok:
        raise ValueError(f"{field} = {value!r}, which must be {rule}")


# Strict readers of JSON values: each names the field it reads, so an error says where to look.
def _object(value: Any, where: str, known: Iterable[str], required: Iterable[str] = ()) -> dict[str, Any]:
    """``value`` as a JSON object holding only ``known`` keys and every ``required`` one."""
    if not isinstance(value, dict):
        raise _Invalid(f"{where} = {_short(value)}, which must be an object {{...}}")
    known = list(known)
    for key in value:
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else f" (known: {', '.join(known)})"
            raise _Invalid(f"an unknown key {key!r} in {where}{hint}", "correct or remove it: it would be ignored")
    for key in required:
        if key not in value:
            raise _Invalid(f"no {key!r} in {where}", f"add it, or {_FIX}")
    return value


def _mapping(value: Any, where: str) -> dict[str, Any]:
    """A JSON object whose keys are names chosen by the file (cases, ratios, environment)."""
    if not isinstance(value, dict):
        raise _Invalid(f"{where} = {_short(value)}, which must be an object {{...}}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Invalid(f"{where} = {_short(value)}, which must be a list [...]")
    return value


def _number(value: Any, where: str) -> float:
    """A finite JSON number; true/false, strings, NaN and infinities are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Invalid(f"{where} = {_short(value)}, which must be a finite number (not true/false, not a string)")
    return float(value)


def _optional_number(value: Any, where: str) -> float | None:
    return None if value is None else _number(value, where)


def _integer(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"{where} = {_short(value)}, which must be a whole number such as 1 (no fraction, not true)")
    return value


def _optional_integer(value: Any, where: str) -> int | None:
    return None if value is None else _integer(value, where)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"{where} = {_short(value)}, which must be a string")
    return value


def _numbers(value: Any, where: str) -> list[float]:
    return [_number(x, f"{where}[{i}]") for i, x in enumerate(_list(value, where))]


def _field(where: str, name: str) -> str:
    return f"{where}.{name}"


def _short(value: Any) -> str:
    text = json.dumps(value, allow_nan=True) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def _required(cls: type) -> list[str]:
    return [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]


def _tolerances(value: Any, where: str) -> Tolerances:
    d = _object(value, where, _names(Tolerances))
    return Tolerances(**{k: _number(v, f"{where}.{k}") for k, v in d.items()})


def _noise(value: Any, where: str) -> Noise:
    d = _object(value, where, _names(Noise))
    return Noise(
        between_process_rel=_optional_number(d.get("between_process_rel"), f"{where}.between_process_rel"),
        between_run_rel=_optional_number(d.get("between_run_rel"), f"{where}.between_run_rel"),
        between_run_source=_text(d.get("between_run_source", ""), f"{where}.between_run_source"),
    )


def _provenance(value: Any, where: str) -> str:
    if value not in PROVENANCES:
        raise _Invalid(f"{where} = {_short(value)}, which must be one of {', '.join(PROVENANCES)}")
    return value


def _case(key: str, value: Any) -> CaseBaseline:
    where = f"cases[{key!r}]"
    d = _object(value, where, _names(CaseBaseline), _required(CaseBaseline))
    at = partial(_field, where)
    samples = _numbers(d["samples_ms"], at("samples_ms"))
    if not samples:
        raise _Invalid(f"{at('samples_ms')} = [], which must hold the case's samples")
    case = CaseBaseline(
        preset=_text(d["preset"], at("preset")),
        combo=_text(d["combo"], at("combo")),
        batch_size=_integer(d["batch_size"], at("batch_size")),
        provenance=_provenance(d["provenance"], at("provenance")),
        samples_ms=samples,
        median_ms=_number(d["median_ms"], at("median_ms")),
        iqr_ms=_number(d["iqr_ms"], at("iqr_ms")),
        min_ms=_number(d["min_ms"], at("min_ms")),
        peak_allocated_bytes=_optional_integer(d["peak_allocated_bytes"], at("peak_allocated_bytes")),
        peak_reserved_bytes=_optional_integer(d["peak_reserved_bytes"], at("peak_reserved_bytes")),
        energy_j_per_iter=_optional_number(d["energy_j_per_iter"], at("energy_j_per_iter")),
        energy_samples_j=_numbers(d["energy_samples_j"], at("energy_samples_j")),
        tflops=_number(d["tflops"], at("tflops")),
        environment=_mapping(d["environment"], at("environment")),
        tolerances=None if d.get("tolerances") is None else _tolerances(d["tolerances"], at("tolerances")),
        world_size=_integer(d.get("world_size", 1), at("world_size")),
        process_medians_ms=_numbers(d.get("process_medians_ms", []), at("process_medians_ms")),
        noise=Noise() if d.get("noise") is None else _noise(d["noise"], at("noise")),
        energy_method=_text(d.get("energy_method", ""), at("energy_method")),
        energy_quantisation=_optional_number(d.get("energy_quantisation"), at("energy_quantisation")),
        energy_replicates_j=_numbers(d.get("energy_replicates_j", []), at("energy_replicates_j")),
    )
    if str(case.key) != key:
        raise _Invalid(f"{where} describing {case.key}", f"name it {str(case.key)!r} or correct its fields")
    return case


def _expectation(i: int, value: Any, schema: str) -> Expectation:
    where = f"expectations[{i}]"
    d = _object(value, where, _names(Expectation), _required(Expectation))
    at = partial(_field, where)
    reference = d["reference"]
    if reference is None and schema != SCHEMA:
        raise _Invalid(
            f"{at('reference')} = null (an absolute bound) in a {schema} file",
            f'set "schema" to "{SCHEMA}", which reads it',
        )
    e = Expectation(
        preset=_text(d["preset"], at("preset")),
        metric=_text(d["metric"], at("metric")),
        combo=_text(d["combo"], at("combo")),
        reference=None if reference is None else _text(reference, at("reference")),
        provenance=_provenance(d["provenance"], at("provenance")),
        source=_text(d["source"], at("source")),
        max=_optional_number(d.get("max"), at("max")),
        min=_optional_number(d.get("min"), at("min")),
        world_size=_integer(d.get("world_size", 1), at("world_size")),
    )
    if e.max is None and e.min is None:
        raise _Invalid(f"{where} ({e.describe()}) with neither min nor max", "give it a bound, or remove it")
    return e


def _ncu(key: str, value: Any) -> NcuBaseline:
    where = f"ncu[{key!r}]"
    d = _object(value, where, _names(NcuBaseline), _names(NcuBaseline))
    at = partial(_field, where)
    entry = NcuBaseline(
        preset=_text(d["preset"], at("preset")),
        combo=_text(d["combo"], at("combo")),
        batch_size=_integer(d["batch_size"], at("batch_size")),
        provenance=_provenance(d["provenance"], at("provenance")),
        totals={str(k): _number(v, f"{at('totals')}.{k}") for k, v in _mapping(d["totals"], at("totals")).items()},
        ncu_version=_text(d["ncu_version"], at("ncu_version")),
        replay=_text(d["replay"], at("replay")),
        clock_control=_text(d["clock_control"], at("clock_control")),
        groups=[_text(g, f"{at('groups')}[{i}]") for i, g in enumerate(_list(d["groups"], at("groups")))],
        environment=_mapping(d["environment"], at("environment")),
    )
    if str(entry.key) != key:
        raise _Invalid(f"{where} describing {entry.key}", f"name it {str(entry.key)!r} or correct its fields")
    return entry


def _ratios(value: Any) -> dict[str, dict[str, dict[str, float]]]:
    """The saving run's interleaved ratios: ``{"preset/bN": {"combo/baseline": {"median": ..., ...}}}``."""
    table = {}
    for group, by_name in _mapping(value, "ratios").items():
        where = f"ratios[{group!r}]"
        table[group] = {
            name: {
                stat: _number(x, f"{where}[{name!r}].{stat}")
                for stat, x in _object(figures, f"{where}[{name!r}]", _RATIO_FIELDS).items()
            }
            for name, figures in _mapping(by_name, where).items()
        }
    return table


_TOP = ("schema", "arch", "description", "tolerances", "expectations", "cases", "ratios", "ncu", "sampling")


def _sampling(key: str, value: Any) -> SamplingBudget:
    where = f"sampling[{key!r}]"
    d = _object(value, where, _names(SamplingBudget), _required(SamplingBudget))
    at = partial(_field, where)
    budget = SamplingBudget(
        preset=_text(d["preset"], at("preset")),
        combo=_text(d["combo"], at("combo")),
        batch_size=_integer(d["batch_size"], at("batch_size")),
        budget_s=_number(d["budget_s"], at("budget_s")),
        provenance=_provenance(d["provenance"], at("provenance")),
        source=_text(d["source"], at("source")),
        measured_s=_numbers(d.get("measured_s", []), at("measured_s")),
    )
    if budget.key != key:
        raise _Invalid(f"{where} describing {budget.key}", f"name it {budget.key!r} or correct its fields")
    return budget


def _from_dict(data: dict[str, Any], schema: str) -> BaselineFile:
    """The file's document as read under ``schema`` (older versions only lack fields that have defaults)."""
    d = _object(data, "the file", _TOP, ("schema", "arch"))
    return BaselineFile(
        arch=_text(d["arch"], "arch"),
        description=_text(d.get("description", ""), "description"),
        tolerances=_tolerances(d.get("tolerances", {}), "tolerances"),
        expectations=tuple(
            _expectation(i, e, schema) for i, e in enumerate(_list(d.get("expectations", []), "expectations"))
        ),
        cases={k: _case(k, v) for k, v in _mapping(d.get("cases", {}), "cases").items()},
        ratios=_ratios(d.get("ratios", {})),
        ncu={k: _ncu(k, v) for k, v in _mapping(d.get("ncu", {}), "ncu").items()},
        sampling={k: _sampling(k, v) for k, v in _mapping(d.get("sampling", {}), "sampling").items()},
    )


# --- writing ---------------------------------------------------------------------------
def to_dict(baseline: BaselineFile) -> dict[str, Any]:
    """The JSON document of ``baseline`` (keys in a stable, reviewable order)."""
    cases = {}
    for key, case in baseline.cases.items():
        d = asdict(case)
        if d["tolerances"] is None:
            del d["tolerances"]
        cases[key] = d
    return {
        "schema": SCHEMA,
        "arch": baseline.arch,
        "description": baseline.description,
        "tolerances": asdict(baseline.tolerances),
        "expectations": [asdict(e) for e in baseline.expectations],
        "cases": cases,
        "ratios": baseline.ratios,
        "ncu": {key: asdict(entry) for key, entry in baseline.ncu.items()},
        "sampling": {key: asdict(entry) for key, entry in baseline.sampling.items()},
    }


_SCALAR_LIST = re.compile(r"\[\s*((?:-?[\d.eE+-]+|null|true|false)(?:,\s*(?:-?[\d.eE+-]+|null|true|false))*)\s*\]")


def dumps_reviewable(document: Any) -> str:
    """JSON indented for reading, with lists of numbers kept on one line."""
    text = json.dumps(document, indent=2)
    return _SCALAR_LIST.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text) + "\n"


def save_baseline(path: Path, baseline: BaselineFile) -> None:
    """Write ``baseline`` to ``path`` atomically: the old file or the new one, never a mix."""
    write_text_atomic(path, dumps_reviewable(to_dict(baseline)))


def update_baseline(
    path: Path, arch: str, change: Callable[[BaselineFile], BaselineFile], lock_timeout_s: float = 120.0
) -> BaselineFile:
    """Read, change and write ``path`` under an exclusive file lock; returns what was written.

    The file is read again inside the lock, not taken from the start of the session, so two
    runs saving the same architecture at once both keep their cases: the second one merges
    into what the first one wrote. ``change`` gets the current file (an empty one if there is
    none) and returns the new one.
    """
    lock = FileLock(str(path) + ".lock", timeout=lock_timeout_s)
    try:
        with lock:
            current = load_baseline(path, arch) or BaselineFile(arch=arch, description=f"Measured on {arch}.")
            updated = change(current)
            save_baseline(path, updated)
            return updated
    except Timeout:
        raise BaselineError(
            f"baseline file {path} stayed locked by another run for {lock_timeout_s:.0f} s; "
            f"wait for it to finish (or remove {lock.lock_file} if no run is saving) and save again"
        ) from None
