"""Per-iteration wall time: CUDA events on a GPU, a monotonic clock on the CPU."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def time_iterations(fn: Callable[[], object], iterations: int, device: torch.device) -> list[float]:
    """Run ``fn`` ``iterations`` times and return each run's time in milliseconds.

    On CUDA each iteration is bracketed by events on the current stream and the host
    synchronises only once at the end, so timing adds no stalls between iterations.
    """
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
        for start, end in zip(starts, ends):
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def time_once(fn: Callable[[], object], device: torch.device) -> float:
    """Wall time of one synchronised call in milliseconds (for warm-up and compilation)."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return (time.perf_counter() - t0) * 1e3


def synchronize(device: torch.device) -> None:
    """Wait for all queued work on ``device`` (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
