"""Stored runs as series: one row per run and case with each metric, and the environment's changes."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from meddpm.history.models import CaseResult, Run


@dataclass(frozen=True)
class Metric:
    """A measured figure with a trend: its column, unit, and the factor from stored value to shown value."""

    name: str
    column: str
    unit: str
    scale: float = 1.0


METRICS = {
    "time": Metric("time", "median_ms", "ms/iter"),
    "memory": Metric("memory", "peak_allocated_bytes", "GiB peak", 1 / 2**30),
    "energy": Metric("energy", "energy_j_per_iter", "J/iter"),
    "tflops": Metric("tflops", "tflops", "TFLOP/s"),
}
# The software and hardware whose changes are the usual cause of a step in every case.
ENVIRONMENT_FIELDS = ("driver", "torch", "cuda", "cudnn", "gpu_name")
# Runs that make up a trend: an A/B run measures a working tree against a revision, not the branch.
TREND_KINDS = ("suite", "bench")


def case_frame(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per (run, case): the run's time, commit and environment, every metric in its unit, and the
    spread of its time within the run (``time_low``, ``time_high``: :func:`time_spread`).

    Rows are ordered by the run's start, oldest first; runs of kinds outside :data:`TREND_KINDS` are left out.
    The ``case`` column names the series (:func:`series_case`).
    """
    rows = []
    for run in runs:
        if run.kind not in TREND_KINDS:
            continue
        for case in run.cases:
            row = {
                "run_id": run.id,
                "arch": run.arch,
                "kind": run.kind,
                "started_at": run.started_at,
                "commit": run.commit,
                "commit_subject": run.commit_subject,
                "branch": run.branch,
                "host": run.host,
                **{name: getattr(run, name) for name in ENVIRONMENT_FIELDS},
                "case": series_case(run, case),
            }
            for metric in METRICS.values():
                value = getattr(case, metric.column)
                row[metric.name] = None if value is None else float(value) * metric.scale
            row["time_low"], row["time_high"] = time_spread(case)
            rows.append(row)
    columns = ["run_id", "arch", "kind", "started_at", "commit", "commit_subject", "branch", "host"]
    columns += [*ENVIRONMENT_FIELDS, "case"]
    frame = pd.DataFrame(rows, columns=[*columns, *METRICS, "time_low", "time_high"])
    return frame.sort_values(["started_at", "run_id"], kind="stable").reset_index(drop=True)


def time_spread(case: CaseResult) -> tuple[float | None, float | None]:
    """The spread of a case's time within its run (ms): the range of its processes' medians where several
    processes measured it, else the quartiles of its rounds; None where it had fewer than two."""
    values = case.process_medians_ms if len(case.process_medians_ms) > 1 else case.samples_ms
    if len(values) < 2:
        return None, None
    if values is case.process_medians_ms:
        return float(min(values)), float(max(values))
    low, high = np.percentile(values, [25, 75])
    return float(low), float(high)


def series_case(run: Run, case: CaseResult) -> str:
    """The series a case's figures belong to: its key, with ``/p<N>`` where N worker processes measured it.

    A median of N processes' medians carries less of the machine-start noise than one process's rounds,
    so runs measured one way and the other are separate series. DDP cases (torchrun's ranks) keep their key.
    """
    processes = _processes(run, case)
    return case.case if processes == 1 or case.world_size is not None else f"{case.case}/p{processes}"


def _processes(run: Run, case: CaseResult) -> int:
    """The measuring processes (per side) that the run's file stated; for a run stored before files said
    so, those that measured the case."""
    return _stated_processes(run) or len(case.process_medians_ms) or 1


def run_processes(run: Run) -> int:
    """The measuring processes (per side) of a run: as its file stated, else the most that measured a case."""
    return _stated_processes(run) or max((len(case.process_medians_ms) for case in run.cases), default=0) or 1


def _stated_processes(run: Run) -> int | None:
    stated = (run.options or {}).get("processes")
    if isinstance(stated, int) and not isinstance(stated, bool) and stated >= 1:
        return stated
    return None


@dataclass(frozen=True)
class EnvironmentChange:
    """A field of the environment that differs from the previous run of the same architecture."""

    arch: str
    run_id: int
    started_at: datetime.datetime
    commit: str
    field: str
    before: str
    after: str

    def describe(self) -> str:
        """E.g. ``driver 580.95 -> 580.159``."""
        return f"{self.field} {self.before} -> {self.after}"


def environment_changes(frame: pd.DataFrame) -> list[EnvironmentChange]:
    """Every change of driver, torch, CUDA, cuDNN or GPU between consecutive runs of an architecture.

    An unknown value (an old file that did not record the driver, say) is no change: only two known,
    different values are.
    """
    changes = []
    runs = frame.drop_duplicates("run_id")
    for arch, group in runs.groupby("arch", sort=True):
        last: dict[str, str] = {}
        for row in group.itertuples(index=False):
            for field in ENVIRONMENT_FIELDS:
                value = getattr(row, field)
                if value is None or pd.isna(value):
                    continue
                value = str(value)
                if field in last and last[field] != value:
                    changes.append(
                        EnvironmentChange(
                            str(arch), int(row.run_id), row.started_at, str(row.commit), field, last[field], value
                        )
                    )
                last[field] = value
    return changes
