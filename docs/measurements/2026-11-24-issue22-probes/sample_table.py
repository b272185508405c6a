"""One line per `probe.py sample` result: reads the PROBE lines of its logs on stdin.

Usage: grep -h "^PROBE" LOGS | python3 sample_table.py
"""

import json
import sys

for line in sys.stdin:
    d = json.loads(line.split(" ", 1)[1])
    kernel_ms = round(sum(d["kernel_ms_per_step"].values()), 2)
    print(
        d["label"], "warmup", d["warmup_s"], "full", d["full_s"], "kernels/step", d["kernels"] // 3,
        "kernel ms/step", kernel_ms,
    )  # fmt: skip
