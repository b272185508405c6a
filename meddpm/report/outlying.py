"""A process that stood apart from its side, and whether the card's state over its rounds accounts for it.

A verdict's unit is the process (docs/statistics.md), so one process far from its siblings widens the interval of its
case's A/B on its own (docs/statistics.md has a night where it did). The card is the usual suspect where the step
runs at the power cap: its SM clock, and with it the time of an iteration, follows the die's temperature.
Each process therefore keeps its median with the clock and temperature of its own rounds (``process_cards`` of a
case in the results file), and a process that stands apart is said with them.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from meddpm.measure.campaign.protocol import MeasuringCampaign
from meddpm.measure.processes.campaign import ProcessCampaign

# Below this share a process is not worth a line, however quiet its siblings: changes this small are what the
# stop rules already resolve.
LEAST_SHARE = 0.01
# How many robust standard deviations (1.4826 x the median absolute deviation) of the case's processes, each read
# against its side's median, a process must lie away from its side before it is said.
SPREAD_FACTOR = 4.0
# A side needs three processes for its median to stand for the others when one of them is far off.
LEAST_SIDE = 3


def process_card(median_ms: float, gpu_summary: Mapping[str, float | None], side: str, index: int) -> dict[str, Any]:
    """One process's entry of a case's ``process_cards``: its side ("A", "B", or "" outside an A/B), its place in
    the side (from 1), its median and the card's SM clock mean and highest temperature over its rounds."""
    return {
        "side": side,
        "process": index,
        "median_ms": round(median_ms, 4),
        "sm_clock_mean_mhz": _rounded(gpu_summary.get("sm_clock_mean_mhz")),
        "temperature_max_c": _rounded(gpu_summary.get("temperature_max_c")),
    }


def process_cards(campaign: MeasuringCampaign, combo: str) -> list[dict[str, Any]]:
    """Each worker process's median and card state for ``combo``, side by side in an A/B (A: the first source)."""
    sources = campaign.sources if isinstance(campaign, ProcessCampaign) else [None]
    names = ["A", "B"] if len(sources) == 2 else [""]
    return [
        process_card(run.stats.median, run.gpu_summary(), name, index)
        for name, source in zip(names, sources)
        if (runs := campaign.measurements(source)[combo]).in_workers
        for index, run in enumerate(runs.runs, 1)
    ]


def outlying_processes(subject: str, cards: Sequence[Mapping[str, Any]]) -> list[str]:
    """One sentence per process of ``subject`` that lies apart from its side: how far, and the card's state against
    its side's others. Sides of fewer than three processes are not read; an A/B's sides are read apart, so a change
    of the code moves no process away from its own side."""
    by_side: dict[str, list[Mapping[str, Any]]] = {}
    for card in cards:
        by_side.setdefault(card["side"], []).append(card)
    read = {side: side_cards for side, side_cards in by_side.items() if len(side_cards) >= LEAST_SIDE}
    medians = {side: statistics.median(c["median_ms"] for c in side_cards) for side, side_cards in read.items()}
    residuals = {
        (side, card["process"]): card["median_ms"] / medians[side] - 1
        for side, side_cards in read.items()
        for card in side_cards
    }
    if not residuals:
        return []
    spread = 1.4826 * statistics.median(abs(r) for r in residuals.values())
    bar = max(LEAST_SHARE, SPREAD_FACTOR * spread)
    lines = []
    for side, side_cards in read.items():
        for card in side_cards:
            residual = residuals[(side, card["process"])]
            if abs(residual) > bar:
                others = [c for c in side_cards if c is not card]
                lines.append(_sentence(subject, card, residual, medians[side], others, bar))
    return lines


def _sentence(
    subject: str,
    card: Mapping[str, Any],
    residual: float,
    side_median: float,
    others: Sequence[Mapping[str, Any]],
    bar: float,
) -> str:
    who = f"side {card['side']}'s process {card['process']}" if card["side"] else f"process {card['process']}"
    head = (
        f"{subject}: {who} read {card['median_ms']:.4g} ms, {abs(residual):.1%} "
        f"{'below' if residual < 0 else 'above'} its side's median of {side_median:.4g} ms (said from {bar:.1%} on)"
    )
    clock = card.get("sm_clock_mean_mhz")
    other_clocks = [c["sm_clock_mean_mhz"] for c in others if c.get("sm_clock_mean_mhz") is not None]
    if not clock or not other_clocks:  # None, or 0 where NVML had no reading
        return f"{head}; no clock was read"
    typical = statistics.median(other_clocks)
    temperatures = [c["temperature_max_c"] for c in others if c.get("temperature_max_c") is not None]
    heat = (
        f", up to {card['temperature_max_c']:.0f} °C against {statistics.median(temperatures):.0f} °C"
        if card.get("temperature_max_c") is not None and temperatures
        else ""
    )
    # A step's time moves at most as one over the SM clock, less where memory rather than the SMs bounds it: so
    # this is the most of the process's difference its clock can explain.
    share = (typical / clock - 1) / residual
    if share <= 0:
        cause = "its clock stayed or moved the other way: not the card; look at what the process ran (its kernels)"
    elif share < 0.5:
        cause = f"its clock can account for {share:.0%} of it at most: look at what the process ran (its kernels)"
    else:
        cause = f"its clock can account for {min(share, 1):.0%} of it at most: the card may be why"
    return f"{head}; SM clock {clock:.0f} MHz on average against {typical:.0f} MHz{heat}: {cause}"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 1)
