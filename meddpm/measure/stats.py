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
