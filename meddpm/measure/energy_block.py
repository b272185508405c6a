"""Running one block of back-to-back iterations, with its windows' edges on the sampler's clock.

A block is a lead, some windows and another lead, queued without a synchronisation in between,
so the card works steadily across every edge. On a GPU, CUDA events mark the edges and give
each window's GPU time; one event recorded while the device is idle anchors them to the host
clock that the sampler's readings carry. On the CPU (tests) the iterations are synchronous and
the clock is read at each edge.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from meddpm.measure.energy import BlockEnergy, BlockPlan, Reading, block_energy, update_period_s, update_times
from meddpm.measure.timing import synchronize


class Sampler(Protocol):
    """What polls the card during the block: :class:`meddpm.measure.power_sampler.PowerSampler` or a fake."""

    def start(self) -> None: ...

    def stop(self) -> list[Reading]: ...


@dataclass(frozen=True)
class BlockRun:
    """The windows' edges (host clock, s), each window's GPU time (s) and the sampler's readings."""

    edges_s: list[float]
    gpu_s: list[float]
    readings: list[Reading]


def run_block(
    step: Callable[[], object],
    device: torch.device,
    sampler: Sampler,
    plan: BlockPlan,
    lead: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> BlockRun:
    """Run ``plan`` (``lead`` defaults to ``step``) with ``sampler`` polling throughout."""
    lead = lead or step
    synchronize(device)
    sampler.start()
    try:
        run = _on_gpu if device.type == "cuda" else _on_host
        edges, gpu_s = run(step, lead, plan, clock)
    finally:
        readings = sampler.stop()
    return BlockRun(edges, gpu_s, readings)


def measure_block(
    step: Callable[[], object],
    device: torch.device,
    sampler: Sampler,
    plan: BlockPlan,
    period_s: float,
    lead: Callable[[], object] | None = None,
) -> BlockEnergy:
    """Run ``plan`` and read each window's energy (see :func:`run_block` for ``lead``).

    The counter period the bound is taken with is the one seen under load where the sampler saw
    enough updates, else ``period_s`` (the idle one).
    """
    run = run_block(step, device, sampler, plan, lead)
    seen = update_period_s(update_times(run.readings)) or period_s
    return block_energy(run.readings, run.edges_s, [plan.window_iterations] * plan.windows, run.gpu_s, seen)


def _on_gpu(
    step: Callable[[], object], lead: Callable[[], object], plan: BlockPlan, clock: Callable[[], float]
) -> tuple[list[float], list[float]]:
    def event() -> torch.cuda.Event:
        return torch.cuda.Event(enable_timing=True)

    anchor, marks, end = event(), [event() for _ in range(plan.windows + 1)], event()
    # The device is idle (synchronised), so the anchor runs the moment it is queued: now.
    t0 = clock()
    anchor.record()
    for _ in range(plan.lead):
        lead()
    marks[0].record()
    for mark in marks[1:]:
        for _ in range(plan.window_iterations):
            step()
        mark.record()
    for _ in range(plan.lead):
        lead()
    end.record()
    end.synchronize()
    edges = [t0 + anchor.elapsed_time(m) / 1e3 for m in marks]
    return edges, [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:])]


def _on_host(
    step: Callable[[], object], lead: Callable[[], object], plan: BlockPlan, clock: Callable[[], float]
) -> tuple[list[float], list[float]]:
    for _ in range(plan.lead):
        lead()
    edges = [clock()]
    for _ in range(plan.windows):
        for _ in range(plan.window_iterations):
            step()
        edges.append(clock())
    for _ in range(plan.lead):
        lead()
    return edges, [b - a for a, b in zip(edges, edges[1:])]
