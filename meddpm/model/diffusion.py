"""Gaussian diffusion around the U-Net: cosine schedule, L1 noise loss, ancestral sampling.

Notation follows Ho et al. (2020): ``alphas_cumprod`` is alpha-bar, ``q_sample`` draws
x_t ~ q(x_t | x_0), and ``p_sample`` one step of the reverse process p(x_{t-1} | x_t).
Conditioning on the segmentation mask is by channel concatenation at the U-Net's input.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from meddpm.kernels.common import memory_format_of
from meddpm.model.config import ModelConfig
from meddpm.model.unet import UNet3D


def cosine_beta_schedule(timesteps: int, s: float = 0.008) -> torch.Tensor:
    """Betas of the cosine schedule of Nichol & Dhariwal (2021), clipped to at most 0.999."""
    steps = torch.arange(timesteps + 1, dtype=torch.float64) / timesteps
    alphas_cumprod = torch.cos((steps + s) / (1 + s) * math.pi / 2) ** 2
    alphas_cumprod = alphas_cumprod / alphas_cumprod[0]
    betas = 1 - alphas_cumprod[1:] / alphas_cumprod[:-1]
    return betas.clamp(max=0.999)


def _extract(values: torch.Tensor, t: torch.Tensor, ndim: int) -> torch.Tensor:
    """values[t] reshaped to broadcast over a batch of ``ndim``-dimensional tensors."""
    return values.gather(0, t).reshape(-1, *([1] * (ndim - 1)))


class GaussianDiffusion(nn.Module):
    """DDPM with a mask-conditioned denoiser; ``.denoiser`` is the 3D U-Net."""

    def __init__(self, config: ModelConfig, denoiser: nn.Module | None = None):
        super().__init__()
        self.config = config
        self.denoiser = denoiser if denoiser is not None else UNet3D(config)
        self.num_timesteps = config.timesteps

        betas = cosine_beta_schedule(config.timesteps)
        alphas_cumprod = torch.cumprod(1 - betas, dim=0)
        alphas_cumprod_prev = F.pad(alphas_cumprod[:-1], (1, 0), value=1.0)
        posterior_variance = betas * (1 - alphas_cumprod_prev) / (1 - alphas_cumprod)

        def buffer(name: str, value: torch.Tensor) -> None:
            # Computed in float64 for accuracy, stored in float32 like the model.
            self.register_buffer(name, value.to(torch.float32), persistent=False)

        buffer("betas", betas)
        buffer("alphas_cumprod", alphas_cumprod)
        buffer("sqrt_alphas_cumprod", alphas_cumprod.sqrt())
        buffer("sqrt_one_minus_alphas_cumprod", (1 - alphas_cumprod).sqrt())
        buffer("sqrt_recip_alphas_cumprod", (1 / alphas_cumprod).sqrt())
        buffer("sqrt_recipm1_alphas_cumprod", (1 / alphas_cumprod - 1).sqrt())
        buffer("posterior_variance", posterior_variance)
        # At t = 0 the posterior variance is 0; the log is taken of the next value instead.
        buffer(
            "posterior_log_variance_clipped",
            torch.log(torch.cat([posterior_variance[1:2], posterior_variance[1:]])),
        )
        buffer("posterior_mean_coef1", betas * alphas_cumprod_prev.sqrt() / (1 - alphas_cumprod))
        buffer(
            "posterior_mean_coef2",
            (1 - alphas_cumprod_prev) * (1 - betas).sqrt() / (1 - alphas_cumprod),
        )

    # --- forward process -------------------------------------------------------------
    def q_sample(self, x_start: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """x_t = sqrt(alpha-bar_t) x_0 + sqrt(1 - alpha-bar_t) noise."""
        n = x_start.ndim
        return (
            _extract(self.sqrt_alphas_cumprod, t, n).type(x_start.dtype) * x_start
            + _extract(self.sqrt_one_minus_alphas_cumprod, t, n).type(x_start.dtype) * noise
        )

    def predict_noise(self, x_t: torch.Tensor, t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The denoiser's estimate of the noise in ``x_t`` given the one-hot ``mask``."""
        # A one-channel x_t is "contiguous" in both layouts, so cat falls back to NCDHW;
        # keep the mask's layout so channels-last reaches the first convolution too.
        x = torch.cat([x_t, mask], dim=1).contiguous(memory_format=memory_format_of(mask))
        return self.denoiser(x, t)

    def loss(
        self,
        x_start: torch.Tensor,
        mask: torch.Tensor,
        t: torch.Tensor | None = None,
        noise: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """L1 between the true and the predicted noise, t uniform in [0, T) unless given."""
        if t is None:
            t = torch.randint(0, self.num_timesteps, (x_start.shape[0],), device=x_start.device)
        if noise is None:
            noise = torch.randn_like(x_start)
        predicted = self.predict_noise(self.q_sample(x_start, t, noise), t, mask)
        # Under autocast the prediction is low precision; the loss is taken in the data's.
        return F.l1_loss(predicted.to(noise.dtype), noise)

    # --- reverse process -------------------------------------------------------------
    def p_mean_log_variance(
        self, x_t: torch.Tensor, t: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-variance of p(x_{t-1} | x_t), with the predicted x_0 clipped to [-1, 1]."""
        n = x_t.ndim
        eps = self.predict_noise(x_t, t, mask).to(x_t.dtype)
        x0 = (
            _extract(self.sqrt_recip_alphas_cumprod, t, n) * x_t
            - _extract(self.sqrt_recipm1_alphas_cumprod, t, n) * eps
        ).clamp(-1.0, 1.0)
        mean = _extract(self.posterior_mean_coef1, t, n) * x0 + _extract(self.posterior_mean_coef2, t, n) * x_t
        return mean, _extract(self.posterior_log_variance_clipped, t, n)

    @torch.no_grad()
    def p_sample(
        self, x_t: torch.Tensor, t: torch.Tensor, mask: torch.Tensor, noise: torch.Tensor | None = None
    ) -> torch.Tensor:
        """One ancestral step x_t -> x_{t-1}; no noise is added at t = 0."""
        mean, log_variance = self.p_mean_log_variance(x_t, t, mask)
        if noise is None:
            noise = torch.randn_like(mean)
        nonzero = (t != 0).float().reshape(-1, *([1] * (x_t.ndim - 1)))
        return mean + nonzero * (0.5 * log_variance).exp() * noise

    @torch.no_grad()
    def sample(
        self,
        mask: torch.Tensor,
        steps: int | None = None,
        generator: torch.Generator | None = None,
        progress: Callable[[int], None] | None = None,
        step_fn: Callable[..., torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Reverse diffusion from pure noise, conditioned on ``mask``.

        ``steps`` < T runs only the last ``steps`` steps (from t = steps - 1 down to 0),
        which keeps tests short; ``progress`` is called with each finished t; ``step_fn``
        replaces :meth:`p_sample` (a compiled version of it, say).
        """
        step_fn = step_fn or self.p_sample
        steps = self.num_timesteps if steps is None else steps
        b, _, *spatial = mask.shape
        shape = (b, self.config.out_channels, *spatial)
        x = torch.randn(shape, generator=generator, device=mask.device).to(memory_format=memory_format_of(mask))
        for i in reversed(range(steps)):
            t = torch.full((b,), i, device=mask.device, dtype=torch.long)
            noise = torch.randn(shape, generator=generator, device=mask.device)
            x = step_fn(x, t, mask, noise=noise.to(memory_format=memory_format_of(mask)))
            if progress is not None:
                progress(i)
        return x


def build_model(config: ModelConfig) -> GaussianDiffusion:
    """A freshly initialised Med-DDPM (diffusion wrapper around the 3D U-Net) for ``config``."""
    return GaussianDiffusion(config)
