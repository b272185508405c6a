"""Starting worker processes: the command and environment of a worker, a run to its end, and a worker started ahead.

A worker spends its first seconds importing the harness, torch and the workload (about 10 s of a worker's wall
time on an H100, docs/ci.md), and an A/B or a bisection runs its workers one after another: a
:class:`StartedWorker` is started while the process before it measures, imports what it needs, and waits for its
job on stdin before it touches the GPU. The measuring itself is never shared: the GPU runs one worker at a time.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import meddpm
from meddpm.measure.machine.cache_root import bytecode_environment

# Linux's prctl, resolved before any fork: a forked child may call only what is already loaded.
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None) if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1

# The worker's switch that makes it read its job, one JSON list of arguments, from stdin before it measures.
JOB_ON_STDIN = "--job-on-stdin"


def harness_root() -> Path:
    """The folder holding the imported ``meddpm`` package, whose harness every worker runs."""
    return Path(meddpm.__file__).resolve().parent.parent


def worker_command(workload: Path, python: str | None = None) -> list[str]:
    """The command line of a worker that drives ``workload``'s workload with this tree's harness, run by ``python``
    (None: this interpreter)."""
    return [python or sys.executable, "-m", "meddpm.measure.processes.worker", "--workload", str(workload)]


def worker_environment(extra: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """This process's environment with the ``extra`` variables, and this tree's ``meddpm`` first on the path: the
    harness every worker runs; its Python bytecode kept in the compile cache (meddpm.measure.machine.compile_cache)."""
    env = bytecode_environment({**os.environ, **dict(extra)})
    path = os.pathsep.join(filter(None, [str(harness_root()), env.get("PYTHONPATH")]))
    return {**env, "PYTHONPATH": path}


def run_to_the_end(cmd: list[str], cwd: Path, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    """Run a worker to its end; one cut short (Ctrl-C, SIGTERM, the timeout) is killed and reaped before this returns.

    ``subprocess.run`` waits only a quarter of a second for a child it killed on a KeyboardInterrupt,
    so a worker still dying then outlived the run as a zombie holding its GPU context. Where this process
    dies without running that (SIGKILL, the OOM killer), the kernel kills the worker (Linux).
    """
    # A worker reads nothing; an interactive one must not wait on the terminal.
    with _start(cmd, cwd, env, stdin=subprocess.DEVNULL) as proc:
        return _wait(proc, None, timeout_s)


class StartedWorker:
    """A worker process started ahead of its turn: it imports, then waits for :meth:`run` to hand it its job."""

    def __init__(self, workload: Path, python: str | None, env: Sequence[tuple[str, str]]):
        command = [*worker_command(workload, python), JOB_ON_STDIN]
        self._proc = _start(command, harness_root(), worker_environment(env), stdin=subprocess.PIPE)

    def run(self, job: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess:
        """Hand the worker ``job`` (its measuring arguments) and wait for its end, as :func:`run_to_the_end` does."""
        with self._proc as proc:
            return _wait(proc, json.dumps(list(job)) + "\n", timeout_s)

    def cancel(self) -> None:
        """End a worker that gets no job (the run stopped early, or was cut short); it never touched the GPU."""
        with self._proc as proc:
            proc.kill()
            proc.wait()


def _start(cmd: list[str], cwd: Path, env: dict[str, str], stdin: int) -> subprocess.Popen:
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_die_with_parent,
    )


def _wait(proc: subprocess.Popen, job: str | None, timeout_s: float) -> subprocess.CompletedProcess:
    try:
        stdout, stderr = proc.communicate(job, timeout=timeout_s)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _die_with_parent() -> None:
    """In the forked child: the kernel kills it when its parent dies, even by SIGKILL, which runs no cleanup of ours;
    an orphaned worker would go on measuring and hold its GPU."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
