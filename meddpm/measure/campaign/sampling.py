"""The time of one full reverse diffusion (all T steps of one volume) under a combo, warm-up apart."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from meddpm.measure.machine.timing import time_once
from meddpm.model.config import ModelConfig
from meddpm.run.combos import Combo
from meddpm.run.sampling import Sampler


@dataclass(frozen=True)
class SamplingResult:
    """Wall time of one full reverse diffusion, with warm-up (compilation, autotuning) apart."""

    combo: str
    steps: int
    warmup_s: float
    seconds: float

    @property
    def ms_per_step(self) -> float:
        return self.seconds * 1e3 / self.steps


def time_sampling(config: ModelConfig, combo: Combo, device: torch.device, warmup_steps: int = 3) -> SamplingResult:
    """Time all ``config.timesteps`` reverse steps of one volume after ``warmup_steps`` untimed ones."""
    sampler = Sampler(config, combo, device)
    warmup_s = time_once(lambda: sampler(steps=warmup_steps), device) / 1e3
    seconds = time_once(sampler, device) / 1e3
    return SamplingResult(combo.name, config.timesteps, warmup_s, seconds)
