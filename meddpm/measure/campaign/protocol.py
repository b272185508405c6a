"""What every campaign offers its readers, whether it measures in this process or in worker processes.

The suite and the bench hold a :class:`MeasuringCampaign` and never ask which kind it is: the in-process
:class:`~meddpm.measure.campaign.interleaved.Campaign` and the
:class:`~meddpm.measure.processes.campaign.ProcessCampaign` both satisfy it. Each combo's figures come as
:class:`~meddpm.measure.campaign.result.ComboRuns`, one run per measuring process, by :class:`Source` (the code
measured: the working tree, and a revision in an A/B run); what lives only in this process, the combos'
training steps, is a mapping that a process campaign leaves empty.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from meddpm.measure.campaign.result import ComboResult, ComboRuns
from meddpm.measure.campaign.time_split import TimeSplit
from meddpm.measure.statistics.descriptive import Stats
from meddpm.model.config import ModelConfig
from meddpm.run.train import TrainStep


@dataclass(frozen=True)
class Source:
    """Code to measure: the tree whose ``meddpm/`` holds the workload a worker drives with this tree's harness, and
    what its workers run under: an interpreter (None: this one) and environment variables beyond this process's."""

    label: str  # "this tree (abc1234+dirty)" or "HEAD~1 (abc1234)", with what it runs under where that differs
    workload: Path
    commit: str
    python: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    name: str = ""  # the short name an A/B verdict calls it by: "this tree", "main", "abc123456"


@dataclass(frozen=True)
class Progress:
    """A step of a campaign, for progress displays: a warm-up iteration, a round, or an energy block begun."""

    phase: str  # "warmup", "preheat", "round" or "energy" (and "process" from a ProcessCampaign)
    combo: str
    done: int
    total: int
    detail: str = ""


class MeasuringCampaign(Protocol):
    """Every combo of one preset and batch size measured on one device: what the suite and the bench read."""

    config: ModelConfig
    device: torch.device
    batch_size: int

    @property
    def sources(self) -> Sequence[Source]:
        """The code measured in worker processes, the working tree first (then an A/B's revision); none in-process."""
        ...

    @property
    def steps(self) -> Mapping[str, TrainStep]:
        """The combos' training steps alive in this process until :meth:`close`; empty where workers measured."""
        ...

    @property
    def results(self) -> Mapping[str, ComboResult]:
        """The first source's figures by combo, pooled over its runs: what :meth:`run` returned.

        After an interrupt, what was measured by then (a combo built but never timed has no samples).
        """
        ...

    def run(self, on_progress: Callable[[Progress], None] | None = None) -> Mapping[str, ComboResult]:
        """Measure every combo; returns :attr:`results`. Interrupted, :attr:`results` keeps what was measured."""
        ...

    def measurements(self, source: Source | None = None) -> dict[str, ComboRuns]:
        """Each combo's runs from ``source`` (default: the first, or this process's code where it has none)."""
        ...

    def ratio(self, combo: str, reference: str) -> Stats:
        """Per-round time ratio combo / reference of the first source, paired inside each run."""
        ...

    @property
    def time_split(self) -> TimeSplit:
        """Where the measuring's time went, by phase (every source; a worker's own start-up included)."""
        ...

    def close(self) -> None:
        """Free what this process holds of the combos: their training steps and cached GPU memory."""
        ...
