"""Med-DDPM: a mask-conditioned 3D diffusion model for brain MRI, with switchable
optimization combos for performance work.

Public API: :class:`ModelConfig` (``ModelConfig.preset(name)``), :func:`build_model`
(returns a :class:`GaussianDiffusion` whose ``.denoiser`` is the 3D U-Net), :data:`COMBOS`
and :class:`TrainStep` (one training iteration for a preset, combo, batch and device).
"""

from meddpm.errors import UserError
from meddpm.model.config import PRESETS, ModelConfig
from meddpm.model.diffusion import GaussianDiffusion, build_model
from meddpm.model.unet import UNet3D
from meddpm.run.combos import COMBOS, Combo, get_combo
from meddpm.run.train import EmaSettings, TrainStep

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
