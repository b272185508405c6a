"""``meddpm-bench --bisect GOOD..BAD``: the commit that made a combo slower, found by halving the range.

Every step is an A/B run: the commit's workload and the good end's, each driven by this tree's
harness in alternating fresh processes (:class:`~meddpm.measure.processes.campaign.ProcessCampaign`),
judged with the suite's statistics; :mod:`meddpm.judge.bisection` decides. The ends are measured
first, and a range whose bad end is not slower is refused. Workers share Inductor's and Triton's
on-disk caches, so a commit whose compiled graphs match an earlier step's loads them instead of
compiling again.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from meddpm.atomic import write_json_atomic
from meddpm.errors import UserError
from meddpm.judge.ab import explanation
from meddpm.judge.baseline import Tolerances
from meddpm.judge.bisection import (
    Commit,
    MeasuredEnds,
    Search,
    Side,
    Step,
    decided_side,
    ends_undecided,
    report,
    run_seconds,
    side_of,
    significantly_slower,
    slowdown_between_ends,
)
from meddpm.measure.campaign import inputs
from meddpm.measure.campaign.protocol import Progress, Source
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.campaign.time_split import TimeSplit
from meddpm.measure.machine.environment import environment, git_output
from meddpm.measure.processes.campaign import ProcessCampaign
from meddpm.measure.processes.revision import Undrivable, resolve_revision, revision, revisions_root
from meddpm.measure.statistics.compare import Comparison, compare_processes
from meddpm.model.config import ModelConfig
from meddpm.report.explanation import explanation_lines

SCHEMA = "meddpm-bisect/1"
PROCESSES = 3  # a side per step unless --processes says otherwise
EXTENSIONS = 2  # an ambiguous step gets this many rounds of as many processes again, then decides on its ratio
BUDGET_SPENT = 3  # run_bisect's exit status when its budget stopped it before a culprit


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


def parse_range(text: str) -> tuple[str, str]:
    """``GOOD..BAD`` split into its ends, or a one-line UserError."""
    good, sep, bad = text.partition("..")
    if not sep or not good.strip() or not bad.strip() or bad.startswith(".") or ".." in bad:
        raise UserError(f"--bisect takes GOOD..BAD (two revisions, e.g. v1.2..HEAD), not {text!r}")
    return good.strip(), bad.strip()


def first_parent_line(good: str, bad: str, root: Path) -> tuple[Commit, list[Commit]]:
    """The good end and the first-parent commits after it up to the bad end (oldest first), or a UserError."""
    good_sha = resolve_revision(good, root, "--bisect")
    bad_sha = resolve_revision(bad, root, "--bisect")
    if good_sha == bad_sha:
        raise UserError(f"--bisect: {good} and {bad} are the same commit; give a GOOD older than BAD")
    line = (_git(["rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}"], root) or "").split()
    if not line or _git(["merge-base", "--is-ancestor", good_sha, bad_sha], root) is None:
        raise UserError(f"--bisect: {good} is not an ancestor of {bad}; give GOOD..BAD with GOOD older")
    if good_sha not in (_git(["rev-list", "--first-parent", bad_sha], root) or "").split():
        raise UserError(f"--bisect: {good} is not on {bad}'s first-parent line; give a commit of that line as GOOD")
    return _commit(good_sha, root), [_commit(sha, root) for sha in line]


def plan_line(good: Commit, bad: Commit, count: int, processes: int) -> str:
    """The plan, before any measuring: how many A/B runs at most, of how many processes."""
    halvings = _halvings(count)
    runs = 2 + halvings
    return (
        f"bisect {good.sha[:9]}..{bad.sha[:9]}: {count} commit(s); at most {runs} A/B runs of {processes}+{processes} "
        f"processes (the ends, {halvings} halving(s), the culprit against its parent), an ambiguous step up to "
        f"{EXTENSIONS} more rounds of {processes}+{processes}"
    )


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
        campaign = ProcessCampaign(
            job.config,
            [job.combo],
            job.device,
            batch_size=job.batch_size,
            settings=replace(job.settings, energy=False),  # a bisection judges time only
            processes=job.processes,
            sources=[self.source(commit, cut is None), self.source(against, True)],
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

    def given_ends(self, bad: Commit, good: Commit, ends: MeasuredEnds) -> Step | None:
        """The ends' step from their measurement ``ends``; None where it does not show ``bad`` significantly slower at
        this bisection's alpha (they are then measured anew)."""
        c = compare_processes(list(ends.candidate_ms), list(ends.reference_ms), alpha=self.job.alpha)
        if not significantly_slower(c, self.job.alpha):
            return None
        step = Step(bad, good, c, "bad", 0.0, explain=ends.explain, measured_by=ends.measured_by)
        self.steps.append(step)
        return step

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


