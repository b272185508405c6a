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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from meddpm.errors import UserError
from meddpm.measure.statistics.compare import Comparison

Side = Literal["bad", "good", "ambiguous"]


@dataclass(frozen=True)
class Commit:
    """A commit of the walked line: its full hash and subject."""

    sha: str
    subject: str

    def __str__(self) -> str:
        return f"{self.sha[:9]} ({self.subject})"


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
        }


def slowdown_between_ends(comparison: Comparison, alpha: float, combo: str, good: Commit, bad: Commit) -> float:
    """The cut between good and bad commits; a UserError when ``bad`` is not significantly slower than ``good``."""
    if not comparison.testable or not comparison.p_slower < alpha or comparison.ratio <= 1:
        interval = f"[{comparison.ci_low:.4f}, {comparison.ci_high:.4f}]" if comparison.testable else "untestable"
        raise UserError(
            f"--bisect: {bad} is not slower than {good} for {combo} (ratio {comparison.ratio:.4f} {interval}, "
            f"p {comparison.p_slower:.2g}); nothing to bisect: check the range and the combo"
        )
    return 1 + (comparison.ratio - 1) / 2


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
    oldest known bad (the bad end at first).
    """

    commits: Sequence[Commit]
    good: int = -1
    bad: int = field(default=-1)

    def __post_init__(self) -> None:
        if not self.commits:
            raise UserError("--bisect: the range holds no commit; give GOOD..BAD with BAD after GOOD")
        self.bad = len(self.commits) - 1

    @property
    def done(self) -> bool:
        return self.bad - self.good <= 1

    def next(self) -> Commit:
        """The commit halfway between the newest good and the oldest bad."""
        return self.commits[(self.good + self.bad) // 2]

    def record(self, commit: Commit, side: Side) -> None:
        """A decided step moves one end of the search to ``commit``."""
        index = list(self.commits).index(commit)
        if side == "bad":
            self.bad = index
        elif side == "good":
            self.good = index
        else:
            raise ValueError("an ambiguous step must be decided before it is recorded")

    @property
    def culprit(self) -> Commit:
        return self.commits[self.bad]

    def parent_of_culprit(self, good_end: Commit) -> Commit:
        return self.commits[self.bad - 1] if self.bad > 0 else good_end

    @property
    def steps_left(self) -> int:
        """Halvings still to go."""
        return math.ceil(math.log2(self.bad - self.good)) if self.bad - self.good > 1 else 0


def report(good: Commit, bad: Commit, combo: str, preset: str, cut: float, steps: Sequence[Step]) -> dict[str, object]:
    """The ``bisect`` section of the JSON: the range, the cut, every step and the culprit (its own step last)."""
    culprit = steps[-1]
    return {
        "good": asdict(good),
        "bad": asdict(bad),
        "combo": combo,
        "preset": preset,
        "cut_ratio": cut,
        "steps": [s.as_dict() for s in steps],
        "culprit": {**culprit.as_dict(), "parent": culprit.against.sha},
        "seconds": sum(s.seconds for s in steps),
    }
