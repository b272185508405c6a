"""Which matrix products a `fast` training iteration runs, with their shapes and CUDA time (paper preset).

Compiled without CUDA graphs so that the profiler sees each extern call with its operands' shapes;
one iteration profiled after two warm-up iterations. Prints the products (aten::mm, bmm, addmm,
linear) and convolutions grouped by input shapes, by CUDA time, and the kernels under each mm.
"""

import dataclasses

import torch
from torch.profiler import ProfilerActivity, profile

from meddpm.model.config import ModelConfig
from meddpm.run.combos import COMBOS
from meddpm.run.train import TrainStep

step = TrainStep(ModelConfig.preset("paper"), dataclasses.replace(COMBOS["fast"], cuda_graphs=False), device="cuda")
for _ in range(2):
    step()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
    step()
    torch.cuda.synchronize()
wanted = ("aten::mm", "aten::bmm", "aten::addmm", "aten::linear", "aten::convolution", "aten::_convolution")
rows = [e for e in prof.key_averages(group_by_input_shape=True) if e.key in wanted]
for e in sorted(rows, key=lambda e: e.device_time_total, reverse=True)[:25]:
    print(f"GEMM {e.key:20s} {e.count:3d} calls {e.device_time_total / 1000:8.3f} ms  {e.input_shapes}")
for e in prof.events():
    if e.device_type == torch.autograd.DeviceType.CUDA and "nvjet" in e.name:
        print(f"KERNEL {e.name[:70]} {e.device_time_total:8.1f} us")
