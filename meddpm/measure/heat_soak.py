"""When the card has reached the combo's own steady temperature, so its energy windows can count.

A chip's leakage power grows with its temperature, and the temperature a combo starts from
depends on what ran before it: on an H100 (2026-11-23) the same baseline iteration read
465.7 J at 46-48 °C, as the first work of a process on a cool card, and 481.7 J at 54-57 °C,
right after ``fast`` had run at 700 W (3.4 % apart, each block's windows within 1.7 %). So the
combo runs back to back, its windows measured all along, until the temperature over the last
windows has settled (:func:`meddpm.measure.energy_block.run_soaked_block`): every process
measures the combo at the temperature that combo's own power holds the card at.

"Settled": every temperature reading over the windows kept, and over at least the last ``window_s``,
within ``tolerance_c`` of the latest (NVML reads whole degrees); bounded by ``max_s``, after which
the last windows are kept anyway and the soak says it did not settle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SoakPlan:
    """When the temperature counts as settled, and the longest a soak may run (s)."""

    window_s: float = 5.0
    tolerance_c: int = 1
    max_s: float = 30.0
    poll_s: float = 0.5  # the temperature is read this often while the iterations run


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


def settled(history: Sequence[tuple[float, int]], since_s: float, plan: SoakPlan) -> bool:
    """Whether the temperature has held since ``since_s`` and over at least the last ``plan.window_s``.

    ``history`` holds (host time in s, °C) readings in time order, the first taken when the combo
    started. Held: every reading from the last one at or before the span's start on is within
    ``plan.tolerance_c`` of the latest. A span reaching back before the first reading has not held.
    """
    now, latest = history[-1]
    start = min(since_s, now - plan.window_s)
    if start < history[0][0]:
        return False
    first = max(i for i, (t, _) in enumerate(history) if t <= start)
    return all(abs(c - latest) <= plan.tolerance_c for _, c in history[first:])
