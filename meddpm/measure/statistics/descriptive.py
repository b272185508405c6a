"""Summary statistics of timing samples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Stats:
    """Derived values of a list of per-iteration times (milliseconds)."""

    median: float
    q1: float
    q3: float
    min: float
    max: float
    mean: float
    rounds: int

    @classmethod
    def from_samples(cls, samples: Sequence[float]) -> Stats:
        """Statistics of ``samples``; raises ValueError for an empty list."""
        if len(samples) == 0:
            raise ValueError("no samples")
        a = np.asarray(samples, dtype=float)
        q1, median, q3 = np.percentile(a, [25, 50, 75])
        return cls(float(median), float(q1), float(q3), float(a.min()), float(a.max()), float(a.mean()), len(a))

    @property
    def iqr(self) -> float:
        """Interquartile range, the spread that outliers barely move."""
        return self.q3 - self.q1

    @property
    def rel_iqr(self) -> float:
        """IQR relative to the median (0.02 = 2 % spread)."""
        return self.iqr / self.median if self.median else float("inf")

    def as_dict(self) -> dict[str, float]:
        """Fields plus the derived spread, for JSON."""
        return {**asdict(self), "iqr": self.iqr, "rel_iqr": self.rel_iqr}


# The standard error of a normal sample's median is sqrt(pi / 2) times the mean's.
_MEDIAN_SE_FACTOR = float(np.sqrt(np.pi / 2))
# A normal distribution's IQR is 1.349 standard deviations.
_IQR_PER_SIGMA = 1.349


def median_rel_se(samples: Sequence[float]) -> float:
    """Standard error of the median of ``samples``, relative to the median (inf below 3 samples).

    From the IQR (robust to the odd slow round) as a normal sample's sigma, with the sample size cut
    to the effective size of an AR(1) series, n (1 - r) / (1 + r), where r is the lag-1
    autocorrelation (clipped to [0, 0.9]): consecutive rounds of one process are not independent
    (``fast``'s follow clocks that track the power cap; docs/statistics.md), and counting them as
    if they were would claim twice the precision there is.
    """
    a = np.asarray(samples, dtype=float)
    if len(a) < 3:
        return float("inf")
    q1, median, q3 = np.percentile(a, [25, 50, 75])
    if median <= 0:
        return float("inf")
    r = 0.0
    if np.std(a[:-1]) > 0 and np.std(a[1:]) > 0:
        r = float(np.clip(np.corrcoef(a[:-1], a[1:])[0, 1], 0.0, 0.9))
    effective_n = len(a) * (1 - r) / (1 + r)
    return float(_MEDIAN_SE_FACTOR * (q3 - q1) / _IQR_PER_SIGMA / np.sqrt(effective_n) / median)
