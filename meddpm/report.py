"""Tables and JSON files of benchmark results."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from meddpm.bench import ComboResult

GIB = 2**30


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


def results_table(results: Sequence[ComboResult]) -> pd.DataFrame:
    """One row per combo: time, spread, speedup vs baseline, memory, TFLOP/s, energy, clocks."""
    baseline = next((r.stats.median for r in results if r.combo == "baseline"), None)
    rows = []
    for r in results:
        s = r.stats
        notes = ([] if r.reliable else [f"unreliable ({s.rel_iqr:.1%} > {r.rel_iqr_target:.0%})"]) + [
            f"throttled: {', '.join(r.throttle_reasons)}"
        ] * bool(r.throttle_reasons)
        rows.append(
            {
                "combo": r.combo,
                "ms/iter": s.median,
                "IQR ms": s.iqr,
                "rounds": s.rounds,
                "speedup": baseline / s.median if baseline else float("nan"),
                "peak GiB": _nan(r.peak_allocated_bytes) / GIB,
                "TFLOP/s": r.tflops,
                "J/iter": _nan(r.energy_j_per_iter),
                "W": _nan(r.mean_power_w),
                "SM MHz min": _nan(r.gpu_summary()["sm_clock_min_mhz"]),
                "warm-up s": sum(r.warmup_ms) / 1e3,
                "note": "; ".join(notes),
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
        "W": "{:.0f}",
        "SM MHz min": "{:.0f}",
        "warm-up s": "{:.1f}",
    }
    shown = table.copy().astype(object)
    for column, fmt in formats.items():
        if column in table:
            shown[column] = [("n/a" if pd.isna(v) else fmt.format(v)) for v in table[column]]
    return shown.to_string()
