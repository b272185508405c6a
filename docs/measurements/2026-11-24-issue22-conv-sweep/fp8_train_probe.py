"""Issue 22: what float8 (e4m3) forward and data-gradient convolutions at 128^3 would do to a `fast` iteration.

The training counterpart of ``fp8_sample_probe.py`` (a probe in its own process, not a combo). Each 3x3x3
convolution at width 128 with channels in multiples of 64 becomes an autograd.Function:
- forward: the TMA kernel with float8 operands (activation cast to e4m3, weights scaled per output
  channel, scale and bias in the epilogue), as in sampling; the e4m3 activation is saved for backward;
- data gradient: the same kernel on the output gradient (scaled per tensor to e4m3's range) and the
  weights flipped in space with their channels swapped (scaled per input channel, the data gradient's
  output channel, so the scale stays an epilogue factor);
- weight and bias gradients: cuDNN in bf16, from the e4m3 activation the forward used.

    python3 fp8_train_probe.py bf16|fp8 [--rounds 100]

Prints one JSON line (prefix PROBE): warm-up, the first three losses, the median iteration over
``--rounds`` (CUDA events) with its relative IQR, and two iterations' kernel time by category.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from fp8_sample_probe import E4M3_MAX, e4m3_rows, fp8_conv3d, kernel_applies  # noqa: E402

from meddpm.measure.kernel_mix import category_shares, profile_kernels  # noqa: E402
from meddpm.measure.stats import Stats  # noqa: E402
from meddpm.measure.timing import time_once, time_synchronized  # noqa: E402
from meddpm.model import nn as meddpm_nn  # noqa: E402
from meddpm.model.config import ModelConfig  # noqa: E402
from meddpm.run.combos import get_combo  # noqa: E402
from meddpm.run.train import TrainStep  # noqa: E402

_original_forward = meddpm_nn.Conv3d.forward


class _Float8Conv3d(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        w8, scale = e4m3_rows(weight.float())
        x8 = x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).contiguous(memory_format=torch.channels_last_3d)
        ctx.save_for_backward(x8, weight)
        return fp8_conv3d(x8, w8, scale, bias.float())

    @staticmethod
    def backward(ctx, grad_out):
        x8, weight = ctx.saved_tensors
        g = grad_out.contiguous(memory_format=torch.channels_last_3d)
        g_scale = g.abs().amax().float().clamp_min(1e-30) / E4M3_MAX
        g8 = (g / g_scale).to(torch.float8_e4m3fn).contiguous(memory_format=torch.channels_last_3d)
        flipped = weight.float().flip(2, 3, 4).transpose(0, 1)  # (cin, cout, 3, 3, 3)
        wt8, t_scale = e4m3_rows(flipped)
        grad_x = fp8_conv3d(g8, wt8, t_scale * g_scale, torch.zeros_like(t_scale))
        _, grad_w, grad_b = torch.ops.aten.convolution_backward(
            g.bfloat16(), x8.bfloat16(), weight.bfloat16(), [weight.shape[0]],
            [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 1, [False, True, True],
        )  # fmt: skip
        return grad_x.to(grad_out.dtype), grad_w.to(weight.dtype), grad_b.to(weight.dtype)


def _forward_fp8_at_full_resolution(self, x: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.bfloat16 or self.bias is None or not kernel_applies(self, x):
        return _original_forward(self, x)
    return _Float8Conv3d.apply(x, self.weight, self.bias)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["bf16", "fp8"])
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    if args.mode == "fp8":
        meddpm_nn.Conv3d.forward = _forward_fp8_at_full_resolution
    torch.manual_seed(0)
    step = TrainStep(ModelConfig.preset("paper"), get_combo("fast"), 1, device)
    out = {"mode": args.mode, "losses": []}
    warmup = []
    for _ in range(3):
        warmup.append(round(time_once(lambda: out["losses"].append(float(step())), device) / 1e3, 2))
    out["warmup_s"] = warmup
    stats = Stats.from_samples([time_synchronized(step, device) for _ in range(args.rounds)])
    out.update(median_ms=round(stats.median, 3), rel_iqr=round(stats.rel_iqr, 4))
    kernels = profile_kernels(step, iterations=2)
    out["kernel_ms"] = {str(k): round(float(v), 3) for k, v in category_shares(kernels)["ms"].items()}
    out["top_kernels_us"] = [[r.kernel[:70], round(r.us, 1)] for r in kernels.head(12).itertuples()]
    print("PROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
