"""Issue 22: where a synchronized `fast` iteration spends what its kernels do not.

One process, one variant. It builds `fast` (Inductor options overridden by --inductor KEY=VALUE,
for a probe only), runs its first iterations, then times:
  sync      : --rounds iterations, each between two CUDA events and followed by a synchronize,
              as the suite and the bench time them (median);
  b2b       : blocks of --block iterations queued back to back between two events (ms per iteration);
  kernels   : a torch.profiler trace of --traced synchronized iterations: per iteration the kernels'
              count and summed time, the span from the first kernel's start to the last one's end,
              and the largest gaps between consecutive kernels with their neighbours' names.
  host      : the host's time to queue one iteration after a synchronize (median of 20).
So sync - span is what the host exposes around an iteration (GPU idle before its first kernel,
after its last), span - kernels what it exposes inside one, and sync - b2b what queuing hides.
--device cpu --preset tiny checks the script on a CPU (ops instead of kernels).
Prints one JSON line, prefixed PROBE.
"""

import argparse
import ast
import json
import os
import tempfile
import time

import numpy as np
import torch

import meddpm.run.combos as combos
from meddpm.measure.timing import synchronize, time_synchronized
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo
from meddpm.run.train import TrainStep


def b2b_ms(step, device, iterations: int) -> float:
    """Milliseconds per iteration of ``iterations`` queued back to back (wall time on a CPU)."""
    return time_synchronized(lambda: [step() for _ in range(iterations)], device) / iterations


def host_ms(step, device) -> float:
    """Milliseconds the host takes to queue one iteration, the card idle before it."""
    synchronize(device)
    t = time.perf_counter()
    step()
    elapsed = (time.perf_counter() - t) * 1e3
    synchronize(device)
    return elapsed


def kernel_trace(step, device, iterations: int) -> list[list[dict]]:
    """Per synchronized iteration, its kernels (name, ts, dur in us) in start order (on a CPU: its ops)."""
    from torch.profiler import ProfilerActivity, profile

    gpu = device.type == "cuda"
    synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA if gpu else ProfilerActivity.CPU]) as prof:
        for _ in range(iterations):
            step()
            synchronize(device)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    kernels = sorted(
        (
            {"name": e["name"], "ts": float(e["ts"]), "dur": float(e["dur"])}
            for e in events
            if e.get("cat") == ("kernel" if gpu else "cpu_op")
        ),
        key=lambda k: k["ts"],
    )
    # Iterations are separated by the synchronize: the largest gaps between kernels.
    gaps = sorted(range(1, len(kernels)), key=lambda i: kernels[i]["ts"] - kernels[i - 1]["ts"] - kernels[i - 1]["dur"])
    cuts = sorted(gaps[-(iterations - 1) :]) if iterations > 1 else []
    bounds = [0, *cuts, len(kernels)]
    return [kernels[a:b] for a, b in zip(bounds, bounds[1:])]


def describe(iteration: list[dict], top: int) -> dict:
    kernel_us = sum(k["dur"] for k in iteration)
    span_us = iteration[-1]["ts"] + iteration[-1]["dur"] - iteration[0]["ts"]
    gaps = [
        (iteration[i]["ts"] - iteration[i - 1]["ts"] - iteration[i - 1]["dur"], i) for i in range(1, len(iteration))
    ]
    gap_values = np.array([g for g, _ in gaps])
    largest = sorted(gaps, reverse=True)[:top]
    return {
        "kernels": len(iteration),
        "kernel_ms": round(kernel_us / 1e3, 3),
        "span_ms": round(span_us / 1e3, 3),
        "gap_ms": round(float(gap_values.clip(min=0).sum()) / 1e3, 3),
        "gaps_over_10us": int((gap_values > 10).sum()),
        "gaps_over_10us_ms": round(float(gap_values[gap_values > 10].sum()) / 1e3, 3),
        "median_gap_us": round(float(np.median(gap_values)), 2),
        "short_kernels_under_5us": int(sum(k["dur"] < 5 for k in iteration)),
        "largest_gaps": [[round(g, 1), iteration[i - 1]["name"][:70], iteration[i]["name"][:70]] for g, i in largest],
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--label", default="")
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--block", type=int, default=20)
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--traced", type=int, default=3)
    p.add_argument("--inductor", action="append", default=[], help="KEY=VALUE, a Python literal")
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="paper")
    args = p.parse_args()
    t_start = time.perf_counter()
    for item in args.inductor:
        key, value = item.split("=", 1)
        combos._INDUCTOR_OPTIONS[key] = ast.literal_eval(value)  # a probe's override, not the combo's
    device = torch.device(args.device)
    torch.manual_seed(0)
    step = TrainStep(ModelConfig.preset(args.preset), get_combo("fast"), 1, device)
    warm, losses = [], []
    for i in range(3):
        if i == 1 and device.type == "cuda":  # as the suite reads a graphed step's peak: while it records
            torch.cuda.reset_peak_memory_stats(device)
        t = time.perf_counter()
        losses.append(float(step()))
        warm.append(round(time.perf_counter() - t, 3))
    peak_gib = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    sync = np.array([time_synchronized(step, device) for _ in range(args.rounds)])
    b2b = [b2b_ms(step, device, args.block) for _ in range(args.blocks)]
    sync_after = np.array([time_synchronized(step, device) for _ in range(args.rounds // 2)])
    host = np.array([host_ms(step, device) for _ in range(20)])
    traced = [describe(it, top=8) for it in kernel_trace(step, device, args.traced)]
    out = {
        "label": args.label,
        "inductor": args.inductor,
        "warmup_s": warm,
        "losses": losses,
        "peak_gib": round(peak_gib, 3),
        "whole_step_graph": getattr(step, "whole_step_graph", False),
        "sync_median_ms": round(float(np.median(sync)), 3),
        "sync_rel_iqr": round(float(np.subtract(*np.percentile(sync, [75, 25])) / np.median(sync)), 4),
        "sync_after_median_ms": round(float(np.median(sync_after)), 3),
        "b2b_ms": [round(b, 3) for b in b2b],
        "host_queue_median_ms": round(float(np.median(host)), 3),
        "traced": traced,
        "process_s": round(time.perf_counter() - t_start, 1),
    }
    print("PROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
