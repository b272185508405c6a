"""One 128^3 GroupNorm+SiLU, forward and backward under torch.compile, three ways.

``v6``: v6's function, every per-channel constant inlined per voxel; ``stack``: today's function with
the custom operator switched off, so only the stacking of the constants (and, forward, saving them
for backward) makes Inductor write them out; ``once``: today's function (v7b). Run on a GPU as
``git show 6df9e1a:meddpm/unet.py > unet_v6.py; PYTHONPATH=.:. python3 group_norm_constants.py`` from
the repository root with this script and ``unet_v6.py`` there. ``h100-5-*.log`` is its output;
``h100-2-*.log`` came from an earlier form that compared v6 (``current``) with v7b (``realized``) only.
"""

import pandas as pd
import torch
import unet_v6

import meddpm.combos
import meddpm.unet
from meddpm.measure.kernel_mix import profile_kernels

pd.set_option("display.width", 250)
device = torch.device("cuda")
default_min_voxels = meddpm.unet._CONSTANTS_ONCE_MIN_VOXELS
VARIANTS = {
    "v6": (unet_v6.group_norm_silu_keep_layout, default_min_voxels),
    "stack": (meddpm.unet.group_norm_silu_keep_layout, float("inf")),
    "once": (meddpm.unet.group_norm_silu_keep_layout, default_min_voxels),
}


def measure(channels: int, fn, min_voxels: float) -> pd.DataFrame:
    """Kernel table of 5 forward+backward passes."""
    meddpm.unet._CONSTANTS_ONCE_MIN_VOXELS = min_voxels
    torch._dynamo.reset()
    gen = torch.Generator(device).manual_seed(0)
    layout = torch.channels_last_3d
    shape = (1, channels, 128, 128, 128)
    x = torch.randn(shape, device=device, generator=gen, dtype=torch.bfloat16).contiguous(memory_format=layout)
    x.requires_grad_()
    grad = torch.randn(shape, device=device, generator=gen, dtype=torch.bfloat16).contiguous(memory_format=layout)
    weight = torch.randn(channels, device=device, generator=gen).requires_grad_()
    bias = torch.randn(channels, device=device, generator=gen).requires_grad_()
    norm = torch.compile(fn, options=meddpm.combos._INDUCTOR_OPTIONS)

    def step() -> torch.Tensor:
        x.grad = None
        out = norm(x, 32, weight, bias, 1e-5)
        out.backward(grad)
        return out

    for _ in range(3):
        step()
    kernels = profile_kernels(step, iterations=5)
    kernels["kernel"] = kernels["kernel"].str.slice(0, 80)
    return kernels


for channels in (64, 128):
    for name, (fn, min_voxels) in VARIANTS.items():
        kernels = measure(channels, fn, min_voxels)
        print(channels, name, f"{kernels.us.sum():.0f} us launches {kernels.launches.sum():.0f}")
        print(kernels.head(6).round(1).to_string(), flush=True)
