"""Reading the card while it works: a background sampler, and the counter period timed by polling.

The GPU runs a block of iterations asynchronously while the host queues more, so the host
cannot read the card at the moment a window starts or ends on the GPU. A thread reads it all
along instead (energy counter, instant power, SM clock every few milliseconds), and the
windows' edges are placed on the same clock afterwards (:mod:`meddpm.measure.energy.block`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from meddpm.measure.energy.counter import Reading, update_period_s

# Often enough that an edge falls within a few ms of a reading, and with a counter period of
# 20-100 ms every update is seen; rarely enough that three NVML calls leave the host idle.
SAMPLE_INTERVAL_S = 0.005


class Probe(Protocol):
    """What the sampler reads: :class:`meddpm.measure.machine.nvml.Gpu`, or a fake in tests."""

    def energy_mj(self) -> int | None: ...

    def instant_power_w(self) -> float | None: ...

    def sm_clock_mhz(self) -> int | None: ...


class PowerSampler:
    """Polls a probe every ``interval_s`` on a daemon thread between :meth:`start` and :meth:`stop`."""

    def __init__(
        self, probe: Probe, interval_s: float = SAMPLE_INTERVAL_S, clock: Callable[[], float] = time.perf_counter
    ):
        self.probe = probe
        self.interval_s = interval_s
        self.clock = clock
        self._readings: list[Reading] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Take a first reading now and keep reading in the background."""
        self._readings = [self._read()]
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="meddpm-power-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> list[Reading]:
        """Stop the thread, take a last reading, and return all readings in time order."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._readings.append(self._read())
        return self._readings

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._readings.append(self._read())

    def _read(self) -> Reading:
        p = self.probe
        # The counter last: its timestamp matters most, and the other two calls come before it.
        power, clock_mhz = p.instant_power_w(), p.sm_clock_mhz()
        return Reading(self.clock(), p.energy_mj(), power, clock_mhz)


def poll_period(
    read_mj: Callable[[], int | None],
    clock: Callable[[], float] = time.perf_counter,
    max_s: float = 1.5,
    intervals: int = 6,
) -> float | None:
    """The counter's update period, timed by reading it as fast as the host can (None if it never moved twice).

    Stops after ``intervals`` intervals between updates or ``max_s`` seconds. Polling flat out
    places each update within a read's latency (tens of microseconds), much finer than the
    sampler's few milliseconds.
    """
    start = clock()
    last, times = read_mj(), []
    while len(times) <= intervals and clock() - start < max_s:
        value = read_mj()
        if value is None:
            return None
        if value != last:
            times.append(clock())
            last = value
    return update_period_s(times)
