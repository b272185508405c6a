"""One training iteration profiled: what ran, how often and how long, and the counts a gate can judge.

On a GPU the rows are the iteration's CUDA kernels (with memory copies and sets), from
:func:`~meddpm.measure.profiling.kernel_mix.profile_kernels`; on a CPU its aten operator calls, each
with its own (self) time, so the rows of nested calls add up. Every row is put in a group of
:data:`~meddpm.measure.profiling.kernel_mix.GROUPS` by name.

The counts (:func:`iteration_counts`) are what does not depend on the clock: launches (kernels on a
GPU, aten calls on a CPU) in all and per group, bytes allocated in the iteration (the CUDA
allocator's cumulative figure on a GPU, the profiler's allocation records on a CPU) and the
model's FLOPs where the caller knows them. A CPU's aten calls and allocations are the same in every
process of the same code (``tests/test_iteration_profile.py``); a GPU's kernels may differ by the
algorithms cuDNN and Inductor choose per process, which the stored spread covers (docs/explain.md).

Profiling runs one extra iteration after the timed ones, and the profiler leaves nothing behind
when its block ends.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from meddpm.measure.profiling.kernel_mix import GROUPS, group_of, profile_kernels

LAUNCHES = "launches"
BYTES_ALLOCATED = "bytes_allocated"
FLOPS = "flops"
_ALLOCATED = "allocated_bytes.all.allocated"  # the CUDA allocator's cumulative bytes allocated


@dataclass(frozen=True)
class ProfileRow:
    """One kernel (GPU) or aten operator (CPU) of an iteration: its group, calls and time in milliseconds."""

    name: str
    category: str
    count: int
    ms: float


@dataclass(frozen=True)
class IterationProfile:
    """One profiled iteration: its rows, largest time first, and its counts (see :func:`iteration_counts`)."""

    rows: tuple[ProfileRow, ...]
    counts: dict[str, int]


def launch_key(group: str) -> str:
    """The counts' key of one group's launches: ``launches.convolution``."""
    return f"{LAUNCHES}.{group}"


def iteration_counts(rows: Sequence[ProfileRow], bytes_allocated: int | None, flops: int | None) -> dict[str, int]:
    """Launches in all and per group (every group, 0 where none ran), bytes allocated and FLOPs where known."""
    counts = {LAUNCHES: sum(r.count for r in rows)}
    counts.update({launch_key(g): sum(r.count for r in rows if r.category == g) for g in GROUPS})
    if bytes_allocated is not None:
        counts[BYTES_ALLOCATED] = bytes_allocated
    if flops is not None:
        counts[FLOPS] = flops
    return counts


def profile_iteration(step: Callable[[], object], device: torch.device, flops: int | None = None) -> IterationProfile:
    """Profile one call of ``step`` (a warmed-up training iteration) on ``device``; ``flops``: its FLOPs, if known."""
    if device.type == "cuda":
        rows, allocated = _cuda_rows(step, device)
    else:
        rows, allocated = _cpu_rows(step)
    rows = sorted(rows, key=lambda r: (-r.ms, r.name))
    return IterationProfile(tuple(rows), iteration_counts(rows, allocated, flops))


def _cuda_rows(step: Callable[[], object], device: torch.device) -> tuple[list[ProfileRow], int]:
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_stats(device).get(_ALLOCATED, 0)
    kernels = profile_kernels(step)
    allocated = torch.cuda.memory_stats(device).get(_ALLOCATED, 0) - before
    rows = [
        ProfileRow(k.kernel, group_of(k.kernel), round(k.launches), k.us / 1e3) for k in kernels.itertuples(index=False)
    ]
    return rows, allocated


def _cpu_rows(step: Callable[[], object]) -> tuple[list[ProfileRow], int]:
    from torch.profiler import ProfilerActivity, profile

    # Kineto prints "USDT: ... profiler_start" and "profiler_stop" on stderr for every profile on a CPU, at the
    # highest of its levels: only a level above them (read when the profiler first starts) keeps stderr for our
    # lines. A level the user set stays.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    rows = [
        ProfileRow(e.key, group_of(e.key), e.count, e.self_cpu_time_total / 1e3)
        for e in prof.key_averages()
        if e.key.startswith("aten::")
    ]
    # The allocation records (frees are negative); the public events fold them into the operators' net usage.
    records = prof.profiler.kineto_results.events()
    allocated = sum(e.nbytes() for e in records if e.name() == "[memory]" and e.nbytes() > 0)
    return rows, allocated
