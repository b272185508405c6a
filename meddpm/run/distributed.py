"""Data-parallel training, one process per GPU, started by torchrun: the launcher and the gradient sync.

:func:`launch` starts ``torchrun --standalone --nproc_per_node N -m MODULE ...`` as a subprocess
with the caller's environment untouched (the runner's NCCL settings apply as they are) and reads
back the one JSON document that rank 0 of ``MODULE`` writes to the path after ``--out``. The
workers themselves belong to the harness: the measuring one is :mod:`meddpm.measure.processes.ddp`,
the parity one :mod:`meddpm.parity.ddp`. In a worker, :func:`init_process_group` joins the group
and :func:`data_parallel_step` builds the training step whose gradients are averaged over the ranks.

Gradients are averaged in one of two ways (``gradient_sync``): ``ddp``, PyTorch's
DistributedDataParallel, whose hooks all-reduce buckets while backward runs; or
``after_backward`` (:class:`GradientAllReduce`), one all-reduce of every gradient after
backward. ``auto`` takes the second for combos that replay their step as CUDA graphs on a GPU:
DDP's hooks cannot run inside the graphs, and without them ``fast`` issued its kernels one by
one again. What each costs: docs/ddp.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from meddpm.errors import UserError
from meddpm.model.config import ModelConfig
from meddpm.run.combos import Combo
from meddpm.run.train import TrainStep

GRADIENT_SYNCS = ("auto", "ddp", "after_backward")


def check_gradient_sync(name: str) -> None:
    """A UserError unless ``name`` is one of :data:`GRADIENT_SYNCS`."""
    if name not in GRADIENT_SYNCS:
        raise UserError(f"unknown gradient sync {name!r}; choose one of {', '.join(GRADIENT_SYNCS)}")


# --- launcher --------------------------------------------------------------------------
_EXCEPTION = re.compile(r"^(\[[^\]]*\]:)?\s*[\w.]+(Error|Exception): ")
# A C++ exception nobody caught (gloo's, say) ends its process in SIGABRT after these two lines.
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']+)'")
_WHAT = re.compile(r"^\s*what\(\):\s*(.*)")
# torchrun's banner names the rank that failed first: "rank      : 0 (local_rank: 0)", "exitcode  : -6 (pid: ..."
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.MULTILINE)
_ROOT_SIGNAL = re.compile(r"^\s*exitcode\s*:\s*-\d+ \(pid: \d+\)\s*\((SIG\w+)\)", re.MULTILINE)


def failure_reason(stderr: str) -> str:
    """One line from torchrun's stderr saying why its workers failed.

    A worker killed by an uncaught C++ exception is the cause (its peers' "connection closed"
    errors follow from it); otherwise the workers' last Python exception line; otherwise the end
    of the output. A rank that died of a signal is named, from the banner's root cause.
    """
    lines = stderr.splitlines()
    reason = ""
    for i, line in enumerate(lines):
        if match := _TERMINATE.search(line):
            what = next((m.group(1) for later in lines[i + 1 : i + 3] if (m := _WHAT.match(later))), "")
            reason = f"{match.group(1)}: {what}".rstrip(": ")
            break
    if not reason:
        errors = [
            line.split("]:", 1)[-1].strip() for line in lines if _EXCEPTION.search(line) and "elastic" not in line
        ]
        reason = errors[-1] if errors else " ".join(stderr[-300:].split())  # one line, whatever it said
    root = stderr[stderr.find("Root Cause") :] if "Root Cause" in stderr else ""
    if (rank := _ROOT_RANK.search(root)) and (sig := _ROOT_SIGNAL.search(root)):
        reason = f"rank {rank.group(1)} ended in {sig.group(1)}: {reason}"
    return reason


def launch(module: str, world_size: int, worker_args: list[str], what: str, timeout_s: float, device: str) -> dict:
    """Run ``python -m module *worker_args --out PATH`` under torchrun on one host; rank 0's JSON, or a UserError.

    On the CPU every rank gets one intra-op thread unless OMP_NUM_THREADS says otherwise.
    torchrun sets that only for two or more processes, so a lone rank took every core, and on a
    busy machine its OpenMP threads waited on each other: one gloo process read 3-6 s per tiny
    iteration against 1.2-1.6 s for each of two. Equal threads per rank also make the weak-scaling
    comparison fair.

    The UserError is one line (:func:`failure_reason`); torchrun's whole stderr, every rank's
    output, rides along as the exception's note, which tracebacks (a failing test's) show.
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
            module,
            *worker_args,
            "--out",
            str(out),
        ]
        # Otherwise the environment is passed through untouched: the runner's NCCL settings apply as set.
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        if proc.returncode != 0 or not out.exists():
            error = UserError(f"{what} on {world_size} process(es) failed: {failure_reason(proc.stderr)}")
            # What add_note() stores (Python 3.11+); pytest shows it on 3.10 as well.
            error.__notes__ = [f"torchrun exited with status {proc.returncode}; its stderr:\n{proc.stderr}"]
            raise error
        return json.loads(out.read_text())


# --- in a worker (under torchrun) ------------------------------------------------------
def init_process_group(device: str) -> tuple[int, int, torch.device]:
    """Join torchrun's process group (NCCL on ``cuda``, gloo on ``cpu``); this rank, the world size, its device."""
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


def data_parallel_step(
    config: ModelConfig, combo: Combo, gradient_sync: str, device: torch.device, batch: int, **step_args
) -> tuple[TrainStep, Callable[[], contextlib.AbstractContextManager[None]]]:
    """A training step whose gradients are averaged over the ranks, and its ``no_sync`` context.

    ``gradient_sync`` is "ddp" or "after_backward" (:func:`resolve_gradient_sync` turns "auto" into one).
    """
    if gradient_sync == "after_backward":
        step = TrainStep(config, combo, batch, device, gradient_sync=GradientAllReduce, **step_args)
        return step, step.gradient_sync.no_sync  # type: ignore[union-attr]
    ids = [device.index] if device.type == "cuda" else None
    step = TrainStep(
        config, combo, batch, device, wrap_denoiser=lambda m: DistributedDataParallel(m, device_ids=ids), **step_args
    )
    ddp: DistributedDataParallel = step.model.denoiser  # type: ignore[assignment]
    return step, ddp.no_sync
