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

Each row also says where in the model it ran (:mod:`meddpm.measure.profiling.scopes`): the module, the
outermost aten operator and a short label (``mul float32``); a kernel that runs in several modules has a row
per module. The profile keeps, per module, the bytes its forward left allocated (:attr:`IterationProfile.module_bytes`).

Profiling runs one extra iteration after the timed ones, and the profiler and the module scopes leave
nothing behind when their block ends.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch.autograd import DeviceType

from meddpm.measure.profiling.kernel_mix import GROUPS, group_of
from meddpm.measure.profiling.quiet_profiler import quiet_profile
from meddpm.measure.profiling.scopes import (
    Attribution,
    KinetoDtypes,
    Site,
    device_kernels,
    module_bytes,
    module_scopes,
)

LAUNCHES = "launches"
BYTES_ALLOCATED = "bytes_allocated"
FLOPS = "flops"
_ALLOCATED = "allocated_bytes.all.allocated"  # the CUDA allocator's cumulative bytes allocated


@dataclass(frozen=True)
class ProfileRow:
    """One kernel (GPU) or aten operator (CPU) of an iteration in one module: its group, calls and milliseconds,
    and where it ran (:class:`~meddpm.measure.profiling.scopes.Site`; "" where unknown)."""

    name: str
    category: str
    count: int
    ms: float
    module: str = ""
    op: str = ""
    label: str = ""


@dataclass(frozen=True)
class IterationProfile:
    """One profiled iteration: its rows, largest time first, its counts (see :func:`iteration_counts`) and the bytes
    each module's forward left allocated."""

    rows: tuple[ProfileRow, ...]
    counts: dict[str, int]
    module_bytes: dict[str, int] = field(default_factory=dict)


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
    from torch.profiler import ProfilerActivity

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    if cuda:
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_stats(device).get(_ALLOCATED, 0)
    with module_scopes(step), quiet_profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        step()
        if cuda:
            torch.cuda.synchronize(device)
    events = prof.events()
    records = prof.profiler.kineto_results.events()
    attribution = Attribution(events, KinetoDtypes(records))
    if cuda:
        allocated = torch.cuda.memory_stats(device).get(_ALLOCATED, 0) - before
        kernels = device_kernels(events)
        rows = _rows((k.name, attribution.of_kernel(k), (k.time_range.end - k.time_range.start) / 1e3) for k in kernels)
    else:
        operators = [e for e in events if e.device_type == DeviceType.CPU and e.name.startswith("aten::")]
        rows = _rows((e.name, attribution.of_operator(e), e.self_cpu_time_total / 1e3) for e in operators)
        # The allocation records (frees are negative); the public events fold them into the operators' net usage.
        allocated = sum(e.nbytes() for e in records if e.name() == "[memory]" and e.nbytes() > 0)
    rows = sorted(rows, key=lambda r: (-r.ms, r.name, r.module, r.label))
    held = module_bytes(events, attribution, device)
    return IterationProfile(tuple(rows), iteration_counts(rows, allocated, flops), held)


def _rows(events: Iterable[tuple[str, Site, float]]) -> list[ProfileRow]:
    """One row per name, module, operator and label: the calls and milliseconds of its events."""
    calls: dict[tuple[str, Site], list[float]] = defaultdict(list)
    for name, site, ms in events:
        calls[(name, site)].append(ms)
    return [
        ProfileRow(name, group_of(name), len(ms), sum(ms), site.module, site.op, site.label)
        for (name, site), ms in calls.items()
    ]
