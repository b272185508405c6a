"""The time of a reverse diffusion under a combo: a full one (all T steps of one volume), or its estimate from a
short adaptive run of steps, warm-up apart.

Every reverse step runs the same forward pass, so a sample's time is T times a step's plus what a call costs
once: a few pairs of short and longer calls, timed until their ms per step agree, guard a sample at the cost of
those steps instead of all T.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from meddpm.measure.machine.timing import time_once, time_synchronized
from meddpm.model.config import ModelConfig
from meddpm.run.combos import Combo
from meddpm.run.sampling import Sampler

# A pair of timed calls: one of SHORT_STEPS steps, one of LONG_STEPS. Their difference is the steps' own time,
# free of what every call costs once (the start noise, the masks, a CUDA graph's first replay), which a full
# sample pays once and a short run would otherwise spread over few steps. Five steps apart, not fewer: the card's
# clock wanders from one step to the next, and pairs one step apart did not agree within PAIR_AGREEMENT in ten
# pairs (docs/ci.md).
SHORT_STEPS, LONG_STEPS = 1, 6
MIN_PAIRS, MAX_PAIRS = 2, 10
# An eager combo autotunes in its first call; a compiled one compiles (and autotunes) in its first, and its
# second already runs the step every later one does.
EAGER_WARMUP_STEPS, COMPILED_WARMUP_STEPS = 1, 2
# The short run stops once its pairs' ms/step lie within this share of their median (max - min).
PAIR_AGREEMENT = 0.01


@dataclass(frozen=True)
class SamplingResult:
    """A full reverse diffusion's seconds, measured (``timed_steps`` == ``steps``) or estimated from the
    ``timed_steps`` of a short run; warm-up (compilation, autotuning) apart."""

    combo: str
    steps: int
    warmup_s: float
    seconds: float
    timed_steps: int = 0  # 0: all of them, as a full sample
    pair_ms_per_step: tuple[float, ...] = ()  # each pair of calls' ms per step, in a short run
    call_ms: float = 0.0  # what a call costs once, whatever its steps, in a short run
    # A short run's estimate that a full sample replaced: its pairs never agreed and the slowest was over the limit.
    replaced_estimate_s: float = 0.0

    @property
    def ms_per_step(self) -> float:
        return self.seconds * 1e3 / self.steps

    @property
    def estimated(self) -> bool:
        """Whether ``seconds`` is T x the short run's ms/step rather than a timed full sample."""
        return 0 < self.timed_steps < self.steps

    def describe(self) -> str:
        """One line: the seconds, how they were had, and the warm-up."""
        warmup = f"warm-up {self.warmup_s:.1f} s"
        if not self.estimated:
            pairs = len(self.pair_ms_per_step)
            replaced = (
                f", timed whole: estimated at {self.replaced_estimate_s:.2f} s from {pairs} pairs of calls that never "
                "agreed, the slowest over the limit"
                if self.replaced_estimate_s
                else ""
            )
            return f"{self.seconds:.2f} s for {self.steps} steps ({self.ms_per_step:.2f} ms/step){replaced}, {warmup}"
        per_step = float(np.median(self.pair_ms_per_step))
        return (
            f"{self.seconds:.2f} s estimated from {self.timed_steps} timed steps in {len(self.pair_ms_per_step)} pairs "
            f"of calls ({per_step:.2f} ms/step, {self.call_ms:.1f} ms a call), {warmup}"
        )


def warmup_steps_for(combo: Combo) -> int:
    """Untimed steps before a combo's reverse steps are timed: its compilation and autotuning."""
    return COMPILED_WARMUP_STEPS if combo.compile else EAGER_WARMUP_STEPS


def time_sampling(
    config: ModelConfig, combo: Combo, device: torch.device, warmup_steps: int | None = None
) -> SamplingResult:
    """Time all ``config.timesteps`` reverse steps of one volume after ``warmup_steps`` untimed ones (None: as
    :func:`warmup_steps_for` the combo)."""
    warmup_steps = warmup_steps_for(combo) if warmup_steps is None else warmup_steps
    sampler = Sampler(config, combo, device)
    warmup_s = time_once(lambda: sampler(steps=warmup_steps), device) / 1e3
    seconds = time_once(sampler, device) / 1e3
    return SamplingResult(combo.name, config.timesteps, warmup_s, seconds, config.timesteps)


def estimate_sampling(
    config: ModelConfig,
    combo: Combo,
    device: torch.device,
    warmup_steps: int | None = None,
    clock=time_synchronized,
    limit_s: float | None = None,
) -> SamplingResult:
    """A full sample's seconds from pairs of timed calls of :data:`SHORT_STEPS` and :data:`LONG_STEPS` steps, after
    ``warmup_steps`` untimed ones (None: :func:`warmup_steps_for`), until :data:`MIN_PAIRS` or more agree on the ms
    per step within :data:`PAIR_AGREEMENT` (at most :data:`MAX_PAIRS`): T x the median ms per step plus the median
    cost of a call.

    A diffusion of no more steps than the short run would time is timed whole, and so is one whose pairs read no
    positive ms per step (the short calls no faster than the long: noise). So is one whose pairs never agreed where
    the slowest pair's ms per step would put the sample over ``limit_s`` (the budget it will be judged by): a stall
    in either call of a pair moves its difference either way, so the pairs' range is what the estimate is unsure by,
    and a case neither fails nor passes on an estimate that did not settle across its limit.
    ``clock(fn, device)`` gives a call's milliseconds (CUDA events on a GPU).
    """
    if config.timesteps <= (SHORT_STEPS + LONG_STEPS) * MIN_PAIRS:
        return time_sampling(config, combo, device, warmup_steps)
    warmup_steps = warmup_steps_for(combo) if warmup_steps is None else warmup_steps
    sampler = Sampler(config, combo, device)
    warmup_s = time_once(lambda: sampler(steps=warmup_steps), device) / 1e3
    per_step: list[float] = []
    per_call: list[float] = []
    while len(per_step) < MAX_PAIRS:
        short = clock(lambda: sampler(steps=SHORT_STEPS), device)
        long = clock(lambda: sampler(steps=LONG_STEPS), device)
        per_step.append((long - short) / (LONG_STEPS - SHORT_STEPS))
        per_call.append(short - SHORT_STEPS * per_step[-1])
        if len(per_step) >= MIN_PAIRS and pairs_agree(per_step):
            break
    step_ms, call_ms = float(np.median(per_step)), float(np.median(per_call))
    if step_ms <= 0:
        # Noise swamped the steps (a busy machine): T x a non-positive ms/step would pass any budget.
        return time_sampling(config, combo, device, warmup_steps)
    estimate_s = (call_ms + step_ms * config.timesteps) / 1e3
    slowest_s = (call_ms + max(per_step) * config.timesteps) / 1e3
    if limit_s is not None and slowest_s > limit_s and not pairs_agree(per_step):
        seconds = clock(sampler, device) / 1e3
        return SamplingResult(
            combo.name, config.timesteps, warmup_s, seconds, config.timesteps, tuple(per_step), call_ms, estimate_s
        )
    return SamplingResult(
        combo.name, config.timesteps, warmup_s, estimate_s,
        (SHORT_STEPS + LONG_STEPS) * len(per_step), tuple(per_step), call_ms,
    )  # fmt: skip


def pairs_agree(ms_per_step: list[float]) -> bool:
    """Whether the pairs' ms per step lie within :data:`PAIR_AGREEMENT` of their (positive) median."""
    median = float(np.median(ms_per_step))
    return median > 0 and (max(ms_per_step) - min(ms_per_step)) / median <= PAIR_AGREEMENT
