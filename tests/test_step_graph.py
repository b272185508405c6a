"""The whole-iteration CUDA graph's protocol, with CUDA's stream and graph calls stood in for on a CPU.

What a recording computes is checked on a GPU (tests/test_train.py); here, when each call runs the
iteration, records it or replays it.
"""

import contextlib

import pytest
import torch

from meddpm.run.step_graph import CapturedStep, RecordingFailed


class FakeCuda:
    """Stand-ins for the torch.cuda calls CapturedStep makes: it counts recordings, replays and streams."""

    def __init__(self, monkeypatch, fail_recording: Exception | None = None):
        self.recordings = self.replays = self.streams = 0
        self.recording = False
        self.waits: list[tuple[object, object]] = []  # (waiting stream, stream waited for)
        self.set_streams: list[object] = []
        fake = self

        class Graph:
            def replay(self):
                fake.replays += 1

        class Stream:
            def __init__(self, device):
                fake.streams += 1

            def wait_stream(self, other):
                fake.waits.append((self, other))

        @contextlib.contextmanager
        def graph(g, stream=None):
            assert isinstance(stream, Stream)  # the step's own stream, not the process-wide default
            fake.recordings += 1
            fake.recording = True
            try:
                yield
            finally:
                fake.recording = False
            if fail_recording is not None:
                raise fail_recording  # as capture_end raises when an op in the recording was not capturable

        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "graph", graph)
        self.current = object.__new__(Stream)  # the current stream, not one CapturedStep made
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device: self.current)
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "set_stream", self.set_streams.append)


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
    assert cuda.streams == 1  # one side stream for the eager calls and the recording: they share its memory
    side = step._side
    assert cuda.waits == [(side, cuda.current), (cuda.current, side)] * 2  # each eager call waits both ways
    assert step.calls == 5 and step.calls_before_replay == 3


def test_an_eager_call_that_raises_does_not_count(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    outcomes = iter([MemoryError("out of memory"), 1.0, 2.0, 3.0])

    def iteration():
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return torch.tensor([outcome])

    step = CapturedStep(iteration, torch.device("cpu"), warmup=2)
    with pytest.raises(MemoryError):
        step()
    step(), step()  # the two eager calls the recording needs before it: compilation is never recorded
    assert cuda.recordings == 0
    assert step().item() == 3.0 and cuda.recordings == 1


def test_a_failed_recording_names_its_cause_and_the_step_refuses_to_go_on(monkeypatch):
    cause = RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore detail")
    cuda = FakeCuda(monkeypatch, fail_recording=cause)
    step = CapturedStep(lambda: torch.zeros(1), torch.device("cpu"), warmup=1)
    step()
    with pytest.raises(
        RecordingFailed,
        match=r"failed \(RuntimeError: CUDA error: operation not permitted when stream is capturing\); "
        r"run the combo without CUDA graphs \(cuda_graphs=False\)$",
    ) as info:
        step()
    assert info.value.__cause__ is cause and "\n" not in str(info.value)
    assert cuda.set_streams == [cuda.current]  # the caller's stream is current again
    assert step.graph is None and cuda.replays == 0
    with pytest.raises(RecordingFailed, match="failed earlier .*; build a new step"):
        step()
    assert cuda.recordings == 1


def test_recording_needs_an_eager_call_before_it():
    with pytest.raises(ValueError, match="at least one eager call"):
        CapturedStep(lambda: torch.zeros(1), torch.device("cpu"), warmup=0)
