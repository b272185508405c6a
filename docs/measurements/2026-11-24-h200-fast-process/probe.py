"""Where a fresh `fast` process spends its time, and how precise its median is after N rounds.

One phase per process (run by probe.sh, each with its own Inductor cache folder as the phase says):
  rounds   : build `fast`, time the first iterations (compilation broken down by torch._dynamo's
             compile_times and the cache counters), then 300 timed rounds as the campaign times them
             (a synchronize, CUDA events around one iteration); optionally save Inductor's
             cache artifacts (torch.compiler.save_cache_artifacts) to a file.
  nocudnn  : the same first iterations with cuDNN autotuning off, to see its share.
  mega     : load the saved artifacts (torch.compiler.load_cache_artifacts) into an empty cache first.
Prints one JSON line per phase.
"""

import argparse
import dataclasses
import json
import time

import numpy as np
import torch

from meddpm.measure.timing import time_once, time_synchronized
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo
from meddpm.run.train import TrainStep


def median_se_rel(samples: np.ndarray, n: int, draws: int = 2000) -> float:
    """Relative standard error of the median of n rounds, by resampling the measured rounds."""
    rng = np.random.default_rng(0)
    medians = np.median(rng.choice(samples, size=(draws, n), replace=True), axis=1)
    return float(np.std(medians) / np.median(samples))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("phase")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--save-artifacts", default=None)
    p.add_argument("--load-artifacts", default=None)
    args = p.parse_args()
    t_start = time.perf_counter()
    if args.load_artifacts:
        with open(args.load_artifacts, "rb") as f:
            torch.compiler.load_cache_artifacts(f.read())
    load_s = time.perf_counter() - t_start
    combo = get_combo("fast")
    if args.phase == "nocudnn":
        combo = dataclasses.replace(combo, cudnn_benchmark=False)
    device = torch.device("cuda", 0)
    t0 = time.perf_counter()
    step = TrainStep(ModelConfig.preset("paper"), combo, 1, device)
    setup_s = time.perf_counter() - t0
    warm = [time_once(step, device) / 1e3 for _ in range(3)]
    from torch._dynamo.utils import compile_times, counters

    out = {
        "phase": args.phase,
        "load_artifacts_s": round(load_s, 2),
        "setup_s": round(setup_s, 2),
        "warmup_s": [round(w, 3) for w in warm],
        "counters": {k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd", "dynamo_cache")},
        "compile_times": compile_times(repr="str", aggregate=True),
    }
    if args.phase in ("rounds", "mega"):
        samples = np.array([time_synchronized(step, device) for _ in range(args.rounds)])
        q1, med, q3 = np.percentile(samples, [25, 50, 75])
        out.update(
            median_ms=float(med),
            rel_iqr=float((q3 - q1) / med),
            first5_median_ms=float(np.median(samples[:5])),
            median_se_rel={n: median_se_rel(samples, n) for n in (5, 10, 30, 60, 100, 200)},
            lag1_autocorrelation=float(np.corrcoef(samples[:-1], samples[1:])[0, 1]),
            samples_ms=[round(float(s), 4) for s in samples],
        )
    if args.save_artifacts:
        artifacts = torch.compiler.save_cache_artifacts()
        if artifacts is not None:
            data, info = artifacts
            with open(args.save_artifacts, "wb") as f:
                f.write(data)
            out["artifacts_bytes"] = len(data)
            out["artifacts_info"] = str(info)[:2000]
    out["process_s"] = round(time.perf_counter() - t_start, 1)
    print("PROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
