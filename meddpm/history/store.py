"""The history database: where it is, opening (and migrating) it, appending runs, reading them back.

A path means an SQLite file; anything that starts like a URL (``name:``) is an SQLAlchemy URL
(``postgresql+psycopg://...`` for a fleet of runners sharing one server, ``sqlite:///path``). Every problem
a user can fix (a bad URL, a missing driver, an unreachable server, a file that is not a history database,
a read-only one that a command would write to) is a one-line :class:`UserError`.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import sqlite3
import sys
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Engine, create_engine, event, inspect, select, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from meddpm.errors import UserError, first_line
from meddpm.history.models import Acknowledgement, Run
from meddpm.history.rows import read_runs

MIGRATIONS = Path(__file__).with_name("migrations")
# Seconds an SQLite writer waits for another one to finish: an import of a whole artifact takes a second or two.
_BUSY_TIMEOUT_S = 120
# Seconds a reader tries before it says that it waits for a lock: most locks are gone by then, silently.
_QUIET_WAIT_S = 1.0
# PostgreSQL advisory-lock key ("medd") that serialises migrations between runners opening one server at once.
_MIGRATION_LOCK = 0x6D656464


# A URL's scheme: two characters or more, so that a Windows drive ("C:") stays a path. A file whose name
# has such a prefix is given as ./name.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")
_FORMS = "give sqlite:///path, postgresql://host/db (postgresql+psycopg://user@host:port/db), or a plain file path"


def database_url(target: str) -> URL:
    """The SQLAlchemy URL for a path (an SQLite file) or a URL, or a one-line UserError."""
    if not _SCHEME.match(target) and "://" not in target:
        return URL.create("sqlite", database=str(Path(target).expanduser().resolve()))
    shown = _hide_password(target)
    try:
        url = make_url(target)
    except ArgumentError:
        raise UserError(f"{shown!r} is not a database URL; {_FORMS} (./{shown} for a file of that name)") from None
    except ValueError:  # make_url reads the port with int()
        raise UserError(f"{shown!r}: the port is not a number; {_FORMS}") from None
    if url.port is not None and not 0 < url.port < 65536:
        raise UserError(f"{shown!r}: port {url.port} is out of range (1 to 65535); {_FORMS}")
    if url.get_backend_name() == "sqlite":
        if url.host or url.port or url.username or url.password:
            raise UserError(f"{shown!r} names a host, which SQLite has none of; {_FORMS} (three slashes)")
        if url.database in (None, "", ":memory:"):
            raise UserError(f"{shown!r} is an in-memory database, which keeps nothing; {_FORMS}")
    return url


def _hide_password(target: str) -> str:
    """``target`` with the password of a ``user:password@`` part masked, for messages."""
    return re.sub(r"(//[^/@]*?:)[^/@]*@", r"\1***@", target)


class HistoryLocked(UserError):
    """The history is locked by another process beyond the busy timeout: waiting again would not help."""


@dataclass(frozen=True)
class AddResult:
    """What an append did: runs stored now, and runs that were there already."""

    added: int
    present: int


class HistoryStore:
    """An open history database. Use :meth:`open`; close it (or use it in a ``with``) when done."""

    def __init__(self, engine: Engine, label: str):
        self.engine = engine
        self.label = label  # the database, for messages: a path, or the URL without its password
        self.skipped: list[str] = []  # a line per row that runs() could not read back, and left out

    @classmethod
    def open(cls, target: str, *, create: bool = True) -> HistoryStore:
        """Open the database at ``target`` and bring it to this schema.

        ``create``: the command will write (an import, an append), so a missing database is created and a
        read-only one refused. Without it (check, report, a database merged in) the database must already
        be a history database: nothing is created in it, and a read-only SQLite file is only read.
        """
        url = database_url(target)
        sqlite = url.get_backend_name() == "sqlite"
        label = str(url.database) if sqlite else url.render_as_string(hide_password=True)
        if sqlite:
            path = Path(str(url.database))
            _check_sqlite_path(path, create)
            writable = _writable(path)
            if create and not writable:
                raise UserError(
                    f"history database {label} is read-only here (a read-only mount or no write permission); "
                    "storing runs needs write access (check and report can read it)"
                )
            if not create:
                # Read first through a read-only connection: a file that is not a history database stays
                # untouched, and a read-only one at this schema needs nothing more.
                reader = cls(_sqlite_reader(path), label)
                try:
                    up_to_date = reader._up_to_date(writable)
                except BaseException:
                    reader.close()
                    raise
                if up_to_date:
                    return reader
                reader.close()
        try:
            engine = _sqlite_engine(url) if sqlite else create_engine(url, pool_pre_ping=True)
        except (NoSuchModuleError, ImportError) as exc:
            extra = " (pip install 'meddpm-perf[postgres]')" if url.get_backend_name() == "postgresql" else ""
            raise UserError(f"no database driver for {label}: {_first_line(exc)}{extra}") from None
        store = cls(engine, label)
        try:
            store._migrate(create)
        except BaseException:
            engine.dispose()
            raise
        return store

    def close(self) -> None:
        """Release the database connections."""
        self.engine.dispose()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Database failures as one line naming the database; anything else passes through."""
        try:
            yield
        except OperationalError as exc:
            if _locked(exc.orig):
                raise _locked_error(self.label) from None
            raise UserError(f"history database {self.label}: {doing} failed: {_first_line(exc)}") from None
        except SQLAlchemyError as exc:
            raise UserError(f"history database {self.label}: {doing} failed: {_first_line(exc)}") from None

    def _up_to_date(self, writable: bool) -> bool:
        """Whether the database is at this schema, read without writing; what is not a history database,
        or one that needs a migration where it cannot be written, is refused."""
        scripts = _scripts()
        with self._errors("reading"), self.engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_revision()
            self._refuse_foreign(connection, current, scripts, create=False)
        up_to_date = current == scripts.get_current_head()
        if not up_to_date and not writable:
            raise UserError(
                f"history database {self.label} has schema revision {current}, older than this meddpm-perf reads "
                f"({scripts.get_current_head()}), and is read-only here; open it once where it is writable "
                "(any meddpm-history command migrates it)"
            )
        return up_to_date

    def _refuse_foreign(self, connection, current: str | None, scripts: ScriptDirectory, *, create: bool) -> None:
        if current is not None and current not in {s.revision for s in scripts.walk_revisions()}:
            raise UserError(
                f"history database {self.label} has schema revision {current}, which this meddpm-perf "
                "does not know (a newer one wrote it); upgrade meddpm-perf"
            )
        if current is None and inspect(connection).get_table_names():
            raise UserError(f"{self.label} holds tables but no history schema; it is not a history database")
        if current is None and not create:
            raise UserError(
                f"{self.label} is not a history database (it holds no tables); "
                "create one with 'meddpm-history import' or --history"
            )

    def _migrate(self, create: bool) -> None:
        with self._errors("opening"):
            # A brand-new SQLite file answers "database is locked" at once, without the busy timeout,
            # while another runner switches it to WAL or migrates it: wait for that runner, then retry.
            deadline = time.monotonic() + _BUSY_TIMEOUT_S
            while True:
                try:
                    return self._migrate_once(create)
                except OperationalError as exc:
                    if "database is locked" not in str(exc) or time.monotonic() > deadline:
                        raise
                time.sleep(random.uniform(0.05, 0.25))

    def _migrate_once(self, create: bool) -> None:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        scripts = _scripts()
        # A read first: an up-to-date database, the usual case, needs no write lock. What else it holds is
        # judged only under the lock: unlocked, another runner's migration can commit between reading the
        # schema revision (none yet) and listing the tables (there now), and pass for a foreign database.
        with self.engine.connect() as connection:
            if MigrationContext.configure(connection).get_current_revision() == scripts.get_current_head():
                return
        with self.engine.execution_options(write=True).begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
            # Read again under the lock: another runner may have migrated the database meanwhile.
            current = MigrationContext.configure(connection).get_current_revision()
            self._refuse_foreign(connection, current, scripts, create=create)
            config.attributes["connection"] = connection
            try:
                command.upgrade(config, "head")
            except CommandError as exc:
                raise UserError(f"history database {self.label}: migrating failed: {_first_line(exc)}") from None

    def add(self, runs: Sequence[Run], acks: Sequence[Acknowledgement] = ()) -> AddResult:
        """Store the runs and acknowledgements not stored yet, all in one transaction: an interrupted append
        stores none of them. An acknowledgement of a step already acknowledged replaces its note."""
        engine = self.engine.execution_options(write=True)
        with self._errors("appending"), Session(engine, expire_on_commit=False) as session:
            with session.begin():
                stored = {a.key: a for a in session.scalars(select(Acknowledgement))}
                for ack in acks:
                    if ack.key in stored:
                        stored[ack.key].note = ack.note
                    else:
                        session.add(ack)
                        stored[ack.key] = ack
                fingerprints = [run.fingerprint for run in runs]
                known = set(session.scalars(select(Run.fingerprint).where(Run.fingerprint.in_(fingerprints))))
                added = 0
                for run in runs:
                    if run.fingerprint not in known and self._insert(session, run):
                        added += 1
                    known.add(run.fingerprint)
        return AddResult(added=added, present=len(runs) - added)

    @staticmethod
    def _insert(session: Session, run: Run) -> bool:
        """Insert one run in a savepoint; False if another runner stored the same run meanwhile.

        Only a uniqueness violation with the run's fingerprint now stored means that; any other integrity
        error (a missing value, a case twice) is the run's own problem and propagates.
        """
        try:
            with session.begin_nested():
                session.add(run)
        except IntegrityError as exc:
            if not _unique_violation(exc):
                raise
            if session.scalar(select(Run.id).where(Run.fingerprint == run.fingerprint)) is None:
                raise
            return False
        return True

    def runs(self) -> list[Run]:
        """Every stored run with its cases, oldest first, detached from the database.

        A row that does not read back (:mod:`meddpm.history.rows`) is left out, with a line in :attr:`skipped`.
        """
        with self._errors("reading"), self.engine.connect() as connection:
            runs, self.skipped = read_runs(connection)
        return runs

    def acknowledgements(self) -> list[Acknowledgement]:
        """Every acknowledged regression, detached from the database."""
        with self._errors("reading"), Session(self.engine, expire_on_commit=False) as session:
            return list(session.scalars(select(Acknowledgement).order_by(Acknowledgement.id)))


