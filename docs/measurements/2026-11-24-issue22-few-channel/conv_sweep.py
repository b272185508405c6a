"""Prepared for the next GPU session, NOT YET RUN on a GPU (issue 22): can a Triton implicit-GEMM 3x3x3
convolution, with GroupNorm's apply and SiLU fused into its operand load, beat cuDNN plus the
elementwise pass it replaces at 128^3?

v10's forward convolutions at 128^3 (gemm_shapes.py, h200-5): 64 -> 64 at 763 us each (608 TFLOP/s),
128 -> 64 at 1.67 ms (556 TFLOP/s). Each is fed by a GroupNorm + SiLU pass that reads and writes the
activation. The kernel below computes ``conv3d(silu(x * scale + shift), w, padding=1)`` for a
channels-last bf16 ``x`` (``scale``, ``shift``: per sample and channel, GroupNorm's constants), one
program per block of voxels and all output channels, the 27 taps x input channels as its reduction;
zero padding applies to the normalised activation, as in the model.

Prints, per configuration: cuDNN's convolution alone, cuDNN plus the elementwise pass (what the
model runs), the Triton kernel without and with the fused prologue, all with triton.testing.do_bench
(median), and the largest error against float64. With TRITON_INTERPRET=1 on a CPU it checks the
kernel's values on a small volume only (what was done before committing).

    python3 docs/measurements/2026-11-24-issue22-few-channel/conv_sweep.py            # GPU
    TRITON_INTERPRET=1 python3 docs/measurements/2026-11-24-issue22-few-channel/conv_sweep.py --check
"""

