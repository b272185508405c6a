"""Warming a training step up, and the memory its CUDA graphs take while they are recorded."""

from __future__ import annotations

from collections.abc import Callable

import torch

from meddpm.run.train import TrainStep


def warm_up(step: TrainStep, device: torch.device, iterations: int, each: Callable[[int], None]) -> int | None:
    """Run ``each(i)`` for the ``iterations`` warm-up iterations; the peak allocation while graphs record.

    Replaying CUDA graphs allocates nothing the allocator's statistics see: a graphed step's
    activations show only while its graphs are recorded, in the warm-up iterations after the first
    (the first compiles, and autotuning's scratch buffers are not the step's). So the peak is read
    over those, in bytes allocated on ``device`` in all; None for a step without graphs, or with
    too few warm-up iterations to record them.
    """
    recording = step.cuda_graphs and device.type == "cuda" and iterations > 1
    for i in range(iterations):
        if recording and i == 1:
            torch.cuda.reset_peak_memory_stats(device)
        each(i)
    return torch.cuda.max_memory_allocated(device) if recording else None
