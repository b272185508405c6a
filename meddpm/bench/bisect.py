"""``meddpm-bench --bisect GOOD..BAD``: the commit that made a combo slower, found by halving the range.

The ends are measured against each other first (or taken from the night's A/B), and a range whose bad end is not
slower is refused, unless the walk follows the counts (``--follow-counts``, or a night red for its counts alone).
Each halving is then an A/B run of the commit against the good end, judged with the suite's statistics, or, where
the ends' counts differ, one profiled process of the commit whose counts place it; the culprit is timed against its
parent in the end. :mod:`meddpm.judge.bisection` decides; :mod:`meddpm.bench.walk` measures.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from meddpm.atomic import write_json_atomic
from meddpm.bench.walk import EXTENSIONS, Bisection, Budget, BudgetSpent, Walk, culprit_range, halvings
from meddpm.errors import UserError
from meddpm.judge.bisection import (
    Commit,
    MeasuredEnds,
    Search,
    Step,
    counts_change,
    report,
    side_by_counts_alone,
    side_of,
    significantly_slower,
    slowdown_between_ends,
)
from meddpm.measure.campaign import inputs
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.machine.environment import environment, git_output
from meddpm.measure.processes.revision import Undrivable, resolve_revision, revisions_root
from meddpm.model.config import ModelConfig
from meddpm.report.explanation import explanation_lines

SCHEMA = "meddpm-bisect/1"
PROCESSES = 3  # a side per step unless --processes says otherwise
BUDGET_SPENT = 3  # run_bisect's exit status when its budget stopped it before a culprit


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
    halved = halvings(count)
    runs = 2 + halved
    return (
        f"bisect {good.sha[:9]}..{bad.sha[:9]}: {count} commit(s); at most {runs} A/B runs of {processes}+{processes} "
        f"processes (the ends, {halved} halving(s), the culprit against its parent), an ambiguous step up to "
        f"{EXTENSIONS} more rounds of {processes}+{processes}"
    )


def run_bisect(
    job: Bisection,
    range_text: str,
    json_path: Path,
    say: Callable[[str], None],
    budget: Budget | None = None,
    ends: MeasuredEnds | None = None,
    counts_flagged: bool = False,
) -> int:
    """Find the culprit commit of ``range_text`` for ``job.combo``; 0 with a culprit, 130 when interrupted,
    :data:`BUDGET_SPENT` when ``budget`` had no room for the next A/B run (the JSON then says what is left).
    ``ends``: the range's ends already measured against each other, the first A/B run then saved.
    ``counts_flagged``: what the ends moved is the counts, not (or not significantly) the time: the culprit is the
    commit where the counts first rose beyond the good end's (:func:`_follow_counts`), whether or not the range is
    slower.

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
            given = walk.given_ends(bad, good, ends, slower_only=not counts_flagged) if ends else None
            first = given or walk.measure(bad, good, None, "the ends")
            if counts_flagged:
                return _follow_counts(walk, search, first, good, bad, env)
            cut = slowdown_between_ends(first.comparison, job.alpha, job.combo, good, bad)
            runs = search.steps_left + 1
            left = _left(first.seconds, runs) if first.seconds else f"{runs} A/B runs at most"
            say(f"{_step_line('step 1', first, cut)}; {left}")
            known: dict[str, Step] = {bad.sha: first}
            guide = walk.ends_counts(first, good, bad, before_each=walk.counts_budget(good, search))
            _halve(walk, search, good, cut, known, guide)
            own = _own_step(walk, search, good, known)
            if guide and not _carries_slowdown(own, cut, job.alpha):
                c = own.comparison
                say(
                    f"the counts moved at {search.culprit}, whose own ratio {c.ratio:.4f} p {c.p_slower:.2g} against "
                    f"its parent does not carry half the range's slowdown (cut {cut:.4f}): the range is bisected again "
                    "by time"
                )
                search = Search(commits, skipped=set(search.skipped))
                _halve(walk, search, good, cut, known, None)
                own = _own_step(walk, search, good, known)
            culprit, parent = search.culprit, search.parent_of_culprit(good)
            if own is not walk.steps[-1]:
                walk.steps.append(own)  # the culprit's own comparison is the report's last step
        except KeyboardInterrupt:
            _write(json_path, job, env, good, bad, cut, walk, None)
            say(f"interrupted after {len(walk.steps) + len(walk.counted)} step(s); what was measured is in {json_path}")
            say(f"where the time went: {walk.time_split.line(walk.wall_s)}")
            return 130
        except BudgetSpent as spent:
            _write(json_path, job, env, good, bad, cut, walk, None, spent.left)
            return BUDGET_SPENT
    c = own.comparison
    suspects = search.suspects
    base = _base(suspects)
    if own.side != "bad":
        say(f"note: {culprit} is not clearly slower than {base}; the slowdown may be spread over several commits")
    figures = f"ratio {c.ratio:.4f} [{c.ci_low:.4f}, {c.ci_high:.4f}] p {c.p_slower:.2g}"
    counted = f", {len(walk.counted)} counts processes" if walk.counted else ""
    cost = f"{_measured(walk)}, {len(walk.steps)} A/B runs{counted}"
    if len(suspects) > 1:
        unknown = ", ".join(str(commit) for commit in suspects[:-1])
        say(
            f"culprit: one of {len(suspects)} commits, {suspects[0].sha[:9]}..{culprit.sha[:9]}: {unknown} could not "
            f"be driven (skipped), and {culprit} {figures} against {parent.sha[:9]}, {base}; {cost}"
        )
    else:
        say(f"culprit: {culprit} {figures} against its parent {parent.sha[:9]}; {cost}")
    _say_moved(walk, own, parent, base)
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
    return run_bisect(job, args.bisect, json_path, say, counts_flagged=args.follow_counts)


