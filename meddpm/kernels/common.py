"""Tensor helpers that the kernel modules share and the model uses too: layout, precision, broadcasting.

They live here, at the bottom, so that both rooms import them from one place without a cycle.
"""

from __future__ import annotations

import torch


def memory_format_of(x: torch.Tensor) -> torch.memory_format:
    """The layout to give tensors that meet ``x`` (channels-last-3d or contiguous)."""
    if x.ndim == 5 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return torch.contiguous_format


def norm_dtype(x: torch.Tensor) -> torch.dtype:
    """The precision GroupNorm is computed in: float32, or the input's if it is wider."""
    return torch.promote_types(x.dtype, torch.float32)


def per_channel(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(n, c) values shaped to broadcast over ``like``'s voxels."""
    return values.view(*values.shape, *(1,) * (like.dim() - 2))
