"""The cost of one planted pass (an in-place multiply over 256 MiB) on this GPU, with CUDA events."""

import torch

buffer = torch.ones(64 * 2**20, device="cuda")
for _ in range(20):
    buffer.mul_(1.0)
times = []
for _ in range(30):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        buffer.mul_(1.0)
    end.record()
    end.synchronize()
    times.append(start.elapsed_time(end) / 10)
times.sort()
print(f"one planted pass: median {times[15]:.4f} ms, min {times[0]:.4f} ms, max {times[-1]:.4f} ms (30 x 10 passes)")
