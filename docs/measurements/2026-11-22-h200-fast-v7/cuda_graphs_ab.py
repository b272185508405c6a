"""fast's training step with and without CUDA graphs, interleaved in one process (A/B)."""

import dataclasses

import pandas as pd
import torch

from meddpm.combos import get_combo
from meddpm.config import ModelConfig
from meddpm.measure.timing import time_once, time_synchronized
from meddpm.train import TrainStep

device = torch.device("cuda")
fast = get_combo("fast")
steps = {}
for name, combo in (("graphs", fast), ("no-graphs", dataclasses.replace(fast, cuda_graphs=False))):
    steps[name] = TrainStep(ModelConfig.preset("paper"), combo, 1, device)
    warm = [time_once(steps[name], device) / 1e3 for _ in range(3)]
    print(name, "warm-up s", [round(w, 1) for w in warm], flush=True)
times = {n: [] for n in steps}
for _ in range(40):
    for n, s in steps.items():
        times[n].append(time_synchronized(s, device))
df = pd.DataFrame(times)
q = df.quantile([0.25, 0.5, 0.75])
for n in steps:
    print(f"{n}: median {q[n][0.5]:.2f} ms IQR {q[n][0.75] - q[n][0.25]:.2f} min {df[n].min():.2f} (40 interleaved)")
