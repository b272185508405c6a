"""What a worker process does once its workload is chosen: measure the combos interleaved and write one JSON document.

Run through :mod:`meddpm.measure.processes.worker`, which imports this module only after it chose
which tree's workload the process drives.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

import meddpm
from meddpm.errors import UserError
from meddpm.measure.campaign.interleaved import Campaign
from meddpm.measure.campaign.settings import CampaignSettings, add_worker_settings
from meddpm.measure.machine.environment import environment
from meddpm.measure.processes.launch import GPU_FREE, RESULTS_WRITTEN
from meddpm.measure.processes.workload import workload_folder
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m meddpm.measure.processes.worker --workload TREE")
    p.add_argument("--preset", required=True)
    p.add_argument("--combos", required=True, help="comma-separated combo names")
    p.add_argument("--device", required=True, help="cpu or cuda:N")
    p.add_argument("--batch-size", type=int, default=1)
    add_worker_settings(p)
    p.add_argument("--out", type=Path, required=True)
    return p


def drive_once() -> None:
    """One round of the tiny preset's baseline on the CPU, as a campaign runs it: raises what the workload raises."""
    settings = CampaignSettings(warmup=0, min_rounds=1, max_rounds=1, energy=False)
    campaign = Campaign(ModelConfig.preset("tiny"), [get_combo("baseline")], torch.device("cpu"), settings=settings)
    try:
        campaign.run()
    finally:
        campaign.close()


def import_ahead() -> None:
    """What a worker started ahead of its turn imports while it waits: Dynamo, Inductor and Triton, which a compiled
    combo would import on its first call (seconds of a worker's start, counted in its compile). Nothing here touches
    the GPU: CUDA is initialised by the first call that needs a device."""
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401

    with contextlib.suppress(ImportError):  # a torch without Triton (a CPU build) compiles for the CPU only
        import torch._inductor.runtime.triton_heuristics  # noqa: F401


def main(argv: Sequence[str], *, schema: str, handed_over: bool = False) -> int:
    """Measure the combos interleaved in this process and write one JSON document to ``--out``.

    ``handed_over``: a worker started ahead (:class:`~meddpm.measure.processes.launch.StartedWorker`) builds its
    models while the worker before it exits, waits for :data:`~meddpm.measure.processes.launch.GPU_FREE` on stdin
    before its first iteration, and says :data:`~meddpm.measure.processes.launch.RESULTS_WRITTEN` once its results
    are written and its cached GPU memory released, so that the next one starts then."""
    clock = {"job": time.time(), "waited": 0.0}
    args = _parser().parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)

    def wait_for_gpu() -> None:
        waiting = time.time()
        if sys.stdin.readline().strip() != GPU_FREE:  # no go: the run ended before this process's turn
            raise SystemExit(0)
        clock["waited"] = time.time() - waiting

    combos = [get_combo(name) for name in args.combos.split(",")]
    campaign = Campaign(
        ModelConfig.preset(args.preset),
        combos,
        device,
        batch_size=args.batch_size,
        settings=args.settings,
        before_first_iteration=wait_for_gpu if handed_over else None,
    )
    try:
        results = campaign.run(lambda p: print(f"{p.phase} {p.combo} {p.done}/{p.total} {p.detail}", flush=True))
    except UserError as exc:
        print(f"UserError: {exc}", file=sys.stderr)
        return 2
    clock["measured"] = time.time()
    for result in results.values():
        result.process_clock = dict(clock)
    document = {
        "schema": schema,
        # Which code ran: the parent checks the harness is its own and the workload the side it meant.
        "harness": str(Path(meddpm.__file__).resolve().parent),
        "workload": str(workload_folder()),
        "environment": environment(device),
        "results": [asdict(r) for r in results.values()],
    }
    args.out.write_text(json.dumps(document))
    campaign.close()
    if handed_over:  # on a line of its own, whatever the workload printed last
        print("\n" + RESULTS_WRITTEN, flush=True)
    return 0
