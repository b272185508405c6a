"""Verdicts: is a measurement worse than its baseline, or outside an architecture's expectation?

A time or energy regression needs two things: the median grew by more than a threshold *and*
a test says it is real (p below alpha). Either alone is not enough: a 1 % shift can be
significant yet harmless, and a 10 % shift of two noisy runs can be luck. Peak memory is
deterministic enough for a plain tolerance.

The test's unit is what varies independently. Where both sides were measured in several
processes, the unit is the process median (Welch's t-test on their logs, see
:mod:`meddpm.measure.statistics.compare`), and the threshold follows from measured noise: between
processes for an A/B run on one machine, between runs (machine starts) for a comparison with
a stored baseline. Where either side has one process only, the rounds are the unit (one-sided
Mann-Whitney U) and the stored tolerance the threshold, as before process-level replication.

Energy is judged only where the measurement can resolve its threshold: the resolution (both
sides' counter bounds plus their spreads, :func:`meddpm.measure.energy.counter.resolution`) must be
below it; otherwise the verdict says "not judged" and why. A baseline whose energy came from the
old single-iteration reads of the counter (0 J for short iterations) is "not comparable".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from meddpm.judge.baseline import CaseBaseline, Expectation, Tolerances
from meddpm.measure.energy.counter import EnergyEstimate, resolution
from meddpm.measure.statistics.compare import (
    NOISE_MULTIPLE,
    Comparison,
    compare_processes,
    noise_threshold,
    pooled_spread,
)

SAVE_HINT = "if the change is intended, re-run with --save-baseline"
# The units of the counts (meddpm.judge.counts): an A/B line gives their change in the unit as well.
COUNT_UNITS = ("launches", "bytes", "FLOPs")
# A process-level change that is significant but not beyond the threshold: reported, never failed.
SLOWER_UNDER_THRESHOLD = "slower under threshold"
FASTER_UNDER_THRESHOLD = "faster under threshold"
UNDER_THRESHOLD = (SLOWER_UNDER_THRESHOLD, FASTER_UNDER_THRESHOLD)
# The memory verdicts' metrics, each with the peak it judges (ComboResult.peak_<kind>_bytes).
MEMORY_METRICS = {"peak memory": "allocated", "peak reserved": "reserved"}


@dataclass(frozen=True)
class Verdict:
    """The outcome of comparing one metric of one case (or one ratio) with what is stored."""

    subject: str  # a case key ("paper/opt1/b1") or an expectation ("paper time opt1/baseline")
    metric: str
    # "regression", "improvement", "unchanged", "underpowered", "not measured", "violated", "holds",
    # SLOWER_UNDER_THRESHOLD and FASTER_UNDER_THRESHOLD (process medians: significant, within the threshold),
    # "cannot judge" (an expectation's ratio over a reference of 0, or not a finite number),
    # "no budget" (a sampling case with no budget to guard it),
    # and for energy "not judged" (resolution above the threshold) and "not comparable" (an old baseline)
    outcome: str
    baseline: float | None
    now: float | None
    unit: str
    tolerance: float | None = None
    p_value: float | None = None
    comparison: Comparison | None = None  # process-level verdicts: ratio, interval, detectable effect
    resolution: float | None = None  # energy: the smallest relative change the two figures can tell apart
    # An A/B verdict: the short names of side A (``now``) and side B (``baseline``), defined once per run
    # (:func:`meddpm.measure.processes.sides.legend`); None against a stored baseline.
    sides: tuple[str, str] | None = None
    # The earlier run whose figure ``baseline`` is, where an A/B's side B took it rather than measuring it ("run #7":
    # a nightly's energy, meddpm.measure.campaign.result.CarriedEnergy); None where side B measured it.
    reference_source: str | None = None

    @property
    def detectable(self) -> float | None:
        """The smallest relative slowdown this verdict could have flagged (threshold or test power)."""
        if self.comparison is None:
            return self.tolerance
        return max(self.tolerance or 0.0, self.comparison.mde)

    @property
    def failed(self) -> bool:
        """Whether this verdict fails the test."""
        return self.outcome in ("regression", "violated", "cannot judge")

    @property
    def change(self) -> float | None:
        """Relative change now / baseline - 1."""
        if self.baseline is None or self.now is None or self.baseline == 0:
            return None
        return self.now / self.baseline - 1

    def figures(self) -> dict[str, object]:
        """The verdict's outcome and figures, for results files (``baseline``: the stored case's, or side B's)."""
        return {
            "metric": self.metric,
            "outcome": self.outcome,
            "unit": self.unit,
            "baseline": self.baseline,
            "now": self.now,
            "change": self.change,
            "threshold": self.tolerance,
            "resolution": self.resolution,
            "reference_source": self.reference_source,
        }

    def message(self) -> str:
        """One line naming the subject, metric, both values, the change, the p-value and the fix."""
        if self.outcome in ("violated", "holds"):
            return f"{self.subject}: measured {self.now:.3f}, expected {self.metric}"
        if self.outcome == "cannot judge" and self.baseline == 0:
            return (
                f"{self.subject}: cannot judge {self.metric}: reference is 0 (measured {self.now:g} over 0); "
                'state the claim as an absolute bound ("reference": null) in the baseline file'
            )
        if self.outcome == "no budget":
            return (
                f"{self.subject}: no sampling budget, so nothing guards it; measure it on this GPU and add a budget "
                "to the baseline file's sampling (docs/baselines.md)"
            )
        if self.outcome == "cannot judge":
            return f"{self.subject}: cannot judge {self.metric}: measured {self.now}, not a finite number"
        if self.sides is not None:
            a, b = self.sides
            return self._ab_message(a, f"{b} as {self.reference_source} measured it" if self.reference_source else b)
        if self.outcome == "not measured":
            return f"{self.subject} {self.metric} not measured (baseline {self.baseline}, now {self.now})"
        values = f"baseline {self.baseline:.4g} {self.unit}, now {self.now:.4g} {self.unit}"
        if self.outcome == "not comparable":
            return (
                f"{self.subject} {self.metric} not comparable: the baseline's {self.baseline:.4g} {self.unit} came "
                "from single-iteration reads of the energy counter (0 J for short iterations); re-save with "
                "--save-baseline"
            )
        if self.outcome == "not judged":
            return (
                f"{self.subject} {self.metric} not judged: resolution {self.resolution:.1%} exceeds threshold "
                f"{self.tolerance:.0%} ({values})"
            )
        if self.resolution is not None:
            values += f", resolution {self.resolution:.1%}"
        change = f"{self.change:+.1%}" if self.change is not None else "n/a"
        tolerance = f", tolerance {self.tolerance:.0%}" if self.tolerance is not None else ""
        p = f", p={self.p_value:.2g}" if self.p_value is not None else ""
        c = self.comparison
        if c is not None:
            processes = f"{len(c.candidate_ms)} vs {len(c.reference_ms)} processes"
            interval = f"ratio {c.ratio:.4f} [{c.ci_low:.4f}, {c.ci_high:.4f}]"
            detectable = f"detectable >= {self.detectable:.1%}"
            change = f"{interval}, {processes}, threshold {self.tolerance:.1%}, {detectable}"
            tolerance = ""
        line = f"{self.subject} {self.metric} {self.outcome}: {values} ({change}{tolerance}{p})"
        if self.outcome == "regression":
            line += f"; {SAVE_HINT}"
        elif self.outcome == "improvement":
            line += "; re-run with --save-baseline to keep it"
        return line + self._outcome_note()

    def _outcome_note(self) -> str:
        """What an outcome under the threshold, or without the power to judge, means; "" for the others."""
        c = self.comparison
        if self.outcome in UNDER_THRESHOLD and c is not None:
            direction = "slower" if self.outcome == SLOWER_UNDER_THRESHOLD else "faster"
            return (
                f"; {direction} by {abs(c.change):.2%}, significant, under the {self.tolerance:.1%} threshold: "
                "reported, not failed"
            )
        if self.outcome == "underpowered":
            more = "--perf-processes" if c is not None else "--perf-min-rounds"
            return f"; too few for significance at this alpha: raise {more}"
        return ""

    def _ab_message(self, a: str, b: str) -> str:
        """An A/B verdict's line: side B's figure, then side A's, each by its short name ("main 178.4 ms, this tree
        181.0 ms"), the change (a count's also in its own unit), and no baseline advice: no baseline is judged."""
        if self.outcome == "not measured":
            return (
                f"{self.subject} {self.metric} not measured ({b} {_figure(self.baseline, self.unit)}, "
                f"{a} {_figure(self.now, self.unit)})"
            )
        values = f"{b} {_figure(self.baseline, self.unit)} {self.unit}, {a} {_figure(self.now, self.unit)} {self.unit}"
        if self.outcome == "not judged":
            return (
                f"{self.subject} {self.metric} not judged: resolution {self.resolution:.1%} exceeds threshold "
                f"{self.tolerance:.0%} ({values})"
            )
        figures = [] if self.change is None else [f"{self.change:+.1%}"]
        c = self.comparison
        if self.unit in COUNT_UNITS:  # judged against B's range over its processes, not a threshold
            if self.baseline is not None and self.now is not None:
                figures.insert(0, f"{self.now - self.baseline:+,.0f} {self.unit}")
            if self.outcome in ("regression", "improvement"):
                slack = f" by more than {self.tolerance:.1%}" if self.tolerance else ""
                figures.append(f"outside {b}'s range over its processes{slack}")
        elif c is not None:
            figures = [
                f"ratio {c.ratio:.4f} [{c.ci_low:.4f}, {c.ci_high:.4f}]",
                f"{len(c.candidate_ms)} vs {len(c.reference_ms)} processes",
                f"threshold {self.tolerance:.1%}",
                f"detectable >= {self.detectable:.1%}",
            ]
        elif self.tolerance is not None:
            figures.append(f"threshold {self.tolerance:.1%}")
        if self.resolution is not None:
            figures.append(f"resolution {self.resolution:.1%}")
        if self.p_value is not None:
            figures.append(f"p={self.p_value:.2g}")
        return f"{self.subject} {self.metric} {self.outcome}: {values} ({', '.join(figures)}){self._outcome_note()}"


