"""The history database: migrations, appends that lose nothing under concurrency, and interrupted imports.

The same tests run on SQLite (WAL) and on a real PostgreSQL server that the fixture starts from the
installed binaries; they skip, with the reason, where PostgreSQL or its Python driver is missing.
"""

from __future__ import annotations

import glob
import json
import multiprocessing
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from meddpm.errors import UserError
from meddpm.history.documents import run_from_document
from meddpm.history.models import Base, Run
from meddpm.history.simulation import simulate, simulated_documents
from meddpm.history.store import HistoryStore
from meddpm.history.target import history_target, resolve_target


def documents(nights: int, seed: int = 0, arch: str = "h200") -> list[dict]:
    return simulated_documents(simulate(np.random.default_rng(seed), nights), arch)


def runs(nights: int, seed: int = 0, arch: str = "h200") -> list[Run]:
    return [run_from_document(d, f"night {i}") for i, d in enumerate(documents(nights, seed, arch))]


# --- PostgreSQL, started from the installed binaries -------------------------------------------


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    return Path(versions[-1]).parent if versions else None


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL server on a free local port; yields its base URL (no database name)."""
    pytest.importorskip("psycopg", reason="the psycopg driver is not installed (pip install 'meddpm-perf[postgres]')")
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (no pg_ctl on PATH or under /usr/lib/postgresql); .ci/run installs it")
    user = None
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as the postgres account
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' account to run PostgreSQL as")
    root = Path(tempfile.mkdtemp(prefix="meddpm-pg-"))
    if user is not None:
        os.chown(root, user.pw_uid, user.pw_gid)
    as_user = {"user": user.pw_name} if user is not None else {}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = root / "data"
    try:
        subprocess.run(
            [bin_dir / "initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"],
            check=True,
            capture_output=True,
            **as_user,
        )
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [bin_dir / "pg_ctl", "-D", data, "-o", options, "-l", root / "log", "-w", "start"],
            check=True,
            capture_output=True,
            **as_user,
        )
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"PostgreSQL did not start: {exc.stderr.decode(errors='replace').strip().splitlines()[-1:]}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run([bin_dir / "pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True, **as_user)
        shutil.rmtree(root, ignore_errors=True)


_databases = iter(range(10**6))


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request, tmp_path) -> str:
    """A new, empty database of each kind: an SQLite path, or a fresh database on the PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    base = request.getfixturevalue("postgres_server")
    name = f"history_{next(_databases)}"
    engine = sqlalchemy.create_engine(f"{base}/postgres", isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return f"{base}/{name}"


# --- opening and migrating ----------------------------------------------------------------------


def test_a_new_database_is_migrated_to_the_schema_the_models_describe(target):
    with HistoryStore.open(target) as store, store.engine.connect() as connection:
        context = MigrationContext.configure(connection)
        assert context.get_current_revision() == "0003"
        assert compare_metadata(context, Base.metadata) == []


def test_a_database_of_the_first_schema_gains_the_acknowledgements_and_keeps_its_runs(tmp_path):
    path = tmp_path / "history.sqlite"
    with HistoryStore.open(str(path)) as store:
        store.add(runs(3))
    execute_sqlite(path, "DROP TABLE acknowledgements")
    _back_to_0002(f"sqlite:///{path}")
    execute_sqlite(path, "UPDATE alembic_version SET version_num = '0001'")
    with HistoryStore.open(str(path)) as store, store.engine.connect() as connection:
        assert len(store.runs()) == 3 and store.acknowledgements() == []
        assert MigrationContext.configure(connection).get_current_revision() == "0003"


def _back_to_0002(url: str) -> None:
    """Make the database at ``url`` one of schema 0002: no commit subject, no CI job."""
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql("ALTER TABLE runs DROP COLUMN commit_subject")
        connection.exec_driver_sql("ALTER TABLE runs DROP COLUMN ci_job")
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '0002'")
    engine.dispose()


def test_a_database_of_schema_0002_gains_the_commit_subject_and_ci_job_and_keeps_its_runs(target):
    with HistoryStore.open(target) as store:
        store.add(runs(3))
    _back_to_0002(target if "://" in target else f"sqlite:///{target}")
    with HistoryStore.open(target) as store, store.engine.connect() as connection:
        context = MigrationContext.configure(connection)
        assert context.get_current_revision() == "0003" and compare_metadata(context, Base.metadata) == []
        stored = store.runs()
        assert len(stored) == 3 and [(r.commit_subject, r.ci_job) for r in stored] == [(None, None)] * 3


def test_opening_again_keeps_the_data(target):
    with HistoryStore.open(target) as store:
        assert store.add(runs(3)).added == 3
    with HistoryStore.open(target) as store:
        assert len(store.runs()) == 3 and len(store.runs()[0].cases) == 6


def execute_sqlite(path: Path, sql: str) -> None:
    """Run one statement on the SQLite file at ``path``, outside the store."""
    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        connection.exec_driver_sql(sql)
    engine.dispose()


def test_a_database_from_a_newer_meddpm_is_refused_in_one_line(tmp_path):
    path = tmp_path / "history.sqlite"
    HistoryStore.open(str(path)).close()
    execute_sqlite(path, "UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(UserError, match="schema revision 9999, which this meddpm-perf does not know"):
        HistoryStore.open(str(path))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_text("not a database, just text\n" * 100), "file is not a database"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: None, "no history database at"),
    ],
    ids=["text-file", "directory", "missing"],
)
def test_an_unusable_sqlite_path_is_one_line(tmp_path, make, message):
    path = tmp_path / "history.sqlite"
    make(path)
    with pytest.raises(UserError, match=message) as caught:
        HistoryStore.open(str(path), create=False)
    assert "\n" not in str(caught.value)


