"""``python -m meddpm.measure.processes.worker``: one measuring process, the unit of process-level replication.

The suite and ``meddpm-bench`` start several of these (``--perf-processes`` / ``--processes``),
each with a fresh CUDA context, cuDNN plans and Inductor compilation, and judge the
spread of their medians. For an A/B run against a git revision the same command runs from
that revision's checkout, so its arguments and its JSON (schema ``meddpm-worker/1``) are a
protocol between revisions: change them only with a new schema name. The environment variable
``MEDDPM_ENERGY_BLOCKS=0`` turns the energy blocks off (an A/B run judges time only); a worker
that predates the blocks ignores it. ``MEDDPM_MEDIAN_PRECISION`` is the campaign's median precision
(0 or unset: none); a worker that predates it stops by the IQR target alone, so in an A/B against
such a revision that side's process medians carry more round noise (the test allows for it; its
detectable change is larger). ``MEDDPM_ENERGY_ERROR`` is the counter bound the energy blocks are
planned to (unset: the campaign's default).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

import meddpm
from meddpm.errors import UserError
from meddpm.measure.campaign.interleaved import Campaign
from meddpm.measure.campaign.settings import CampaignSettings, add_worker_settings, worker_settings
from meddpm.measure.machine.environment import environment
from meddpm.measure.processes.campaign import ENERGY_BLOCKS, ENERGY_ERROR, MEDIAN_PRECISION, WORKER_SCHEMA
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m meddpm.measure.processes.worker", description=__doc__.splitlines()[0])
    p.add_argument("--preset", required=True)
    p.add_argument("--combos", required=True, help="comma-separated combo names")
    p.add_argument("--device", required=True, help="cpu or cuda:N")
    p.add_argument("--batch-size", type=int, default=1)
    add_worker_settings(p)  # warm-up and rounds, with CampaignSettings' defaults
    p.add_argument("--out", type=Path, required=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the combos interleaved in this process and write one JSON document to ``--out``."""
    args = _parser().parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    settings = worker_settings(
        args,
        energy=os.environ.get(ENERGY_BLOCKS, "1") != "0",
        median_precision=float(os.environ.get(MEDIAN_PRECISION) or CampaignSettings.median_precision),
        energy_error=float(os.environ.get(ENERGY_ERROR) or CampaignSettings.energy_error),
    )
    combos = [get_combo(name) for name in args.combos.split(",")]
    campaign = Campaign(ModelConfig.preset(args.preset), combos, device, batch_size=args.batch_size, settings=settings)
    try:
        results = campaign.run(lambda p: print(f"{p.phase} {p.combo} {p.done}/{p.total} {p.detail}", flush=True))
    except UserError as exc:
        print(f"UserError: {exc}", file=sys.stderr)
        return 2
    document = {
        "schema": WORKER_SCHEMA,
        # Which code ran: the parent checks it is the checkout it meant to measure.
        "package": str(Path(meddpm.__file__).resolve().parent),
        "environment": environment(device),
        "results": [asdict(r) for r in results.values()],
    }
    args.out.write_text(json.dumps(document))
    campaign.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
