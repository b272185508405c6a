"""The software and hardware a measurement was taken on, recorded beside every result."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

from meddpm.measure.machine.nvml import open_gpu


def git_commit(path: Path | None = None) -> str:
    """The checked-out commit, with ``+dirty`` if tracked files differ from it.

    ``$MEDDPM_COMMIT`` wins if set (for copies without .git). A measurement taken on changed
    code must not pass as one of the commit it started from.
    """
    if os.environ.get("MEDDPM_COMMIT"):
        return os.environ["MEDDPM_COMMIT"]
    cwd = path or Path(__file__).resolve().parent
    head = git_output(["rev-parse", "HEAD"], cwd)
    if head is None:
        return "unknown"
    changed = git_output(["status", "--porcelain", "--untracked-files=no"], cwd)
    return f"{head}+dirty" if changed else head


def commit_subject(commit: str | None, path: Path | None = None) -> str | None:
    """The first line of ``commit``'s message (``+dirty`` ignored), or None where git does not know it."""
    sha = (commit or "").removesuffix("+dirty")
    if not sha or sha == "unknown":
        return None
    return git_output(["log", "-1", "--format=%s", sha, "--"], path or Path(__file__).resolve().parent) or None


def ci_job() -> str | None:
    """The web address of the GitHub Actions job attempt this runs in, or None outside one."""
    names = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    server, repository, run = (os.environ.get(name) for name in names)
    if not (server and repository and run):
        return None
    attempt = os.environ.get("GITHUB_RUN_ATTEMPT")
    return f"{server}/{repository}/actions/runs/{run}" + (f"/attempts/{attempt}" if attempt else "")


def git_branch(path: Path | None = None) -> str | None:
    """The checked-out branch (``$GITHUB_HEAD_REF``/``$GITHUB_REF_NAME`` in a workflow), or None when detached."""
    for name in ("MEDDPM_BRANCH", "GITHUB_HEAD_REF", "GITHUB_REF_NAME"):
        if os.environ.get(name):
            return os.environ[name]
    branch = git_output(["rev-parse", "--abbrev-ref", "HEAD"], path or Path(__file__).resolve().parent)
    return None if branch in (None, "HEAD") else branch


def _driver_version() -> str | None:
    """The NVIDIA driver's version from NVML, or None where NVML is missing or unsupported."""
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # ImportError or any NVMLError: the record just lacks the field
        return None
    return version.decode() if isinstance(version, bytes) else version


def _card_limits(device: torch.device) -> dict[str, Any]:
    """The card's enforced power cap and top SM clock, which move its speed without the code changing; none
    where NVML cannot say."""
    gpu, _ = open_gpu(device)
    if gpu is None:
        return {}
    try:
        state = gpu.state()
    except Exception:  # any NVMLError: the record just lacks the fields
        return {}
    return {"power_limit_w": state.power_limit_w, "sm_clock_max_mhz": state.sm_clock_max_mhz}


def git_output(args: list[str], cwd: Path, timeout_s: float = 10.0) -> str | None:
    """git's output, stripped, or None where git is missing or fails; bytes that are not UTF-8 (a subject written in
    another encoding) are replaced, never fatal."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, encoding="utf-8", errors="replace", timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def environment(device: torch.device) -> dict[str, Any]:
    """Versions, device name and compute capability, commit and UTC time."""
    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        # The dashboard shows them on hover and on the run's page.
        "ci_job": ci_job(),
        "branch": git_branch(),
        # The history (meddpm-history) tells runners apart by this; CI runners name themselves.
        "host": os.environ.get("RUNNER_NAME") or platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": str(device),
    }
    env["commit_subject"] = commit_subject(env["commit"])
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["gpu_name"] = props.name
        env["compute_capability"] = f"{props.major}.{props.minor}"
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        uuid = str(props.uuid)
        env["gpu_uuid"] = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        env["driver"] = _driver_version()
        env.update(_card_limits(device))
    else:
        env["cpu"] = platform.processor() or platform.machine()
        env["threads"] = torch.get_num_threads()
    return env
