"""The energy study (issue 19) on the GPU at hand: counter period, energy per iteration over processes, charts.

Run from the repository root on a GPU machine, e.g. ``python docs/measurements/energy/energy_study.py --out $OUT``:

1. times the NVML energy counter's update period, and how often the instant-power field changes,
   by polling each flat out on the idle card;
2. measures the combos of the paper preset in fresh worker processes (``python -m meddpm.worker``,
   2 warm-up iterations, 2 rounds for the iteration time, then per combo, once the card's
   temperature has settled for it, one energy block planned for a 1 % counter bound), one
   process after another, as many as fit in ``--budget`` seconds: every combo in the first
   process, then those measured in fewest processes, cheapest first, whose cost in the last
   process still fits (a block lasts about 13 s whatever the combo, plus a soak of 5-30 s; two
   processes of baseline, opt2 and ``fast`` took 363-386 s on a fresh machine);
3. if time is left, measures one volume's full reverse diffusion of ``--sample`` combos, to set the
   measured energy of a sample beside the estimate at the training step's joules per FLOP;
4. writes each process's JSON and power chart, ``study.json`` and ``study.md`` under ``--out``, and
   prints the table last: energy per iteration of every process, the spread between processes,
   the counter bound, the interpolated counter and the integrated instant power against the plain
   counter, mean power, SM clock range, per volume, per sample, TFLOP/J and the period under load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from meddpm.bench import ComboResult  # noqa: E402 (the checkout's meddpm, not an installed one)
from meddpm.measure.power_plot import power_chart  # noqa: E402
from meddpm.measure.processes import result_from_dict  # noqa: E402

COMBOS = ("baseline", "opt2", "opt1", "opt12", "amp_bf16", "fast")


def poll_changes(read, seconds: float) -> list[float]:
    """Times at which ``read()`` returned a new value, polling flat out for ``seconds``."""
    start = time.perf_counter()
    last, changes = read(), []
    while (now := time.perf_counter()) - start < seconds:
        value = read()
        if value != last:
            changes.append(now)
            last = value
    return changes


def intervals_ms(changes: list[float]) -> dict[str, float | int | None]:
    gaps = [1e3 * (b - a) for a, b in zip(changes, changes[1:])]
    if not gaps:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(gaps), "min": min(gaps), "max": max(gaps), "n": len(gaps)}


def counter_study() -> dict:
    """The counter's and the instant power's update periods on the idle card (NVML index 0, no CUDA context)."""
    import pynvml

    from meddpm.measure.nvml import Gpu

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gpu = Gpu(pynvml, handle)
    name = pynvml.nvmlDeviceGetName(handle)
    return {
        "gpu": name.decode() if isinstance(name, bytes) else name,
        "driver": str(pynvml.nvmlSystemGetDriverVersion()),
        "energy_counter_ms": intervals_ms(poll_changes(gpu.energy_mj, 2.0)),
        "instant_power_supported": gpu.instant_power_w() is not None,
        "instant_power_ms": intervals_ms(poll_changes(gpu.instant_power_w, 1.0)),
        "power_usage_ms": intervals_ms(poll_changes(lambda: pynvml.nvmlDeviceGetPowerUsage(handle), 1.0)),
    }


def run_worker(combos: list[str], path: Path, device: str, preset: str) -> tuple[list[ComboResult], float]:
    cmd = [sys.executable, "-m", "meddpm.worker", "--preset", preset, "--combos", ",".join(combos)]
    cmd += ["--device", device, "--warmup", "2", "--min-rounds", "2", "--max-rounds", "2", "--out", str(path)]
    t0 = time.monotonic()
    log = path.with_suffix(".log")
    with log.open("w") as f:
        code = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise SystemExit(f"worker failed ({code}); see {log}")
    document = json.loads(path.read_text())
    return [result_from_dict(r) for r in document["results"]], time.monotonic() - t0


def combo_cost_s(r: ComboResult) -> float:
    """Seconds a combo took in its process: build, warm-up, rounds, soak and its energy block with leads."""
    block = sum(w.gpu_s for b in r.energy_blocks for w in b.windows)
    block += sum(b.soak.seconds for b in r.energy_blocks if b.soak)
    leads = 2 * 1.5 * max((b.period_s for b in r.energy_blocks), default=0.1) + 2 * r.stats.median / 1e3
    return r.setup_s + sum(r.warmup_ms) / 1e3 + sum(r.samples_ms) / 1e3 + block + leads


def fitting(
    combos: list[str], counts: dict[str, int], costs: dict[str, float], overhead: float, seconds: float
) -> list[str]:
    """Every combo before any cost is known; then those measured in fewest processes, cheapest first, that fit."""
    if not costs:
        return list(combos)
    chosen: list[str] = []
    for c in sorted(combos, key=lambda c: (counts[c], costs[c])):
        if overhead + sum(costs[x] for x in chosen) + costs[c] <= seconds:
            chosen.append(c)
    return [c for c in combos if c in chosen]


def sample_child(combos: list[str], path: Path, device: str, preset: str) -> None:
    """In a child process: one window of full samples per combo, with its energy."""
    import torch

    from meddpm.combos import get_combo
    from meddpm.config import ModelConfig
    from meddpm.measure.sample_energy import sample_with_energy

    config, rows = ModelConfig.preset(preset), []
    torch.cuda.set_device(torch.device(device))
    for name in combos:
        r, block = sample_with_energy(config, get_combo(name), torch.device(device))
        rows.append(
            {
                "combo": name,
                "seconds": r.seconds,
                "warmup_s": r.warmup_s,
                "samples": block.iterations if block else None,
                "j_per_sample": block.counter_j / block.iterations if block else None,
                "bound": block.quantisation if block else None,
            }
        )
    path.write_text(json.dumps(rows))


def summarise(by_combo: dict[str, list[ComboResult]], samples: dict[str, dict]) -> list[dict]:
    rows = []
    for combo, all_runs in by_combo.items():
        runs = [r for r in all_runs if r.energy]
        if not runs:
            continue
        per_process = [r.energy.j_per_iter for r in runs]
        windows = [w for r in runs for b in r.energy_blocks for w in b.windows]
        counter = sum(w.counter_j for w in windows)
        interp = [w for w in windows if w.interpolated_j is not None]
        integ = [w for w in windows if w.integrated_j is not None]
        clocks = [row[2] for r in runs for b in r.energy_blocks for row in b.trace if row[2] is not None]
        mean = statistics.mean(per_process)
        measured = samples.get(combo, {}).get("j_per_sample")
        rows.append(
            {
                "combo": combo,
                "processes": len(per_process),
                "J/iter per process": [round(x, 2) for x in per_process],
                "J/iter": round(mean, 2),
                "range %": round(100 * (max(per_process) - min(per_process)) / mean, 2),
                "bound % (max)": round(100 * max(r.energy.quantisation for r in runs), 3),
                "interpolated vs counter %": round(
                    100 * (sum(w.interpolated_j for w in interp) / sum(w.counter_j for w in interp) - 1), 3
                )
                if interp
                else None,
                "integrated power vs counter %": round(
                    100 * (sum(w.integrated_j for w in integ) / sum(w.counter_j for w in integ) - 1), 2
                )
                if integ
                else None,
                "W": round(counter / sum(w.gpu_s for w in windows), 1),
                "SM MHz": f"{min(clocks)}-{max(clocks)}" if clocks else None,
                "J/volume": round(statistics.mean(r.energy_j_per_volume for r in runs), 2),
                "kJ/sample est.": round(statistics.mean(r.sample_energy_j_estimate for r in runs) / 1e3, 3),
                "kJ/sample measured": round(measured / 1e3, 3) if measured else None,
                "TFLOP/J": round(statistics.mean(r.tflop_per_j for r in runs), 4),
                "period ms (load)": round(max(r.energy_period_ms for r in runs), 1),
                "°C at block": [b.soak.end_c for r in runs for b in r.energy_blocks if b.soak],
                "soak s (max)": max(
                    (round(b.soak.seconds) for r in runs for b in r.energy_blocks if b.soak), default=None
                ),
                "block s": round(statistics.mean(sum(w.gpu_s for w in r.energy_blocks[0].windows) for r in runs), 1),
            }
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--preset", default="paper")
    p.add_argument("--combos", default=",".join(COMBOS))
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--budget", type=float, default=330.0, help="seconds for the whole study (default: 330)")
    p.add_argument("--sample", default="amp_bf16", help="combos whose full sample's energy is measured if time is left")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--sample-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.sample_child:
        sample_child(args.sample.split(","), out / "samples.json", args.device, args.preset)
        return
    started = time.monotonic()
    combos = args.combos.split(",")

    period = counter_study()
    (out / "period.json").write_text(json.dumps(period, indent=2))
    print(f"counter study: {json.dumps(period)}", flush=True)

    by_combo: dict[str, list[ComboResult]] = {c: [] for c in combos}
    costs: dict[str, float] = {}
    overhead, skipped = 30.0, []
    for i in range(1, args.processes + 1):
        remaining = args.budget - (time.monotonic() - started)
        chosen = fitting(combos, {c: len(by_combo[c]) for c in combos}, costs, overhead, remaining)
        if not chosen:
            skipped.append(f"process {i}: nothing fits in the {remaining:.0f} s left")
            continue
        left_out = [c for c in combos if c not in chosen]
        if left_out:
            skipped.append(f"process {i}: {', '.join(left_out)} left out to stay within --budget")
        print(f"process {i}: {', '.join(chosen)} ({remaining:.0f} s of budget left)", flush=True)
        results, wall = run_worker(chosen, out / f"process-{i}.json", args.device, args.preset)
        for r in results:
            by_combo[r.combo].append(r)
            costs[r.combo] = combo_cost_s(r)
        overhead = max(10.0, wall - sum(costs[c] for c in chosen))
        measured = [r for r in results if r.energy_blocks]
        if measured:
            power_chart(measured, out / f"process-{i}-power.png", f"process {i}: power and SM clock, {args.preset}")
        for r in results:
            e = r.energy
            print(
                f"  {r.combo}: {e.j_per_iter:.2f} J/iter, bound {e.quantisation:.2%}, spread {e.spread:.2%}, "
                f"period {r.energy_period_ms:.1f} ms, soak {r.energy_blocks[0].soak.describe()}"
                if e
                else f"  {r.combo}: no energy ({r.energy_note})",
                flush=True,
            )

    samples: dict[str, dict] = {}
    remaining = args.budget - (time.monotonic() - started)
    if args.sample and remaining > 45:
        cmd = [sys.executable, __file__, "--sample-child", "--out", str(out), "--sample", args.sample]
        cmd += ["--device", args.device, "--preset", args.preset]
        try:
            with (out / "samples.log").open("w") as f:
                subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=remaining, check=True)
            samples = {row["combo"]: row for row in json.loads((out / "samples.json").read_text())}
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as exc:
            skipped.append(f"full-sample energy of {args.sample}: {exc} (see samples.log)")
    elif args.sample:
        skipped.append(f"full-sample energy of {args.sample}: {remaining:.0f} s left, needs about 45")

    rows = summarise(by_combo, samples)
    study = {"period": period, "rows": rows, "samples": list(samples.values()), "skipped": skipped}
    (out / "study.json").write_text(json.dumps(study, indent=2))
    import pandas as pd

    table = pd.DataFrame(rows).set_index("combo") if rows else pd.DataFrame()
    (out / "study.md").write_text(table.to_markdown() + "\n" if rows else "no energy measured\n")
    c = period["energy_counter_ms"]
    print(f"\n{period['gpu']} (driver {period['driver']}), {time.monotonic() - started:.0f} s")
    print(f"energy counter period, idle: median {c['median']} ms (min {c['min']}, max {c['max']}, {c['n']} intervals)")
    print(f"instant power field: {'supported' if period['instant_power_supported'] else 'not supported'}, "
          f"changes every {period['instant_power_ms']['median']} ms (median)")  # fmt: skip
    for row in samples.values():
        print(f"full sample of {row['combo']}: {row['seconds']:.2f} s, {row['j_per_sample']} J (bound {row['bound']})")
    for line in skipped:
        print(f"skipped: {line}")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(table.to_string())


if __name__ == "__main__":
    main()
