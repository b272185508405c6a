"""GroupNorm that keeps the input's layout, with a written-out backward, optionally fused with SiLU.

Replaces ``F.group_norm`` in float32 (:class:`~meddpm.model.nn.GroupNorm32`, combo flag
``layout_preserving_norm``) and the SiLU after it (:class:`~meddpm.model.nn.GroupNormSiLU`, combo flag
``fused_norm_silu``). Why (docs/performance.md, fast v3, v4a, v6a, v7b, v8): ``F.group_norm`` returns a
contiguous tensor for a channels-last input, which cuDNN converted back around every convolution; group-wise
reductions ran at a few percent of bandwidth on channels-last; autograd's backward took five kernels, several
times the traffic it needs; SiLU's backward made Inductor write GroupNorm's output out and read it twice;
per-voxel recomputation of the per-channel constants made the elementwise passes compute-bound, and
``torch.var_mean``'s Welford reduction the statistics. Checked against the reference ops by
``tests/test_model.py``: ``test_layout_preserving_group_norm_is_group_norm`` (values, 1e-12 in float64),
``test_layout_preserving_group_norm_statistics_survive_a_large_mean`` (float32 statistics),
``test_layout_preserving_norms_have_the_references_values_and_gradients`` (values and every gradient against
``F.group_norm`` and ``silu(F.group_norm)``, both layouts, both sides of the constants-once threshold),
``test_layout_preserving_group_norm_computes_in_float32_and_casts_back``,
``test_kernel_variants_compute_the_same_denoiser`` and, for the layout,
``test_fast_configuration_hands_every_convolution_channels_last``; on a GPU, under ``torch.compile``, by
``perf_tests/test_parity.py::test_fast_keeps_the_bf16_bounds``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from meddpm.kernels.common import norm_dtype, per_channel
from meddpm.kernels.operators import inlined_operator


def group_norm_keep_layout(
    x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """GroupNorm in float32, cast back to ``x``'s dtype, with an output of ``x``'s strides.

    ``F.group_norm`` (and its decomposition under ``torch.compile``) returns a contiguous
    tensor for a channels-last input; under ``torch.compile`` that is the layout the next
    convolution is handed, and cuDNN converts it back, forward and backward (a copy kernel around
    every convolution; docs/performance.md, fast v3). See :func:`_group_norm` for how it is computed and
    :func:`_group_norm_backward` for how it is differentiated.
    """
    return _group_norm_op(x, weight, bias, groups, eps, False)[0]


def group_norm_silu_keep_layout(
    x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """``silu(group_norm_keep_layout(...))`` as one function, SiLU taken in float32 before the cast back.

    Its backward needs only ``x`` and the statistics: it recomputes the normalised values and
    SiLU's derivative on the fly. With GroupNorm and SiLU separate, SiLU's backward needs
    GroupNorm's output, which Inductor recomputed and wrote out in backward, and then read
    again in both of GroupNorm's backward passes.
    """
    return _group_norm_op(x, weight, bias, groups, eps, True)[0]


def _group_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, groups: int, eps: float, silu: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """GroupNorm (then SiLU if ``silu``) from per-channel sums, and the statistics its backward needs.

    Reducing each group directly is slow on channels-last: a group's channels are a few
    adjacent values in every voxel, and Inductor's reduction over them ran at a few percent of
    memory bandwidth. So every reduction here is per channel, over voxels with the channels side
    by side (as BatchNorm does on channels-last), and is combined exactly per group: groups have
    equal-sized channels, so the group mean is the mean of the channel means and the group
    variance the mean of ``var_c + (mean_c - mean_g)^2``.

    The per-channel constants of each elementwise pass (scale and shift forward, the three
    coefficients backward) are stacked into one small tensor, the forward's returned for backward
    as ``stats`` (scale, shift, mean, rstd), and on large volumes passed through
    :func:`per_channel_constants` (see :func:`_computed_once`), so that Inductor computes them once.
    Left to it, they were inlined into the full-size kernels and recomputed for every voxel from
    the statistics, a dozen loads and a reciprocal square root per value, which made those kernels
    compute-bound, at about half the bandwidth of a plain elementwise pass (docs/performance.md, fast v7b).
    """
    xf = x.to(norm_dtype(x))
    mean_c, var_c = _channel_mean_var(xf)
    mean = _group_mean(mean_c, groups)
    rstd = torch.rsqrt(_group_mean(var_c + (mean_c - mean).square(), groups) + eps)
    scale = rstd * weight
    stats = _computed_once(torch.stack([scale, bias - mean * scale, mean, rstd]), x)
    y = _affine(xf, stats[0], stats[1])
    return (F.silu(y) if silu else y).to(x.dtype), stats


def _channel_mean_var(xf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and (biased) variance over the voxels, from sums of the shifted values.

    Two plain sums in one pass, where ``torch.var_mean`` is a Welford reduction under Inductor,
    whose per-value division made it compute-bound, at more than twice the time of plain sums
    (docs/performance.md). Each channel is shifted by its first voxel's value, a guess at its mean,
    so that ``E[d^2] - E[d]^2`` does not cancel when the mean is large against the spread; shifted,
    the sums still cut the model's Triton time (docs/performance.md, fast v8).
    """
    dims = _voxel_dims(xf)
    shift = xf[(slice(None), slice(None), *(0,) * len(dims))]
    d = xf - per_channel(shift, xf)
    voxels = math.prod(xf.shape[2:])
    mean_d = d.sum(dims) / voxels
    var = (d.square().sum(dims) / voxels - mean_d.square()).clamp_min(0)
    return shift + mean_d, var


