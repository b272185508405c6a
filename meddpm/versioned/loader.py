"""One loader for every versioned JSON file meddpm reads: baselines, worker output, parity bounds, results.

Each file says its ``schema`` (``<family>/<version>``). A :class:`Kind` declares a family's versions, oldest
first, and one small step per older version that turns its document into the next version's; :func:`load`
reads a file, checks its schema against the kinds it may be, and upgrades an old document step by step to
the newest, so a kind's own reader sees only the current version (asv's model: its ``util.load_json`` reads
every file asv ever wrote, upgrading each version in turn). Everything that cannot be used is refused with one
line naming the file, the problem and the fix: a path that is no regular file (a FIFO is never opened, so
reading never hangs), a file that cannot be read or is not JSON, JSON nested deeper than any meddpm file, no
schema or another family's (:class:`ForeignDocument`), a version this code does not know (a newer one).
"""

from __future__ import annotations

import copy
import json
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meddpm.errors import UserError

Step = Callable[[dict[str, Any]], dict[str, Any]]
# No meddpm file nests deeper than about six levels; far deeper JSON is a broken or hostile file, and would
# end in a RecursionError in the decoder or in the code that walks it.
MAX_DEPTH = 32


@dataclass(frozen=True)
class Kind:
    """A family of versioned JSON files.

    ``versions``: oldest first; the last is the one its writer writes now. ``steps``: for each older version,
    the function that turns a document of it into one of the next version (the loader sets ``schema``);
    a step refuses a document it cannot upgrade by raising ``ValueError`` (one with a ``fix`` attribute,
    such as the baseline reader's ``Invalid``, names its own fix); a missing field or a value of the wrong
    type (``KeyError``, ``TypeError``) is reported as a malformed file. ``noun``: what such a file is called in
    a message; ``fix``: how to fix an unusable one; ``newer_fix``: what to do with a version not known here.
    """

    family: str
    versions: tuple[str, ...]
    noun: str
    fix: str
    steps: Mapping[str, Step] = field(default_factory=dict)
    newer_fix: str = "read it with the newer meddpm-perf that wrote it"

    def __post_init__(self) -> None:
        wrong = [v for v in self.versions if not v.startswith(f"{self.family}/")]
        missing = [v for v in self.versions[:-1] if v not in self.steps]
        stray = [v for v in self.steps if v not in self.versions[:-1]]
        if not self.versions or wrong or missing or stray:
            raise ValueError(
                f"kind {self.family}: versions {wrong} outside the family, no step from {missing}, "
                f"steps from {stray}, which no older version is"
            )

    @property
    def current(self) -> str:
        """The version its writer writes now."""
        return self.versions[-1]

    def upgraded(self, document: dict[str, Any]) -> dict[str, Any]:
        """``document`` (of one of :attr:`versions`) as the current version, one step at a time; a copy."""
        document = copy.deepcopy(document)
        at = self.versions.index(document["schema"])
        for older, newer in zip(self.versions[at:], self.versions[at + 1 :]):
            document = {**self.steps[older](document), "schema": newer}
        return document


class DocumentError(UserError):
    """A file (or document) that cannot be used: the problem and the fix, with the file's name if it has one."""

    def __init__(self, path: Path | str | None, problem: str, fix: str):
        self.path, self.problem, self.fix = path, problem, fix
        where = f"{path}: " if path is not None else ""
        super().__init__(f"{where}{problem}; {fix}")


class MissingDocument(DocumentError):
    """No file at the path: for some kinds no error (no baseline yet), for others the first run's hint."""


class ForeignDocument(DocumentError):
    """Valid JSON, but none of the kinds asked for: no schema, or another family's."""


def load(path: Path, *kinds: Kind) -> tuple[Kind, dict[str, Any]]:
    """The document in ``path`` as the current version of its kind, with the kind; or a one-line DocumentError."""
    return upgrade(read_json(path, kinds[0].fix), path, *kinds)


def load_one(path: Path, kind: Kind) -> dict[str, Any]:
    """The document in ``path``, of ``kind``, as its current version."""
    return load(path, kind)[1]


def read_json(path: Path, fix: str) -> Any:
    """The JSON value in ``path``: checked to be a regular file before it is opened, decoded, at most
    :data:`MAX_DEPTH` deep; else a one-line DocumentError with ``fix``."""
    regular_file(path, fix)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DocumentError(path, "not JSON (binary content)", fix) from None
    except OSError as exc:
        raise DocumentError(path, f"cannot read it ({exc.strerror})", fix) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(path, f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", fix) from None
    except RecursionError:
        value = None
        depth = MAX_DEPTH + 1
    else:
        depth = nesting(value)
    if depth > MAX_DEPTH:
        raise DocumentError(path, f"JSON nested more than {MAX_DEPTH} levels deep, which no meddpm file is", fix)
    return value


def regular_file(path: Path, fix: str) -> None:
    """Refuse, before anything opens it, a path that is no regular file: opening a FIFO waits for a writer."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError as exc:
        raise MissingDocument(path, f"cannot read it ({exc.strerror})", fix) from None
    except OSError as exc:
        raise DocumentError(path, f"cannot read it ({exc.strerror})", fix) from None
    if not stat.S_ISREG(mode):
        what = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise DocumentError(path, f"{what}, not a JSON file", "give the path of the file itself")


def upgrade(document: Any, path: Path | str | None, *kinds: Kind) -> tuple[Kind, dict[str, Any]]:
    """``document`` (read from ``path``, None: from memory) as the current version of the kind its schema
    names, with that kind; a document of none of ``kinds``, or of a version none knows, is a DocumentError."""
    noun, fix = kinds[0].noun, kinds[0].fix
    known = ", ".join(v for kind in kinds for v in kind.versions)
    if not isinstance(document, dict):
        raise ForeignDocument(path, f"not a {noun} (the JSON is not an object)", fix)
    schema = document.get("schema")
    for kind in kinds:
        if schema in kind.versions:
            try:
                return kind, kind.upgraded(document)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
                raise DocumentError(
                    path, f"a malformed {schema} file ({_detail(exc)})", getattr(exc, "fix", None) or fix
                ) from None
        if isinstance(schema, str) and schema.startswith(f"{kind.family}/"):
            # A newer version is a problem to report, not a foreign file to pass over.
            raise DocumentError(
                path, f"a {schema} file, which this meddpm-perf cannot read (it reads {known})", kind.newer_fix
            )
    found = f"schema {schema!r}" if schema is not None else "no schema field"
    raise ForeignDocument(path, f"not a {noun} ({found}; known: {known})", fix)


def nesting(value: Any) -> int:
    """How deeply ``value``'s lists and objects nest (a scalar: 0), counted without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        node, depth = todo.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_DEPTH:
            todo.extend((child, depth + 1) for child in children)
    return deepest


def _detail(exc: Exception) -> str:
    """What a step found wrong, on one line."""
    return f"field {exc.args[0]!r} is missing" if isinstance(exc, KeyError) else " ".join(str(exc).split())
