"""The script behind ``tried-concat-channels.log``: the decoder's concatenation with dense gradients, A/B.

Run as ``PYTHONPATH=. python3 concat_trial.py [sample]`` on a GPU. Two fast training steps in one
process, timed in interleaved rounds: the decoder's ``torch.cat`` replaced by ``concat_channels``
below (its backward makes each input's gradient dense in that input's layout, so cuDNN need not copy
channel slices), and ``torch.cat`` itself. With ``sample``, a full sample of the plain fast combo follows
(the log's sample ran with ``concat_channels`` in the model, as it was then).
"""

import sys
import types

import pandas as pd
import torch

from meddpm.combos import get_combo
from meddpm.config import ModelConfig
from meddpm.measure.kernel_mix import category_shares, profile_kernels
from meddpm.measure.timing import time_once, time_synchronized
from meddpm.train import TrainStep
from meddpm.unet import memory_format_of, timestep_embedding

pd.set_option("display.width", 250)
config, combo, device = ModelConfig.preset("paper"), get_combo("fast"), torch.device("cuda")


class ChannelConcat(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.channels = a.shape[1]
        ctx.layouts = memory_format_of(a), memory_format_of(b)
        return torch.cat([a, b], dim=1)

    @staticmethod
    def backward(ctx, grad_out):
        grad_a, grad_b = grad_out[:, : ctx.channels], grad_out[:, ctx.channels :]
        return grad_a.contiguous(memory_format=ctx.layouts[0]), grad_b.contiguous(memory_format=ctx.layouts[1])


def forward_with(cat):
    """UNet3D.forward with the decoder's concatenation done by ``cat(a, b)``."""

    def forward(self, x, t):
        t_emb = timestep_embedding(t, self.config.model_channels).to(self.time_embed[0].weight.dtype)
        emb = self.time_embed(t_emb)
        skips = []
        h = x
        for block in self.input_blocks:
            h = block(h, emb)
            skips.append(h)
        h = self.middle_block(h, emb)
        for block in self.output_blocks:
            h = block(cat(h, skips.pop()), emb)
        return self.out(h)

    return forward


cats = {"concat_channels": ChannelConcat.apply, "torch.cat": lambda a, b: torch.cat([a, b], dim=1)}
steps = {name: TrainStep(config, combo, 1, device) for name in cats}
for name, step in steps.items():
    step.model.denoiser.forward = types.MethodType(forward_with(cats[name]), step.model.denoiser)
for name, step in steps.items():
    print(f"{name} first iteration {time_once(step, device) / 1e3:.1f} s", flush=True)
    for _ in range(3):
        step()
times = {name: [] for name in steps}
for _ in range(8):
    for name, step in steps.items():
        for _ in range(12):
            times[name].append(time_synchronized(step, device))
for name, step in steps.items():
    s = pd.Series(times[name])
    kernels = profile_kernels(step, iterations=2)
    iqr = s.quantile(0.75) - s.quantile(0.25)
    print(
        f"{name}: train median {s.median():.2f} ms IQR {iqr:.2f} min {s.min():.2f} n={len(s)}; "
        f"kernel ms {kernels.us.sum() / 1000:.2f} launches {kernels.launches.sum():.0f}",
        flush=True,
    )
    print(category_shares(kernels).round(3).to_string(), flush=True)
torch.cuda.reset_peak_memory_stats()
steps["concat_channels"]()
print(f"peak of one step (two models resident) {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
del steps, step
torch.cuda.empty_cache()
if "sample" in sys.argv:
    from meddpm.sampling import Sampler

    sampler = Sampler(config, combo, device)
    print(f"sample warm-up {time_once(lambda: sampler(steps=3), device) / 1e3:.1f} s", flush=True)
    for _ in range(3):
        print(f"full sample {time_once(sampler, device) / 1e3:.2f} s", flush=True)
