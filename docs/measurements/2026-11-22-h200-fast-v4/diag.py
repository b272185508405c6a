"""The script behind this folder's per-step tables: time and profile a combo's training step and sampling step.

Run as ``PYTHONPATH=. python3 diag.py fast train,sample[,cg]`` on a GPU; ``cg`` turns on
Inductor's CUDA graphs (one of the experiments that was dropped).
"""

import sys
import time

import pandas as pd
import torch

from meddpm.combos import get_combo
from meddpm.config import ModelConfig
from meddpm.measure.kernel_mix import category_shares, profile_kernels
from meddpm.sampling import Sampler
from meddpm.train import TrainStep

pd.set_option("display.width", 220)
combo = get_combo(sys.argv[1] if len(sys.argv) > 1 else "fast")
what = sys.argv[2] if len(sys.argv) > 2 else "train,sample"
cuda_graphs = "cg" in what
if cuda_graphs:
    torch._inductor.config.triton.cudagraphs = True
config = ModelConfig.preset("paper")
device = torch.device("cuda")


def marked(fn, clone=False):
    """``fn`` starting a new CUDA-graph step on every call (and copying its output out of the pool)."""

    def call(*args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        out = fn(*args, **kwargs)
        return out.clone() if clone else out

    return call


def timed(fn, n):
    """Median, IQR and min of ``n`` calls, by CUDA events."""
    times = []
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    s = pd.Series(times)
    return f"median {s.median():.2f} ms  IQR {s.quantile(0.75) - s.quantile(0.25):.2f}  min {s.min():.2f}  n={n}"


def show(kernels, n):
    kernels = kernels.copy()
    kernels["kernel"] = kernels["kernel"].str.slice(0, 90)
    print(category_shares(kernels).round(3))
    print(kernels.head(n).round(1).to_string())


if "train" in what:
    step = TrainStep(config, combo, 1, device)
    if cuda_graphs:
        step.loss_fn = marked(step.loss_fn)
    t = time.perf_counter()
    step()
    torch.cuda.synchronize()
    print(f"train first iteration {time.perf_counter() - t:.1f} s", flush=True)
    for _ in range(3):
        step()
    torch.cuda.reset_peak_memory_stats()
    print("train", timed(step, 30), f"peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
    kernels = profile_kernels(step, iterations=2)
    show(kernels, 45)
    print("kernels/iter", kernels.launches.sum(), flush=True)
    del step
    torch.cuda.empty_cache()
if "sample" in what:
    sampler = Sampler(config, combo, device)
    if cuda_graphs:
        sampler.step_fn = marked(sampler.step_fn, clone=True)
    t = time.perf_counter()
    sampler(steps=3)
    torch.cuda.synchronize()
    print(f"sample warm-up {time.perf_counter() - t:.1f} s", flush=True)
    print("sample step", timed(lambda: sampler(steps=1), 20), flush=True)
    t = time.perf_counter()
    sampler()
    torch.cuda.synchronize()
    print(f"full sample {time.perf_counter() - t:.2f} s", flush=True)
    kernels = profile_kernels(lambda: sampler(steps=1), iterations=5)
    show(kernels, 30)
    print("kernels/step", kernels.launches.sum(), flush=True)
