"""Files that are never half-written: write a temporary file beside the target, then rename."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _current_umask() -> int:
    """The process's umask, left unchanged.

    ``os.umask`` can only read it by setting it, so it is set back at once; the stand-in is the
    most restrictive mask, so a file another thread creates in between is too private, never too open.
    """
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file, fsync and a rename.

    A crash at any point leaves either the old file or the new one, never a mix, and no
    temporary file behind. The file gets mode ``0o666 & ~umask``, as a plain ``open`` would
    give a new file; this holds when it replaces an existing file too, whose mode is not kept.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            # mkstemp creates the file 0600 whatever the umask, which would hide results from
            # the rest of a group that shares them.
            os.fchmod(f.fileno(), 0o666 & ~_current_umask())
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write ``payload`` as indented JSON to ``path`` atomically (see :func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(payload, indent=2, default=str) + "\n")
