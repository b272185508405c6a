"""One tree's harness driving another tree's workload, inside one process.

The workload is the code a revision supplies and a benchmark measures: the rooms in
:data:`WORKLOAD_ROOMS` (the model, its kernels, the training step and combos, the data). Everything
else in ``meddpm`` is the harness, which measures, judges and stores. An A/B run or a bisection
measures every side with the working tree's harness and only the workload of that side's revision,
as asv runs today's benchmarks against each installed commit: a change to the warm-up rule or the
stop rule then moves both sides alike instead of posing as a change in performance.

:func:`use_workload` makes that happen: it puts a finder first on ``sys.meta_path`` that loads the
workload rooms' packages (``meddpm.model``, ``meddpm.run`` ...) from another tree's ``meddpm/``
folder, while ``meddpm`` itself and the harness rooms stay the ones this process imported. The
workload's submodules then follow from their package's ``__path__``, and its imports of the
plumbing (``meddpm.errors``) reach this tree's, so a ``UserError`` raised by a revision's combo
is the class the harness catches. It must run before anything imports a workload room, which is
why ``import meddpm`` imports none of them (the public API is loaded on first use).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

WORKLOAD_ROOMS = ("kernels", "model", "run", "data")
_PACKAGES = frozenset(f"meddpm.{room}" for room in WORKLOAD_ROOMS)


class _WorkloadFinder(importlib.abc.MetaPathFinder):
    """Finds the workload rooms' packages in ``package_dir`` (another tree's ``meddpm/``), nothing else."""

    def __init__(self, package_dir: Path):
        self.package_dir = package_dir

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, [str(self.package_dir)])
        if spec is None:  # never the harness's own room in its place: that would measure this tree twice
            raise ModuleNotFoundError(f"the workload chosen has no {fullname} (no {self.package_dir.name}/ room there)")
        return spec


def use_workload(tree: Path) -> None:
    """From now on, import the workload rooms from ``tree/meddpm`` (a checkout or an extracted revision).

    Refuses (RuntimeError: a bug of the caller, not of the user) once a workload room was imported
    from elsewhere, since its modules would mix two revisions.
    """
    package_dir = (tree / "meddpm").resolve()
    loaded = sorted(name for name in sys.modules if ".".join(name.split(".")[:2]) in _PACKAGES)
    if loaded:
        raise RuntimeError(f"the workload must be chosen before it is imported; already imported: {loaded[:3]}")
    sys.meta_path.insert(0, _WorkloadFinder(package_dir))


def workload_folder() -> Path:
    """The ``meddpm/`` folder this process's workload comes from (the model's room: all of it comes from there)."""
    spec = importlib.util.find_spec("meddpm.model")
    if spec is None or spec.origin is None:
        raise RuntimeError("meddpm.model cannot be found: the workload chosen has no model room")
    return Path(spec.origin).resolve().parent.parent
