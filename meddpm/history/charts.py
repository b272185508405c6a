"""The architecture page's charts: one metric of one case over its runs, drawn by matplotlib as inline SVG.

A chart is static SVG in the page: nothing to load or run in the browser, so a page is usable as soon as its
text is (Plotly's 4.8 MB script took a second of a first visit on two cores before any chart was drawn). Each
point is a link to its run's page, with the run's commit, date and subject as its tooltip (an SVG ``title``).
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Sequence

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from meddpm.history.changepoints import ALL_CASES, RULES, Step
from meddpm.history.html_parts import run_href, slug
from meddpm.history.judged import judged_column, shared_column
from meddpm.history.series import METRICS, EnvironmentChange

_WORSE, _BETTER, _ENVIRONMENT = "#c0392b", "#1e8449", "#7f8c8d"
_ACKNOWLEDGED = "#e67e22"  # an open regression acknowledged as known: amber, as in the index's grid
_JUDGED, _MEASURED, _BAND = "#1f77b4", "#9aa5b1", "#1f77b41f"
_NAMES = {"time": "time", "memory": "memory", "energy": "energy", "tflops": "throughput"}
_TICKS = 5  # labelled runs on an x axis at most: commit over date, legible in a chart 330 px wide
_SIZE = (4.6, 2.5)  # inches: about the width of a column of the page's grid of charts
# Text as text (not glyph outlines): a chart is a few kilobytes, and its labels can be found on the page.
_RC = {"svg.fonttype": "none", "font.size": 7, "axes.titlesize": 8, "axes.spines.top": False}


def chart(
    arch: str,
    case: str,
    metric: str,
    rows: pd.DataFrame,
    steps: Sequence[Step],
    changes: Sequence[EnvironmentChange],
) -> str:
    """One metric of one case over its runs, as what was measured and as what the detector judged.

    Grey: the values measured (with the spread of the run's time); blue: each value less the movement every
    case shared that night (the run factor), which is what the detector judges; the shaded band: the judged
    level since the last step, give or take twice the measured noise of that series; each step a vertical
    line, with a dashed line where the level after it had to pass to be reported (its threshold). The x axis
    is the case's runs in order, labelled by commit and date; a step or an environment change is drawn between
    the run before it and the first run after it.
    """
    info = METRICS[metric]
    rows = rows[rows[metric].notna()].reset_index(drop=True)
    judged_name = judged_column(metric)
    judged = rows[judged_name] if judged_name in rows else rows[metric]
    positions = list(range(len(rows)))
    with matplotlib.rc_context(_RC):
        figure = Figure(figsize=_SIZE)
        axes = figure.subplots()
        if judged_name in rows:
            _measured(axes, rows, metric, positions)
        axes.plot(positions, judged, color=_JUDGED, linewidth=1, zorder=3)
        points = axes.scatter(positions, judged, s=14, color=_JUDGED, zorder=4)
        points.set_urls([run_href(int(run)) for run in rows["run_id"]])

        axes.set_xlim(-0.5, len(rows) - 0.5)

        def place(moment: pd.Timestamp) -> float:
            """Between the last run before ``moment`` and the first at or after it."""
            return float(rows["started_at"].searchsorted(moment)) - 0.5

        first, last = rows["started_at"].min(), rows["started_at"].max()
        marked = "time" if metric == "tflops" else metric  # TFLOP/s is flops over time: its steps are the time's
        drawn = [s for s in steps if s.metric == marked and s.case in (case, ALL_CASES) and first <= s.started_at]
        drawn = [s for s in drawn if s.started_at <= last]
        for change in changes:
            if first < change.started_at <= last:
                _vertical(axes, place(change.started_at), _ENVIRONMENT, change.describe(), ":", top=False)
        edges = [-0.5, *(place(s.started_at) for s in drawn), len(rows) - 0.5]
        for start, at, end, step in zip(edges, edges[1:], edges[2:], drawn):
            _step(axes, (start, at, end), step, judged, metric)
        since = edges[-2]
        _band(axes, judged, since, len(rows) - 0.5, _noise(rows, metric, judged_name))
        every = max(1, math.ceil(len(rows) / _TICKS))
        ticks = positions[::every]
        labels = [f"{str(rows['commit'][i])[:7]}\n{rows['started_at'][i]:%m-%d}" for i in ticks]
        # A recorded commit is anyone's text: "$\\x$" is no formula to typeset (and a bad one would stop the report).
        axes.set_xticks(ticks, labels, parse_math=False)
        axes.set_ylabel(info.unit)
        axes.grid(color="#eee", linewidth=0.6)
        axes.spines["right"].set_visible(False)
        svg = _svg(figure, _titles(rows, metric, judged, judged_name in rows))
    title = f"{_NAMES[metric]} ({info.unit}{'' if judged_name in rows else ', as measured'})"
    anchor = f"chart-{slug(arch)}-{slug(case)}-{metric}"
    return f'<figure class="chart" id="{anchor}"><figcaption>{title}</figcaption>{svg}</figure>'


def _measured(axes, rows: pd.DataFrame, metric: str, positions: list[int]) -> None:
    """The values as measured, grey, with the spread of each run's time (its processes, else its rounds)."""
    axes.plot(positions, rows[metric], color=_MEASURED, linewidth=0.8, marker="o", markersize=2.5)
    if metric == "time" and rows["time_low"].notna().any():
        axes.vlines(positions, rows["time_low"], rows["time_high"], color=_MEASURED, linewidth=0.8)


def _noise(rows: pd.DataFrame, metric: str, judged_name: str) -> float:
    """The measured relative noise of the series drawn in blue: a case's own where every run had the shared
    movement taken out, else that and the machine start's together (as the detector takes it)."""
    rule = RULES["time" if metric == "tflops" else metric]
    factored = judged_name in rows and rows[shared_column(metric)].notna().all()
    return rule.case_sd if factored else math.hypot(rule.case_sd, rule.run_sd)


def band_noises() -> str:
    """The noises the bands are drawn from, in words, for the page's note on reading a chart."""
    return ", ".join(f"{name} {rule.case_sd:.1%}" for name, rule in RULES.items())


def _band(axes, judged: pd.Series, x0: float, x1: float, noise: float) -> None:
    """The judged level since the last step, give or take twice the measured noise: where ordinary nights fall."""
    inside = judged.iloc[math.ceil(x0) :]
    level = float(inside.median())
    axes.fill_between([x0, x1], level * (1 - 2 * noise), level * (1 + 2 * noise), color=_BAND, linewidth=0, zorder=1)


def _step(axes, edges: tuple[float, float, float], step: Step, judged: pd.Series, metric: str) -> None:
    """A step's line and label, and its threshold: the level after it had to pass to be reported, dashed from
    the step to the next one (``edges``: the step before, this one, the next)."""
    start, at, end = edges
    colour = _ACKNOWLEDGED if step.open and not step.failing else _WORSE if step.regression else _BETTER
    label = f"{'all cases ' if step.case == ALL_CASES else ''}{step.change:+.1%} (needs {step.threshold:.1%})"
    _vertical(axes, at, colour, label, "-", top=True)
    before = judged.iloc[math.ceil(start) : math.ceil(at)]
    # TFLOP/s moves against time, so its threshold is the time chart's; a step of every case is the run factor's,
    # which the judged series has taken out.
    if not len(before) or metric == "tflops" or step.case == ALL_CASES:
        return
    sign = 1 if step.regression else -1
    level = float(before.median()) * (1 + sign * step.threshold)
    axes.hlines(level, at, end, colors=colour, linestyles="--", linewidth=0.9, zorder=2)


def _vertical(axes, at: float, colour: str, label: str, style: str, top: bool) -> None:
    """A vertical line at ``at`` with its label above the plot (steps) or inside its top (environment changes),
    so a step and the driver update that caused it stay readable at one place."""
    axes.axvline(at, color=colour, linewidth=1.2, linestyle=style, zorder=2)
    place = {"y": 1.0, "va": "bottom"} if top else {"y": 0.98, "va": "top"}
    # A label in the right half ends at its line: one running past the axes would shrink them to make room.
    low, high = axes.get_xlim()
    place["ha"] = "right" if at > (low + high) / 2 else "left"
    axes.text(at, transform=axes.get_xaxis_transform(), s=label, color=colour, fontsize=6.5, parse_math=False, **place)


def _titles(rows: pd.DataFrame, metric: str, judged: pd.Series, shown: bool) -> dict[str, str]:
    """Per run page, the tooltip of its points: commit, date, subject, values, machine, escaped for SVG."""
    unit = METRICS[metric].unit
    titles = {}
    for i, row in rows.iterrows():
        subject = row.get("commit_subject")
        lines = [f"commit {str(row['commit'])[:12]}, {row['started_at']:%Y-%m-%d %H:%M} UTC"]
        lines += [str(subject)] if isinstance(subject, str) and subject else []
        value = f"{row[metric]:.4g} {unit}" + (f", judged {judged[i]:.4g}" if shown else "")
        machine = {name: row[name] if isinstance(row[name], str) else "?" for name in ("host", "driver", "torch")}
        lines += [value, "host {host}, driver {driver}, torch {torch}".format(**machine)]
        lines += [f"run {row['run_id']}: click to open"]
        titles[run_href(int(row["run_id"]))] = html.escape("\n".join(lines))
    return titles


def _svg(figure: Figure, titles: dict[str, str]) -> str:
    """The figure as an inline SVG element that scales to its box, each point's link with its tooltip."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", pad_inches=0.02, metadata={"Date": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, count=1, flags=re.S)
    svg = re.sub(r' width="[\d.]+pt" height="[\d.]+pt"', ' class="chart-svg"', svg, count=1)

    def link(match: re.Match) -> str:
        href = match.group(1)
        return f'<a href="{href}"><title>{titles.get(html.unescape(href), "")}</title>'

    return re.sub(r'<a xlink:href="([^"]*)" target="_blank">', link, svg)
