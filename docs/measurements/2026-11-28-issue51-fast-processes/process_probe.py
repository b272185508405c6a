"""One process of `fast` as a nightly's worker sees it, with what could set it apart from its siblings: its median
time, the card's SM clock, power and temperature over its rounds, where its buffers landed, and its kernels.

    python docs/measurements/2026-11-28-issue51-fast-processes/process_probe.py ROUNDS  (on a GPU)

Prints one JSON line prefixed PROBE. The compile cache is the one MEDDPM_COMPILE_CACHE names, as in the suite.
"""

import json
import statistics
import sys
import time

import torch

from meddpm.measure.machine.compile_cache import activate
from meddpm.measure.machine.nvml import open_gpu
from meddpm.measure.machine.timing import time_synchronized
from meddpm.measure.profiling.kernel_mix import profile_kernels
from meddpm.model.config import ModelConfig
from meddpm.run.train import TrainStep


def main() -> None:
    rounds = int(sys.argv[1])
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    activate(None, device)
    start = time.perf_counter()
    step = TrainStep(ModelConfig.preset("paper"), "fast", 1, device)
    for _ in range(step.calls_before_replay + 3):
        step()
    torch.cuda.synchronize()
    ready_s = time.perf_counter() - start
    gpu, _ = open_gpu(device)
    clocks, power, temps = [], [], []

    def during() -> None:
        clocks.append(gpu.sm_clock_mhz())
        power.append(gpu.instant_power_w())
        temps.append(gpu.temperature_c())

    times = [time_synchronized(step, device, during) for _ in range(rounds)]
    q1, median, q3 = statistics.quantiles(times, n=4)
    kernels = profile_kernels(step, iterations=3)
    param = next(step.model.denoiser.parameters())
    out = {
        "ready_s": round(ready_s, 2),
        "median_ms": round(median, 3),
        "rel_iqr": round((q3 - q1) / median, 4),
        "first_half_ms": round(statistics.median(times[: rounds // 2]), 3),
        "second_half_ms": round(statistics.median(times[rounds // 2 :]), 3),
        "sm_clock_mean_mhz": round(statistics.mean(clocks), 1),
        "sm_clock_min_mhz": min(clocks),
        "power_mean_w": round(statistics.mean(p for p in power if p is not None), 1),
        "temperature_mean_c": round(statistics.mean(temps), 1),
        "temperature_max_c": max(temps),
        "images_ptr_mod_2m": step.images.data_ptr() % (2 << 20),
        "param_ptr_mod_2m": param.data_ptr() % (2 << 20),
        "kernel_us_total": round(float(kernels["us"].sum()), 1),
        "launches": round(float(kernels["launches"].sum()), 1),
        "kernels": [[r.kernel, round(float(r.us), 1), round(float(r.launches), 2)] for r in kernels.itertuples()],
    }
    print("PROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
