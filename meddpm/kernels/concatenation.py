"""Concatenation along channels whose backward hands each part a dense gradient.

Replaces ``torch.cat([h, skip], dim=1)`` in the decoder of :class:`~meddpm.model.unet.UNet3D` (combo flag
``dense_concat_gradients``). Why (docs/performance.md, fast v9): autograd's gradient of a concatenation is a
slice of the output's gradient, for a channels-last tensor a strided view. Where that slice is the gradient of a
convolution's output (a decoder block's last convolution and its 1x1 skip convolution, an upsampling
convolution), cuDNN copies it to a dense tensor, once for the data gradient and once for the weight gradient.
Written out, the backward gives each part its gradient as a dense tensor of the output's layout, which Inductor
writes in the kernel that computes the output's gradient. Checked against ``torch.cat`` by
``tests/test_model.py::test_concat_channels_is_cat`` and ``test_kernel_variants_compute_the_same_denoiser``; the
layouts Inductor hands cuDNN by ``tests/test_kernel_operators.py``.
"""

from __future__ import annotations

import torch

from meddpm.kernels.common import memory_format_of
from meddpm.kernels.operators import inlined_operator


def concat_channels(parts: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(parts, dim=1)``, whose gradient reaches each part dense, in the output's layout."""
    return _concat_channels_op(parts)


def _concat_channels(parts: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(parts, dim=1)


def _split_channels_dense(grad: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    """The gradient of :func:`_concat_channels`: ``grad`` split along channels, each part a dense copy."""
    layout = memory_format_of(grad)
    return [part.clone(memory_format=layout) for part in grad.split(sizes, dim=1)]


# The functions are their own fakes: their outputs' strides follow from their ops.
_concat_channels_op = inlined_operator("concat_channels", _concat_channels, fake=_concat_channels)
_split_channels_dense_op = inlined_operator("split_channels_dense", _split_channels_dense, fake=_split_channels_dense)
_concat_channels_op.register_autograd(
    lambda ctx, grad: _split_channels_dense_op(grad, ctx.sizes),
    setup_context=lambda ctx, inputs, output: setattr(ctx, "sizes", [part.shape[1] for part in inputs[0]]),
)
