"""Data-parallel training measured on N processes started by torchrun (``python -m meddpm.measure.processes.ddp``).

:func:`run_ddp` launches this module's worker through :func:`meddpm.run.distributed.launch` and
reads back the :class:`DdpResult` rank 0 writes after gathering every rank's measurements. Weak
scaling: the batch per GPU is fixed.

Per (combo, world size): each rank times its iterations as the campaign does
(:func:`meddpm.measure.machine.timing.time_synchronized`: CUDA events on a GPU, the card's clock read
while an iteration runs); an iteration's time is the slowest rank's. The same iterations are then
timed under ``no_sync()``, which skips the gradient all-reduce, so the difference is the
communication that backward did not hide. Scaling efficiency compares throughput at N with N times
throughput at 1, both measured by the same call. The method and its figures: docs/ddp.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from meddpm.errors import UserError
from meddpm.measure.machine.nvml import open_gpu
from meddpm.measure.machine.timing import synchronize, time_synchronized
from meddpm.measure.machine.warmup import warm_up
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo
from meddpm.run.distributed import (
    GRADIENT_SYNCS,
    check_gradient_sync,
    data_parallel_step,
    init_process_group,
    launch,
    resolve_gradient_sync,
)

WORKER = "meddpm.measure.processes.ddp"


@dataclass
class DdpResult:
    """One (preset, combo, world size) measurement, as gathered from every rank."""

    preset: str
    combo: str
    world_size: int
    batch_per_rank: int
    backend: str
    rank_samples_ms: list[list[float]]  # [rank][round]
    rank_no_sync_ms: list[list[float]]
    peak_allocated_bytes: list[int | None]
    energy_j_per_iter: list[float | None]
    sm_clock_min_mhz: list[int | None]
    gradient_sync: str = "ddp"  # how the gradients were averaged: "ddp" or "after_backward"

    @property
    def slowest_ms(self) -> list[float]:
        """Per round, the slowest rank's time: what the job waits for."""
        return [max(r) for r in zip(*self.rank_samples_ms)]

    @property
    def median_ms(self) -> float:
        return float(np.median(self.slowest_ms))

    @property
    def no_sync_median_ms(self) -> float:
        return float(np.median([max(r) for r in zip(*self.rank_no_sync_ms)]))

    @property
    def exposed_comm_ms(self) -> float | None:
        """Iteration time the gradient sync adds: its own copies, and the communication backward did not hide.

        None at world size 1: no gradient is communicated, and the difference left (the sync's own packing,
        or noise) read as a communication cost that does not exist (docs/ddp.md).
        """
        return None if self.world_size == 1 else self.median_ms - self.no_sync_median_ms

    @property
    def samples_per_s(self) -> float:
        return self.world_size * self.batch_per_rank * 1e3 / self.median_ms

    @property
    def max_peak_allocated_bytes(self) -> int | None:
        """The largest rank's peak allocation, or None where no rank could measure it."""
        peaks = [p for p in self.peak_allocated_bytes if p is not None]
        return max(peaks) if peaks else None

    @property
    def mean_energy_j_per_iter(self) -> float | None:
        """Energy per iteration and GPU, averaged over the ranks whose card reports it."""
        energies = [e for e in self.energy_j_per_iter if e is not None]
        return sum(energies) / len(energies) if energies else None

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d.update(
            median_ms=self.median_ms,
            no_sync_median_ms=self.no_sync_median_ms,
            exposed_comm_ms=self.exposed_comm_ms,
            samples_per_s=self.samples_per_s,
        )
        return d


def scaling_efficiency(result: DdpResult, single: DdpResult) -> float:
    """throughput(N) / (N x throughput(1)); 1.0 is perfect weak scaling."""
    return result.samples_per_s / (result.world_size * single.samples_per_s)


