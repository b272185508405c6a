"""Reverse diffusion of whole volumes under a combo: the inference side of Med-DDPM."""

from __future__ import annotations

from collections.abc import Callable

import torch

from meddpm.data.phantom import phantom_batch
from meddpm.model.config import ModelConfig
from meddpm.model.diffusion import GaussianDiffusion, build_model
from meddpm.run.combos import Combo


class Sampler:
    """A callable that runs ancestral sampling of ``batch_size`` volumes, conditioned on phantom masks.

    The combo's layout, precision and backend flags apply as in training; with ``compile`` the
    whole reverse step (U-Net and posterior arithmetic) is compiled once and reused for all T.
    """

    def __init__(
        self, config: ModelConfig, combo: Combo, device: torch.device | str, batch_size: int = 1, seed: int = 0
    ):
        self.combo = combo
        self.device = torch.device(device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = build_model(config)
        combo.configure(model.denoiser)
        self.model: GaussianDiffusion = model.to(self.device, memory_format=combo.memory_format).eval()
        _, masks = phantom_batch(config.volume, batch_size, config.out_channels, config.mask_channels, seed=seed)
        self.masks = masks.to(self.device, memory_format=combo.memory_format)
        self.step_fn = _keeping_layout(combo.compiled(self.model.p_sample)) if combo.compile else self.model.p_sample
        self.generator = torch.Generator(self.device).manual_seed(seed)

    def __call__(self, steps: int | None = None) -> torch.Tensor:
        """Sample; ``steps`` < T runs only the last steps (for warm-up and tests)."""
        with self.combo.flags(), self.combo.autocast(self.device), torch.inference_mode():
            return self.model.sample(self.masks, steps=steps, generator=self.generator, step_fn=self.step_fn)


def _keeping_layout(step_fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``step_fn`` with its output laid out as its input ``x_t``.

    A compiled step guards on its inputs' strides, and a one-channel volume can come back contiguous from a
    channels-last input: fed back as the next step's input, it would compile the whole step a second time.
    """

    def step(x_t: torch.Tensor, t: torch.Tensor, mask: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        x = step_fn(x_t, t, mask, noise=noise)
        return x if x.stride() == x_t.stride() else torch.empty_like(x_t).copy_(x)

    return step
