"""Probes for issue 22: what a fresh `fast` process spends, and what three cheap changes buy.

One phase per process (probe.sh runs them in order, sharing one Inductor cache folder):
  train  : build `fast` (seeded), time its first iterations (compile_times and cache counters
           read after them), record the first losses, then time --rounds iterations.
           --precompile turns on Dynamo's experimental caching precompile
           (torch._dynamo.config.caching_precompile) and --save-precompile writes its entries
           (torch.compiler.save_cache_artifacts) after the rounds; --cudnn-limit sets
           torch.backends.cudnn.benchmark_limit (0: every engine cuDNN offers).
           --kernel-mix profiles 2 iterations' kernels by category after the rounds.
  sample : time 3 warm-up reverse steps and then two full 250-step samples of `fast`
           (--no-graphs: without CUDA graphs), then profile 3 steps' kernels by category.
--without FLAG (either phase) turns one of `fast`'s boolean flags off, to compare a change with its absence.
Prints one JSON line per phase, prefixed PROBE.
"""

import argparse
import dataclasses
import json
import time

import numpy as np
import torch

from meddpm.measure.kernel_mix import category_shares, profile_kernels
from meddpm.measure.timing import time_once, time_synchronized
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo
from meddpm.run.sampling import Sampler
from meddpm.run.train import TrainStep


def compile_report() -> dict:
    from torch._dynamo.utils import compile_times, counters

    wanted = ("inductor", "aot_autograd", "dynamo_cache")
    return {
        "counters": {k: dict(v) for k, v in counters.items() if k in wanted},
        "compile_times": compile_times(repr="str", aggregate=True),
    }


def fast_combo(args: argparse.Namespace):
    combo = get_combo("fast")
    return dataclasses.replace(combo, **{args.without: False}) if args.without else combo


def train(args: argparse.Namespace, device: torch.device) -> dict:
    if args.precompile:
        torch._dynamo.config.caching_precompile = True
    if args.cudnn_limit is not None:
        torch.backends.cudnn.benchmark_limit = args.cudnn_limit
    torch.manual_seed(0)
    t0 = time.perf_counter()
    step = TrainStep(ModelConfig.preset("paper"), fast_combo(args), 1, device)
    setup_s = time.perf_counter() - t0
    warm, losses = [], []
    for _ in range(3):
        t = time.perf_counter()
        loss = step()
        losses.append(float(loss))
        warm.append(time.perf_counter() - t)
    out = {"setup_s": round(setup_s, 2), "warmup_s": [round(w, 3) for w in warm], "losses": losses}
    out.update(compile_report())
    samples = np.array([time_synchronized(step, device) for _ in range(args.rounds)])
    q1, med, q3 = np.percentile(samples, [25, 50, 75])
    out.update(median_ms=round(float(med), 3), rel_iqr=round(float((q3 - q1) / med), 4))
    if args.kernel_mix:
        kernels = profile_kernels(step, iterations=2)
        out["kernel_ms"] = {str(k): round(float(v), 3) for k, v in category_shares(kernels)["ms"].items()}
        out["top_kernels_us"] = [[r.kernel[:90], round(r.us, 1), r.category] for r in kernels.head(25).itertuples()]
    if args.save_precompile:
        t = time.perf_counter()
        artifacts = torch.compiler.save_cache_artifacts()
        out["save_s"] = round(time.perf_counter() - t, 2)
        out["saved_bytes"] = len(artifacts[0]) if artifacts else 0
    return out


def sample(args: argparse.Namespace, device: torch.device) -> dict:
    combo = fast_combo(args)
    if args.no_graphs:
        combo = dataclasses.replace(combo, cuda_graphs=False)
    torch.manual_seed(0)
    sampler = Sampler(ModelConfig.preset("paper"), combo, device)
    warmup_s = time_once(lambda: sampler(steps=3), device) / 1e3
    full_s = [time_once(sampler, device) / 1e3 for _ in range(2)]
    x = sampler(steps=1)
    kernels = profile_kernels(lambda: sampler(steps=3))
    shares = category_shares(kernels)
    return {
        "cuda_graphs": not args.no_graphs,
        "warmup_s": round(warmup_s, 2),
        "full_s": [round(s, 3) for s in full_s],
        "finite": bool(torch.isfinite(x).all()),
        "kernel_ms_per_step": {str(k): round(float(v) / 3, 3) for k, v in shares["ms"].items()},
        "kernels": int(len(kernels)),
        "top_kernels_us_per_step": [
            [r.kernel[:90], round(r.us / 3, 1), r.category] for r in kernels.head(20).itertuples()
        ],
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=["train", "sample"])
    p.add_argument("--label", default="")
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--precompile", action="store_true")
    p.add_argument("--save-precompile", action="store_true")
    p.add_argument("--cudnn-limit", type=int, default=None)
    p.add_argument("--no-graphs", action="store_true")
    p.add_argument("--kernel-mix", action="store_true")
    p.add_argument("--without", default=None)
    args = p.parse_args()
    t_start = time.perf_counter()
    device = torch.device("cuda", 0)
    out = {
        "phase": args.phase,
        "label": args.label,
        "torch": torch.__version__,
        "has_caching_precompile": hasattr(torch._dynamo.config, "caching_precompile"),
    }
    out.update(train(args, device) if args.phase == "train" else sample(args, device))
    out["process_s"] = round(time.perf_counter() - t_start, 1)
    print("PROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
