"""Where the compile cache lives, and the Python bytecode kept under it: read before torch is imported.

Container images often set ``PYTHONDONTWRITEBYTECODE`` (and packages may be read-only), so every process compiled
torch's sources to bytecode anew: 7.5 s of a measuring worker on an H100 machine, and more of the suite's own
process, which imports Dynamo, Inductor and the reports as the run goes (docs/ci.md). The bytecode goes under the
cache's ``pycache`` folder instead, written once and read by every later process; nothing is written beside the
packages. This module imports nothing but the standard library, so the suite's ``conftest.py`` can apply it to its
own process before the plugin imports torch; :mod:`meddpm.measure.machine.compile_cache` keys the rest.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT_VARIABLE = "MEDDPM_COMPILE_CACHE"
OFF = "off"


def default_root() -> str:
    """Where the cache lives when no option names it: ``MEDDPM_COMPILE_CACHE``, else under the user's cache."""
    return os.environ.get(ROOT_VARIABLE) or str(Path.home() / ".cache" / "meddpm-perf" / "compile")


def bytecode_folder(root: str) -> Path:
    """The folder under the cache ``root`` that keeps Python bytecode (``PYTHONPYCACHEPREFIX``)."""
    return Path(root).expanduser().resolve() / "pycache"


def bytecode_environment(env: dict[str, str]) -> dict[str, str]:
    """A worker's environment whose Python bytecode is kept in the compile cache's ``pycache`` folder
    (``PYTHONPYCACHEPREFIX``, unless one is set; ``PYTHONDONTWRITEBYTECODE`` dropped). With the cache ``off``, the
    environment is kept."""
    root = env.get(ROOT_VARIABLE) or default_root()
    if root == OFF:
        return env
    kept = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    kept.setdefault("PYTHONPYCACHEPREFIX", str(bytecode_folder(root)))
    return kept


def keep_own_bytecode() -> Path | None:
    """Where this process may not write bytecode (``PYTHONDONTWRITEBYTECODE``) and has no prefix of its own, keep
    what it imports from now on under the cache's ``pycache`` folder, as its workers do; the folder, or None where
    nothing changed (bytecode already written, a prefix set, the cache ``off`` or its folder not writable).

    The root is ``MEDDPM_COMPILE_CACHE`` or the default: an option given on the command line is read later, after
    torch is imported, and then only the workers follow it."""
    root = default_root()
    if not sys.dont_write_bytecode or sys.pycache_prefix or root == OFF:
        return None
    folder = bytecode_folder(root)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return None
    sys.pycache_prefix = str(folder)
    sys.dont_write_bytecode = False
    return folder