def run_ddp(
    preset: str,
    combo: str,
    world_size: int,
    *,
    device: str = "cuda",
    batch_per_rank: int = 1,
    warmup: int = 3,
    rounds: int = 10,
    timeout_s: float = 1800.0,
    gradient_sync: str = "auto",
) -> DdpResult:
    """Measure ``combo`` data-parallel on ``world_size`` processes started by torchrun.

    ``gradient_sync`` is one of :data:`meddpm.run.distributed.GRADIENT_SYNCS` (docs/ddp.md says which does what).
    """
    ModelConfig.preset(preset), get_combo(combo)  # unknown names: the one-line error, before any launch
    check_gradient_sync(gradient_sync)
    if device == "cuda" and world_size > torch.cuda.device_count():
        raise UserError(f"{world_size} GPUs asked for but {torch.cuda.device_count()} visible; lower --gpus")
    worker_args = ["--preset", preset, "--combo", combo, "--device", device]
    worker_args += ["--batch-per-rank", str(batch_per_rank), "--warmup", str(warmup), "--rounds", str(rounds)]
    worker_args += ["--gradient-sync", gradient_sync]
    return DdpResult(**launch(WORKER, world_size, worker_args, f"DDP run of {combo}", timeout_s, device))


# --- worker (runs under torchrun) ------------------------------------------------------
def _measure(args: argparse.Namespace) -> None:
    rank, world, device = init_process_group(args.device)
    config = ModelConfig.preset(args.preset)
    combo = get_combo(args.combo)
    gradient_sync = resolve_gradient_sync(args.gradient_sync, combo, device)
    # Each rank trains on its own data, as a sharded loader would give it.
    step, skip_sync = data_parallel_step(config, combo, gradient_sync, device, args.batch_per_rank, seed=rank)
    gpu, _ = open_gpu(device)
    # No CUDA graph is recorded in a timed round; while they are recorded is when a graphed step's memory shows.
    warmup = max(args.warmup, step.calls_before_replay)
    recording_peak = warm_up(step, device, warmup, lambda _: step())
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    energy_start = gpu.energy_mj() if gpu else None
    clocks: list[int] = []
    sample = (lambda: clocks.append(gpu.state().sm_clock_mhz)) if gpu else None
    samples = []
    for _ in range(args.rounds):
        dist.barrier()  # rounds start together, so the slowest rank per round is meaningful
        samples.append(time_synchronized(step, device, during=sample))
    energy_end = gpu.energy_mj() if gpu else None
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    if recording_peak is not None:
        peak = max(peak or 0, recording_peak)
    no_sync = []
    with skip_sync():
        step()  # warm the no-sync path
        for _ in range(args.rounds):
            dist.barrier()
            no_sync.append(time_synchronized(step, device))
    energy = None
    if energy_start is not None and energy_end is not None:
        energy = (energy_end - energy_start) / 1e3 / args.rounds
    mine = {"samples": samples, "no_sync": no_sync, "peak": peak, "energy": energy, "clock": min(clocks, default=None)}
    gathered: list[dict] = [None] * world  # type: ignore[list-item]
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        result = DdpResult(
            preset=args.preset,
            combo=args.combo,
            world_size=world,
            batch_per_rank=args.batch_per_rank,
            backend=dist.get_backend(),
            rank_samples_ms=[g["samples"] for g in gathered],
            rank_no_sync_ms=[g["no_sync"] for g in gathered],
            peak_allocated_bytes=[g["peak"] for g in gathered],
            energy_j_per_iter=[g["energy"] for g in gathered],
            sm_clock_min_mhz=[g["clock"] for g in gathered],
            gradient_sync=gradient_sync,
        )
        Path(args.out).write_text(json.dumps(asdict(result)))
    # A rank that closes its gloo connections while a peer is still busy with the all-gather can make the peer's
    # transport thread throw, which ends that process with SIGABRT (docs/ddp.md); after the barrier no rank has a
    # message in flight to another. The parity worker leaves the same way.
    dist.barrier()
    dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> None:
    """Worker entry point, run by torchrun on every rank (see :func:`run_ddp`)."""
    p = argparse.ArgumentParser(prog=f"python -m {WORKER}")
    p.add_argument("--preset", required=True)
    p.add_argument("--combo", default="baseline")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--batch-per-rank", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--gradient-sync", choices=GRADIENT_SYNCS, default="auto")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        _measure(args)


if __name__ == "__main__":
    main()
