"""Tables of benchmark results (single-GPU combos and data-parallel scaling)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd

from meddpm.measure.campaign.interleaved import ComboResult
from meddpm.measure.processes.ddp import DdpResult, scaling_efficiency

GIB = 2**30


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


def significant(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant figures and no exponent: 0.00412, 41.2, 412, 4120.

    A fixed number of decimals showed the tiny preset's CPU throughput (a few GFLOP/s) as 0.00.
    """
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def _spread_note(r: ComboResult, on_gpu: bool) -> str:
    """The note of a combo whose rounds spread beyond the target: a warning on a GPU, expected on a CPU."""
    if r.reliable:
        return ""
    if on_gpu:
        return f"unreliable ({r.stats.rel_iqr:.1%} > {r.rel_iqr_target:.0%})"
    return f"spread {r.stats.rel_iqr:.1%} (usual on a shared CPU)"


def results_table(results: Sequence[ComboResult], on_gpu: bool = True) -> pd.DataFrame:
    """One row per combo: time, spread, speedup vs baseline, memory, TFLOP/s, energy, clocks.

    ``on_gpu`` False words a wide spread as what a CPU shared with other processes gives, not as a fault.
    """
    baseline = next((r.stats.median for r in results if r.combo == "baseline"), None)
    rows = []
    for r in results:
        s = r.stats
        notes = [note] if (note := _spread_note(r, on_gpu)) else []
        notes += [f"throttled: {', '.join(r.throttle_reasons)}"] * bool(r.throttle_reasons)
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


def energy_table(results: Sequence[ComboResult]) -> pd.DataFrame:
    """One row per combo with energy: per iteration (with its counter bound and spread), mean power,
    per training volume, per full reverse diffusion (estimated at the training step's J/FLOP), TFLOP/J.
    """
    rows = []
    for r in results:
        e = r.energy
        if e is None:
            continue
        blocks = r.energy_blocks
        first = blocks[0].windows
        windows = f"{len(blocks)} processes" if len(blocks) > 1 else f"{len(first)} x {first[0].iterations} it."
        rows.append(
            {
                "combo": r.combo,
                "J/iter": e.j_per_iter,
                "bound %": 100 * e.quantisation,
                "spread %": 100 * e.spread,
                "W": _nan(r.mean_power_w),
                "J/volume": _nan(r.energy_j_per_volume),
                "kJ/sample est.": _nan(r.sample_energy_j_estimate) / 1e3,
                "TFLOP/J": _nan(r.tflop_per_j),
                "period ms": _nan(r.energy_period_ms),
                "windows": windows,
            }
        )
    return pd.DataFrame(rows).set_index("combo") if rows else pd.DataFrame()


def format_table(table: pd.DataFrame) -> str:
    """The table as aligned text, with units fitting each column."""
    formats: dict[str, str | Callable[[float], str]] = {
        "ms/iter": "{:.1f}",
        "IQR ms": "{:.1f}",
        "rounds": "{:d}",
        "speedup": "{:.2f}x",
        "peak GiB": "{:.2f}",
        "TFLOP/s": significant,
        "J/iter": "{:.1f}",
        "W": "{:.0f}",
        "bound %": "{:.2f}",
        "spread %": "{:.2f}",
        "J/volume": "{:.1f}",
        "kJ/sample est.": "{:.2f}",
        "TFLOP/J": significant,
        "period ms": "{:.0f}",
        "SM MHz min": "{:.0f}",
        "warm-up s": "{:.1f}",
    }
    shown = table.copy().astype(object)
    for column, fmt in formats.items():
        if column in table:
            text = fmt if callable(fmt) else fmt.format
            shown[column] = [("n/a" if pd.isna(v) else text(v)) for v in table[column]]
    return shown.to_string()


def ddp_table(results: Sequence[DdpResult]) -> pd.DataFrame:
    """One row per (combo, world size): slowest-rank time, throughput, scaling efficiency, overheads.

    The ranks are counted as GPUs under NCCL, and as processes otherwise (gloo on the CPU).
    """
    single = {r.combo: r for r in results if r.world_size == 1}
    unit = "GPU" if all(r.backend == "nccl" for r in results) else "process"
    rows = []
    for r in results:
        peak, energy = r.max_peak_allocated_bytes, r.mean_energy_j_per_iter
        rows.append(
            {
                "combo": r.combo,
                "GPUs" if unit == "GPU" else "processes": r.world_size,
                "ms/iter": r.median_ms,
                "samples/s": r.samples_per_s,
                "efficiency": scaling_efficiency(r, single[r.combo]) if r.combo in single else float("nan"),
                "exposed comm ms": r.exposed_comm_ms,
                "peak GiB/rank": peak / GIB if peak is not None else float("nan"),
                f"J/iter/{unit}": energy if energy is not None else float("nan"),
            }
        )
    return pd.DataFrame(rows)


# Columns of the Nsight Compute table: (metric key, column title, scale).
_NCU_COLUMNS = (
    ("duration_ns", "GPU ms", 1e-6),
    ("sm_cycles", "SM cycles (M)", 1e-6),
    ("instructions", "warp inst (M)", 1e-6),
    ("ipc", "IPC", 1.0),
    ("tensor_pipe_pct", "tensor %", 1.0),
    ("fma_pipe_pct", "FMA %", 1.0),
    ("alu_pipe_pct", "ALU %", 1.0),
    ("sm_throughput_pct", "SM thr %", 1.0),
    ("l1_hit_pct", "L1 hit %", 1.0),
    ("l2_hit_pct", "L2 hit %", 1.0),
    ("dram_throughput_pct", "DRAM %", 1.0),
    ("dram_bytes", "DRAM GB", 1e-9),
    ("warps_active", "warps/cycle", 1.0),
    ("stall_long_scoreboard", "stall LSB", 1.0),
    ("stall_math_pipe_throttle", "stall math", 1.0),
    ("stall_branch_resolving", "stall branch", 1.0),
)
_INSTRUCTION_MIX = ("fp16", "fp32", "fp64", "integer", "memory", "control", "conversion", "bit", "misc")


def ncu_table(totals: dict[str, dict[str, float]], reference: str = "baseline") -> pd.DataFrame:
    """One row per combo of Nsight Compute figures per iteration, with cycles and instructions vs ``reference``.

    ``totals`` maps a combo to its per-iteration totals (metric key -> value). The instruction
    mix, where collected, shows as each kind's share of thread instructions.
    """
    rows = []
    for combo, t in totals.items():
        row: dict[str, object] = {"combo": combo}
        for key, title, scale in _NCU_COLUMNS:
            if key in t:
                row[title] = t[key] * scale
        ref = totals.get(reference)
        for key, title in (("sm_cycles", "cycles vs ref"), ("instructions", "inst vs ref")):
            if ref and key in t and ref.get(key):
                row[title] = t[key] / ref[key]
        mix = {kind: t[f"inst_{kind}"] for kind in _INSTRUCTION_MIX if f"inst_{kind}" in t}
        if mix and sum(mix.values()):
            row.update({f"{kind} %": 100 * v / sum(mix.values()) for kind, v in mix.items()})
        rows.append(row)
    return pd.DataFrame(rows).set_index("combo")


def kernel_mix_table(mixes: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Share of GPU time per kernel category (rows) and combo (columns), from each combo's mix."""
    return pd.DataFrame({combo: mix["share"] for combo, mix in mixes.items()}).fillna(0.0)
