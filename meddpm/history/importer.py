"""Loading results files (and other history databases) into the history, a whole batch in one transaction.

A file that cannot be read, is not JSON, or is not a meddpm results file is one line naming it; the
rest of the batch still goes in. In a folder, other JSON files (pytest-benchmark's, calibration
outputs) are expected and only noted, and so is a ``*.json`` there that is not a regular file (a FIFO,
a socket, a device): it is never opened, since reading a FIFO waits for a writer forever. The batch is
one transaction: an interrupted import stores nothing.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from meddpm.errors import UserError
from meddpm.history.acks import ACKS, acks_from_document, copy_ack
from meddpm.history.documents import run_from_document
from meddpm.history.models import Acknowledgement, CaseResult, Run
from meddpm.history.results import RESULTS_KINDS
from meddpm.history.store import HistoryStore
from meddpm.versioned.loader import DocumentError, ForeignDocument, read_json, regular_file, upgrade

_SQLITE_MAGIC = b"SQLite format 3\x00"
_RESULTS_SCHEMAS = {version for kind in RESULTS_KINDS for version in kind.versions}


@dataclass
class ImportReport:
    """What an import did, and the one-line problem of each file it skipped."""

    files: int = 0
    added: int = 0
    present: int = 0
    acks: int = 0  # acknowledgements read
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # files left out that are no problem: nothing to store


def expand(paths: Iterable[Path]) -> list[tuple[Path, bool]]:
    """The files named, with each folder replaced by the ``*.json`` entries under it that are not folders
    (sorted), each with whether it was named itself (True) or found in a folder (False)."""
    files: list[tuple[Path, bool]] = []
    for path in paths:
        if path.is_dir():
            files.extend((p, False) for p in sorted(path.rglob("*.json")) if not p.is_dir())
        else:
            files.append((path, True))
    return files


def _what_it_is(path: Path) -> str:
    """A folder entry that is neither a folder nor a regular file, in words."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "a broken symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file"


@dataclass
class Found:
    """What files hold: runs, acknowledgements, and a line for each row of a history database left out as corrupt."""

    runs: list[Run] = field(default_factory=list)
    acks: list[Acknowledgement] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def read_runs(path: Path) -> Found:
    """What one file holds: a results JSON (one run), an acknowledgements file, or another history database
    (all of its runs and acknowledgements that read back).

    Raises a one-line UserError when the file cannot be used: a DocumentError names the file, the rest do not.
    """
    regular_file(path, RESULTS_KINDS[0].fix)
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise UserError(f"cannot read it ({exc.strerror})") from None
    if head == _SQLITE_MAGIC:
        with HistoryStore.open(str(path), create=False) as other:
            runs = [copy_run(run) for run in other.runs()]
            return Found(runs, [copy_ack(ack) for ack in other.acknowledgements()], other.skipped)
    document = read_json(path, RESULTS_KINDS[0].fix)
    if isinstance(document, dict) and document.get("schema") in ACKS.versions:
        _, current = upgrade(document, path, ACKS)
        try:
            return Found(acks=acks_from_document(current))
        except (KeyError, TypeError, ValueError) as exc:
            detail = f"field {exc.args[0]!r} is missing" if isinstance(exc, KeyError) else " ".join(str(exc).split())
            raise DocumentError(path, f"a malformed {document['schema']} file ({detail})", ACKS.fix) from None
    if isinstance(document, dict) and document.get("schema") in _RESULTS_SCHEMAS and document.get("ncu"):
        cases = document.get("cases", document.get("results"))
        if isinstance(cases, list) and not cases and not document.get("ddp"):
            return Found()  # an Nsight Compute-only session: a valid run that timed nothing
    return Found([run_from_document(document, str(path))])


def copy_run(run: Run) -> Run:
    """A new, unstored copy of ``run`` and its cases (to move runs from one database to another)."""
    columns = [c.key for c in Run.__table__.columns if c.key != "id"]
    case_columns = [c.key for c in CaseResult.__table__.columns if c.key not in ("id", "run_id")]
    copy = Run(**{name: getattr(run, name) for name in columns})
    copy.cases = [CaseResult(**{name: getattr(case, name) for name in case_columns}) for case in run.cases]
    return copy


def import_files(store: HistoryStore, paths: Sequence[Path]) -> ImportReport:
    """Read every file, then store all their runs in one transaction; see :class:`ImportReport`."""
    report, found = read_files(paths)
    store_found(store, report, found)
    return report


def store_found(store: HistoryStore, report: ImportReport, found: Found) -> None:
    """Store what :func:`read_files` found in one transaction, counting the runs into ``report``."""
    if found.runs or found.acks:
        result = store.add(found.runs, found.acks)
        report.added, report.present = result.added, result.present


def read_files(paths: Sequence[Path]) -> tuple[ImportReport, Found]:
    """Every run and acknowledgement in ``paths``, and what reading them found; nothing is stored yet, so a
    batch that holds nothing (a corrupt database, files that are all refused) need not create the database it
    was meant for."""
    report = ImportReport()
    batch = Found()
    for path, named in expand(paths):
        if not named and not path.is_file():  # stat only: opening a FIFO would wait for a writer
            report.notes.append(f"{path}: {_what_it_is(path)}, not a results file: left out")
            continue
        report.files += 1
        try:
            found = read_runs(path)
        except ForeignDocument as exc:
            (report.problems if named else report.notes).append(_line(path, exc))
            continue
        except UserError as exc:
            report.problems.append(_line(path, exc))
            continue
        report.problems.extend(f"{path}: {line}" for line in found.skipped)
        report.acks += len(found.acks)
        if not found.runs and not found.acks and not found.skipped:
            report.notes.append(f"{path}: no timed cases, nothing to store")
        batch.runs.extend(found.runs)
        batch.acks.extend(found.acks)
    return report, batch


def _line(path: Path, problem: UserError) -> str:
    """The one line of a file's problem, naming the file once."""
    return f"{path}: {problem.problem}; {problem.fix}" if isinstance(problem, DocumentError) else f"{path}: {problem}"
