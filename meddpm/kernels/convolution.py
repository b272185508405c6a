"""Convolutions computed otherwise: the bias added apart, and thin convolutions tap by tap.

Replace ``F.conv3d`` with its bias (:class:`~meddpm.model.nn.Conv3d`, combo flag ``conv_bias_apart``)
and, for the denoiser's last convolution, ``F.conv3d`` itself (:class:`~meddpm.model.nn.ThinConv3d`,
combo flag ``output_conv_by_taps``), and for its first (:class:`~meddpm.model.nn.InputConv3d`, combo
flag ``input_conv_by_taps``; fast v9 and v10, docs/performance.md). Why (docs/performance.md, fast v5 and v7a): under
``torch.compile`` Inductor adds a convolution's bias in a pass of its own and writes the biased output
out where it is saved for backward (a full pass over each output so saved; added apart, the bias fuses
into the kernels that read the output); and cuDNN runs the 64 -> 1 channel convolution at 128^3 with
Ampere-generation kernels whose tiles are mostly padding, and copies around them, where a GEMM to the 27
taps and a sum of shifted taps, its gradient written out as a gather, is a GEMM on tensor cores and
elementwise passes.
Checked against ``F.conv3d`` by ``tests/test_model.py``: ``test_convolution_by_taps_is_the_convolution``
(output and every gradient, 1e-10 in float64, both layouts),
``test_convolution_by_taps_under_autocast_gives_the_products_dtype`` (both functions),
``test_convolution_by_gathered_taps_is_the_convolution`` and
``test_kernel_variants_compute_the_same_denoiser`` (every switch, the whole denoiser); on a GPU by
``test_few_channel_kernels_are_the_convolution`` (the first convolution's Triton kernels against cuDNN)
and, under ``torch.compile``, by ``perf_tests/test_parity.py::test_fast_keeps_the_bf16_bounds``.
"""

from __future__ import annotations

import importlib.util
import math

import torch
import torch.nn.functional as F

from meddpm.kernels.common import memory_format_of, norm_dtype, per_channel
from meddpm.kernels.operators import inlined_operator

# CPU-only installs of PyTorch come without Triton.
if importlib.util.find_spec("triton") is not None:
    from meddpm.kernels import few_channel_convolution
else:
    few_channel_convolution = None


