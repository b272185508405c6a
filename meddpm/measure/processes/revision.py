"""The workload an A/B run or a bisection measures: the working tree's as it is, or a git revision's, extracted.

Only the revision's ``meddpm/`` is extracted (``git archive``), into a temporary folder that a
worker then names as its ``--workload``; the harness is always the working tree's
(:mod:`meddpm.measure.processes.workload`). Before measuring, each revision is checked the way a
worker will import it, so a revision this harness cannot drive is one line before any GPU work; so is
side B's other interpreter or environment (:mod:`meddpm.measure.processes.sides`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from meddpm.errors import UserError, printable
from meddpm.measure.campaign.protocol import Source
from meddpm.measure.machine.environment import git_output
from meddpm.measure.processes.campaign import signals_as_interrupt
from meddpm.measure.processes.launch import harness_root, run_to_the_end, worker_command, worker_environment
from meddpm.measure.processes.sides import (
    ENV_OPTION,
    PYTHON_OPTION,
    SAME,
    OtherSide,
    check_environment,
    check_python,
)
from meddpm.measure.processes.worker import UNDRIVABLE
from meddpm.measure.processes.workload import WORKLOAD_ROOMS

THIS_TREE = "this tree"  # side A, the working tree as it is, in every label and A/B line

# The commits this process found drivable, with what side B runs under: a drive check is a process that imports
# torch and runs an iteration (seconds), and an A/B checked its revision before measuring, then again as it began.
_drivable: set[tuple[str, OtherSide]] = set()


class Undrivable(UserError):
    """A revision this harness cannot drive; ``reason`` says why, for a bisection that skips it and goes on."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def checkout_root(option: str = "--compare-to") -> Path:
    """The git checkout this ``meddpm`` package was imported from, or a UserError naming ``option``."""
    root = harness_root()
    top = _git(["rev-parse", "--show-toplevel"], root)
    if top is None:
        raise UserError(f"{option} needs meddpm imported from a git checkout (pip install -e .), not from {root}")
    if Path(top).resolve() != root:
        raise UserError(
            f"{option}: meddpm/ must sit at the root of its git repository, but {root} is a folder inside the "
            f"repository {top}; clone meddpm-perf on its own and install it from there (pip install -e .)"
        )
    return root


def revisions_root(option: str) -> Path:
    """Where ``option`` looks its revisions up: the git checkout of meddpm-perf the user stands in (a clone beside
    the one the package was imported from, say), else the checkout the package was imported from."""
    here = _git(["rev-parse", "--show-toplevel"], Path.cwd())
    if here is not None and (Path(here) / "meddpm" / "__init__.py").is_file():
        return Path(here).resolve()
    return checkout_root(option)


def working_tree(root: Path) -> Source:
    """The working tree as it is, named by its commit and whether (and how much) it differs from it.

    A dirty tree is measured as it is, uncommitted changes included: that is what an A/B of
    a change before committing it wants.
    """
    head = _git(["rev-parse", "HEAD"], root) or "unknown"
    # Only the measured package counts: results, logs and test files beside it change no timing.
    changed = (_git(["status", "--porcelain", "--", "meddpm"], root) or "").splitlines()
    dirty = f"+dirty, {len(changed)} file(s) of meddpm/ changed or new" if changed else ""
    return Source(f"{THIS_TREE} ({head[:9]}{dirty})", root, head + ("+dirty" if changed else ""), name=THIS_TREE)


def resolve_revision(rev: str, root: Path, option: str = "--compare-to") -> str:
    """The commit ``rev`` names, or a one-line UserError naming ``option``."""
    sha = _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], root)
    if sha is not None:
        return sha
    if _git(["rev-parse", "--is-shallow-repository"], root) == "true":
        raise UserError(
            f"{option}: unknown revision {rev!r} in {root}, a shallow clone (its history is cut short); "
            "deepen it with git fetch --unshallow (or --deepen=N), then run again"
        )
    raise UserError(f"{option}: unknown revision {rev!r}; give a commit, branch or tag that git knows (in {root})")


def check_revision(rev: str, root: Path, option: str = "--compare-to", other: OtherSide = SAME) -> str:
    """The commit ``rev`` names, once its workload was found drivable (under ``other``'s interpreter and
    environment); else a one-line UserError naming ``option``.

    For the tools to refuse a bad revision before any measuring.
    """
    with revision(rev, root, option, other) as source:
        return source.commit


def check_sides(compare_to: str | None, other: OtherSide) -> None:
    """Refuse, in one line and before any measuring, an A/B whose side B cannot run: ``compare_to``'s revision, or
    this tree's workload, driven once under ``other``'s interpreter and environment."""
    if other.env:
        check_environment(other.python or sys.executable, other.env, worker_environment)
    if other.python is not None:
        check_python(other.python, worker_environment(other.env))
    if compare_to is not None:
        check_revision(compare_to, checkout_root(), other=other)
        return
    if other.given:
        problem = undrivable(harness_root(), other)
        if problem is not None:
            options = f"{PYTHON_OPTION} {other.python}" if other.python else ENV_OPTION
            raise UserError(f"{options}: this tree {problem}; fix that interpreter or environment")