import argparse
import itertools
from functools import partial

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _conv3d_kernel(
    x_ptr, w_ptr, scale_ptr, shift_ptr, out_ptr, D, H, W, voxels,
    CIN: tl.constexpr, COUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, PROLOGUE: tl.constexpr,
):  # fmt: skip
    v = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    w = v % W
    h = (v // W) % H
    d = (v // (W * H)) % D
    n = v // (W * H * D)
    o = tl.arange(0, COUT)
    acc = tl.zeros((BLOCK_M, COUT), dtype=tl.float32)
    for t in range(27):
        dd = d + t // 9 - 1
        hh = h + (t // 3) % 3 - 1
        ww = w + t % 3 - 1
        inside = (v < voxels) & (dd >= 0) & (dd < D) & (hh >= 0) & (hh < H) & (ww >= 0) & (ww < W)
        row = (((n * D + dd) * H + hh) * W + ww) * CIN
        for k0 in range(0, CIN, BLOCK_K):
            c = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(x_ptr + row[:, None] + c[None, :], mask=inside[:, None], other=0.0)
            if PROLOGUE:
                s = tl.load(scale_ptr + n[:, None] * CIN + c[None, :], mask=(v < voxels)[:, None], other=0.0)
                b = tl.load(shift_ptr + n[:, None] * CIN + c[None, :], mask=(v < voxels)[:, None], other=0.0)
                y = a.to(tl.float32) * s + b
                y = y / (1.0 + tl.exp(-y))
                a = tl.where(inside[:, None], y, 0.0).to(w_ptr.dtype.element_ty)
            weights = tl.load(w_ptr + (t * CIN + c[:, None]) * COUT + o[None, :])
            acc = tl.dot(a, weights, acc)
    tl.store(out_ptr + v[:, None] * COUT + o[None, :], acc.to(out_ptr.dtype.element_ty), mask=(v < voxels)[:, None])


def triton_conv3d(x, weight, scale=None, shift=None, block_m=128, block_k=64, num_warps=4, num_stages=3):
    """conv3d(silu(x * scale + shift) if scale is given else x, weight, padding=1) for a channels-last x."""
    n, cin, d, h, w = x.shape
    cout = weight.shape[0]
    by_tap = weight.permute(2, 3, 4, 1, 0).reshape(27 * cin, cout).to(x.dtype).contiguous()
    out = torch.empty((n, d, h, w, cout), device=x.device, dtype=x.dtype)
    voxels = n * d * h * w
    prologue = scale is not None
    dummy = by_tap if not prologue else None
    _conv3d_kernel[(triton.cdiv(voxels, block_m),)](
        x, by_tap, scale if prologue else dummy, shift if prologue else dummy, out, d, h, w, voxels,
        CIN=cin, COUT=cout, BLOCK_M=block_m, BLOCK_K=min(block_k, cin), PROLOGUE=prologue,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out.permute(0, 4, 1, 2, 3)


def reference(x, weight, scale=None, shift=None):
    x = x.double()
    if scale is not None:
        x = F.silu(x * scale.double()[:, :, None, None, None] + shift.double()[:, :, None, None, None])
    return F.conv3d(x, weight.double(), padding=1)


def inputs(n, cin, cout, size, device, dtype):
    torch.manual_seed(0)
    x = torch.randn(n, cin, size, size, size, device=device).to(dtype).contiguous(memory_format=torch.channels_last_3d)
    weight = torch.randn(cout, cin, 3, 3, 3, device=device) / (27 * cin) ** 0.5
    scale = torch.rand(n, cin, device=device) + 0.5
    shift = torch.randn(n, cin, device=device) * 0.1
    return x, weight, scale, shift


def check(device, dtype):
    for n, cin, cout, size in ((1, 16, 16, 5), (2, 32, 16, 4)):
        x, weight, scale, shift = inputs(n, cin, cout, size, device, dtype)
        for fused in (False, True):
            got = triton_conv3d(x, weight, *((scale, shift) if fused else ()), block_m=16, block_k=16)
            expected = reference(x, weight, *((scale, shift) if fused else ()))
            error = (got.double() - expected).abs().max().item()
            print(f"CHECK n={n} cin={cin} cout={cout} size={size} fused={fused}: max error {error:.3g}", flush=True)
            assert error < 1e-2 * expected.abs().max().item(), error  # TF32 on a GPU, exact in the interpreter


def sweep():
    from triton.testing import do_bench

    for cin, cout, size in ((64, 64, 128), (128, 64, 128), (64, 64, 64)):
        x, weight, scale, shift = inputs(1, cin, cout, size, "cuda", torch.bfloat16)
        w16 = weight.bfloat16().contiguous(memory_format=torch.channels_last_3d)
        torch.backends.cudnn.benchmark = True
        timings = {
            "cudnn": do_bench(partial(F.conv3d, x, w16, padding=1)),
            "elementwise pass": do_bench(partial(normalise, x, scale, shift)),
            "cudnn + elementwise pass": do_bench(partial(conv_after_pass, x, scale, shift, w16)),
        }
        configurations = itertools.product((64, 128), (32, 64), (4, 8), (2, 3))
        for block_m, block_k, warps, stages in configurations:
            if block_k > cin:
                continue
            label = f"triton m{block_m} k{block_k} w{warps} s{stages}"
            try:
                for fused, extra in ((False, (None, None)), (True, (scale, shift))):
                    run = partial(triton_conv3d, x, weight, *extra, block_m, block_k, warps, stages)
                    timings[label + (" fused" if fused else "")] = do_bench(run)
            except Exception as exc:  # a configuration that does not fit in shared memory
                print(f"SKIP {label}: {type(exc).__name__}: {str(exc)[:80]}")
        corner = x[..., :16, :16, :16].contiguous(memory_format=torch.channels_last_3d)
        error = (triton_conv3d(corner, weight, scale, shift).double() - reference(corner, weight, scale, shift)).abs()
        tflop = 2 * cin * cout * 27 * size**3 / 1e12
        for label, ms in sorted(timings.items(), key=lambda kv: kv[1]):
            print(f"SWEEP {cin}->{cout} @ {size}^3  {label:32s} {ms * 1e3:8.1f} us {tflop / ms * 1e3:6.1f} TFLOP/s")
        print(f"SWEEP {cin}->{cout} fused, max error at 16^3 against float64: {error.max().item():.3g}")


@torch.compile
def normalise(x, scale, shift):
    """The model's elementwise pass before a convolution, as one Inductor kernel: bf16 in, bf16 out."""
    return F.silu(x * scale[:, :, None, None, None] + shift[:, :, None, None, None]).bfloat16()


def conv_after_pass(x, scale, shift, weight):
    return F.conv3d(normalise(x, scale, shift), weight, padding=1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="only check values on a small volume")
    args = parser.parse_args()
    if args.check:
        check("cpu" if not torch.cuda.is_available() else "cuda", torch.float32)
    else:
        sweep()