def _group_norm_backward(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, stats: torch.Tensor, groups: int, silu: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`_group_norm` for ``x``, ``weight`` and ``bias``, written out.

    Autograd differentiated the statistics through several full-size intermediates (five kernels,
    several times the traffic; docs/performance.md, fast v4a). With
    ``y = x * scale_c + shift_c`` and ``g`` the incoming gradient, GroupNorm's gradient is an
    affine function of ``g`` and ``x`` per channel whose coefficients need only the per-channel
    sums of ``g`` and ``g * x``: one reduction pass and one elementwise pass. With ``silu`` the
    output is SiLU of GroupNorm's, and ``g`` is first taken through SiLU's derivative at
    GroupNorm's output, recomputed from ``x``.
    """
    scale, shift, mean, rstd = stats.unbind(0)
    xf, g = x.to(norm_dtype(x)), grad_out.to(norm_dtype(x))
    if silu:
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
    mean_wg = _group_mean(weight * sum_g, groups) / voxels
    mean_wg_xhat = _group_mean(weight * sum_g_xhat, groups) / voxels
    coef_g, coef_x, const = _computed_once(
        torch.stack([scale, -rstd.square() * mean_wg_xhat, rstd * (rstd * mean * mean_wg_xhat - mean_wg)]), x
    )
    grad_x = g * per_channel(coef_g, x) + xf * per_channel(coef_x, x) + per_channel(const, x)
    return grad_x.to(x.dtype), grad_weight, grad_bias


def _stats_dtype(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.dtype:
    return torch.promote_types(torch.promote_types(norm_dtype(x), weight.dtype), bias.dtype)


_group_norm_op = inlined_operator(
    "group_norm",
    _group_norm,
    fake=lambda x, weight, bias, groups, eps, silu: (
        torch.empty_like(x),
        x.new_empty((4, *x.shape[:2]), dtype=_stats_dtype(x, weight, bias)),
    ),
)
_group_norm_backward_op = inlined_operator(
    "group_norm_backward",
    _group_norm_backward,
    fake=lambda grad_out, x, weight, stats, groups, silu: (
        torch.empty_like(x),
        torch.empty_like(weight),
        torch.empty_like(weight),
    ),
)


def _save_for_backward(ctx, inputs, output) -> None:
    x, weight, _, groups, _, silu = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.groups, ctx.silu = groups, silu


def _differentiate(ctx, grad_out: torch.Tensor, _grad_stats: torch.Tensor | None):
    x, weight, stats = ctx.saved_tensors
    grad_x, grad_weight, grad_bias = _group_norm_backward_op(grad_out, x, weight, stats, ctx.groups, ctx.silu)
    return grad_x, grad_weight, grad_bias, None, None, None


_group_norm_op.register_autograd(_differentiate, setup_context=_save_for_backward)


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


# Computing GroupNorm's per-channel constants once, rather than per voxel, pays on large volumes (most of the
# gain comes from stacking them; docs/performance.md, fast v7b). The operator adds a kernel and a host call,
# which below 64^3 voxels, where the elementwise kernels are short, cost more than it could save.
_CONSTANTS_ONCE_MIN_VOXELS = 64**3


def _computed_once(values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``values`` through :func:`per_channel_constants` when ``x`` has enough voxels for that to pay."""
    return per_channel_constants(values) if math.prod(x.shape[2:]) >= _CONSTANTS_ONCE_MIN_VOXELS else values


def _affine(xf: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """``x * scale + shift`` with (n, c) ``scale`` and ``shift`` applied per channel."""
    return xf * per_channel(scale, xf) + per_channel(shift, xf)


def _group_mean(per_channel: torch.Tensor, groups: int) -> torch.Tensor:
    """The mean of (n, c) values over each group's channels, given back to every channel of the group."""
    n, c = per_channel.shape
    by_group = per_channel.view(n, groups, c // groups)
    return by_group.mean(-1, keepdim=True).expand_as(by_group).reshape(n, c)


def _voxel_dims(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(range(2, x.dim()))
