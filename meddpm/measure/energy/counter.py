"""Energy from a counter that advances in steps: planning windows and reading them three ways.

NVML's total-energy counter is refreshed by the card once per *counter period* (about 100 ms on
recent cards; :func:`update_period_s` measures it); a read between refreshes returns the last
published value. A read at a window's edge is therefore behind by up to one step, and the same
holds at the other edge, so the window's energy is off by at most one step's energy (the two
errors have the same sign and partly cancel). This module:

- plans a *block* of back-to-back iterations long enough that one step is under a target share
  (1 %) of its energy, split into a few windows for a spread (:func:`plan_block`);
- reads each window from a sampler's readings as the plain counter difference (the figure we
  report, with its bound), the counter interpolated between its updates, and the integral of the
  sampled instant power (two cross-checks, :func:`block_energy`);
- sums a measurement up with what limits it, for verdicts (:class:`EnergyEstimate`).

Everything here is arithmetic on readings: no NVML, no GPU, so tests drive it with a fake counter.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from meddpm.measure.energy.heat_soak import Soak

# The method every new energy figure comes from; baselines store it, and a verdict compares
# only figures of the same method (the old per-iteration reads read 0 J for short iterations).
ENERGY_METHOD = "counter-window/1"

# The block lasts this many times (period / target): a counter step is taken at the card's
# power at the block's edges, which may exceed its mean over the block by this much.
POWER_RATIO = 1.25
# Iterations before the first and after the last window run for at least this many counter
# periods, so the updates around both edges happen while the combo runs steadily (no idle
# ramp inside a window, and the interpolated cross-check has an update on either side).
LEAD_PERIODS = 1.5
# At most this many trace rows per block are kept for plots and JSON.
TRACE_ROWS = 1500


@dataclass(frozen=True)
class Reading:
    """One poll of the card: host monotonic time (s), counter (mJ), instant power (W), SM clock (MHz)."""

    t_s: float
    energy_mj: int | None
    power_w: float | None = None
    sm_clock_mhz: int | None = None


@dataclass(frozen=True)
class BlockPlan:
    """A block: ``lead`` iterations, ``windows`` windows of ``window_iterations`` each, ``lead`` more."""

    lead: int
    window_iterations: int
    windows: int

    @property
    def iterations(self) -> int:
        """Iterations inside the windows (the leads excluded)."""
        return self.window_iterations * self.windows


@dataclass(frozen=True)
class WindowEnergy:
    """One window of back-to-back iterations, its energy read three ways (J)."""

    iterations: int
    gpu_s: float
    counter_j: float  # the plain difference of the counter at the two edges: what we report
    interpolated_j: float | None  # the counter interpolated between its updates (cross-check)
    integrated_j: float | None  # the sampled instant power integrated (cross-check; None without it)


@dataclass(frozen=True)
class BlockEnergy:
    """The windows of one block, the counter period seen in it and the bound on the total's error."""

    windows: tuple[WindowEnergy, ...]
    period_s: float
    quantisation: float  # bound on the relative error of the total counter energy
    trace: tuple[tuple[float, float | None, int | None, float], ...]  # (s from first edge, W, MHz, counter J)
    soak: Soak | None = None  # how long the combo ran before the kept windows, and at what temperatures (None: no soak)

    @classmethod
    def from_dict(cls, d: dict) -> BlockEnergy:
        """A block read back from its JSON (``dataclasses.asdict`` of one)."""
        return cls(
            windows=tuple(WindowEnergy(**w) for w in d["windows"]),
            period_s=float(d["period_s"]),
            quantisation=float(d["quantisation"]),
            trace=tuple(tuple(row) for row in d["trace"]),  # type: ignore[misc]
            soak=Soak(**d["soak"]) if d.get("soak") else None,
        )

    @property
    def counter_j(self) -> float:
        """Energy of all windows together (the edges in between cancel)."""
        return sum(w.counter_j for w in self.windows)

    @property
    def iterations(self) -> int:
        """Iterations of all windows together."""
        return sum(w.iterations for w in self.windows)


