"""What the detector judges: each case's values less the movement every case of the architecture shared that run.

The change points (:mod:`meddpm.history.changepoints`) judge each case's log values less the run factor, the
median deviation of the run's cases from their levels, since between machine starts every case moves together
by about 1.2 %. The charts draw that series beside the values measured, so a reader sees why a point was
flagged or not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from meddpm.history.changepoints import RULES, matrix_steps, series_table


def judged_column(metric: str) -> str:
    """The column of ``metric``'s values as the detector judges them."""
    return f"{metric}_judged"


def shared_column(metric: str) -> str:
    """The column of the run's shared movement in ``metric`` (relative; NaN where the run had too few cases)."""
    return f"{metric}_shared"


def with_judged(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (:func:`~meddpm.history.series.case_frame`) with, per metric the detector judges, each value
    less its run's factor (:func:`judged_column`) and that factor (:func:`shared_column`).

    The factor is found again, as :func:`~meddpm.history.changepoints.detect` finds it (a few milliseconds per
    architecture and metric), rather than carried out of the detector's report of steps.
    """
    out = frame.copy()
    for metric, rule in RULES.items():
        shared = pd.Series(np.nan, index=frame.index)
        for _, rows in frame.groupby("arch", sort=False):
            table = series_table(rows, metric)
            if table.empty:
                continue
            factor = matrix_steps(np.log(table.to_numpy(dtype=float)), rule).factor
            by_run = pd.Series(np.expm1(factor), index=table.index)
            shared[rows.index] = rows["run_id"].map(by_run).to_numpy()
        out[shared_column(metric)] = shared
        # A run without a factor is judged as measured, as the detector judges it.
        out[judged_column(metric)] = frame[metric] / (1 + shared.fillna(0.0))
    return out
