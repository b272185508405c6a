"""The checks of what the suite and ``meddpm-bench`` measure and where they write, one rule each for both tools.

The preset and its device default, the combos, the number of processes with ``--compare-to``, and
a folder or file that must be writable: each a UserError naming the option, raised before measuring.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from meddpm.atomic import write_target
from meddpm.errors import UserError
from meddpm.measure.campaign.settings import check_count
from meddpm.measure.processes.campaign import AB_PROCESSES
from meddpm.model.config import ModelConfig
from meddpm.run.combos import COMBOS, get_combo

MAX_PROCESSES = 32  # measuring processes (a side): each builds and warms every combo, tens of seconds on a GPU

# CPU runs default to the combos that finish in seconds there: bf16 conv3d crawls on CPUs
# (about 12 s per tiny iteration) and compilation needs minutes; TF32 does not exist there.
CPU_DEFAULT_COMBOS = ("baseline", "opt2")


def preset_for(given: str | None, on_gpu: bool) -> ModelConfig:
    """``--preset``, else paper on a GPU and tiny on the CPU; an unknown name is a UserError."""
    return ModelConfig.preset(given or ("paper" if on_gpu else "tiny"))


def parse_combos(spec: str | None) -> tuple[str, ...] | None:
    """Combo names from ``--combos`` (comma-separated, or 'all'), checked; None where none was given.

    A name given twice is refused: the combo would be built and measured twice and show twice.
    """
    if spec is None:
        return None
    names = tuple(COMBOS) if spec.strip() == "all" else tuple(n.strip() for n in spec.split(",") if n.strip())
    if not names:
        raise UserError(f"no combos given in --combos; choose from {', '.join(COMBOS)} or 'all'")
    if spec.strip() != "all" and len(names) != len(spec.split(",")):  # a name lost between commas, say
        raise UserError(f"--combos {spec!r} has an empty name; give the names separated by single commas")
    for name in names:
        get_combo(name)
    twice = sorted({name for name in names if names.count(name) > 1}, key=names.index)
    if twice:
        raise UserError(f"--combos names {', '.join(twice)} more than once; give each combo once")
    return names


def combos_for(given: tuple[str, ...] | None, on_gpu: bool) -> tuple[str, ...]:
    """The combos given, else all of them on a GPU and the quick ones on the CPU."""
    return given or (tuple(COMBOS) if on_gpu else CPU_DEFAULT_COMBOS)


def revision(given: str | None) -> str | None:
    """``--compare-to``'s revision, stripped; an empty one is a UserError."""
    if given is None:
        return None
    if not given.strip():
        raise UserError("--compare-to is empty; give a commit, branch or tag, e.g. --compare-to=origin/main")
    return given.strip()


def process_count(option: str, given: int | None, compare_to: str | None) -> int:
    """Measuring processes (a side, in an A/B run): the number given, else 1, or AB_PROCESSES with a revision;
    2 or more for an A/B run, MAX_PROCESSES at most."""
    count = given if given is not None else AB_PROCESSES if compare_to is not None else 1
    least = 2 if compare_to is not None else 1
    if count < least:
        why = " (an A/B needs a spread on each side)" if compare_to is not None else ""
        raise UserError(f"{option} must be at least {least}{why}, got {count}")
    check_count(option, count, least, MAX_PROCESSES)
    return count


def detectable_target(option: str, given: float | None, ab: str | None) -> float | None:
    """The detectable change at which an A/B combo needs no more processes, checked: a share between 0 and 1, and only
    for an A/B run (``ab`` names the option that makes it one; None: not one)."""
    if given is None:
        return None
    if ab is None:
        raise UserError(f"{option} stops an A/B's combos early; give --compare-to, --compare-python or --compare-env")
    if not 0 < given < 1:
        raise UserError(f"{option} must be a share between 0 and 1, e.g. 0.01 for 1 %, got {given}")
    return given


def _nearest_folder(path: Path) -> Path:
    """The nearest of ``path`` and its parents that exists: where writing is decided, as the writers make the rest."""
    return next(p for p in (path, *path.parents) if p.exists())


def _cannot_write(folder: Path) -> str | None:
    """Why no file can be made in ``folder``, or None if one can.

    A probe file, not os.access: permission bits say nothing of read-only mounts, ACLs or root.
    """
    try:
        fd, probe = tempfile.mkstemp(prefix=".meddpm.", suffix=".probe", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(probe)
    return None


def _cannot_replace(target: Path) -> str | None:
    """Why the existing file ``target`` cannot be replaced though its folder is writable, or None.

    An immutable or append-only file refuses to be opened for writing with EPERM (permission bits
    give EACCES, and do not stop the atomic writer's rename); opened without truncating, it is left
    as it was.
    """
    if not target.is_file():
        return None
    try:
        os.close(os.open(target, os.O_WRONLY))
    except PermissionError as exc:
        return exc.strerror if exc.errno == errno.EPERM else None
    return None


def writable_folder(option: str, path: Path) -> None:
    """A UserError unless ``path`` is a folder that exists or can be made, and can be written to."""
    with _unusable_path(option, path):
        _check_folder(option, path)


def writable_file(option: str, path: Path, what: str) -> None:
    """A UserError unless the file ``path`` (``what`` it holds, in words) can be written now."""
    with _unusable_path(option, path):
        _check_file(option, path, what)


@contextlib.contextmanager
def _unusable_path(option: str, path: Path) -> Iterator[None]:
    """A path the system refuses to look up (a name too long, a symlink loop) as a one-line UserError."""
    try:
        yield
    except OSError as exc:
        raise UserError(f"{option} {path}: {exc.strerror or exc}; give another path") from None


def _check_folder(option: str, path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path} is a file; point it at a folder")
    existing = _nearest_folder(path)
    if not existing.is_dir():
        raise UserError(f"{option} {path} cannot be made: {existing} is a file; choose another folder")
    reason = _cannot_write(existing)
    if reason is not None:
        raise UserError(f"{option} {path} cannot be written ({reason} in {existing}); choose another folder")


def _check_file(option: str, path: Path, what: str) -> None:
    if path.is_dir():
        raise UserError(f"{path} is a directory; give {option} a file path such as {path / 'results.json'}")
    target = write_target(path)  # a device, a pipe or a link to one is refused before measuring
    folder = _nearest_folder(target.parent)
    if not folder.is_dir():
        raise UserError(f"cannot write {what} to {path}: {folder} is a file; give another {option} path")
    reason = _cannot_write(folder)
    if reason is not None:
        raise UserError(f"cannot write {what} to {path}: {reason} in {folder}; give a writable {option} path")
    reason = _cannot_replace(target)
    if reason is not None:
        raise UserError(f"cannot write {what} to {path}: {reason} replacing it; give a writable {option} path")
