"""Where the all-reduce-after-backward's time goes, per phase, on every rank (run under torchrun).

`fast` data-parallel (``gradient_sync="after_backward"``): the gradients are packed into one flat buffer,
all-reduced, divided and copied back (meddpm.run.distributed.GradientAllReduce). This times each phase
with CUDA events, the iteration with and without the sync (as run_ddp does), and, on rank 0 at world
size 1, the plain single-GPU step (its whole iteration one CUDA graph, optimizer included), which the
data-parallel step cannot be: the sync runs between backward and the optimizer.

    torchrun --standalone --nproc_per_node=N docs/measurements/2026-11-26-issue43-ddp/sync_phases.py OUT.json
"""

import json
import sys

import numpy as np
import torch
import torch.distributed as dist

from meddpm.measure.machine.timing import time_synchronized
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo
from meddpm.run.distributed import GradientAllReduce, data_parallel_step, init_process_group
from meddpm.run.train import TrainStep

ROUNDS = 20
rank, world, device = init_process_group("cuda")
config, combo = ModelConfig.preset("paper"), get_combo("fast")
step, skip_sync = data_parallel_step(config, combo, "after_backward", device, 1, seed=rank)
for _ in range(max(3, step.calls_before_replay)):
    step()
torch.cuda.synchronize()

phases: list[list[float]] = []


def timed_sync(self: GradientAllReduce) -> None:
    """GradientAllReduce.__call__ with an event between its phases (every gradient exists after warm-up)."""
    if not self.enabled:  # under no_sync()
        return
    events = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
    events[0].record()
    grads = [p.grad for p in self.params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    events[1].record()
    dist.all_reduce(flat)
    events[2].record()
    flat.div_(dist.get_world_size())
    events[3].record()
    torch._foreach_copy_(grads, [part.view_as(g) for part, g in zip(flat.split([g.numel() for g in grads]), grads)])
    events[4].record()
    phases.append(events)


GradientAllReduce.__call__ = timed_sync  # this probe's own process only
synced = []
for _ in range(ROUNDS):
    dist.barrier()
    synced.append(time_synchronized(step, device))
without = []
with skip_sync():
    step()
    for _ in range(ROUNDS):
        dist.barrier()
        without.append(time_synchronized(step, device))
torch.cuda.synchronize()
names = ("cat", "all_reduce", "div", "copy_back")
spans = {n: float(np.median([e[i].elapsed_time(e[i + 1]) for e in phases])) for i, n in enumerate(names)}
mine = {
    "rank": rank,
    "world": world,
    "iteration_ms": float(np.median(synced)),
    "no_sync_ms": float(np.median(without)),
    "phases_ms": spans,
    "gradient_mb": sum(p.numel() * p.element_size() for p in step.gradient_sync.params) / 1e6,
}
if world == 1:
    del step
    torch.cuda.empty_cache()
    plain = TrainStep(config, combo, 1, device)
    for _ in range(max(3, plain.calls_before_replay)):
        plain()
    mine["plain_step_ms"] = float(np.median([time_synchronized(plain, device) for _ in range(ROUNDS)]))
gathered = [None] * world
dist.all_gather_object(gathered, mine)
if rank == 0:
    with open(sys.argv[1], "w") as f:
        json.dump(gathered, f, indent=1)
    for g in gathered:
        print(json.dumps(g))
dist.barrier()
dist.destroy_process_group()
