"""The first convolution (3x3x3, padding 1, from few channels) as two Triton kernels of our own.

cuDNN runs the denoiser's first convolution (3 -> 64 channels at 128^3) with Ampere-generation
kernels, and its gather-and-GEMM form (:func:`~meddpm.kernels.convolution.conv3d_by_gathered_taps`)
writes 88 taps per voxel out and reads them back. Here each program gathers the taps of a block of
voxels from the input, zero-padded by one voxel, straight into registers and multiplies them with
the weights on tensor cores; the weight gradient gathers them again and reduces ``taps^T @ grad``,
one partial sum per program (docs/performance.md, fast v10).

The kernels run as opaque custom operators, which read their tensors' real strides and run their
own code when called. As ``triton_op`` (the kernel launches traced into Inductor's graph, their
arguments fixed at trace time) the same kernels failed ``test_fast_keeps_the_bf16_bounds`` at
batch 2, while the forward alone, compiled at that shape, was right, so the cause was not pinned down
(docs/performance.md, fast v10). As opaque operators they pass that test and
``tests/test_model.py::test_few_channel_kernels_are_the_convolution`` (eager and compiled) on a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from meddpm.kernels.operators import opaque_operator

_FORWARD_BLOCK = 128
_WEIGHT_GRAD_BLOCK = 64
# Enough programs to fill the 132 SMs of a Hopper card twice; each writes a float32 partial sum (128 x 64 for 81 taps).
_WEIGHT_GRAD_PROGRAMS = 264


def applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether these kernels compute ``F.conv3d(x, weight, padding=1)`` in ``x``'s dtype: a CUDA input
    in bf16 or fp16 that needs no gradient, a 3x3x3 kernel over at most 4 channels, 16-128 outputs."""
    out_channels, in_channels, *kernel = weight.shape
    return (
        x.is_cuda
        and not x.requires_grad
        and x.dim() == 5
        and kernel == [3, 3, 3]
        and 27 * in_channels <= 128
        and out_channels in (16, 32, 64, 128)
        and x.dtype in (torch.bfloat16, torch.float16)
    )


