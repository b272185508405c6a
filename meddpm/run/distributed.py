"""Data-parallel training under PyTorch DistributedDataParallel, one process per GPU, via torchrun.

The launcher (:func:`run_ddp`) starts ``torchrun --standalone --nproc_per_node N -m
meddpm.run.distributed ...`` as a subprocess with the caller's environment untouched (the
runner's NCCL settings apply as they are), and reads back one JSON document that rank 0
writes after gathering every rank's measurements. Weak scaling: the batch per GPU is fixed.

Per (combo, world size): each rank times its iterations with CUDA events; an iteration's
time is the slowest rank's. The same iterations are then timed under ``no_sync()``, which
skips the gradient all-reduce, so the difference is the communication that backward did not
hide. Scaling efficiency compares throughput at N with N times throughput at 1, both
measured by the same call.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from meddpm.data.phantom import phantom_batch
from meddpm.errors import UserError
from meddpm.measure.nvml import open_gpu
from meddpm.measure.timing import synchronize, time_synchronized
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo
from meddpm.run.train import TrainStep


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
    def exposed_comm_ms(self) -> float:
        """Iteration time the gradient all-reduce adds beyond what overlaps with backward."""
        return self.median_ms - self.no_sync_median_ms

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


# --- launcher --------------------------------------------------------------------------
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
) -> DdpResult:
    """Measure ``combo`` under DDP on ``world_size`` processes started by torchrun."""
    ModelConfig.preset(preset), get_combo(combo)  # unknown names: the one-line error, before any launch
    if device == "cuda" and world_size > torch.cuda.device_count():
        raise UserError(f"{world_size} GPUs asked for but {torch.cuda.device_count()} visible; lower --gpus")
    worker_args = [
        "measure",
        "--preset",
        preset,
        "--combo",
        combo,
        "--device",
        device,
        "--batch-per-rank",
        str(batch_per_rank),
        "--warmup",
        str(warmup),
        "--rounds",
        str(rounds),
    ]
    return DdpResult(**_torchrun(world_size, worker_args, f"DDP run of {combo}", timeout_s, device))


def check_parity(preset: str, world_size: int, *, device: str = "cuda", batch_per_rank: int = 1) -> dict[str, float]:
    """One DDP iteration on ``world_size`` ranks vs one single-process iteration on the whole batch.

    Returns the relative errors of the parameters and of their updates (rank 0's view).
    """
    worker_args = ["parity", "--preset", preset, "--device", device, "--batch-per-rank", str(batch_per_rank)]
    return _torchrun(world_size, worker_args, "DDP parity run", 1800.0, device)


_EXCEPTION = re.compile(r"^(\[[^\]]*\]:)?\s*[\w.]+(Error|Exception): ")


def _torchrun(world_size: int, worker_args: list[str], what: str, timeout_s: float, device: str) -> dict:
    """Run this module's worker under torchrun on one host; rank 0's JSON document, or a UserError.

    On the CPU every rank gets one intra-op thread unless OMP_NUM_THREADS says otherwise.
    torchrun sets that only for two or more processes, so a lone rank took every core, and on a
    busy machine its OpenMP threads waited on each other: one gloo process read 3-6 s per tiny
    iteration against 1.2-1.6 s for each of two. Equal threads per rank also make the weak-scaling
    comparison fair.
    """
    env = dict(os.environ)
    if device == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="meddpm-ddp-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={world_size}",
            "-m",
            "meddpm.run.distributed",
            *worker_args,
            "--out",
            str(out),
        ]
        # Otherwise the environment is passed through untouched: the runner's NCCL settings apply as set.
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        if proc.returncode != 0 or not out.exists():
            # torchrun ends with its own banner; the workers' exception line says what went wrong.
            errors = [
                line.split("]:", 1)[-1].strip()
                for line in proc.stderr.splitlines()
                if _EXCEPTION.search(line) and "elastic" not in line
            ]
            reason = errors[-1] if errors else " ".join(proc.stderr[-300:].split())  # one line, whatever it said
            raise UserError(f"{what} on {world_size} process(es) failed: {reason}")
        return json.loads(out.read_text())


# --- worker (runs under torchrun) ------------------------------------------------------
def _init(device: str) -> tuple[int, int, torch.device]:
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if device == "cuda":
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        return rank, world, torch.device("cuda", local)
    dist.init_process_group("gloo")
    return rank, world, torch.device("cpu")


def _wrap(device: torch.device):
    ids = [device.index] if device.type == "cuda" else None
    return lambda module: DistributedDataParallel(module, device_ids=ids)


def _measure(args: argparse.Namespace) -> None:
    rank, world, device = _init(args.device)
    config = ModelConfig.preset(args.preset)
    combo = get_combo(args.combo)
    # Each rank trains on its own data, as a sharded loader would give it.
    step = TrainStep(config, combo, args.batch_per_rank, device, seed=rank, wrap_denoiser=_wrap(device))
    ddp: DistributedDataParallel = step.model.denoiser  # type: ignore[assignment]
    gpu, _ = open_gpu(device)
    for _ in range(args.warmup):
        step()
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
    no_sync = []
    with ddp.no_sync():
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
        )
        Path(args.out).write_text(json.dumps(asdict(result)))
    dist.destroy_process_group()


def _parity(args: argparse.Namespace) -> None:
    rank, world, device = _init(args.device)
    config = ModelConfig.preset(args.preset)
    combo = get_combo("baseline")  # strict FP32: differences come from reduction order alone
    total = world * args.batch_per_rank
    images, masks = phantom_batch(config.volume, total, config.out_channels, config.mask_channels, seed=0)
    gen = torch.Generator().manual_seed(1)
    t = torch.randint(0, config.timesteps, (total,), generator=gen)
    noise = torch.randn(images.shape, generator=gen)
    shard = slice(rank * args.batch_per_rank, (rank + 1) * args.batch_per_rank)

    def one_step(step: TrainStep, part: slice) -> None:
        with combo.flags():
            loss = step.model.loss(step.images, step.masks, t=t[part].to(device), noise=noise[part].to(device))
            loss.backward()
            step.optimizer.step()

    ddp_step = TrainStep(
        config,
        combo,
        args.batch_per_rank,
        device,
        images=images[shard],
        masks=masks[shard],
        wrap_denoiser=_wrap(device),
    )
    before = [p.detach().clone() for p in ddp_step.model.denoiser.parameters()]
    one_step(ddp_step, shard)
    if rank == 0:
        ref = TrainStep(config, combo, total, device, images=images, masks=masks)
        one_step(ref, slice(0, total))
        ddp_params = list(ddp_step.model.denoiser.parameters())
        ref_params = list(ref.model.denoiser.parameters())
        param_err = _rel(ddp_params, ref_params)
        update_err = _rel([p - b for p, b in zip(ddp_params, before)], [p - b for p, b in zip(ref_params, before)])
        Path(args.out).write_text(json.dumps({"world_size": world, "params": param_err, "updates": update_err}))
    dist.barrier()
    dist.destroy_process_group()


def _rel(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """||a - b|| / ||b|| over all tensors together, in float64."""
    diff = sum(float((x.double() - y.double()).norm() ** 2) for x, y in zip(a, b)) ** 0.5
    ref = sum(float(y.double().norm() ** 2) for y in b) ** 0.5
    return diff / ref if ref else diff


def main(argv: Sequence[str] | None = None) -> None:
    """Worker entry point, run by torchrun (see :func:`run_ddp`)."""
    p = argparse.ArgumentParser(prog="python -m meddpm.run.distributed")
    p.add_argument("mode", choices=["measure", "parity"])
    p.add_argument("--preset", required=True)
    p.add_argument("--combo", default="baseline")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--batch-per-rank", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        (_measure if args.mode == "measure" else _parity)(args)


if __name__ == "__main__":
    main()