def _halve(
    walk: Walk,
    search: Search,
    good: Commit,
    cut: float | None,
    known: dict[str, Step],
    guide: tuple[list, list] | None,
) -> None:
    """Halve the range until one commit is left: each commit placed by its counts where ``guide`` holds the ends'
    and they place it, else by an A/B run against the good end (kept in ``known``, and not run twice). No ``cut``:
    the walk follows the counts alone, and a commit is bad once a count rose beyond the good end's."""
    while not search.done:
        commit = search.next()
        label = f"step {walk.next_number()}"
        if commit.sha in known:  # timed before the walk went back to timing
            search.record(commit, known[commit.sha].side)
            side = known[commit.sha].side
            walk.say(f"{label}: {commit}: {side}, as its A/B run above; culprit in {culprit_range(search)}")
            continue
        try:
            placed = None
            if guide:
                walk.counts_budget(good, search, by_counts=cut is None)()
                placed = walk.place(commit, *guide, label, alone=cut is None)
            if placed is not None and placed.side is None and cut is None:
                raise UserError(f"--bisect: {commit}'s profiled iteration counted nothing; its counts cannot place it")
            if placed is not None and placed.side is not None:
                search.record(commit, placed.side)
                walk.say(
                    f"{label}: {commit}: counts like the {placed.side} end's ({placed.seconds:.0f} s, one process); "
                    f"culprit in {culprit_range(search)}"
                )
                continue
            if placed is not None:
                walk.say(f"{label}: {commit}: counts like neither end's alone; timed against the good end")
            walk.check_budget(good, search)
            step = walk.measure(commit, good, cut, label)
        except Undrivable as exc:
            search.skip(commit)
            walk.skipped.append((commit, exc.reason))
            walk.say(f"{label}: {commit} skipped: it {exc.reason}; culprit in {culprit_range(search)}")
            continue
        search.record(commit, step.side)
        known[commit.sha] = step
        walk.say(_step_line(label, step, cut) + f"; culprit in {culprit_range(search)}")


def _follow_counts(walk: Walk, search: Search, first: Step, good: Commit, bad: Commit, env: dict[str, object]) -> int:
    """The commit where the counts first rose beyond the good end's, each halving placed by one counts process; then
    that commit timed against its parent, where the budget has room for an A/B run, to say what its counts cost. 0
    once found, 130 when interrupted while timing it (the culprit is written all the same)."""
    job, say = walk.job, walk.say
    c = first.comparison
    measured = f"measured by {first.measured_by}" if first.measured_by else f"{first.seconds:.0f} s"
    say(
        f"step 1: {bad} vs {good.sha[:9]}: ratio {c.ratio:.4f} [{c.ci_low:.4f}, {c.ci_high:.4f}] p {c.p_slower:.2g} "
        f"({measured}); the counts moved, so the walk follows them"
    )
    guide = walk.ends_counts(first, good, bad, always=True, before_each=walk.counts_budget(good, search, True))
    if guide is None or side_by_counts_alone(guide[1], guide[0]) != "bad":
        raise UserError(
            f"--bisect: {bad}'s counts for {job.combo} did not rise beyond {good}'s when profiled (the same, fewer, or "
            "one end's profile counted nothing); nothing for the counts to find: bisect by time, without "
            "--follow-counts"
        )
    _halve(walk, search, good, None, {}, guide)
    culprit, parent = search.culprit, search.parent_of_culprit(good)
    counted = {step.commit.sha: step.counts for step in walk.counted}
    counts, against = counted.get(culprit.sha, guide[1]), counted.get(parent.sha, guide[0])
    entry = {"commit": culprit.sha, "subject": culprit.subject, "parent": parent.sha}
    entry.update(counts={"commit": counts, "against": against}, moved=counts_change(counts, against))
    suspects = search.suspects
    base = _base(suspects)
    who = str(culprit) if len(suspects) == 1 else f"one of {len(suspects)} commits up to {culprit} (the rest skipped)"
    found = f"found in {_measured(walk)}, {len(walk.counted)} counts processes"
    say(f"culprit: {who}, by its counts against {base} {parent.sha[:9]}: {', '.join(entry['moved'])}; {found}")
    run_s = walk.run_cost()
    if walk.budget is not None and not walk.budget.fits(run_s):
        say(f"its own time against {base} not measured: no budget left for an A/B run of about {run_s:.0f} s")
    else:
        try:  # without a cut, as the ends: more processes only where its interval is too wide to tell a slowdown
            own = walk.measure(culprit, parent, None, "the culprit")
        except KeyboardInterrupt:
            _write(walk.json_path, job, env, good, bad, None, walk, suspects, by_counts=entry, partial=True)
            say(f"interrupted while timing the culprit; it is in {walk.json_path}, without its own time")
            say(f"where the time went: {walk.time_split.line(walk.wall_s)}")
            return 130
        own = walk.steps[-1] = replace(own, side=side_of(own.comparison, 1.0))  # slower, faster, or cannot tell
        o = own.comparison
        say(f"its own ratio {o.ratio:.4f} [{o.ci_low:.4f}, {o.ci_high:.4f}] p {o.p_slower:.2g} against {base}")
        _say_moved(walk, own, parent, base)
        entry = {**own.as_dict(), **entry}
    _write(walk.json_path, job, env, good, bad, None, walk, suspects, by_counts=entry)
    say(f"results written to {walk.json_path}")
    say(f"where the time went: {walk.time_split.line(walk.wall_s)}")
    return 0