def _figure(value: float | None, unit: str) -> str:
    """A count in full ("4,200,123,456"); else four significant figures, trailing zeros kept ("181.0", "13.77")."""
    if value is None:
        return "n/a"
    if unit in COUNT_UNITS:
        return f"{value:,.0f}"
    return format(value, "#.4g").rstrip(".")


def min_p_value(n: int, m: int) -> float:
    """The smallest one-sided Mann-Whitney p-value that n and m samples can give."""
    return 1 / math.comb(n + m, n)


def judge_samples(
    subject: str, metric: str, now: Sequence[float], baseline: Sequence[float], rel: float, alpha: float, unit: str
) -> Verdict:
    """Regression or improvement of a median, only if larger than ``rel`` *and* significant.

    Significance is a one-sided Mann-Whitney U test on the raw samples, in the direction the
    median moved. With too few samples to ever reach ``alpha``, the verdict says so.
    """
    if len(now) == 0 or len(baseline) == 0:
        return Verdict(subject, metric, "not measured", _median(baseline), _median(now), unit, rel)
    now_median, base_median = float(np.median(now)), float(np.median(baseline))
    if not base_median > 0:  # no relative change from 0
        return Verdict(subject, metric, "not measured", base_median, now_median, unit, rel)
    worse = now_median > base_median
    from scipy.stats import mannwhitneyu  # here, not above: its import (1-1.6 s) would delay every start

    p = float(mannwhitneyu(now, baseline, alternative="greater" if worse else "less").pvalue)
    if abs(now_median / base_median - 1) <= rel:
        outcome = "unchanged"
    elif min_p_value(len(now), len(baseline)) > alpha:
        outcome = "underpowered"
    elif p < alpha:
        outcome = "regression" if worse else "improvement"
    else:
        outcome = "unchanged"
    return Verdict(subject, metric, outcome, base_median, now_median, unit, rel, p)


