"""Where a run's wall time went, by phase: what a GPU-minute of CI bought.

The phases, in the order a run meets them: ``start-up`` (processes starting, imports, revisions checked out,
models built), ``compiling`` (the first iteration of a compiled combo: Dynamo, Inductor, autotuning; a warm
compile cache makes it short), ``warm-up`` (the other untimed iterations, a first process's warming of the card
included), ``measuring`` (the timed rounds), ``energy`` (the energy blocks' kept windows), ``waiting`` (the rest of
the energy blocks: probes, leads and the windows run until the card's temperature held), ``profiling`` (the
profiled iteration and Nsight Compute), ``sampling`` (the sampling cases' timed steps); ``other`` is what no phase
claims (collection, judging, files).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

import pandas as pd

PHASES = ("start-up", "compiling", "warm-up", "measuring", "energy", "waiting", "profiling", "sampling")


class TimeSplit:
    """Seconds by phase, added up from the pieces of a run."""

    def __init__(self, seconds: Mapping[str, float] | None = None):
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.add_all(seconds or {})

    def add(self, phase: str, seconds: float) -> None:
        """Add ``seconds`` to ``phase`` (one of :data:`PHASES`)."""
        if phase not in self.seconds:
            raise ValueError(f"unknown phase {phase!r}; one of {', '.join(PHASES)}")
        self.seconds[phase] += max(0.0, seconds)

    def add_all(self, seconds: Mapping[str, float] | Iterable[Mapping[str, float]]) -> None:
        """Add one mapping of phase -> seconds, or each of several."""
        for part in [seconds] if isinstance(seconds, Mapping) else seconds:
            for phase, s in part.items():
                self.add(phase, s)

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Add the wall time of the block to ``phase``, also when it raises."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - t0)

    @property
    def accounted_s(self) -> float:
        """The seconds the phases claim."""
        return sum(self.seconds.values())

    def line(self, wall_s: float) -> str:
        """One line: the wall time, then each phase that took a second or more, then what none claims."""
        parts = [f"{phase} {s:.0f} s" for phase, s in self.seconds.items() if s >= 0.5]
        parts.append(f"other {max(0.0, wall_s - self.accounted_s):.0f} s")
        return f"{wall_s:.0f} s wall: {', '.join(parts)}"

    def table(self, wall_s: float) -> pd.DataFrame:
        """Seconds and share of the wall time per phase, with ``other`` last."""
        rows = {**self.seconds, "other": max(0.0, wall_s - self.accounted_s)}
        return pd.DataFrame(
            {
                "seconds": [round(s, 1) for s in rows.values()],
                "share": [s / wall_s if wall_s else 0.0 for s in rows.values()],
            },
            index=pd.Index(list(rows), name="phase"),
        )
