"""Diagnose fast: time training iterations and a sampling step, list the top kernels of each."""
import sys, time
import pandas as pd
import torch
from meddpm.combos import get_combo
from meddpm.config import ModelConfig
from meddpm.measure.kernel_mix import profile_kernels, category_shares
from meddpm.sampling import Sampler
from meddpm.train import TrainStep

pd.set_option("display.width", 220); pd.set_option("display.max_colwidth", 100); pd.set_option("display.max_rows", 100)
combo = get_combo(sys.argv[1] if len(sys.argv) > 1 else "fast")
what = sys.argv[2] if len(sys.argv) > 2 else "train,sample"
CG = "cg" in what
if CG:
    torch._inductor.config.triton.cudagraphs = True
def marked(fn, clone=False):
    def call(*a, **k):
        torch.compiler.cudagraph_mark_step_begin()
        out = fn(*a, **k)
        return out.clone() if clone else out
    return call
def show(k, n):
    k = k.copy(); k["kernel"] = k["kernel"].str.slice(0, 90)
    print(k.head(n).round(1).to_string())
cfg = ModelConfig.preset("paper")
dev = torch.device("cuda")

def timed(fn, n):
    out = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); out.append(a.elapsed_time(b))
    s = pd.Series(out)
    return f"median {s.median():.2f} ms  IQR {s.quantile(.75)-s.quantile(.25):.2f}  min {s.min():.2f}  n={n}"

if "train" in what:
    step = TrainStep(cfg, combo, 1, dev)
    if CG: step.loss_fn = marked(step.loss_fn)
    t = time.perf_counter(); step(); torch.cuda.synchronize(); print(f"train first iteration {time.perf_counter()-t:.1f} s", flush=True)
    for _ in range(3): step()
    torch.cuda.reset_peak_memory_stats()
    print("train", timed(step, 30), f"peak {torch.cuda.max_memory_allocated()/2**30:.2f} GiB", flush=True)
    k = profile_kernels(step, iterations=2)
    print(category_shares(k).round(3)); show(k, 45); print("kernels/iter", k.launches.sum(), flush=True)
    del step; torch.cuda.empty_cache()
if "sample" in what:
    s = Sampler(cfg, combo, dev)
    if CG: s.step_fn = marked(s.step_fn, clone=True)
    t = time.perf_counter(); s(steps=3); torch.cuda.synchronize(); print(f"sample warm-up {time.perf_counter()-t:.1f} s", flush=True)
    print("sample step", timed(lambda: s(steps=1), 20), flush=True)
    t = time.perf_counter(); s(); torch.cuda.synchronize(); print(f"full sample {time.perf_counter()-t:.2f} s", flush=True)
    k = profile_kernels(lambda: s(steps=1), iterations=5)
    print(category_shares(k).round(3)); show(k, 30); print("kernels/step", k.launches.sum(), flush=True)