def judge_processes(
    subject: str, metric: str, comparison: Comparison, threshold: float, alpha: float, unit: str = "ms"
) -> Verdict:
    """Regression or improvement of process medians: beyond ``threshold`` and significant at ``alpha``.

    A significant change within the threshold is its own outcome (slower or faster "under threshold"):
    real by the test, too small to fail, and worth a line, since a few of them in a row add up.
    """
    c = comparison
    now, base = float(np.median(c.candidate_ms)), float(np.median(c.reference_ms))
    slower, faster = c.change > 0 and c.p_slower < alpha, c.change < 0 and 1 - c.p_slower < alpha
    if not c.testable:
        outcome = "underpowered"
    elif slower:
        outcome = "regression" if c.change > threshold else SLOWER_UNDER_THRESHOLD
    elif faster:
        outcome = "improvement" if -c.change > threshold else FASTER_UNDER_THRESHOLD
    else:
        outcome = "unchanged"
    p = c.p_slower if c.change >= 0 else 1 - c.p_slower
    return Verdict(subject, metric, outcome, base, now, unit, threshold, p, c)


def judge_ab(subject: str, candidate_ms: Sequence[float], reference_ms: Sequence[float], tol: Tolerances) -> Verdict:
    """The A/B time verdict of process medians measured side by side on one machine.

    The threshold follows from this run's own between-process spread (both sides pooled),
    else from the stored tolerance.
    """
    comparison = compare_processes(candidate_ms, reference_ms, alpha=tol.alpha)
    threshold = noise_threshold(pooled_spread(candidate_ms, reference_ms), fallback=tol.time_rel)
    return judge_processes(subject, "time", comparison, threshold, tol.alpha)


