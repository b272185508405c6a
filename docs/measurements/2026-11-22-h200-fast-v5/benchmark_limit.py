"""The script behind ``tried-cudnn-benchmark-limit-0.log``: fast's training step with cuDNN's ``benchmark_limit`` set.

Run as ``PYTHONPATH=. python3 benchmark_limit.py LIMIT`` on a GPU (10 is PyTorch's default, 0 tries
every algorithm); the log holds the runs 10, 0, 10 in one machine, one process each.
"""

import sys
import time

import pandas as pd
import torch

from meddpm.combos import get_combo
from meddpm.config import ModelConfig
from meddpm.measure.kernel_mix import category_shares, profile_kernels
from meddpm.train import TrainStep

limit = sys.argv[1]
torch.backends.cudnn.benchmark_limit = int(limit)
step = TrainStep(ModelConfig.preset("paper"), get_combo("fast"), 1, torch.device("cuda"))
t = time.perf_counter()
step()
torch.cuda.synchronize()
print(f"limit {limit} first iteration {time.perf_counter() - t:.1f} s", flush=True)
for _ in range(3):
    step()
times = []
for _ in range(40):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    torch.cuda.synchronize()
    times.append(start.elapsed_time(end))
s = pd.Series(times)
iqr = s.quantile(0.75) - s.quantile(0.25)
print(f"limit {limit} train median {s.median():.2f} ms IQR {iqr:.2f} min {s.min():.2f}", flush=True)
print(category_shares(profile_kernels(step, iterations=2)).round(3).head(6).to_string(), flush=True)
