"""``python -m meddpm.bench.alarm RESULTS_DIR``: a nightly that bisects its own alarm.

A nightly A/B against the last good run (``--compare-to=last-good``) that flags a case knows the range
holding the slowdown: the last good run's commit up to the one it measured. This bisects that range
for each flagged combo, in the same job (:func:`meddpm.bench.bisect.run_bisect`; the night's own A/B of the range's
ends is its first step, not measured again, where the results keep both sides' process medians), and writes
``culprit: <commit>`` with what moved into the run's ``summary.md`` and into ``alarm.json`` beside its
``results.json``. A nightly spans many commits, so two culprits in one range are common: where the
culprit's own slowdown (its ratio against its parent) leaves a significant part of the range's
(the bisection's ends) unexplained, the remainder is bisected too: the culprit up to the bad end
first, and where that is not slower, the good end up to the culprit's parent. A budget in seconds
bounds it all: an A/B run costs what a round of the walk's first measured run cost, and none is started that would
overrun; what is left is said, with the command that finishes it. Where the budget leaves one commit, its
parent measured good and it bad, that commit is named as the culprit by bisection, with its step's figures and
explanation against the range's good end: only its own ratio against its parent is left unmeasured.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch

from meddpm.atomic import write_json_atomic, write_text_atomic
from meddpm.bench import bisect
from meddpm.bench.cli import resolve_device
from meddpm.bench.walk import Bisection, Budget
from meddpm.errors import UserError, printable, run_command
from meddpm.judge.bisection import MeasuredEnds
from meddpm.measure.campaign import inputs
from meddpm.measure.campaign.settings import (
    BENCH,
    add_settings,
    campaign_settings,
    check_count,
    given_settings,
    namespace_reader,
)
from meddpm.measure.machine import compile_cache
from meddpm.model.config import ModelConfig
from meddpm.report.explanation import explanation_lines

PROG = "meddpm-alarm"
SCHEMA = "meddpm-alarm/1"
MAX_CULPRITS = 3  # per flagged case: a night's range rarely holds more, and each costs a whole bisection
_SHA = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Flagged:
    """A case the night's A/B flagged as slower, or as moving its counts: its combo, preset and batch size, and the
    range to bisect."""

    combo: str
    preset: str
    batch_size: int
    good: str  # the last good run's commit
    bad: str  # the commit the night measured
    ends: MeasuredEnds | None = None  # the night's own A/B of the two, where its results keep the processes
    by_counts: bool = False  # flagged for its counts, not its time: the bisection follows the counts


def flagged_cases(results: dict[str, Any]) -> list[Flagged]:
    """The cases whose time or counts the night's A/B against the last good run flagged; none without such an A/B.

    A case whose counts moved while its time did not (or not beyond its threshold) is red all the same, and its
    counts find their commit in a few profiled processes, so it is bisected by them."""
    last_good = results.get("last_good")
    if not last_good:
        return []
    bad = str((results.get("environment") or {}).get("commit") or "")
    # Each flagged case, and whether its counts alone flagged it.
    flagged = [
        (case, not _time_regressed(case))
        for case in results.get("cases", [])
        if _time_regressed(case) or _counts_regressed(case)
    ]
    if flagged and not _SHA.fullmatch(bad):
        raise UserError(
            f"the night measured {bad or 'no commit'}, not a plain commit, so there is no range to bisect; run the "
            "nightly on a clean checkout"
        )
    good = str(last_good["commit"])
    return [
        Flagged(c["combo"], c["preset"], int(c["batch_size"]), good, bad, _night_ends(c), by_counts=by_counts)
        for c, by_counts in flagged
    ]


def _time_regressed(case: dict[str, Any]) -> bool:
    return any(c.get("metric") == "time" and c.get("outcome") == "regression" for c in case.get("comparisons", []))


def _counts_regressed(case: dict[str, Any]) -> bool:
    return any(v.get("outcome") == "regression" for v in case.get("counts_verdicts") or [])


def _night_ends(case: dict[str, Any]) -> MeasuredEnds | None:
    """The night's A/B of ``case`` as the bisection's ends: its time comparison's process medians and what moved."""
    comparison = next((c for c in case.get("comparisons", []) if c.get("metric") == "time"), {})
    a, b = comparison.get("candidate_ms") or [], comparison.get("reference_ms") or []
    if min(len(a), len(b)) < 2:  # a results file from before they were kept: the ends are measured again
        return None
    counts = (case["counts"],) if case.get("counts") else ()  # side A's first process's, the night's commit's
    return MeasuredEnds(tuple(a), tuple(b), tuple(case.get("explain") or ()), candidate_counts=counts)


