"""The history as a static site: an index, one page per architecture and per run, SVG charts, no server.

No page loads anything: the charts are inline SVG (:mod:`meddpm.history.charts`), so the site opens from the
file system or any static host, offline, and at once. Per case there is a chart per metric with the runs
(commit, date, subject, host and software on hover; a click opens the run's page), as measured and as the
detector judges them, the steps found (red: worse, green: better) with the size each had to pass, the band
of the current level, and the environment's changes (grey), which are the usual cause of a step in every
case. Each step carries its commit range (the last good commit to the first bad one) and, while open, the
command that bisects it.
"""

from __future__ import annotations

import datetime
import html
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from meddpm.atomic import write_text_atomic
from meddpm.history.changepoints import Step
from meddpm.history.charts import band_noises, chart
from meddpm.history.grid import baseline_values, grid_html
from meddpm.history.html_parts import (
    CommitLinks,
    case_anchor,
    case_label,
    page,
    page_name,
    run_href,
    software_version,
    table,
)
from meddpm.history.judged import with_judged
from meddpm.history.models import Run
from meddpm.history.run_pages import ab_runs_table, recent_runs_table, write_run_pages
from meddpm.history.series import METRICS, EnvironmentChange


def write_site(
    out: Path,
    frame: pd.DataFrame,
    steps: Sequence[Step],
    changes: Sequence[EnvironmentChange],
    database: str,
    runs: Sequence[Run] = (),
    links: CommitLinks | None = None,
    baselines: Path | None = None,
) -> list[Path]:
    """Write the index, a page per architecture and per run into ``out``.

    ``frame``, ``steps`` and ``changes``: the trends (:func:`~meddpm.history.series.case_frame`); ``runs``:
    every stored run, A/B runs included, for the tables of runs and their pages; ``links``: how commits are
    shown (plain text by default); ``baselines``: the folder of baseline files the index's grid sets the latest
    values against (None: none). Returns the index, then the
    architecture pages, then the run pages.
    """
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    links = links or CommitLinks()
    archs = sorted(frame["arch"].unique()) if not frame.empty else []
    out.mkdir(parents=True, exist_ok=True)
    pages = [out / "index.html"]
    grids = {
        arch: grid_html(arch, frame[frame["arch"] == arch], steps, baseline_values(baselines, arch)) for arch in archs
    }
    write_text_atomic(pages[0], _index(frame, steps, archs, runs, links, database, stamp, grids))
    for arch in archs:
        arch_page = out / f"{page_name(arch)}.html"
        rows = with_judged(frame[frame["arch"] == arch])
        arch_steps = [s for s in steps if s.arch == arch]
        arch_changes = [c for c in changes if c.arch == arch]
        write_text_atomic(arch_page, _arch_page(arch, rows, arch_steps, arch_changes, links, stamp))
        pages.append(arch_page)
    return pages + write_run_pages(out, runs, links, stamp, set(archs))


def _index(
    frame: pd.DataFrame,
    steps: Sequence[Step],
    archs: Sequence[str],
    runs: Sequence[Run],
    links: CommitLinks,
    database: str,
    stamp: str,
    grids: Mapping[str, str],
) -> str:
    rows = []
    for arch in archs:
        trend = frame[frame["arch"] == arch].drop_duplicates("run_id")
        open_count = sum(1 for s in steps if s.arch == arch and s.failing)
        noted = sum(1 for s in steps if s.arch == arch and s.open and not s.failing)
        latest = trend.iloc[-1]
        rows.append(
            [
                f'<a href="{page_name(arch)}.html">{html.escape(arch)}</a>',
                len(trend),
                f"{latest['started_at']:%Y-%m-%d %H:%M}",
                links.commit(str(latest["commit"])),
                f'<span class="open">{open_count}</span>' if open_count else open_count,
                noted,
            ]
        )
    headers = ["architecture", "runs in the trends", "latest run", "latest commit", "open regressions", "acknowledged"]
    others = len(runs) - frame["run_id"].nunique() if runs else 0
    empty = (
        f"No suite or bench runs yet, which the trends are drawn from; {others} A/B run(s) below."
        if others
        else "No runs in the history yet."
    )
    body = (
        "<h1>Med-DDPM performance history</h1>"
        f"<p>From {html.escape(database)}, {stamp}.</p>{table(headers, rows, empty)}"
        f"{_open_tables(steps, links)}"
        + "".join(
            f'<h2>{html.escape(arch)}: every case</h2><p class="none">The latest value, its change against the last '
            "good run (before the first open regression; else the run before) and the stored baseline, and its "
            "runs as a line. Red: an open regression; amber: an acknowledged one. Hover a cell for its steps.</p>"
            f"{grids[arch]}"
            for arch in archs
        )
        + f"<h2>Recent runs</h2>{recent_runs_table(runs, links)}"
        f"<h2>A/B runs</h2>{ab_runs_table(runs, links)}"
    )
    return page("Med-DDPM performance history", body)


def _open_tables(steps: Sequence[Step], links: CommitLinks) -> str:
    """The open regressions nobody acknowledged, with their bisect commands; then the acknowledged ones. A
    change that steps a case's series in one process and in several is one row (both series in it)."""
    acknowledged = [s for s in steps if s.open and not s.failing]
    failing = [s for s in steps if s.failing]
    return f"<h2>Open regressions</h2>{_steps_table(failing, links, bisect=True, merge=True)}" + (
        f"<h2>Acknowledged regressions</h2>{_steps_table(acknowledged, links, merge=True)}" if acknowledged else ""
    )


