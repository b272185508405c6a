"""One folder of compiled artifacts that every process of a run, every run on the machine and a CI runner that
restores it share: compile once, reuse everywhere.

Inductor keeps its FX graphs, AOTAutograd's joint graphs, its autotuning choices and (through Triton's own cache
beside them) the compiled kernels in ``TORCHINDUCTOR_CACHE_DIR``, each under a key of the graph it compiled, so a
process whose graphs agree with an earlier one's loads them instead of compiling: both sides of an A/B where
their code agrees, every step of a bisection, the sampling graph where it shares kernels with the training graph.
What no graph key sees, and what makes every entry useless at once, sets the folder: the torch and Triton
versions, the Python version and the GPU model (``<root>/<environment key>/``). The workload's source is recorded
beside it (``workloads/<source key>``) once a process compiled it, so each process can say whether its own code
was compiled there before ("hit") or is new ("miss", where Inductor still reuses the graphs that agree).

The root is ``--perf-compile-cache`` / ``--compile-cache``, else ``MEDDPM_COMPILE_CACHE``, else
``~/.cache/meddpm-perf/compile`` (:mod:`~meddpm.measure.machine.cache_root`, which also keeps Python's bytecode
there); ``off`` leaves Inductor's own default alone. Worker processes inherit the root
through ``MEDDPM_COMPILE_CACHE`` and key their own workload and interpreter.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import platform
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from meddpm.errors import UserError
from meddpm.measure.machine.cache_root import OFF, ROOT_VARIABLE, default_root
from meddpm.model.config import ModelConfig

WORKLOAD_ROOMS = ("kernels", "model", "run", "data")  # the rooms a revision supplies (docs/design.md)


def add_option(addoption: Callable[..., Any], name: str) -> None:
    """Declare the cache's option as ``name`` with ``addoption`` (argparse's ``add_argument`` or a pytest group's
    ``addoption``): the suite's ``--perf-compile-cache`` and the bench's ``--compile-cache``."""
    addoption(
        name,
        default=None,
        metavar="DIR|off",
        help="keep compiled artifacts (Inductor, AOTAutograd, Triton, Python bytecode) in DIR, keyed by torch, Triton, "
        "Python and GPU, for every process of this and later runs; off: torch's own default (default: "
        f"${ROOT_VARIABLE}, else ~/.cache/meddpm-perf/compile)",
    )


def use_root(root: str | None) -> None:
    """Keep this process's and its workers' caches under ``root`` (a folder, or ``off``); None changes nothing."""
    if root:
        os.environ[ROOT_VARIABLE] = root


def checked_root(given: str | None, option: str) -> str | None:
    """The cache root that ``option`` (None: not given) or ``MEDDPM_COMPILE_CACHE`` names, made absolute (workers
    start in other folders) and its folder created, or a one-line UserError: checked before anything is measured,
    since a compiling combo would otherwise fail on it after the others' warm-up. None where neither names one."""
    source = option if given is not None else f"${ROOT_VARIABLE}"
    root = given if given is not None else (os.environ.get(ROOT_VARIABLE) or None)  # set but empty: unset
    if root is None or root == OFF:
        return root
    if not root.strip():
        raise UserError(f"{source} is empty; give a folder for the compile cache, or {OFF} for torch's own default")
    try:
        folder = Path(root).expanduser().absolute()
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        why = "it is not a folder" if isinstance(exc, (FileExistsError, NotADirectoryError)) else exc.strerror
        raise UserError(
            f"{source} {root}: cannot keep the compile cache there ({why}); give a writable folder, or {OFF}"
        ) from None
    return str(folder)


def environment_key(device: torch.device) -> str:
    """What invalidates every compiled artifact at once: torch, Triton and Python versions and the GPU model."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    gpu = "cpu"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu = f"{props.name}-sm{props.major}{props.minor}"
    parts = (torch.__version__, triton_version, platform.python_version(), gpu)
    readable = "-".join(p.replace(" ", "_").replace("/", "_") for p in (torch.__version__, gpu))
    return f"{readable}-{hashlib.sha256('|'.join(parts).encode()).hexdigest()[:10]}"


def workload_tree() -> Path:
    """The folder holding the ``meddpm/`` whose workload this process imported: the working tree, or in a worker
    the revision it drives (meddpm.measure.processes.workload)."""
    return Path(inspect.getfile(ModelConfig)).resolve().parents[2]


def workload_key(tree: Path) -> str:
    """A hash of the workload's source under ``tree`` (the folder holding ``meddpm/``): its rooms' Python files."""
    digest = hashlib.sha256()
    package = tree / "meddpm"
    for room in WORKLOAD_ROOMS:
        for path in sorted((package / room).rglob("*.py")):
            digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class CompileCache:
    """The cache folder of this process's environment, and its workload's key in it."""

    folder: Path  # <root>/<environment key>
    workload: str

    @classmethod
    def of(cls, root: str | Path, tree: Path, device: torch.device) -> CompileCache:
        """The cache under ``root`` for ``tree``'s workload on ``device``."""
        return cls(Path(root).expanduser().resolve() / environment_key(device), workload_key(tree))

    @property
    def warm(self) -> bool:
        """Whether a process compiled this workload in this folder before."""
        return (self.folder / "workloads" / self.workload).exists()

    def activate(self) -> None:
        """Point Inductor (and Triton, whose cache Inductor would otherwise put elsewhere) at this folder, and
        pass the root to worker processes. Inductor reads the variables when it compiles, not when imported."""
        (self.folder / "workloads").mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(self.folder / "inductor")
        os.environ["TRITON_CACHE_DIR"] = str(self.folder / "triton")
        os.environ[ROOT_VARIABLE] = str(self.folder.parent)

    def mark_compiled(self) -> None:
        """Record that this workload compiled here, so the next process of it says "hit"."""
        (self.folder / "workloads").mkdir(parents=True, exist_ok=True)
        (self.folder / "workloads" / self.workload).touch()


def activate(root: str | None, device: torch.device, tree: Path | None = None) -> CompileCache | None:
    """The cache of ``tree``'s workload (None: this process's, :func:`workload_tree`) under ``root`` (None:
    :func:`default_root`), activated; None for ``off``, which worker processes then inherit too."""
    root = root or default_root()
    if root == OFF:
        os.environ[ROOT_VARIABLE] = OFF
        return None
    cache = CompileCache.of(root, tree or workload_tree(), device)
    cache.activate()
    return cache


def inductor_counters() -> dict[str, int]:
    """Inductor's and AOTAutograd's cache hits and misses so far in this process (empty where torch keeps none)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    return {
        "fx_graph_hits": counters["inductor"]["fxgraph_cache_hit"],
        "fx_graph_misses": counters["inductor"]["fxgraph_cache_miss"],
        "autograd_hits": counters["aot_autograd"]["autograd_cache_hit"],
        "autograd_misses": counters["aot_autograd"]["autograd_cache_miss"],
    }
