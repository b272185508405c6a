"""Issue 22: can a Triton 3x3x3 convolution whose operands arrive by TMA beat cuDNN at 128^3?

`../2026-11-24-issue22-few-channel/conv_sweep.py` (h200-1 here) timed an implicit-GEMM kernel whose
activation tiles were gathered with masked pointer loads: 407 TFLOP/s at best against cuDNN's 520 for
64 -> 64 channels at 128^3. This kernel takes each tap's tile with a tensor descriptor instead: the
channels-last activation is a 5-D tensor (n, d, h, w, c), a tile is a box of (1, 1, BH, BW, BK) voxels
and channels at the tap's shifted coordinates, and the copy engine fills the box's part outside the
volume with zeros, which is the convolution's padding. So the loop is 27 taps x input-channel chunks of
a descriptor load and a `tl.dot`, which Triton pipelines on Hopper (TMA into shared memory, wgmma).

``SWAP``: compute out^T = W^T x^T (output channels as the MMA's M, voxels as its N), which puts the
wide side of the tile (voxels) on the operand that wgmma reads from shared memory per instruction once.

The same kernel is the input gradient of a stride-1, padding-1 convolution (weights flipped in space,
in and out channels swapped), so its speed stands for two of the three convolutions of a training step.
With float8 (e4m3) operands it writes bf16; ``EPILOGUE`` (used by ``fp8_sample_probe.py`` and
``fp8_train_probe.py``) multiplies by a per-output-channel scale and adds a bias before the store.

    python3 docs/measurements/2026-11-24-issue22-conv-sweep/tma_conv_sweep.py [--fp8]            # sweep, GPU
    python3 docs/measurements/2026-11-24-issue22-conv-sweep/tma_conv_sweep.py [--fp8] --check    # values only
"""