def _check_sqlite_path(path: Path, create: bool) -> None:
    if path.is_dir():
        raise UserError(f"{path} is a directory; give the history database a file path, such as {path}/history.sqlite")
    if path.exists():
        # Opening a FIFO waits for a writer forever, deaf to Ctrl-C; a device or socket is no database either.
        if not path.is_file():
            raise UserError(
                f"{path} is not a regular file (a FIFO, a socket or a device); give the history database's file path"
            )
        return
    if not create:
        raise UserError(f"no history database at {path}; create one with 'meddpm-history import' or --history")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the history database {path}: {exc.strerror}") from None


def _writable(path: Path) -> bool:
    """Whether this process may write the SQLite file (or create it) and its journal files beside it.

    access() answers for this process, root included: it says no on a read-only file system.
    """
    folder_ok = os.access(path.parent, os.W_OK)
    return folder_ok and (not path.exists() or os.access(path, os.W_OK))


def _sqlite_reader(path: Path) -> Engine:
    """A read-only engine on an existing SQLite file: it writes nothing, not even the journal mode.

    ``mode=ro`` still takes SQLite's locks, so it reads safely beside a writer; but a WAL database whose
    folder cannot hold the shared-memory file (a read-only mount) cannot be opened that way, and is then
    read as immutable: nobody can be writing it there.
    """
    location = "file:" + urllib.parse.quote(str(path.resolve()))
    try:
        _probe(f"{location}?mode=ro", path)
        mode = {"mode": "ro"}
    except sqlite3.Error as exc:
        # Python 3.10 has no sqlite_errorname: SQLite's own messages for these two codes tell them apart too.
        codes = ("SQLITE_CANTOPEN", "SQLITE_READONLY_DIRECTORY")
        messages = ("unable to open database file", "attempt to write a readonly database")
        if getattr(exc, "sqlite_errorname", None) not in codes and str(exc) not in messages:
            raise UserError(f"history database {path}: opening failed: {_first_line(exc)}") from None
        mode = {"immutable": "1"}
    url = URL.create("sqlite", database=location, query={**mode, "uri": "true"})
    engine = create_engine(url, connect_args={"timeout": _BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # as in _sqlite_engine: SQLAlchemy's "begin" issues BEGIN

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:
        connection.exec_driver_sql("BEGIN")

    return engine


def _probe(uri: str, path: Path) -> None:
    """Read the schema once, waiting out another process's lock: quietly at first, then saying so, once."""
    for timeout in (_QUIET_WAIT_S, _BUSY_TIMEOUT_S):
        try:
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=timeout)) as probe:
                probe.execute("SELECT count(*) FROM sqlite_master").fetchall()
            return
        except sqlite3.OperationalError as exc:
            if not _locked(exc):
                raise
        if timeout == _QUIET_WAIT_S:
            print(
                f"history database {path} is locked by another process; waiting up to {_BUSY_TIMEOUT_S} s",
                file=sys.stderr,
                flush=True,
            )
    raise _locked_error(str(path))