@dataclass(frozen=True)
class EnergyEstimate:
    """Energy per iteration with what limits its resolution: the counter's steps and the replicates' spread.

    ``replicates`` are independent figures of the same thing in J/iter: the windows of one
    process, or each process's total where several processes measured.
    """

    j_per_iter: float
    quantisation: float
    replicates: tuple[float, ...]

    @property
    def spread(self) -> float:
        """Twice the replicates' relative standard deviation (inf with fewer than two: unknown)."""
        if len(self.replicates) < 2 or not self.j_per_iter > 0:
            return math.inf
        return 2 * statistics.stdev(self.replicates) / self.j_per_iter


def resolution(now: EnergyEstimate, baseline: EnergyEstimate) -> float:
    """The smallest relative change of energy per iteration that these two figures can tell apart.

    Both counter bounds (worst cases, so they add) plus both spreads (independent, so in
    quadrature). A change beyond it is not an artefact of the counter's steps or of the run's noise.
    """
    return now.quantisation + baseline.quantisation + math.hypot(now.spread, baseline.spread)


def plan_block(
    period_s: float, iteration_s: float, error_target: float, windows: int, power_ratio: float = POWER_RATIO
) -> BlockPlan:
    """The shortest block whose counter bound stays under ``error_target``, with leads of 1.5 periods.

    One step is at most ``period x edge power``; the block's energy is ``duration x mean power``;
    with edge power up to ``power_ratio`` times the mean, a block of ``power_ratio x period /
    error_target`` keeps the bound under the target. The windows split it evenly.
    """
    if not (period_s > 0 and iteration_s > 0 and error_target > 0 and windows >= 1):
        raise ValueError(f"cannot plan a block from {period_s=}, {iteration_s=}, {error_target=}, {windows=}")
    block_s = power_ratio * period_s / error_target
    return BlockPlan(
        lead=max(1, math.ceil(LEAD_PERIODS * period_s / iteration_s)),
        window_iterations=max(1, math.ceil(block_s / windows / iteration_s)),
        windows=windows,
    )


def update_times(readings: Sequence[Reading]) -> list[float]:
    """When each new counter value was first seen (the first reading is no update: its value is older)."""
    return [after.t_s for before, after in zip(readings, readings[1:]) if _changed(before, after)]


def update_period_s(times: Sequence[float]) -> float | None:
    """The counter period: the median time between consecutive updates (None with fewer than two intervals).

    The median, because a sampler that missed an update sees one interval doubled, and one
    that was late sees a short one followed by a long one.
    """
    intervals = [b - a for a, b in zip(times, times[1:])]
    return statistics.median(intervals) if len(intervals) >= 2 else None


def counter_j_at(readings: Sequence[Reading], t: float) -> float:
    """What a read of the counter at ``t`` returned, in J: the last reading at or before ``t``."""
    value = None
    for r in readings:
        if r.t_s > t:
            break
        if r.energy_mj is not None:
            value = r.energy_mj
    if value is None:
        raise ValueError(f"no counter reading at or before t={t}")
    return value / 1e3


def step_j_at(readings: Sequence[Reading], t: float) -> float:
    """The counter step a read at ``t`` falls in (J): the next value seen after ``t`` less the one in force.

    Where no update came after ``t`` before the readings end (a lead shorter than the period
    under load), the largest step seen stands in for it.
    """
    current = counter_j_at(readings, t)
    for r in readings:
        if r.t_s > t and r.energy_mj is not None and r.energy_mj / 1e3 != current:
            return r.energy_mj / 1e3 - current
    known = [r.energy_mj for r in readings if r.energy_mj is not None]
    return max((b - a for a, b in zip(known, known[1:])), default=0) / 1e3