def run_bisect(
    job: Bisection,
    range_text: str,
    json_path: Path,
    say: Callable[[str], None],
    budget: Budget | None = None,
    ends: MeasuredEnds | None = None,
) -> int:
    """Find the culprit commit of ``range_text`` for ``job.combo``; 0 with a culprit, 130 when interrupted,
    :data:`BUDGET_SPENT` when ``budget`` had no room for the next A/B run (the JSON then says what is left).
    ``ends``: the range's ends already measured against each other, the first A/B run then saved.

    A commit between the ends that this harness cannot drive is skipped, as ``git bisect skip`` does.
    """
    root = revisions_root("--bisect")
    good_name, bad_name = parse_range(range_text)
    good, commits = first_parent_line(good_name, bad_name, root)
    bad = commits[-1]
    say(plan_line(good, bad, len(commits), job.processes))
    env = environment(job.device)
    cut: float | None = None
    search = Search(commits)
    with Walk(job, root, json_path, say, budget) as walk:
        try:
            first = (walk.given_ends(bad, good, ends) if ends else None) or walk.measure(bad, good, None, "the ends")
            cut = slowdown_between_ends(first.comparison, job.alpha, job.combo, good, bad)
            runs = search.steps_left + 1
            left = _left(first.seconds, runs) if first.seconds else f"{runs} A/B runs at most"
            say(f"{_step_line(1, first, cut)}; {left}")
            known: dict[str, Step] = {bad.sha: first}
            while not search.done:
                _check_budget(budget, job, good, search, walk)
                commit = search.next()
                label = f"step {len(walk.steps) + len(walk.skipped) + 1}"
                try:
                    step = walk.measure(commit, good, cut, label)
                except Undrivable as exc:
                    search.skip(commit)
                    walk.skipped.append((commit, exc.reason))
                    say(f"{label}: {commit} skipped: it {exc.reason}; culprit in {_range(search)}")
                    continue
                search.record(commit, step.side)
                known[commit.sha] = step
                say(_step_line(len(walk.steps), step, cut) + f"; culprit in {_range(search)}")
            culprit, parent = search.culprit, search.parent_of_culprit(good)
            if parent != good:
                _check_budget(budget, job, good, search, walk)
            # Against its parent the question is only whether it is slower at all: an interval straddling 1
            # gets more processes, as a halving's straddling its cut does.
            own = known[culprit.sha] if parent == good else walk.measure(culprit, parent, 1.0, "the culprit")
            if own is not walk.steps[-1]:
                walk.steps.append(own)  # the culprit's own comparison is the report's last step
        except KeyboardInterrupt:
            _write(json_path, job, env, good, bad, cut, walk, None)
            say(f"interrupted after {len(walk.steps)} step(s); what was measured is in {json_path}")
            say(f"where the time went: {walk.time_split.line(walk.wall_s)}")
            return 130
        except _BudgetSpent as spent:
            _write(json_path, job, env, good, bad, cut, walk, None, spent.left)
            return BUDGET_SPENT
    c = own.comparison
    suspects = search.suspects
    base = "its parent" if len(suspects) == 1 else "the newest good commit"
    if own.side != "bad":
        say(f"note: {culprit} is not clearly slower than {base}; the slowdown may be spread over several commits")
    figures = f"ratio {c.ratio:.4f} [{c.ci_low:.4f}, {c.ci_high:.4f}] p {c.p_slower:.2g}"
    cost = f"{sum(s.seconds for s in walk.steps):.0f} s of measuring, {len(walk.steps)} A/B runs"
    if len(suspects) > 1:
        unknown = ", ".join(str(commit) for commit in suspects[:-1])
        say(
            f"culprit: one of {len(suspects)} commits, {suspects[0].sha[:9]}..{culprit.sha[:9]}: {unknown} could not "
            f"be driven (skipped), and {culprit} {figures} against {parent.sha[:9]}, {base}; {cost}"
        )
    else:
        say(f"culprit: {culprit} {figures} against its parent {parent.sha[:9]}; {cost}")
    if own.explain:
        say(f"what moved from {parent.sha[:9]} to {culprit.sha[:9]} in {job.combo} (A: the culprit, B: {base}):")
        for line in explanation_lines(own.explain, markdown=False):
            say(line)
    _write(json_path, job, env, good, bad, cut, walk, suspects)
    say(f"results written to {json_path}")
    say(f"where the time went: {walk.time_split.line(walk.wall_s)}")
    return 0


