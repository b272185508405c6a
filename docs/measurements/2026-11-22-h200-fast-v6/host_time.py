"""The script behind ``tried-cuda-graphs-host-time.log``: fast's training step with and without CUDA graphs.

Run as ``PYTHONPATH=. python3 host_time.py plain|cudagraphs`` on a GPU, one process per mode: the
bench's synchronized event time per iteration, the host's time to issue one iteration, and the
time per iteration of 30 back to back.
"""

import sys
import time

import pandas as pd
import torch
import torch._inductor.config as inductor_config

from meddpm.combos import get_combo
from meddpm.config import ModelConfig
from meddpm.measure.timing import time_once
from meddpm.train import TrainStep

mode = sys.argv[1]
if mode == "cudagraphs":
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
for _ in range(5):
    step()
torch.cuda.synchronize()
rows = []
for _ in range(60):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    step()
    t1 = time.perf_counter()
    end.record()
    end.synchronize()
    rows.append((start.elapsed_time(end), (t1 - t0) * 1e3))
df = pd.DataFrame(rows, columns=["event_ms", "host_ms"])
q = df.quantile([0.25, 0.5, 0.75])
print(
    f"{mode} synchronized: median {q.event_ms[0.5]:.2f} ms IQR {q.event_ms[0.75] - q.event_ms[0.25]:.2f} "
    f"min {df.event_ms.min():.2f}; host issue median {q.host_ms[0.5]:.2f} ms",
    flush=True,
)
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(30):
    step()
torch.cuda.synchronize()
print(
    f"{mode} back-to-back {(time.perf_counter() - t) / 30 * 1e3:.2f} ms/iter; "
    f"reserved {torch.cuda.memory_reserved() / 2**30:.2f} GiB",
    flush=True,
)
