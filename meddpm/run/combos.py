"""Optimization combos: how a training step is run (precision, layout, backend flags).

A combo never changes what is computed, only how. Its global backend flags are applied
as a scope (:meth:`Combo.flags`) that restores every flag it touched on exit, so nothing
leaks from one combo or test into the next.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import torch

from meddpm.errors import UserError
from meddpm.kernels.operators import prepare_inductor
from meddpm.model.unet import UNet3D

Fn = TypeVar("Fn", bound=Callable[..., object])

# Inductor's layout optimisation only knows 2-D convolutions: with it on, the tensors it makes for a 3-D
# convolution (the bf16 casts of weights and activations under autocast among them) get its default, contiguous,
# layout, and cuDNN converts every one of them back to channels-last and its output again (docs/performance.md,
# fast v4). Off, every convolution's inputs keep the strides eager PyTorch gives them. Training hid this, as the
# tensors saved for backward have their strides fixed. Inductor writes out an elementwise result that several
# kernels use once it reads more than ``realize_reads_threshold`` (4) tensors. GroupNorm's output recomputed in
# backward reads five (the input and four per-channel vectors), so each backward wrote it in float32 and read it
# twice (docs/performance.md, fast v6). At 8 it is recomputed inside each kernel instead. Combo kernels launch
# independent kernels of a graph together, as one: fewer launches, so fewer gaps between kernels
# (docs/performance.md, fast v12a).
_INDUCTOR_OPTIONS = {"layout_optimization": False, "realize_reads_threshold": 8, "combo_kernels": True}


@dataclass(frozen=True)
class Combo:
    """One way to run the model.

    ``tf32`` allows TF32 tensor cores for float32 convolutions and matmuls (False means
    strict IEEE float32, whatever the framework's defaults); ``channels_last`` keeps the
    model and its inputs in channels-last-3d; ``autocast_dtype`` is the autocast dtype or None;
    ``cudnn_benchmark`` lets cuDNN autotune its algorithms; ``compile`` runs the loss (forward
    and, through AOTAutograd, backward) under ``torch.compile``; ``sdpa_attention`` computes the
    attention blocks with ``scaled_dot_product_attention`` (the same softmax(q^T k / sqrt(C)) v);
    ``separable_upsample`` builds the trilinear upsampling from per-axis slices and sums (the
    same function, see :func:`meddpm.kernels.upsampling.trilinear_upsample_2x`); ``layout_preserving_norm``
    computes GroupNorm so that channels-last stays channels-last (the same function, see
    :func:`meddpm.kernels.normalization.group_norm_keep_layout`); ``fused_norm_silu`` makes that GroupNorm and the
    SiLU after it one function, differentiated by hand (the same function, see
    :func:`meddpm.kernels.normalization.group_norm_silu_keep_layout`); ``output_conv_by_taps`` computes the last
    convolution as a matrix product and a sum of shifted slices (the same function, see
    :func:`meddpm.kernels.convolution.conv3d_by_taps`); ``input_conv_by_taps`` computes the first convolution as a
    gather of shifted inputs and a matrix product, on a GPU in Triton kernels of our own (the same function, see
    :func:`meddpm.kernels.convolution.conv3d_by_gathered_taps`); ``conv_bias_apart`` adds each convolution's bias as an
    elementwise op after it (the same function, see :class:`meddpm.model.nn.Conv3d`); ``dense_concat_gradients``
    joins the decoder's skips so that their gradients reach the convolutions dense (the same function, see
    :func:`meddpm.kernels.concatenation.concat_channels`); ``fused_adam`` uses
    Adam's fused kernel; ``cuda_graphs`` replays the training step as CUDA graphs (the whole iteration
    as one graph, or Inductor's CUDA graph trees where it cannot be: see :class:`meddpm.run.train.TrainStep`),
    so the host no longer issues its kernels one by one.
    """

    name: str
    description: str
    tf32: bool = False
    channels_last: bool = False
    autocast_dtype: torch.dtype | None = None
    cudnn_benchmark: bool = False
    compile: bool = False
    sdpa_attention: bool = False
    separable_upsample: bool = False
    layout_preserving_norm: bool = False
    fused_norm_silu: bool = False
    output_conv_by_taps: bool = False
    input_conv_by_taps: bool = False
    conv_bias_apart: bool = False
    dense_concat_gradients: bool = False
    fused_adam: bool = False
    cuda_graphs: bool = False

    def configure(self, denoiser: UNet3D) -> None:
        """Choose the denoiser's kernels for this combo (attention, upsampling and GroupNorm variants)."""
        denoiser.use_sdpa_attention(self.sdpa_attention)
        denoiser.use_separable_upsample(self.separable_upsample)
        denoiser.use_layout_preserving_norm(self.layout_preserving_norm)
        denoiser.use_fused_norm_silu(self.fused_norm_silu)
        denoiser.use_output_conv_by_taps(self.output_conv_by_taps)
        denoiser.use_input_conv_by_taps(self.input_conv_by_taps)
        denoiser.use_conv_bias_apart(self.conv_bias_apart)
        denoiser.use_dense_concat_gradients(self.dense_concat_gradients)

    def compiled(self, fn: Fn, *, cuda_graphs: bool = False) -> Fn:
        """``fn`` under ``torch.compile`` when this combo compiles, else ``fn`` itself.

        With ``cuda_graphs`` Inductor replays ``fn``'s kernels as CUDA graphs; the caller must then
        mark each new step (``torch.compiler.cudagraph_mark_step_begin``) and copy any output
        it keeps past the next call, whose replay overwrites it.
        """
        if not self.compile:
            return fn
        from torch._inductor import config

        # An option this PyTorch lacks would stop the compile, and the package accepts any torch >= 2.4.
        known = {name: value for name, value in _INDUCTOR_OPTIONS.items() if hasattr(config, name)}
        options = {**known, **prepare_inductor(), "triton.cudagraphs": cuda_graphs}
        return torch.compile(fn, options=options)  # type: ignore[return-value]

    def replays_graphs(self, device: torch.device) -> bool:
        """Whether this combo's compiled step replays as CUDA graphs on ``device`` (GPUs only)."""
        return self.compile and self.cuda_graphs and device.type == "cuda"

    @property
    def math_precision(self) -> str:
        """The precision the tensor math runs in: 'bf16', 'fp16', 'tf32' or 'fp32'."""
        if self.autocast_dtype is not None:
            return {torch.bfloat16: "bf16", torch.float16: "fp16"}[self.autocast_dtype]
        return "tf32" if self.tf32 else "fp32"

    @property
    def memory_format(self) -> torch.memory_format:
        """Layout for the model's parameters and 5-D inputs."""
        return torch.channels_last_3d if self.channels_last else torch.contiguous_format

    def flags(self) -> contextlib.AbstractContextManager[None]:
        """This combo's global backend flags; every flag is restored on exit."""
        return backend_flags(tf32=self.tf32, cudnn_benchmark=self.cudnn_benchmark)

    def autocast(self, device: torch.device | str) -> contextlib.AbstractContextManager[object]:
        """Autocast for the forward pass (a no-op for full-precision combos)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(device).type, dtype=self.autocast_dtype)


COMBOS: dict[str, Combo] = {
    c.name: c
    for c in [
        Combo("baseline", "strict FP32, contiguous NCDHW, eager"),
        Combo("opt1", "TF32 tensor cores", tf32=True),
        Combo("opt2", "channels-last-3d, TF32 off", channels_last=True),
        Combo("opt12", "TF32 + channels-last-3d", tf32=True, channels_last=True),
        Combo("amp_bf16", "bf16 autocast", autocast_dtype=torch.bfloat16),
        Combo(
            "fast",
            "bf16 autocast, channels-last-3d end to end (layout-preserving GroupNorm fused with SiLU), torch.compile, "
            "SDPA attention, separable upsampling, first and last convolutions by taps, "
            "convolution biases added apart, dense skip gradients, cuDNN's heuristics (no autotuning), fused Adam, "
            "Inductor's combo kernels, training step as one CUDA graph",
            channels_last=True,
            autocast_dtype=torch.bfloat16,
            # No cuDNN autotuning: to autotune, PyTorch builds an execution plan for every engine
            # cuDNN offers, NVRTC-compiling the runtime-compiled ones, in every process: 4-7 s of a
            # warm first iteration. The heuristics' engines train about as fast (docs/measured.md).
            cudnn_benchmark=False,
            compile=True,
            sdpa_attention=True,
            separable_upsample=True,
            layout_preserving_norm=True,
            fused_norm_silu=True,
            output_conv_by_taps=True,
            input_conv_by_taps=True,
            conv_bias_apart=True,
            dense_concat_gradients=True,
            fused_adam=True,
            cuda_graphs=True,
        ),
    ]
}


def get_combo(name: str) -> Combo:
    """The combo called ``name``, or a :class:`UserError` listing the valid names."""
    try:
        return COMBOS[name]
    except KeyError:
        raise UserError(f"unknown combo {name!r}; choose from {', '.join(COMBOS)}") from None


# --- global backend flags --------------------------------------------------------------
# PyTorch >= 2.9 has per-backend ``fp32_precision`` settings beside the legacy
# ``allow_tf32`` flags. cuDNN and cuBLAS keep hidden legacy state that only the legacy
# setters change (for cuBLAS it is ``torch.get_float32_matmul_precision()``), and reading
# a legacy flag raises unless that state agrees with the new settings. So we always go
# through the legacy setters first (they set both APIs alike) and only then pin new-API
# values, both when applying a combo and when restoring.
_HAS_FP32_PRECISION = hasattr(torch.backends.cuda.matmul, "fp32_precision") and hasattr(torch.backends.cudnn, "conv")


def _new_api_settings() -> dict[str, tuple[object, str]]:
    """New-API precision settings, parents before children (a parent may reset children)."""
    b = torch.backends
    return {
        "fp32_precision": (b, "fp32_precision"),
        "cuda.matmul.fp32_precision": (b.cuda.matmul, "fp32_precision"),
        "cudnn.fp32_precision": (b.cudnn, "fp32_precision"),
        "cudnn.conv.fp32_precision": (b.cudnn.conv, "fp32_precision"),
        "cudnn.rnn.fp32_precision": (b.cudnn.rnn, "fp32_precision"),
    }


def _legacy(read: Callable[[], object]) -> object:
    """A legacy setting, or None where mixed API use has made it unreadable."""
    try:
        return read()
    except RuntimeError:
        return None


def snapshot_flags() -> dict[str, object]:
    """Current values of every global flag a combo may touch, keyed by dotted name."""
    b = torch.backends
    flags: dict[str, object] = {
        "cudnn.allow_tf32": _legacy(lambda: b.cudnn.allow_tf32),
        "float32_matmul_precision": _legacy(torch.get_float32_matmul_precision),
        "cudnn.benchmark": b.cudnn.benchmark,
    }
    if _HAS_FP32_PRECISION:
        flags.update({name: getattr(obj, attr) for name, (obj, attr) in _new_api_settings().items()})
    else:
        flags["cuda.matmul.allow_tf32"] = b.cuda.matmul.allow_tf32
    return flags


def _restore_flags(flags: dict[str, object]) -> None:
    b = torch.backends
    if flags["cudnn.allow_tf32"] is not None:
        b.cudnn.allow_tf32 = flags["cudnn.allow_tf32"]
    if flags["float32_matmul_precision"] is not None:
        torch.set_float32_matmul_precision(flags["float32_matmul_precision"])
    b.cudnn.benchmark = flags["cudnn.benchmark"]
    if _HAS_FP32_PRECISION:
        for name, (obj, attr) in _new_api_settings().items():
            setattr(obj, attr, flags[name])
    else:
        b.cuda.matmul.allow_tf32 = flags["cuda.matmul.allow_tf32"]


@contextlib.contextmanager
def backend_flags(*, tf32: bool, cudnn_benchmark: bool) -> Iterator[None]:
    """Set TF32 and cuDNN autotuning for the duration of the block, then restore them.

    Every setting is restored exactly, except hidden legacy state that the caller's own
    mixing of the old and new APIs had already made unreadable (see :func:`_legacy`).
    """
    saved = snapshot_flags()
    try:
        b = torch.backends
        # Legacy setters first: they keep the hidden legacy state readable.
        b.cudnn.allow_tf32 = tf32
        b.cuda.matmul.allow_tf32 = tf32
        if _HAS_FP32_PRECISION:
            # Explicit values, so a global ``torch.backends.fp32_precision`` cannot be
            # inherited by the conv and rnn settings the legacy setter leaves at "none".
            mode = "tf32" if tf32 else "ieee"
            b.cudnn.conv.fp32_precision = mode
            b.cudnn.rnn.fp32_precision = mode
        b.cudnn.benchmark = cudnn_benchmark
        yield
    finally:
        _restore_flags(saved)