import argparse
import itertools
from functools import partial

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _conv3d_tma_kernel(
    x_desc, w_desc, out_desc, scale_ptr, bias_ptr, D, H, W,
    CIN: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr, SWAP: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr, WEIGHTS_K_MAJOR: tl.constexpr, EPILOGUE: tl.constexpr,
):  # fmt: skip
    tiles_w = W // BW
    tiles_h = H // BH
    tile = tl.program_id(0)
    w0 = (tile % tiles_w) * BW
    h0 = ((tile // tiles_w) % tiles_h) * BH
    d = (tile // (tiles_w * tiles_h)) % D
    n = tile // (tiles_w * tiles_h * D)
    o0 = tl.program_id(1) * BN
    BM: tl.constexpr = BH * BW
    CHUNKS: tl.constexpr = CIN // BK
    if SWAP:
        acc = tl.zeros((BN, BM), dtype=tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    for i in tl.range(27 * CHUNKS, warp_specialize=WARP_SPECIALIZE):
        t = i // CHUNKS
        k0 = (i % CHUNKS) * BK
        # Coordinates may be -1 or one past the end: the descriptor returns zeros there (the padding).
        a = x_desc.load([n, d + t // 9 - 1, h0 + (t // 3) % 3 - 1, w0 + t % 3 - 1, k0]).reshape(BM, BK)
        if WEIGHTS_K_MAJOR:
            b = w_desc.load([o0, t * CIN + k0])  # (BN, BK): the weights stored output-channel major
            if SWAP:
                acc = tl.dot(b, a.T, acc)
            else:
                acc = tl.dot(a, b.T, acc)
        else:
            b = w_desc.load([t * CIN + k0, o0])  # (BK, BN)
            acc = tl.dot(a, b, acc)
    if SWAP:
        acc = acc.T
    if EPILOGUE:  # out = acc * scale + bias, both per output channel (float8 weights' scales)
        o = o0 + tl.arange(0, BN)
        acc = acc * tl.load(scale_ptr + o)[None, :] + tl.load(bias_ptr + o)[None, :]
    out_desc.store([n, d, h0, w0, o0], acc.to(out_desc.dtype).reshape(1, 1, BH, BW, BN))


def tma_conv3d(x, weight, bh=1, bw=128, bk=64, bn=64, swap=False, num_warps=4, num_stages=4, warp_specialize=False):
    """conv3d(x, weight, padding=1) for a channels-last bf16 or float8 x; H % bh == 0 and W % bw == 0.

    A float8 x takes float8 weights and gives a bf16 output (no scales: a speed probe). Hopper's float8
    MMA reads both operands K-major from shared memory, so float8 weights are stored output-channel major.
    """
    n, cin, d, h, w = x.shape
    cout = weight.shape[0]
    bk, bn = min(bk, cin), min(bn, cout)
    assert h % bh == 0 and w % bw == 0 and cin % bk == 0 and cout % bn == 0
    xl = x.permute(0, 2, 3, 4, 1)  # (n, d, h, w, c), contiguous for a channels-last x
    assert xl.is_contiguous()
    by_tap = weight.permute(2, 3, 4, 1, 0).reshape(27 * cin, cout).to(x.dtype)  # rows: tap, input channel
    fp8 = x.dtype == torch.float8_e4m3fn
    if swap or fp8:
        by_tap = by_tap.t().contiguous()
        w_desc = TensorDescriptor.from_tensor(by_tap, [bn, bk])
    else:
        by_tap = by_tap.contiguous()
        w_desc = TensorDescriptor.from_tensor(by_tap, [bk, bn])
    out = torch.empty((n, d, h, w, cout), device=x.device, dtype=torch.bfloat16 if fp8 else x.dtype)
    x_desc = TensorDescriptor.from_tensor(xl, [1, 1, bh, bw, bk])
    out_desc = TensorDescriptor.from_tensor(out, [1, 1, bh, bw, bn])
    grid = (n * d * (h // bh) * (w // bw), cout // bn)
    _conv3d_tma_kernel[grid](
        x_desc, w_desc, out_desc, None, None, d, h, w,
        CIN=cin, BH=bh, BW=bw, BK=bk, BN=bn, SWAP=swap, WARP_SPECIALIZE=warp_specialize, WEIGHTS_K_MAJOR=swap or fp8,
        EPILOGUE=False,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out.permute(0, 4, 1, 2, 3)


def inputs(n, cin, cout, size, device, dtype):
    torch.manual_seed(0)
    x = torch.randn(n, cin, size, size, size, device=device).to(dtype).contiguous(memory_format=torch.channels_last_3d)
    weight = (torch.randn(cout, cin, 3, 3, 3, device=device) / (27 * cin) ** 0.5).to(dtype)
    return x, weight


def max_error(got, x, weight, depth=None):
    """Largest error relative to the largest value, over the first ``depth`` output slices (all by default)."""
    depth = depth or x.shape[2]
    expected = F.conv3d(x[:, :, : depth + 1].double(), weight.double(), padding=1)[:, :, :depth]
    got = got[:, :, :depth]
    return (got.double() - expected).abs().max().item() / expected.abs().max().item()


def check(device, dtype, operand_dtype):
    for n, cin, cout, size, bh, bw in ((1, 16, 16, 8, 1, 8), (2, 32, 16, 8, 2, 8), (1, 64, 64, 16, 1, 16)):
        if operand_dtype == torch.float8_e4m3fn and cin < 32:
            continue  # Hopper's float8 MMA reduces over at least 32 values
        x, weight = (t.to(operand_dtype) for t in inputs(n, cin, cout, size, device, dtype))
        for swap in (False, True):
            error = max_error(tma_conv3d(x, weight, bh, bw, swap=swap), x, weight)
            print(f"CHECK n={n} {cin}->{cout} at {size}^3 swap={swap}: relative error {error:.3g}", flush=True)
            assert error < 1e-2, error


def sweep(operand_dtype):
    """cuDNN in bf16 against the kernel with bf16 or float8 operands, at the model's shapes at 128^3."""
    from triton.testing import do_bench

    torch.backends.cudnn.benchmark = True
    for cin, cout, size in ((64, 64, 128), (128, 64, 128), (64, 128, 128)):
        x, weight = inputs(1, cin, cout, size, "cuda", torch.bfloat16)
        weight = weight.contiguous(memory_format=torch.channels_last_3d)
        timings = {"cudnn": do_bench(partial(F.conv3d, x, weight, padding=1), warmup=50, rep=200)}
        x, weight = x.to(operand_dtype), weight.to(operand_dtype)
        chunks = (64,) if operand_dtype == torch.bfloat16 else (64, 128)  # 128 bytes of channels a row
        for (bh, bw), bk, bn, swap, warps, stages, ws in itertools.product(
            ((2, size), (4, size)), chunks, (64, 128), (False, True), (4, 8), (2, 3, 4), (False,)
        ):
            if bn > cout or bk > cin:
                continue
            label = f"tma box {bh}x{bw} k{bk} n{bn}{' swap' if swap else ''}{' ws' if ws else ''} w{warps} s{stages}"
            run = partial(tma_conv3d, x, weight, bh, bw, bk, bn, swap, warps, stages, ws)
            try:
                error = max_error(run(), x, weight, depth=8)
                timings[label] = do_bench(run, warmup=50, rep=200)
            except Exception as exc:  # a configuration that does not fit in shared memory or registers
                print(f"SKIP {label}: {type(exc).__name__}: {str(exc)[:100]}", flush=True)
                continue
            if error > 1e-2:
                print(f"WRONG {label}: relative error {error:.3g}", flush=True)
                timings.pop(label)
        tflop = 2 * cin * cout * 27 * size**3 / 1e12
        ranked = sorted(timings.items(), key=lambda kv: kv[1])
        for label, ms in ranked[:12] + ([("cudnn", timings["cudnn"])] if "cudnn" not in dict(ranked[:12]) else []):
            print(f"SWEEP {cin}->{cout} @ {size}^3  {label:36s} {ms * 1e3:8.1f} us {tflop / ms * 1e3:6.1f} TFLOP/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="only check values on small volumes")
    parser.add_argument("--fp8", action="store_true", help="float8 (e4m3) operands, bf16 output")
    args = parser.parse_args()
    operands = torch.float8_e4m3fn if args.fp8 else torch.bfloat16
    if args.check and not torch.cuda.is_available():  # Triton's interpreter: float32 throughout
        check("cpu", torch.float32, torch.float32)
    elif args.check:
        check("cuda", torch.bfloat16, operands)
    else:
        sweep(operands)