def _state(step: Step) -> str:
    """Where the step stands, in words: open, acknowledged (and why), back at its level, or an improvement."""
    if step.failing:
        return '<span class="open">open</span>'
    if step.open:
        return f"acknowledged {step.noted_at:%Y-%m-%d}: {html.escape(step.note or '')}"
    return "back at its level" if step.regression else "improvement"


def _one_change(steps: Sequence[Step]) -> list[list[Step]]:
    """``steps`` grouped where they are one change seen twice: the same architecture, case (its ``/p<N>`` series
    too), metric, direction and state."""
    groups: dict[tuple, list[Step]] = {}
    for step in steps:
        case = re.sub(r"/p\d+$", "", step.case)
        groups.setdefault((step.arch, case, step.metric, step.regression, step.failing, step.note), []).append(step)
    return list(groups.values())


def _steps_table(steps: Sequence[Step], links: CommitLinks, bisect: bool = False, merge: bool = False) -> str:
    headers = ["architecture", "case", "metric", "state", "change", "before &rarr; after", "p-value"]
    headers += ["commits (last good..first bad)"]
    headers += ["first run after", "runs since", "environment change there"] + (["bisect"] if bisect else [])
    groups = _one_change(steps) if merge else [[s] for s in steps]
    rows = []
    for group in groups:
        first = group[0]

        def each(cell, group=group) -> str:
            return "<br>".join(str(cell(s)) for s in group)

        rows.append(
            [
                html.escape(first.arch),
                each(lambda s: case_label(s.case)),
                first.metric,
                _state(first),
                each(lambda s: f"{s.change:+.1%}"),
                each(_levels),
                each(lambda s: f"{s.p_value:.2g}"),
                each(lambda s: links.range(s.good_commit, s.commit)),
                each(lambda s: f'<a href="{run_href(s.run_id)}">{s.started_at:%Y-%m-%d %H:%M}</a>'),
                each(lambda s: s.runs_since),
                each(lambda s: html.escape(", ".join(s.environment)) or "-"),
            ]
            + ([each(_bisect)] if bisect else [])
        )
    return table(headers, rows, "None.")


def _bisect(step: Step) -> str:
    """The step's bisect command, or why it has none."""
    line = step.triage()
    _, found, command = line.partition("; bisect: ")
    return f"<code>{html.escape(command)}</code>" if found else html.escape(line)


def _levels(step: Step) -> str:
    if step.before is None or step.after is None:
        return "every case"
    return f"{step.before:.4g} &rarr; {step.after:.4g} {METRICS[step.metric].unit}"


def _arch_page(
    arch: str,
    frame: pd.DataFrame,
    steps: Sequence[Step],
    changes: Sequence[EnvironmentChange],
    links: CommitLinks,
    stamp: str,
) -> str:
    latest = frame.iloc[-1]
    software = ", ".join(
        f"{label}{software_version(name, latest[name])}"
        for name, label in (
            ("gpu_name", ""),
            ("driver", "driver "),
            ("torch", "torch "),
            ("cuda", "CUDA "),
            ("cudnn", "cuDNN "),
        )
        if pd.notna(latest[name])
    )
    stepped = {s.case for s in steps}
    # Cases with a step first, then single-GPU before DDP cases, then by name.
    order = sorted(frame["case"].unique(), key=lambda c: (c not in stepped, "/ddp" in c, c))
    sections = []
    for case in order:
        rows = frame[frame["case"] == case]
        drawn = [metric for metric in METRICS if rows[metric].notna().any()]
        charts = [chart(arch, case, metric, rows, steps, changes) for metric in drawn]
        sections.append(
            f'<h3 id="{case_anchor(case)}">{case_label(case)}</h3><div class="charts">{"".join(charts)}</div>'
        )
    body = (
        f'<p><a href="index.html">&larr; all architectures</a></p><h1>{html.escape(arch)}</h1>'
        f"<p>{frame['run_id'].nunique()} runs; latest {latest['started_at']:%Y-%m-%d %H:%M} "
        f"({html.escape(software)}). {stamp}.</p>"
        f"{_open_tables(steps, links)}"
        f"<h2>All steps found</h2>{_steps_table(steps, links)}"
        f"<h2>Environment changes</h2>{_changes_table(changes, links)}"
        "<h2>Cases</h2><p><b>How to read a chart:</b> the detector judges the blue points, each run's value less "
        "the movement every case shared that night (grey: as measured); the band is their level since the last "
        f"step give or take twice the measured noise ({band_noises()}), and a step is reported only where the "
        "runs after it pass the dashed line, its threshold (the label gives the step and the size it needed).</p>"
        "<p>Each point is a run, in order, labelled by commit and date: hover for its commit's subject, click to "
        "open its page. Red lines: a step to worse, amber: one acknowledged, green: to better; grey dots: an "
        "environment change; grey bars: the spread of the run's time (its processes' medians, else its rounds' "
        "quartiles).</p>"
        f"{''.join(sections)}"
    )
    return page(f"{arch}: Med-DDPM performance history", body)


def _changes_table(changes: Sequence[EnvironmentChange], links: CommitLinks) -> str:
    rows = [
        [
            f'<a href="{run_href(c.run_id)}">{c.started_at:%Y-%m-%d %H:%M}</a>',
            links.commit(c.commit),
            html.escape(c.describe()),
        ]
        for c in changes
    ]
    return table(["run", "commit", "change"], rows, "None recorded.")