def _locked(error: BaseException | None) -> bool:
    """Whether SQLite refused for another connection's lock (SQLITE_BUSY, SQLITE_LOCKED)."""
    return isinstance(error, sqlite3.OperationalError) and "database is locked" in str(error)


def _locked_error(label: str) -> HistoryLocked:
    return HistoryLocked(
        f"history database {label} is locked by another process (waited {_BUSY_TIMEOUT_S} s); "
        "try again once it has finished (an import or a run appending to it)"
    )


def _scripts() -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(config)


def _unique_violation(exc: IntegrityError) -> bool:
    """Whether the database refused a row as a duplicate of a unique key (not a missing value, say)."""
    original = exc.orig
    # SQLite's extended result code (its message where Python 3.10 lacks the code); PostgreSQL's SQLSTATE
    # unique_violation (psycopg 3, then psycopg2).
    if isinstance(original, sqlite3.Error):
        name = getattr(original, "sqlite_errorname", None)
        return name == "SQLITE_CONSTRAINT_UNIQUE" if name else str(original).startswith("UNIQUE constraint failed")
    return "23505" in (getattr(original, "sqlstate", None), getattr(original, "pgcode", None))


def _sqlite_engine(url: URL) -> Engine:
    engine = create_engine(url, connect_args={"timeout": _BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        # pysqlite's own transaction handling defers BEGIN and commits before DDL, so a migration or an
        # import would not be one transaction; SQLAlchemy's "begin" event below issues BEGIN instead.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # WAL: readers never block the writer and a crash mid-write keeps the last commit.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:
        # A writer takes the write lock at BEGIN: another writer then waits its turn (busy timeout). A
        # deferred BEGIN that reads and then writes fails at once with "database is locked" if another
        # writer committed in between, which two runners appending at the same time would hit.
        write = connection.get_execution_options().get("write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message, without SQLAlchemy's background link."""
    original = getattr(exc, "orig", None)
    return first_line(original if original is not None else exc) or type(exc).__name__
