"""Bringing the card to the combo's own steady temperature before its energy block.

A chip's leakage power grows with its temperature, and the temperature a combo starts from
depends on what ran before it: on an H100 (2026-11-23) the same baseline iteration read
465.7 J at 46-48 °C, as the first work of a process on a cool card, and 481.7 J at 54-57 °C,
right after ``fast`` had run at 700 W (3.4 % apart, each block's windows within 1.7 %). So the
combo runs back to back until its temperature has settled, and only then is the block taken:
every process measures the combo at the temperature that combo's own power holds the card at.

"Settled" is a change of at most ``tolerance_c`` over the last ``window_s`` (NVML reads whole
degrees), bounded by ``max_s``; a soak that hit the bound says so, and the block is taken anyway.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SoakPlan:
    """When the temperature counts as settled, and the longest a soak may run (s)."""

    window_s: float = 5.0
    tolerance_c: int = 1
    max_s: float = 30.0
    poll_s: float = 0.5  # iterations are queued this long between two temperature reads


@dataclass(frozen=True)
class Soak:
    """A finished soak: the temperatures at its start and end (°C), its length (s), whether it settled,
    and the time per iteration over its last window (s), back to back at the block's temperature."""

    start_c: int
    end_c: int
    seconds: float
    settled: bool
    iteration_s: float

    def describe(self) -> str:
        """One line for logs, e.g. ``46 -> 52 °C in 18 s``, or ``... (not settled in 30 s)``."""
        text = f"{self.start_c} -> {self.end_c} °C in {self.seconds:.0f} s"
        return text if self.settled else f"{text} (not settled in {self.seconds:.0f} s)"


def soak(
    step: Callable[[], object],
    iteration_s: float,
    temperature_c: Callable[[], int],
    synchronize: Callable[[], None],
    plan: SoakPlan = SoakPlan(),
    clock: Callable[[], float] = time.perf_counter,
) -> Soak:
    """Run ``step`` back to back until the temperature has settled (see the module's docstring).

    Iterations are queued in batches of about ``plan.poll_s`` (``iteration_s`` is the combo's
    median time), so the card never idles between them but for the host's read. The soak's own
    time per iteration is what the block should be planned with: the rounds' median can be far
    off on a first process, where compilation or autotuning still ran inside the few rounds (an
    H100's first process timed ``fast``'s two rounds at 1455 and 54 ms, and the block planned
    from their 755 ms median lasted 1.0 s).
    """
    batch = max(1, math.ceil(plan.poll_s / iteration_s))
    t0 = clock()
    history = [(t0, temperature_c())]
    while True:
        for _ in range(batch):
            step()
        synchronize()
        now = clock()
        history.append((now, temperature_c()))
        elapsed = now - t0
        # The readings of the last window: from the last one at or before its start on.
        window = history[max(i for i, (t, _) in enumerate(history) if t <= max(t0, now - plan.window_s)) :]
        settled = elapsed >= plan.window_s and all(abs(c - window[-1][1]) <= plan.tolerance_c for _, c in window)
        if settled or elapsed >= plan.max_s:
            iteration_s = (window[-1][0] - window[0][0]) / (batch * (len(window) - 1))
            return Soak(history[0][1], history[-1][1], elapsed, settled, iteration_s)
