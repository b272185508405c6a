"""Tables of benchmark results (single-GPU combos and data-parallel scaling)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from meddpm.bench import ComboResult
from meddpm.distributed import DdpResult, scaling_efficiency

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


def ddp_table(results: Sequence[DdpResult]) -> pd.DataFrame:
    """One row per (combo, world size): slowest-rank time, throughput, scaling efficiency, overheads."""
    single = {r.combo: r for r in results if r.world_size == 1}
    rows = []
    for r in results:
        energies = [e for e in r.energy_j_per_iter if e is not None]
        peaks = [p for p in r.peak_allocated_bytes if p is not None]
        rows.append(
            {
                "combo": r.combo,
                "GPUs": r.world_size,
                "ms/iter": r.median_ms,
                "samples/s": r.samples_per_s,
                "efficiency": scaling_efficiency(r, single[r.combo]) if r.combo in single else float("nan"),
                "exposed comm ms": r.exposed_comm_ms,
                "peak GiB/rank": max(peaks) / GIB if peaks else float("nan"),
                "J/iter/GPU": sum(energies) / len(energies) if energies else float("nan"),
            }
        )
    return pd.DataFrame(rows)
