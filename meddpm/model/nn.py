"""The U-Net's small building blocks, as guided-diffusion's ``nn.py``: GroupNorm32, convolutions,
zero initialisation and the timestep embedding.

The normalisation and convolution modules are the reference ops, each with the switch a combo
sets (:meth:`~meddpm.model.unet.UNet3D.use_layout_preserving_norm` and the others) to compute the
same function with one of the ``fast`` combo's kernels from :mod:`meddpm.kernels`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from meddpm.kernels.common import norm_dtype
from meddpm.kernels.convolution import add_bias, conv3d_by_gathered_taps, conv3d_by_taps
from meddpm.kernels.normalization import group_norm_keep_layout, group_norm_silu_keep_layout


def zero_init(module: nn.Module) -> nn.Module:
    """Set a module's parameters to zero (residual branches start as identity)."""
    for p in module.parameters():
        nn.init.zeros_(p)
    return module


class GroupNorm32(nn.GroupNorm):
    """GroupNorm computed in (at least) float32 and cast back, as in the original.

    With ``keep_layout`` it is computed by :func:`~meddpm.kernels.normalization.group_norm_keep_layout`:
    the same function, but a channels-last input gives a channels-last output.
    """

    keep_layout = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.keep_layout:
            return group_norm_keep_layout(x, self.num_groups, self.weight, self.bias, self.eps)
        return super().forward(x.to(norm_dtype(x))).type(x.dtype)


class GroupNormSiLU(GroupNorm32):
    """GroupNorm32, then SiLU: the normalisation in front of every convolution of the U-Net.

    With ``fused`` (and ``keep_layout``) the two are one function,
    :func:`~meddpm.kernels.normalization.group_norm_silu_keep_layout`.
    """

    fused = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.keep_layout and self.fused:
            return group_norm_silu_keep_layout(x, self.num_groups, self.weight, self.bias, self.eps)
        return F.silu(super().forward(x))


class Conv3d(nn.Conv3d):
    """``nn.Conv3d`` whose bias can be added after the convolution, as an elementwise op of its own.

    With ``bias_apart`` the convolution runs without bias and the bias is added to its output
    (:func:`~meddpm.kernels.convolution.add_bias`), the same function. Under ``torch.compile`` this
    matters: Inductor adds a convolution's own bias in a pass of its own over the output, which it
    must write out when the biased output is saved for backward (as in front of every GroupNorm).
    Added apart, the unbiased output is what is saved, and the add fuses into the kernels that read it.
    """

    bias_apart = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bias_apart and self.bias is not None:
            out = F.conv3d(x, self.weight, None, self.stride, self.padding, self.dilation, self.groups)
            return add_bias(out, self.bias)
        return super().forward(x)


class ThinConv3d(Conv3d):
    """A 3x3x3 convolution (stride 1, padding 1) to few channels, optionally computed tap by tap.

    cuDNN runs the denoiser's last convolution (64 -> 1 channel at 128^3) with Ampere-generation
    kernels whose tiles are mostly padding. With ``by_taps`` the same parameters compute the same
    function through :func:`~meddpm.kernels.convolution.conv3d_by_taps`.
    """

    by_taps = False

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.by_taps:
            return conv3d_by_taps(x, self.weight, self.bias)
        return super().forward(x)


class InputConv3d(Conv3d):
    """The denoiser's first convolution (3x3x3, padding 1, few channels to many), optionally from gathered taps.

    cuDNN runs it (3 -> 64 channels at 128^3) with Ampere-generation kernels (docs/performance.md,
    fast v10). With ``by_gathered_taps`` the same parameters compute the same
    function through :func:`~meddpm.kernels.convolution.conv3d_by_gathered_taps`.
    """

    by_gathered_taps = False

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.by_gathered_taps:
            return conv3d_by_gathered_taps(x, self.weight, self.bias)
        return super().forward(x)


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding of integer timesteps: [cos | sin] at geometric frequencies."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
