"""The whole-iteration CUDA graph's protocol, with CUDA's stream and graph calls stood in for on a CPU.

What a recording computes is checked on a GPU (tests/test_train.py); here, when each call runs the
iteration, records it or replays it.
"""

import contextlib

import pytest
import torch

from meddpm.run.step_graph import CapturedStep


class FakeCuda:
    """Stand-ins for the torch.cuda calls CapturedStep makes: it counts recordings, replays and streams."""

    def __init__(self, monkeypatch):
        self.recordings = self.replays = self.streams = 0
        self.recording = False
        fake = self

        class Graph:
            def replay(self):
                fake.replays += 1

        class Stream:
            def __init__(self, device):
                fake.streams += 1

            def wait_stream(self, other):
                pass

        @contextlib.contextmanager
        def graph(g):
            fake.recordings += 1
            fake.recording = True
            yield
            fake.recording = False

        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "graph", graph)
        current = object.__new__(Stream)  # the current stream, not one CapturedStep made
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device: current)
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())


def test_eager_calls_then_one_recording_then_replays(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    runs = []

    def iteration():
        runs.append("recorded" if cuda.recording else "eager")
        return torch.tensor([float(len(runs))])

    step = CapturedStep(iteration, torch.device("cpu"), warmup=2)
    outputs = [step() for _ in range(5)]
    assert runs == ["eager", "eager", "recorded"]  # the iteration's Python runs once more, to be recorded
    assert cuda.recordings == 1 and cuda.replays == 3  # the recording call replays too: one iteration a call
    assert [o.item() for o in outputs] == [1.0, 2.0, 3.0, 3.0, 3.0]
    assert outputs[2] is not step.output and outputs[3] is not outputs[4]  # copies, which a replay leaves alone
    assert cuda.streams == 1  # one side stream for both eager calls, so they share its cached memory


def test_recording_needs_an_eager_call_before_it():
    with pytest.raises(ValueError, match="at least one eager call"):
        CapturedStep(lambda: torch.zeros(1), torch.device("cpu"), warmup=0)
