"""A/B of fast's training step: ``PYTHONPATH=. python3 ab.py MODE`` on a GPU, one process per mode.

MODE is ``new`` (the current fast) or ``nobias`` (``conv_bias_apart`` off), optionally followed by
``+nographs`` (``cuda_graphs`` off) and ``+sample`` (also time two full samples). Prints the
synchronized median, 30 iterations back to back, peak memory and (without graphs) the kernel mix.
"""

import dataclasses
import sys
import time

import pandas as pd
import torch

from meddpm.combos import get_combo
from meddpm.config import ModelConfig
from meddpm.measure.kernel_mix import category_shares, profile_kernels
from meddpm.measure.timing import time_once, time_synchronized
from meddpm.train import TrainStep

pd.set_option("display.width", 250)
mode = sys.argv[1]
base, *opts = mode.split("+")
combo = get_combo("fast")
if base == "nobias":
    combo = dataclasses.replace(combo, conv_bias_apart=False)
if "nographs" in opts:
    combo = dataclasses.replace(combo, cuda_graphs=False)
device = torch.device("cuda")
step = TrainStep(ModelConfig.preset("paper"), combo, 1, device)
print(f"{mode} first iteration {time_once(step, device) / 1e3:.1f} s", flush=True)
for _ in range(3):
    step()
torch.cuda.reset_peak_memory_stats()
times = [time_synchronized(step, device) for _ in range(60)]
s = pd.Series(times)
iqr = s.quantile(0.75) - s.quantile(0.25)
peak = torch.cuda.max_memory_allocated() / 2**30
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(30):
    step()
torch.cuda.synchronize()
b2b = (time.perf_counter() - t) / 30 * 1e3
print(
    f"{mode} train median {s.median():.2f} ms IQR {iqr:.2f} min {s.min():.2f} b2b {b2b:.2f} peak {peak:.2f} GiB",
    flush=True,
)
if not step.cuda_graphs:
    kernels = profile_kernels(step, iterations=2)
    print(f"{mode} kernel ms {kernels.us.sum() / 1000:.2f} launches {kernels.launches.sum():.0f}", flush=True)
    print(category_shares(kernels).round(3).to_string(), flush=True)
    k = kernels.copy()
    k["kernel"] = k["kernel"].str.slice(0, 100)
    print(k[k.category == "triton"].head(30).round(1).to_string(), flush=True)
    print(k[k.category != "triton"].head(25).round(1).to_string(), flush=True)
if "sample" in opts:
    del step
    torch.cuda.empty_cache()
    from meddpm.sampling import Sampler

    sampler = Sampler(ModelConfig.preset("paper"), combo, device)
    sampler(steps=3)
    torch.cuda.synchronize()
    for _ in range(2):
        t = time.perf_counter()
        sampler()
        torch.cuda.synchronize()
        print(f"{mode} full sample {time.perf_counter() - t:.2f} s", flush=True)
