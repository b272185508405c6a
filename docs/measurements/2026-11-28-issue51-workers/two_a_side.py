"""What the A/B's stop rule and test read from the process medians kept in docs/measurements (run from the
repository root: python docs/measurements/2026-11-28-issue51-workers/two_a_side.py).

1. The pull-request check of h200-pr-workers/ replayed with --perf-until-detectable=0.01: what each combo could flag
   after each pair of processes, on the unrounded medians of its results.
2. Every same-code A/B time comparison kept under docs/measurements (the planted alarms, over 3 % apart, left out),
   cut to its first two processes a side: the ratio of the two sides' variances against what two equal spreads give,
   and how often Welch's and Student's one-sided tests read p < 0.01 either way.
"""

import glob
import json
import lzma
import math
from pathlib import Path

import numpy as np
from scipy import stats

from meddpm.measure.statistics.compare import detectable_change, noise_threshold, pooled_spread

HERE = Path(__file__).parent


def load(path: str) -> dict:
    return json.load(lzma.open(path) if path.endswith(".xz") else open(path))


def time_comparisons(document: dict) -> list[tuple[str, list[float], list[float]]]:
    return [
        (case["combo"], t["candidate_ms"], t["reference_ms"])
        for case in document.get("cases", [])
        for t in case.get("comparisons") or []
        if t.get("metric") == "time"
    ]


def replay_stop() -> None:
    print("pull-request check, h200-pr-workers: detectable after n+n processes")
    for combo, a, b in time_comparisons(load(str(HERE / "h200-pr-workers" / "results.json.xz"))):
        steps = [f"{n}+{n} {100 * detectable_change(a[:n], b[:n]):.2f} %" for n in range(2, len(a) + 1)]
        print(f"  {combo}: " + ", ".join(steps))


def one_sided_p(a: np.ndarray, b: np.ndarray, pooled: bool) -> float:
    var_a, var_b = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(var_a + var_b)
    df = len(a) + len(b) - 2 if pooled else (var_a + var_b) ** 2 / (var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))
    return float(stats.t.sf((a.mean() - b.mean()) / se, df))


def two_a_side() -> None:
    seen, pairs = set(), []
    for path in sorted(glob.glob("docs/measurements/**/results*.json*", recursive=True)):
        try:
            document = load(path)
        except (OSError, ValueError, lzma.LZMAError):
            continue
        if not isinstance(document, dict) or document.get("run_kind") != "ab":
            continue
        for _, a, b in time_comparisons(document):
            key = (tuple(a), tuple(b))
            if key in seen or min(len(a), len(b)) < 2 or abs(math.log(np.median(a) / np.median(b))) > 0.03:
                continue
            seen.add(key)
            pairs.append((np.log(a[:2]), np.log(b[:2]), a[:2], b[:2]))
    ratios, flagged = [], {"welch": [], "student": []}
    for a, b, a_ms, b_ms in pairs:
        var_a, var_b = a.var(ddof=1), b.var(ddof=1)
        if var_a + var_b == 0:
            continue
        ratios.append(max(var_a, var_b) / max(min(var_a, var_b), 1e-30))
        change = 100 * math.expm1(a.mean() - b.mean())
        floor = 100 * noise_threshold(pooled_spread(a_ms, b_ms), math.inf)
        for name, pooled in (("welch", False), ("student", True)):
            p = one_sided_p(a, b, pooled)
            if min(p, 1 - p) < 0.01:
                flagged[name].append(f"{change:+.3f} % (threshold {floor:.2f} %)")
    quantiles = (0.25, 0.5, 0.75, 0.9)
    equal = [stats.f.ppf((1 + q) / 2, 1, 1) for q in quantiles]  # the larger of two chi2(1) over the smaller
    print(f"{len(ratios)} same-code comparisons at 2+2")
    print("  variance ratio quantiles", [round(float(x), 1) for x in np.quantile(ratios, quantiles)])
    print("  two equal spreads would give", [round(float(x), 1) for x in equal])
    for name, changes in flagged.items():
        print(f"  {name}: p < 0.01 either way in {len(changes)}: {', '.join(changes)}")


if __name__ == "__main__":
    replay_stop()
    two_a_side()
