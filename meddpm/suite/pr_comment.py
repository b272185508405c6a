"""The pull-request comment of an A/B run: its verdict in the title, the A/B table, what moved, and where it ran.

Read from the ``results.json`` that ``pytest perf_tests ... --compare-to=REV`` writes (docs/suite.md,
"Results files"); A is the working tree (the pull request), B the revision it was compared to. The
comment starts with :data:`MARKER`, a hidden line by which the pull-request workflow finds its own
comment and updates it instead of posting another (docs/ci.md).

``python -m meddpm.suite.pr_comment RESULTS_DIR`` prints the comment's Markdown; a folder with no
results, or the results of a run that was no A/B, is refused in one line (exit status 2).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from meddpm.errors import UserError, run_command
from meddpm.history.results import SUITE_RESULTS
from meddpm.judge.verdict import FASTER_UNDER_THRESHOLD, SLOWER_UNDER_THRESHOLD
from meddpm.measure.processes.sides import legend, sides_line
from meddpm.report.explanation import case_first_line, case_name
from meddpm.suite.summary import apart, explained
from meddpm.versioned.loader import load_one

MARKER = "<!-- meddpm-perf -->"
PROG = "python -m meddpm.suite.pr_comment"


def _count(n: int, noun: str, plural: str) -> str:
    return f"{n} {noun if n == 1 else plural}"


def _time_comparison(case: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((x for x in case.get("comparisons", []) if x.get("metric") == "time"), None)


def _number(value: Any, fmt: str) -> str:
    """``value`` formatted, "n/a" where it is missing or not finite (an untestable comparison's interval)."""
    return format(value, fmt) if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"


def ab_table(cases: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per compared case: each side's median of process medians, the ratio with its interval, the verdict."""
    rows = []
    for case in cases:
        x = _time_comparison(case)
        if x is None:
            continue
        interval = f"[{_number(x['ci_low'], '.4f')}, {_number(x['ci_high'], '.4f')}]"
        rows.append(
            {
                "case": case_name(case),
                "A median ms": _number(statistics.median(x["candidate_ms"]), ".4g"),
                "B median ms": _number(statistics.median(x["reference_ms"]), ".4g"),
                f"ratio A/B [{x.get('confidence', 0.95):.0%} interval]": f"{_number(x['ratio'], '.4f')} {interval}",
                "p (slower)": _number(x["p_slower"], ".2g"),
                "threshold %": _number(100 * x["threshold"], ".2f") if x.get("threshold") is not None else "n/a",
                "detectable %": _number(100 * x["detectable"], ".2f") if x.get("detectable") is not None else "n/a",
                "processes": f"{len(x['candidate_ms'])} vs {len(x['reference_ms'])}",
                "verdict": x["outcome"],
            }
        )
    return pd.DataFrame(rows)


def headline(cases: Sequence[Mapping[str, Any]]) -> str:
    """The verdict in a few words: slower cases, cases failed otherwise (counts), changes under the threshold."""
    time = Counter(x["outcome"] for x in map(_time_comparison, cases) if x is not None)
    failed_otherwise = sum(
        1 for c in cases if c["outcome"] == "regression" and (_time_comparison(c) or {}).get("outcome") != "regression"
    )
    parts = [f"{_count(time['regression'], 'case', 'cases')} slower"] if time["regression"] else []
    if failed_otherwise:
        parts.append(f"{_count(failed_otherwise, 'case', 'cases')} failed on counts")
    parts = parts or ["no slowdown"]
    for outcome, words in (
        ("improvement", "faster"),
        (SLOWER_UNDER_THRESHOLD, SLOWER_UNDER_THRESHOLD),
        (FASTER_UNDER_THRESHOLD, FASTER_UNDER_THRESHOLD),
    ):
        if time[outcome]:
            parts.append(f"{_count(time[outcome], 'case', 'cases')} {words}")
    return ", ".join(parts)


def _processes_line(planned: int, compared: Sequence[Mapping[str, Any]]) -> str:
    """ "5 processes a side"; "at most 5 processes a side (each case's own in the table)" where a side of a case ran
    fewer (--perf-until-detectable stopped it, or a process failed); "processes a side as in the table" where the
    header names none."""
    if planned < 1:
        return "processes a side as in the table"
    sides = [(x["candidate_ms"], x["reference_ms"]) for x in map(_time_comparison, compared) if x is not None]
    fewest = min((min(len(a), len(b)) for a, b in sides), default=planned)
    counted = f"{_count(planned, 'process', 'processes')} a side"
    return f"at most {counted} (each case's own in the table)" if fewest < planned else counted


def _environment(results: Mapping[str, Any]) -> str:
    env = results["environment"]
    where = env.get("gpu_name") or env.get("cpu") or "unknown device"
    driver = f", driver {env['driver']}" if env.get("driver") else ""
    cuda = f", CUDA {env['cuda']}" if env.get("cuda") else ""
    return f"{where} ({results['arch']}{driver}), torch {env.get('torch', 'unknown')}{cuda}, {env.get('date', '')}"


def pr_comment(results: Mapping[str, Any]) -> str:
    """The comment's Markdown for an A/B run's results document (current schema); refuses any other run."""
    if results.get("run_kind") != "ab":
        raise UserError(
            f"these results are of a {results.get('run_kind', 'unknown')!r} run, not an A/B; "
            "give the results folder of a run with --compare-to=REV"
        )
    compared = [c for c in results["cases"] if _time_comparison(c) is not None]
    if not compared:
        raise UserError(
            "the A/B results compare no case (every case was skipped or cut short); "
            "see the run's log, and run the A/B again"
        )
    env = results["environment"]
    sides = (
        f"A: this pull request ({env.get('commit', 'unknown commit')}), B: {results.get('compare_to') or 'its base'}"
    )
    recorded = results.get("sides") or []
    if len(recorded) == 2:  # the labels the verdict lines' short names come from
        sides = legend([f"this pull request, {recorded[0]['label']}", recorded[1]["label"]])
    lines = [
        MARKER,
        f"## meddpm-perf A/B on {results['arch']}: {headline(results['cases'])}",
        "",
        f"{sides}, {_processes_line(results.get('processes') or 0, compared)}, alternating on one machine.",
        *([f"Each side ran under: {sides_line(results['sides'])}."] if len(results.get("sides") or []) == 2 else []),
        "",
        *[f"- **{case_first_line(c)}**" for c in results["cases"] if c.get("explain")],
        "",
        ab_table(compared).to_markdown(index=False, disable_numparse=True),  # the figures as formatted
        "",
        "A case fails when it is slower beyond its threshold and the test says so (p < 0.01); "
        f"`{SLOWER_UNDER_THRESHOLD}` is significant but within the threshold, reported and not failed; "
        "`detectable` is the smallest change this run could see (docs/statistics.md).",
        "",
    ]
    # The time regressions are the table's; what else failed a case (its counts, docs/explain.md) is listed.
    failed = [
        v
        for c in results["cases"]
        if c["outcome"] == "regression"
        for v in c["verdicts"]
        if " regression:" in v and " time regression:" not in v
    ]
    if failed:
        lines += ["Other verdicts that failed a case:", ""] + [f"- {v}" for v in failed] + [""]
    lines += apart(results)
    lines += explained(results)
    if results.get("partial"):
        lines += ["The run was interrupted: the cases cut short are not in the table.", ""]
    lines += [f"Environment: {_environment(results)}.", ""]
    return "\n".join(lines)


def comment_for(results_path: Path) -> str:
    """The comment for the results in ``results_path``: a folder holding ``results.json``, or the file itself."""
    path = results_path / "results.json" if results_path.is_dir() else results_path
    if not path.exists():
        raise UserError(
            f"{path}: no results of an A/B run here; give the --perf-results-dir of "
            "`pytest perf_tests ... --compare-to=REV` once it has run"
        )
    return pr_comment(load_one(path, SUITE_RESULTS))


def main(argv: Sequence[str] | None = None) -> int:
    """Print the pull-request comment of an A/B run's results."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="the A/B run's --perf-results-dir (or its results.json)")
    args = parser.parse_args(argv)

    def run() -> int:
        sys.stdout.write(comment_for(args.results))
        return 0

    return run_command(PROG, run)


if __name__ == "__main__":
    sys.exit(main())
