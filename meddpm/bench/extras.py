"""The measurements ``meddpm-bench`` adds after the timed rounds where asked: ``--kernel-mix`` (GPU time by
kernel category), ``--sample`` (a full reverse diffusion) and ``--gpus`` (DDP weak scaling).

Each prints its table and returns its rows for the results file.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pandas as pd
import torch

from meddpm.bench.output import say
from meddpm.measure.campaign.protocol import MeasuringCampaign
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.energy.sample import sample_with_energy
from meddpm.measure.processes.ddp import run_ddp
from meddpm.measure.profiling.kernel_mix import category_shares, profile_kernels
from meddpm.model.config import ModelConfig
from meddpm.report.tables import ddp_text, kernel_mix_table
from meddpm.run.combos import get_combo


def kernel_mix(campaign: MeasuringCampaign) -> dict[str, list[dict[str, object]]]:
    """Profile one more iteration of each combo; print and return GPU time by kernel category."""
    kernels_by_combo: dict[str, list[dict[str, object]]] = {}
    by_category = {}
    for name, step in campaign.steps.items():
        kernels = profile_kernels(step)
        by_category[name] = category_shares(kernels)
        kernels_by_combo[name] = kernels.to_dict(orient="records")
        say(f"top kernels of {name}:")
        say(kernels.head(8).to_string(index=False, formatters={"kernel": lambda k: k[:90]}))
    say("GPU time share by kernel category:")
    say(kernel_mix_table(by_category).to_string(float_format=lambda v: f"{v:.1%}"))
    return kernels_by_combo


def sampling(config: ModelConfig, combos: Sequence[str], device: torch.device) -> list[dict[str, object]]:
    """Time a full reverse diffusion per combo, with its energy where the GPU has a counter; print and return."""
    rows = []
    for name in combos:
        r, block = sample_with_energy(config, get_combo(name), device)
        row: dict[str, object] = {"combo": name, "seconds": r.seconds, "ms/step": r.ms_per_step}
        row["warm-up s"] = r.warmup_s
        if block is not None:
            row.update({"J/sample": block.counter_j / block.iterations, "bound %": 100 * block.quantisation})
        rows.append(row)
    say(f"sampling: {config.timesteps} reverse steps of one {config.volume} volume")
    say(pd.DataFrame(rows).set_index("combo").to_string(float_format=lambda v: f"{v:.2f}"))
    return rows


def ddp(
    config: ModelConfig, combos: Sequence[str], gpus: int, device: torch.device, batch: int, settings: CampaignSettings
) -> list[dict[str, object]]:
    """World sizes 1..gpus per combo under DDP; print the scaling table and return the raw results."""
    kind = "cuda" if device.type == "cuda" else "cpu"
    unit = ("GPU", "GPUs") if kind == "cuda" else ("process", "processes")  # gloo ranks share the CPU
    results = []
    for name in combos:
        for world in range(1, gpus + 1):
            print(f"DDP: {name} on {world} {unit[world > 1]}...", file=sys.stderr)
            results.append(
                run_ddp(
                    config.name,
                    name,
                    world,
                    device=kind,
                    batch_per_rank=batch,
                    warmup=settings.warmup,
                    rounds=settings.min_rounds,
                )
            )
    say(f"data-parallel weak scaling, batch {batch} per rank, slowest rank per round:")
    say(ddp_text(results))
    return [r.as_dict() for r in results]
