"""The script behind ``1-*.log`` and ``2-*.log``: fast's training step in one variant, one process per mode.

Run as ``PYTHONPATH=. python3 modes.py MODE`` on a GPU. ``MODE`` is ``fused`` (the current fast) or
``unfused`` (``fused_norm_silu`` off), optionally followed by ``+rrtN`` (Inductor's
``realize_reads_threshold`` set to N). The logs were made before 8 became the default: their
``fused`` and ``unfused`` ran at Inductor's default of 4, which is ``fused+rrt4`` now.
"""

import dataclasses
import sys

import pandas as pd
import torch

import meddpm.combos
from meddpm.combos import get_combo
from meddpm.config import ModelConfig
from meddpm.measure.kernel_mix import category_shares, profile_kernels
from meddpm.measure.timing import time_once, time_synchronized
from meddpm.train import TrainStep

pd.set_option("display.width", 250)
mode = sys.argv[1]
combo = get_combo("fast")
for opt in mode.split("+")[1:]:
    if opt.startswith("rrt"):
        meddpm.combos._INDUCTOR_OPTIONS["realize_reads_threshold"] = int(opt[3:])
if mode.startswith("unfused"):
    combo = dataclasses.replace(combo, fused_norm_silu=False)
device = torch.device("cuda")
step = TrainStep(ModelConfig.preset("paper"), combo, 1, device)
print(f"{mode} first iteration {time_once(step, device) / 1e3:.1f} s", flush=True)
for _ in range(3):
    step()
torch.cuda.reset_peak_memory_stats()
times = [time_synchronized(step, device) for _ in range(40)]
s = pd.Series(times)
iqr = s.quantile(0.75) - s.quantile(0.25)
peak = torch.cuda.max_memory_allocated() / 2**30
print(f"{mode} train median {s.median():.2f} ms IQR {iqr:.2f} min {s.min():.2f} peak {peak:.2f} GiB", flush=True)
kernels = profile_kernels(step, iterations=2)
print(f"{mode} kernel ms {kernels.us.sum() / 1000:.2f} launches {kernels.launches.sum():.0f}", flush=True)
print(category_shares(kernels).round(3).to_string(), flush=True)
k = kernels.copy()
k["kernel"] = k["kernel"].str.slice(0, 100)
print(k[k.category == "triton"].head(30).round(1).to_string(), flush=True)
print(k[k.category == "copy"].round(1).to_string(), flush=True)
