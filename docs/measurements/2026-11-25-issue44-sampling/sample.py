"""One full reverse diffusion (all T steps, one volume) of one combo in this process, as the suite's sampling
case times it (meddpm.measure.campaign.sampling.time_sampling); prints one JSON line."""

import json
import sys

import torch

from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo
from meddpm.measure.campaign.sampling import time_sampling

preset, combo = sys.argv[1], sys.argv[2]
device = torch.device("cuda", 0)
r = time_sampling(ModelConfig.preset(preset), get_combo(combo), device)
print(json.dumps({"preset": preset, "combo": combo, "seconds": r.seconds, "warmup_s": r.warmup_s,
                  "ms_per_step": r.ms_per_step, "gpu": torch.cuda.get_device_name(device)}), flush=True)