def test_an_sqlite_database_of_something_else_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    execute_sqlite(path, "CREATE TABLE notes (text TEXT)")
    with pytest.raises(UserError, match="holds tables but no history schema"):
        HistoryStore.open(str(path))


@pytest.mark.parametrize(
    "url, message",
    [
        ("nosuchdb://host/db", "no database driver for nosuchdb://host/db"),
        ("postgresql+nosuchdriver://host/db", "no database driver"),
        ("postgresql+psycopg://user:secret@127.0.0.1:1/db", "opening failed"),
        ("://", "is not a database URL"),
    ],
    ids=["dialect", "driver", "unreachable", "malformed"],
)
def test_a_bad_url_is_one_line_without_the_password(url, message):
    if "psycopg" in url:
        pytest.importorskip("psycopg", reason="the psycopg driver is not installed")
    with pytest.raises(UserError, match=message) as caught:
        HistoryStore.open(url)
    assert "\n" not in str(caught.value) and "secret" not in str(caught.value)


def test_the_database_is_the_option_else_the_environment_else_the_default(monkeypatch):
    monkeypatch.delenv("MEDDPM_HISTORY", raising=False)
    assert resolve_target(None) == "perf-history.sqlite" and resolve_target(None, default=None) is None
    monkeypatch.setenv("MEDDPM_HISTORY", "postgresql+psycopg://fleet/db")
    assert resolve_target(None) == "postgresql+psycopg://fleet/db" and resolve_target("mine.sqlite") == "mine.sqlite"
    monkeypatch.setenv("MEDDPM_HISTORY", "")  # an unset secret arrives empty
    assert resolve_target("") == "perf-history.sqlite"


# --- appending: duplicates, concurrency, interruption ------------------------------------------


def test_the_same_run_is_stored_once_however_often_it_arrives(target):
    with HistoryStore.open(target) as store:
        first = store.add(runs(4))
        again = store.add(runs(4) + runs(4))  # twice in one batch, and already stored
    assert (first.added, first.present) == (4, 0) and (again.added, again.present) == (0, 8)


def _append_one_by_one(target: str, seed: int, barrier) -> None:
    barrier.wait()  # every writer starts at once, on a database none of them has created yet
    with HistoryStore.open(target) as store:
        for run in runs(8, seed=seed):
            store.add([run])
        store.add(runs(1, seed=999))  # one run that every writer appends


