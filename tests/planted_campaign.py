"""A bisection's measuring replaced by planted process medians per commit, and its clock by a planted one.

:class:`PlantedCampaign` stands in for the process campaign: each process of a commit reads the
median planted for it (with a jitter of 0.02 % that differs between processes), and the first process of each
side the counts planted for it, if any, so a walk's culprit is known and no timing of this machine enters.
:func:`plant` installs it in :mod:`meddpm.bench.bisect` and :mod:`meddpm.bench.walk` with a first-parent line of
fake commits and a clock that each run of processes moves on by :attr:`PlantedCampaign.run_seconds`, for budgets.
"""

from __future__ import annotations

import contextlib
import hashlib
import types
from dataclasses import dataclass, field
from pathlib import Path

from meddpm.bench import bisect, walk
from meddpm.judge.bisection import Commit
from meddpm.measure.campaign.protocol import Source
from meddpm.measure.campaign.time_split import TimeSplit
from meddpm.measure.processes.revision import Undrivable

COMMITS = [Commit(hashlib.sha1(f"c{i}".encode()).hexdigest(), f"c{i}") for i in range(1, 17)]
GOOD = Commit(hashlib.sha1(b"c0").hexdigest(), "c0")


@dataclass
class _Runs:
    process_medians_ms: list[float] = field(default_factory=list)
    profile_rows: list = field(default_factory=list)
    run_profiles: list = field(default_factory=list)
    run_counts: list = field(default_factory=list)
    run_module_bytes: list = field(default_factory=list)

    def process_peaks(self, kind: str) -> list[int]:
        return []  # no process of a planted commit reads a peak


class PlantedCampaign:
    """A process campaign whose processes read the time planted for each commit (slower from the culprit on)."""

    medians: dict[str, float] = {}
    counts: dict[str, dict[str, int]] = {}  # by sha: the counts of its profiled iteration (none: nothing profiled)
    runs: list[int] = []
    undrivable: dict[str, str] = {}  # by sha: why this harness cannot drive the commit
    noisy: set[str] = set()  # the commits whose processes read half or twice their time, in turn
    now = 0.0  # the planted clock
    run_seconds = 0.0  # what each run of processes moves it on by
    interrupt_at: int | None = None  # the run (counted from 0) that Ctrl-C stops
    reach: dict[str, bool] = {}  # by sha: whether its workload was first extracted as an end's

    def __init__(self, config, combos, device, *, batch_size, settings, processes, sources, preheat=True):
        self.combo, self.processes, self.sources = combos[0], processes, sources
        self._measured = {s.label: _Runs() for s in sources}
        self.time_split = TimeSplit()

    def run(self, on_progress=None):
        if len(PlantedCampaign.runs) == self.interrupt_at:
            raise KeyboardInterrupt
        PlantedCampaign.runs.append(self.processes)
        self.time_split.add("measuring", 10.0)  # each run of a step: 10 s of planted measuring
        PlantedCampaign.now += PlantedCampaign.run_seconds
        for i in range(self.processes):
            for source in self.sources:
                jitter = 1 + 0.0002 * ((i * 7 + len(self._measured[source.label].process_medians_ms)) % 5 - 2)
                if source.commit in self.noisy:
                    jitter *= (0.5, 2.0)[len(self._measured[source.label].process_medians_ms) % 2]
                runs = self._measured[source.label]
                runs.process_medians_ms.append(self.medians[source.commit] * jitter)
                if not runs.run_counts and source.commit in self.counts:  # each side's first process is profiled
                    runs.run_counts.append(dict(self.counts[source.commit]))

    def measurements(self, source):
        return {self.combo: self._measured[source.label]}


def _line(good: str, bad: str, root: Path) -> tuple[Commit, list[Commit]]:
    """The planted first-parent line between two of GOOD and COMMITS, by name or hash."""
    line = [GOOD, *COMMITS]
    index = {key: i for i, c in enumerate(line) for key in (c.sha, c.subject)}
    return line[index[good]], line[index[good] + 1 : index[bad] + 1]


def plant(monkeypatch, tmp_path: Path, medians: dict[str, float]) -> None:
    """Walks over GOOD and COMMITS read ``medians`` (by sha); the runs, clock and commits skipped start afresh."""
    monkeypatch.setattr(bisect, "revisions_root", lambda option: tmp_path)
    monkeypatch.setattr(bisect, "first_parent_line", _line)

    @contextlib.contextmanager
    def revision(sha, root, option, reach):
        PlantedCampaign.reach.setdefault(sha, reach)
        if sha in PlantedCampaign.undrivable:
            raise Undrivable(f"--bisect: {sha[:9]} {PlantedCampaign.undrivable[sha]}", PlantedCampaign.undrivable[sha])
        yield Source(sha[:9], tmp_path, sha)

    monkeypatch.setattr(walk, "revision", revision)
    monkeypatch.setattr(walk, "ProcessCampaign", PlantedCampaign)
    monkeypatch.setattr(bisect, "environment", lambda device: {"device": "planted"})
    monkeypatch.setattr(walk, "time", types.SimpleNamespace(monotonic=lambda: PlantedCampaign.now))
    PlantedCampaign.medians = dict(medians)
    PlantedCampaign.counts = {}
    PlantedCampaign.reach = {}
    PlantedCampaign.runs = []
    PlantedCampaign.undrivable = {}
    PlantedCampaign.noisy = set()
    PlantedCampaign.now = 0.0
    PlantedCampaign.run_seconds = 0.0
    PlantedCampaign.interrupt_at = None
