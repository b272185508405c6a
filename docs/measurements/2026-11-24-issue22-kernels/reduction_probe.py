"""Issue 22: how fast Inductor reduces a channels-last 128^3 activation per channel, written four ways.

GroupNorm's statistics (fast's `_group_norm`) are per-channel reductions over the voxels of a
channels-last bf16 tensor; under Inductor they ran at 1.9-2.4 TB/s on an H200 where elementwise
passes reach 3.5-4. Each variant is compiled alone and timed with Triton's do_bench (median of
its repetitions, L2 flushed between them); bytes are the input's size.

  var_mean : torch.var_mean in float32, as _group_norm does (Inductor: a Welford reduction)
  sums     : sum and sum of squares in float32 (two plain sums in one pass)
  split-S  : sums over the (S, voxels / S, channels) view, then over S (the split written out)
"""

import functools

import torch
import torch._inductor.config
from triton.testing import do_bench

DIMS = (2, 3, 4)


def var_mean(x):
    return torch.var_mean(x.float(), dim=DIMS, correction=0)


def sums(x):
    xf = x.float()
    return xf.sum(DIMS), xf.square().sum(DIMS)


def split(chunks):
    def fn(x):
        c = x.shape[1]
        xv = x.permute(0, 2, 3, 4, 1).reshape(chunks, -1, c).float()
        return xv.sum(1).sum(0), xv.square().sum(1).sum(0)

    return fn


def main() -> None:
    torch.manual_seed(0)
    variants = {"var_mean": var_mean, "sums": sums, **{f"split-{s}": split(s) for s in (256, 1024, 4096)}}
    print(f"{'channels':>8} {'variant':>10} {'us':>8} {'TB/s':>6}  max rel. diff of the mean vs float64")
    for c in (64, 128):
        x = (torch.randn(1, c, 128, 128, 128, device="cuda") * 2 + 3).to(torch.bfloat16)
        x = x.contiguous(memory_format=torch.channels_last_3d)
        ref = x.double().mean(DIMS)
        for name, fn in variants.items():
            compiled = torch.compile(fn, fullgraph=True)
            out = compiled(x)
            mean = out[1] if name == "var_mean" else out[0] / x[0, 0].numel()
            err = ((mean.double() - ref).abs() / ref.abs()).max().item()
            ms = do_bench(functools.partial(compiled, x), warmup=50, rep=300, return_mode="median")
            print(f"{c:>8} {name:>10} {ms * 1e3:8.1f} {x.numel() * 2 / ms / 1e9:6.2f}  {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
