"""Starting worker processes: the command and environment of a worker, a run to its end, and a worker started ahead.

A worker spends its first seconds importing the harness, torch and the workload (about 10 s of a worker's wall
time on an H100, docs/ci.md), and an A/B or a bisection runs its workers one after another: a
:class:`StartedWorker` is started while the process before it measures, imports what it needs, and waits for its
job on stdin. Its last seconds are its exit (Inductor's compile workers shut down, the CUDA context torn down:
about 2.7 s of a `fast` process on an H200), so a worker says when its results are written (:data:`RESULTS_WRITTEN`)
and the next one gets its job then: it builds its models while the one before exits, and waits on stdin for
:data:`GPU_FREE`, sent once that one has ended, before its first iteration. The measuring itself is never shared:
the GPU runs one worker's iterations at a time.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import meddpm
from meddpm.measure.machine.cache_root import bytecode_environment

# Linux's prctl, resolved before any fork: a forked child may call only what is already loaded.
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None) if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1

# The worker's switch that makes it read its job, one JSON list of arguments, from stdin before it measures.
JOB_ON_STDIN = "--job-on-stdin"
# Such a worker's line on stdout once its results are written and its cached GPU memory released: what is left is
# its exit (the CUDA context among it).
RESULTS_WRITTEN = "meddpm-worker: results written"
# The parent's line on such a worker's stdin once no other worker holds the GPU: it may run its first iteration.
GPU_FREE = "gpu free"
# How long a worker's pipes are read after it ended: a process it started may still hold them open.
_PIPES_AFTER_EXIT_S = 5.0


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
        return _wait(proc, timeout_s)


class StartedWorker:
    """A worker process started ahead of its turn: it imports, then waits for :meth:`run` to hand it its job."""

    def __init__(self, workload: Path, python: str | None, env: Sequence[tuple[str, str]]):
        command = [*worker_command(workload, python), JOB_ON_STDIN]
        self._proc = _start(command, harness_root(), worker_environment(env), stdin=subprocess.PIPE)
        self._written = False
        self._turn_over = threading.Event()  # set once its results are written, or once it ended without them
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        # Both pipes are drained as the worker writes: a full pipe would stall it mid-measuring.
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]  # fmt: skip
        for reader in self._readers:
            reader.start()

    def run(self, job: Sequence[str], timeout_s: float, gpu_free: Callable[[], None]) -> bool:
        """Hand the worker ``job`` (its measuring arguments), let it run its iterations once ``gpu_free`` has
        returned (the worker before it has ended), and wait until it has written its results (True; it may still be
        exiting: :meth:`end`) or ended without them (False: :meth:`cancel` returns what it said); a worker cut short
        (Ctrl-C, SIGTERM, the timeout) is killed and reaped before this raises."""
        try:
            self._send(json.dumps(list(job)))
            gpu_free()
            self._send(GPU_FREE)
            with contextlib.suppress(OSError):  # it reads nothing more; one that ended already says why at its end
                self._proc.stdin.close()
            if not self._turn_over.wait(timeout_s):
                raise subprocess.TimeoutExpired(self._proc.args, timeout_s)
        except BaseException:
            self.cancel()
            raise
        return self._written

    def end(self, timeout_s: float) -> subprocess.CompletedProcess:
        """Wait for the worker's exit (it is killed after ``timeout_s``) and return its status and output."""
        try:
            self._proc.wait(timeout_s)
        except BaseException:
            self.cancel()
            raise
        return self._reap()

    def cancel(self) -> subprocess.CompletedProcess:
        """End the worker now (one that got no job never touched the GPU; one that did is killed mid-turn), and
        return its status and output."""
        self._proc.kill()
        return self._reap()

    def _send(self, line: str) -> None:
        try:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:  # it ended already: its end says why
            pass

    def _read_stdout(self) -> None:
        try:
            for line in self._proc.stdout:
                self._stdout.append(line)
                if line.rstrip() == RESULTS_WRITTEN:
                    self._written = True
                    self._turn_over.set()
        finally:  # it ended, with or without its results (or this thread failed): nobody waits in vain
            self._turn_over.set()

    def _read_stderr(self) -> None:
        for line in self._proc.stderr:
            self._stderr.append(line)

    def _reap(self) -> subprocess.CompletedProcess:
        """Wait for the process (ending or killed), read its pipes to their end and close them; its status and output.

        A process of its own that it started may hold the pipes open after it ended: the readers are given a few
        seconds, and pipes still being read are left to the garbage collector rather than closed under a reader."""
        self._proc.wait()
        for reader in self._readers:
            reader.join(_PIPES_AFTER_EXIT_S)
        if not any(reader.is_alive() for reader in self._readers):
            for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
                with contextlib.suppress(OSError):  # stdin's buffer flushed into a pipe nobody reads any more
                    pipe.close()
        return subprocess.CompletedProcess(
            self._proc.args, self._proc.returncode, "".join(self._stdout), "".join(self._stderr)
        )


def _start(cmd: list[str], cwd: Path, env: dict[str, str], stdin: int) -> subprocess.Popen:
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",  # a stray byte in a worker's output must not stop the thread reading it
        preexec_fn=_die_with_parent,
    )


def _wait(proc: subprocess.Popen, timeout_s: float) -> subprocess.CompletedProcess:
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
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
