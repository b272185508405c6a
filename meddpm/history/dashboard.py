"""The history as a static site: an index, one page per architecture and per run, Plotly charts, no server.

The pages with charts load ``plotly.min.js`` from the site's folder (written once beside them), so the
site opens from the file system or any static host, offline; the index and the run pages have no chart
and load nothing. Per case there is a chart per metric with the runs (commit, time, host and software on
hover; the spread of the run's time as an error bar), the steps found (red: worse, green: better), the
band of the current level within which ``check`` reports no step, and the environment's changes (grey),
which are the usual cause of a step in every case. Each step carries its commit range (the last good
commit to the first bad one) and, while open, the command that bisects it.
"""

from __future__ import annotations

import datetime
import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from meddpm.atomic import write_text_atomic
from meddpm.history.changepoints import ALL_CASES, RULES, Step
from meddpm.history.grid import baseline_values, grid_html
from meddpm.history.html_parts import (
    PLOTLY_JS,
    RUNS_FOLDER,
    CommitLinks,
    case_anchor,
    case_label,
    page,
    page_name,
    run_href,
    slug,
    software_version,
    table,
)
from meddpm.history.models import Run
from meddpm.history.run_pages import ab_runs_table, recent_runs_table, write_run_pages
from meddpm.history.series import METRICS, EnvironmentChange

