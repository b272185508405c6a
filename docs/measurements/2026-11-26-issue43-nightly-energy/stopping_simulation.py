"""Simulated A/B runs (no GPU): false alarms and power of 3 processes a side against --perf-until-detectable=0.01
with at most 3 (2 a side, a third pair only while a 1 % slowdown is not yet detectable), at the between-process
spreads measured on H100s and H200s.

Run: python docs/measurements/2026-11-26-issue43-nightly-energy/stopping_simulation.py
"""

import numpy as np

from meddpm.judge.baseline import Tolerances
from meddpm.judge.verdict import judge_ab
from meddpm.measure.statistics.compare import detectable_change

rng = np.random.default_rng(1)
tol = Tolerances()
for spread in (0.0005, 0.0015, 0.0035, 0.006):
    for shift in (0.0, 0.01):
        fixed = adaptive = 0
        n_used = []
        N = 4000
        for _ in range(N):
            a = list(100 * (1 + shift) * np.exp(rng.normal(0, spread, 3)))
            b = list(100 * np.exp(rng.normal(0, spread, 3)))
            fixed += judge_ab("x", a, b, tol).outcome == "regression"
            n = 2
            while n < 3 and detectable_change(a[:n], b[:n]) > 0.01:
                n += 1
            n_used.append(n)
            adaptive += judge_ab("x", a[:n], b[:n], tol).outcome == "regression"
        print(
            f"spread {spread:.2%} shift {shift:.0%}: flagged fixed-3 {fixed / N:.3f}, "
            f"until-1% {adaptive / N:.3f}, mean processes {np.mean(n_used):.2f}"
        )
