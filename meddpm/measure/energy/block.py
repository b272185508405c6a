"""Running blocks of back-to-back iterations, with their windows' edges on the sampler's clock.

A block is a lead, some windows and another lead, queued without a synchronisation in between,
so the card works steadily across every edge. On a GPU, CUDA events mark the edges and give
each window's GPU time; one event recorded while the device is idle anchors them to the host
clock that the sampler's readings carry. On the CPU (tests) the iterations are synchronous and
the clock is read at each edge.

Three kinds of block: a fixed plan (:func:`run_block`, for full samples); a plan whose windows
run until the card's temperature has settled over the last of them (:func:`run_soaked_block`,
for training steps: the soak and the windows are one run); and a short probe of a combo's time
per iteration and power (:func:`probe_combo`), to order the soaked blocks by power.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import torch

from meddpm.measure.energy.counter import (
    BlockEnergy,
    BlockPlan,
    Reading,
    block_energy,
    plan_block,
    update_period_s,
    update_times,
)
from meddpm.measure.energy.heat_soak import Soak, SoakPlan, settled, spanning
from meddpm.measure.machine.timing import synchronize

# A probe runs a combo back to back at least this long (s): a few updates of the instant power.
PROBE_S = 0.5


class Sampler(Protocol):
    """What polls the card during the block: :class:`meddpm.measure.energy.power_sampler.PowerSampler` or a fake."""

    def start(self) -> None: ...

    def stop(self) -> list[Reading]: ...


@dataclass(frozen=True)
class BlockRun:
    """The windows' edges (host clock, s), each window's GPU time (s) and the sampler's readings."""

    edges_s: list[float]
    gpu_s: list[float]
    readings: list[Reading]


@dataclass(frozen=True)
class Probe:
    """A combo run briefly back to back: its time per iteration (s) and the card's mean power meanwhile (W)."""

    iteration_s: float
    power_w: float


class _Edges:
    """Edges marked between queued iterations: CUDA events on a GPU, clock reads on the CPU."""

    def __init__(self, device: torch.device, clock: Callable[[], float]):
        self.clock, self.on_gpu = clock, device.type == "cuda"
        self._marks: list[torch.cuda.Event | float] = []
        if self.on_gpu:
            # The device is idle (synchronised), so the anchor runs the moment it is queued: now.
            self._anchor, self._t0 = self._event(), clock()
            self._anchor.record()

    def __len__(self) -> int:
        return len(self._marks)

    def mark(self) -> None:
        """An edge after everything queued so far."""
        if self.on_gpu:
            event = self._event()
            event.record()
            self._marks.append(event)
        else:
            self._marks.append(self.clock())

    def wait(self, i: int, poll: Callable[[], None] = lambda: None) -> None:
        """Until edge ``i`` has passed, calling ``poll`` meanwhile (and once after)."""
        mark = self._marks[i]
        if isinstance(mark, torch.cuda.Event):
            while not mark.query():
                poll()
                time.sleep(0.01)  # lets the sampler thread run
        poll()

    def time_s(self, i: int) -> float:
        """Edge ``i`` (passed) on the host clock."""
        mark = self._marks[i]
        return self._t0 + self._anchor.elapsed_time(mark) / 1e3 if isinstance(mark, torch.cuda.Event) else mark

    def seconds(self, i: int, j: int) -> float:
        """Device time from edge ``i`` to edge ``j`` (both passed)."""
        a, b = self._marks[i], self._marks[j]
        return a.elapsed_time(b) / 1e3 if isinstance(a, torch.cuda.Event) else b - a

    @staticmethod
    def _event() -> torch.cuda.Event:
        return torch.cuda.Event(enable_timing=True)


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
        edges = _Edges(device, clock)
        _repeat(lead, plan.lead)
        edges.mark()
        for _ in range(plan.windows):
            _repeat(step, plan.window_iterations)
            edges.mark()
        _repeat(lead, plan.lead)
        edges.mark()
        edges.wait(len(edges) - 1)
    finally:
        readings = sampler.stop()
    return _window_run(edges, 0, plan.windows, readings)


