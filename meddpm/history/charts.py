"""The architecture page's charts: one metric of one case over its runs, drawn when scrolled into view.

Each chart is a placeholder holding its Plotly figure as JSON; :func:`lazy_script` draws it when it comes near
the viewport, so a page of 90 charts is usable at once, and makes a click on a point open its run's page.
"""

from __future__ import annotations

import datetime
import html
import json
import math
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from meddpm.history.changepoints import ALL_CASES, RULES, Step
from meddpm.history.html_parts import RUNS_FOLDER, slug
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


def lazy_script() -> str:
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


def chart(
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


def _band(figure: go.Figure, rows: pd.DataFrame, metric: str, since: datetime.datetime, x0: float, x1: float) -> None:
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
