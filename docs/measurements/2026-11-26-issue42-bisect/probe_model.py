"""Candidate one-line regressions in the model code, each measured in its own campaign against the code as it is.

    python docs/measurements/2026-11-26-issue42-bisect/probe_model.py [--combo opt1] [--preset paper]

The candidates are the text replacements of make_history.py's REGRESSIONS, applied to the
imported modules' methods. Campaigns run one after another, the unchanged code first and last
(its two medians show the drift between them); each prints its median and its ratio to the first.
"""

import argparse

import torch
import torch.nn.functional as F

from meddpm.measure.campaign.interleaved import Campaign
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.model import nn as blocks
from meddpm.model import unet
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo

ORIGINAL = (blocks.GroupNormSiLU.forward, unet.ResBlock.forward)


def silu_written_out(self, x):
    if self.keep_layout and self.fused:
        return blocks.group_norm_silu_keep_layout(x, self.num_groups, self.weight, self.bias, self.eps)
    h = super(blocks.GroupNormSiLU, self).forward(x)
    return h * torch.sigmoid(h)


def emb_contiguous(self, x, emb):
    h = self.in_layers(x)
    h = h + self.emb_layers(emb).type(h.dtype)[:, :, None, None, None].expand_as(h).contiguous()
    return self.skip(x) + self.out_layers(h)


VARIANTS = {
    "as is": ORIGINAL,
    "silu_written_out": (silu_written_out, ORIGINAL[1]),
    "emb_contiguous": (ORIGINAL[0], emb_contiguous),
    "as is, again": ORIGINAL,
}

p = argparse.ArgumentParser()
p.add_argument("--combo", default="opt1")
p.add_argument("--preset", default="paper")
p.add_argument("--device", default="cuda")
args = p.parse_args()
assert F.silu  # the unchanged forward's SiLU
settings = CampaignSettings(warmup=3, min_rounds=20, max_rounds=20, energy=False)
first = None
for name, (norm_forward, block_forward) in VARIANTS.items():
    blocks.GroupNormSiLU.forward, unet.ResBlock.forward = norm_forward, block_forward
    campaign = Campaign(
        ModelConfig.preset(args.preset), [get_combo(args.combo)], torch.device(args.device), settings=settings
    )
    median = campaign.run()[args.combo].stats.median
    campaign.close()
    first = first or median
    print(f"{args.combo} {name:18s} {median:9.3f} ms  ratio to 'as is' {median / first:.4f}", flush=True)
