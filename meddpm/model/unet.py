"""The Med-DDPM denoiser: a guided-diffusion style 3D U-Net with timestep embedding.

Block for block this follows the original (itself guided-diffusion with 3D convolutions):
ResBlocks without scale-shift norm, single-head "legacy" attention on the flattened voxels,
strided-conv downsampling, interpolate-then-conv upsampling, and zero-initialised output
convolutions so that every residual branch starts as the identity. Its building blocks are in
:mod:`meddpm.model.nn`; the ``fast`` combo's kernels, which the ``use_*`` switches of
:class:`UNet3D` select, in :mod:`meddpm.kernels`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from meddpm.kernels.concatenation import concat_channels
from meddpm.kernels.upsampling import trilinear_upsample_2x
from meddpm.model.config import ModelConfig
from meddpm.model.nn import (
    Conv3d,
    GroupNorm32,
    GroupNormSiLU,
    InputConv3d,
    ThinConv3d,
    timestep_embedding,
    zero_init,
)


class ResBlock(nn.Module):
    """Two norm-SiLU-conv stages with the timestep embedding added in between."""

    def __init__(self, ch_in: int, ch_out: int, emb_dim: int, groups: int, dropout: float):
        super().__init__()
        self.in_layers = nn.Sequential(GroupNormSiLU(groups, ch_in), Conv3d(ch_in, ch_out, 3, padding=1))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_dim, ch_out))
        self.out_layers = nn.Sequential(
            GroupNormSiLU(groups, ch_out),
            nn.Dropout(dropout),
            zero_init(Conv3d(ch_out, ch_out, 3, padding=1)),
        )
        self.skip = nn.Identity() if ch_in == ch_out else Conv3d(ch_in, ch_out, 1)

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.in_layers(x)
        h = h + self.emb_layers(emb).type(h.dtype)[:, :, None, None, None]
        return self.skip(x) + self.out_layers(h)


class AttentionBlock(nn.Module):
    """Single-head self-attention over all voxels, with a zero-initialised projection."""

    def __init__(self, ch: int, groups: int):
        super().__init__()
        self.norm = GroupNorm32(groups, ch)
        self.qkv = nn.Conv1d(ch, 3 * ch, 1)
        self.proj_out = zero_init(nn.Conv1d(ch, ch, 1))
        # The same function through PyTorch's fused attention kernels (flash / memory-efficient),
        # which never materialise the voxels x voxels weight matrix.
        self.use_sdpa = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, *spatial = x.shape
        flat = x.reshape(b, c, -1)
        q, k, v = self.qkv(self.norm(flat)).chunk(3, dim=1)
        if self.use_sdpa:
            # (batch, 1 head, voxels, channels), the default scale 1/sqrt(C) as below. The
            # fused kernels need the channels contiguous; with any other strides PyTorch falls
            # back to its math implementation, which computes bf16 attention in fp32 SIMT GEMMs.
            q, k, v = (y.transpose(1, 2).unsqueeze(1).contiguous() for y in (q, k, v))
            h = F.scaled_dot_product_attention(q, k, v).squeeze(1).transpose(1, 2)
        else:
            h = self._legacy_attention(q, k, v)
        # The residual add in 5-D keeps x's strides (adding in 3-D would give a channels-last x
        # a batch stride that later ops no longer read as channels-last).
        return x + self.proj_out(h).reshape(b, c, *spatial)

    @staticmethod
    def _legacy_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q^T k / sqrt(C)) v on (batch, C, voxels) tensors, computed as the original does."""
        c = q.shape[1]
        # Scaling q and k by ch^-1/4 each (rather than the product by ch^-1/2) keeps the
        # logits in range for half precision, as the original does.
        scale = 1.0 / math.sqrt(math.sqrt(c))
        weight = torch.einsum("bct,bcs->bts", q * scale, k * scale)
        weight = torch.softmax(weight.float(), dim=-1).type(weight.dtype)
        return torch.einsum("bts,bcs->bct", weight, v)


class Downsample(nn.Module):
    """3x3x3 convolution with stride 2 in every dimension."""

    def __init__(self, ch: int):
        super().__init__()
        self.op = Conv3d(ch, ch, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x)


class Upsample(nn.Module):
    """Trilinear interpolation by 2 in every dimension, then a 3x3x3 convolution."""

    def __init__(self, ch: int):
        super().__init__()
        self.conv = Conv3d(ch, ch, 3, padding=1)
        self.separable = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.separable:
            x = trilinear_upsample_2x(x)
        else:
            x = F.interpolate(x, scale_factor=2, mode="trilinear", align_corners=False)
        return self.conv(x)


class EmbedSequential(nn.Sequential):
    """A sequence of blocks where ResBlocks also receive the timestep embedding."""

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        for layer in self:
            x = layer(x, emb) if isinstance(layer, ResBlock) else layer(x)
        return x


