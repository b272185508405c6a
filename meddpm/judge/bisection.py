"""Bisection's decisions: which side of a slowdown a commit lies on, and where to look next.

A bisection walks the first-parent commits between a good and a bad end. Each step compares a
commit with the good end (process medians of alternating fresh processes,
:func:`~meddpm.measure.statistics.compare.compare_processes`) and asks whether it already carries
the slowdown measured between the ends. The cut is halfway: a commit is bad when its ratio to
the good end is above ``1 + (end ratio - 1) / 2`` with its whole interval, good when the whole
interval is below, and ambiguous when the interval straddles the cut; an ambiguous step is
measured in more processes before it decides. Halfway is where a commit holding all of the
slowdown and one holding none are told apart with equal margins, and it keeps a smaller,
unrelated change elsewhere in the range from posing as the culprit.

Where the ends' counts differ (an iteration's launches by kind, bytes allocated, FLOPs: none depends on the clock),
a commit's counts from one profiled process can place it instead: like the bad end's and not the good end's, it is
bad; the other way round, good; like both or neither, it is measured as a halving is (:func:`side_by_counts`). The
culprit found so is then timed against its parent as any culprit is: where it is not significantly slower by at least
half the range's slowdown, the counts moved elsewhere than the slowdown, and the range is bisected again by time.

Where the counts are themselves what regressed (a night red for them while its time held), the walk follows them alone
(:func:`side_by_counts_alone`): a commit is bad once a count rose beyond the good end's, whether or not it is slower.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from meddpm.errors import UserError, printable
from meddpm.judge.counts import count_ranges, judge_counts
from meddpm.judge.verdict import Verdict
from meddpm.measure.statistics.compare import Comparison

Side = Literal["bad", "good", "ambiguous"]


@dataclass(frozen=True)
class Commit:
    """A commit of the walked line: its full hash and subject."""

    sha: str
    subject: str

    def __str__(self) -> str:
        return f"{self.sha[:9]} ({printable(self.subject)})"


@dataclass(frozen=True)
class MeasuredEnds:
    """The range's ends, already measured against each other by ``measured_by`` (the nightly's A/B of its commit
    against the last good run's): each side's process medians and what moved, so that they are not measured again."""

    candidate_ms: tuple[float, ...]
    reference_ms: tuple[float, ...]
    explain: tuple[dict[str, object], ...] = ()
    measured_by: str = "the night's A/B"
    candidate_counts: tuple[dict[str, int], ...] = ()  # the bad end's profiled counts, where its results keep them


@dataclass(frozen=True)
class Step:
    """One measured comparison of the bisection: ``commit`` against ``against``, and what it decided."""

    commit: Commit
    against: Commit
    comparison: Comparison
    side: Side  # after any extra processes; the ends' and the culprit's own step say "bad"
    seconds: float  # wall time of its processes
    extended: int = 0  # times more processes were added to an ambiguous step
    # What moved between the two sides' first processes (meddpm.judge.explain), as JSON rows
    explain: tuple[dict[str, object], ...] = ()
    counts: tuple[list[dict[str, int]], list[dict[str, int]]] = ([], [])  # each process's counts, per side
    measured_by: str = ""  # who measured it where not this bisection: "the night's A/B" for ends it was given

    def as_dict(self) -> dict[str, object]:
        c = self.comparison
        return {
            "commit": self.commit.sha,
            "subject": self.commit.subject,
            "against": self.against.sha,
            "ratio": c.ratio,
            "ci_low": c.ci_low,
            "ci_high": c.ci_high,
            "p_slower": c.p_slower,
            "processes": [len(c.candidate_ms), len(c.reference_ms)],
            "side": self.side,
            "seconds": self.seconds,
            "extended": self.extended,
            "explain": list(self.explain),
            "counts": {"commit": self.counts[0], "against": self.counts[1]},
            **({"measured_by": self.measured_by} if self.measured_by else {}),
        }


@dataclass(frozen=True)
class CountedStep:
    """A commit placed by the counts of one profiled process instead of an A/B run (``side`` None: its counts are
    like both ends' or neither's, so it was measured as a halving is)."""

    commit: Commit
    side: Side | None
    counts: list[dict[str, int]]
    seconds: float

    def as_dict(self) -> dict[str, object]:
        return {
            "commit": self.commit.sha,
            "subject": self.commit.subject,
            "side": self.side,
            "counts": self.counts,
            "seconds": self.seconds,
        }


def _judged(runs: Sequence[Mapping[str, int]], reference: Sequence[Mapping[str, int]]) -> list[Verdict]:
    """The counts gate's verdicts on ``runs`` against ``reference``'s spread (each a list of processes' counts); none
    where either side has no counts."""
    return judge_counts("", runs, count_ranges(reference)) if runs and reference else []


def _alike(runs: Sequence[Mapping[str, int]], reference: Sequence[Mapping[str, int]]) -> bool:
    """Whether ``runs``' counts lie within ``reference``'s spread, as the counts gate judges them; never without
    counts on both sides."""
    verdicts = _judged(runs, reference)
    return len(verdicts) == 1 and verdicts[0].outcome == "unchanged"


def counts_moved(bad: Sequence[Mapping[str, int]], good: Sequence[Mapping[str, int]]) -> bool:
    """Whether the ends' counts (each a list of processes' counts) differ, so that counts can place the commits
    between them; not where either end has none."""
    return bool(bad and good) and not _alike(bad, good)


def side_by_counts(
    counts: Sequence[Mapping[str, int]], good: Sequence[Mapping[str, int]], bad: Sequence[Mapping[str, int]]
) -> Side | None:
    """A commit's side by its counts: bad where they are like the bad end's and not the good end's, good the other way
    round, None where they are like both or neither (a commit that moved them again, or one without counts)."""
    like_good, like_bad = _alike(counts, good), _alike(counts, bad)
    if like_good == like_bad:
        return None
    return "good" if like_good else "bad"


def side_by_counts_alone(counts: Sequence[Mapping[str, int]], good: Sequence[Mapping[str, int]]) -> Side | None:
    """A commit's side where the counts themselves are what moved (a night that flagged them, not the time): bad once
    a count rose beyond the good end's spread, as the counts gate flags it, else good (fewer launches or bytes are no
    regression), so the walk ends at the commit where the regression first shows; None without counts."""
    if not (counts and good):
        return None
    return "bad" if any(v.outcome == "regression" for v in _judged(counts, good)) else "good"


def counts_change(counts: Sequence[Mapping[str, int]], parent: Sequence[Mapping[str, int]]) -> list[str]:
    """Each count that moved from ``parent``'s to ``counts`` (one process's list each), as "launches 1,099 -> 1,105";
    none where either has no counts."""
    return [
        f"{v.metric} {v.baseline:,.0f} -> {v.now:,.0f}"  # each metric names its unit: launches, bytes, FLOPs
        for v in _judged(counts, parent)
        if v.outcome in ("regression", "improvement")
    ]


def significantly_slower(comparison: Comparison, alpha: float) -> bool:
    """Whether the candidate is slower than the reference, its test significant at ``alpha``."""
    return comparison.testable and comparison.p_slower < alpha and comparison.ratio > 1


def slowdown_between_ends(comparison: Comparison, alpha: float, combo: str, good: Commit, bad: Commit) -> float:
    """The cut between good and bad commits; a UserError when ``bad`` is not significantly slower than ``good``."""
    if not significantly_slower(comparison, alpha):
        interval = f"[{comparison.ci_low:.4f}, {comparison.ci_high:.4f}]" if comparison.testable else "untestable"
        processes = f"{len(comparison.candidate_ms)}+{len(comparison.reference_ms)} processes"
        raise UserError(
            f"--bisect: {bad} is not slower than {good} for {combo} (ratio {comparison.ratio:.4f} {interval}, "
            f"p {comparison.p_slower:.2g}, {processes}); nothing to bisect: check the range and the combo"
        )
    return 1 + (comparison.ratio - 1) / 2


def ends_undecided(comparison: Comparison, alpha: float, threshold: float) -> bool:
    """Whether the ends' A/B cannot tell yet: not significantly slower, but its interval reaches past a slowdown of
    ``threshold`` (one the suite would flag), so more processes may still show one.

    A tight interval around 1 says "not slower"; one as wide as [0.12, 38.67] says only that the
    processes were too few or too noisy to tell.
    """
    if significantly_slower(comparison, alpha):
        return False
    return not comparison.testable or comparison.ci_high > 1 + threshold


def side_of(comparison: Comparison, cut: float) -> Side:
    """Bad when the whole interval is above the cut, good when below, else ambiguous."""
    if not comparison.testable:
        return "ambiguous"
    if comparison.ci_low > cut:
        return "bad"
    if comparison.ci_high < cut:
        return "good"
    return "ambiguous"


def decided_side(comparison: Comparison, cut: float) -> Side:
    """An ambiguous step's side once no more processes are spent on it: its ratio against the cut."""
    side = side_of(comparison, cut)
    if side != "ambiguous":
        return side
    return "bad" if comparison.ratio > cut else "good"


