"""How much host memory a CPU campaign needs, estimated before building anything.

A full-size preset on a CPU machine used to die deep inside its first iteration in an
out-of-memory traceback; the bench asks this module first and refuses in one line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from meddpm.model.config import ModelConfig
from meddpm.model.diffusion import build_model
from meddpm.run.combos import Combo


def host_memory_needed(config: ModelConfig, combos: Sequence[Combo], batch_size: int, *, ddp_processes: int = 0) -> int:
    """A lower bound of the RAM, in bytes, that a CPU campaign of ``combos`` needs at its peak.

    A campaign keeps every combo's step alive (parameters, Adam's two moments, its batch) and
    runs one iteration at a time, whose activations and gradients come on top. Those are
    traced once on the meta device (no memory, seconds even for the full-size presets); the
    estimate stays below the peaks measured on a GPU (cuDNN's workspace on top) and on the CPU
    (``tests/test_host_memory.py`` holds it under the paper preset's). A lower bound, so
    that a run it refuses could never have fitted: bf16 autocast at least halves the activations
    (some stay fp32), and a compiled combo may recompute instead of keeping any, so only its
    resident state counts. ``ddp_processes`` ranks of data-parallel training, run after the
    campaign, each hold a whole step of their own.
    """
    params, inputs, peak = _traced_step_bytes(config, batch_size)
    resident = 3 * params + inputs  # parameters and Adam's two moments; gradients are freed
    transient = peak - params - inputs  # activations and gradients of the iteration running
    share = max(0.0 if c.compile else 0.5 if c.autocast_dtype is not None else 1.0 for c in combos)
    campaign = len(combos) * resident + share * transient
    return int(max(campaign, ddp_processes * (resident + share * transient)))


class _LiveBytes(TorchDispatchMode):
    """The bytes of tensor storage alive, and their peak, over the operations run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.now = self.peak = 0

    def track(self, tensor: torch.Tensor) -> None:
        # Keyed by storage, so views and in-place results count once.
        storage = tensor.untyped_storage()
        ref = StorageWeakRef(storage)
        if ref.cdata not in self.live:
            self.live[ref.cdata] = (ref, storage.nbytes())
            self.now += storage.nbytes()
            self.peak = max(self.peak, self.now)

    def __torch_dispatch__(
        self, func: Callable[..., object], types: object, args: tuple = (), kwargs: dict | None = None
    ) -> object:
        out = func(*args, **(kwargs or {}))
        for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            self.now -= self.live.pop(key)[1]
        for result in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(result, torch.Tensor):
                self.track(result)
        return out


@functools.cache
def _traced_step_bytes(config: ModelConfig, batch_size: int) -> tuple[int, int, int]:
    """Parameter bytes, batch bytes and the peak of live bytes of one fp32 forward and backward."""
    with torch.device("meta"):
        model = build_model(config)
        images = torch.empty(batch_size, config.out_channels, *config.volume)
        masks = torch.empty(batch_size, config.mask_channels, *config.volume)
        t = torch.zeros(batch_size, dtype=torch.long)
        noise = torch.empty_like(images)
    params = list(model.denoiser.parameters())
    live = _LiveBytes()
    for tensor in [*params, images, masks]:
        live.track(tensor)
    with live:
        model.loss(images, masks, t=t, noise=noise).backward()
    return sum(p.nbytes for p in params), images.nbytes + masks.nbytes, live.peak
