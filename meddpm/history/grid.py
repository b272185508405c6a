"""The index's grid: every case of an architecture at a glance, one row per case, one cell per metric.

Each cell holds the case's latest value, its change against the last good run and against the stored
baseline (``baselines/<arch>.json``, where the report was given the folder), and a small trend line of its
runs, coloured by where its steps stand: an open regression red, an acknowledged one amber. The last good run
is, as for ``--compare-to=last-good``, the newest run before the first open regression of the architecture;
where none is open, the run before the newest, so the change reads as "since the night before".
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from meddpm.history.changepoints import ALL_CASES, Step
from meddpm.history.html_parts import case_anchor, case_label, page_name
from meddpm.history.series import METRICS
from meddpm.judge.baseline.store import baseline_path, load_baseline

GRID_METRICS = ("time", "memory", "energy")
TREND_RUNS = 30  # points in a cell's trend line


def baseline_values(directory: Path | None, arch: str) -> dict[str, dict[str, float]] | None:
    """Each case key's stored time, peak memory (GiB) and energy in ``directory``'s baseline of ``arch``; None
    where no folder was given or it holds no baseline of ``arch``."""
    if directory is None:
        return None
    stored = load_baseline(baseline_path(directory, arch), arch)
    if stored is None:
        return None
    values: dict[str, dict[str, float]] = {}
    for key, case in stored.cases.items():
        figures = {"time": case.median_ms, "memory": case.peak_allocated_bytes, "energy": case.energy_j_per_iter}
        values[key] = {m: float(v) * METRICS[m].scale for m, v in figures.items() if v is not None}
    return values


def grid_html(
    arch: str, frame: pd.DataFrame, steps: Sequence[Step], baseline: Mapping[str, Mapping[str, float]] | None
) -> str:
    """The grid of ``arch`` (``frame``: its rows of :func:`meddpm.history.series.case_frame`; ``baseline``: each
    case key's stored value per metric, None where no baseline was read)."""
    good_before = _last_good_start(frame, steps)
    cases = sorted(frame["case"].unique(), key=lambda c: ("/ddp" in c, c))
    metrics = [m for m in GRID_METRICS if frame[m].notna().any()]
    rows = []
    for case in cases:
        series = frame[frame["case"] == case]
        link = f'<a href="{page_name(arch)}.html#{case_anchor(case)}">{case_label(case)}</a>'
        cells = [_cell(series, metric, steps, arch, case, good_before, baseline) for metric in metrics]
        rows.append(f"<tr><td>{link}</td>{''.join(cells)}</tr>")
    head = "".join(f"<th>{metric} ({METRICS[metric].unit})</th>" for metric in metrics)
    return f'<table class="grid"><tr><th>case</th>{head}</tr>{"".join(rows)}</table>'


def _last_good_start(frame: pd.DataFrame, steps: Sequence[Step]) -> datetime.datetime | None:
    """Runs that started before this are good: the first open regression's start, else the newest run's."""
    failing = [s.started_at for s in steps if s.failing]
    if failing:
        return min(failing)
    return frame["started_at"].max() if not frame.empty else None


def _cell(
    series: pd.DataFrame,
    metric: str,
    steps: Sequence[Step],
    arch: str,
    case: str,
    good_before: datetime.datetime | None,
    baseline: Mapping[str, Mapping[str, float]] | None,
) -> str:
    values = series[["started_at", metric]].dropna()
    if values.empty:
        return '<td class="none">-</td>'
    latest = float(values[metric].iloc[-1])
    good = values[values["started_at"] < good_before] if good_before is not None else values.iloc[:0]
    stored = (baseline or {}).get(_baseline_key(case), {}).get(metric)
    changes = [
        f"{_change(latest, float(good[metric].iloc[-1]))} vs last good" if not good.empty else "no good run before",
        f"{_change(latest, stored)} vs baseline" if stored else "no baseline",
    ]
    mine = [s for s in steps if s.arch == arch and s.metric == metric and s.case in (case, ALL_CASES) and s.open]
    state = "open" if any(s.failing for s in mine) else "acknowledged" if mine else ""
    title = html.escape("; ".join(f"{s.describe()}" + (f" (acknowledged: {s.note})" if s.note else "") for s in mine))
    return (
        f'<td class="{state}" title="{title}">{latest:.4g}{_sparkline(values[metric].to_numpy()[-TREND_RUNS:])}'
        f'<br><span class="change">{" · ".join(changes)}</span></td>'
    )


def _baseline_key(case: str) -> str:
    """The baseline's key of a series: the case without the ``/p<N>`` of runs in worker processes."""
    head, _, last = case.rpartition("/")
    return head if last.startswith("p") and last[1:].isdigit() else case


def _change(value: float, against: float) -> str:
    return f"{value / against - 1:+.1%}" if against else "-"


def _sparkline(values: Sequence[float], width: int = 80, height: int = 18) -> str:
    """A small trend line of ``values`` in run order, as inline SVG (no script, nothing to load)."""
    if len(values) < 2:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = width / (len(values) - 1)
    points = " ".join(
        f"{i * step:.1f},{height - 1 - (v - low) / span * (height - 2):.1f}" for i, v in enumerate(values)
    )
    return (
        f'<svg width="{width}" height="{height}" aria-hidden="true">'
        f'<polyline fill="none" stroke="#2c3e50" stroke-width="1.2" points="{points}"/></svg>'
    )
