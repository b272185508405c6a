"""Energy of a full reverse diffusion (all T steps of one volume), measured like a training block.

One window of back-to-back full samples, enough of them that a step of the energy counter is
under 1 % of the window's energy (one, for every combo slower than ``fast``), between leads of a
few reverse steps so the card runs steadily across both edges. Without an energy counter (the
CPU) it times one sample, as :func:`meddpm.measure.campaign.sampling.time_sampling` does.
"""

from __future__ import annotations

import math

import torch

from meddpm.measure.campaign.sampling import SamplingResult
from meddpm.measure.energy.block import measure_block
from meddpm.measure.energy.counter import LEAD_PERIODS, BlockEnergy, BlockPlan, plan_block
from meddpm.measure.energy.power_sampler import PowerSampler, poll_period
from meddpm.measure.machine.nvml import open_gpu
from meddpm.measure.machine.timing import time_once
from meddpm.model.config import ModelConfig
from meddpm.run.combos import Combo
from meddpm.run.sampling import Sampler


def sample_with_energy(
    config: ModelConfig, combo: Combo, device: torch.device, warmup_steps: int = 3, error_target: float = 0.01
) -> tuple[SamplingResult, BlockEnergy | None]:
    """Seconds per full sample (GPU time, mean over the window) and the window's energy (None without a counter).

    The energy per sample is ``block.counter_j / block.iterations``.
    """
    sampler = Sampler(config, combo, device)
    warmup_s = time_once(lambda: sampler(steps=warmup_steps), device) / 1e3  # compilation and autotuning
    gpu, _ = open_gpu(device)
    period = poll_period(gpu.energy_mj) if gpu else None
    if gpu is None or period is None:
        seconds = time_once(sampler, device) / 1e3
        return SamplingResult(combo.name, config.timesteps, warmup_s, seconds), None
    step_s = time_once(lambda: sampler(steps=warmup_steps), device) / 1e3 / warmup_steps
    samples = plan_block(period, step_s * config.timesteps, error_target, windows=1).window_iterations
    lead_steps = max(1, math.ceil(LEAD_PERIODS * period / step_s))
    plan = BlockPlan(lead=1, window_iterations=samples, windows=1)
    block = measure_block(sampler, device, PowerSampler(gpu), plan, period, lead=lambda: _lead(sampler, lead_steps))
    return SamplingResult(combo.name, config.timesteps, warmup_s, block.windows[0].gpu_s / samples), block


def _lead(sampler: Sampler, steps: int) -> None:
    """``steps`` reverse steps, as partial samples of at most T steps each.

    A lead can need more steps than one sample has (a short schedule whose steps are quick next
    to the counter's period); a sample of more than T steps would index past the schedule.
    """
    while steps > 0:
        sampler(steps=min(steps, sampler.model.num_timesteps))
        steps -= sampler.model.num_timesteps
