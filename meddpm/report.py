"""Tables and JSON files of benchmark results."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from meddpm.bench import ComboResult

GIB = 2**30


def results_table(results: Sequence[ComboResult]) -> pd.DataFrame:
    """One row per combo: time, spread, speedup vs baseline, memory, TFLOP/s, energy."""
    baseline = next((r.stats.median for r in results if r.combo == "baseline"), None)
    rows = []
    for r in results:
        s = r.stats
        rows.append(
            {
                "combo": r.combo,
                "ms/iter": s.median,
                "IQR ms": s.iqr,
                "rounds": s.rounds,
                "speedup": baseline / s.median if baseline else float("nan"),
                "peak GiB": r.peak_allocated_bytes / GIB if r.peak_allocated_bytes is not None else float("nan"),
                "TFLOP/s": r.tflops,
                "J/iter": r.energy_j_per_iter if r.energy_j_per_iter is not None else float("nan"),
                "warm-up s": sum(r.warmup_ms) / 1e3,
            }
        )
    return pd.DataFrame(rows).set_index("combo")


def format_table(table: pd.DataFrame) -> str:
    """The table as aligned text, with units fitting each column."""
    formats = {
        "ms/iter": "{:.1f}",
        "IQR ms": "{:.1f}",
        "rounds": "{:d}",
        "speedup": "{:.2f}x",
        "peak GiB": "{:.2f}",
        "TFLOP/s": "{:.2f}",
        "J/iter": "{:.1f}",
        "warm-up s": "{:.1f}",
    }
    shown = table.copy().astype(object)
    for column, fmt in formats.items():
        shown[column] = [("n/a" if pd.isna(v) else fmt.format(v)) for v in table[column]]
    return shown.to_string()


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON to ``path`` via a temporary file and a rename, so it is never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2, sort_keys=False, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