@dataclass
class Search:
    """The search state over ``commits`` (oldest first, the bad end last), the good end below them.

    ``good`` is the index of the newest commit known good (-1: the good end), ``bad`` that of the
    oldest known bad (the bad end at first). ``skipped`` holds the indices of commits this harness
    cannot drive (a syntax error fixed a commit later, a room moved and back): as ``git bisect skip``
    does, the search goes on around them, and where the culprit sits next to them it names the short
    range that holds it (:attr:`suspects`).
    """

    commits: Sequence[Commit]
    good: int = -1
    bad: int = field(default=-1)
    skipped: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.commits:
            raise UserError("--bisect: the range holds no commit; give GOOD..BAD with BAD after GOOD")
        self.bad = len(self.commits) - 1

    @property
    def _candidates(self) -> list[int]:
        return [i for i in range(self.good + 1, self.bad) if i not in self.skipped]

    @property
    def done(self) -> bool:
        return not self._candidates

    def next(self) -> Commit:
        """The commit halfway between the newest good and the oldest bad; the nearest one not skipped."""
        middle = (self.good + self.bad) / 2
        return self.commits[min(self._candidates, key=lambda i: (abs(i - middle), i))]

    def record(self, commit: Commit, side: Side) -> None:
        """A decided step moves one end of the search to ``commit``."""
        index = list(self.commits).index(commit)
        if side == "bad":
            self.bad = index
        elif side == "good":
            self.good = index
        else:
            raise ValueError("an ambiguous step must be decided before it is recorded")

    def skip(self, commit: Commit) -> None:
        """``commit`` cannot be driven: the search decides around it."""
        self.skipped.add(list(self.commits).index(commit))

    @property
    def culprit(self) -> Commit:
        return self.commits[self.bad]

    @property
    def suspects(self) -> list[Commit]:
        """The commits that may hold the slowdown: the culprit, and the skipped ones just before it."""
        return list(self.commits[self.good + 1 : self.bad + 1])

    def parent_of_culprit(self, good_end: Commit) -> Commit:
        """The newest commit known good: the culprit's parent unless the commits between them were skipped."""
        return self.commits[self.good] if self.good >= 0 else good_end

    @property
    def steps_left(self) -> int:
        """Halvings still to go."""
        left = len(self._candidates)
        return math.ceil(math.log2(left + 1)) if left else 0


