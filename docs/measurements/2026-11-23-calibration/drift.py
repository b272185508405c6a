"""Machine-to-machine drift: does timing fixed reference kernels beside the cases cancel it?

    python drift.py measure --out DIR [--processes 3] [--combos baseline,opt1,amp_bf16]
    python drift.py analyse DIR...

``measure`` runs each process on the visible GPU: the reference kernels, the combos' interleaved
rounds (paper preset), the reference kernels again; one JSON per process. ``analyse`` takes the
folders of several machine starts (or cards) and compares, per combo, the spread across them of
the raw medians with the spread of the medians divided by each reference kernel and by their
geometric mean. Normalising is worth it only where it shrinks that spread.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from calibration import machine_factor  # beside this script


def one_process(out: Path, combos: list[str]) -> None:
    import torch

    from meddpm.bench import Campaign, CampaignSettings
    from meddpm.combos import get_combo
    from meddpm.config import ModelConfig
    from meddpm.measure.calibration import calibrate, reference_kernels
    from meddpm.measure.environment import environment

    device = torch.device("cuda")
    kernels = reference_kernels(device)
    before = calibrate(device, kernels)
    settings = CampaignSettings(warmup=2, min_rounds=6, max_rounds=6, energy=False)
    campaign = Campaign(ModelConfig.preset("paper"), [get_combo(c) for c in combos], device, settings=settings)
    results = campaign.run()
    after = calibrate(device, kernels)
    env = environment(device)
    document = {
        "gpu_uuid": str(torch.cuda.get_device_properties(device).uuid),
        "gpu_name": env.get("gpu_name"),
        "calibration_ms": {k: (before[k] + after[k]) / 2 for k in before},
        "calibration_before_ms": before,
        "calibration_after_ms": after,
        "median_ms": {c: r.stats.median for c, r in results.items()},
        "sm_clock_mhz": {c: [s.sm_clock_mhz for s in r.gpu_states] for c, r in results.items()},
    }
    out.write_text(json.dumps(document, indent=1))
    print(json.dumps({"calibration_ms": document["calibration_ms"], "median_ms": document["median_ms"]}))


def measure(args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    for i in range(args.processes):
        cmd = [sys.executable, __file__, "one", "--out", str(args.out / f"process-{i}.json"), "--combos", args.combos]
        subprocess.run(cmd, check=True)


def analyse(args: argparse.Namespace) -> None:
    starts = []
    for folder in args.folders:
        docs = [json.loads(p.read_text()) for p in sorted(Path(folder).glob("process-*.json"))]
        calib = {k: float(np.median([d["calibration_ms"][k] for d in docs])) for k in docs[0]["calibration_ms"]}
        medians = {c: float(np.median([d["median_ms"][c] for d in docs])) for c in docs[0]["median_ms"]}
        starts.append({"start": Path(folder).name, "uuid": docs[0]["gpu_uuid"], "calib": calib, "medians": medians})
    kernels = list(starts[0]["calib"])
    print("per start (median over its processes):")
    for s in starts:
        cal = ", ".join(f"{k} {v:.4f}" for k, v in s["calib"].items())
        med = ", ".join(f"{c} {v:.2f}" for c, v in s["medians"].items())
        print(f"  {s['start']} ({s['uuid'][:13]}): {cal} | {med}")
    print("spread across starts (std of logs), raw and normalised:")
    header = ["combo", "raw", *[f"/{k}" for k in kernels], "/geomean"]
    print("  " + " ".join(f"{h:>14}" for h in header))
    for combo in starts[0]["medians"]:
        raw = np.log([s["medians"][combo] for s in starts])
        row = [np.std(raw, ddof=1)]
        for k in kernels:
            row.append(np.std(raw - np.log([s["calib"][k] for s in starts]), ddof=1))
        factors = np.log([machine_factor(s["calib"], starts[0]["calib"]) for s in starts])
        row.append(np.std(raw - factors, ddof=1))
        print("  " + " ".join([f"{combo:>14}", *[f"{v:>13.2%} " for v in row]]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--processes", type=int, default=3)
    m.add_argument("--combos", default="baseline,opt1,amp_bf16")
    o = sub.add_parser("one")
    o.add_argument("--out", type=Path, required=True)
    o.add_argument("--combos", required=True)
    a = sub.add_parser("analyse")
    a.add_argument("folders", nargs="+", type=Path)
    args = p.parse_args()
    if args.command == "measure":
        measure(args)
    elif args.command == "one":
        one_process(args.out, args.combos.split(","))
    else:
        analyse(args)


if __name__ == "__main__":
    main()
