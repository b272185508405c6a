"""A bisection's measuring: what it measures (:class:`Bisection`), the seconds it may take (:class:`Budget`), and the
walk that extracts each commit's workload once and measures it (:class:`Walk`): an A/B run against a commit for a
halving, the ends and the culprit, or one profiled process for a commit's counts. The walk checks its budget before
each run and, where the budget has no room for it, says what finishing would cost (:class:`BudgetSpent`).

Every A/B run drives both commits' workloads with this tree's harness in alternating fresh processes
(:class:`~meddpm.measure.processes.campaign.ProcessCampaign`), judged with the suite's statistics; workers share
Inductor's and Triton's on-disk caches, so a commit whose compiled graphs match an earlier step's loads them
instead of compiling again.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from meddpm.judge.ab import explanation
from meddpm.judge.baseline import Tolerances
from meddpm.judge.bisection import (
    Commit,
    CountedStep,
    MeasuredEnds,
    Search,
    Side,
    Step,
    counts_moved,
    decided_side,
    ends_undecided,
    run_seconds,
    side_by_counts,
    side_by_counts_alone,
    side_of,
    significantly_slower,
)
from meddpm.measure.campaign.protocol import Progress, Source
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.campaign.time_split import TimeSplit
from meddpm.measure.processes.campaign import ProcessCampaign
from meddpm.measure.processes.revision import revision
from meddpm.measure.statistics.compare import Comparison, compare_processes
from meddpm.model.config import ModelConfig

EXTENSIONS = 2  # an ambiguous step gets this many rounds of as many processes again, then decides on its ratio


@dataclass(frozen=True)
class Bisection:
    """What one bisection measures: a combo of a preset on a device, with the campaign's settings."""

    config: ModelConfig
    combo: str
    device: torch.device
    batch_size: int
    settings: CampaignSettings
    processes: int
    alpha: float = Tolerances().alpha


@dataclass
class Budget:
    """Seconds a bisection (or several in turn) may take, counted from this object's creation.

    What an A/B run costs is known only once the ends are measured: every later run of the walk is
    as long as one round of the ends', so a run is started only where that much is left.
    """

    seconds: float
    # Looked up at each call, so that a test's planted clock (this module's ``time`` replaced) counts too.
    started: float = field(default_factory=lambda: time.monotonic())

    @property
    def spent(self) -> float:
        return time.monotonic() - self.started

    def fits(self, cost: float) -> bool:
        """Whether a run of ``cost`` seconds ends within the budget."""
        return self.spent + cost <= self.seconds


class BudgetSpent(Exception):
    """The budget has no room for the walk's next run; ``left`` says where the culprit lies and what finishing costs."""

    def __init__(self, left: dict[str, object]):
        super().__init__("budget spent")
        self.left = left


def halvings(count: int) -> int:
    """The halvings that place a culprit among ``count`` commits."""
    return math.ceil(math.log2(count)) if count > 1 else 0


def culprit_range(search: Search) -> str:
    """Where the culprit lies: "a1b2c3d4e..f6a7b8c9d", or the one commit left."""
    first = search.commits[search.good + 1]
    return f"{first.sha[:9]}..{search.culprit.sha[:9]}" if first != search.culprit else search.culprit.sha[:9]


