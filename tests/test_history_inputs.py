"""Odd inputs to the history: a FIFO as the database, numbers that do not fit, corrupt rows, colliding page
names, a repository address no link can follow, a locked database."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meddpm.history.cli import main
from meddpm.history.simulation import simulate, simulated_documents
from meddpm.history.store import HistoryStore


@pytest.fixture(autouse=True)
def _no_history_env(monkeypatch):
    monkeypatch.delenv("MEDDPM_HISTORY", raising=False)


def write_runs(folder: Path, nights: int, arch: str = "a100", seed: int = 0) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for night, document in enumerate(simulated_documents(simulate(np.random.default_rng(seed), nights), arch)):
        files.append(folder / f"{arch}-{night:02d}.json")
        files[-1].write_text(json.dumps(document))
    return files


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("MEDDPM_HISTORY", None)
    command = [sys.executable, "-m", "meddpm.history.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.parametrize("command", [["check"], ["report", "--out", "site"], ["import", "r.json"]])
def test_a_fifo_as_the_database_is_refused_before_it_is_opened(tmp_path, command):
    # Opening a FIFO waits for a writer, and SQLite's open is deaf to SIGINT and SIGTERM: the command would hang.
    fifo = tmp_path / "h.sqlite"
    os.mkfifo(fifo)
    (tmp_path / "r.json").write_text(write_runs(tmp_path / "runs", 1)[0].read_text())
    args = [str(tmp_path / a) if a in ("site", "r.json") else a for a in command]
    done = _cli("--db", str(fifo), *args, timeout=60)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"meddpm-history: error: {fifo} is not a regular file (a FIFO, a socket or a device); "
        "give the history database's file path"
    ]


def test_a_device_as_the_database_of_an_append_is_refused(tmp_path):
    from meddpm.errors import UserError

    with pytest.raises(UserError, match="/dev/null is not a regular file"):
        HistoryStore.open("/dev/null")


def test_architectures_whose_names_would_share_a_file_get_a_page_each(tmp_path, capsys):
    files = write_runs(tmp_path / "runs", 3, "cpu") + write_runs(tmp_path / "runs", 2, "cpu-ü", seed=1)
    db = tmp_path / "h.sqlite"
    assert main(["import", "--db", str(db), *map(str, files)]) == 0
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "site")]) == 0
    pages = sorted(p.name for p in (tmp_path / "site").glob("*.html") if p.name != "index.html")
    assert len(pages) == 2 and "cpu.html" in pages, pages
    index = (tmp_path / "site" / "index.html").read_text()
    for page in pages:
        assert f'href="{page}"' in index
    other = next(p for p in pages if p != "cpu.html")
    assert "<h1>cpu-ü</h1>" in (tmp_path / "site" / other).read_text()
    assert "<h1>cpu</h1>" in (tmp_path / "site" / "cpu.html").read_text()


@pytest.mark.parametrize(
    "url, problem",
    [
        ("https://github.com/o/r#readme", "has a query or a fragment"),
        ("https://github.com/o/r?tab=1", "has a query or a fragment"),
        ("https://github.com:99999/o/r", "has a port that is no number from 0 to 65535"),
        ("https://github.com:http/o/r", "has a port that is no number from 0 to 65535"),
    ],
)
def test_a_repo_url_no_link_can_follow_is_refused_in_one_line(tmp_path, capsys, url, problem):
    db = tmp_path / "h.sqlite"
    assert main(["import", "--db", str(db), *map(str, write_runs(tmp_path / "runs", 2))]) == 0
    capsys.readouterr()
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "site"), "--repo-url", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"meddpm-history: error: --repo-url {url!r} {problem}"), err
    assert "https://github.com/OWNER/REPO" in err[0]


def _edited(file: Path, edit) -> Path:
    document = json.loads(file.read_text())
    edit(document)
    file.write_text(json.dumps(document))
    return file


def _set(path: tuple, value):
    def edit(document):
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("cases", 0, "batch_size"), float("inf"), "paper/baseline: batch_size = Infinity, which must be a whole"),
        (("cases", 0, "batch_size"), 10**20, "paper/baseline: batch_size = 100000000000000000000, which must be"),
        (("cases", 0, "batch_size"), 1.5, "paper/baseline: batch_size = 1.5, which must be a whole number"),
        (("cases", 0, "peak_allocated_bytes"), 1e20, "peak_allocated_bytes holds 1e+20; it must be a whole number"),
        (("cases", 0, "stats", "median"), 1e308, "stats.median holds 1e+308, beyond any measurement"),
        (("cases", 0, "energy_j_per_iter"), 1e300, "energy_j_per_iter holds 1e+300, beyond any measurement"),
        (("environment", "gpu_name"), "G" * 300, "the run's gpu_name is 300 characters long; the history keeps at"),
    ],
    ids=["inf-batch", "huge-batch", "half-batch", "huge-bytes", "huge-median", "huge-energy", "long-text"],
)
def test_numbers_that_do_not_fit_refuse_their_file_and_the_rest_of_the_batch_goes_in(
    tmp_path, capsys, path, value, message
):
    files = write_runs(tmp_path / "runs", 3)
    bad = _edited(files[1], _set(path, value))
    db = tmp_path / "h.sqlite"
    assert main(["import", "--db", str(db), *map(str, files)]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"meddpm-history: {bad}: ") and message in lines[0], lines
    assert "3 file(s) read, 1 skipped: 2 run(s) added" in out


def test_a_ddp_world_size_that_does_not_fit_is_one_line(tmp_path, capsys):
    (file,) = write_runs(tmp_path / "runs", 1)
    ddp = {"preset": "tiny", "combo": "baseline", "batch_per_rank": 1, "world_size": 1e400, "median_ms": 3.0}
    _edited(file, _set(("ddp",), [{**ddp, "rank_samples_ms": [[3.0, 3.1]]}]))
    assert main(["import", "--db", str(tmp_path / "h.sqlite"), str(file)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"meddpm-history: {file}: tiny/baseline (DDP): world_size = Infinity, which must be a whole number "
        "from 1 to 2147483647"
    ]


def _corrupt_database(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)


def test_importing_from_a_corrupt_database_creates_no_new_one(tmp_path, capsys):
    source = tmp_path / "runner.sqlite"
    _corrupt_database(source)
    db = tmp_path / "new.sqlite"
    assert main(["import", "--db", str(db), str(source)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"meddpm-history: {source}: history database {source}: "), err
    assert not db.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["runner.sqlite"]


def _corrupt_rows(db: Path) -> int:
    """A hand edit of a stored history: malformed JSON in run 2, a date that is no date in run 3, a text where
    run 4's first case keeps its median (that case's row id is returned)."""
    connection = sqlite3.connect(db)
    with connection:
        connection.execute("UPDATE runs SET options = '{\"processes\": 1' WHERE id = 2")
        connection.execute("UPDATE runs SET started_at = 'yesterday' WHERE id = 3")
        first_case = connection.execute("SELECT min(id) FROM case_results WHERE run_id = 4").fetchone()[0]
        connection.execute("UPDATE case_results SET median_ms = 'fast' WHERE id = ?", (first_case,))
    connection.close()
    return first_case


def _corrupt_lines(first_case: int) -> list[str]:
    return [
        "runs row 2: options holds '{\"processes\": 1', which is no JSON object; the run is left out",
        "runs row 3: started_at holds 'yesterday', which is no date and time; the run is left out",
        f"case_results row {first_case} (run 4): median_ms holds 'fast', which is no finite number; "
        "the case is left out",
    ]


@pytest.fixture
def corrupt_history(tmp_path):
    from meddpm.history.last_good_lookup import last_good  # noqa: F401 - imported before the rows are edited

    files = write_runs(tmp_path / "runs", 6)
    for night, file in enumerate(files):
        _edited(file, _set(("environment", "commit"), f"{night:04x}" + "a" * 36))
    db = tmp_path / "h.sqlite"
    assert main(["import", "--db", str(db), *map(str, files)]) == 0
    first_case = _corrupt_rows(db)
    return db, _corrupt_lines(first_case)


@pytest.mark.parametrize("command", [["check"], ["report", "--out", "{tmp}/site"]])
def test_corrupt_rows_are_a_line_each_and_the_rest_is_read(tmp_path, capsys, corrupt_history, command):
    db, lines = corrupt_history
    capsys.readouterr()
    assert main([*(a.replace("{tmp}", str(tmp_path)) for a in command), "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [f"meddpm-history: {db}: {line}" for line in lines]
    if command == ["check"]:
        assert "4 run(s) of 1 architecture(s)" in out


def test_importing_from_a_database_with_corrupt_rows_takes_the_rest(tmp_path, capsys, corrupt_history):
    db, lines = corrupt_history
    capsys.readouterr()
    merged = tmp_path / "merged.sqlite"
    assert main(["import", "--db", str(merged), str(db)]) == 1
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [f"meddpm-history: {db}: {line}" for line in lines]
    assert "1 file(s) read, 3 skipped: 4 run(s) added" in out
    with HistoryStore.open(str(merged), create=False) as store:
        assert sorted(len(run.cases) for run in store.runs()) == [5, 6, 6, 6]


def test_the_last_good_lookup_reads_past_corrupt_rows(capsys, corrupt_history):
    from meddpm.history.last_good_lookup import last_good

    db, lines = corrupt_history
    capsys.readouterr()
    good = last_good(str(db), "a100", "suite")
    assert good.run_id == 6
    assert capsys.readouterr().err.strip().splitlines() == [f"history {db}: {line}" for line in lines]


def test_a_locked_history_is_said_once_with_a_line_while_waiting_and_no_advice_about_history(
    tmp_path, capsys, monkeypatch, corrupt_history
):
    from meddpm.history import store
    from meddpm.history.last_good import LAST_GOOD, compare_to_last_good

    db, _ = corrupt_history
    monkeypatch.setattr(store, "_BUSY_TIMEOUT_S", 0.2)
    monkeypatch.setattr(store, "_QUIET_WAIT_S", 0.05)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE runs SET host = 'busy'")
    capsys.readouterr()
    try:
        with pytest.raises(store.HistoryLocked) as caught:
            compare_to_last_good(LAST_GOOD, str(db), "a100", "suite", 3)
    finally:
        holder.close()
    assert str(caught.value) == (
        f"history database {db} is locked by another process (waited 0.2 s); "
        "try again once it has finished (an import or a run appending to it)"
    )
    assert capsys.readouterr().err.strip().splitlines() == [
        f"history database {db} is locked by another process; waiting up to 0.2 s"
    ]