def unexplained(ends: dict[str, Any], culprit: dict[str, Any]) -> dict[str, Any]:
    """What of the range's slowdown (its ends' ratio) the culprit's own (its ratio against its parent) leaves.

    Slowdowns compose as products, so the rest is the quotient of the ratios; its interval divides the intervals'
    far ends by each other, a conservative bound. Significant where even that lower bound is above 1.
    """
    low, high = ends["ci_low"] / culprit["ci_high"], ends["ci_high"] / culprit["ci_low"]
    return {"ratio": ends["ratio"] / culprit["ratio"], "ci_low": low, "ci_high": high, "significant": low > 1}


@dataclass
class CaseAlarm:
    """One flagged case's bisections: the culprits found, the notes on the way, and what was left undone."""

    case: Flagged
    culprits: list[dict[str, Any]]
    notes: list[str]
    files: list[str]
    left: dict[str, Any] | None = None

    @property
    def culprit_by_bisection(self) -> dict[str, Any] | None:
        """The step of the one commit a spent budget left (its parent good, it bad), where it left one."""
        return (self.left or {}).get("culprit")

    def as_dict(self) -> dict[str, Any]:
        c = self.case
        return {
            "combo": c.combo,
            "preset": c.preset,
            "batch_size": c.batch_size,
            "range": {"good": c.good, "bad": c.bad},
            "culprits": self.culprits,
            "notes": self.notes,
            "bisections": self.files,
            "left": self.left,
        }


class Alarm:
    """The bisections of one night's flagged cases, under one budget."""

    def __init__(self, out: Path, settings: Any, processes: int, budget: Budget, max_culprits: int):
        self.out = out
        self.settings = settings
        self.processes = processes
        self.budget = budget
        self.max_culprits = max_culprits
        self.run_s: float | None = None  # an A/B run's cost, once a bisection measured one
        self.cases: list[CaseAlarm] = []  # as far as they went, an interrupted one too

    def bisect_case(self, case: Flagged, device: torch.device, say: Callable[[str], None]) -> CaseAlarm:
        """Bisect ``case``'s range, then each remainder the culprit leaves unexplained, within the budget."""
        job = Bisection(
            ModelConfig.preset(case.preset), case.combo, device, case.batch_size, self.settings, self.processes
        )
        found = CaseAlarm(case, [], [], [])
        self.cases.append(found)
        ranges = [(case.good, case.bad)]  # where the slowdown may lie, tried in turn until one is slower
        while ranges:
            good, bad = ranges.pop(0)
            if len(found.culprits) == self.max_culprits:
                limit = f"the culprits' limit (--max-culprits {self.max_culprits})"
                found.left = {"good": good, "bad": bad, "why": limit}
                break
            if self.run_s is not None and not self.budget.fits(self.run_s):
                found.left = {"good": good, "bad": bad, "why": "the budget", "run_seconds": self.run_s}
                break
            path = self.out / f"bisect-{case.combo}-{len(found.files) + 1}.json"
            say(f"{PROG}: bisecting {case.combo} over {good[:12]}..{bad[:12]}")
            try:
                given = case.ends if (good, bad) == (case.good, case.bad) else None
                status = bisect.run_bisect(job, f"{good}..{bad}", path, say, self.budget, given, case.by_counts)
            except UserError as exc:
                found.notes.append(f"{good[:12]}..{bad[:12]}: {exc}")
                say(f"{PROG}: {exc}")
                continue
            found.files.append(path.name)
            document = json.loads(path.read_text())
            section = document["bisect"]
            if status not in (0, bisect.BUDGET_SPENT):
                if "culprit" in section:  # found by its counts before its own timing was interrupted
                    found.culprits.append(_in_range(section["culprit"], section, good, bad))
                raise KeyboardInterrupt  # the walk wrote what it measured; the alarm writes what it found
            self.run_s = section["run_seconds"] or self.run_s
            if status == bisect.BUDGET_SPENT:
                found.left = {**document["left"], "why": "the budget"}
                found.left.update(_by_bisection(found.left, [*section["steps"], *section.get("counted", [])]))
                break
            culprit = _in_range(section["culprit"], section, good, bad)
            if case.by_counts:  # the commit where the counts moved: no share of a slowdown to account for
                found.culprits.append(culprit)
                break
            rest = unexplained(culprit["ends"], culprit)
            found.culprits.append({**culprit, "unexplained": rest})
            # A range found slower ends the search among the alternatives; only its own remainders follow.
            ranges = []
            if rest["significant"]:
                ranges += [(culprit["commit"], bad)] if culprit["commit"] != bad else []
                ranges += [(good, culprit["parent"])] if culprit["parent"] != good else []
        return found


