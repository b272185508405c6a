"""The time of a reverse diffusion under a combo: a full one (all T steps of one volume), or its estimate from a
short adaptive run of steps, warm-up apart.

Every reverse step runs the same forward pass, so a sample's time is T times a step's: a few chunks of steps,
timed until their ms/step agree, guard a sample at the cost of those steps instead of all T.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from meddpm.measure.machine.timing import time_once, time_synchronized
from meddpm.model.config import ModelConfig
from meddpm.run.combos import Combo
from meddpm.run.sampling import Sampler

CHUNK_STEPS = 5  # steps a timed chunk of the short run
MIN_CHUNKS, MAX_CHUNKS = 3, 12
# The short run stops once its chunks' ms/step lie within this share of their median (max - min).
CHUNK_AGREEMENT = 0.01


@dataclass(frozen=True)
class SamplingResult:
    """A full reverse diffusion's seconds, measured (``timed_steps`` == ``steps``) or estimated from the
    ``timed_steps`` of a short run; warm-up (compilation, autotuning) apart."""

    combo: str
    steps: int
    warmup_s: float
    seconds: float
    timed_steps: int = 0  # 0: all of them, as a full sample
    chunk_ms_per_step: tuple[float, ...] = ()

    @property
    def ms_per_step(self) -> float:
        return self.seconds * 1e3 / self.steps

    @property
    def estimated(self) -> bool:
        """Whether ``seconds`` is T x the short run's ms/step rather than a timed full sample."""
        return 0 < self.timed_steps < self.steps

    def describe(self) -> str:
        """One line: the seconds, how they were had, and the warm-up."""
        how = (
            f"estimated from {self.timed_steps} timed steps in {len(self.chunk_ms_per_step)} chunks"
            if self.estimated
            else f"for {self.steps} steps"
        )
        return f"{self.seconds:.2f} s {how} ({self.ms_per_step:.2f} ms/step), warm-up {self.warmup_s:.1f} s"


def time_sampling(config: ModelConfig, combo: Combo, device: torch.device, warmup_steps: int = 3) -> SamplingResult:
    """Time all ``config.timesteps`` reverse steps of one volume after ``warmup_steps`` untimed ones."""
    sampler = Sampler(config, combo, device)
    warmup_s = time_once(lambda: sampler(steps=warmup_steps), device) / 1e3
    seconds = time_once(sampler, device) / 1e3
    return SamplingResult(combo.name, config.timesteps, warmup_s, seconds, config.timesteps)


def estimate_sampling(
    config: ModelConfig, combo: Combo, device: torch.device, warmup_steps: int = 3, clock=time_synchronized
) -> SamplingResult:
    """A full sample's seconds from chunks of :data:`CHUNK_STEPS` steps, timed after ``warmup_steps`` untimed
    ones until :data:`MIN_CHUNKS` or more agree within :data:`CHUNK_AGREEMENT` (at most :data:`MAX_CHUNKS`).

    A diffusion of no more steps than the short run would time is timed whole. ``clock(fn, device)`` gives a
    call's milliseconds (CUDA events on a GPU).
    """
    if config.timesteps <= CHUNK_STEPS * MIN_CHUNKS:
        return time_sampling(config, combo, device, warmup_steps)
    sampler = Sampler(config, combo, device)
    warmup_s = time_once(lambda: sampler(steps=warmup_steps), device) / 1e3
    per_step: list[float] = []
    while len(per_step) < MAX_CHUNKS:
        per_step.append(clock(lambda: sampler(steps=CHUNK_STEPS), device) / CHUNK_STEPS)
        if len(per_step) >= MIN_CHUNKS and chunks_agree(per_step):
            break
    ms = float(np.median(per_step))
    return SamplingResult(
        combo.name, config.timesteps, warmup_s, ms * config.timesteps / 1e3, CHUNK_STEPS * len(per_step),
        tuple(per_step),
    )  # fmt: skip


def chunks_agree(ms_per_step: list[float]) -> bool:
    """Whether the chunks' ms/step lie within :data:`CHUNK_AGREEMENT` of their median."""
    return (max(ms_per_step) - min(ms_per_step)) / float(np.median(ms_per_step)) <= CHUNK_AGREEMENT
