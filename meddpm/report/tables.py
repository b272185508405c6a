"""Tables of benchmark results (single-GPU combos and data-parallel scaling)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


# A case of a results document: an entry of the suite's "cases" (CaseRecord.payload) or the bench's
# "results" (ComboResult.as_dict).
Case = Mapping[str, Any]


@dataclass(frozen=True)
class Column:
    """A column of a results table: its title, its figure from a case, and how that figure is shown.

    ``value`` gets the case and every case of the table (a speedup is relative to another row); None is
    a figure not measured. ``digits`` rounds the figure (the Markdown summary shows it rounded); ``text``
    formats it as a string, "" where there is none (a column shown in its own format in a table printed
    with one float format).
    """

    title: str
    value: Callable[[Case, Sequence[Case]], Any]
    digits: int | None = None
    text: str | None = None

    def cell(self, case: Case, cases: Sequence[Case]) -> Any:
        """The column's entry for ``case``."""
        value = self.value(case, cases)
        if self.text is not None:
            return "" if value is None else self.text.format(value)
        return value if value is None or self.digits is None else round(value, self.digits)


@dataclass(frozen=True)
class TableProfile:
    """The columns one results table shows, and the one that labels its rows (None: numbered rows)."""

    columns: tuple[Column, ...]
    index: str | None = None


def _field(name: str) -> Callable[[Case, Sequence[Case]], Any]:
    return lambda case, _: case.get(name)


def _stat(name: str) -> Callable[[Case, Sequence[Case]], Any]:
    return lambda case, _: case["stats"][name]


def _percent(name: str) -> Callable[[Case, Sequence[Case]], Any]:
    return lambda case, _: None if case.get(name) is None else 100 * case[name]


def _speedup(case: Case, cases: Sequence[Case]) -> float:
    baseline = next((c["stats"]["median"] for c in cases if c["combo"] == "baseline"), None)
    return baseline / case["stats"]["median"] if baseline else float("nan")


def _peak_gib(case: Case, _: Sequence[Case]) -> float | None:
    peak = case.get("peak_allocated_bytes")
    return None if peak is None else peak / GIB


def _warmup_s(case: Case, _: Sequence[Case]) -> float:
    return sum(case["warmup_ms"]) / 1e3


def _note(case: Case, _: Sequence[Case]) -> str:
    """Why a row's figures need care: a spread above its target, a card that throttled."""
    notes = [] if case["reliable"] else [f"unreliable ({case['stats']['rel_iqr']:.1%} > {case['rel_iqr_target']:.0%})"]
    if case.get("throttle_reasons"):
        notes.append(f"throttled: {', '.join(case['throttle_reasons'])}")
    return "; ".join(notes)


def _cpu_note(case: Case, _: Sequence[Case]) -> str:
    """A wide spread on a CPU is what a machine shared with other processes gives, not a fault to warn of."""
    return "" if case["reliable"] else f"spread {case['stats']['rel_iqr']:.1%} (usual on a shared CPU)"


def _processes(case: Case, _: Sequence[Case]) -> int:
    """Processes that measured the case (per side in an A/B run); 1: the measuring process itself."""
    return len(case.get("process_medians_ms") or []) or 1


def _case_label(case: Case, _: Sequence[Case]) -> str:
    return f"{case['arch']} {case['preset']} b{case['batch_size']}"


def _pytest_id(case: Case, _: Sequence[Case]) -> str:
    return f"{case['arch']}-{case['preset']}-{case['combo']}-b{case['batch_size']}"


