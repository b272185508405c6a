"""The history as a static site: an index, one page per architecture, Plotly charts, no server.

Every page loads ``plotly.min.js`` from its own folder (written once beside the pages), so the site
opens from the file system or any static host, offline. Per case there is a chart per metric with
the runs (commit, time, host and software on hover), the steps found (red: worse, green: better)
and the environment's changes (grey), which are the usual cause of a step in every case.
"""

from __future__ import annotations

import datetime
import html
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from meddpm.atomic import write_text_atomic
from meddpm.history.changepoints import ALL_CASES, Step
from meddpm.history.series import METRICS, EnvironmentChange

PLOTLY_JS = "plotly.min.js"
_WORSE, _BETTER, _ENVIRONMENT = "#c0392b", "#1e8449", "#7f8c8d"
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
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f2f2f2; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(320px, 1fr)); gap: 0.5em; }
.none { color: #777; }
.open { color: #c0392b; font-weight: bold; }
"""


def write_site(
    out: Path,
    frame: pd.DataFrame,
    steps: Sequence[Step],
    changes: Sequence[EnvironmentChange],
    database: str,
) -> list[Path]:
    """Write the index, a page per architecture and Plotly's script into ``out``; returns the pages."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    archs = sorted(frame["arch"].unique()) if not frame.empty else []
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / PLOTLY_JS, get_plotlyjs())
    pages = [out / "index.html"]
    write_text_atomic(pages[0], _index(frame, steps, archs, database, stamp))
    for arch in archs:
        page = out / f"{_slug(arch)}.html"
        rows = frame[frame["arch"] == arch]
        write_text_atomic(
            page,
            _arch_page(arch, rows, [s for s in steps if s.arch == arch], [c for c in changes if c.arch == arch], stamp),
        )
        pages.append(page)
    return pages


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
        f'<script src="{PLOTLY_JS}"></script></head>\n<body>\n{body}\n</body></html>\n'
    )


def _index(frame: pd.DataFrame, steps: Sequence[Step], archs: Sequence[str], database: str, stamp: str) -> str:
    rows = []
    for arch in archs:
        runs = frame[frame["arch"] == arch].drop_duplicates("run_id")
        open_count = sum(1 for s in steps if s.arch == arch and s.open)
        latest = runs.iloc[-1]
        rows.append(
            [
                f'<a href="{_slug(arch)}.html">{html.escape(arch)}</a>',
                len(runs),
                f"{latest['started_at']:%Y-%m-%d %H:%M}",
                html.escape(str(latest["commit"])[:12]),
                f'<span class="open">{open_count}</span>' if open_count else open_count,
            ]
        )
    headers = ["architecture", "runs", "latest run", "latest commit", "open regressions"]
    table = _table(headers, rows, "No runs in the history yet.")
    body = (
        "<h1>Med-DDPM performance history</h1>"
        f"<p>From {html.escape(database)}, {stamp}.</p>{table}"
        f"<h2>Open regressions</h2>{_steps_table([s for s in steps if s.open])}"
    )
    return _page("Med-DDPM performance history", body)


def _steps_table(steps: Sequence[Step]) -> str:
    headers = ["arch", "case", "metric", "change", "before &rarr; after", "p", "first commit after", "run"]
    headers += ["runs since", "environment change there"]
    rows = [
        [
            html.escape(s.arch),
            html.escape(s.case),
            s.metric,
            f"{s.change:+.1%}",
            _levels(s),
            f"{s.p_value:.2g}",
            f"<code>{html.escape(s.commit[:12])}</code>",
            f"{s.started_at:%Y-%m-%d %H:%M}",
            s.runs_since,
            html.escape(", ".join(s.environment)) or "-",
        ]
        for s in steps
    ]
    return _table(headers, rows, "None.")


def _levels(step: Step) -> str:
    if step.before is None or step.after is None:
        return "every case"
    return f"{step.before:.4g} &rarr; {step.after:.4g} {METRICS[step.metric].unit}"


