"""The code an A/B run measures: the working tree as it is, and a git revision checked out beside it."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import meddpm
from meddpm.errors import UserError
from meddpm.measure.machine.environment import git_output
from meddpm.measure.processes.campaign import WORKER_MODULES, Source, sigterm_as_interrupt, worker_file

# What every measurable revision has: the worker whose JSON the A/B protocol reads, in one of its places.
WORKER_FILES = tuple(worker_file(m) for m in WORKER_MODULES)


def package_root() -> Path:
    """The folder holding the imported ``meddpm`` package (a checkout, or site-packages)."""
    return Path(meddpm.__file__).resolve().parent.parent


def checkout_root() -> Path:
    """The git checkout this ``meddpm`` package was imported from, or a UserError."""
    root = package_root()
    top = _git(["rev-parse", "--show-toplevel"], root)
    if top is None or Path(top).resolve() != root:
        raise UserError(f"--compare-to needs meddpm imported from a git checkout (pip install -e .), not from {root}")
    return root


def working_tree(root: Path) -> Source:
    """The working tree as it is, named by its commit and whether (and how much) it differs from it.

    A dirty tree is measured as it is, uncommitted changes included: that is what an A/B of
    a change before committing it wants.
    """
    head = _git(["rev-parse", "HEAD"], root) or "unknown"
    # Only the measured package counts: results, logs and test files beside it change no timing.
    changed = (_git(["status", "--porcelain", "--", "meddpm"], root) or "").splitlines()
    dirty = f"+dirty, {len(changed)} file(s) of meddpm/ changed or new" if changed else ""
    return Source(f"working tree ({head[:9]}{dirty})", root, head + ("+dirty" if changed else ""))


def resolve_revision(rev: str, root: Path) -> str:
    """The commit ``rev`` names, if it can be measured (it has the worker); else a one-line UserError."""
    sha = _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], root)
    if sha is None:
        raise UserError(f"--compare-to: unknown revision {rev!r}; give a commit, branch or tag that git knows")
    if all(_git(["cat-file", "-e", f"{sha}:{path}"], root) is None for path in WORKER_FILES):
        raise UserError(
            f"--compare-to: {rev} ({sha[:9]}) predates process-level measuring "
            f"(it has no {' or '.join(WORKER_FILES)}); compare against a later revision"
        )
    return sha


@contextlib.contextmanager
def revision(rev: str, root: Path) -> Iterator[Source]:
    """``rev`` checked out in a temporary git worktree for as long as the block runs.

    A SIGTERM meanwhile is an interrupt (:func:`sigterm_as_interrupt`), so the worktree goes as it does after a Ctrl-C.
    """
    sha = resolve_revision(rev, root)
    with sigterm_as_interrupt():
        folder = Path(tempfile.mkdtemp(prefix="meddpm-ab-"))
        tree = folder / "src"
        try:
            if _git(["worktree", "add", "--detach", str(tree), sha], root) is None:
                raise UserError(f"--compare-to: git could not check {rev} out into {tree}")
            yield Source(f"{rev} ({sha[:9]})", tree, sha)
        finally:
            _git(["worktree", "remove", "--force", str(tree)], root)
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def sources(compare_to: str | None) -> Iterator[list[Source]]:
    """What a process campaign measures: the working tree, then ``compare_to`` checked out, if given."""
    if compare_to is None:
        yield [working_tree(package_root())]
        return
    root = checkout_root()
    with revision(compare_to, root) as rev:
        yield [working_tree(root), rev]


def _git(args: list[str], cwd: Path) -> str | None:
    return git_output(args, cwd, timeout_s=120.0)  # a worktree checkout takes longer than a look-up
