"""Energy blocks in two orders: probed power lowest first (the suite's) and highest first.

One process: the six combos of the paper preset built and warmed up as the suite does, then
phases that each start as the suite's energy phase starts (``fast`` alone for 6 s, as its last
rounds leave the card, then the probes) and run one soaked block per combo in the given order.
Every temperature the soak rule read is logged with its time, so other rules can be replayed on
the same histories. Writes one JSON line per block to ``OUT/blocks.jsonl``.

    python3 order_probe.py OUT low high low high
"""

import json
import math
import sys
import time
from pathlib import Path

import torch

from meddpm.measure.campaign import Campaign, CampaignSettings
from meddpm.measure.energy_block import measure_soaked_block, probe_combo
from meddpm.measure.heat_soak import SoakPlan
from meddpm.measure.power_sampler import PowerSampler, poll_period
from meddpm.measure.timing import synchronize
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo

COMBOS = ("baseline", "opt1", "opt2", "opt12", "amp_bf16", "fast")


def main(out: Path, orders: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    settings = CampaignSettings(max_rounds=500, median_precision=0.002, energy=False)
    campaign = Campaign(ModelConfig.preset("paper"), [get_combo(c) for c in COMBOS], device, settings=settings)
    t0 = time.perf_counter()
    campaign.run()
    gpu = campaign._gpu  # a probe script: the campaign's NVML handle
    print(f"campaign built and timed in {time.perf_counter() - t0:.1f} s", flush=True)
    period = poll_period(gpu.energy_mj)
    medians = {name: r.stats.median / 1e3 for name, r in campaign.results.items()}
    with (out / "blocks.jsonl").open("w") as f:
        for phase, order in enumerate(orders):
            fast = campaign.steps["fast"]
            for _ in range(math.ceil(6.0 / medians["fast"])):
                fast()
            synchronize(device)
            probes = {n: probe_combo(s, device, PowerSampler(gpu), medians[n]) for n, s in campaign.steps.items()}
            names = sorted(campaign.steps, key=lambda n: probes[n].power_w, reverse=order == "high")
            phase_start = time.perf_counter()
            for name in names:
                readings: list[tuple[float, int]] = []

                def temperature(readings: list = readings) -> int:
                    c = gpu.temperature_c()
                    readings.append((time.perf_counter(), c))
                    return c

                start = time.perf_counter()
                block = measure_soaked_block(
                    campaign.steps[name],
                    device,
                    PowerSampler(gpu),
                    period,
                    probes[name].iteration_s,
                    0.02,
                    3,
                    temperature,
                    SoakPlan(),
                )
                wall = time.perf_counter() - start
                row = {
                    "phase": phase,
                    "order": order,
                    "combo": name,
                    "probe_w": probes[name].power_w,
                    "wall_s": wall,
                    "soak": vars(block.soak),
                    "j_per_iter": block.counter_j / block.iterations,
                    "quantisation": block.quantisation,
                    "window_s": [w.gpu_s for w in block.windows],
                    "temps": [(t - start, c) for t, c in readings],
                }
                f.write(json.dumps(row) + "\n")
                f.flush()
                s = block.soak
                print(
                    f"{phase} {order:4} {name:9} {probes[name].power_w:5.0f} W  block {wall:5.1f} s  "
                    f"soak {s.seconds:5.1f} s {'settled' if s.settled else 'NOT settled'} {s.start_c}->{s.end_c} C  "
                    f"{row['j_per_iter']:.2f} J/iter",
                    flush=True,
                )
            print(f"phase {phase} ({order} first): {time.perf_counter() - phase_start:.1f} s of blocks", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