def _own_step(walk: Walk, search: Search, good: Commit, known: dict[str, Step]) -> Step:
    """The culprit against its parent: the question is only whether it is slower at all, so an interval straddling 1
    gets more processes, as a halving's straddling its cut does. Where the parent is the good end and the culprit's
    halving was an A/B run, that run is its own comparison."""
    culprit, parent = search.culprit, search.parent_of_culprit(good)
    if parent == good and culprit.sha in known:
        return known[culprit.sha]
    walk.check_budget(good, search)
    return walk.measure(culprit, parent, 1.0, "the culprit")


def _carries_slowdown(own: Step, cut: float, alpha: float) -> bool:
    """Whether a culprit the counts found is the slowdown a time bisection would have found: significantly slower than
    its parent, by at least half the range's slowdown (its ratio above the cut)."""
    return significantly_slower(own.comparison, alpha) and own.comparison.ratio > cut


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
    by_counts: dict[str, object] | None = None,
    partial: bool = False,
) -> None:
    """The JSON of the walk; ``suspects`` None: cut short, so marked partial and without a culprit; ``left``: the
    range a budget left unsearched; ``by_counts``: a culprit found by its counts alone; ``partial``: cut short after
    its culprit was found (its own time unmeasured)."""
    section = report(
        good,
        bad,
        job.combo,
        job.config.name,
        cut,
        walk.steps,
        walk.skipped,
        suspects or (),
        walk.counted,
        walk.run_cost(),
        by_counts,
    )
    document = {
        "schema": SCHEMA,
        "environment": env,
        "preset": job.config.name,
        "batch_size": job.batch_size,
        "processes": job.processes,
        "bisect": section,
        "time_split": {"wall_s": walk.wall_s, "seconds": walk.time_split.seconds},
        **({"partial": True} if suspects is None or partial else {}),
        **({"left": left} if left else {}),
    }
    write_json_atomic(path, document)


def _base(suspects: Sequence[Commit]) -> str:
    """What the culprit is measured against: its parent, or past commits skipped, the newest good one."""
    return "its parent" if len(suspects) == 1 else "the newest good commit"


def _say_moved(walk: Walk, own: Step, parent: Commit, base: str) -> None:
    """What moved between the culprit and ``parent`` in its own A/B run, where it kept any."""
    if own.explain:
        moved = f"what moved from {parent.sha[:9]} to {own.commit.sha[:9]} in {walk.job.combo}"
        walk.say(f"{moved} (A: the culprit, B: {base}):")
        for line in explanation_lines(own.explain, markdown=False):
            walk.say(line)


def _measured(walk: Walk) -> str:
    return f"{sum(step.seconds for step in [*walk.steps, *walk.counted]):.0f} s of measuring"


def _step_line(label: str, step: Step, cut: float) -> str:
    c = step.comparison
    n = f"{len(c.candidate_ms)}+{len(c.reference_ms)}"
    cost = f"measured by {step.measured_by}" if step.measured_by else f"{step.seconds:.0f} s"
    return (
        f"{label}: {step.commit} vs {step.against.sha[:9]}: ratio {c.ratio:.4f} [{c.ci_low:.4f}, "
        f"{c.ci_high:.4f}] p {c.p_slower:.2g}, cut {cut:.4f}: {step.side} ({n} processes, {cost})"
    )


def _left(seconds_per_run: float, runs: int) -> str:
    return f"about {seconds_per_run * runs:.0f} s left ({runs} A/B runs at most)"


def _commit(sha: str, root: Path) -> Commit:
    # Subjects in UTF-8 whatever the repository's log encoding, and a byte that is not UTF-8 replaced, never fatal.
    return Commit(sha, _git(["-c", "i18n.logOutputEncoding=UTF-8", "log", "-1", "--format=%s", sha], root) or "")


def _git(args: list[str], cwd: Path) -> str | None:
    return git_output(args, cwd, timeout_s=60.0)
