"""The Nsight Compute metrics the suite collects, with their names per GPU family.

Each metric has a short key used everywhere else (tables, baselines, expectations) and the
ncu metric that measures it on each family. Families differ: on Hopper the floating-point
tensor work runs as both ``hmma`` (mma.sync, as on Ampere) and ``hgmma`` (the warpgroup
``wgmma`` instructions cuDNN and cuBLAS use there), counted together by
``sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active`` (names checked against
``ncu --query-metrics --chip gh100`` of ncu 2025.3). ncu 2025.3 no longer lists Volta
(``--list-chips`` has no gv100): there the suite skips, and older ncu versions use the names below.

How a metric adds up over the kernels of an iteration (``kind``):

- ``count``: summed (cycles, instructions, bytes, duration);
- ``rate``: averaged, each kernel weighted by its duration (percentages, IPC, hit rates,
  stall ratios), so the figure describes the iteration's time, not its kernel count.

Several ncu metrics may serve one key (``names`` is a tuple); their values are added per
kernel before aggregation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from meddpm.errors import UserError

Family = Literal["volta", "turing", "ampere", "hopper", "blackwell"]
FAMILIES: tuple[Family, ...] = ("volta", "turing", "ampere", "hopper", "blackwell")
DURATION = "gpu__time_duration.sum"


@dataclass(frozen=True)
class Metric:
    """One figure of an iteration; ``names`` maps a family (or ``*`` for all) to ncu metrics."""

    key: str
    label: str
    kind: Literal["count", "rate"]
    group: str
    names: dict[str, tuple[str, ...]]

    @property
    def range_replay(self) -> bool:
        """Whether ncu can collect this over a whole range; SASS-patched metrics need kernel replay."""
        return self.group != "instmix"

    def ncu_names(self, family: Family) -> tuple[str, ...]:
        """The ncu metrics that measure this on ``family`` (empty where the family has none)."""
        return self.names.get(family, self.names.get("*", ()))


def _all(*names: str) -> dict[str, tuple[str, ...]]:
    return {"*": names}


def _pct(counter: str) -> str:
    return f"{counter}.avg.pct_of_peak_sustained_active"


def _stall(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


def _thread_ops(op: str) -> str:
    return f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"


METRICS: tuple[Metric, ...] = (
    Metric("duration_ns", "GPU time (ns)", "count", "core", _all(DURATION)),
    # Over a replayed range (range and app-range replay) elapsed cycles also count the idle gaps
    # between kernels, which ncu's launch interception widens; docs/ncu.md has the numbers.
    Metric("sm_cycles", "SM cycles elapsed (avg per SM)", "count", "core", _all("sm__cycles_elapsed.avg")),
    Metric("instructions", "warp instructions executed", "count", "core", _all("smsp__inst_executed.sum")),
    Metric(
        "ipc", "instructions per active cycle (per SM)", "rate", "core", _all("sm__inst_executed.avg.per_cycle_active")
    ),
    Metric(
        "tensor_pipe_pct",
        "tensor pipe utilisation (% of peak, active cycles)",
        "rate",
        "core",
        {
            "volta": (_pct("sm__pipe_tensor_cycles_active"),),
            "turing": (_pct("sm__pipe_tensor_cycles_active"),),
            "ampere": (_pct("sm__pipe_tensor_cycles_active"),),
            "hopper": (_pct("sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active"),),
            "blackwell": (_pct("sm__pipe_tensor_cycles_active"),),
        },
    ),
    Metric("fma_pipe_pct", "FMA pipe utilisation (%)", "rate", "core", _all(_pct("sm__pipe_fma_cycles_active"))),
    Metric(
        "alu_pipe_pct", "integer ALU pipe utilisation (%)", "rate", "core", _all(_pct("sm__pipe_alu_cycles_active"))
    ),
    Metric(
        "sm_throughput_pct",
        "SM throughput (% of peak)",
        "rate",
        "core",
        _all("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    ),
    Metric("l1_hit_pct", "L1 hit rate (%)", "rate", "core", _all("l1tex__t_sector_hit_rate.pct")),
    Metric("l2_hit_pct", "L2 hit rate (%)", "rate", "core", _all("lts__t_sector_hit_rate.pct")),
    Metric(
        "dram_throughput_pct",
        "DRAM throughput (% of peak)",
        "rate",
        "core",
        _all("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    ),
    Metric("dram_bytes", "DRAM bytes moved", "count", "core", _all("dram__bytes.sum")),
    Metric(
        "warps_active",
        "active warps per active cycle (per SM)",
        "rate",
        "core",
        _all("sm__warps_active.avg.per_cycle_active"),
    ),
    Metric(
        "stall_long_scoreboard", "stall: long scoreboard (per issue)", "rate", "stalls", _all(_stall("long_scoreboard"))
    ),
    Metric(
        "stall_math_pipe_throttle",
        "stall: math pipe throttle (per issue)",
        "rate",
        "stalls",
        _all(_stall("math_pipe_throttle")),
    ),
    Metric(
        "stall_branch_resolving",
        "stall: branch resolving (per issue)",
        "rate",
        "stalls",
        _all(_stall("branch_resolving")),
    ),
    # The instruction mix counts thread-level SASS instructions by kind; ncu gets these by
    # patching the kernels' code, which it can do per kernel only (not in range replay).
    Metric("inst_fp16", "thread instructions: FP16", "count", "instmix", _all(_thread_ops("fp16"))),
    Metric("inst_fp32", "thread instructions: FP32", "count", "instmix", _all(_thread_ops("fp32"))),
    Metric("inst_fp64", "thread instructions: FP64", "count", "instmix", _all(_thread_ops("fp64"))),
    Metric("inst_integer", "thread instructions: integer", "count", "instmix", _all(_thread_ops("integer"))),
    Metric("inst_memory", "thread instructions: load/store", "count", "instmix", _all(_thread_ops("memory"))),
    Metric("inst_control", "thread instructions: control", "count", "instmix", _all(_thread_ops("control"))),
    Metric("inst_conversion", "thread instructions: conversion", "count", "instmix", _all(_thread_ops("conversion"))),
    Metric("inst_bit", "thread instructions: bit manipulation", "count", "instmix", _all(_thread_ops("bit"))),
    Metric("inst_misc", "thread instructions: other", "count", "instmix", _all(_thread_ops("misc"))),
)
METRIC_BY_KEY = {m.key: m for m in METRICS}
GROUPS = ("core", "stalls", "instmix")
DEFAULT_GROUPS = ("core", "stalls")


def family_of(compute_capability: tuple[int, int]) -> Family:
    """The metric-naming family of a GPU with this compute capability."""
    major, minor = compute_capability
    if major < 7:
        raise UserError(
            f"compute capability {major}.{minor} is older than Nsight Compute supports (7.0+); run without --ncu"
        )
    if major == 7:
        return "volta" if minor < 5 else "turing"
    return {8: "ampere", 9: "hopper"}.get(major, "blackwell")


def select(groups: Sequence[str]) -> tuple[Metric, ...]:
    """The metrics of ``groups`` (duration always included), or a UserError naming a bad group."""
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise UserError(f"unknown ncu metric group {unknown[0]!r}; choose from {', '.join(GROUPS)}")
    return tuple(m for m in METRICS if m.key == "duration_ns" or m.group in groups)


def ncu_names(metrics: Sequence[Metric], family: Family) -> list[str]:
    """Every ncu metric name needed for ``metrics`` on ``family``, without repeats, in order."""
    return list(dict.fromkeys(n for m in metrics for n in m.ncu_names(family)))
