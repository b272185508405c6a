"""Issue 22: compile_probe.py of 2026-11-24 with cuDNN's autotuning changed by environment variables.

CUDNN_BENCHMARK_LIMIT sets ``torch.backends.cudnn.benchmark_limit`` (how many candidate engines an
autotuned convolution times; PyTorch's default is 10, 0 times all). CUDNN_BENCHMARK=0 runs ``fast``
without cuDNN's autotuning (its heuristics' first engine that runs). PyTorch itself reads
TORCH_CUDNN_USE_HEURISTIC_MODE_B (heuristics mode B instead of the instant mode) when it does not
autotune. import_s is then the probe module's import only (torch is imported first, here).
"""

import dataclasses
import os
import sys
from pathlib import Path

import torch

from meddpm.run import combos

limit = os.environ.get("CUDNN_BENCHMARK_LIMIT")
if limit:
    torch.backends.cudnn.benchmark_limit = int(limit)
if os.environ.get("CUDNN_BENCHMARK") == "0":
    combos.COMBOS["fast"] = dataclasses.replace(combos.COMBOS["fast"], cudnn_benchmark=False)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-24-issue22-compile"))
import compile_probe  # noqa: E402

if __name__ == "__main__":
    print(
        "cudnn.benchmark_limit",
        torch.backends.cudnn.benchmark_limit,
        "fast.cudnn_benchmark",
        combos.get_combo("fast").cudnn_benchmark,
        "heuristic mode B",
        os.environ.get("TORCH_CUDNN_USE_HEURISTIC_MODE_B", "-"),
        flush=True,
    )
    compile_probe.main()
