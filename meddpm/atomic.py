"""Files that are never half-written: write a temporary file beside the target, then rename."""

from __future__ import annotations

import datetime
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from meddpm.errors import UserError

# What stat's file types are called in a message; a regular file is the one kind that is written.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def write_target(path: Path) -> Path:
    """The file a write to ``path`` replaces: a symlink's final target, never the link itself.

    A rename over anything but a regular file would swap a device (``/dev/null``), a pipe or a
    folder for a plain file, so those raise a :class:`UserError` naming the path and the fix.
    """
    real = Path(os.path.realpath(path))
    try:
        mode = real.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return real  # a new file, or a dangling link's target: the write says if its folder cannot be made
    if stat.S_ISREG(mode):
        return real
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    what = f"it links to {real}, {kind}" if path.is_symlink() else f"it is {kind}"
    raise UserError(f"cannot write {path}: {what}; give the path of a regular file or of a new one")


def run_stamp() -> str:
    """A file-name part unique to this run: the time to the microsecond and the process id.

    Two runs sharing a folder never start in the same microsecond in the same process, so neither
    overwrites the other's file.
    """
    return f"{datetime.datetime.now():%Y%m%d-%H%M%S-%f}-{os.getpid()}"


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
    A symlink is written through (its target is replaced, the link kept), and a target that is
    not a regular file is refused (see :func:`write_target`).
    """
    path = write_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Beside the real target: a rename only stays atomic within one file system.
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
