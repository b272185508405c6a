"""A git repository holding a copy of meddpm whose iteration times are planted in its workload.

The copy's harness (measure/campaign/interleaved.py) gets a clock that runs each training step
but reads its time from the workload it drives: ``PLANTED_MS`` in meddpm/run/combos.py, 100 ms for
a combo not named there, plus up to 0.2 % that differs between processes (their PIDs), as real
processes do. A commit changing ``PLANTED_MS`` is then a change in performance of the workload,
and the outcome of an A/B run or a bisection depends on the code, not on a busy machine.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import meddpm

PACKAGE = Path(meddpm.__file__).resolve().parent

CLOCK = """

def time_synchronized(fn, device, during=None):
    import os

    from meddpm.run import combos

    fn()
    if during is not None:
        during()
    return getattr(combos, "PLANTED_MS", {{}}).get(fn.combo.name, 100.0) * {scale} * (1 + (os.getpid() % 5) * 0.0005)
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def set_clock(repo: Path, **ms: float) -> None:
    """In the copy's workload: each iteration of the combos named takes the time given (the others 100 ms)."""
    combos = repo / "meddpm" / "run" / "combos.py"
    combos.write_text((PACKAGE / "run" / "combos.py").read_text() + f"\nPLANTED_MS = {ms!r}\n")


def plant_harness_clock(repo: Path, scale: float = 1.0) -> None:
    """In the copy's harness: iterations read the workload's planted times, times ``scale``."""
    campaign = repo / "meddpm" / "measure" / "campaign" / "interleaved.py"
    campaign.write_text((PACKAGE / "measure" / "campaign" / "interleaved.py").read_text() + CLOCK.format(scale=scale))


def make_repo(tmp_path: Path) -> Path:
    """The repository, its one commit ("reference: 100 ms") holding the planted clock."""
    root = tmp_path / "repo"
    shutil.copytree(PACKAGE, root / "meddpm", ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".gitignore").write_text("__pycache__/\nresults/\n")
    git(root, "init", "-q")
    git(root, "config", "user.email", "ab@test")
    git(root, "config", "user.name", "ab")
    plant_harness_clock(root)
    set_clock(root)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "reference: 100 ms")
    return root
