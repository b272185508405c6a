"""Per-architecture baseline files (``baselines/<arch>.json``): schema, loading and atomic saving.

Schema ``meddpm-baseline/2`` (documented in ``baselines/README.md``)::

    {
      "schema": "meddpm-baseline/2",
      "arch": "h200",
      "tolerances": {"time_rel": 0.05, "memory_rel": 0.02, "energy_rel": 0.10, "alpha": 0.01},
      "expectations": [{"preset": "paper", "metric": "time", "combo": "opt1", "reference": "baseline",
                        "max": 0.25, "min": null, "provenance": "measured", "source": "..."}],
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
keys in :mod:`meddpm.measure.ncu_metrics`); ``ncu`` keeps the measured per-iteration totals.

Version 2 added each case's per-process medians (the unit of its time verdict) and its measured
noise; a version-1 file is read as version 2 with neither (its cases are judged as before, by
rounds) and is written back as version 2 by the next save.

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

import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from meddpm.atomic import write_text_atomic
from meddpm.errors import UserError
from meddpm.measure.energy import ENERGY_METHOD, EnergyEstimate

SCHEMA = "meddpm-baseline/2"
OLD_SCHEMAS = ("meddpm-baseline/1",)  # read and upgraded in memory
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
    """A relative claim about one architecture: metric(combo) / metric(reference) within bounds.

    ``provenance`` is ``measured`` (follows this code's runs), ``paper`` (derived from the
    ICPE '26 paper) or ``target`` (a goal the team set, e.g. DDP scaling efficiency, not yet
    backed by a stored measurement). For ``metric: scaling_efficiency`` the ratio is the
    throughput at ``world_size`` GPUs over world_size x the throughput on one.
    """

    preset: str
    metric: str
    combo: str
    reference: str
    provenance: str
    source: str
    max: float | None = None
    min: float | None = None
    world_size: int = 1

    @property
    def ratio_name(self) -> str:
        if self.world_size > 1:
            return f"{self.combo}@{self.world_size}/{self.reference}@1"
        return f"{self.combo}/{self.reference}"

    def describe(self) -> str:
        """E.g. "time opt1/baseline <= 0.25 (paper)"."""
        low = f"{self.min:g} <= " if self.min is not None else ""
        high = f" <= {self.max:g}" if self.max is not None else ""
        return f"{self.metric} {low}{self.ratio_name}{high} ({self.provenance})"

    def holds(self, ratio: float) -> bool:
        """Whether a measured ratio lies within the bounds (NaN never does)."""
        return (self.max is None or ratio <= self.max) and (self.min is None or ratio >= self.min) and ratio == ratio


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
class BaselineFile:
    """Everything stored for one architecture."""

    arch: str
    tolerances: Tolerances = Tolerances()
    expectations: tuple[Expectation, ...] = ()
    cases: dict[str, CaseBaseline] = field(default_factory=dict)
    ratios: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    description: str = ""
    ncu: dict[str, NcuBaseline] = field(default_factory=dict)

    def case(self, key: CaseKey) -> CaseBaseline | None:
        """The stored case, or None."""
        return self.cases.get(str(key))

    def tolerances_for(self, key: CaseKey) -> Tolerances:
        """The case's own tolerances if it has them, else the file's."""
        stored = self.case(key)
        return stored.tolerances if stored and stored.tolerances else self.tolerances

    def expectations_for(
        self, preset: str, metric: str, combo: str, reference: str, world_size: int = 1
    ) -> list[Expectation]:
        """Expectations on ``metric`` of ``combo`` against ``reference`` for ``preset`` at ``world_size``."""
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
def load_baseline(path: Path, arch: str) -> BaselineFile | None:
    """The baseline file at ``path``, None if there is none, or a one-line BaselineError."""
    if not path.exists():
        return None
    fix = "restore it from version control or re-create it with --save-baseline"
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"cannot read baseline file {path}: {exc}; {fix}") from None
    except json.JSONDecodeError as exc:
        raise BaselineError(f"baseline file {path} is corrupt (not JSON: {exc}); {fix}") from None
    if isinstance(data, dict) and data.get("schema") in OLD_SCHEMAS:
        data = {**data, "schema": SCHEMA}  # version 2 only adds fields, each with a default
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise BaselineError(
            f"baseline file {path} has schema {found!r} but this suite reads {SCHEMA!r}; "
            "re-create it with --save-baseline (see baselines/README.md)"
        )
    try:
        loaded = _from_dict(data)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise BaselineError(f"baseline file {path} is malformed ({_describe(exc)}); {fix}") from None
    try:
        validate(loaded)
    except ValueError as exc:
        raise BaselineError(f"baseline file {path} has {exc}; {fix}") from None
    if loaded.arch != arch:
        raise BaselineError(f"baseline file {path} is for arch {loaded.arch!r}, not {arch!r}; rename or re-create it")
    return loaded


def validate(baseline: BaselineFile) -> None:
    """Raise ValueError naming the first stored figure no verdict can use (its field, value and rule).

    A NaN sample never compares as slower, a zero median divides by zero and a negative
    tolerance fails every case: each would turn into a silent pass or a nonsense verdict.
    """
    _check_tolerances("tolerances", baseline.tolerances)
    for key, case in baseline.cases.items():
        where = f"cases[{key!r}]"
        for i, sample in enumerate(case.samples_ms):
            _require(sample > 0 and math.isfinite(sample), f"{where}.samples_ms[{i}]", sample, "a finite time above 0")
        for name in ("median_ms", "min_ms"):
            value = getattr(case, name)
            _require(value > 0 and math.isfinite(value), f"{where}.{name}", value, "a finite time above 0")
        _require(case.iqr_ms >= 0 and math.isfinite(case.iqr_ms), f"{where}.iqr_ms", case.iqr_ms, "finite, 0 or more")
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
        where = f"expectation {e.ratio_name!r} ({e.metric})"
        for name in ("min", "max"):
            value = getattr(e, name)
            _require(value is None or math.isfinite(value), f"{where}.{name}", value, "a finite number")
        if e.min is not None and e.max is not None:
            _require(e.min <= e.max, f"{where}.min", e.min, f"at most max ({e.max})")
    for key, entry in baseline.ncu.items():
        for name, value in entry.totals.items():
            _require(value >= 0 and math.isfinite(value), f"ncu[{key!r}].totals.{name}", value, "finite, 0 or more")


def _check_tolerances(where: str, tol: Tolerances) -> None:
    for name in ("time_rel", "memory_rel", "energy_rel"):
        value = getattr(tol, name)
        _require(0 < value < 10, f"{where}.{name}", value, "a fraction above 0 and below 10 (0.05 = 5 %)")
    _require(0 < tol.alpha < 1, f"{where}.alpha", tol.alpha, "a significance level between 0 and 1")


def _require(ok: bool, field: str, value: object, rule: str) -> None:
    if not ok:
        raise ValueError(f"{field} = {value!r}, which must be {rule}")


def _describe(exc: Exception) -> str:
    return f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)


def _tolerances(data: dict[str, Any] | None) -> Tolerances | None:
    if data is None:
        return None
    unknown = set(data) - {f.name for f in fields(Tolerances)}
    if unknown:
        raise ValueError(f"unknown tolerance {sorted(unknown)[0]!r}")
    return Tolerances(**{k: float(v) for k, v in data.items()})


def _noise(data: dict[str, Any] | None) -> Noise:
    if data is None:
        return Noise()
    unknown = set(data) - {f.name for f in fields(Noise)}
    if unknown:
        raise ValueError(f"unknown noise field {sorted(unknown)[0]!r}")
    rel = {k: None if data.get(k) is None else float(data[k]) for k in ("between_process_rel", "between_run_rel")}
    return Noise(**rel, between_run_source=str(data.get("between_run_source", "")))


def _provenance(value: str, where: str) -> str:
    if value not in PROVENANCES:
        raise ValueError(f"{where} has provenance {value!r}, expected one of {', '.join(PROVENANCES)}")
    return value


def _case(key: str, d: dict[str, Any]) -> CaseBaseline:
    samples = [float(x) for x in d["samples_ms"]]
    if not samples:
        raise ValueError(f"case {key!r} has no samples")
    case = CaseBaseline(
        preset=str(d["preset"]),
        combo=str(d["combo"]),
        batch_size=int(d["batch_size"]),
        provenance=_provenance(d["provenance"], f"case {key!r}"),
        samples_ms=samples,
        median_ms=float(d["median_ms"]),
        iqr_ms=float(d["iqr_ms"]),
        min_ms=float(d["min_ms"]),
        peak_allocated_bytes=d["peak_allocated_bytes"],
        peak_reserved_bytes=d["peak_reserved_bytes"],
        energy_j_per_iter=d["energy_j_per_iter"],
        energy_samples_j=[float(x) for x in d["energy_samples_j"]],
        tflops=float(d["tflops"]),
        environment=dict(d["environment"]),
        tolerances=_tolerances(d.get("tolerances")),
        world_size=int(d.get("world_size", 1)),
        process_medians_ms=[float(x) for x in d.get("process_medians_ms", [])],
        noise=_noise(d.get("noise")),
        energy_method=str(d.get("energy_method", "")),
        energy_quantisation=None if d.get("energy_quantisation") is None else float(d["energy_quantisation"]),
        energy_replicates_j=[float(x) for x in d.get("energy_replicates_j", [])],
    )
    if str(case.key) != key:
        raise ValueError(f"case {key!r} describes {case.key}")
    return case


def _expectation(d: dict[str, Any]) -> Expectation:
    e = Expectation(
        preset=str(d["preset"]),
        metric=str(d["metric"]),
        combo=str(d["combo"]),
        reference=str(d["reference"]),
        provenance=_provenance(d["provenance"], f"expectation {d['combo']}/{d['reference']}"),
        source=str(d["source"]),
        max=None if d.get("max") is None else float(d["max"]),
        min=None if d.get("min") is None else float(d["min"]),
        world_size=int(d.get("world_size", 1)),
    )
    if e.max is None and e.min is None:
        raise ValueError(f"expectation {e.ratio_name} has neither min nor max")
    return e


def _ncu(key: str, d: dict[str, Any]) -> NcuBaseline:
    entry = NcuBaseline(
        preset=str(d["preset"]),
        combo=str(d["combo"]),
        batch_size=int(d["batch_size"]),
        provenance=_provenance(d["provenance"], f"ncu entry {key!r}"),
        totals={str(k): float(v) for k, v in dict(d["totals"]).items()},
        ncu_version=str(d["ncu_version"]),
        replay=str(d["replay"]),
        clock_control=str(d["clock_control"]),
        groups=[str(g) for g in d["groups"]],
        environment=dict(d["environment"]),
    )
    if str(entry.key) != key:
        raise ValueError(f"ncu entry {key!r} describes {entry.key}")
    return entry


def _from_dict(data: dict[str, Any]) -> BaselineFile:
    return BaselineFile(
        arch=str(data["arch"]),
        description=str(data.get("description", "")),
        tolerances=_tolerances(data.get("tolerances", {})) or Tolerances(),
        expectations=tuple(_expectation(e) for e in data.get("expectations", [])),
        cases={k: _case(k, v) for k, v in data.get("cases", {}).items()},
        ratios=data.get("ratios", {}),
        ncu={k: _ncu(k, v) for k, v in data.get("ncu", {}).items()},
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
