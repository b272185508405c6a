"""Data-parallel numerics (``python -m meddpm.parity.ddp``, started by torchrun): one iteration on N ranks
against one single-process iteration on the whole batch.

:func:`check_parity` launches this module's worker through :func:`meddpm.run.distributed.launch`;
rank 0 compares and writes the relative errors (:func:`meddpm.parity.cases.rel_error`, in float64
over all parameters together) of the parameters and of their updates.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist

from meddpm.data.phantom import phantom_batch
from meddpm.model.config import ModelConfig
from meddpm.parity.cases import rel_error
from meddpm.run.combos import get_combo
from meddpm.run.distributed import (
    GRADIENT_SYNCS,
    check_gradient_sync,
    data_parallel_step,
    init_process_group,
    launch,
    resolve_gradient_sync,
)
from meddpm.run.train import TrainStep

WORKER = "meddpm.parity.ddp"


def check_parity(
    preset: str, world_size: int, *, device: str = "cuda", batch_per_rank: int = 1, gradient_sync: str = "ddp"
) -> dict[str, float]:
    """One data-parallel iteration on ``world_size`` ranks vs one single-process iteration on the whole batch.

    Strict FP32 (the baseline combo), gradients averaged as ``gradient_sync`` says ("ddp" or
    "after_backward"). Returns the world size and the relative errors of the parameters and of their
    updates (rank 0's view): ``{"world_size", "params", "updates"}``.
    """
    check_gradient_sync(gradient_sync)
    worker_args = ["--preset", preset, "--device", device, "--batch-per-rank", str(batch_per_rank)]
    worker_args += ["--gradient-sync", gradient_sync]
    return launch(WORKER, world_size, worker_args, "DDP parity run", 1800.0, device)


def _flat_float64(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """All tensors as one float64 vector, so one relative error covers them together."""
    return torch.cat([t.detach().reshape(-1).double() for t in tensors])


# --- worker (runs under torchrun) ------------------------------------------------------
def _parity(args: argparse.Namespace) -> None:
    rank, world, device = init_process_group(args.device)
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
    ddp_step, _ = data_parallel_step(
        config, combo, gradient_sync, device, args.batch_per_rank, images=images[shard], masks=masks[shard]
    )
    before = [p.detach().clone() for p in ddp_step.model.denoiser.parameters()]
    one_step(ddp_step, shard)
    if rank == 0:
        ref = TrainStep(config, combo, total, device, images=images, masks=masks)
        one_step(ref, slice(0, total))
        ddp_params = list(ddp_step.model.denoiser.parameters())
        ref_params = list(ref.model.denoiser.parameters())
        param_err = rel_error(_flat_float64(ddp_params), _flat_float64(ref_params))
        update_err = rel_error(
            _flat_float64([p - b for p, b in zip(ddp_params, before)]),
            _flat_float64([p - b for p, b in zip(ref_params, before)]),
        )
        Path(args.out).write_text(json.dumps({"world_size": world, "params": param_err, "updates": update_err}))
    dist.barrier()
    dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> None:
    """Worker entry point, run by torchrun on every rank (see :func:`check_parity`)."""
    p = argparse.ArgumentParser(prog=f"python -m {WORKER}")
    p.add_argument("--preset", required=True)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--batch-per-rank", type=int, default=1)
    p.add_argument("--gradient-sync", choices=GRADIENT_SYNCS, default="auto")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        _parity(args)


if __name__ == "__main__":
    main()
