"""Tried and not kept (issue 22): meddpm/kernels/few_channel_convolution.py as measured in h200-5
(with few-channel-triton-kernels.patch, which wires it in). The first convolution from few input
channels as two Triton kernels (triton_op): each program gathers the taps of a block of voxels from
the input zero-padded by one voxel and multiplies them with the weights on tensor cores; the weight
gradient gathers them again and reduces taps^T @ grad, one partial sum per program. It failed
perf_tests/test_parity.py::test_fast_keeps_the_bf16_bounds at batch 2 under torch.compile (h200-5)."""

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

_FORWARD_BLOCK = 128
_WEIGHT_GRAD_BLOCK = 64
_WEIGHT_GRAD_PROGRAMS = 264


@triton.jit
def _taps(x_ptr, v, j, voxels, D, H, W, sn, sc, sd, sh, sw, C: tl.constexpr, ROW: tl.constexpr):
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
def _forward_kernel(x_ptr, w_ptr, out_ptr, voxels, D, H, W, sn, sc, sd, sh, sw,
                    C: tl.constexpr, ROW: tl.constexpr, KP: tl.constexpr, OUT: tl.constexpr, BLOCK: tl.constexpr):
    v = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    j = tl.arange(0, KP)
    o = tl.arange(0, OUT)
    taps = _taps(x_ptr, v, j, voxels, D, H, W, sn, sc, sd, sh, sw, C, ROW).to(w_ptr.dtype.element_ty)
    weights = tl.load(w_ptr + j[:, None] * OUT + o[None, :], mask=(j < ROW)[:, None], other=0.0)
    out = tl.dot(taps, weights)
    tl.store(out_ptr + v[:, None] * OUT + o[None, :], out.to(out_ptr.dtype.element_ty), mask=(v < voxels)[:, None])


@triton.jit
def _weight_grad_kernel(x_ptr, g_ptr, partial_ptr, voxels, blocks_per_program, D, H, W, sn, sc, sd, sh, sw,
                        C: tl.constexpr, ROW: tl.constexpr, KP: tl.constexpr, OUT: tl.constexpr, BLOCK: tl.constexpr):
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


def supported(x, weight, dtype):
    out_channels, in_channels, *kernel = weight.shape
    return (x.is_cuda and x.dim() == 5 and kernel == [3, 3, 3] and 27 * in_channels <= 128
            and out_channels in (16, 32, 64, 128) and dtype in (torch.bfloat16, torch.float16))


@triton_op("meddpm::few_channel_conv3d", mutates_args=())
def few_channel_conv3d(padded: torch.Tensor, by_tap: torch.Tensor) -> torch.Tensor:
    n, c, *spatial = padded.shape
    d, h, w = (size - 2 for size in spatial)
    rows, out_channels = by_tap.shape
    voxels = n * d * h * w
    out = torch.empty((voxels, out_channels), device=padded.device, dtype=by_tap.dtype)
    wrap_triton(_forward_kernel)[(triton.cdiv(voxels, _FORWARD_BLOCK),)](
        padded, by_tap, out, voxels, d, h, w, *padded.stride(),
        C=c, ROW=rows, KP=_padded(rows), OUT=out_channels, BLOCK=_FORWARD_BLOCK, num_warps=4)
    return out


@triton_op("meddpm::few_channel_conv3d_weight_grad", mutates_args=())
def few_channel_conv3d_weight_grad(padded: torch.Tensor, grad: torch.Tensor, rows: int) -> torch.Tensor:
    n, c, *spatial = padded.shape
    d, h, w = (size - 2 for size in spatial)
    voxels, out_channels = grad.shape
    blocks_per_program = triton.cdiv(triton.cdiv(voxels, _WEIGHT_GRAD_BLOCK), _WEIGHT_GRAD_PROGRAMS)
    programs = triton.cdiv(voxels, _WEIGHT_GRAD_BLOCK * blocks_per_program)
    width = _padded(rows)
    partial = torch.empty((programs, width, out_channels), device=padded.device, dtype=torch.float32)
    wrap_triton(_weight_grad_kernel)[(programs,)](
        padded, grad, partial, voxels, blocks_per_program, d, h, w, *padded.stride(),
        C=c, ROW=rows, KP=width, OUT=out_channels, BLOCK=_WEIGHT_GRAD_BLOCK, num_warps=4)
    return partial.sum(0)[:rows]


def _setup_context(ctx, inputs, output):
    padded, by_tap = inputs
    ctx.save_for_backward(padded)
    ctx.rows = by_tap.shape[0]
    ctx.dtype = by_tap.dtype


def _backward(ctx, grad):
    (padded,) = ctx.saved_tensors
    return None, few_channel_conv3d_weight_grad(padded, grad.contiguous(), ctx.rows).to(ctx.dtype)


few_channel_conv3d.register_autograd(_backward, setup_context=_setup_context)


def _padded(rows):
    return max(16, triton.next_power_of_2(rows))
