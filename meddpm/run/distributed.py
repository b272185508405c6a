"""Data-parallel training, one process per GPU, via torchrun.

The launcher (:func:`run_ddp`) starts ``torchrun --standalone --nproc_per_node N -m
meddpm.run.distributed ...`` as a subprocess with the caller's environment untouched (the
runner's NCCL settings apply as they are), and reads back one JSON document that rank 0
writes after gathering every rank's measurements. Weak scaling: the batch per GPU is fixed.

Per (combo, world size): each rank times its iterations with CUDA events; an iteration's
time is the slowest rank's. The same iterations are then timed under ``no_sync()``, which
skips the gradient all-reduce, so the difference is the communication that backward did not
hide. Scaling efficiency compares throughput at N with N times throughput at 1, both
measured by the same call.

Gradients are averaged in one of two ways (``gradient_sync``): ``ddp``, PyTorch's
DistributedDataParallel, whose hooks all-reduce buckets while backward runs; or
``after_backward`` (:class:`GradientAllReduce`), one all-reduce of every gradient after
backward. ``auto`` takes the second for combos that replay their step as CUDA graphs on a GPU:
DDP's hooks cannot run inside the graphs, and without them ``fast`` issued its kernels one by
one again. On one H200 through torchrun with one rank (2026-11-24, docs/ddp.md): 57.7 ms an
iteration under DDP, 52.5 ms with the all-reduce after backward, against 51.7-52.0 ms for the
plain single-process step on that card.
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from meddpm.data.phantom import phantom_batch
from meddpm.errors import UserError
from meddpm.measure.machine.nvml import open_gpu
from meddpm.measure.machine.timing import synchronize, time_synchronized
from meddpm.model.config import ModelConfig
from meddpm.run.combos import Combo, get_combo
from meddpm.run.train import TrainStep

GRADIENT_SYNCS = ("auto", "ddp", "after_backward")


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
    gradient_sync: str = "auto",
) -> DdpResult:
    """Measure ``combo`` data-parallel on ``world_size`` processes started by torchrun.

    ``gradient_sync`` is one of :data:`GRADIENT_SYNCS` (see the module's docstring).
    """
    ModelConfig.preset(preset), get_combo(combo)  # unknown names: the one-line error, before any launch
    _check_gradient_sync(gradient_sync)
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
        "--gradient-sync",
        gradient_sync,
    ]
    return DdpResult(**_torchrun(world_size, worker_args, f"DDP run of {combo}", timeout_s, device))


def check_parity(
    preset: str, world_size: int, *, device: str = "cuda", batch_per_rank: int = 1, gradient_sync: str = "ddp"
) -> dict[str, float]:
    """One data-parallel iteration on ``world_size`` ranks vs one single-process iteration on the whole batch.

    Strict FP32 (the baseline combo), gradients averaged as ``gradient_sync`` says ("ddp" or
    "after_backward"). Returns the relative errors of the parameters and of their updates (rank 0's view).
    """
    _check_gradient_sync(gradient_sync)
    worker_args = ["parity", "--preset", preset, "--device", device, "--batch-per-rank", str(batch_per_rank)]
    worker_args += ["--gradient-sync", gradient_sync]
    return _torchrun(world_size, worker_args, "DDP parity run", 1800.0, device)


def _check_gradient_sync(name: str) -> None:
    if name not in GRADIENT_SYNCS:
        raise UserError(f"unknown gradient sync {name!r}; choose one of {', '.join(GRADIENT_SYNCS)}")


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


class GradientAllReduce:
    """Averages a module's gradients over the ranks after backward, in one all-reduce.

    Backward runs as the combo runs it on one GPU (as CUDA graphs, for ``fast``); then every
    gradient is packed into one flat buffer, summed over the ranks in one collective, divided by
    the world size and copied back: the same average as DDP's, with nothing overlapping backward.
    For the paper preset that is 40 M float32 gradients (161 MB) a step. Like DDP's constructor,
    this one starts every rank from rank 0's parameters and buffers.
    """

    def __init__(self, module: nn.Module):
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.enabled = True
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor, src=0)

    def __call__(self) -> None:
        """All-reduce the gradients (a parameter without one counts as a zero gradient)."""
        if not self.enabled:
            return
        for p in self.params:
            if p.grad is None:  # every rank must send the same buffer
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)  # a sum: gloo has no average
        flat.div_(dist.get_world_size())
        torch._foreach_copy_(grads, [part.view_as(g) for part, g in zip(flat.split([g.numel() for g in grads]), grads)])

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Skip the all-reduce inside the block, as DDP's ``no_sync`` does."""
        self.enabled = False
        try:
            yield
        finally:
            self.enabled = True


def resolve_gradient_sync(name: str, combo: Combo, device: torch.device) -> str:
    """ "ddp" or "after_backward" for ``name``; "auto" picks "after_backward" for CUDA-graphed steps on a GPU."""
    if name != "auto":
        return name
    return "after_backward" if combo.replays_graphs(device) else "ddp"


def _data_parallel_step(
    config: ModelConfig, combo: Combo, gradient_sync: str, device: torch.device, batch: int, **step_args
) -> tuple[TrainStep, Callable[[], contextlib.AbstractContextManager[None]]]:
    """A training step whose gradients are averaged over the ranks, and its ``no_sync`` context."""
    if gradient_sync == "after_backward":
        step = TrainStep(config, combo, batch, device, gradient_sync=GradientAllReduce, **step_args)
        return step, step.gradient_sync.no_sync  # type: ignore[union-attr]
    ids = [device.index] if device.type == "cuda" else None
    step = TrainStep(
        config, combo, batch, device, wrap_denoiser=lambda m: DistributedDataParallel(m, device_ids=ids), **step_args
    )
    ddp: DistributedDataParallel = step.model.denoiser  # type: ignore[assignment]
    return step, ddp.no_sync


def _measure(args: argparse.Namespace) -> None:
    rank, world, device = _init(args.device)
    config = ModelConfig.preset(args.preset)
    combo = get_combo(args.combo)
    gradient_sync = resolve_gradient_sync(args.gradient_sync, combo, device)
    # Each rank trains on its own data, as a sharded loader would give it.
    step, skip_sync = _data_parallel_step(config, combo, gradient_sync, device, args.batch_per_rank, seed=rank)
    gpu, _ = open_gpu(device)
    for _ in range(max(args.warmup, step.calls_before_replay)):  # no CUDA graph is recorded in a timed round
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
            if step.gradient_sync is not None:
                step.gradient_sync()
            step.optimizer.step()

    gradient_sync = resolve_gradient_sync(args.gradient_sync, combo, device)
    ddp_step, _ = _data_parallel_step(
        config, combo, gradient_sync, device, args.batch_per_rank, images=images[shard], masks=masks[shard]
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
    p.add_argument("--gradient-sync", choices=GRADIENT_SYNCS, default="auto")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        (_measure if args.mode == "measure" else _parity)(args)


if __name__ == "__main__":
    main()