@pytest.mark.parametrize("writers", [4])
def test_runners_appending_at_once_lose_nothing(target, writers):
    # fork: the writers need only SQLAlchemy, and a spawned interpreter would import torch again.
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(writers)
    processes = [context.Process(target=_append_one_by_one, args=(target, seed, barrier)) for seed in range(writers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [p.exitcode for p in processes] == [0] * writers
    with HistoryStore.open(target) as store:
        stored = store.runs()
    expected = {r.fingerprint for seed in range(writers) for r in runs(8, seed=seed)} | {
        runs(1, seed=999)[0].fingerprint
    }
    assert sorted(r.fingerprint for r in stored) == sorted(expected)
    assert all(len(r.cases) == 6 for r in stored)


def test_an_interrupted_append_leaves_the_database_as_it_was(target, monkeypatch):
    with HistoryStore.open(target) as store:
        store.add(runs(2, seed=1))
        inserted = []
        real_insert = HistoryStore._insert

        def insert_then_interrupt(session, run):
            if len(inserted) == 3:
                raise KeyboardInterrupt
            inserted.append(run)
            return real_insert(session, run)

        monkeypatch.setattr(HistoryStore, "_insert", staticmethod(insert_then_interrupt))
        with pytest.raises(KeyboardInterrupt):
            store.add(runs(6, seed=2))
        assert len(inserted) == 3
        assert len(store.runs()) == 2


KILLED_MID_IMPORT = """
import os
import sys
from pathlib import Path

from meddpm.history import importer
from meddpm.history.store import HistoryStore

calls = []
real_insert = HistoryStore._insert


def insert_then_die(session, run):
    if len(calls) == 3:
        session.flush()
        os._exit(9)  # as a kill -9 would: no cleanup, no rollback, the rows flushed
    calls.append(run)
    return real_insert(session, run)


HistoryStore._insert = staticmethod(insert_then_die)
with HistoryStore.open(sys.argv[1]) as store:
    importer.import_files(store, [Path(p) for p in sys.argv[2:]])
"""


def test_a_killed_import_leaves_the_database_as_it_was(tmp_path):
    target = str(tmp_path / "history.sqlite")
    files = []
    for night, document in enumerate(documents(6, seed=3)):
        files.append(tmp_path / f"night-{night}.json")
        files[-1].write_text(json.dumps(document))
    with HistoryStore.open(target) as store:
        store.add(runs(2, seed=4))
    script = tmp_path / "die.py"
    script.write_text(textwrap.dedent(KILLED_MID_IMPORT))
    died = subprocess.run([sys.executable, script, target, *map(str, files)], capture_output=True, text=True)
    assert died.returncode == 9, died.stderr
    with HistoryStore.open(target) as store:
        assert len(store.runs()) == 2


def test_an_integrity_error_other_than_a_duplicate_run_is_not_read_as_already_in(target):
    """A row the database refuses for another reason (here a missing median, which SQLite makes of a NaN)
    fails the append in one line; only the fingerprint's uniqueness means another runner stored the run."""
    run = runs(1)[0]
    run.cases[0].median_ms = None
    with HistoryStore.open(target) as store:
        with pytest.raises(UserError, match="appending failed: .*(NOT NULL|null value)") as caught:
            store.add([run])
        assert "\n" not in str(caught.value) and store.runs() == []


@pytest.mark.parametrize(
    "target, message",
    [
        ("postgresql:/db.example/perf", "'postgresql:/db.example/perf' is not a database URL; give sqlite:///path"),
        ("sqlite:relative.db", "'sqlite:relative.db' is not a database URL; give sqlite:///path, postgresql://"),
        ("postgresql+psycopg://u:secret@db:5432x/perf", "'postgresql+psycopg://u:***@db:5432x/perf': the port is"),
        ("postgresql://db:70000/perf", "'postgresql://db:70000/perf': port 70000 is out of range"),
        ("sqlite://relative.db", "'sqlite://relative.db' names a host"),
        ("sqlite://", "'sqlite://' is an in-memory database, which keeps nothing"),
    ],
    ids=["one-slash", "no-slash", "port", "port-range", "sqlite-host", "in-memory"],
)
def test_a_mistyped_url_is_one_line_for_every_command_and_creates_no_file(tmp_path, monkeypatch, target, message):
    """history_target is what the suite's --history and meddpm-bench --history call before measuring."""
    monkeypatch.chdir(tmp_path)
    for open_it in (lambda: HistoryStore.open(target, create=False), lambda: history_target(target)):
        with pytest.raises(UserError, match=re.escape(message)) as caught:
            open_it()
        assert "\n" not in str(caught.value) and "secret" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_path_is_still_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert history_target("./odd:name.sqlite") == "./odd:name.sqlite" and (tmp_path / "odd:name.sqlite").exists()
    assert history_target("sqlite:///rel.sqlite") and (tmp_path / "rel.sqlite").exists()


def test_a_run_that_keeps_no_history_does_not_import_the_database_stack():
    # SQLAlchemy, Alembic and ruptures took about 2 s of a GPU machine's bench process before its first round.
    script = (
        "import sys; import meddpm.bench.cli, meddpm.suite.plugin; "
        "print(sorted(m for m in ('sqlalchemy', 'alembic', 'ruptures') if m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if k != "MEDDPM_HISTORY"}
    shown = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]", shown.stdout + shown.stderr


def test_a_read_only_history_of_an_older_schema_is_one_line(tmp_path, monkeypatch):
    """The read-only mount itself is tested in test_history_cli.py; here the store is told the file is not
    writable (as access() says on such a mount) and this code's schema is one revision newer than the file's."""
    path = tmp_path / "history.sqlite"
    HistoryStore.open(str(path)).close()
    monkeypatch.setattr("meddpm.history.store._writable", lambda _path: False)
    monkeypatch.setattr(ScriptDirectory, "get_current_head", lambda self: "0004")
    with pytest.raises(UserError, match="schema revision 0003, older than this meddpm-perf reads .0004., and is"):
        HistoryStore.open(str(path), create=False)