def interpolated_j_at(readings: Sequence[Reading], t: float) -> float | None:
    """The counter at ``t`` interpolated linearly between the updates around it (None without one on each side).

    Exact where the power is constant across the step around ``t``; the leads keep the combo
    running there, so it is close, and it shows how much of the plain figure is quantisation.
    """
    points = [(r.t_s, r.energy_mj / 1e3) for r, before in zip(readings[1:], readings) if _changed(before, r)]
    for (t0, e0), (t1, e1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return e0 + (e1 - e0) * (t - t0) / (t1 - t0)
    return None


def integrated_power_j(readings: Sequence[Reading], t0: float, t1: float) -> float | None:
    """The sampled instant power integrated over [t0, t1] (trapezoids, J); None without power samples there."""
    points = [(r.t_s, r.power_w) for r in readings if r.power_w is not None]
    inside = [(t, p) for t, p in points if t0 <= t <= t1]
    if len(inside) < 2:
        return None
    # The window's own edges, by the neighbouring samples (the sampler polls every few ms).
    before = [(t, p) for t, p in points if t < t0]
    after = [(t, p) for t, p in points if t > t1]
    first = (t0, _between(before[-1], inside[0], t0)) if before else inside[0]
    last = (t1, _between(inside[-1], after[0], t1)) if after else inside[-1]
    series = [first, *inside, last]
    return sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(series, series[1:]))


def block_energy(
    readings: Sequence[Reading],
    edges: Sequence[float],
    iterations: Sequence[int],
    gpu_s: Sequence[float],
    period_s: float,
) -> BlockEnergy:
    """Each window's energy (``edges`` are the windows' host times, one more than windows) and the total's bound.

    The bound on the total counter energy is one counter step at an outer edge, the larger of
    the two, plus the energy of the sampler's gap around that edge (an update in the gap may
    fall on either side of it), over the total.
    """
    if len(edges) != len(iterations) + 1 or len(gpu_s) != len(iterations):
        raise ValueError("one more edge than windows, and one GPU time per window")
    windows = []
    for (a, b), n, s in zip(zip(edges, edges[1:]), iterations, gpu_s):
        ia, ib = interpolated_j_at(readings, a), interpolated_j_at(readings, b)
        windows.append(
            WindowEnergy(
                iterations=n,
                gpu_s=s,
                counter_j=counter_j_at(readings, b) - counter_j_at(readings, a),
                interpolated_j=None if ia is None or ib is None else ib - ia,
                integrated_j=integrated_power_j(readings, a, b),
            )
        )
    total = sum(w.counter_j for w in windows)
    # A step's energy over the period is the power at the edge, which the gap's energy needs.
    edge_j = max(step_j_at(readings, t) * (1 + _gap_at(readings, t) / period_s) for t in (edges[0], edges[-1]))
    bound = edge_j / total if total > 0 else math.inf
    return BlockEnergy(tuple(windows), period_s, bound, _trace(readings, edges[0]))


def _gap_at(readings: Sequence[Reading], t: float) -> float:
    """Time between the last reading at or before ``t`` and the first one after it."""
    before = max((r.t_s for r in readings if r.t_s <= t), default=t)
    after = min((r.t_s for r in readings if r.t_s > t), default=t)
    return after - before


def _changed(before: Reading, after: Reading) -> bool:
    return after.energy_mj is not None and before.energy_mj is not None and after.energy_mj != before.energy_mj


def _between(a: tuple[float, float], b: tuple[float, float], t: float) -> float:
    return a[1] + (b[1] - a[1]) * (t - a[0]) / (b[0] - a[0])


def _trace(readings: Sequence[Reading], origin: float) -> tuple[tuple[float, float | None, int | None, float], ...]:
    """Rows for plots: every counter update, and other readings thinned to about TRACE_ROWS in all."""
    known = [r for r in readings if r.energy_mj is not None]
    if not known:
        return ()
    start = known[0].energy_mj
    keep_every = max(1, math.ceil(len(known) / TRACE_ROWS))
    rows = []
    for i, r in enumerate(known):
        if i % keep_every == 0 or (i and r.energy_mj != known[i - 1].energy_mj):
            rows.append((round(r.t_s - origin, 4), r.power_w, r.sm_clock_mhz, (r.energy_mj - start) / 1e3))
    return tuple(rows)
