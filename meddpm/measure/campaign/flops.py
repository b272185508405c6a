"""Model FLOPs of a training iteration, counted on the meta device (no memory, no GPU)."""

from __future__ import annotations

import functools

import torch
from torch.utils.flop_counter import FlopCounterMode

from meddpm.model.config import ModelConfig
from meddpm.model.diffusion import build_model


@functools.cache
def train_step_flops(config: ModelConfig, batch_size: int = 1) -> int:
    """FLOPs of forward + L1 loss + backward for one batch (matmuls and convolutions).

    Counted by PyTorch's FlopCounterMode on meta tensors, so even the full-size presets
    take seconds on a CPU. The optimizer step's elementwise work is not counted.
    """
    with torch.device("meta"):
        model = build_model(config)
        x = torch.empty(batch_size, config.out_channels, *config.volume)
        mask = torch.empty(batch_size, config.mask_channels, *config.volume)
        t = torch.zeros(batch_size, dtype=torch.long)
        noise = torch.empty_like(x)
    counter = FlopCounterMode(display=False)
    with counter:
        model.loss(x, mask, t=t, noise=noise).backward()
    return int(counter.get_total_flops())


@functools.cache
def forward_flops(config: ModelConfig, batch_size: int = 1) -> int:
    """FLOPs of one denoiser forward pass (one reverse-diffusion step)."""
    with torch.device("meta"):
        model = build_model(config)
        x = torch.empty(batch_size, config.in_channels, *config.volume)
        t = torch.zeros(batch_size, dtype=torch.long)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model.denoiser(x, t)
    return int(counter.get_total_flops())
