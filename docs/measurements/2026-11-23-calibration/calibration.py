"""Fixed reference kernels for the machine-to-machine drift experiment (docs/statistics.md).

A stored baseline was measured on another machine start than tonight's run, and starts differ
by up to 2.5-2.8 % for every combo at once. If that drift came from the card's speed as such
(clocks, power cap, memory), three fixed kernels timed in the same process would drift alike,
and dividing a case's time by them would cancel it: a cuBLAS GEMM (tensor cores), an HBM copy
(memory bandwidth) and one cuDNN 3D convolution (the model's dominant kernel family). They are
timed with strict FP32 convolution and TF32 off, inside a context that restores the global
flags, so that a calibration never changes the combos measured beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from meddpm.measure.machine.timing import time_synchronized

# Sizes: each kernel runs for about a millisecond on an H100/H200, long enough for CUDA events.
GEMM_N = 8192  # bf16 GEMM, 1.1 TFLOP
COPY_BYTES = 2**30  # 1 GiB read and 1 GiB written
CONV_SHAPE = (1, 64, 48, 48, 48)  # N, C, D, H, W; 64 -> 64 channels, 3x3x3, fp32


def reference_kernels(device: torch.device) -> dict[str, Callable[[], object]]:
    """The three reference kernels on ``device``, inputs allocated once."""
    a = torch.randn(GEMM_N, GEMM_N, device=device, dtype=torch.bfloat16)
    b = torch.randn(GEMM_N, GEMM_N, device=device, dtype=torch.bfloat16)
    src = torch.empty(COPY_BYTES // 4, device=device)
    dst = torch.empty_like(src)
    x = torch.randn(CONV_SHAPE, device=device)
    w = torch.randn(CONV_SHAPE[1], CONV_SHAPE[1], 3, 3, 3, device=device)
    return {
        "gemm_bf16": lambda: a @ b,
        "hbm_copy": lambda: dst.copy_(src),
        "conv3d_fp32": lambda: torch.nn.functional.conv3d(x, w, padding=1),
    }


def calibrate(device: torch.device, kernels: dict[str, Callable[[], object]], repeats: int = 30) -> dict[str, float]:
    """Median milliseconds of each reference kernel, after one untimed call each.

    cuDNN's autotuner and TF32 are off for the duration and restored after: the convolution's
    algorithm must be the same choice on every machine, or its time measures the autotuner.
    """
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            medians = {}
            for name, fn in kernels.items():
                fn()
                medians[name] = float(np.median([time_synchronized(fn, device) for _ in range(repeats)]))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    return medians


def machine_factor(medians: dict[str, float], reference: dict[str, float]) -> float:
    """Geometric mean of ``medians`` over ``reference``, kernel by kernel: >1 means a slower machine."""
    ratios = [medians[name] / reference[name] for name in reference]
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))