def from_options(
    args: argparse.Namespace,
    config: ModelConfig,
    combos: Sequence[str],
    device: torch.device,
    batch: int,
    settings: CampaignSettings,
    json_path: Path,
    say: Callable[[str], None],
) -> int:
    """``meddpm-bench --bisect``: one combo and no other extra, then :func:`run_bisect`."""
    given = {
        "--compare-to": args.compare_to is not None,
        "--compare-python": args.compare_python is not None,
        "--compare-env": bool(args.compare_env),
        "--until-detectable": args.until_detectable is not None,
        "--history": args.history is not None,
        "--sample": args.sample,
        "--kernel-mix": args.kernel_mix,
        "--gpus": bool(args.gpus),
    }
    others = [option for option, on in given.items() if on]
    if others:
        raise UserError(f"--bisect runs A/B steps of its own; drop {', '.join(others)}")
    if len(combos) != 1:
        raise UserError(f"--bisect follows one combo, not {len(combos)}; give --combos with one name")
    processes = inputs.process_count("--processes", args.processes or PROCESSES, "bisect")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    job = Bisection(config, combos[0], device, batch, settings, processes)
    return run_bisect(job, args.bisect, json_path, say)


class _BudgetSpent(Exception):
    """The budget has no room for the next A/B run; ``left`` says where the culprit lies and what finishing costs."""

    def __init__(self, left: dict[str, object]):
        super().__init__("budget spent")
        self.left = left


def _check_budget(budget: Budget | None, job: Bisection, good: Commit, search: Search, walk: Walk) -> None:
    """Raise :class:`_BudgetSpent`, after a line saying what is left, where the walk's next A/B run would overrun (a
    run costs what :func:`~meddpm.judge.bisection.run_seconds` says; 0 lets the first the walk measures run)."""
    run_s = run_seconds(walk.steps)
    if budget is None or budget.fits(run_s):
        return
    newest_good, oldest_bad = search.parent_of_culprit(good), search.culprit
    count = len(search.suspects)
    runs = 2 + _halvings(count)  # a bisection of what is left: its ends, its halvings, the culprit against its parent
    walk.say(
        f"budget: {budget.spent:.0f} s of {budget.seconds:.0f} s spent, and an A/B run takes about {run_s:.0f} s: "
        f"stopped with the culprit in {_range(search)} ({count} commit(s)); finish with meddpm-bench --bisect "
        f"{newest_good.sha[:12]}..{oldest_bad.sha[:12]} --combos {job.combo} --preset {job.config.name} --batch-size "
        f"{job.batch_size} (at most {runs} A/B runs, about {runs * run_s:.0f} s)"
    )
    raise _BudgetSpent(
        {
            "good": newest_good.sha,
            "bad": oldest_bad.sha,
            "commits": count,
            "runs": runs,
            "run_seconds": run_s,
            "budget_seconds": budget.seconds,
            "spent_seconds": budget.spent,
        }
    )


def _write(
    path: Path,
    job: Bisection,
    env: dict[str, object],
    good: Commit,
    bad: Commit,
    cut: float | None,
    walk: Walk,
    suspects: list[Commit] | None,
    left: dict[str, object] | None = None,
) -> None:
    """The JSON of the walk; ``suspects`` None: cut short, so marked partial and without a culprit; ``left``: the
    range a budget left unsearched."""
    section = report(good, bad, job.combo, job.config.name, cut, walk.steps, walk.skipped, suspects or ())
    document = {
        "schema": SCHEMA,
        "environment": env,
        "preset": job.config.name,
        "batch_size": job.batch_size,
        "processes": job.processes,
        "bisect": section,
        "time_split": {"wall_s": walk.wall_s, "seconds": walk.time_split.seconds},
        **({"partial": True} if suspects is None else {}),
        **({"left": left} if left else {}),
    }
    write_json_atomic(path, document)


def _halvings(count: int) -> int:
    return math.ceil(math.log2(count)) if count > 1 else 0


def _step_line(number: int, step: Step, cut: float) -> str:
    c = step.comparison
    n = f"{len(c.candidate_ms)}+{len(c.reference_ms)}"
    cost = f"measured by {step.measured_by}" if step.measured_by else f"{step.seconds:.0f} s"
    return (
        f"step {number}: {step.commit} vs {step.against.sha[:9]}: ratio {c.ratio:.4f} [{c.ci_low:.4f}, "
        f"{c.ci_high:.4f}] p {c.p_slower:.2g}, cut {cut:.4f}: {step.side} ({n} processes, {cost})"
    )


def _range(search: Search) -> str:
    first = search.commits[search.good + 1]
    return f"{first.sha[:9]}..{search.culprit.sha[:9]}" if first != search.culprit else search.culprit.sha[:9]


def _left(seconds_per_run: float, runs: int) -> str:
    return f"about {seconds_per_run * runs:.0f} s left ({runs} A/B runs at most)"


def _commit(sha: str, root: Path) -> Commit:
    # Subjects in UTF-8 whatever the repository's log encoding, and a byte that is not UTF-8 replaced, never fatal.
    return Commit(sha, _git(["-c", "i18n.logOutputEncoding=UTF-8", "log", "-1", "--format=%s", sha], root) or "")


def _git(args: list[str], cwd: Path) -> str | None:
    return git_output(args, cwd, timeout_s=60.0)
