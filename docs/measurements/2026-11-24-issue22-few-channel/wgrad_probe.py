"""Does fast's training step reach the output convolution's weight gradient in Triton (fast v11 trial)?

Spies on meddpm.kernels.convolution._tap_product_weight_grad (called when AOTAutograd traces the
backward: prints the operands' dtypes, devices and shapes) and on the opaque operator's Python body
(called when the compiled step runs), for three iterations of `fast` at the tiny preset on the GPU.
"""

import torch

import meddpm.kernels.convolution as convolution
from meddpm.kernels import long_reduction_matmul
from meddpm.model.config import ModelConfig
from meddpm.run.train import TrainStep

traced = convolution._tap_product_weight_grad


def traced_spy(grad_taps, channels_by_voxel):
    b = channels_by_voxel.t()
    print(
        "TRACE",
        grad_taps.dtype,
        grad_taps.shape,
        b.dtype,
        b.shape,
        grad_taps.device,
        "applies:",
        long_reduction_matmul.applies(grad_taps, b),
        flush=True,
    )
    return traced(grad_taps, channels_by_voxel)


runs = []
real = long_reduction_matmul._matmul
convolution._tap_product_weight_grad = traced_spy
torch.library.register_kernel("meddpm::matmul_long_reduction", "cuda", lambda a, b: runs.append(a.shape) or real(a, b))
for preset in ("tiny",):
    step = TrainStep(ModelConfig.preset(preset), "fast", device="cuda")
    losses = [step().item() for _ in range(3)]
    print("PROBE", preset, "losses", losses, "opaque calls", len(runs), runs[:2], flush=True)
