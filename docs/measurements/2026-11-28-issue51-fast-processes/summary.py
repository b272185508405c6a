"""The probe processes side by side (processes.jsonl of probe.sh): each one's median, clocks, power, temperature and
kernel time, then, for every process more than 1.5 % from the median of the medians, the kernels whose time differs
most from the process nearest that median.

    python docs/measurements/2026-11-28-issue51-fast-processes/summary.py processes.jsonl
"""

import json
import statistics
import sys

import pandas as pd


def main() -> None:
    runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "kernels"} for r in runs], index=range(1, len(runs) + 1))
    centre = statistics.median(table["median_ms"])
    table["vs median %"] = (table["median_ms"] / centre - 1) * 100
    print(table.round(2).to_string())
    typical = runs[int((table["median_ms"] - centre).abs().idxmin()) - 1]
    base = {k: us for k, us, _ in typical["kernels"]}
    for i, r in enumerate(runs):
        if abs(r["median_ms"] / centre - 1) <= 0.015:
            continue
        mine = {k: us for k, us, _ in r["kernels"]}
        diff = pd.Series({k: mine.get(k, 0.0) - base.get(k, 0.0) for k in set(mine) | set(base)})
        print(
            f"\nprocess {i + 1}: {r['median_ms']} ms against {typical['median_ms']} ms; kernels' time "
            f"{r['kernel_us_total']} against {typical['kernel_us_total']} us; largest kernel differences (us):"
        )
        top = diff[diff.abs().sort_values(ascending=False).index][:12]
        for name, us in top.items():
            print(f"  {us:+9.1f}  {name[:150]}")


if __name__ == "__main__":
    main()