class Walk:
    """A bisection under way: the extracted workloads, the steps measured, the commits skipped, and where the JSON
    goes."""

    def __init__(
        self, job: Bisection, root: Path, json_path: Path, say: Callable[[str], None], budget: Budget | None = None
    ):
        self.job = job
        self.budget = budget
        self.root = root
        self.json_path = json_path
        self.say = say
        self.steps: list[Step] = []
        self.counted: list[CountedStep] = []  # commits placed by their counts, not measured in an A/B run
        self._numbered = 1  # the ends' step
        self.skipped: list[tuple[Commit, str]] = []  # commits this harness cannot drive, and why
        self.started = time.monotonic()
        self.time_split = TimeSplit()  # where the walk's time went: checkouts, then every step's processes
        self._sources: dict[str, Source] = {}
        self._stack = contextlib.ExitStack()

    @property
    def wall_s(self) -> float:
        """Seconds since the walk began."""
        return time.monotonic() - self.started

    def __enter__(self) -> Walk:
        self._stack.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.__exit__(*exc)

    def source(self, commit: Commit, end: bool) -> Source:
        """``commit``'s workload, extracted once and kept until the walk ends; :class:`Undrivable` where this harness
        cannot drive it, which for an ``end`` also names the first later commit it drives."""
        if commit.sha not in self._sources:
            with self.time_split.timed("start-up"):
                source = revision(commit.sha, self.root, "--bisect", reach=end)
                self._sources[commit.sha] = self._stack.enter_context(source)
        return self._sources[commit.sha]

    def measure(self, commit: Commit, against: Commit, cut: float | None, label: str) -> Step:
        """``commit`` against ``against`` in alternating processes; a step that cannot tell yet gets more: the ends
        (no cut) when their interval is too wide to say whether ``commit`` is slower, a halving when its interval
        straddles the cut."""
        job = self.job
        campaign = self._campaign(
            [self.source(commit, cut is None), self.source(against, True)],
            replace(job.settings, energy=False),  # a bisection judges time only
            job.processes,
        )
        started = time.monotonic()
        extended = 0
        try:
            while True:
                campaign.run(self._progress(label))
                comparison = self._comparison(campaign)
                undecided = self._undecided(comparison, cut)
                if undecided is None or extended == EXTENSIONS:
                    break
                round_s = (time.monotonic() - started) / (extended + 1)
                if self.budget is not None and not self.budget.fits(round_s):
                    self.say(f"  {label}: {undecided}; no budget left for more processes, deciding on its ratio")
                    break
                extended += 1
                self.say(f"  {label}: {undecided}; {job.processes}+{job.processes} more processes")
        finally:
            self.time_split.add_all(campaign.time_split.seconds)
        side: Side = "bad" if cut is None else decided_side(comparison, cut)
        candidate, reference = (campaign.measurements(s)[job.combo] for s in campaign.sources)
        rows = tuple(r.as_dict() for r in explanation(candidate, reference))
        counts = (candidate.run_counts, reference.run_counts)
        step = Step(commit, against, comparison, side, time.monotonic() - started, extended, rows, counts)
        self.steps.append(step)
        return step

    def counts_of(self, commit: Commit, label: str, end: bool = False) -> tuple[list[dict[str, int]], float]:
        """The counts of ``commit``'s profiled iteration (empty where the process profiled nothing) and the seconds
        it took: one process of its own, timing a single round and not warming the card, since counts do not depend
        on the clock. ``end``: one of the range's ends, whose undrivable workload names the first later commit."""
        job = self.job
        settings = replace(job.settings, energy=False, profile=True, min_rounds=1, max_rounds=1, median_precision=0.0)
        campaign = self._campaign([self.source(commit, end)], settings, 1, preheat=False)
        started = time.monotonic()
        try:
            campaign.run(self._progress(label))
        finally:
            self.time_split.add_all(campaign.time_split.seconds)
        return list(campaign.measurements(campaign.sources[0])[job.combo].run_counts), time.monotonic() - started

    def end_counts(self, commit: Commit, side: Side, label: str) -> list[dict[str, int]]:
        """The counts of an end whose step did not bring them (the good end of ends the night measured), kept with
        the commits placed by their counts."""
        counts, seconds = self.counts_of(commit, label, end=True)
        self.counted.append(CountedStep(commit, side, counts, seconds))
        return counts

    def ends_counts(
        self,
        first: Step,
        good: Commit,
        bad: Commit,
        always: bool = False,
        before_each: Callable[[], None] = lambda: None,
    ) -> tuple[list[dict[str, int]], list[dict[str, int]]] | None:
        """The ends' counts (good's, bad's) where they differ, so that counts can place the commits between them; an
        end whose counts its step did not bring (ends given by the night's A/B keep the bad end's only) gets one
        profiled process of its own, after ``before_each`` (the budget's check). None where they agree, or neither
        end was profiled (unless ``always``: a walk that follows the counts profiles both): every halving is then an
        A/B run."""
        bad_counts, good_counts = first.counts
        if not (bad_counts or good_counts or always):
            return None
        if not bad_counts:
            before_each()
            bad_counts = self.end_counts(bad, "bad", "the bad end's counts")
        if not good_counts:
            before_each()
            good_counts = self.end_counts(good, "good", "the good end's counts")
        if not counts_moved(bad_counts, good_counts):
            return None
        self.say("the ends' counts differ: each halving is placed by one profiled process first (docs/bench.md)")
        return good_counts, bad_counts

    def place(
        self, commit: Commit, good: list[dict[str, int]], bad: list[dict[str, int]], label: str, alone: bool = False
    ) -> CountedStep:
        """``commit`` placed by its counts against the ends' ``good`` and ``bad`` (:func:`side_by_counts`; ``alone``:
        where the counts themselves are what the walk follows, :func:`side_by_counts_alone`)."""
        counts, seconds = self.counts_of(commit, label)
        side = side_by_counts_alone(counts, good) if alone else side_by_counts(counts, good, bad)
        step = CountedStep(commit, side, counts, seconds)
        self.counted.append(step)
        return step

    @property
    def counts_process_s(self) -> float:
        """What the next counts process is taken to cost: the longest so far, else one process of the first A/B run
        the walk measured (0 before either)."""
        longest = max((c.seconds for c in self.counted), default=0.0)
        return longest or run_seconds(self.steps) / (2 * self.job.processes)

    def run_cost(self) -> float:
        """What the next A/B run is taken to cost: a round of the first the walk measured (run_seconds), else, before
        one, a run's processes each as long as the longest counts process; 0 where neither ran yet."""
        return run_seconds(self.steps) or 2 * self.job.processes * self.counts_process_s

    def check_budget(self, good: Commit, search: Search, cost: float | None = None, by_counts: bool = False) -> None:
        """Raise :class:`BudgetSpent`, after a line saying what is left, where the walk's next run would overrun its
        budget: an A/B run (what :meth:`run_cost` says; 0 lets the first the walk measures run), or a counts process
        of ``cost`` seconds. ``by_counts``: the walk follows the counts, and so does the command that finishes it (its
        ends an A/B run, its halvings counts processes, then the culprit's own A/B run)."""
        budget, job, run_s = self.budget, self.job, self.run_cost()
        if budget is None or budget.fits(run_s if cost is None else cost):
            return
        newest_good, oldest_bad = search.parent_of_culprit(good), search.culprit
        count = len(search.suspects)
        if by_counts:
            processes, runs = halvings(count), 2
            cost_s = processes * self.counts_process_s + runs * run_s
            # At least: each A/B run is priced at one round of processes, and one whose interval is too wide runs more.
            plan = f"{processes} counts processes and {runs} A/B runs, at least {cost_s:.0f} s"
            flag = " --follow-counts"
        else:  # a bisection of what is left: its ends, its halvings, the culprit against its parent
            processes, runs = 0, 2 + halvings(count)
            plan, flag = f"at most {runs} A/B runs, about {runs * run_s:.0f} s", ""
        self.say(
            f"budget: {budget.spent:.0f} s of {budget.seconds:.0f} s spent, and an A/B run takes about {run_s:.0f} s: "
            f"stopped with the culprit in {culprit_range(search)} ({count} commit(s)); finish with meddpm-bench "
            f"--bisect {newest_good.sha[:12]}..{oldest_bad.sha[:12]} --combos {job.combo} --preset {job.config.name} "
            f"--batch-size {job.batch_size}{flag} ({plan})"
        )
        raise BudgetSpent(
            {
                "good": newest_good.sha,
                "bad": oldest_bad.sha,
                "commits": count,
                "runs": runs,
                "run_seconds": run_s,
                "budget_seconds": budget.seconds,
                "spent_seconds": budget.spent,
                **({"by_counts": True, "counts_processes": processes} if by_counts else {}),
            }
        )

    def counts_budget(self, good: Commit, search: Search, by_counts: bool = False) -> Callable[[], None]:
        """The budget's check before a counts process (:meth:`check_budget`)."""
        return lambda: self.check_budget(good, search, self.counts_process_s, by_counts=by_counts)

    def next_number(self) -> int:
        """The next step's number: the ends are step 1, then each commit tried in turn, however it was decided."""
        self._numbered += 1
        return self._numbered

    def given_ends(self, bad: Commit, good: Commit, ends: MeasuredEnds, slower_only: bool = True) -> Step | None:
        """The ends' step from their measurement ``ends``; None where it does not show ``bad`` significantly slower at
        this bisection's alpha (they are then measured anew), unless ``slower_only`` is off (a walk that follows the
        counts takes the night's figures as they are)."""
        c = compare_processes(list(ends.candidate_ms), list(ends.reference_ms), alpha=self.job.alpha)
        if slower_only and not significantly_slower(c, self.job.alpha):
            return None
        counts = (list(ends.candidate_counts), [])
        step = Step(bad, good, c, "bad", 0.0, explain=ends.explain, counts=counts, measured_by=ends.measured_by)
        self.steps.append(step)
        return step

    def _campaign(
        self, sources: list[Source], settings: CampaignSettings, processes: int, preheat: bool = True
    ) -> ProcessCampaign:
        """The job's combo measured in ``processes`` fresh processes a source, with ``settings``."""
        job = self.job
        return ProcessCampaign(
            job.config,
            [job.combo],
            job.device,
            batch_size=job.batch_size,
            settings=settings,
            processes=processes,
            sources=sources,
            preheat=preheat,
        )

    def _undecided(self, comparison: Comparison, cut: float | None) -> str | None:
        """Why a step cannot decide yet, or None where it can."""
        c = comparison
        interval = f"[{c.ci_low:.4f}, {c.ci_high:.4f}]"
        if cut is None:
            if ends_undecided(c, self.job.alpha, Tolerances().time_rel):
                return f"ratio {c.ratio:.4f} {interval} p {c.p_slower:.2g} is too wide to tell whether it is slower yet"
            return None
        return f"interval {interval} straddles the cut {cut:.4f}" if side_of(c, cut) == "ambiguous" else None

    def _comparison(self, campaign: ProcessCampaign) -> Comparison:
        candidate, reference = campaign.sources
        a = campaign.measurements(candidate)[self.job.combo].process_medians_ms
        b = campaign.measurements(reference)[self.job.combo].process_medians_ms
        return compare_processes(a, b, alpha=self.job.alpha)

    def _progress(self, label: str) -> Callable[[Progress], None]:
        def log(p: Progress) -> None:
            print(f"  {label}: process {p.done}/{p.total} ({p.combo}) {p.detail}", file=sys.stderr, flush=True)

        return log
