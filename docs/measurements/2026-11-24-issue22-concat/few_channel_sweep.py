"""Launch configurations of meddpm's few-channel convolution kernels at the paper preset's first
convolution (3 -> 64 channels, 128^3, bf16 weights, fp32 channels-last input), each timed alone
with triton.testing.do_bench (median, us), against cuDNN's forward and weight gradient. The kernels
take the input zero-padded by one voxel (`xp`); h200-4/sweep.log is the sweep of the first version,
which took the unpadded input and tested each tap's bounds."""

import torch
import triton
from triton.testing import do_bench

from meddpm.kernels import few_channel_convolution as fcc

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
        for stages in (1,):

            def fwd():
                fcc._forward_kernel[(triton.cdiv(voxels, block),)](
                    x,
                    by_tap,
                    out,
                    voxels,
                    128,
                    128,
                    128,
                    *x.stride(),
                    C=3,
                    ROW=rows,
                    KP=128,
                    OUT=64,
                    BLOCK=block,
                    num_warps=warps,
                    num_stages=stages,
                )

            try:
                t = do_bench(fwd) * 1e3
                fwd()
                err = (out.float() - reference).abs().max().item()
                print(
                    f"forward BLOCK={block} warps={warps} stages={stages}: {t:.1f} us (max err {err:.3f})", flush=True
                )
            except Exception as e:  # a configuration that does not fit (registers, shared memory)
                print(f"forward BLOCK={block} warps={warps} stages={stages}: failed {type(e).__name__}")
for block in (64, 128):
    for programs in (264, 528):
        for warps in (4, 8):
            bpp = triton.cdiv(triton.cdiv(voxels, block), programs)
            n = triton.cdiv(voxels, block * bpp)
            partial = torch.empty(n, 128, 64, device="cuda")

            def wgrad():
                fcc._weight_grad_kernel[(n,)](
                    x,
                    grad,
                    partial,
                    voxels,
                    bpp,
                    128,
                    128,
                    128,
                    *x.stride(),
                    C=3,
                    ROW=rows,
                    KP=128,
                    OUT=64,
                    BLOCK=block,
                    num_warps=warps,
                )
                return partial.sum(0)

            try:
                print(
                    f"weight grad BLOCK={block} programs={n} warps={warps}: {do_bench(wgrad) * 1e3:.1f} us", flush=True
                )
            except Exception as e:
                print(f"weight grad BLOCK={block} programs={programs} warps={warps}: failed {type(e).__name__}")
