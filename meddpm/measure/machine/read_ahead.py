"""The GPU stack's files read ahead into the page cache: torch's, the CUDA libraries' and Triton's.

On a freshly started runner none of them is in the page cache, and a process faults them in a few pages at a time
as it imports torch, loads cuDNN's and cuBLAS's kernels and compiles. A few daemon threads read them whole, shared
libraries first, while the process imports and compiles (seconds on a fresh machine's disk: docs/ci.md); nothing
is kept but the kernel's cache, and a process that ends first simply stops them. The workers a run starts later
find the files cached.

Only where an NVIDIA driver is loaded (:data:`DRIVER`): a CPU-only machine's runs load none of the CUDA stack;
``MEDDPM_READ_AHEAD=off`` turns it off (a host short of memory for the page cache, say).
This module imports nothing but the standard library, so the suite's ``conftest.py`` can start it before the
plugin imports torch.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

DRIVER = Path("/proc/driver/nvidia")
SWITCH = "MEDDPM_READ_AHEAD"  # "off": no read-ahead
# The packages a measuring process loads from, in the order it first needs them: torch's own libraries at import,
# then cuDNN's and cuBLAS's (the pip wheels' ``nvidia`` namespace) at the first convolution, then Triton's.
PACKAGES = ("torch", "nvidia", "triton")
THREADS = 4  # a few reads in flight keep a virtual disk busy; one thread alone waits on each read in turn
CHUNK = 8 << 20
_LIBRARY = re.compile(r"\.so(\.\d+)*$")  # libcudnn.so.9, libtorch_cuda.so

_started: ReadAhead | None = None


class ReadAhead:
    """Daemon threads reading the files ``list_files`` names whole, in order; :attr:`bytes_read` and :attr:`seconds`
    once done. The files are listed on a thread of their own too: walking the packages' folders is no part of the
    caller's start."""

    def __init__(self, list_files: Callable[[], Sequence[Path]], threads: int = THREADS):
        self.files: list[Path] = []
        self.bytes_read = 0
        self.seconds: float | None = None  # None until every file was read
        self._todo: queue.SimpleQueue[Path] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = threads
        self._readers: list[threading.Thread] = []
        self._started = time.perf_counter()
        self._lister = threading.Thread(target=self._list, args=(list_files, threads), name="meddpm-read-ahead")
        self._lister.daemon = True
        self._lister.start()

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for every file to be read; whether they all were."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        self._lister.join(left())
        for thread in self._readers:  # all started once the lister has ended
            thread.join(left())
        return self.seconds is not None

    def describe(self) -> str:
        """One line: what was read, and how long it took or that it had not finished."""
        read = f"{len(self.files)} files of the GPU stack ({self.bytes_read / 1e9:.2f} GB)"
        if self.seconds is None:
            return f"{read} read ahead so far, not finished"
        return f"{read} read ahead in {self.seconds:.1f} s"

    def _list(self, list_files: Callable[[], Sequence[Path]], threads: int) -> None:
        self.files = list(list_files())
        for path in self.files:
            self._todo.put(path)
        self._readers = [
            threading.Thread(target=self._read, name="meddpm-read-ahead", daemon=True) for _ in range(threads)
        ]
        for thread in self._readers:
            thread.start()

    def _read(self) -> None:
        while True:
            try:
                path = self._todo.get_nowait()
            except queue.Empty:
                break
            read = 0
            try:
                with path.open("rb", buffering=0) as file:
                    while chunk := file.read(CHUNK):
                        read += len(chunk)
            except OSError:
                pass  # a file gone or unreadable: the process that needs it will say so
            with self._lock:
                self.bytes_read += read
        with self._lock:
            self._running -= 1
            if not self._running:
                self.seconds = time.perf_counter() - self._started


def stack_files(packages: Iterable[str] = PACKAGES) -> list[Path]:
    """The shared libraries of ``packages`` (in that order), then their Python sources; none where not installed."""
    libraries: list[Path] = []
    sources: list[Path] = []
    for folder in (Path(f) for name in packages for f in _locations(name)):
        for root, _, names in os.walk(folder):
            for name in sorted(names):
                if _LIBRARY.search(name):
                    libraries.append(Path(root, name))
                elif name.endswith(".py"):
                    sources.append(Path(root, name))
    return libraries + sources


def read_stack_ahead() -> ReadAhead | None:
    """Start reading the GPU stack ahead, once a process and only where an NVIDIA driver is loaded and
    :data:`SWITCH` is not "off"; the reader started (by this call or an earlier one), else None."""
    global _started
    if _started is None and DRIVER.is_dir() and os.environ.get(SWITCH, "").lower() != "off":
        _started = ReadAhead(lambda: stack_files(PACKAGES))
    return _started


def started() -> ReadAhead | None:
    """The reader this process started, if any."""
    return _started


def _locations(package: str) -> list[str]:
    """The folders of an installed package (a namespace package has several), without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec else []
