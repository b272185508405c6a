"""Candidate one-line regressions of an eager combo, measured against it in one interleaved campaign.

    python docs/measurements/2026-11-26-issue42-bisect/probe.py [--preset paper] [--device cuda]

Prints each candidate's median ratio to its combo: the scratch history (make_history.py) plants
the one whose slowdown lies in 1-3 %.
"""

import argparse
import dataclasses

import torch

from meddpm.measure.campaign.interleaved import Campaign
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo

CANDIDATES = {  # (combo, field changed)
    "opt1+bias_apart": ("opt1", {"conv_bias_apart": True}),
    "opt1+dense_concat": ("opt1", {"dense_concat_gradients": True}),
    "amp_bf16+bias_apart": ("amp_bf16", {"conv_bias_apart": True}),
}

p = argparse.ArgumentParser()
p.add_argument("--preset", default="paper")
p.add_argument("--device", default="cuda")
args = p.parse_args()
combos = {name: get_combo(name) for name in ("opt1", "amp_bf16")}
for name, (base, change) in CANDIDATES.items():
    combos[name] = dataclasses.replace(combos[base], name=name, **change)
settings = CampaignSettings(warmup=3, min_rounds=15, max_rounds=15, energy=False)
campaign = Campaign(
    ModelConfig.preset(args.preset), list(combos.values()), torch.device(args.device), settings=settings
)
results = campaign.run()
for name, (base, _) in CANDIDATES.items():
    ratio = campaign.ratio(name, base)
    print(
        f"{name:24s} {results[name].stats.median:9.3f} ms  vs {base} {results[base].stats.median:9.3f} ms  "
        f"ratio {ratio.median:.4f} [{ratio.q1:.4f}, {ratio.q3:.4f}]"
    )
campaign.close()
