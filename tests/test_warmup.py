import types

import torch

from meddpm.measure.machine import warmup


def _spy(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: calls.append("read") or 6 << 30)
    return calls


def test_a_graphed_steps_peak_is_read_over_the_recording_iterations_not_the_compiling_one(monkeypatch):
    calls = _spy(monkeypatch)
    step = types.SimpleNamespace(cuda_graphs=True)
    peak = warmup.warm_up(step, torch.device("cuda", 0), 3, lambda i: calls.append(i))
    assert calls == [0, "reset", 1, 2, "read"] and peak == 6 << 30


def test_no_graphs_or_no_recording_iteration_gives_no_peak(monkeypatch):
    calls = _spy(monkeypatch)
    graphed, eager = types.SimpleNamespace(cuda_graphs=True), types.SimpleNamespace(cuda_graphs=False)
    assert warmup.warm_up(eager, torch.device("cuda", 0), 3, calls.append) is None
    assert warmup.warm_up(graphed, torch.device("cuda", 0), 1, calls.append) is None
    assert warmup.warm_up(graphed, torch.device("cpu"), 3, calls.append) is None
    assert calls == [0, 1, 2, 0, 0, 1, 2]  # every iteration ran, nothing was reset or read
