"""Two runs side by side: every case's time, peak memory and energy in each, and their ratio.

As ``asv compare`` and Conbench's run comparison do: one row per case and metric, the ratio B/A, and a word
where it moves beyond the suite's default threshold for that metric (time 5 %, peak memory 2 %, energy 10 %:
docs/suite.md). One pair of runs carries the machine-start noise of each (about 1.2 %, docs/statistics.md), so a
ratio inside the threshold is no finding; an A/B run in alternating processes is the way to judge a change.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from meddpm.history.html_parts import CommitLinks, case_label, run_href, table
from meddpm.history.models import CaseResult, Run
from meddpm.history.series import METRICS

# The suite's default thresholds per metric: a ratio beyond one is worth a look (docs/suite.md).
THRESHOLDS = {"time": 0.05, "memory": 0.02, "energy": 0.10}


@dataclass(frozen=True)
class Row:
    """One case and metric in both runs (None: that run did not measure it)."""

    case: str
    metric: str
    a: float | None
    b: float | None

    @property
    def ratio(self) -> float | None:
        """B over A, where both measured it."""
        return None if self.a is None or self.b is None or self.a == 0 else self.b / self.a

    @property
    def verdict(self) -> str:
        """``worse`` or ``better`` beyond the metric's threshold (every metric is better lower), ``only in A``,
        ``only in B``, or empty."""
        if self.ratio is None:
            return "only in A" if self.b is None else "only in B"
        limit = THRESHOLDS[self.metric]
        return "worse" if self.ratio > 1 + limit else "better" if self.ratio < 1 - limit else ""


def compare_runs(a: Run, b: Run) -> list[Row]:
    """A row per case and metric that either run measured: A's cases in its order, then those only B has."""
    cases_a = {case.case: case for case in a.cases}
    cases_b = {case.case: case for case in b.cases}
    keys = [*cases_a, *(key for key in cases_b if key not in cases_a)]
    rows = []
    for key in keys:
        for metric in THRESHOLDS:
            row = Row(key, metric, _value(cases_a.get(key), metric), _value(cases_b.get(key), metric))
            if row.a is not None or row.b is not None:
                rows.append(row)
    return rows


def _value(case: CaseResult | None, metric: str) -> float | None:
    if case is None:
        return None
    value = getattr(case, METRICS[metric].column)
    return None if value is None else float(value) * METRICS[metric].scale


def describe_run(run: Run) -> str:
    """One line: which run, of what, where and when."""
    return f"run {run.id}: {run.arch} {run.kind}, commit {run.commit[:12]}, {run.started_at:%Y-%m-%d %H:%M} UTC"


def text_table(a: Run, b: Run, rows: Sequence[Row]) -> str:
    """The comparison for a terminal: the two runs, then a row per case and metric."""
    header = ("case", "metric", "A", "B", "B/A", "")
    lines = [
        (row.case, row.metric, _shown(row.a, row.metric), _shown(row.b, row.metric), _ratio(row), row.verdict)
        for row in rows
    ]
    widths = [max(len(str(line[i])) for line in [header, *lines]) for i in range(len(header))]
    out = [f"A = {describe_run(a)}", f"B = {describe_run(b)}", ""]
    for line in [header, *lines]:
        out.append("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip())
    worse = sum(row.verdict == "worse" for row in rows)
    better = sum(row.verdict == "better" for row in rows)
    limits = ", ".join(f"{metric} {limit:.0%}" for metric, limit in THRESHOLDS.items())
    out.append(f"\n{worse} worse, {better} better beyond the suite's thresholds ({limits}); one pair of runs")
    out.append("carries each run's machine-start noise (about 1.2 %): an A/B run judges a change.")
    return "\n".join(out)


def html_table(rows: Sequence[Row]) -> str:
    """The comparison as an HTML table, rows beyond a threshold marked."""
    cells = [
        [
            case_label(row.case),
            row.metric,
            _shown(row.a, row.metric),
            _shown(row.b, row.metric),
            _ratio(row),
            f'<span class="{"open" if row.verdict == "worse" else "good"}">{row.verdict}</span>' if row.verdict else "",
        ]
        for row in rows
    ]
    return table(["case", "metric", "A", "B", "B / A", "beyond the threshold"], cells, "No cases in either run.")


def compare_body(a: Run, b: Run, rows: Sequence[Row], links: CommitLinks, up: str = "") -> str:
    """The body of a comparison page: both runs linked to their pages, then the table."""

    def line(name: str, run: Run) -> str:
        return (
            f'<li>{name} = <a href="{run_href(run.id, up)}">run {run.id}</a>: {html.escape(run.arch)} '
            f"{html.escape(run.kind)}, commit {links.commit(run.commit)}, {run.started_at:%Y-%m-%d %H:%M} UTC</li>"
        )

    limits = ", ".join(f"{metric} {limit:.0%}" for metric, limit in THRESHOLDS.items())
    return (
        f"<ul>{line('A', a)}{line('B', b)}</ul>{html_table(rows)}"
        f"<p>Marked: a ratio beyond the suite's default threshold ({limits}). One pair of runs carries each run's "
        "machine-start noise (about 1.2 %), so a ratio inside it is no finding; an A/B run judges a change.</p>"
    )


def _shown(value: float | None, metric: str) -> str:
    return "-" if value is None else f"{value:.4g} {METRICS[metric].unit}"


def _ratio(row: Row) -> str:
    return "-" if row.ratio is None else f"{row.ratio:.3f}"
