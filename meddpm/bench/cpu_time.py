"""Whether a CPU run of the bench ends in a time worth waiting for, estimated before anything is built.

The full-size presets fit in a large machine's RAM (:mod:`meddpm.bench.host_ram`) but take minutes an
iteration on a CPU, and the run printed nothing for as long. Here the run's least work (its iterations'
FLOPs, counted on the meta device) is divided by this CPU's rate at a large float32 matrix product,
which no 3D convolution on it beats: the estimate is a lower bound, so a run it refuses would have taken
at least that long.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from meddpm.errors import UserError
from meddpm.measure.campaign.flops import train_step_flops
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.model.config import ModelConfig

OPTION = "--allow-slow-cpu"
BOUND_S = 600.0  # a CPU run estimated longer than this is refused unless OPTION insists
# Slower than any CPU that runs torch: a run whose work ends within the bound even at this rate needs no probe.
SLOWEST_CPU_FLOPS = 1e10
_PROBE_SIZE = 1024
_PROBE_S = 0.2


def check_time(
    config: ModelConfig,
    combos: Sequence[str],
    batch: int,
    settings: CampaignSettings,
    *,
    insist: bool,
    say: Callable[[str], None],
    rate: Callable[[], float] | None = None,
) -> None:
    """Refuse a CPU run estimated to take longer than :data:`BOUND_S` in one line naming the estimate, or with
    ``insist`` only say it; ``rate`` (FLOP/s) replaces the probe of this CPU (:func:`cpu_flops_per_s`)."""
    per_iteration = train_step_flops(config, batch)
    iterations = len(combos) * (settings.warmup + settings.min_rounds)
    if per_iteration * iterations / SLOWEST_CPU_FLOPS <= BOUND_S:
        return
    flops_per_s = (rate or cpu_flops_per_s)()
    seconds = per_iteration / flops_per_s
    if seconds * iterations <= BOUND_S:
        return
    estimate = (
        f"preset {config.name!r} on the CPU: at least {seconds:.0f} s an iteration ({per_iteration / 1e12:.2f} TFLOP "
        f"at this CPU's {flops_per_s / 1e9:.0f} GFLOP/s), so at least {seconds * iterations / 60:.0f} min for "
        f"{iterations} iterations ({len(combos)} combo(s), {settings.warmup} warm-up and {settings.min_rounds} rounds "
        "each)"
    )
    if insist:
        say(f"{estimate}; running it as {OPTION} asks")
        return
    raise UserError(f"{estimate}; use the tiny preset or a GPU, or give {OPTION} to run it anyway")


def cpu_flops_per_s() -> float:
    """This CPU's float32 matrix-product rate, FLOP/s, over about :data:`_PROBE_S` seconds on all its threads."""
    a = torch.randn(_PROBE_SIZE, _PROBE_SIZE)
    torch.mm(a, a)  # the first call sets up the threads
    runs, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < _PROBE_S:
        torch.mm(a, a)
        runs += 1
    return 2 * _PROBE_SIZE**3 * runs / elapsed