def add_bias(out: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``out`` plus a convolution's per-channel ``bias``, cast to ``out``'s dtype as autocast does."""
    return out + per_channel(bias.to(out.dtype).expand(out.shape[0], -1), out)


def conv3d_by_taps(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """A stride-1 3-D convolution with zero padding k // 2, as one matrix product and a sum of shifted taps.

    ``out[o, v] = sum_t taps[o, t, v + offset_t]`` with ``taps[o, t, v] = sum_c w[o, c, t] x[c, v]``.
    The product is one GEMM over voxels on tensor cores; the sum (:func:`_shifted_tap_sum`) and its
    gradient are elementwise. Zero padding of ``x`` is zero padding of ``taps``, as the product has no
    bias. The output has ``x``'s layout and the product's dtype.
    """
    n, c, *spatial = x.shape
    out_channels, _, *kernel = weight.shape
    # Taps as rows and voxels as columns, so that each tap's shifted read in the sum is contiguous
    # (with a voxel's 27 taps side by side the sum made 27 strided loads a value; docs/performance.md). A
    # channels-last x is read in place as the column-major (c, voxels) operand, and autograd gives
    # its gradient the same strides.
    channels_by_voxel = x.permute(1, 0, 2, 3, 4).reshape(c, -1)
    taps = weight.permute(0, 2, 3, 4, 1).reshape(-1, c) @ channels_by_voxel
    by_tap = taps.view(out_channels, *kernel, n, *spatial).permute(4, 0, 1, 2, 3, 5, 6, 7)
    out = _shifted_tap_sum_op(by_tap)
    if bias is not None:
        out = add_bias(out, bias)
    return out.contiguous(memory_format=memory_format_of(x))


def conv3d_by_gathered_taps(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """A stride-1 3-D convolution with zero padding k // 2, as a gather of shifted inputs and one matrix product.

    For few input channels: ``taps[v, (t, c)] = x[c, v + offset_t]`` (zero outside the volume) holds
    each voxel's taps of every channel side by side in one row, written by one elementwise pass, and
    ``out[v, o] = sum_(t, c) taps[v, (t, c)] w[o, c, t]`` is a GEMM on tensor cores whose output is
    channels-last. The rows are padded with zeros to a multiple of 8 values (16 bytes in bf16): with
    the 81 of 3 channels cuBLAS ran an unaligned Turing-generation kernel (docs/performance.md). Under autocast
    the taps are gathered in its dtype, as the convolution would cast its input. The output is
    channels-last whatever ``x``'s layout (the layout ``fast`` uses), in the product's dtype. Meant
    for a first layer, whose input needs no gradient: the gather's own gradient is a scatter.

    On a GPU, where Triton is installed and :func:`~meddpm.kernels.few_channel_convolution.applies`
    (3x3x3 over at most 4 channels, in bf16 or fp16, an input without gradient), Triton kernels of our
    own gather the taps in registers instead of writing them out (fast v10, docs/performance.md).
    """
    n, c, *spatial = x.shape
    out_channels, _, *kernel = weight.shape
    if torch.is_autocast_enabled(x.device.type):
        x = x.to(torch.get_autocast_dtype(x.device.type))
    row = c * math.prod(kernel)
    padded = F.pad(x, _same_padding(kernel))  # (n, c, D+2, H+2, W+2)
    by_tap = weight.permute(2, 3, 4, 1, 0).reshape(row, out_channels)  # rows in (tap, channel) order
    if few_channel_convolution is not None and few_channel_convolution.applies(x, weight):
        by_voxel = few_channel_convolution.conv3d_few_channels(padded, by_tap.to(x.dtype))
    else:
        aligned = -(-row // 8) * 8
        windows = padded.permute(0, 2, 3, 4, 1)  # (n, D+2, H+2, W+2, c)
        for dim, k in zip((1, 2, 3), kernel):
            windows = windows.unfold(dim, k, 1)  # (n, D, H, W, c, kd, kh, kw)
        taps = F.pad(windows.permute(0, 1, 2, 3, 5, 6, 7, 4).reshape(-1, row), (0, aligned - row))
        by_voxel = taps @ F.pad(by_tap, (0, 0, 0, aligned - row))
    out = by_voxel.view(n, *spatial, out_channels).permute(0, 4, 1, 2, 3)
    return add_bias(out, bias) if bias is not None else out


def _shifted_tap_sum(by_tap: torch.Tensor) -> torch.Tensor:
    """``out[v] = sum_t taps[t, v + offset_t]`` over a 3-D kernel's taps, zero outside the volume.

    Input ``(n, c, kd, kh, kw, D, H, W)``, output ``(n, c, D, H, W)``, summed in (at least)
    float32. Its gradient (:func:`_shifted_tap_sum_backward`) is written out as a gather: autograd's
    own, the sum of 27 zero-padded slices, costs 27 masked loads per value under Inductor, where a
    gather reads each value once (docs/performance.md, fast v5).
    """
    kernel, spatial = by_tap.shape[2:5], by_tap.shape[5:]
    padded = F.pad(by_tap.to(norm_dtype(by_tap)), _same_padding(kernel))
    out = sum(
        padded[:, :, i, j, k, i : i + spatial[0], j : j + spatial[1], k : k + spatial[2]]
        for i in range(kernel[0])
        for j in range(kernel[1])
        for k in range(kernel[2])
    )
    return out.to(by_tap.dtype)


def _shifted_tap_sum_backward(grad_out: torch.Tensor, kernel: list[int]) -> torch.Tensor:
    """The gradient of :func:`_shifted_tap_sum`: ``grad_taps[t, v] = grad_out[v - offset_t]``."""
    # windows[v, m] = padded grad_out[v + m], and tap t = k - 1 - m reads it (k odd).
    windows = F.pad(grad_out, _same_padding(kernel))
    for dim, k in zip((2, 3, 4), kernel):
        windows = windows.unfold(dim, k, 1)
    return windows.flip(-3, -2, -1).permute(0, 1, 5, 6, 7, 2, 3, 4)


# The functions are their own fakes: they are used once per model, and their outputs' strides
# follow from their ops.
_shifted_tap_sum_op = inlined_operator("shifted_tap_sum", _shifted_tap_sum, fake=_shifted_tap_sum)
_shifted_tap_sum_backward_op = inlined_operator(
    "shifted_tap_sum_backward", _shifted_tap_sum_backward, fake=_shifted_tap_sum_backward
)
_shifted_tap_sum_op.register_autograd(
    lambda ctx, grad_out: _shifted_tap_sum_backward_op(grad_out, ctx.kernel),
    setup_context=lambda ctx, inputs, output: setattr(ctx, "kernel", list(inputs[0].shape[2:5])),
)


def _same_padding(kernel: tuple[int, ...]) -> list[int]:
    """``F.pad``'s argument that pads each of the last ``len(kernel)`` sides by k // 2 at both ends."""
    return [p for k in reversed(kernel) for p in (k // 2, k // 2)]
