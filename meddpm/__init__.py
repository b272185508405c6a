"""Med-DDPM: a mask-conditioned 3D diffusion model for brain MRI, with switchable
optimization combos for performance work.

Public API: :class:`ModelConfig` (``ModelConfig.preset(name)``), :func:`build_model`
(returns a :class:`GaussianDiffusion` whose ``.denoiser`` is the 3D U-Net), :data:`COMBOS`
and :class:`TrainStep` (one training iteration for a preset, combo, batch and device).

The names are loaded on first use, so that ``import meddpm`` imports none of the workload:
a measuring process chooses which tree's workload it drives before it imports any
(:mod:`meddpm.measure.processes.workload`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from meddpm.errors import UserError

if TYPE_CHECKING:
    from meddpm.model.config import PRESETS, ModelConfig
    from meddpm.model.diffusion import GaussianDiffusion, build_model
    from meddpm.model.unet import UNet3D
    from meddpm.run.combos import COMBOS, Combo, get_combo
    from meddpm.run.train import EmaSettings, TrainStep

_WHERE = {
    "PRESETS": "meddpm.model.config",
    "ModelConfig": "meddpm.model.config",
    "GaussianDiffusion": "meddpm.model.diffusion",
    "build_model": "meddpm.model.diffusion",
    "UNet3D": "meddpm.model.unet",
    "COMBOS": "meddpm.run.combos",
    "Combo": "meddpm.run.combos",
    "get_combo": "meddpm.run.combos",
    "EmaSettings": "meddpm.run.train",
    "TrainStep": "meddpm.run.train",
}

__all__ = [
    "COMBOS",
    "Combo",
    "EmaSettings",
    "GaussianDiffusion",
    "ModelConfig",
    "PRESETS",
    "TrainStep",
    "UNet3D",
    "UserError",
    "build_model",
    "get_combo",
]


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module 'meddpm' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # loaded once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