_WORSE, _BETTER, _ENVIRONMENT, _BAND = "#c0392b", "#1e8449", "#7f8c8d", "rgba(31, 119, 180, 0.12)"
_ACKNOWLEDGED = "#e67e22"  # an open regression acknowledged as known: amber, as in the index's grid
_TICKS = 5  # labelled runs on an x axis at most: commit over date, level, in a chart 300 px wide
# Zoom, pan, reset and download stay; the rest of Plotly's tool bar would cover a small chart's title.
_FEWER_BUTTONS = [
    "select2d",
    "lasso2d",
    "zoomIn2d",
    "zoomOut2d",
    "autoScale2d",
    "hoverClosestCartesian",
    "hoverCompareCartesian",
    "toggleSpikelines",
]


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
    """Write the index, a page per architecture and per run, and Plotly's script into ``out``.

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
    write_text_atomic(out / PLOTLY_JS, get_plotlyjs())
    pages = [out / "index.html"]
    grids = {
        arch: grid_html(arch, frame[frame["arch"] == arch], steps, baseline_values(baselines, arch)) for arch in archs
    }
    write_text_atomic(pages[0], _index(frame, steps, archs, runs, links, database, stamp, grids))
    for arch in archs:
        arch_page = out / f"{page_name(arch)}.html"
        rows = frame[frame["arch"] == arch]
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
    """The open regressions nobody acknowledged, with their bisect commands; then the acknowledged ones."""
    acknowledged = [s for s in steps if s.open and not s.failing]
    return f"<h2>Open regressions</h2>{_steps_table([s for s in steps if s.failing], links, bisect=True)}" + (
        f"<h2>Acknowledged regressions</h2>{_steps_table(acknowledged, links)}" if acknowledged else ""
    )


def _state(step: Step) -> str:
    """Where the step stands, in words: open, acknowledged (and why), back at its level, or an improvement."""
    if step.failing:
        return '<span class="open">open</span>'
    if step.open:
        return f"acknowledged {step.noted_at:%Y-%m-%d}: {html.escape(step.note or '')}"
    return "back at its level" if step.regression else "improvement"


def _steps_table(steps: Sequence[Step], links: CommitLinks, bisect: bool = False) -> str:
    headers = ["architecture", "case", "metric", "state", "change", "before &rarr; after", "p-value"]
    headers += ["commits (last good..first bad)"]
    headers += ["first run after", "runs since", "environment change there"] + (["bisect"] if bisect else [])
    rows = [
        [
            html.escape(s.arch),
            case_label(s.case),
            s.metric,
            _state(s),
            f"{s.change:+.1%}",
            _levels(s),
            f"{s.p_value:.2g}",
            links.range(s.good_commit, s.commit),
            f'<a href="{run_href(s.run_id)}">{s.started_at:%Y-%m-%d %H:%M}</a>',
            s.runs_since,
            html.escape(", ".join(s.environment)) or "-",
        ]
        + ([_bisect(s)] if bisect else [])
        for s in steps
    ]
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
        charts = [_chart(arch, case, metric, rows, steps, changes) for metric in METRICS if rows[metric].notna().any()]
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
        "<h2>Cases</h2><p>How to read a chart: each point is a run, in order, labelled by its commit and date "
        "(click one to open its run page). The shaded band is the case's level since its last step, give or take "
        f"twice the nights' measured noise (time {band_noise('time'):.1%}, memory {band_noise('memory'):.1%}, "
        f"energy {band_noise('energy'):.1%}): ordinary nights fall inside it. A step is reported where runs "
        "stay beyond the smallest step <code>check</code> reports (1 %, 3 % for energy) and stand out from the "
        "noise once the movement every case shares that night is taken out, so a point outside the band is not "
        "a step by itself. Red lines: a step to worse, amber: one acknowledged, green: to better; grey dots: an "
        "environment change; error bars: the spread of the run's time (its processes' medians, else its "
        "rounds' quartiles).</p>"
        f"{''.join(sections)}<script>{_lazy_script()}</script>"
    )
    return page(f"{arch}: Med-DDPM performance history", body, plotly=True)


def _lazy_script() -> str:
    """Draws each chart when it comes near the viewport, and makes a click on a point open its run's page.

    A page of 90 charts drawn at load took 6-7 s on two cores; drawn as they scroll into view, the first
    screen is drawn at once and the rest when asked for.
    """
    config = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": _FEWER_BUTTONS}
    return (
        # Plotly's script is deferred: it has run by DOMContentLoaded, not yet where this script stands.
        "window.addEventListener('DOMContentLoaded', () => {"
        f"const config = {json.dumps(config)};"
        "const draw = (div) => {"
        "  const figure = JSON.parse(document.getElementById(div.id + '-figure').textContent);"
        "  Plotly.newPlot(div, figure.data, figure.layout, config).then(() => div.on('plotly_click', (event) => {"
        "    const run = event.points[0].customdata[5];"
        f"    if (run && run !== '?') window.location.href = '{RUNS_FOLDER}/' + run + '.html';"
        "  }));"
        "};"
        "const observer = new IntersectionObserver((entries) => entries.forEach((entry) => {"
        "  if (entry.isIntersecting) { observer.unobserve(entry.target); draw(entry.target); }"
        "}), {rootMargin: '300px'});"
        "document.querySelectorAll('.lazy-chart').forEach((div) => observer.observe(div));"
        "});"
    )


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


def _chart(
    arch: str,
    case: str,
    metric: str,
    rows: pd.DataFrame,
    steps: Sequence[Step],
    changes: Sequence[EnvironmentChange],
) -> str:
    """One metric of one case over its runs, with the steps, the current level's band and environment changes.

    The x axis is the case's runs in order, each labelled by its commit and date (ten runs of one day are
    ten places, not a crush at the left edge); a step or an environment change is drawn between the run
    before it and the first run after it. The chart is a placeholder holding the figure as JSON, drawn by
    the page's script when it is scrolled near (:data:`_LAZY_SCRIPT`); a click on a point opens its run's page.
    """
    info = METRICS[metric]
    rows = rows[rows[metric].notna()].reset_index(drop=True)
    hover = rows[["commit", "kind", "host", "driver", "torch", "run_id"]].fillna("?").astype(str)
    hover["commit"] = hover["commit"].str[:12]
    hover["date"] = rows["started_at"].dt.strftime("%Y-%m-%d %H:%M")
    spread = None
    if metric == "time" and rows["time_low"].notna().any():
        spread = {
            "type": "data",
            "symmetric": False,
            "array": (rows["time_high"] - rows[metric]).fillna(0).to_numpy(),
            "arrayminus": (rows[metric] - rows["time_low"]).fillna(0).to_numpy(),
            "thickness": 1,
            "width": 2,
        }
    positions = list(range(len(rows)))
    figure = go.Figure(
        go.Scatter(
            x=positions,
            y=rows[metric],
            mode="lines+markers",
            name=info.unit,
            error_y=spread,
            customdata=hover.to_numpy(),
            hovertemplate="%{customdata[6]} UTC<br>%{y:.4g} "
            + info.unit
            + "<br>commit %{customdata[0]} (%{customdata[1]}, run %{customdata[5]}: click to open)<br>host "
            + "%{customdata[2]}<br>driver %{customdata[3]}, torch %{customdata[4]}<extra></extra>",
        )
    )
    first, last = rows["started_at"].min(), rows["started_at"].max()

    def place(moment: datetime.datetime) -> float:
        """Between the last run before ``moment`` and the first at or after it."""
        return float(rows["started_at"].searchsorted(moment)) - 0.5

    # TFLOP/s is flops over time: its steps are the time steps, drawn here too.
    marked = "time" if metric == "tflops" else metric
    drawn = [s for s in steps if s.metric == marked and s.case in (case, ALL_CASES) and first <= s.started_at <= last]
    for step in drawn:
        label = f"{'all cases ' if step.case == ALL_CASES else ''}{step.change:+.1%}"
        colour = _ACKNOWLEDGED if step.open and not step.failing else _WORSE if step.regression else _BETTER
        _vertical(figure, place(step.started_at), colour, label, "solid", above=True)
    for change in changes:
        if first < change.started_at <= last:
            _vertical(figure, place(change.started_at), _ENVIRONMENT, change.describe(), "dot", above=False)
    since = max((s.started_at for s in drawn), default=first)
    _band(figure, rows, metric, since, place(since), len(rows) - 0.5)
    every = max(1, math.ceil(len(rows) / _TICKS))
    ticks = positions[::every]
    figure.update_layout(
        title={"text": f"{html.escape(case)}: {metric} ({info.unit})", "font": {"size": 13}, "x": 0.01},
        height=280,
        margin={"l": 50, "r": 10, "t": 40, "b": 10},
        showlegend=False,
        # No named template: applying one copies it whole, 0.1 s a chart, most of the time a site takes.
        template="none",
        plot_bgcolor="white",
        hovermode="closest",
        # automargin: the two-line tick labels (commit over date) get the room they need.
        xaxis={
            "showgrid": True,
            "gridcolor": "#eee",
            "range": [-0.5, len(rows) - 0.5],
            "automargin": True,
            "tickvals": ticks,
            "ticktext": [f"{hover['commit'][i][:7]}<br>{rows['started_at'][i]:%m-%d}" for i in ticks],
            "tickfont": {"size": 9},
            "tickangle": 0,
            "zeroline": False,
        },
        yaxis={"showgrid": True, "gridcolor": "#eee", "automargin": True, "title": {"text": info.unit}},
    )
    div = f"chart-{slug(arch)}-{slug(case)}-{metric}"
    # JSON in a script element: "<" escaped, so a host or branch holding "</script>" cannot end it.
    figure_json = figure.to_json().replace("<", "\\u003c")
    return (
        f'<div id="{div}" class="plotly-graph-div lazy-chart" style="height:280px; width:100%;"></div>'
        f'<script type="application/json" id="{div}-figure">{figure_json}</script>'
    )


def _band(
    figure: go.Figure, rows: pd.DataFrame, metric: str, since: datetime.datetime, x0: float, x1: float
) -> None:
    """The case's level since its last step, give or take twice the measured night-to-night noise of one run's
    value (the case's own noise and the machine start's together): where ordinary nights fall."""
    level = float(rows.loc[rows["started_at"] >= since, metric].median())
    width = 2 * band_noise(metric)
    figure.add_shape(
        type="rect",
        x0=x0,
        x1=x1,
        y0=level * (1 - width),
        y1=level * (1 + width),
        fillcolor=_BAND,
        line={"width": 0},
        layer="below",
    )


def band_noise(metric: str) -> float:
    """The measured relative noise of one run's value of ``metric`` between nights (the detector's prior)."""
    rule = RULES["time" if metric == "tflops" else metric]
    return math.hypot(rule.case_sd, rule.run_sd)


def _vertical(figure: go.Figure, at: float, colour: str, label: str, dash: str, above: bool) -> None:
    """A vertical line at ``at`` with its label above the plot (steps) or inside its top (environment changes).

    Two places, so a step and the driver update that caused it stay readable at one place.
    """
    figure.add_shape(
        type="line", x0=at, x1=at, y0=0, y1=1, yref="paper", line={"color": colour, "width": 1.5, "dash": dash}
    )
    figure.add_annotation(
        x=at,
        y=1,
        yref="paper",
        text=html.escape(label),
        showarrow=False,
        font={"size": 10, "color": colour},
        xanchor="left",
        yanchor="bottom" if above else "top",
    )