def _arch_page(
    arch: str, frame: pd.DataFrame, steps: Sequence[Step], changes: Sequence[EnvironmentChange], stamp: str
) -> str:
    latest = frame.iloc[-1]
    software = ", ".join(
        f"{label}{latest[name]}"
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
        sections.append(f'<h3>{html.escape(case)}</h3><div class="charts">{"".join(charts)}</div>')
    body = (
        f'<p><a href="index.html">&larr; all architectures</a></p><h1>{html.escape(arch)}</h1>'
        f"<p>{frame['run_id'].nunique()} runs; latest {latest['started_at']:%Y-%m-%d %H:%M} "
        f"({html.escape(software)}). {stamp}.</p>"
        f"<h2>Open regressions</h2>{_steps_table([s for s in steps if s.open])}"
        f"<h2>All steps found</h2>{_steps_table(steps)}"
        f"<h2>Environment changes</h2>{_changes_table(changes)}"
        "<h2>Cases</h2><p>Red lines: a step to worse, green: to better (the first run after it); grey dots: "
        f"an environment change. Times are UTC; hover a point for its commit.</p>{''.join(sections)}"
    )
    return _page(f"{arch}: Med-DDPM performance history", body)


def _changes_table(changes: Sequence[EnvironmentChange]) -> str:
    rows = [
        [f"{c.started_at:%Y-%m-%d %H:%M}", f"<code>{html.escape(c.commit[:12])}</code>", html.escape(c.describe())]
        for c in changes
    ]
    return _table(["run", "commit", "change"], rows, "None recorded.")


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], empty: str) -> str:
    """An HTML table of ``rows`` (cells already escaped) under ``headers``; without rows, ``empty`` as a note."""
    if not rows:
        return f'<p class="none">{empty}</p>'
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _chart(
    arch: str,
    case: str,
    metric: str,
    rows: pd.DataFrame,
    steps: Sequence[Step],
    changes: Sequence[EnvironmentChange],
) -> str:
    """One metric of one case over time, with the steps and environment changes drawn on it."""
    info = METRICS[metric]
    rows = rows[rows[metric].notna()]
    hover = rows[["commit", "kind", "host", "driver", "torch"]].fillna("?").astype(str)
    hover["commit"] = hover["commit"].str[:12]
    figure = go.Figure(
        go.Scatter(
            x=rows["started_at"],
            y=rows[metric],
            mode="lines+markers",
            name=info.unit,
            customdata=hover.to_numpy(),
            hovertemplate="%{x|%Y-%m-%d %H:%M}<br>%{y:.4g} "
            + info.unit
            + "<br>commit %{customdata[0]} (%{customdata[1]})<br>host %{customdata[2]}"
            + "<br>driver %{customdata[3]}, torch %{customdata[4]}<extra></extra>",
        )
    )
    # TFLOP/s is flops over time: its steps are the time steps, drawn here too.
    marked = "time" if metric == "tflops" else metric
    for step in steps:
        if step.metric == marked and step.case in (case, ALL_CASES):
            label = f"{'all cases ' if step.case == ALL_CASES else ''}{step.metric} {step.change:+.1%}"
            _vertical(figure, step.started_at, _WORSE if step.regression else _BETTER, label, "solid", above=True)
    for change in changes:
        _vertical(figure, change.started_at, _ENVIRONMENT, change.describe(), "dot", above=False)
    figure.update_layout(
        title={"text": f"{case}: {metric} ({info.unit})", "font": {"size": 13}, "x": 0.01, "xanchor": "left"},
        height=280,
        margin={"l": 50, "r": 10, "t": 40, "b": 30},
        showlegend=False,
        # No named template: applying one copies it whole, 0.1 s a chart, most of the time a site takes.
        template="none",
        plot_bgcolor="white",
        xaxis={"showgrid": True, "gridcolor": "#eee"},
        yaxis={"showgrid": True, "gridcolor": "#eee"},
    )
    return pio.to_html(
        figure,
        full_html=False,
        include_plotlyjs=False,
        div_id=f"chart-{_slug(arch)}-{_slug(case)}-{metric}",
        config={"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": _FEWER_BUTTONS},
        default_height="280px",
    )


def _vertical(figure: go.Figure, at: datetime.datetime, colour: str, label: str, dash: str, above: bool) -> None:
    """A vertical line at ``at`` with its label above the plot (steps) or inside its top (environment changes).

    Two places, so a step and the driver update that caused it stay readable at one date. Shapes and
    annotations by hand: add_vline's annotations cannot take a date on the x axis.
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


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"
