"""Appending a run from the machine that measured it: the suite's ``--history`` and ``meddpm-bench --history``.

A live append knows what a results file does not carry: the runner's name, the branch, the GPU's UUID
and the driver. The run is read back from the results file just written, so an appended run and the
same file imported later are one run (see :func:`meddpm.history.documents.fingerprint`).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from meddpm.history.documents import run_from_document
from meddpm.history.results import RESULTS_KINDS
from meddpm.history.store import HistoryStore
from meddpm.measure.machine.environment import ci_job, commit_subject, git_output
from meddpm.measure.machine.nvml import open_gpu
from meddpm.versioned.loader import read_json


def append_results(target: str, results: Path, options: Mapping[str, Any], source: str) -> str:
    """Append the run in the results file ``results`` to the database; returns a line saying what happened.

    Raises a one-line UserError if the database cannot take it; the results file stays as it is.
    """
    document = read_json(results, RESULTS_KINDS[0].fix)
    environment = document.get("environment") if isinstance(document, dict) else None
    context = machine_context(environment or {})
    # Through JSON, so paths and nested settings are stored as the text they print as.
    context["options"] = json.loads(json.dumps(options, default=str))
    run = run_from_document(document, f"{source} ({results})", context)
    with HistoryStore.open(target) as store:
        added = store.add([run]).added
    return f"history: run {'added to' if added else 'already in'} {store.label}"


def machine_context(environment: Mapping[str, Any]) -> dict[str, Any]:
    """The runner's name, the branch, and the GPU's UUID and driver for the device the run measured on."""
    context: dict[str, Any] = {
        # A GitHub runner's name tells the machines of a fleet apart better than a container's host name.
        "host": os.environ.get("RUNNER_NAME") or socket.gethostname(),
        "branch": os.environ.get("GITHUB_HEAD_REF")
        or os.environ.get("GITHUB_REF_NAME")
        or git_output(["rev-parse", "--abbrev-ref", "HEAD"], Path(__file__).resolve().parent),
        # A results file of a writer before these were recorded lacks them; this machine's git and CI know them.
        "commit_subject": environment.get("commit_subject") or commit_subject(environment.get("commit")),
        "ci_job": environment.get("ci_job") or ci_job(),
    }
    device = torch.device(str(environment.get("device") or "cpu"))
    if device.type == "cuda" and torch.cuda.is_available():
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        context["gpu_uuid"] = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        gpu, _ = open_gpu(device)
        if gpu is not None:
            import pynvml  # open_gpu found it

            try:
                context["driver"] = gpu.state().driver
            except pynvml.NVMLError:
                pass  # the driver is a label: a card that stops answering must not cost the run its history
    return context
