"""GPU architectures the suite keeps baselines for: detection from the device, and peak rates.

An *architecture* here is a baseline key: GPUs that share one are expected to give the same
numbers. H100 and H200 have the same compute capability (9.0) but different memory, so they
are told apart by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from meddpm.errors import UserError

KNOWN_ARCHS = ("v100", "a100", "h100", "h200")
_ARCH_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")


@dataclass(frozen=True)
class PeakRates:
    """Dense (no sparsity) peak TFLOP/s of the SXM part, per math precision, with the source."""

    fp32: float
    tf32: float | None
    bf16: float | None
    fp16: float
    source: str

    def for_precision(self, precision: str) -> float | None:
        """Peak TFLOP/s for 'fp32', 'tf32', 'bf16' or 'fp16' (None where the GPU has none)."""
        return getattr(self, precision)


# PCIe and NVL variants run lower clocks and power; their fractions of these peaks read low.
PEAKS: dict[str, PeakRates] = {
    "v100": PeakRates(15.7, None, None, 125.0, "NVIDIA Tesla V100 datasheet (SXM2)"),
    "a100": PeakRates(19.5, 156.0, 312.0, 312.0, "NVIDIA A100 datasheet (SXM, dense)"),
    "h100": PeakRates(67.0, 494.7, 989.4, 989.4, "NVIDIA H100 datasheet (SXM, dense = half the sparse figure)"),
    "h200": PeakRates(67.0, 494.7, 989.4, 989.4, "NVIDIA H200 datasheet (SXM, dense = half the sparse figure)"),
}


def arch_from_gpu(name: str, compute_capability: tuple[int, int]) -> str:
    """The baseline key for a GPU's marketing name and compute capability.

    Known parts map to ``v100``, ``a100``, ``h100`` and ``h200``; any other GPU gets a key
    made from its name (e.g. "NVIDIA L40S" -> "l40s"), so it can keep baselines of its own.
    """
    lowered = name.lower()
    if compute_capability == (7, 0) and "v100" in lowered:
        return "v100"
    if compute_capability == (8, 0) and "a100" in lowered:
        return "a100"
    if compute_capability == (9, 0):
        # GH200 superchips carry an H100-class GPU, yet their names contain "H200".
        if re.search(r"(?<![a-z])h200", lowered):
            return "h200"
        if re.search(r"(?<![a-z])h100", lowered):
            return "h100"
    key = re.sub(r"[^a-z0-9]+", "_", lowered.replace("nvidia", "")).strip("_")
    return key or f"sm{compute_capability[0]}{compute_capability[1]}"


def detect_arch(device: torch.device) -> str:
    """The baseline key of the CUDA ``device``."""
    props = torch.cuda.get_device_properties(device)
    return arch_from_gpu(props.name, (props.major, props.minor))


def validate_arch(name: str) -> str:
    """``name`` if it is usable as a baseline key (for ``--arch``), else a UserError."""
    if not _ARCH_NAME.match(name):
        raise UserError(
            f"--arch {name!r} is not a valid architecture key; use lower-case letters, digits and '_' "
            f"(known: {', '.join(KNOWN_ARCHS)})"
        )
    if name == "cpu":
        # "cpu" keys the CPU cases' own baseline; as --arch it would give the GPU cases' preset to the CPU.
        raise UserError(
            "--arch takes a GPU architecture, not 'cpu'; the CPU cases need no --arch: select them with -m cpu"
        )
    return name
