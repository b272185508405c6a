"""Issue 22: what float8 (e4m3) 3x3x3 convolutions at 128^3 would do to `fast`'s sample and its numerics.

A probe, not a combo: it patches ``meddpm.model.nn.Conv3d.forward`` in this process so that each 3x3x3
convolution at the full resolution (width 128, channels multiples of 64, no gradient) runs the TMA
kernel of ``tma_conv_sweep.py`` with float8 operands: the activation cast to e4m3 without a scale
(GroupNorm + SiLU outputs are O(1); the cast fuses into the kernel that produces them), the weights
scaled per output channel to e4m3's range, that scale and the bias applied in the kernel's epilogue,
and bf16 out. Everything else is `fast` as it is.

    python3 fp8_sample_probe.py bf16       # fast as it is: two full 250-step samples, timed
    python3 fp8_sample_probe.py fp8        # the same with float8 convolutions at 128^3
    python3 fp8_sample_probe.py numerics   # noise predictions of both against strict FP32

The first two print warm-up, full samples and kernel time a step; the third the denoiser's noise
prediction at three timesteps (eager), with and without the float8 convolutions, against strict FP32
eager (relative RMS and largest error). As in the parity tests, the zero-initialised layers get small
random weights first (``meddpm.measure.parity.randomise_zero_initialised``): at init the prediction
is zero. One JSON line, prefix PROBE.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, str(Path(__file__).parent))
from tma_conv_sweep import _conv3d_tma_kernel  # noqa: E402

from meddpm.measure.kernel_mix import category_shares, profile_kernels  # noqa: E402
from meddpm.measure.parity import randomise_zero_initialised  # noqa: E402
from meddpm.measure.timing import time_once  # noqa: E402
from meddpm.model import nn as meddpm_nn  # noqa: E402
from meddpm.model.config import ModelConfig  # noqa: E402
from meddpm.run.combos import Combo, get_combo  # noqa: E402
from meddpm.run.sampling import Sampler  # noqa: E402

E4M3_MAX = 448.0
ACTIVATION_SCALE = 1.0  # a power of two: activations enter e4m3 multiplied by it (numerics sweeps it)
ACTIVATION_AMAX: list[float] = []  # largest |activation| of each float8 convolution, eager calls only


@torch.library.custom_op("fp8probe::conv3d", mutates_args=())
def fp8_conv3d(x8: torch.Tensor, w8: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """conv3d(x8, w8 * scale, bias, padding=1) in bf16; x8 channels-last e4m3, w8 (cout, 27 * cin) e4m3."""
    n, cin, d, h, w = x8.shape
    cout = w8.shape[0]
    xl = x8.permute(0, 2, 3, 4, 1).contiguous()  # a no-op for a channels-last x8
    out = torch.empty((n, d, h, w, cout), device=x8.device, dtype=torch.bfloat16)
    bh, bw, bk, bn = 4, w, min(128, cin), 64
    _conv3d_tma_kernel[(n * d * (h // bh), cout // bn)](
        TensorDescriptor.from_tensor(xl, [1, 1, bh, bw, bk]), TensorDescriptor.from_tensor(w8, [bn, bk]),
        TensorDescriptor.from_tensor(out, [1, 1, bh, bw, bn]), scale, bias, d, h, w,
        CIN=cin, BH=bh, BW=bw, BK=bk, BN=bn, SWAP=True, WARP_SPECIALIZE=False, WEIGHTS_K_MAJOR=True, EPILOGUE=True,
        num_warps=8, num_stages=3,
    )  # fmt: skip
    return out.permute(0, 4, 1, 2, 3)


@fp8_conv3d.register_fake
def _(x8, w8, scale, bias):
    n, _, d, h, w = x8.shape
    out = x8.new_empty((n, d, h, w, w8.shape[0]), dtype=torch.bfloat16)
    return out.permute(0, 4, 1, 2, 3)


_original_forward = meddpm_nn.Conv3d.forward


def e4m3_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cout, cin, 3, 3, 3) float weights -> e4m3 rows (cout, 27 * cin), tap-major, and their per-row scales."""
    scale = weight.abs().amax(dim=(1, 2, 3, 4)).clamp_min(1e-12) / E4M3_MAX
    scaled = (weight / scale[:, None, None, None, None]).permute(0, 2, 3, 4, 1).reshape(weight.shape[0], -1)
    return scaled.to(torch.float8_e4m3fn).contiguous(), scale


