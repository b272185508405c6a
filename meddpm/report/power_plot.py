"""A picture of each combo's energy block: the card's power and SM clock over time, next to the results.

A throttled run shows at a glance: power flat at the limit while the SM clock sags. Each row
draws the instant power the sampler read, the counter's own power (each step's energy over its
duration, as steps: what the counter can resolve), the SM clock on the right axis, the power
limit, and the measured windows (shaded, edges dotted).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from meddpm.measure.campaign.interleaved import ComboResult

if TYPE_CHECKING:
    import matplotlib.axes


def power_chart(results: Sequence[ComboResult], path: Path, title: str) -> Path:
    """Write one row per combo with an energy block (its first block) to ``path`` (PNG); returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # no display on runners
    import matplotlib.pyplot as plt

    shown = [r for r in results if r.energy_blocks]
    if not shown:
        raise ValueError("no combo has an energy block to draw")
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, 0.6 + 2.2 * len(shown)), squeeze=False)
    for ax, result in zip(axes[:, 0], shown):
        _draw(ax, result)
    axes[-1, 0].set_xlabel("seconds from the first window's start")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _draw(ax: matplotlib.axes.Axes, result: ComboResult) -> None:
    block = result.energy_blocks[0]
    t = [row[0] for row in block.trace]
    power = [(row[0], row[1]) for row in block.trace if row[1] is not None]
    if power:
        ax.plot(*zip(*power), color="tab:red", linewidth=0.7, label="instant power")
    steps = _counter_power(block.trace)
    if steps:
        ax.step(*zip(*steps), where="pre", color="black", linewidth=1.0, label="counter: step energy / step time")
    limits = {s.power_limit_w for s in result.gpu_states}
    for limit in limits:
        ax.axhline(limit, color="tab:red", linestyle="--", linewidth=0.8, label=f"power limit {limit:.0f} W")
    end = sum(w.gpu_s for w in block.windows)
    ax.axvspan(0, end, color="tab:blue", alpha=0.06, label="measured windows")
    edge = 0.0
    for w in block.windows:
        ax.axvline(edge, color="tab:blue", linestyle=":", linewidth=0.8)
        edge += w.gpu_s
    ax.axvline(edge, color="tab:blue", linestyle=":", linewidth=0.8)
    ax.set_ylabel("W")
    ax.set_xlim(min(t, default=0.0), max(t, default=end))
    clock = [(row[0], row[2]) for row in block.trace if row[2] is not None]
    if clock:
        right = ax.twinx()
        right.plot(*zip(*clock), color="tab:green", linewidth=0.8, label="SM clock")
        right.set_ylabel("SM MHz", color="tab:green")
    e = result.energy
    figures = f"{e.j_per_iter:.4g} J/iter (bound {e.quantisation:.2%}), {result.mean_power_w:.0f} W mean" if e else ""
    ax.set_title(f"{result.combo}: {figures}", fontsize=9, loc="left")
    ax.legend(loc="lower left", fontsize=7, ncol=3)


def _counter_power(trace: Sequence[tuple]) -> list[tuple[float, float]]:
    """(time of each counter update, mean power over the step it closes)."""
    updates = [(row[0], row[3]) for prev, row in zip(trace, trace[1:]) if row[3] != prev[3]]
    return [(t1, (e1 - e0) / (t1 - t0)) for (t0, e0), (t1, e1) in zip(updates, updates[1:]) if t1 > t0]
