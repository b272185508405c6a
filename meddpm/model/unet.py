"""The Med-DDPM denoiser: a guided-diffusion style 3D U-Net with timestep embedding.

Block for block this follows the original (itself guided-diffusion with 3D convolutions):
ResBlocks without scale-shift norm, single-head "legacy" attention on the flattened voxels,
strided-conv downsampling, interpolate-then-conv upsampling, and zero-initialised output
convolutions so that every residual branch starts as the identity.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from meddpm.model.config import ModelConfig


def memory_format_of(x: torch.Tensor) -> torch.memory_format:
    """The layout to give tensors that meet ``x`` (channels-last-3d or contiguous)."""
    if x.ndim == 5 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return torch.contiguous_format


def zero_init(module: nn.Module) -> nn.Module:
    """Set a module's parameters to zero (residual branches start as identity)."""
    for p in module.parameters():
        nn.init.zeros_(p)
    return module


class GroupNorm32(nn.GroupNorm):
    """GroupNorm computed in (at least) float32 and cast back, as in the original.

    With ``keep_layout`` it is computed by :func:`group_norm_keep_layout`: the same function,
    but a channels-last input gives a channels-last output.
    """

    keep_layout = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.keep_layout:
            return group_norm_keep_layout(x, self.num_groups, self.weight, self.bias, self.eps)
        return super().forward(x.to(_norm_dtype(x))).type(x.dtype)


class GroupNormSiLU(GroupNorm32):
    """GroupNorm32, then SiLU: the normalisation in front of every convolution of the U-Net.

    With ``fused`` (and ``keep_layout``) the two are one function, :func:`group_norm_silu_keep_layout`.
    """

    fused = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.keep_layout and self.fused:
            return group_norm_silu_keep_layout(x, self.num_groups, self.weight, self.bias, self.eps)
        return F.silu(super().forward(x))


def _norm_dtype(x: torch.Tensor) -> torch.dtype:
    """The precision GroupNorm is computed in: float32, or the input's if it is wider."""
    return torch.promote_types(x.dtype, torch.float32)