def kernel_applies(conv: meddpm_nn.Conv3d, x: torch.Tensor) -> bool:
    """Whether ``conv(x)`` is a 3x3x3 convolution at width 128 that the float8 kernel computes."""
    return (
        x.is_cuda
        and conv.kernel_size == (3, 3, 3)
        and conv.padding == (1, 1, 1)
        and conv.stride == (1, 1, 1)
        and x.shape[-1] == 128
        and x.shape[-2] % 4 == 0
        and conv.in_channels % 64 == 0
        and conv.out_channels % 64 == 0
    )


def _forward_fp8_at_full_resolution(self, x: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled() or not kernel_applies(self, x):
        return _original_forward(self, x)
    w8, scale = e4m3_rows(self.weight.float())
    if not torch.compiler.is_compiling():
        ACTIVATION_AMAX.append(float(x.abs().max()))
    # Scaled up, small activations stay out of e4m3's subnormals (below 2^-6); clamped, large ones
    # saturate instead of becoming NaN (e4m3fn has no infinity).
    x8 = (x * ACTIVATION_SCALE).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    x8 = x8.contiguous(memory_format=torch.channels_last_3d)
    bias = self.bias.float() if self.bias is not None else torch.zeros_like(scale)
    return fp8_conv3d(x8, w8, scale / ACTIVATION_SCALE, bias)


def noise_predictions(sampler: Sampler, combo: Combo) -> list[torch.Tensor]:
    """The denoiser's noise estimate at t = 999, 500, 10 for one fixed x_t (eager), under ``combo``'s
    backend flags and autocast (the ``baseline`` combo: strict FP32)."""
    g = torch.Generator(sampler.device).manual_seed(1)
    x_t = torch.randn(sampler.masks[:, :1].shape, generator=g, device=sampler.device)
    x_t = x_t.contiguous(memory_format=sampler.combo.memory_format)
    out = []
    for t in (999, 500, 10):
        tt = torch.full((1,), t, device=sampler.device, dtype=torch.long)
        with torch.inference_mode(), combo.flags(), combo.autocast(sampler.device):
            out.append(sampler.model.predict_noise(x_t, tt, sampler.masks).float())
    return out


def errors(got: list[torch.Tensor], reference: list[torch.Tensor]) -> list[dict]:
    return [
        {
            "rel_rms": round(float((g - r).pow(2).mean().sqrt() / r.pow(2).mean().sqrt()), 5),
            "max_abs": round(float((g - r).abs().max()), 4),
            "ref_max_abs": round(float(r.abs().max()), 3),
        }
        for g, r in zip(got, reference, strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["bf16", "fp8", "numerics"])
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    sampler = Sampler(ModelConfig.preset("paper"), get_combo("fast"), device)
    out = {"mode": args.mode, "triton": triton.__version__}
    if args.mode == "numerics":
        randomise_zero_initialised(sampler.model, torch.Generator().manual_seed(0))
        reference = noise_predictions(sampler, get_combo("baseline"))
        out["bf16_vs_fp32"] = errors(noise_predictions(sampler, sampler.combo), reference)
        meddpm_nn.Conv3d.forward = _forward_fp8_at_full_resolution
        global ACTIVATION_SCALE
        for ACTIVATION_SCALE in (1.0, 16.0, 64.0):
            out[f"fp8_x{ACTIVATION_SCALE:g}_vs_fp32"] = errors(noise_predictions(sampler, sampler.combo), reference)
        out["activation_amax"] = round(max(ACTIVATION_AMAX), 2)
        print("PROBE " + json.dumps(out), flush=True)
        return
    if args.mode == "fp8":
        meddpm_nn.Conv3d.forward = _forward_fp8_at_full_resolution
    out["warmup_s"] = round(time_once(lambda: sampler(steps=3), device) / 1e3, 2)
    out["full_s"] = [round(time_once(sampler, device) / 1e3, 3) for _ in range(2)]
    out["finite"] = bool(torch.isfinite(sampler()).all())
    kernels = profile_kernels(lambda: sampler(steps=3))
    out["kernel_ms_per_step"] = {str(k): round(float(v) / 3, 3) for k, v in category_shares(kernels)["ms"].items()}
    out["top_kernels_us_per_step"] = [[r.kernel[:70], round(r.us / 3, 1)] for r in kernels.head(12).itertuples()]
    print("PROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
