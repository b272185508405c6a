"""``meddpm-history``: import results into the history database, check it for step changes, draw the dashboard."""

from __future__ import annotations

import argparse
import html
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import pandas as pd

from meddpm.atomic import write_text_atomic
from meddpm.errors import UserError, run_command
from meddpm.history.acks import acknowledge, covered
from meddpm.history.changepoints import RULES, Step, detect
from meddpm.history.compare import compare_body, compare_runs, text_table
from meddpm.history.dashboard import write_site
from meddpm.history.html_parts import CommitLinks, page
from meddpm.history.importer import expand, read_files, store_found
from meddpm.history.models import Run
from meddpm.history.series import case_frame, environment_changes
from meddpm.history.store import HistoryStore, database_url
from meddpm.history.target import DEFAULT_DB, ENV_VAR, resolve_target
from meddpm.measure.campaign.inputs import writable_file

PROG = "meddpm-history"


class _Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line like every other user error here."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    db_help = f"the history database: an SQLite file or an SQLAlchemy URL (default: ${ENV_VAR}, else ./{DEFAULT_DB})"
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's --db, when not given, leaves the one given before the subcommand alone.
    common.add_argument("--db", metavar="PATH_OR_URL", default=argparse.SUPPRESS, help=db_help)
    p = _Parser(prog=PROG, description="The performance history: import runs, find step changes, draw the dashboard.")
    p.add_argument("--db", metavar="PATH_OR_URL", help=db_help)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    imp = sub.add_parser(
        "import",
        parents=[common],
        help="load results.json files (or folders of them, or other history databases) into the database",
    )
    imp.add_argument("files", nargs="+", type=Path, metavar="FILES")
    imp.add_argument(
        "--verbose", action="store_true", help="list each file left out of the folders (else one line counts them)"
    )
    sub.add_parser(
        "check",
        parents=[common],
        help="find step changes in every (architecture, case, metric) series; exit 1 while a regression is open "
        "and not acknowledged",
    )
    ack = sub.add_parser(
        "ack",
        parents=[common],
        help="mark an open regression as known and expected: check stops failing on it and prints it as acknowledged",
    )
    ack.add_argument("arch", metavar="ARCH", help="the architecture, as check prints it (h200)")
    ack.add_argument("case", metavar="CASE", help="the case, as check prints it (paper/fast/b1/p3, or 'all cases')")
    ack.add_argument("metric", metavar="METRIC", choices=sorted(RULES), help="time, memory or energy")
    ack.add_argument(
        "--note", required=True, help="why the step is known and expected (check and the dashboard show it)"
    )
    compare = sub.add_parser(
        "compare", parents=[common], help="two runs side by side: every case's time, memory and energy, and the ratio"
    )
    compare.add_argument("run_a", metavar="RUN_A", type=int, help="a run's number (as its dashboard page names it)")
    compare.add_argument("run_b", metavar="RUN_B", type=int, help="the run to set beside it (the ratio is B/A)")
    compare.add_argument("--out", type=Path, help="also write the comparison as an HTML page to this file")
    report = sub.add_parser("report", parents=[common], help="write the dashboard: a static site")
    report.add_argument("--out", type=Path, required=True, help="the folder to write the site into")
    report.add_argument(
        "--baselines",
        type=Path,
        metavar="DIR",
        help="the folder of baseline files (<arch>.json) the index sets the latest values against "
        "(default: ./baselines where there is one)",
    )
    report.add_argument(
        "--repo-url",
        metavar="URL",
        help="the repository's web address (https://github.com/OWNER/REPO): commits and step ranges become links",
    )
    return p


