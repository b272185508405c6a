"""The script behind this folder's ``tried-*.log``: fast's training step under one setting tried in v5.

Run as ``PYTHONPATH=. python3 trials.py MODE`` on a GPU, one process per mode: ``default``;
``benchmark_limit_0`` (cuDNN tries every algorithm, not the first 10; the log calls the two
"limit 0" and "limit 10"); ``combo_kernels`` (Inductor's horizontal fusion of independent kernels);
``cudagraphs`` (Inductor's CUDA graph trees, a new graph step marked before every iteration).
"""

import sys

import pandas as pd
import torch
import torch._inductor.config as inductor_config

from meddpm.combos import get_combo
from meddpm.config import ModelConfig
from meddpm.measure.kernel_mix import category_shares, profile_kernels
from meddpm.measure.timing import time_once, time_synchronized
from meddpm.train import TrainStep

mode = sys.argv[1]
if mode == "benchmark_limit_0":
    torch.backends.cudnn.benchmark_limit = 0
elif mode == "combo_kernels":
    inductor_config.combo_kernels = True
elif mode == "cudagraphs":
    inductor_config.triton.cudagraphs = True
device = torch.device("cuda")
step = TrainStep(ModelConfig.preset("paper"), get_combo("fast"), 1, device)
if mode == "cudagraphs":
    loss_fn = step.loss_fn

    def marked(*args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return loss_fn(*args, **kwargs)

    step.loss_fn = marked
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
print(category_shares(kernels).round(3).head(4).to_string(), flush=True)
