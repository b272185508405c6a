"""A whole training iteration (forward, backward, optimizer step) replayed as one CUDA graph.

Inductor's CUDA graph trees replay the compiled forward and backward, but every iteration still
starts in Python: Dynamo's guards, the trees' checks of their inputs, the backward's launch from
autograd, the optimizer's kernels. With the iteration synchronized, as the suite and the bench time
it, the card waits for that: on an H200 the `fast` step's kernels spanned 46.5-46.8 of its 48.0-48.2 ms
(docs/performance.md, issue 22). Recorded whole, an iteration is one graph launch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class CapturedStep:
    """Runs ``iteration`` eagerly for ``warmup`` calls, then records it once and replays it from then on.

    The eager calls run on a side stream, as CUDA graph capture requires, and hold everything that
    must not happen inside a recording: compilation and its autotuning, cuDNN's plans, the
    optimizer's lazily created state. The recording call replays at once, so every call is one
    iteration. ``iteration`` must be replayable: static inputs, no host synchronisation, its
    optimizer ``capturable``, and nothing it allocates kept outside it but its returned tensor,
    which a replay overwrites (each call returns a copy).
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
        self._side: torch.cuda.Stream | None = None  # one stream for every eager call, so they share cached memory

    def __call__(self) -> torch.Tensor:
        """One iteration; returns a copy of its output."""
        self.calls += 1
        if self.calls <= self.warmup:
            return self._eager()
        if self.graph is None:
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.output = self.iteration()
        self.graph.replay()
        assert self.output is not None
        return self.output.clone()

    def _eager(self) -> torch.Tensor:
        current = torch.cuda.current_stream(self.device)
        side = self._side = self._side or torch.cuda.Stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            output = self.iteration()
        current.wait_stream(side)
        return output