def run(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the subcommand; returns the exit code."""
    args = _parser().parse_args(argv)
    target = resolve_target(args.db)
    if args.command == "import":
        return _import(target, args.files, args.verbose)
    links = CommitLinks.of(getattr(args, "repo_url", None))
    with HistoryStore.open(target, create=False) as store:
        runs = store.runs()
        acks = store.acknowledgements()
        label = store.label
    for line in store.skipped:
        print(f"{PROG}: {label}: {line}", file=sys.stderr)
    frame = case_frame(runs)
    steps = covered(detect(frame), acks)
    if args.command == "check":
        return _check(label, frame, steps)
    if args.command == "ack":
        return _ack(target, steps, frame, args)
    if args.command == "compare":
        return _compare(runs, args.run_a, args.run_b, args.out, label)
    if args.out.exists() and not args.out.is_dir():
        raise UserError(f"--out {args.out} is a file; give a folder for the site")
    try:
        baselines = args.baselines or (Path("baselines") if Path("baselines").is_dir() else None)
        pages = write_site(args.out, frame, steps, environment_changes(frame), label, runs, links, baselines)
    except OSError as exc:
        raise UserError(f"cannot write the dashboard to {args.out}: {exc.strerror}") from None
    archs = frame["arch"].nunique()
    print(f"dashboard: {pages[0]} and {archs} architecture page(s), {len(pages) - 1 - archs} run page(s)")
    return 0


def _import(target: str, files: Sequence[Path], verbose: bool) -> int:
    if not expand(files):
        named = ", ".join(str(f) for f in files)
        raise UserError(f"nothing to import: {named} holds no .json file; give results files or folders of them")
    database_url(target)  # a mistyped URL is refused before any file is read
    report, found = read_files(files)
    label = target
    if found.runs or found.acks:  # else nothing is stored, and no database is created for it
        with HistoryStore.open(target) as store:
            store_found(store, report, found)
            label = store.label
    # Other JSON in the folders (worker outputs, calibrations) is expected: one line counts it, unless asked.
    notes = report.notes if verbose or len(report.notes) < 2 else [_left_out(report.notes)]
    for line in [*notes, *report.problems]:
        print(f"{PROG}: {line}", file=sys.stderr)
    skipped = f", {len(report.problems)} skipped" if report.problems else ""
    acks = f"; {report.acks} acknowledgement(s) read" if report.acks else ""
    print(
        f"{PROG}: {report.files} file(s) read{skipped}: {report.added} run(s) added, "
        f"{report.present} already in {label}{acks}"
    )
    return 1 if report.problems else 0


def _left_out(notes: Sequence[str]) -> str:
    """One line for the files a folder held that are no results file: how many, and the first of them."""
    first = notes[0].split(": ", 1)[0]
    return (
        f"{len(notes)} file(s) in the folders left out, none a results file: {first} and {len(notes) - 1} more "
        "(--verbose lists each with its reason)"
    )


def _check(label: str, frame: pd.DataFrame, steps: Sequence[Step]) -> int:
    archs = frame["arch"].nunique()
    print(f"{PROG}: {frame['run_id'].nunique()} run(s) of {archs} architecture(s) in {label}")
    for step in steps:
        print(f"step: {step.describe()}")
    regressions = [s for s in steps if s.failing]
    for step in regressions:
        print(f"OPEN REGRESSION: {step.describe()}")
        print(f"  {step.triage()}")
    acknowledged = [s for s in steps if s.open and not s.failing]
    for step in acknowledged:
        print(f"ACKNOWLEDGED: {step.describe()}")
        print(f"  {step.note} (acknowledged {step.noted_at:%Y-%m-%d})")
    if not steps:
        print("no step changes")
    elif not regressions:
        print(f"no open regressions{f' ({len(acknowledged)} acknowledged)' if acknowledged else ''}")
    return 1 if regressions else 0


def _ack(target: str, steps: Sequence[Step], frame: pd.DataFrame, args: argparse.Namespace) -> int:
    ack = acknowledge(steps, frame, args.arch, args.case, args.metric, args.note)
    earlier = [s for s in steps if s.open and s.note and (s.arch, s.case, s.metric) == (ack.arch, ack.case, ack.metric)]
    with HistoryStore.open(target) as store:
        store.add([], [ack])
        label = store.label
    replaces = f"; this note replaces that of {earlier[-1].noted_at:%Y-%m-%d %H:%M}" if earlier else ""
    print(
        f"{PROG}: acknowledged {ack.arch} {ack.case} {ack.metric} (the step from commit {ack.step_commit[:12]}, "
        f"{ack.step_started_at:%Y-%m-%d %H:%M}) in {label}: check no longer fails on it{replaces}"
    )
    return 0


def _compare(runs: Sequence[Run], run_a: int, run_b: int, out: Path | None, label: str) -> int:
    by_id = {run.id: run for run in runs}
    missing = [str(n) for n in (run_a, run_b) if n not in by_id]
    if missing:
        raise UserError(
            f"no run {' or '.join(missing)} in {label}; the dashboard's index and run pages give each run's number"
        )
    if run_a == run_b:
        raise UserError(f"RUN_A and RUN_B are both run {run_a}; give two different runs to set side by side")
    if out is not None:
        writable_file("--out", out, "the comparison page")  # before the table, so a refusal is the only output
    a, b = by_id[run_a], by_id[run_b]
    rows = compare_runs(a, b)
    if a.arch != b.arch:
        print(f"note: run {a.id} ran on {a.arch}, run {b.id} on {b.arch}: a ratio compares the machines as well")
    print(text_table(a, b, rows))
    if out is not None:
        title = f"Run {a.id} against run {b.id}"
        body = f"<h1>{html.escape(title)}</h1>{compare_body(a, b, rows, CommitLinks(), up='')}"
        try:
            write_text_atomic(out, page(title, body))
        except OSError as exc:
            raise UserError(f"cannot write {out}: {exc.strerror}") from None
        print(f"{PROG}: wrote {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: user errors print one line and exit with status 2."""
    return run_command(
        PROG, lambda: run(argv), interrupted="interrupted; the database is as it was before this command"
    )


if __name__ == "__main__":
    sys.exit(main())