def _in_range(culprit: dict[str, Any], section: dict[str, Any], good: str, bad: str) -> dict[str, Any]:
    """A bisection's culprit with the range it was found in and that range's ends' step, as alarm.json keeps it."""
    return {**culprit, "range": {"good": good, "bad": bad}, "ends": section["steps"][0]}


def summary_section(cases: Sequence[CaseAlarm], budget: Budget, interrupted: bool = False) -> str:
    """The summary's section: per case each culprit, what moved, what it leaves unexplained, and what is left."""
    lines = ["## The alarm, bisected in this job", ""]
    if interrupted:
        lines += ["Interrupted: what follows is what was found before.", ""]
    for found in cases:
        c = found.case
        lines += [f"**{c.combo}** ({c.preset} b{c.batch_size}), from the last good {c.good[:12]} to {c.bad[:12]}:", ""]
        for culprit in found.culprits:
            lines += _culprit_lines(culprit)
        lines += [f"- {printable(note)}" for note in found.notes]
        if found.culprit_by_bisection:
            lines += _bisected_lines(found)
        elif found.left:
            lines.append(f"- {_left_line(found)}")
        if not found.culprits and not found.left and not interrupted:
            lines.append("- no culprit: no range was slower when bisected (see the notes above)")
        lines.append("")
    lines.append(f"Budget: {budget.spent:.0f} s of {budget.seconds:.0f} s spent; every step is in alarm.json.")
    return "\n".join(lines) + "\n"


def _culprit_lines(culprit: dict[str, Any]) -> list[str]:
    if culprit.get("by") == "counts":
        return _counts_culprit_lines(culprit)
    ends, rest = culprit["ends"], culprit["unexplained"]
    lines = [
        f"- culprit: {culprit['commit'][:12]} ({printable(culprit['subject'])}), ratio {_figures(culprit)} against its "
        f"parent {culprit['parent'][:12]}"
    ]
    lines += _explained(culprit)
    range_text = f"{culprit['range']['good'][:12]}..{culprit['range']['bad'][:12]}"
    if rest["significant"]:
        lines.append(
            f"- its slowdown leaves part of the range's unexplained: the range {range_text} {_figures(ends)}, "
            f"unexplained {_figures(rest)}; the remainder is bisected next"
        )
    else:
        lines.append(f"- it explains the range {range_text} {_figures(ends)} (unexplained {_figures(rest)})")
    return lines


