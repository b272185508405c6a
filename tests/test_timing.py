"""Timing one call: what runs around it, in which order."""

import torch

from meddpm.measure.machine.timing import time_synchronized


def test_cpu_timing_runs_the_sampler_after_the_call():
    calls = []
    elapsed = time_synchronized(lambda: calls.append("step"), torch.device("cpu"), during=lambda: calls.append("nvml"))
    assert calls == ["step", "nvml"] and elapsed >= 0