@contextlib.contextmanager
def revision(
    rev: str, root: Path, option: str = "--compare-to", other: OtherSide = SAME, *, reach: bool = True
) -> Iterator[Source]:
    """``rev``'s workload extracted into a temporary folder for as long as the block runs, checked drivable under
    ``other``'s interpreter and environment, which its workers run under; else :class:`Undrivable`, whose message
    names the first later commit this harness drives where ``reach`` (one drive check more).

    A SIGTERM or SIGHUP meanwhile is an interrupt (:func:`signals_as_interrupt`), so the folder goes as it does after
    a Ctrl-C.
    """
    sha = resolve_revision(rev, root, option)
    with signals_as_interrupt(), contextlib.ExitStack() as stack:
        try:
            tree = stack.enter_context(extracted(sha, root))
            problem = None if (sha, other) in _drivable else undrivable(tree, other)
        except Undrivable as exc:  # no meddpm/, or a link out of it
            problem = exc.reason
        if problem is not None:
            where = f"; {drivable_from(sha, root, other)}" if reach else ""
            raise Undrivable(f"{option}: {rev} ({sha[:9]}) {problem}{where}", problem)
        _drivable.add((sha, other))
        name, named = (sha[:9], sha[:9]) if sha.startswith(rev) else (rev, f"{rev} ({sha[:9]})")
        yield Source(other.label(named), tree, sha, other.python, other.env, name=name)


@contextlib.contextmanager
def extracted(sha: str, root: Path) -> Iterator[Path]:
    """A temporary folder holding commit ``sha``'s ``meddpm/``, removed when the block ends; :class:`Undrivable`
    for a commit without one, or whose ``meddpm/`` holds a link that points outside it."""
    folder = Path(tempfile.mkdtemp(prefix="meddpm-ab-"))
    try:
        if _git(["cat-file", "-e", f"{sha}:meddpm"], root) is None:
            raise Undrivable(f"{sha[:9]} has no meddpm/ folder", "has no meddpm/ folder")
        archive = subprocess.run(
            ["git", "archive", "--format=tar", sha, "meddpm"], cwd=root, capture_output=True, timeout=120
        )
        if archive.returncode != 0:
            reason = archive.stderr.decode(errors="replace").strip()
            raise UserError(f"git could not extract meddpm/ of {sha[:9]}: {reason}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            try:
                tar.extractall(folder, filter="data")
            except tarfile.FilterError as exc:  # a link out of the tree: the "data" filter refuses to follow it
                reason = f"holds a link that points outside meddpm/ ({exc.tarinfo.name} -> {exc.tarinfo.linkname})"
                raise Undrivable(f"{sha[:9]} {reason}", reason) from None
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def undrivable(tree: Path, other: OtherSide = SAME) -> str | None:
    """Why this harness cannot drive ``tree``'s workload (a worker's ``--check`` under ``other``'s interpreter and
    environment fails), or None if it can."""
    command = [*worker_command(tree, other.python), "--check"]
    check = run_to_the_end(command, harness_root(), worker_environment(other.env), 300.0)
    if check.returncode == 0:
        return None
    lines = check.stderr.strip().splitlines() or ["no output"]
    reason = lines[-1].removeprefix("WorkloadError: ") if check.returncode == UNDRIVABLE else lines[-1]
    return f"has a workload this harness cannot drive ({reason})"


def drivable_from(sha: str, root: Path, other: OtherSide = SAME) -> str:
    """Where the harness's reach begins on the first-parent line from ``sha`` to HEAD, in words.

    The first commit that has every workload room is found from git alone, by halves, and driven
    once: a refusal costs one drive check more, not one per commit of the history.
    """
    line = (_git(["rev-list", "--first-parent", "--reverse", f"{sha}..HEAD"], root) or "").split()
    start = _first(line, 0, lambda commit: _has_workload_rooms(commit, root))
    if start == len(line):
        return "no later commit up to HEAD has the workload's rooms; compare HEAD against a later one"
    first = line[start]
    subject = printable(_git(["log", "-1", "--format=%s", first], root) or "")
    with extracted(first, root) as tree:
        if undrivable(tree, other) is None:
            return f"the first commit after it that this harness drives is {first[:9]} ({subject}); compare against it"
    return (
        f"the first commit after it with the workload's rooms, {first[:9]} ({subject}), cannot be driven either; "
        "compare against a later commit"
    )


def _first(line: list[str], lo: int, holds: Callable[[str], bool]) -> int:
    """The index of the first commit of ``line[lo:]`` for which ``holds``, by halves (len(line): none)."""
    hi = len(line)
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(line[mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _has_workload_rooms(commit: str, root: Path) -> bool:
    rooms = (f"{commit}:meddpm/{room}/__init__.py" for room in WORKLOAD_ROOMS)
    return all(_git(["cat-file", "-e", room], root) is not None for room in rooms)


@contextlib.contextmanager
def sources(compare_to: str | None, other: OtherSide = SAME) -> Iterator[list[Source]]:
    """What a process campaign measures: the working tree, then side B where there is one: ``compare_to``'s
    workload, or the working tree's, under ``other``'s interpreter and environment."""
    if compare_to is None:
        tree = working_tree(harness_root())
        if other.given:
            yield [tree, dataclasses.replace(tree, label=other.label(tree.label), python=other.python, env=other.env)]
        else:
            yield [tree]
        return
    root = checkout_root()
    with revision(compare_to, root, other=other) as rev:
        yield [working_tree(root), rev]


def _git(args: list[str], cwd: Path) -> str | None:
    return git_output(args, cwd, timeout_s=120.0)
