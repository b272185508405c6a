"""Issue 22: where a `fast` process's first iteration goes, and what Inductor settings buy.

One process: import torch, build `fast` (seeded), time its first three iterations, read
Dynamo's compile_times and cache counters, then time --rounds iterations. --inductor KEY=VALUE
(repeatable) sets torch._inductor.config for the whole process, to compare a setting with the
default. run.sh runs it under py-spy where it can, so the host's time can be split by function.
Prints one JSON line, prefixed PROBE.
"""

import argparse
import ast
import json
import time

T_START = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch._inductor.config as inductor_config  # noqa: E402

from meddpm.measure.timing import time_synchronized  # noqa: E402
from meddpm.model.config import ModelConfig  # noqa: E402
from meddpm.run.train import TrainStep  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--label", default="")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--inductor", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    import_s = time.perf_counter() - T_START
    import meddpm

    for item in args.inductor:
        key, value = item.split("=", 1)
        inductor_config.__setattr__(key, ast.literal_eval(value))
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    step = TrainStep(ModelConfig.preset("paper"), "fast", 1, device)
    torch.cuda.synchronize()
    setup_s = time.perf_counter() - t0
    warm, losses = [], []
    for _ in range(3):
        t = time.perf_counter()
        losses.append(float(step()))
        warm.append(time.perf_counter() - t)
    from torch._dynamo.utils import compilation_time_metrics, compile_times, counters

    phases = ("bytecode_tracing", "_compile.compile_inner", "aot_trace_joint_graph", "backward._backward_impl")

    samples = np.array([time_synchronized(step, device) for _ in range(args.rounds)])
    q1, med, q3 = np.percentile(samples, [25, 50, 75])
    out = {
        "label": args.label,
        "torch": torch.__version__,
        "meddpm": meddpm.__file__,
        "inductor": args.inductor,
        "compile_threads": inductor_config.compile_threads,
        "import_s": round(import_s, 2),
        "setup_s": round(setup_s, 2),
        "warmup_s": [round(w, 3) for w in warm],
        "losses": losses,
        "median_ms": round(float(med), 3),
        "rel_iqr": round(float((q3 - q1) / med), 4),
        "counters": {k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd")},
        "phases_s": {k: round(sum(compilation_time_metrics.get(k, [])), 2) for k in phases},
        "compile_times": compile_times(repr="str", aggregate=True),
        "process_s": round(time.perf_counter() - T_START, 1),
    }
    print("PROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