@triton.jit
def _taps(x_ptr, v, j, voxels, D, H, W, sn, sc, sd, sh, sw, C: tl.constexpr, ROW: tl.constexpr):
    # Row v of the gathered taps: voxel v's 27 shifted values of each of C channels, in (tap, channel)
    # order, read from the padded input; columns from ROW on (alignment for tl.dot) are zero.
    w = v % W
    h = (v // W) % H
    d = (v // (W * H)) % D
    n = v // (W * H * D)
    t = j // C
    column = (j % C) * sc + (t // 9) * sd + ((t // 3) % 3) * sh + (t % 3) * sw
    row = n * sn + d * sd + h * sh + w * sw
    mask = (v < voxels)[:, None] & (j < ROW)[None, :]
    return tl.load(x_ptr + row[:, None] + column[None, :], mask=mask, other=0.0)


@triton.jit
def _forward_kernel(
    x_ptr, w_ptr, out_ptr, voxels, D, H, W, sn, sc, sd, sh, sw,
    C: tl.constexpr, ROW: tl.constexpr, KP: tl.constexpr, OUT: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    v = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    j = tl.arange(0, KP)
    o = tl.arange(0, OUT)
    taps = _taps(x_ptr, v, j, voxels, D, H, W, sn, sc, sd, sh, sw, C, ROW).to(w_ptr.dtype.element_ty)
    weights = tl.load(w_ptr + j[:, None] * OUT + o[None, :], mask=(j < ROW)[:, None], other=0.0)
    out = tl.dot(taps, weights)
    tl.store(out_ptr + v[:, None] * OUT + o[None, :], out.to(out_ptr.dtype.element_ty), mask=(v < voxels)[:, None])


@triton.jit
def _weight_grad_kernel(
    x_ptr, g_ptr, partial_ptr, voxels, blocks_per_program, D, H, W, sn, sc, sd, sh, sw,
    C: tl.constexpr, ROW: tl.constexpr, KP: tl.constexpr, OUT: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    program = tl.program_id(0)
    j = tl.arange(0, KP)
    o = tl.arange(0, OUT)
    acc = tl.zeros((KP, OUT), dtype=tl.float32)
    for i in range(blocks_per_program):
        v = (program * blocks_per_program + i) * BLOCK + tl.arange(0, BLOCK)
        grad = tl.load(g_ptr + v[:, None] * OUT + o[None, :], mask=(v < voxels)[:, None], other=0.0)
        taps = _taps(x_ptr, v, j, voxels, D, H, W, sn, sc, sd, sh, sw, C, ROW).to(grad.dtype)
        acc = tl.dot(tl.trans(taps), grad, acc)
    tl.store(partial_ptr + program * KP * OUT + j[:, None] * OUT + o[None, :], acc)


def _conv3d(padded: torch.Tensor, by_tap: torch.Tensor) -> torch.Tensor:
    # padded: (n, c, D + 2, H + 2, W + 2), any strides; by_tap: (27 c, out) in (tap, channel) rows.
    n, c, *spatial = padded.shape
    d, h, w = (size - 2 for size in spatial)
    rows, out_channels = by_tap.shape
    voxels = n * d * h * w
    out = torch.empty((voxels, out_channels), device=padded.device, dtype=by_tap.dtype)
    _forward_kernel[(triton.cdiv(voxels, _FORWARD_BLOCK),)](
        padded, by_tap.contiguous(), out, voxels, d, h, w, *padded.stride(),
        C=c, ROW=rows, KP=_reduction_width(rows), OUT=out_channels, BLOCK=_FORWARD_BLOCK, num_warps=4,
    )  # fmt: skip
    return out


def _conv3d_fake(padded: torch.Tensor, by_tap: torch.Tensor) -> torch.Tensor:
    n, _, *spatial = padded.shape
    voxels = n * (spatial[0] - 2) * (spatial[1] - 2) * (spatial[2] - 2)
    return by_tap.new_empty((voxels, by_tap.shape[1]))


def _weight_grad(padded: torch.Tensor, grad: torch.Tensor, rows: int) -> torch.Tensor:
    n, c, *spatial = padded.shape
    d, h, w = (size - 2 for size in spatial)
    grad = grad.contiguous()
    voxels, out_channels = grad.shape
    blocks_per_program = triton.cdiv(triton.cdiv(voxels, _WEIGHT_GRAD_BLOCK), _WEIGHT_GRAD_PROGRAMS)
    programs = triton.cdiv(voxels, _WEIGHT_GRAD_BLOCK * blocks_per_program)
    width = _reduction_width(rows)
    partial = torch.empty((programs, width, out_channels), device=padded.device, dtype=torch.float32)
    _weight_grad_kernel[(programs,)](
        padded, grad, partial, voxels, blocks_per_program, d, h, w, *padded.stride(),
        C=c, ROW=rows, KP=width, OUT=out_channels, BLOCK=_WEIGHT_GRAD_BLOCK, num_warps=4,
    )  # fmt: skip
    return partial.sum(0)[:rows]


def _weight_grad_fake(padded: torch.Tensor, grad: torch.Tensor, rows: int) -> torch.Tensor:
    return grad.new_empty((rows, grad.shape[1]), dtype=torch.float32)


conv3d_few_channels = opaque_operator("few_channel_conv3d", _conv3d, fake=_conv3d_fake)
_weight_grad_op = opaque_operator("few_channel_conv3d_weight_grad", _weight_grad, fake=_weight_grad_fake)


def _setup_context(ctx, inputs, output):
    padded, by_tap = inputs
    ctx.save_for_backward(padded)
    ctx.rows = by_tap.shape[0]
    ctx.dtype = by_tap.dtype


def _backward(ctx, grad):
    (padded,) = ctx.saved_tensors
    return None, _weight_grad_op(padded, grad, ctx.rows).to(ctx.dtype)


conv3d_few_channels.register_autograd(_backward, setup_context=_setup_context)


def _reduction_width(rows: int) -> int:
    # tl.dot takes power-of-two blocks of at least 16 along the reduction.
    return max(16, triton.next_power_of_2(rows))