def group_norm_keep_layout(
    x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """GroupNorm in float32, cast back to ``x``'s dtype, with an output of ``x``'s strides.

    ``F.group_norm`` (and its decomposition under ``torch.compile``) returns a contiguous
    tensor for a channels-last input; under ``torch.compile`` that is the layout the next
    convolution is handed, and cuDNN converts it back, forward and backward (75 copy kernels,
    16 ms of a 128^3 iteration on an H200). See :class:`_ChannelStatsGroupNorm` for how it is
    computed and differentiated.
    """
    return _ChannelStatsGroupNorm.apply(x, groups, weight, bias, eps, False)


def group_norm_silu_keep_layout(
    x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """``silu(group_norm_keep_layout(...))`` as one function, SiLU taken in float32 before the cast back.

    Its backward needs only ``x`` and the statistics: it recomputes the normalised values and
    SiLU's derivative on the fly. With GroupNorm and SiLU separate, SiLU's backward needs
    GroupNorm's output, which Inductor recomputed and wrote out in backward, and then read
    again in both of GroupNorm's backward passes.
    """
    return _ChannelStatsGroupNorm.apply(x, groups, weight, bias, eps, True)


class _ChannelStatsGroupNorm(torch.autograd.Function):
    """GroupNorm from per-channel sums, forward and backward, in as few passes over ``x`` as it allows.

    Reducing each group directly is slow on channels-last: a group's channels are a few
    adjacent values in every voxel, and Inductor's reduction over them ran at a few percent of
    memory bandwidth. So every reduction here is per channel, over voxels with the channels side
    by side (as BatchNorm does on channels-last), and is combined exactly per group: groups have
    equal-sized channels, so the group mean is the mean of the channel means and the group
    variance the mean of ``var_c + (mean_c - mean_g)^2``.

    The backward is written out rather than left to autograd, which differentiated the
    statistics through several full-size intermediates (five kernels and about 3.3 ms for one
    128-channel GroupNorm at 128^3 on an H100). With ``y = x * scale_c + shift_c`` and ``g``
    the incoming gradient, GroupNorm's gradient is an affine function of ``g`` and ``x`` per
    channel whose coefficients need only the per-channel sums of ``g`` and ``g * x``: one
    reduction pass and one elementwise pass. With ``silu`` the output is SiLU of GroupNorm's, and
    ``g`` is first taken through SiLU's derivative at GroupNorm's output, recomputed from ``x``.

    The per-channel constants of each elementwise pass (scale and shift forward, the three
    coefficients backward) are stacked into one small tensor, the forward's saved for backward, and
    on large volumes passed through :func:`per_channel_constants` (see :func:`_computed_once`), so
    that Inductor computes them once. Left to it, they were inlined into the full-size kernels and
    recomputed for every voxel from the statistics, a dozen loads and a reciprocal square root per
    value, which made those kernels compute-bound (about 2.2 TB/s on an H200 where a plain
    elementwise pass moves 4.3 TB/s).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor, eps: float, silu: bool):  # type: ignore[override]
        xf = x.to(_norm_dtype(x))
        var_c, mean_c = torch.var_mean(xf, dim=_voxel_dims(x), correction=0)
        mean = _group_mean(mean_c, groups)
        rstd = torch.rsqrt(_group_mean(var_c + (mean_c - mean).square(), groups) + eps)
        scale = rstd * weight
        stats = _computed_once(torch.stack([scale, bias - mean * scale, mean, rstd]), x)
        ctx.save_for_backward(x, weight, stats)
        ctx.groups, ctx.silu = groups, silu
        y = _affine(xf, stats[0], stats[1])
        return (F.silu(y) if silu else y).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        x, weight, stats = ctx.saved_tensors
        scale, shift, mean, rstd = stats.unbind(0)
        xf, g = x.to(_norm_dtype(x)), grad_out.to(_norm_dtype(x))
        if ctx.silu:
            # Through SiLU: silu'(y) = s (1 + y (1 - s)), s = sigmoid(y), y recomputed from x.
            y = _affine(xf, scale, shift)
            s = torch.sigmoid(y)
            g = g * s * (1 + y * (1 - s))
        dims = _voxel_dims(x)
        sum_g = g.sum(dims)
        sum_gx = (g * xf).sum(dims)
        # Per channel: sum of g * x_hat, with x_hat = (x - mean) * rstd.
        sum_g_xhat = rstd * (sum_gx - mean * sum_g)
        grad_weight = sum_g_xhat.sum(0).to(weight.dtype)
        grad_bias = sum_g.sum(0).to(weight.dtype)
        # dx = rstd * (w g - mean_group(w g) - x_hat * mean_group(w g x_hat)), each group mean
        # taken over its channels and voxels, regrouped as coef_g * g + coef_x * x + const.
        voxels = math.prod(x.shape[2:])
        mean_wg = _group_mean(weight * sum_g, ctx.groups) / voxels
        mean_wg_xhat = _group_mean(weight * sum_g_xhat, ctx.groups) / voxels
        coef_g, coef_x, const = _computed_once(
            torch.stack([scale, -rstd.square() * mean_wg_xhat, rstd * (rstd * mean * mean_wg_xhat - mean_wg)]), x
        )
        grad_x = g * _per_channel(coef_g, x) + xf * _per_channel(coef_x, x) + _per_channel(const, x)
        return grad_x.to(x.dtype), None, grad_weight, grad_bias, None, None


@torch.library.custom_op("meddpm::per_channel_constants", mutates_args=())
def per_channel_constants(values: torch.Tensor) -> torch.Tensor:
    """A copy of ``values`` that ``torch.compile`` computes as a tensor of its own.

    Inductor inlines an elementwise expression into every kernel that reads it; for a few
    per-channel numbers read by a full-size kernel that means recomputing them for every voxel.
    A custom operator is opaque to Inductor, so its input is computed once, into a buffer.
    """
    return values.clone()


@per_channel_constants.register_fake
def _(values: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(values)


per_channel_constants.register_autograd(lambda ctx, grad: grad)


# Computing GroupNorm's per-channel constants once saved 0.13 ms per 64-channel GroupNorm at 128^3
# on an H100 (forward and backward, against v6's per-voxel recompute; most of it comes from stacking
# them, see docs/performance.md, v7b). The operator adds a kernel and a host call, which below 64^3
# voxels, where the elementwise kernels are short, cost more than it could save.
_CONSTANTS_ONCE_MIN_VOXELS = 64**3


def _computed_once(values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``values`` through :func:`per_channel_constants` when ``x`` has enough voxels for that to pay."""
    return per_channel_constants(values) if math.prod(x.shape[2:]) >= _CONSTANTS_ONCE_MIN_VOXELS else values


def _affine(xf: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """``x * scale + shift`` with (n, c) ``scale`` and ``shift`` applied per channel."""
    return xf * _per_channel(scale, xf) + _per_channel(shift, xf)


def _group_mean(per_channel: torch.Tensor, groups: int) -> torch.Tensor:
    """The mean of (n, c) values over each group's channels, given back to every channel of the group."""
    n, c = per_channel.shape
    by_group = per_channel.view(n, groups, c // groups)
    return by_group.mean(-1, keepdim=True).expand_as(by_group).reshape(n, c)


def _voxel_dims(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(range(2, x.dim()))


def _per_channel(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(n, c) values shaped to broadcast over ``like``'s voxels."""
    return values.view(*values.shape, *(1,) * (like.dim() - 2))


def _add_bias(out: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``out`` plus a convolution's per-channel ``bias``, cast to ``out``'s dtype as autocast does."""
    return out + _per_channel(bias.to(out.dtype).expand(out.shape[0], -1), out)


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding of integer timesteps: [cos | sin] at geometric frequencies."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class Conv3d(nn.Conv3d):
    """``nn.Conv3d`` whose bias can be added after the convolution, as an elementwise op of its own.

    With ``bias_apart`` the convolution runs without bias and the bias is added to its output,
    the same function. Under ``torch.compile`` this matters: Inductor adds a convolution's own
    bias in a pass of its own over the output, which it must write out when the biased output is
    saved for backward (as in front of every GroupNorm). Added apart, the unbiased output is what
    is saved, and the add fuses into the kernels that read it.
    """

    bias_apart = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bias_apart and self.bias is not None:
            out = F.conv3d(x, self.weight, None, self.stride, self.padding, self.dilation, self.groups)
            return _add_bias(out, self.bias)
        return super().forward(x)


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
            # Interleaving even and odd outputs (stack, flatten) yields a contiguous tensor;
            # give the convolution the layout it was handed, or cuDNN converts it.
            layout = memory_format_of(x)
            for dim in (2, 3, 4):
                x = linear_upsample_2x(x, dim)
            x = x.contiguous(memory_format=layout)
        else:
            x = F.interpolate(x, scale_factor=2, mode="trilinear", align_corners=False)
        return self.conv(x)


def linear_upsample_2x(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Linear interpolation by 2 along ``dim`` (align_corners=False), from slices and sums.

    Output 2i is 3/4 x[i] + 1/4 x[i-1] and output 2i+1 is 3/4 x[i] + 1/4 x[i+1], edges
    clamped. Applied along D, H and W in turn this is trilinear interpolation, but built
    from elementwise ops: its backward is a gather that fuses, where interpolate's backward
    is a scatter with atomic adds (one kernel of 13 ms per 128^3 iteration on an H200).
    """
    n = x.shape[dim]
    before = torch.cat([x.narrow(dim, 0, 1), x.narrow(dim, 0, n - 1)], dim)
    after = torch.cat([x.narrow(dim, 1, n - 1), x.narrow(dim, n - 1, 1)], dim)
    even, odd = 0.75 * x + 0.25 * before, 0.75 * x + 0.25 * after
    return torch.stack([even, odd], dim + 1).flatten(dim, dim + 1)


class ThinConv3d(Conv3d):
    """A 3x3x3 convolution (stride 1, padding 1) to few channels, optionally computed tap by tap.

    cuDNN runs the denoiser's last convolution (64 -> 1 channel at 128^3) with Ampere-generation
    kernels whose tiles are mostly padding. With ``by_taps`` the same parameters compute the same
    function through :func:`conv3d_by_taps`.
    """

    by_taps = False

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.by_taps:
            return conv3d_by_taps(x, self.weight, self.bias)
        return super().forward(x)


def conv3d_by_taps(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """A stride-1 3-D convolution with zero padding k // 2, as one matrix product and a sum of shifted taps.

    ``out[o, v] = sum_t taps[o, t, v + offset_t]`` with ``taps[o, t, v] = sum_c w[o, c, t] x[c, v]``.
    The product is one GEMM over voxels on tensor cores (the channels are a channels-last ``x``'s
    contiguous dimension); the sum (:class:`_ShiftedTapSum`) and its gradient are elementwise.
    Zero padding of ``x`` is zero padding of ``taps``, as the product has no bias. The output has
    ``x``'s layout and the product's dtype.
    """
    n, c, *spatial = x.shape
    out_channels, _, *kernel = weight.shape
    voxels_last = x.permute(0, 2, 3, 4, 1).reshape(-1, c)
    taps = voxels_last @ weight.reshape(out_channels, c, -1).permute(1, 0, 2).flatten(1)
    by_tap = taps.view(n, *spatial, out_channels, *kernel).permute(0, 4, 5, 6, 7, 1, 2, 3)
    out = _ShiftedTapSum.apply(by_tap)
    if bias is not None:
        out = _add_bias(out, bias)
    return out.contiguous(memory_format=memory_format_of(x))


class _ShiftedTapSum(torch.autograd.Function):
    """``out[v] = sum_t taps[t, v + offset_t]`` over a 3-D kernel's taps, zero outside the volume.

    Input ``(n, c, kd, kh, kw, D, H, W)``, output ``(n, c, D, H, W)``, summed in (at least)
    float32. The gradient is written out as a gather, ``grad_taps[t, v] = grad_out[v - offset_t]``:
    autograd's own, the sum of 27 zero-padded slices, costs 27 masked loads per value under
    Inductor (0.72 ms of a 128^3 iteration on an H200, where a gather is a few tens of microseconds).
    """

    @staticmethod
    def forward(ctx, by_tap: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        kernel, spatial = by_tap.shape[2:5], by_tap.shape[5:]
        padded = F.pad(by_tap.to(_norm_dtype(by_tap)), _same_padding(kernel))
        out = sum(
            padded[:, :, i, j, k, i : i + spatial[0], j : j + spatial[1], k : k + spatial[2]]
            for i in range(kernel[0])
            for j in range(kernel[1])
            for k in range(kernel[2])
        )
        ctx.kernel = kernel
        return out.to(by_tap.dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        # windows[v, m] = padded grad_out[v + m], and tap t = k - 1 - m reads it (k odd).
        windows = F.pad(grad_out, _same_padding(ctx.kernel))
        for dim, k in zip((2, 3, 4), ctx.kernel):
            windows = windows.unfold(dim, k, 1)
        return windows.flip(-3, -2, -1).permute(0, 1, 5, 6, 7, 2, 3, 4)


def _same_padding(kernel: tuple[int, ...]) -> list[int]:
    """``F.pad``'s argument that pads each of the last ``len(kernel)`` sides by k // 2 at both ends."""
    return [p for k in reversed(kernel) for p in (k // 2, k // 2)]


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
        c = config.model_channels
        emb_dim = 4 * c
        groups, dropout = config.num_groups, config.dropout

        def res(ch_in: int, ch_out: int) -> ResBlock:
            return ResBlock(ch_in, ch_out, emb_dim, groups, dropout)

        self.time_embed = nn.Sequential(nn.Linear(c, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))

        ch = c * config.channel_mult[0]
        self.input_blocks = nn.ModuleList([EmbedSequential(Conv3d(config.in_channels, ch, 3, padding=1))])
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
        """Compute every GroupNorm with :func:`group_norm_keep_layout` (or not)."""
        self._switch(GroupNorm32, "keep_layout", enabled)

    def use_fused_norm_silu(self, enabled: bool = True) -> None:
        """Compute each layout-preserving GroupNorm and the SiLU after it as one function (or not)."""
        self._switch(GroupNormSiLU, "fused", enabled)

    def use_separable_upsample(self, enabled: bool = True) -> None:
        """Upsample with :func:`linear_upsample_2x` per axis instead of ``interpolate`` (or not)."""
        self._switch(Upsample, "separable", enabled)

    def use_output_conv_by_taps(self, enabled: bool = True) -> None:
        """Compute the last convolution with :func:`conv3d_by_taps` (or not)."""
        self._switch(ThinConv3d, "by_taps", enabled)

    def use_conv_bias_apart(self, enabled: bool = True) -> None:
        """Add every 3-D convolution's bias as an elementwise op after it (or inside it)."""
        self._switch(Conv3d, "bias_apart", enabled)

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
            h = block(torch.cat([h, skips.pop()], dim=1), emb)
        return self.out(h)