def _counts_culprit_lines(culprit: dict[str, Any]) -> list[str]:
    """A culprit found where the counts moved: what moved, and its own time against its parent where measured."""
    timed = f"ratio {_figures(culprit)} against it" if "ratio" in culprit else "its own time against it not measured"
    lines = [
        f"- culprit: {culprit['commit'][:12]} ({printable(culprit['subject'])}), where the counts moved against its "
        f"parent {culprit['parent'][:12]}: {', '.join(culprit['moved'])}; {timed}"
    ]
    range_text = f"{culprit['range']['good'][:12]}..{culprit['range']['bad'][:12]}"
    flagged = f"- the range {range_text}: ratio {_figures(culprit['ends'])}, flagged for its counts"
    return [*lines, *_explained(culprit), flagged]


def _explained(step: dict[str, Any]) -> list[str]:
    """What moved in ``step``'s A/B run, as the summary's indented lines (none where nothing was kept)."""
    if not step.get("explain"):
        return []
    return [f"  {line}" if line else "" for line in explanation_lines(step["explain"], markdown=True)]


def _by_bisection(left: dict[str, Any], steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Where one commit is left, its step and its parent's (each an A/B run against the range's good end, or a commit
    placed by its counts), as the culprit the bisection found: ``{"culprit": ..., "parent_step": ...}``; else
    nothing."""
    by_commit = {step["commit"]: step for step in steps}
    if left.get("commits") != 1 or left["bad"] not in by_commit:
        return {}
    return {"culprit": by_commit[left["bad"]], "parent_step": by_commit.get(left["good"])}


def _bisected_lines(found: CaseAlarm) -> list[str]:
    """The summary's lines on the culprit a spent budget left as the last commit: what its steps measured."""
    left, step = found.left or {}, found.culprit_by_bisection or {}
    parent = left.get("parent_step")
    parent_figures = f" ({_figures(parent) if 'ratio' in parent else _placed(parent)})" if parent else ""
    lines = [
        f"- culprit by bisection: {step['commit'][:12]} ({printable(step['subject'])}), {_placed(step)}, its parent "
        f"{left['good'][:12]} good{parent_figures}; "
        f"its own ratio against its parent not measured for want of budget (1 A/B run of about "
        f"{left['run_seconds']:.0f} s): {_finish_command(found)}"
    ]
    return [*lines, *_explained(step)]


def _finish_command(found: CaseAlarm) -> str:
    """The bench command that bisects what ``found``'s budget or limit left."""
    left, c = found.left or {}, found.case
    follow = " --follow-counts" if c.by_counts else ""
    return (
        f"meddpm-bench --bisect {left['good'][:12]}..{left['bad'][:12]} --combos {c.combo} --preset {c.preset} "
        f"--batch-size {c.batch_size}{follow}"
    )


def _left_line(found: CaseAlarm) -> str:
    left, command = found.left or {}, _finish_command(found)
    if "commits" in left and left.get("by_counts"):
        processes, runs, run_s = left["counts_processes"], left["runs"], left["run_seconds"]
        cost = f"{left['commits']} commit(s); {processes} counts processes and {runs} A/B runs of about {run_s:.0f} s"
    elif "commits" in left:
        cost = f"{left['commits']} commit(s); at most {left['runs']} A/B runs of about {left['run_seconds']:.0f} s"
    if "commits" in left:
        return f"stopped by the budget with the culprit in {left['good'][:12]}..{left['bad'][:12]} ({cost}): {command}"
    return f"not bisected for want of {left['why']}: {left['good'][:12]}..{left['bad'][:12]}, with {command}"


def _placed(step: dict[str, Any]) -> str:
    """How a bisection step decided its commit: its ratio against the range's good end, or its counts."""
    if "ratio" in step:
        return f"ratio {_figures(step)} against the range's good end {step['against'][:12]}"
    return f"placed by its counts, as the range's {step['side']} end's"


