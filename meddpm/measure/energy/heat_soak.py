"""When the card has reached the combo's own steady temperature, so its energy windows can count.

A chip's leakage power grows with its temperature, and the temperature a combo starts from
depends on what ran before it: the same iteration reads a few percent more energy right after a
high-power combo than as the first work of a process on a cool card, more than its windows spread
(docs/energy.md, "The method"). So the
combo runs back to back, its windows measured all along, until the temperature over the last
windows has settled (:func:`meddpm.measure.energy.block.run_soaked_block`): every process
measures the combo at the temperature that combo's own power holds the card at.

"Settled": the mean temperatures over the last windows, as many as cover at least ``window_s``, lie
within ``tolerance_c`` of one another; bounded by ``max_s``, after which the last windows are kept
anyway and the soak says it did not settle. Means over whole windows, not single readings: a window
holds whole iterations, and the strict-FP32 combos' readings swing by several degrees at one
temperature (readings a second or two apart jump by degrees with no trend), which a rule on single
readings took for a card still moving. The tolerance, 2 °C, is what leakage turns into under 1 % of
energy, half the suite's 2 % bound; at 1 °C most blocks ended unsettled while their energy already
agreed (docs/energy.md, "The order and the rule").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SoakPlan:
    """When the temperature counts as settled, and the longest a soak may run (s)."""

    window_s: float = 5.0
    tolerance_c: float = 2.0
    max_s: float = 30.0
    # The temperature is read this often while the iterations run: some 20 readings a window of the suite's.
    poll_s: float = 0.1

    def spans(self, seconds: float) -> bool:
        """Whether ``seconds`` cover the settling time ``window_s`` (edges on a clock: within rounding)."""
        return seconds >= self.window_s - 1e-9


@dataclass(frozen=True)
class Soak:
    """A finished soak: the temperatures at its start and at the end of the kept windows (°C), the seconds the combo
    ran before those windows, whether it settled, and the time per iteration over the kept windows (s), back to back
    at the combo's temperature."""

    start_c: int
    end_c: int
    seconds: float
    settled: bool
    iteration_s: float


def window_means(history: Sequence[tuple[float, int]], edges_s: Sequence[float]) -> list[float]:
    """The mean temperature over each window between consecutive ``edges_s`` (host times, increasing).

    ``history`` holds (host time in s, °C) readings in time order; the temperature between two
    readings is taken as the straight line between them, and after the last as the last.
    """
    t = np.array([r[0] for r in history])
    c = np.array([r[1] for r in history], dtype=float)
    means = []
    for a, b in zip(edges_s, edges_s[1:]):
        times = np.concatenate(([a], t[(t > a) & (t < b)], [b]))
        values = np.interp(times, t, c)
        means.append(float(np.sum((values[1:] + values[:-1]) / 2 * np.diff(times)) / (b - a)))
    return means


def spanning(edges_s: Sequence[float], first: int, plan: SoakPlan, running_s: float = 0.0) -> list[float]:
    """The edges from index ``first`` on, reaching back over earlier ones where those (and ``running_s`` of a window
    still running after the last) span less than ``plan.window_s``: the windows :func:`settled` is to judge."""
    end = edges_s[-1] + running_s
    while first > 0 and not plan.spans(end - edges_s[first]):
        first -= 1
    return list(edges_s[first:])


def settled(
    history: Sequence[tuple[float, int]], edges_s: Sequence[float], plan: SoakPlan, running_s: float = 0.0
) -> bool:
    """Whether the windows between ``edges_s`` span at least ``plan.window_s`` and their mean temperatures lie
    within ``plan.tolerance_c`` of one another.

    ``running_s``: a window still running after the last edge, counted in the span, and in the
    means with the mean the last two windows' trend gives it (a card drifting by more than half the
    tolerance a window has not held). Windows that reach back before the first reading of ``history``
    have not held.
    """
    if len(edges_s) < 2 or not plan.spans(edges_s[-1] + running_s - edges_s[0]) or edges_s[0] < history[0][0]:
        return False
    means = window_means(history, edges_s)
    if running_s > 0 and len(means) > 1:
        means.append(2 * means[-1] - means[-2])
    return max(means) - min(means) <= plan.tolerance_c