def run_soaked_block(
    step: Callable[[], object],
    device: torch.device,
    sampler: Sampler,
    plan: BlockPlan,
    temperature_c: Callable[[], int],
    soak: SoakPlan,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[BlockRun, Soak]:
    """Windows of ``plan``'s size back to back until the temperature has settled over the last ``plan.windows``.

    The card runs the combo without a pause from the first lead to the last: one window is
    always queued ahead while the host waits for the one before it, reading the temperature every
    ``soak.poll_s``. Once the windows completed of the last ``plan.windows`` (the one still running
    being the last of them), with earlier ones where those span less than ``soak.window_s``, have
    held (:func:`meddpm.measure.energy.heat_soak.settled`), the trailing lead is queued and the last
    ``plan.windows`` are the block, settled if the temperature held to the end of the last one;
    after ``soak.max_s`` they are taken unsettled. A combo already at its temperature thus costs its
    windows and leads only, not a soak before them.
    """
    synchronize(device)
    sampler.start()
    try:
        edges = _Edges(device, clock)
        started = clock()
        history = [(started, temperature_c())]

        def poll(every: float = soak.poll_s) -> None:
            now = clock()
            if now > history[-1][0] and now - history[-1][0] >= every:
                history.append((now, temperature_c()))

        def held(first: int, last: int, running_s: float = 0.0) -> bool:
            """Whether the windows from edge ``first`` to edge ``last`` held, with earlier ones where they and
            ``running_s`` of a window still running span less than ``soak.window_s``."""
            times = [edges.time_s(i) for i in range(last + 1)]
            return settled(history, spanning(times, min(first, last), soak, running_s), soak, running_s)

        _repeat(step, plan.lead)
        edges.mark()
        _repeat(step, plan.window_iterations)
        edges.mark()
        while True:
            _repeat(step, plan.window_iterations)  # queued while the previous window still runs
            edges.mark()
            done = len(edges) - 2  # the edge that ends the last completed window
            edges.wait(done, poll)
            poll(0.0)
            first = done + 1 - plan.windows  # the block's first edge, if it ended with the running window
            if first < 0:
                continue
            # The running window is taken to last as long as the one before it.
            steady = held(first, done, edges.time_s(done) - edges.time_s(done - 1))
            if steady or clock() - started >= soak.max_s:
                break
        _repeat(step, plan.lead)
        edges.mark()
        edges.wait(len(edges) - 1, poll)
        poll(0.0)
        # The last kept window was still running at the decision: it must have held too.
        steady = steady and held(first, first + plan.windows)
    finally:
        readings = sampler.stop()
    run = _window_run(edges, first, plan.windows, readings)
    iteration_s = sum(run.gpu_s) / plan.iterations
    return run, Soak(history[0][1], history[-1][1], run.edges_s[0] - started, steady, iteration_s)


def probe_combo(
    step: Callable[[], object],
    device: torch.device,
    sampler: Sampler,
    iteration_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> Probe:
    """Run ``step`` back to back for :data:`PROBE_S` or one iteration; ``iteration_s`` is a first guess at its time.

    A guess far too long (a first process's rounds, still compiling) made the run short: it runs
    again, planned from the time it measured. The power is the sampled instant power integrated
    over the run, else the counter interpolated, else the plain counter, over its GPU time: good
    enough to rank combos, not to report.
    """
    for _ in range(2):
        plan = BlockPlan(lead=0, window_iterations=max(1, math.ceil(PROBE_S / iteration_s)), windows=1)
        run = run_block(step, device, sampler, plan, clock=clock)
        iteration_s = run.gpu_s[0] / plan.window_iterations
        if run.gpu_s[0] >= PROBE_S / 2:
            break
    # Only the window's joules are read; the bound, which the period sets, is not.
    block = block_energy(run.readings, run.edges_s, [plan.window_iterations], run.gpu_s, period_s=1.0)
    (window,) = block.windows
    joules = next(j for j in (window.integrated_j, window.interpolated_j, window.counter_j) if j is not None)
    return Probe(iteration_s, joules / window.gpu_s)


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
    return _energy(run_block(step, device, sampler, plan, lead), plan, period_s)


def measure_soaked_block(
    step: Callable[[], object],
    device: torch.device,
    sampler: Sampler,
    period_s: float,
    iteration_s: float,
    error_target: float,
    windows: int,
    temperature_c: Callable[[], int],
    soak: SoakPlan,
) -> BlockEnergy:
    """The windows of :func:`run_soaked_block`, planned by :func:`~meddpm.measure.energy.counter.plan_block`, soaked."""
    plan = plan_block(period_s, iteration_s, error_target, windows)
    run, soaked = run_soaked_block(step, device, sampler, plan, temperature_c, soak)
    return _energy(run, plan, period_s, soaked)


def _energy(run: BlockRun, plan: BlockPlan, period_s: float, soak: Soak | None = None) -> BlockEnergy:
    # Readings long before the first edge (a soak's: up to 30 s) would squeeze the windows in the power
    # chart; what the first edge needs is the last update before it, one period back at most.
    readings = [r for r in run.readings if r.t_s >= run.edges_s[0] - 10 * period_s]
    seen = update_period_s(update_times(readings)) or period_s
    block = block_energy(readings, run.edges_s, [plan.window_iterations] * plan.windows, run.gpu_s, seen)
    return block if soak is None else replace(block, soak=soak)


def _window_run(edges: _Edges, first: int, windows: int, readings: list[Reading]) -> BlockRun:
    """The run of the ``windows`` windows from edge ``first`` on."""
    kept = range(first, first + windows + 1)
    return BlockRun([edges.time_s(i) for i in kept], [edges.seconds(i, i + 1) for i in kept[:-1]], readings)


def _repeat(fn: Callable[[], object], times: int) -> None:
    for _ in range(times):
        fn()
