"""Why the triton_op version of the few-channel kernels failed parity at batch 2 (issue 22).

Compiles x -> conv(2x - 1) at batch 1 and 2 (8^3, 3 -> 64 channels, channels-last, bf16 autocast)
with the kernels as they were measured (triton_op, ../2026-11-24-issue22-concat) and as kept (opaque
custom operators), with and without Inductor's comprehensive padding, and prints the largest error
against cuDNN. Run from the repository root: python3 docs/measurements/2026-11-24-issue22-few-channel/strides_probe.py
"""

import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, "docs/measurements/2026-11-24-issue22-concat")
import few_channel_convolution as as_triton_op  # noqa: E402

from meddpm.kernels import few_channel_convolution as as_opaque  # noqa: E402


def first_conv(module, x, weight):
    by_tap = weight.permute(2, 3, 4, 1, 0).reshape(-1, weight.shape[0]).to(torch.bfloat16)
    padded = F.pad((2.0 * x - 1.0).to(torch.bfloat16), (1, 1, 1, 1, 1, 1))
    op = module.few_channel_conv3d if module is as_triton_op else module.conv3d_few_channels
    n, _, *spatial = x.shape
    return op(padded, by_tap).view(n, *spatial, -1).permute(0, 4, 1, 2, 3)


for padding in (True, False):
    for batch in (1, 2):
        for module in (as_triton_op, as_opaque):
            torch._dynamo.reset()
            torch._inductor.config.comprehensive_padding = padding
            torch.manual_seed(0)
            x = torch.randn(batch, 3, 8, 8, 8, device="cuda").contiguous(memory_format=torch.channels_last_3d)
            weight = torch.randn(64, 3, 3, 3, 3, device="cuda") / 9
            got = torch.compile(first_conv, fullgraph=True)(module, x, weight).float()
            expected = F.conv3d((2.0 * x - 1.0).bfloat16(), weight.bfloat16(), padding=1).float()
            error = (got - expected).abs().max().item()
            label = "triton_op" if module is as_triton_op else "opaque"
            print(
                f"PROBE padding={padding} batch={batch} {label:10s} "
                f"max error {error:.4f} (scale {expected.abs().max().item():.2f})",
                flush=True,
            )
