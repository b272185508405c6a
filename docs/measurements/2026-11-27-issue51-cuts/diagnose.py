"""Where the suite's sampling, profiling and fast's compile on a cache hit spend their seconds, on a GPU machine.

python docs/measurements/2026-11-27-issue51-cuts/diagnose.py OUT  (MEDDPM_COMPILE_CACHE set to a warm cache)

Prints one table of wall seconds per part; OUT/diagnose.json keeps every figure.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from meddpm.measure.machine.compile_cache import activate
from meddpm.measure.machine.timing import time_once, time_synchronized
from meddpm.measure.profiling.iteration import _rows, iteration_counts
from meddpm.measure.profiling.scopes import Attribution, KinetoDtypes, device_kernels, module_bytes, module_scopes
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo
from meddpm.run.sampling import Sampler
from meddpm.run.train import TrainStep

out = sys.argv[1]
on_gpu = torch.cuda.is_available()
device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
config = ModelConfig.preset("paper" if on_gpu else "tiny")
figures: dict[str, object] = {}


def sync():
    if on_gpu:
        torch.cuda.synchronize(device)


# Matplotlib's font list, from nothing and from its cache.
mpl = "import time; t=time.perf_counter(); import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as p; " \
      "f=p.figure(); p.plot([1,2]); f.savefig('/tmp/x.png'); print(time.perf_counter()-t)"
folder = tempfile.mkdtemp()
env = {**os.environ, "MPLCONFIGDIR": folder}
figures["matplotlib"] = [float(subprocess.run([sys.executable, "-c", mpl], env=env, capture_output=True,
                                              text=True).stdout) for _ in range(2)]

for name in ("baseline", "opt1", "opt2", "opt12", "amp_bf16", "fast"):
    combo = get_combo(name)
    if combo.compile:
        activate(None, device)
    row: dict[str, object] = {}
    t0 = time.perf_counter()
    sampler = Sampler(config, combo, device)
    row["sampler_init"] = time.perf_counter() - t0
    row["sampler_warmup"] = time_once(lambda s=sampler: s(steps=3), device) / 1e3
    if combo.compile:
        from torch._dynamo.utils import compile_times
        row["compile_times_sampling"] = compile_times(repr="str")
    pairs = []
    for _ in range(3):
        for steps in (1, 6):  # the pair of calls of the tree it first ran on
            t0 = time.perf_counter()
            ms = time_synchronized(lambda s=sampler, n=steps: s(steps=n), device)
            pairs.append((steps, round(ms, 2), round((time.perf_counter() - t0) * 1e3, 2)))
    row["pairs_steps_event_ms_wall_ms"] = pairs
    del sampler
    t0 = time.perf_counter()
    step = TrainStep(config, combo, 1, device)
    row["train_init"] = time.perf_counter() - t0
    row["train_warmup"] = [round(time_once(step, device) / 1e3, 3) for _ in range(3)]
    # The profiled iteration, part by part.
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_gpu else [])]
    sync()
    t0 = time.perf_counter()
    with module_scopes(step), profile(activities=activities, record_shapes=True,
                                      profile_memory=True) as prof:
        step()
        sync()
    t1 = time.perf_counter()
    events = prof.events()
    t2 = time.perf_counter()
    records = prof.profiler.kineto_results.events()
    attribution = Attribution(events, KinetoDtypes(records))
    t3 = time.perf_counter()
    kernels = device_kernels(events)
    rows = _rows((k.name, attribution.of_kernel(k), (k.time_range.end - k.time_range.start) / 1e3) for k in kernels)
    counts = iteration_counts(rows, 0, 0)
    t4 = time.perf_counter()
    held = module_bytes(events, attribution, device)
    t5 = time.perf_counter()
    row["profile"] = {"run_and_stop": t1 - t0, "events": t2 - t1, "attribution": t3 - t2, "rows": t4 - t3,
                      "module_bytes": t5 - t4, "n_events": len(events), "n_kernels": len(kernels),
                      "launches": counts["launches"]}
    # The same without memory records, and without shapes.
    for label, kwargs in (("no_memory", {"record_shapes": True}), ("no_shapes_no_memory", {})):
        t0 = time.perf_counter()
        with module_scopes(step), profile(activities=activities, **kwargs) as p2:
            step()
            sync()
        t1 = time.perf_counter()
        n = len(p2.events())
        row["profile_" + label] = {"run_and_stop": t1 - t0, "events": time.perf_counter() - t1, "n_events": n}
    del step
    if on_gpu:
        torch.cuda.empty_cache()
    figures[name] = row
    print(name, json.dumps(row, default=str)[:1500], flush=True)

with open(os.path.join(out, "diagnose.json"), "w") as f:
    json.dump(figures, f, indent=1, default=str)
print("matplotlib font list from nothing, then cached:", figures["matplotlib"])
print(f"{'combo':9} {'s.init':>6} {'s.warm':>6} {'t.init':>6} {'prof.run':>8} {'events':>6} {'attr':>5} {'rows':>5} "
      f"{'bytes':>5} {'noMem':>5} {'bare':>5}")
for name, row in figures.items():
    if name == "matplotlib":
        continue
    p = row["profile"]
    print(f"{name:9} {row['sampler_init']:6.2f} {row['sampler_warmup']:6.2f} {row['train_init']:6.2f} "
          f"{p['run_and_stop']:8.2f} {p['events']:6.2f} {p['attribution']:5.2f} {p['rows']:5.2f} "
          f"{p['module_bytes']:5.2f} "
          f"{row['profile_no_memory']['run_and_stop'] + row['profile_no_memory']['events']:5.2f} "
          f"{row['profile_no_shapes_no_memory']['run_and_stop'] + row['profile_no_shapes_no_memory']['events']:5.2f}")