def _figures(d: dict[str, Any]) -> str:
    return f"{d['ratio']:.4f} [{d['ci_low']:.4f}, {d['ci_high']:.4f}]"


def _parser() -> argparse.ArgumentParser:
    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            self.exit(2, f"{PROG}: error: {message} (see python -m meddpm.bench.alarm --help)\n")

    p = Parser(
        prog="python -m meddpm.bench.alarm", description="Bisect what a nightly A/B against the last good run flagged."
    )
    p.add_argument("results_dir", type=Path, help="the nightly's --perf-results-dir (its results.json and summary.md)")
    p.add_argument("--bisect-budget", type=float, required=True, help="seconds the bisections may take in all")
    p.add_argument("--max-culprits", type=int, default=MAX_CULPRITS, help=f"per case (default {MAX_CULPRITS})")
    p.add_argument("--processes", type=int, default=bisect.PROCESSES, help="a side per A/B run")
    add_settings(p.add_argument, BENCH)
    compile_cache.add_option(p.add_argument, "--compile-cache")
    return p


def run(argv: Sequence[str] | None = None, say: Callable[[str], None] = print) -> int:
    """Bisect the flagged cases of ``results_dir``'s results.json; 0 once done (culprits or not), 130 interrupted."""
    args = _parser().parse_args(argv)
    budget = Budget(args.bisect_budget)
    if not args.bisect_budget > 0:
        raise UserError(f"--bisect-budget must be a number of seconds above 0, not {args.bisect_budget}")
    check_count("--max-culprits", args.max_culprits, 1)
    processes = inputs.process_count("--processes", args.processes, "bisect")
    results_path = args.results_dir / "results.json"
    try:
        results = json.loads(results_path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {results_path} ({exc}); give the nightly's --perf-results-dir") from None
    cases = flagged_cases(results)
    if not cases:
        say(f"{PROG}: no case's time or counts flagged against the last good run in {results_path}; nothing to bisect")
        return 0
    compile_cache.use_root(args.compile_cache)
    on_gpu = results.get("arch") != "cpu"
    device = resolve_device("cuda" if on_gpu else "cpu")  # with its index: the walk's workers need one
    settings = campaign_settings(given_settings(namespace_reader(args), BENCH), BENCH, on_gpu)
    alarm = Alarm(args.results_dir, settings, processes, budget, args.max_culprits)
    status = 0
    try:
        for case in cases:
            alarm.bisect_case(case, device, say)
    except KeyboardInterrupt:
        status = 130
    done = alarm.cases
    document = {
        "schema": SCHEMA,
        "budget_seconds": budget.seconds,
        "spent_seconds": budget.spent,
        "cases": [found.as_dict() for found in done],
        **({"partial": True} if status else {}),
    }
    write_json_atomic(args.results_dir / "alarm.json", document)
    summary = args.results_dir / "summary.md"
    before = summary.read_text() if summary.exists() else ""
    write_text_atomic(summary, before + ("\n" if before else "") + summary_section(done, budget, status != 0))
    for found in done:
        for culprit in found.culprits:
            how = ", where its counts moved" if culprit.get("by") == "counts" else ""
            say(f"culprit: {culprit['commit'][:12]} ({printable(culprit['subject'])}) in {found.case.combo}{how}")
        step = found.culprit_by_bisection
        if step:
            say(
                f"culprit: {step['commit'][:12]} ({printable(step['subject'])}) in {found.case.combo}, by bisection "
                "(its own ratio against its parent not measured: the budget)"
            )
    failed = [found for found in done if found.notes and not found.culprits and found.left is None]
    if failed and not status:
        say(f"{PROG}: {len(failed)} flagged case(s) could not be bisected (their notes are in alarm.json)")
        return 1
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: a user error is one line and exit status 2."""
    return run_command(PROG, lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())
