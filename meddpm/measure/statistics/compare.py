"""Comparing two sets of per-process medians: the ratio, its interval, a test and what it could see.

The unit here is a *process*: each one builds its own CUDA context and cuDNN plans and compiles with Inductor
anew, so its median iteration time carries the noise that rounds inside one process never show
(docs/statistics.md, "The unit is the process"). Process medians of one machine are compared on the log scale,
where a slowdown is a shift: Welch's t-test (no equal-variance assumption; process medians are means of many
rounds, so close to normal), its confidence interval turned back into a ratio, and the minimum detectable effect
that this many processes with this much spread can resolve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# A slowdown has to clear this multiple of the measured between-process spread, and this floor,
# before it counts: significance alone would flag harmless 0.2 % shifts on very quiet cards.
# Both were chosen by simulating A/B runs from the measured noise, for few false alarms and most 1 %
# slowdowns found (docs/statistics.md, "Why these thresholds").
NOISE_MULTIPLE = 2.0
THRESHOLD_FLOOR = 0.006


@dataclass(frozen=True)
class Comparison:
    """Candidate against reference, from per-process medians (ms)."""

    candidate_ms: tuple[float, ...]
    reference_ms: tuple[float, ...]
    ratio: float  # geometric-mean ratio candidate / reference
    ci_low: float  # confidence interval of the ratio (nan with fewer than two processes a side)
    ci_high: float
    p_slower: float  # one-sided p-value of "candidate is slower" (nan when untestable)
    mde: float  # smallest relative slowdown this run detects with the set power (inf when untestable)
    confidence: float

    @property
    def change(self) -> float:
        """Relative change, ratio - 1 (0.01 = 1 % slower)."""
        return self.ratio - 1

    @property
    def testable(self) -> bool:
        """Whether both sides have the two processes a spread needs."""
        return math.isfinite(self.p_slower)

    def as_dict(self) -> dict[str, object]:
        """Fields and the change, for JSON."""
        return {
            "candidate_ms": list(self.candidate_ms),
            "reference_ms": list(self.reference_ms),
            "ratio": self.ratio,
            "change": self.change,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "confidence": self.confidence,
            "p_slower": self.p_slower,
            "mde": self.mde,
        }


def compare_processes(
    candidate_ms: Sequence[float],
    reference_ms: Sequence[float],
    *,
    alpha: float = 0.01,
    power: float = 0.8,
    confidence: float = 0.95,
) -> Comparison:
    """Compare per-process medians; ``alpha`` and ``power`` set the minimum detectable effect."""
    if not candidate_ms or not reference_ms:
        raise ValueError("both sides need at least one process median")
    a, b = np.log(np.asarray(candidate_ms, float)), np.log(np.asarray(reference_ms, float))
    ratio = math.exp(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        nan = float("nan")
        return Comparison(tuple(candidate_ms), tuple(reference_ms), ratio, nan, nan, nan, math.inf, confidence)
    var_a, var_b = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(var_a + var_b)
    if se == 0:  # identical medians on each side: any difference is exact
        p = 0.0 if ratio > 1 else 1.0
        return Comparison(tuple(candidate_ms), tuple(reference_ms), ratio, ratio, ratio, p, 0.0, confidence)
    # Welch-Satterthwaite degrees of freedom.
    df = (var_a + var_b) ** 2 / (var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))
    diff = a.mean() - b.mean()
    from scipy import stats  # here, not above: its import (1-1.6 s) would delay every bench and suite start

    p = float(stats.t.sf(diff / se, df))
    half = stats.t.ppf(0.5 + confidence / 2, df) * se
    mde = math.expm1((stats.t.ppf(1 - alpha, df) + stats.t.ppf(power, df)) * se)
    return Comparison(
        tuple(candidate_ms),
        tuple(reference_ms),
        ratio,
        math.exp(diff - half),
        math.exp(diff + half),
        p,
        mde,
        confidence,
    )


def between_process_spread(medians_ms: Sequence[float]) -> float | None:
    """Relative standard deviation of process medians (std of their logs); None with fewer than two."""
    if len(medians_ms) < 2:
        return None
    return float(np.std(np.log(np.asarray(medians_ms, float)), ddof=1))


def noise_threshold(spread: float | None, fallback: float) -> float:
    """The smallest slowdown that counts: a multiple of the measured spread, at least the floor.

    Without a measured spread (one process, or an old baseline) the ``fallback`` tolerance applies.
    """
    if spread is None:
        return fallback
    return max(THRESHOLD_FLOOR, NOISE_MULTIPLE * spread)


def detectable_change(candidate_ms: Sequence[float], reference_ms: Sequence[float], alpha: float = 0.01) -> float:
    """The smallest relative slowdown an A/B of these process medians can flag: the larger of its noise threshold
    and its minimum detectable effect (inf with fewer than two processes a side), as the A/B verdict reports it."""
    spread = pooled_spread(candidate_ms, reference_ms)
    if spread is None or min(len(candidate_ms), len(reference_ms)) < 2:
        return math.inf
    mde = compare_processes(candidate_ms, reference_ms, alpha=alpha).mde
    return max(noise_threshold(spread, fallback=math.inf), mde)


def pooled_spread(*sides: Sequence[float]) -> float | None:
    """Between-process spread pooled over several sides (each around its own mean); None if none has two."""
    logs = [np.log(np.asarray(side, float)) for side in sides if len(side) >= 2]
    if not logs:
        return None
    squares = sum(float(((x - x.mean()) ** 2).sum()) for x in logs)
    return math.sqrt(squares / sum(len(x) - 1 for x in logs))