_COMBO = Column("combo", _field("combo"))
_ROUNDS = Column("rounds", _stat("rounds"))
_OUTCOME = Column("outcome", _field("outcome"))
# meddpm-bench's table: one row per combo, printed by format_table (which gives each column its format).
BENCH_TABLE = TableProfile(
    (
        _COMBO,
        Column("ms/iter", _stat("median")),
        Column("IQR ms", _stat("iqr")),
        _ROUNDS,
        Column("speedup", _speedup),
        Column("peak GiB", _peak_gib),
        Column("TFLOP/s", _field("tflops")),
        Column("J/iter", _field("energy_j_per_iter")),
        Column("W", _field("mean_power_w")),
        Column("SM MHz min", _field("sm_clock_min_mhz")),
        Column("warm-up s", _warmup_s),
        Column("note", _note),
    ),
    index="combo",
)
# The same on a CPU, where a wide spread is worded as expected rather than as unreliable.
BENCH_CPU_TABLE = TableProfile(
    tuple(Column("note", _cpu_note) if c.title == "note" else c for c in BENCH_TABLE.columns), index="combo"
)
# The suite's summary.md: every case of the run, rounded for Markdown; "detectable %" is the smallest time
# change the case's verdict could have flagged (its threshold or its test's power).
SUMMARY_TABLE = TableProfile(
    (
        Column("case", _case_label),
        _COMBO,
        Column("ms/iter", _stat("median"), digits=1),
        Column("IQR %", lambda case, _: 100 * case["stats"]["rel_iqr"], digits=2),
        _ROUNDS,
        Column("TFLOP/s", _field("tflops"), digits=1),
        Column("% of peak", _percent("fraction_of_peak"), digits=1),
        Column("peak GiB", _peak_gib, digits=2),
        Column("J/iter", _field("energy_j_per_iter"), digits=1),
        Column("SM MHz min", _field("sm_clock_min_mhz")),
        Column("processes", _processes),
        Column("detectable %", _percent("detectable_time_change"), digits=1),
        _OUTCOME,
    )
)
# The suite's terminal summary, printed with two decimals for every float column.
TERMINAL_TABLE = TableProfile(
    (
        Column("case", _pytest_id),
        Column("ms/iter", _stat("median")),
        Column("rel IQR", _stat("rel_iqr"), text="{:.2%}"),
        _ROUNDS,
        Column("TFLOP/s", _field("tflops")),
        Column("J/iter", _field("energy_j_per_iter")),
        Column("processes", _processes),
        Column("detectable", _field("detectable_time_change"), text="{:.1%}"),
        _OUTCOME,
    )
)


def results_table(cases: Sequence[ComboResult | Case], profile: TableProfile = BENCH_TABLE) -> pd.DataFrame:
    """One row per case with the columns of ``profile``: the bench's, the summary's or the terminal's.

    ``cases`` are results-document cases, or ComboResults (turned into theirs).
    """
    rows = [c.as_dict() if isinstance(c, ComboResult) else c for c in cases]
    titles = [column.title for column in profile.columns]
    table = pd.DataFrame(
        [{column.title: column.cell(c, rows) for column in profile.columns} for c in rows], columns=titles
    )
    return table.set_index(profile.index) if profile.index else table


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

    The ranks are counted as GPUs under NCCL, and as processes otherwise (gloo on the CPU). "sync ms" is
    what the gradient sync adds to an iteration at two ranks or more: its own work (DDP's bucket hooks, or
    packing every gradient into one buffer and back) and the communication backward did not hide; so it is
    not named communication. At one rank no gradient is communicated, and it reads n/a (docs/ddp.md).
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
                "sync ms": float("nan") if r.exposed_comm_ms is None else r.exposed_comm_ms,  # n/a: one rank
                "peak GiB/rank": peak / GIB if peak is not None else float("nan"),
                f"J/iter/{unit}": energy if energy is not None else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def stop_reasons(results: Iterable[ComboResult]) -> str:
    """Why each combo's rounds stopped, each reason once with its combos: ``converged after 5 rounds (baseline);
    time budget of 300 s spent after 257 rounds (fast)``. The first combo's reason alone read as the whole run's."""
    combos: dict[str, list[str]] = {}
    for r in results:
        combos.setdefault(r.stop_reason or "not stopped", []).append(r.combo)
    return "; ".join(f"{reason} ({', '.join(names)})" for reason, names in combos.items())


def ddp_text(results: Sequence[DdpResult]) -> str:
    """:func:`ddp_table` as printed by the bench and the suite: two decimals, and n/a where a figure does not apply."""
    return ddp_table(results).to_string(index=False, float_format=lambda v: f"{v:.2f}", na_rep="n/a")


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
