"""Verdicts: is a measurement worse than its baseline, or outside an architecture's expectation?

A time or energy regression needs two things: the median grew by more than the tolerance
*and* the raw samples say it is real (one-sided Mann-Whitney U, p below alpha). Either alone
is not enough: a 1 % shift can be significant yet harmless, and a 10 % shift of two noisy
runs can be luck. Peak memory is deterministic enough for a plain tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import mannwhitneyu

from meddpm.suite.baseline import CaseBaseline, Expectation, Tolerances

SAVE_HINT = "if the change is intended, re-run with --save-baseline"


@dataclass(frozen=True)
class Verdict:
    """The outcome of comparing one metric of one case (or one ratio) with what is stored."""

    subject: str  # a case key ("paper/opt1/b1") or an expectation ("paper time opt1/baseline")
    metric: str
    # "regression", "improvement", "unchanged", "underpowered", "not measured", "violated", "holds"
    outcome: str
    baseline: float | None
    now: float | None
    unit: str
    tolerance: float | None = None
    p_value: float | None = None

    @property
    def failed(self) -> bool:
        """Whether this verdict fails the test."""
        return self.outcome in ("regression", "violated")

    @property
    def change(self) -> float | None:
        """Relative change now / baseline - 1."""
        if self.baseline is None or self.now is None or self.baseline == 0:
            return None
        return self.now / self.baseline - 1

    def message(self) -> str:
        """One line naming the subject, metric, both values, the change, the p-value and the fix."""
        if self.outcome in ("violated", "holds"):
            return f"{self.subject}: measured {self.now:.3f}, expected {self.metric}"
        if self.outcome == "not measured":
            return f"{self.subject} {self.metric} not measured (baseline {self.baseline}, now {self.now})"
        values = f"baseline {self.baseline:.4g} {self.unit}, now {self.now:.4g} {self.unit}"
        change = f"{self.change:+.1%}" if self.change is not None else "n/a"
        tolerance = f", tolerance {self.tolerance:.0%}" if self.tolerance is not None else ""
        p = f", p={self.p_value:.2g}" if self.p_value is not None else ""
        line = f"{self.subject} {self.metric} {self.outcome}: {values} ({change}{tolerance}{p})"
        if self.outcome == "regression":
            line += f"; {SAVE_HINT}"
        elif self.outcome == "improvement":
            line += "; re-run with --save-baseline to keep it"
        elif self.outcome == "underpowered":
            line += "; too few rounds for significance at this alpha: raise --perf-min-rounds"
        return line


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
    worse = now_median > base_median
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


def judge_case(
    subject: str,
    samples_ms: Sequence[float],
    peak_allocated_bytes: int | None,
    energy_samples_j: Sequence[float],
    stored: CaseBaseline,
    tol: Tolerances,
) -> list[Verdict]:
    """Time, peak memory and energy verdicts of one case against its stored baseline.

    Energy per iteration comes from a counter that updates coarsely, so single iterations
    scatter widely; like time, it must move significantly as well as beyond its tolerance.
    """
    gib = 2**30
    return [
        judge_samples(subject, "time", samples_ms, stored.samples_ms, tol.time_rel, tol.alpha, "ms"),
        judge_ceiling(
            subject,
            "peak memory",
            None if peak_allocated_bytes is None else peak_allocated_bytes / gib,
            None if stored.peak_allocated_bytes is None else stored.peak_allocated_bytes / gib,
            tol.memory_rel,
            "GiB",
        ),
        judge_samples(
            subject, "energy", energy_samples_j, stored.energy_samples_j, tol.energy_rel, tol.alpha, "J/iter"
        ),
    ]


def judge_expectation(expectation: Expectation, ratio: float) -> Verdict:
    """Whether a measured ratio (e.g. opt1 time / baseline time) meets the expectation."""
    return Verdict(
        subject=f"{expectation.preset} {expectation.metric} {expectation.ratio_name}",
        metric=expectation.describe(),
        outcome="holds" if expectation.holds(ratio) else "violated",
        baseline=None,
        now=ratio,
        unit="x",
    )
