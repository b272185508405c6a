"""Launch configurations of the few-channel convolution kernels (few_channel_convolution.py beside
this file, tried for issue 22 and not kept) at the paper preset's first convolution (3 -> 64
channels, 128^3, bf16), each timed alone with triton.testing.do_bench (median, us), against cuDNN's
forward and weight gradient. Run from the repository root.

h200-4/sweep.log is this sweep of the kernels' first version, which took the unpadded input and
tested each tap's bounds (wider configuration lists). In this form, with the input zero-padded by
one voxel (`xp`), the script has not run: its one run on the device passed the unpadded input by
mistake, and that log was not kept."""

import importlib.util
import pathlib

import torch
import triton
from triton.testing import do_bench

_spec = importlib.util.spec_from_file_location(
    "few_channel_convolution", pathlib.Path(__file__).with_name("few_channel_convolution.py")
)
fcc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fcc)


def report(label, fn, check=None):
    """Print fn's median time, and check()'s value after one more call; a configuration that does not fit says so."""
    try:
        t = do_bench(fn) * 1e3
        fn()
        extra = f" ({check()})" if check else ""
        print(f"{label}: {t:.1f} us{extra}", flush=True)
    except Exception as e:  # too many registers or too much shared memory for this configuration
        print(f"{label}: failed {type(e).__name__}")


torch.backends.cudnn.benchmark = True
x = torch.randn(1, 3, 128, 128, 128, device="cuda").contiguous(memory_format=torch.channels_last_3d)
weight = torch.randn(64, 3, 3, 3, 3, device="cuda")
by_tap = weight.permute(2, 3, 4, 1, 0).reshape(-1, 64).to(torch.bfloat16).contiguous()
grad = torch.randn(128**3, 64, device="cuda", dtype=torch.bfloat16)
voxels, rows = 128**3, 81
xb, wb = x.bfloat16(), weight.bfloat16()
xp = torch.nn.functional.pad(xb, (1, 1, 1, 1, 1, 1))
gb = grad.view(1, 128, 128, 128, 64).permute(0, 4, 1, 2, 3)
print(f"cuDNN forward {do_bench(lambda: torch.nn.functional.conv3d(xb, wb, padding=1)) * 1e3:.1f} us")
print(
    f"cuDNN weight grad {do_bench(lambda: torch.ops.aten.convolution_backward(gb, xb, wb, None, [1] * 3, [1] * 3, [1] * 3, False, [0] * 3, 1, [False, True, False])) * 1e3:.1f} us"
)
reference = torch.nn.functional.conv3d(xb.float(), wb.float(), padding=1).permute(0, 2, 3, 4, 1).reshape(-1, 64)
out = torch.empty(voxels, 64, device="cuda", dtype=torch.bfloat16)
for block in (64, 128, 256):
    for warps in (4, 8):
        grid = (triton.cdiv(voxels, block),)
        report(
            f"forward BLOCK={block} warps={warps}",
            lambda: fcc._forward_kernel[grid](
                xp, by_tap, out, voxels, 128, 128, 128, *xp.stride(),
                C=3, ROW=rows, KP=128, OUT=64, BLOCK=block, num_warps=warps),
            lambda: f"max err {(out.float() - reference).abs().max().item():.3f}",
        )  # fmt: skip
for block in (64, 128):
    for programs in (264, 528):
        for warps in (4, 8):
            bpp = triton.cdiv(triton.cdiv(voxels, block), programs)
            n = triton.cdiv(voxels, block * bpp)
            partial = torch.empty(n, 128, 64, device="cuda")
            report(
                f"weight grad BLOCK={block} programs={n} warps={warps}",
                lambda: (
                    fcc._weight_grad_kernel[(n,)](
                        xp, grad, partial, voxels, bpp, 128, 128, 128, *xp.stride(),
                        C=3, ROW=rows, KP=128, OUT=64, BLOCK=block, num_warps=warps),
                    partial.sum(0),
                ),
            )  # fmt: skip
