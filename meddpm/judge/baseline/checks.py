"""The figures of a baseline file that no verdict can use, refused by name before anything is measured."""

from __future__ import annotations

import math
import statistics

from meddpm.judge.baseline.model import BaselineFile, CaseKey, Expectation, NcuBaseline, StoredProfile, Tolerances
from meddpm.judge.baseline.reader import Invalid
from meddpm.measure.energy.counter import ENERGY_METHOD
from meddpm.measure.profiling.ncu_metrics import METRICS
from meddpm.model.config import PRESETS
from meddpm.run.combos import COMBOS

# Stored medians and samples are both rounded to 3 decimals, so they may disagree by up to 0.001 ms.
_ROUNDING_MS = 0.0011


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
        if case.profile is not None:
            _check_profile(f"{where}.profile", case.profile)
        for name, spread in case.counts.items():
            _require(0 <= spread.min <= spread.max, f"{where}.counts[{name!r}].min", spread.min, "0 or more, up to max")
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
    if e.reference == e.combo and e.metric != "scaling_efficiency":
        # A ratio of a combo to itself is 1 whatever is measured: the check can neither pass on merit nor fail.
        raise Invalid(
            f"{where}: a ratio of {e.combo} to itself, which is 1 whatever a run measures",
            "name the combo it is compared against as the reference, or remove the expectation",
        )
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
                raise Invalid(
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


def _check_profile(where: str, profile: StoredProfile) -> None:
    """Calls and bytes are counts and milliseconds are times: none below 0."""
    _require(0 < profile.floor < 1, f"{where}.floor", profile.floor, "a share above 0 and below 1")
    entries = [(f"rows[{i}]", r.calls, r.ms) for i, r in enumerate(profile.rows)]
    entries += [(f"folded[{i}]", f.calls, f.ms) for i, f in enumerate(profile.folded)]
    for at, calls, ms in entries:
        for p, (c, t) in enumerate(zip(calls, ms)):
            _require(c >= 0, f"{where}.{at}.calls[{p}]", c, "0 or more")
            _require(t >= 0, f"{where}.{at}.ms[{p}]", t, "0 or more")
    for i, f in enumerate(profile.folded):
        _require(f.rows >= 1, f"{where}.folded[{i}].rows", f.rows, "1 or more")
    for kind, held in profile.module_bytes.items():
        for p, value in enumerate(held):
            _require(value >= 0, f"{where}.module_bytes[{kind!r}][{p}]", value, "bytes, 0 or more")


def _check_tolerances(where: str, tol: Tolerances) -> None:
    for name in ("time_rel", "memory_rel", "energy_rel"):
        value = getattr(tol, name)
        _require(0 < value < 10, f"{where}.{name}", value, "a fraction above 0 and below 10 (0.05 = 5 %)")
    _require(0 < tol.alpha < 1, f"{where}.alpha", tol.alpha, "a significance level between 0 and 1")


def _require(ok: bool, field: str, value: object, rule: str) -> None:
    if not ok:
        raise ValueError(f"{field} = {value!r}, which must be {rule}")