def judge_memory_ab(
    subject: str, metric: str, candidate_bytes: Sequence[int], reference_bytes: Sequence[int], tol: Tolerances
) -> Verdict:
    """An A/B verdict on one side's per-process peak memory against the other's, by the time verdict's rules.

    The threshold is the case's memory tolerance or the multiple of the peaks' own between-process spread that a
    time change must clear, whichever is larger; with two processes a side the growth must also be significant
    (Welch's test on the process peaks; identical peaks a side make any difference exact). With one process on
    either side there is no spread to test against, and peaks, unlike times, repeat from process to process, so
    the tolerance alone decides, as it does against a stored baseline.
    """
    gib = 2**30
    peaks = [*candidate_bytes, *reference_bytes]
    if not candidate_bytes or not reference_bytes or not all(math.isfinite(b) and b >= 0 for b in peaks):
        # A side that read no peak, or a figure that is no count of bytes (NaN, inf, negative), judges nothing.
        return Verdict(subject, metric, "not measured", _gib(reference_bytes), _gib(candidate_bytes), "GiB")
    now, base = float(np.median(candidate_bytes)) / gib, float(np.median(reference_bytes)) / gib
    if base == 0:  # no relative change from 0: any peak above it grew beyond every tolerance
        outcome = "regression" if now > 0 else "unchanged"
        return Verdict(subject, metric, outcome, base, now, "GiB", tol.memory_rel)
    spread = pooled_spread(candidate_bytes, reference_bytes) if min(peaks) > 0 else None
    threshold = tol.memory_rel if spread is None else max(tol.memory_rel, NOISE_MULTIPLE * spread)
    change = now / base - 1
    p = None
    if min(len(candidate_bytes), len(reference_bytes)) >= 2 and min(peaks) > 0:
        c = compare_processes(candidate_bytes, reference_bytes, alpha=tol.alpha)
        p = c.p_slower if change >= 0 else 1 - c.p_slower
    significant = p is None or p < tol.alpha
    if change > threshold and significant:
        outcome = "regression"
    elif change < -threshold and significant:
        outcome = "improvement"
    else:
        outcome = "unchanged"
    return Verdict(subject, metric, outcome, base, now, "GiB", threshold, p)


def _gib(peaks: Sequence[int]) -> float | None:
    return float(np.median(peaks)) / 2**30 if len(peaks) else None


def _median(samples: Sequence[float]) -> float | None:
    return float(np.median(samples)) if len(samples) else None


def judge_ceiling(
    subject: str, metric: str, now: float | None, baseline: float | None, rel: float, unit: str
) -> Verdict:
    """Regression if ``now`` exceeds the baseline by more than ``rel``; improvement if below by as much."""
    if now is None or baseline is None:
        return Verdict(subject, metric, "not measured", baseline, now, unit, rel)
    if now > baseline * (1 + rel):
        outcome = "regression"
    elif now < baseline * (1 - rel):
        outcome = "improvement"
    else:
        outcome = "unchanged"
    return Verdict(subject, metric, outcome, baseline, now, unit, rel)


