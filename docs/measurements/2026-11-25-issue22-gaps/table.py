"""One row per gap_probe.py process (its PROBE lines on standard input): the times it split."""

import json
import sys

import numpy as np

print(
    f"{'label':12} {'first s':>8} {'sync':>7} {'after':>7} {'b2b':>7} {'host':>6} {'span':>7} {'kernels':>8} {'n':>5} "
    f"{'gaps':>6} {'>10us':>6} {'idle':>6} {'GiB':>6}"
)
for line in sys.stdin:
    d = json.loads(line.split(" ", 1)[1])
    t = d["traced"][1:] or d["traced"]  # the first traced iteration carries the profiler's start
    span = np.mean([i["span_ms"] for i in t])
    print(
        f"{d['label']:12} {d['warmup_s'][0]:8.1f} {d['sync_median_ms']:7.2f} {d['sync_after_median_ms']:7.2f} "
        f"{np.median(d['b2b_ms']):7.2f} {d['host_queue_median_ms']:6.2f} {span:7.2f} "
        f"{np.mean([i['kernel_ms'] for i in t]):8.2f} {t[0]['kernels']:5d} {np.mean([i['gap_ms'] for i in t]):6.2f} "
        f"{np.mean([i['gaps_over_10us_ms'] for i in t]):6.2f} {d['sync_median_ms'] - span:6.2f} "
        f"{d.get('peak_gib', 0):6.2f}"
    )