class UNet3D(nn.Module):
    """The denoiser: predicts the noise in ``x`` (noisy image + mask channels) at step ``t``."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        # With it the decoder joins its skips by :func:`~meddpm.kernels.concatenation.concat_channels`.
        self.dense_concat_gradients = False
        c = config.model_channels
        emb_dim = 4 * c
        groups, dropout = config.num_groups, config.dropout

        def res(ch_in: int, ch_out: int) -> ResBlock:
            return ResBlock(ch_in, ch_out, emb_dim, groups, dropout)

        self.time_embed = nn.Sequential(nn.Linear(c, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))

        ch = c * config.channel_mult[0]
        self.input_blocks = nn.ModuleList([EmbedSequential(InputConv3d(config.in_channels, ch))])
        skip_channels = [ch]
        ds = 1
        last_level = len(config.channel_mult) - 1
        for level, mult in enumerate(config.channel_mult):
            for _ in range(config.num_res_blocks):
                layers: list[nn.Module] = [res(ch, c * mult)]
                ch = c * mult
                if ds in config.attention_ds:
                    layers.append(AttentionBlock(ch, groups))
                self.input_blocks.append(EmbedSequential(*layers))
                skip_channels.append(ch)
            if level != last_level:
                self.input_blocks.append(EmbedSequential(Downsample(ch)))
                skip_channels.append(ch)
                ds *= 2

        self.middle_block = EmbedSequential(res(ch, ch), AttentionBlock(ch, groups), res(ch, ch))

        self.output_blocks = nn.ModuleList()
        for level, mult in reversed(list(enumerate(config.channel_mult))):
            for i in range(config.num_res_blocks + 1):
                layers = [res(ch + skip_channels.pop(), c * mult)]
                ch = c * mult
                if ds in config.attention_ds:
                    layers.append(AttentionBlock(ch, groups))
                if level and i == config.num_res_blocks:
                    layers.append(Upsample(ch))
                    ds //= 2
                self.output_blocks.append(EmbedSequential(*layers))

        self.out = nn.Sequential(
            GroupNormSiLU(groups, ch),
            zero_init(ThinConv3d(ch, config.out_channels)),
        )

    def use_sdpa_attention(self, enabled: bool = True) -> None:
        """Compute every attention block with ``scaled_dot_product_attention`` (or not)."""
        self._switch(AttentionBlock, "use_sdpa", enabled)

    def use_layout_preserving_norm(self, enabled: bool = True) -> None:
        """Compute every GroupNorm with :func:`~meddpm.kernels.normalization.group_norm_keep_layout` (or not)."""
        self._switch(GroupNorm32, "keep_layout", enabled)

    def use_fused_norm_silu(self, enabled: bool = True) -> None:
        """Compute each layout-preserving GroupNorm and the SiLU after it as one function (or not)."""
        self._switch(GroupNormSiLU, "fused", enabled)

    def use_separable_upsample(self, enabled: bool = True) -> None:
        """Upsample per axis with :func:`~meddpm.kernels.upsampling.trilinear_upsample_2x` (or not: ``interpolate``)."""
        self._switch(Upsample, "separable", enabled)

    def use_output_conv_by_taps(self, enabled: bool = True) -> None:
        """Compute the last convolution with :func:`~meddpm.kernels.convolution.conv3d_by_taps` (or not)."""
        self._switch(ThinConv3d, "by_taps", enabled)

    def use_input_conv_by_taps(self, enabled: bool = True) -> None:
        """Compute the first convolution with :func:`~meddpm.kernels.convolution.conv3d_by_gathered_taps` (or not)."""
        self._switch(InputConv3d, "by_gathered_taps", enabled)

    def use_conv_bias_apart(self, enabled: bool = True) -> None:
        """Add every 3-D convolution's bias as an elementwise op after it (or inside it)."""
        self._switch(Conv3d, "bias_apart", enabled)

    def use_dense_concat_gradients(self, enabled: bool = True) -> None:
        """Join the decoder's skips with :func:`~meddpm.kernels.concatenation.concat_channels` (or ``torch.cat``)."""
        self.dense_concat_gradients = enabled

    def _switch(self, kind: type[nn.Module], attribute: str, enabled: bool) -> None:
        """Set a kernel-variant switch on every block of one kind."""
        for module in self.modules():
            if isinstance(module, kind):
                setattr(module, attribute, enabled)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        t_emb = timestep_embedding(t, self.config.model_channels).to(self.time_embed[0].weight.dtype)
        emb = self.time_embed(t_emb)
        skips = []
        h = x
        for block in self.input_blocks:
            h = block(h, emb)
            skips.append(h)
        h = self.middle_block(h, emb)
        for block in self.output_blocks:
            h = block(self._join(h, skips.pop()), emb)
        return self.out(h)

    def _join(self, h: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        """A decoder block's input: ``h`` and its skip joined along channels.

        A method of its own so that no local of :meth:`forward` holds ``h`` or the skip once they are
        joined: held in a list there, the last decoder block's inputs (64 channels at 128^3 each)
        outlived the join while the output layers ran, and the eager ``opt2``, ``opt12`` and
        ``amp_bf16`` peaked higher (docs/performance.md).
        """
        parts = [h, skip]
        return concat_channels(parts) if self.dense_concat_gradients else torch.cat(parts, dim=1)
