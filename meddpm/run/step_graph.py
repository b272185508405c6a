"""A whole training iteration (forward, backward, optimizer step) replayed as one CUDA graph.

Inductor's CUDA graph trees replay the compiled forward and backward, but every iteration still starts in
Python: Dynamo's guards, the trees' checks of their inputs, the backward's launch from autograd, the optimizer's
kernels. With the iteration synchronized, as the suite and the bench time it, the card waits for that between
the step's kernels (docs/performance.md). Recorded whole, an iteration is one graph launch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from meddpm.errors import first_line


class RecordingFailed(RuntimeError):
    """Recording the iteration as a CUDA graph failed; the step cannot be used any more."""


class CapturedStep:
    """Runs ``iteration`` eagerly for ``warmup`` calls, then records it once and replays it from then on.

    The eager calls run on a side stream, as CUDA graph capture requires, and hold everything that
    must not happen inside a recording: compilation and its autotuning, cuDNN's plans, the
    optimizer's lazily created state. The recording call replays at once, so every call is one
    iteration; :attr:`calls_before_replay` calls make a step steady. ``iteration`` must be replayable:
    static inputs (changed in place, never replaced), no host synchronisation, its optimizer
    ``capturable`` with the learning rate it will keep, and nothing it allocates kept outside it but its
    returned tensor, which a replay overwrites (each call returns a copy). A call that raises does not
    count; a failed recording raises :class:`RecordingFailed`, and so does every call after it.
    """

    def __init__(self, iteration: Callable[[], torch.Tensor], device: torch.device, warmup: int = 2):
        if warmup < 1:
            raise ValueError(f"warmup={warmup}: at least one eager call must come before recording")
        self.iteration = iteration
        self.device = device
        self.warmup = warmup
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.output: torch.Tensor | None = None
        self.failure: str | None = None
        self._side: torch.cuda.Stream | None = None  # eager calls and the recording share it and its cached memory

    @property
    def calls_before_replay(self) -> int:
        """Calls until the step only replays: the eager ones and the recording."""
        return self.warmup + 1

    def __call__(self) -> torch.Tensor:
        """One iteration; returns a copy of its output."""
        if self.failure is not None:
            raise RecordingFailed(f"this step's CUDA graph recording failed earlier ({self.failure}); build a new step")
        if self.calls < self.warmup:
            output = self._eager()
        else:
            graph, output = self.graph, self.output
            if graph is None or output is None:
                graph, output = self._record()
            graph.replay()
            output = output.clone()
        self.calls += 1
        return output

    def _side_stream(self) -> torch.cuda.Stream:
        if self._side is None:
            self._side = torch.cuda.Stream(self.device)
        return self._side

    def _eager(self) -> torch.Tensor:
        current = torch.cuda.current_stream(self.device)
        side = self._side_stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):
            output = self.iteration()
        current.wait_stream(side)
        return output

    def _record(self) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream(self.device)
        try:
            # On the step's own device and stream: the graph's default capture stream belongs to
            # whichever device was current when the process first recorded anything.
            with torch.cuda.device(self.device), torch.cuda.graph(graph, stream=self._side_stream()):
                output = self.iteration()
        except Exception as error:
            # A failed capture_end leaves the capture stream current; give the caller theirs back.
            torch.cuda.set_stream(current)
            cause = first_line(error)
            self.failure = f"{type(error).__name__}: {cause}" if cause else type(error).__name__
            raise RecordingFailed(
                f"recording the training iteration as a CUDA graph failed ({self.failure}); "
                "run the combo without CUDA graphs (cuda_graphs=False)"
            ) from error
        self.graph, self.output = graph, output
        return graph, output