def run_seconds(steps: Sequence[Step]) -> float:
    """What an A/B run of the walk costs, for its budget: a round of the first step it measured itself (0 before
    one: ends it was given cost it nothing)."""
    measured = [s for s in steps if not s.measured_by]
    return measured[0].seconds / (1 + measured[0].extended) if measured else 0.0


def report(
    good: Commit,
    bad: Commit,
    combo: str,
    preset: str,
    cut: float | None,
    steps: Sequence[Step],
    skipped: Sequence[tuple[Commit, str]] = (),
    suspects: Sequence[Commit] = (),
    counted: Sequence[CountedStep] = (),
    run_s: float | None = None,
    by_counts: dict[str, object] | None = None,
) -> dict[str, object]:
    """The ``bisect`` section of the JSON: the range, the cut, every step, the commits placed by their counts, the
    commits skipped (with why), and where the search ended, the culprit (its own step last) and, beside skipped
    commits, every commit that may hold it. ``by_counts``: a culprit found by its counts alone (``commit``, ``subject``,
    ``parent``, ``counts``, ``moved``, and its own step's figures where it was timed against its parent).

    One shape whether the walk ended or was cut short: the ends are ``{sha, subject}`` objects either way.
    """
    section: dict[str, object] = {
        "good": asdict(good),
        "bad": asdict(bad),
        "combo": combo,
        "preset": preset,
        "cut_ratio": cut,
        "steps": [s.as_dict() for s in steps],
        "counted": [c.as_dict() for c in counted],
        "skipped": [{**asdict(commit), "reason": reason} for commit, reason in skipped],
        "seconds": sum(s.seconds for s in steps) + sum(c.seconds for c in counted),
        "run_seconds": run_seconds(steps) if run_s is None else run_s,
    }
    if suspects and by_counts:
        section["culprit"] = {**by_counts, "by": "counts"}
        section["suspects"] = [c.sha for c in suspects]
    elif suspects:
        culprit = steps[-1]
        section["culprit"] = {**culprit.as_dict(), "parent": culprit.against.sha}
        section["suspects"] = [c.sha for c in suspects]
    return section
