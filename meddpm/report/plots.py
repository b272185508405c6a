"""Charts of a run, drawn with matplotlib (headless, straight to PNG)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def kernel_mix_chart(shares: pd.DataFrame, path: Path, title: str) -> Path:
    """A stacked bar per combo of GPU time share by kernel category (like the paper's kernel-mix figure).

    ``shares`` has categories as rows and combos as columns (see :func:`meddpm.report.tables.kernel_mix_table`).
    """
    import matplotlib

    matplotlib.use("Agg")  # no display on runners
    import matplotlib.pyplot as plt

    order = shares.sum(axis=1).sort_values(ascending=False).index
    fig, ax = plt.subplots(figsize=(4.0 + 1.1 * shares.shape[1], 4.8))
    (shares.loc[order].T * 100).plot.bar(stacked=True, ax=ax, width=0.7, colormap="tab20", edgecolor="white")
    ax.set_ylabel("share of GPU kernel time (%)")
    ax.set_ylim(0, 100)
    ax.set_xlabel("")
    ax.set_title(title, fontsize=10)
    ax.legend(title="kernel category", bbox_to_anchor=(1.02, 1), loc="upper left", fontsize=8)
    ax.tick_params(axis="x", rotation=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
