"""Per-iteration time: CUDA events on a GPU, a monotonic clock on the CPU."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def time_synchronized(
    fn: Callable[[], object], device: torch.device, during: Callable[[], None] | None = None
) -> float:
    """Milliseconds of GPU time that one call of ``fn`` queues, measured with CUDA events.

    ``during`` runs on the host after the end event is queued but before the host waits,
    so it samples the card (NVML) while the iteration is still executing without delaying
    the event. On the CPU the wall time of ``fn`` is returned and ``during`` runs after it.
    """
    if device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        elapsed = (time.perf_counter() - t0) * 1e3
        if during is not None:
            during()
        return elapsed
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    if during is not None:
        during()
    end.synchronize()
    return start.elapsed_time(end)


def time_once(fn: Callable[[], object], device: torch.device) -> float:
    """Wall time of one synchronised call in milliseconds (warm-up, compilation, autotuning).

    Wall time, not events, because compilation happens on the host.
    """
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return (time.perf_counter() - t0) * 1e3


def synchronize(device: torch.device) -> None:
    """Wait for all queued work on ``device`` (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
