"""Trilinear upsampling by 2 built from per-axis slices and sums.

Replaces ``F.interpolate(x, scale_factor=2, mode="trilinear", align_corners=False)`` in
:class:`~meddpm.model.unet.Upsample` (combo flag ``separable_upsample``). Why (docs/performance.md,
fast v2): ``interpolate``'s backward scatters gradients with atomic adds, two of the iteration's
longest Triton kernels; written per axis, the backward is a gather that Inductor fuses, and both
went (fast v8: taken on the channels-last view, see
:func:`trilinear_upsample_2x`). Checked against ``interpolate`` by ``tests/test_model.py``:
``test_separable_upsample_is_trilinear_interpolation`` (values and gradient, 1e-12 in float64, and the
layout, in both layouts) and
``test_kernel_variants_compute_the_same_denoiser`` (the whole denoiser); on a GPU, under
``torch.compile``, by ``perf_tests/test_parity.py::test_fast_keeps_the_bf16_bounds``.
"""

from __future__ import annotations

import torch

from meddpm.kernels.common import memory_format_of


def trilinear_upsample_2x(x: torch.Tensor) -> torch.Tensor:
    """Trilinear interpolation by 2 of an ``(n, c, d, h, w)`` tensor (align_corners=False), in ``x``'s layout.

    One :func:`linear_upsample_2x` per spatial axis. A channels-last ``x`` is upsampled through its
    ``(n, d, h, w, c)`` view: interleaving even and odd outputs (a stack) yields a tensor contiguous
    in the order of its dimensions, so in that view every intermediate keeps the channels innermost.
    Interleaved along ``(n, c, d, h, w)`` itself, the intermediates were NCDHW and the kernels that
    read one layout and wrote the other ran at a fraction of the bandwidth (docs/performance.md, fast v8a).
    """
    if memory_format_of(x) == torch.channels_last_3d:
        y = x.permute(0, 2, 3, 4, 1)
        for dim in (1, 2, 3):
            y = linear_upsample_2x(y, dim)
        return y.permute(0, 4, 1, 2, 3)
    for dim in (2, 3, 4):
        x = linear_upsample_2x(x, dim)
    return x


def linear_upsample_2x(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Linear interpolation by 2 along ``dim`` (align_corners=False), from slices and sums.

    Output 2i is 3/4 x[i] + 1/4 x[i-1] and output 2i+1 is 3/4 x[i] + 1/4 x[i+1], edges
    clamped. Applied along D, H and W in turn this is trilinear interpolation, but built
    from elementwise ops: its backward is a gather that fuses, where interpolate's backward
    is a scatter with atomic adds (docs/performance.md, fast v2).
    """
    n = x.shape[dim]
    before = torch.cat([x.narrow(dim, 0, 1), x.narrow(dim, 0, n - 1)], dim)
    after = torch.cat([x.narrow(dim, 1, n - 1), x.narrow(dim, n - 1, 1)], dim)
    even, odd = 0.75 * x + 0.25 * before, 0.75 * x + 0.25 * after
    return torch.stack([even, odd], dim + 1).flatten(dim, dim + 1)