def judge_energy(
    subject: str, now: EnergyEstimate | None, stored: CaseBaseline, threshold: float, unit: str = "J/iter"
) -> Verdict:
    """Regression or improvement of energy per iteration beyond ``threshold``, where the resolution allows.

    With the resolution below the threshold, a change beyond the threshold is also beyond what
    the counter's steps and the run's spread can produce, so no test is needed on top.
    """
    if stored.energy is None and stored.energy_j_per_iter and not stored.energy_method:
        return Verdict(subject, "energy", "not comparable", stored.energy_j_per_iter, _value(now), unit, threshold)
    return judge_energy_change(subject, now, stored.energy, threshold, unit)


def judge_energy_change(
    subject: str, now: EnergyEstimate | None, base: EnergyEstimate | None, threshold: float, unit: str = "J/iter"
) -> Verdict:
    """Energy per iteration ``now`` against ``base`` (a stored case's, or side B's in an A/B run): regression or
    improvement beyond ``threshold`` where the resolution of the two is below it."""
    if now is None or base is None:
        return Verdict(subject, "energy", "not measured", _value(base), _value(now), unit, threshold)
    res = resolution(now, base)
    change = now.j_per_iter / base.j_per_iter - 1
    if not res < threshold:
        outcome = "not judged"
    elif change > threshold:
        outcome = "regression"
    elif change < -threshold:
        outcome = "improvement"
    else:
        outcome = "unchanged"
    return Verdict(subject, "energy", outcome, base.j_per_iter, now.j_per_iter, unit, threshold, resolution=res)


def _value(estimate: EnergyEstimate | None) -> float | None:
    return None if estimate is None else estimate.j_per_iter


def judge_case(
    subject: str,
    samples_ms: Sequence[float],
    peak_allocated_bytes: int | None,
    energy: EnergyEstimate | None,
    stored: CaseBaseline,
    tol: Tolerances,
    process_medians_ms: Sequence[float] = (),
) -> list[Verdict]:
    """Time, peak memory and energy verdicts of one case against its stored baseline."""
    gib = 2**30
    if len(process_medians_ms) >= 2 and len(stored.process_medians_ms) >= 2:
        # Between machine starts the whole run moves at once: that spread, not the processes', sets the bar.
        threshold = noise_threshold(stored.noise.between_run_rel, fallback=tol.time_rel)
        comparison = compare_processes(process_medians_ms, stored.process_medians_ms, alpha=tol.alpha)
        time = judge_processes(subject, "time", comparison, threshold, tol.alpha)
    else:
        time = judge_samples(subject, "time", samples_ms, stored.samples_ms, tol.time_rel, tol.alpha, "ms")
    return [
        time,
        judge_ceiling(
            subject,
            "peak memory",
            None if peak_allocated_bytes is None else peak_allocated_bytes / gib,
            None if stored.peak_allocated_bytes is None else stored.peak_allocated_bytes / gib,
            tol.memory_rel,
            "GiB",
        ),
        judge_energy(subject, energy, stored, tol.energy_rel),
    ]


def judge_expectation(expectation: Expectation, ratio: float) -> Verdict:
    """Whether a measured ratio (e.g. opt1 time / baseline time), or an absolute figure, meets the expectation.

    A value that is not finite (a ratio over 0, a NaN) cannot be judged, and fails: a bound that
    an infinity "holds" would pass whatever was measured.
    """
    return Verdict(
        subject=f"{expectation.preset} {expectation.metric} {expectation.ratio_name}",
        metric=expectation.describe(),
        outcome=("holds" if expectation.holds(ratio) else "violated") if math.isfinite(ratio) else "cannot judge",
        baseline=None,
        now=ratio,
        unit="x",
    )


def judge_figures(expectation: Expectation, figure: float, reference_figure: float | None) -> Verdict:
    """An expectation judged from the combo's own figure and its reference's (None for an absolute bound).

    The ratio is taken here, so a reference of 0 is "cannot judge" (and fails) instead of an
    infinite ratio that every lower bound would let pass.
    """
    if expectation.reference is None:
        return judge_expectation(expectation, figure)
    if reference_figure is None:
        raise ValueError(f"{expectation.describe()} needs the reference's figure")
    if reference_figure == 0:
        return replace(judge_expectation(expectation, math.inf), baseline=0.0, now=figure)
    return judge_expectation(expectation, figure / reference_figure)
