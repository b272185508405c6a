"""Where a baseline file lives, loading it with one-line errors, and saving it atomically under a lock."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from meddpm.atomic import write_text_atomic
from meddpm.judge.baseline.checks import validate
from meddpm.judge.baseline.document import BASELINE, from_dict, to_dict
from meddpm.judge.baseline.model import BaselineError, BaselineFile
from meddpm.judge.baseline.reader import Invalid
from meddpm.versioned.loader import DocumentError, MissingDocument, load_one

_FIX = BASELINE.fix


def baseline_path(directory: Path, arch: str) -> Path:
    """Where the baseline of ``arch`` lives."""
    return directory / f"{arch}.json"


def load_baseline(path: Path, arch: str) -> BaselineFile | None:
    """The baseline file at ``path``, None if there is none, or a one-line BaselineError.

    It is read by the versioned loader (an older version upgraded, the file's type, JSON and schema
    checked), then every field is checked before anything is measured: unknown keys (with the nearest
    known one), types (a bool is no number, counts are ints, numbers are finite), and the figures no
    verdict can use (see :func:`validate`).
    """
    try:
        data = load_one(path, BASELINE)
    except MissingDocument:
        return None
    except DocumentError as exc:
        raise BaselineError(f"baseline file {exc}") from None
    try:
        loaded = from_dict(data)
        validate(loaded)
    except Invalid as exc:
        raise BaselineError(f"baseline file {path} has {exc.problem}; {exc.advice(_FIX)}") from None
    except ValueError as exc:
        raise BaselineError(f"baseline file {path} has {exc}; {_FIX}") from None
    if loaded.arch != arch:
        raise BaselineError(f"baseline file {path} is for arch {loaded.arch!r}, not {arch!r}; rename or re-create it")
    return loaded


_SCALAR_LIST = re.compile(r"\[\s*((?:-?[\d.eE+-]+|null|true|false)(?:,\s*(?:-?[\d.eE+-]+|null|true|false))*)\s*\]")


def dumps_reviewable(document: Any) -> str:
    """JSON indented for reading, with lists of numbers kept on one line, and a list of lists (a profile's rows)
    with one inner list a line."""
    inner: list[str] = []

    def mark(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list) and value and all(isinstance(x, list) for x in value):
            inner.extend(json.dumps(x) for x in value)
            return [f"\0{len(inner) - len(value) + i}\0" for i in range(len(value))]
        if isinstance(value, list):
            return [mark(x) for x in value]
        return value

    text = json.dumps(mark(document), indent=2)
    text = re.sub(r'"\\u0000(\d+)\\u0000"', lambda m: inner[int(m.group(1))], text)
    return _SCALAR_LIST.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text) + "\n"


def save_baseline(path: Path, baseline: BaselineFile) -> None:
    """Write ``baseline`` to ``path`` atomically: the old file or the new one, never a mix."""
    write_text_atomic(path, dumps_reviewable(to_dict(baseline)))


def update_baseline(
    path: Path, arch: str, change: Callable[[BaselineFile], BaselineFile], lock_timeout_s: float = 120.0
) -> BaselineFile:
    """Read, change and write ``path`` under an exclusive file lock; returns what was written.

    The file is read again inside the lock, not taken from the start of the session, so two
    runs saving the same architecture at once both keep their cases: the second one merges
    into what the first one wrote. ``change`` gets the current file (an empty one if there is
    none) and returns the new one.
    """
    lock = FileLock(str(path) + ".lock", timeout=lock_timeout_s)
    try:
        with lock:
            current = load_baseline(path, arch) or BaselineFile(arch=arch, description=f"Measured on {arch}.")
            updated = change(current)
            save_baseline(path, updated)
            return updated
    except Timeout:
        raise BaselineError(
            f"baseline file {path} stayed locked by another run for {lock_timeout_s:.0f} s; "
            f"wait for it to finish (or remove {lock.lock_file} if no run is saving) and save again"
        ) from None
