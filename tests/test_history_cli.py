"""``meddpm-history``: import (twice adds nothing, bad files named, the rest in), check's exit codes, report."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_history_dashboard import MEASURED_RUNS

from meddpm.history.cli import main
from meddpm.history.simulation import simulate, simulated_documents
from meddpm.history.store import HistoryStore

MEASUREMENTS = Path(__file__).resolve().parent.parent / "docs" / "measurements"


@pytest.fixture(autouse=True)
def _no_history_env(monkeypatch):
    monkeypatch.delenv("MEDDPM_HISTORY", raising=False)


def write_history(folder: Path, logs: np.ndarray, arch: str = "a100") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for night, document in enumerate(simulated_documents(logs, arch)):
        files.append(folder / f"{night:02d}" / "results.json")
        files[-1].parent.mkdir()
        files[-1].write_text(json.dumps(document))
    return files


def stored_runs(db: Path) -> int:
    with HistoryStore.open(str(db), create=False) as store:
        return len(store.runs())


def test_importing_the_measurements_twice_adds_them_once(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    assert main(["import", "--db", str(db), str(MEASUREMENTS)]) == 0
    first = capsys.readouterr()
    added = stored_runs(db)
    assert added >= 22 and f"{added} run(s) added, 0 already in" in first.out
    assert main(["--db", str(db), "import", str(MEASUREMENTS)]) == 0
    assert f"0 run(s) added, {added} already in" in capsys.readouterr().out
    assert stored_runs(db) == added


def test_a_corrupt_or_foreign_file_is_one_line_and_the_rest_goes_in(tmp_path, capsys):
    good = write_history(tmp_path / "runs", simulate(np.random.default_rng(0), 3))
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text(good[0].read_text()[:200])
    foreign = tmp_path / "benchmark.json"
    foreign.write_text('{"benchmarks": []}')
    missing = tmp_path / "missing.json"
    db = tmp_path / "h.sqlite"
    assert main(["import", "--db", str(db), str(corrupt), *map(str, good), str(foreign), str(missing)]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f"meddpm-history: {corrupt}: not JSON (")
    assert lines[1].startswith(f"meddpm-history: {foreign}: not a meddpm results file (no schema field")
    assert lines[2].startswith(f"meddpm-history: {missing}: cannot read it (No such file or directory)")
    assert "6 file(s) read, 3 skipped: 3 run(s) added" in out and stored_runs(db) == 3


def test_other_json_in_a_folder_is_only_noted(tmp_path, capsys):
    write_history(tmp_path / "runs", simulate(np.random.default_rng(0), 2))
    (tmp_path / "runs" / "benchmark.json").write_text('{"benchmarks": []}')
    assert main(["import", "--db", str(tmp_path / "h.sqlite"), str(tmp_path / "runs")]) == 0
    assert "benchmark.json: not a meddpm results file" in capsys.readouterr().err


def test_a_fifo_or_broken_link_in_a_folder_is_noted_not_opened(tmp_path, capsys):
    # Opening a FIFO waits for a writer: the import would hang. Found in a folder, it is only noted.
    write_history(tmp_path / "runs", simulate(np.random.default_rng(0), 2))
    os.mkfifo(tmp_path / "runs" / "pipe.json")
    (tmp_path / "runs" / "gone.json").symlink_to(tmp_path / "nowhere.json")
    db = tmp_path / "h.sqlite"
    assert main(["import", "--db", str(db), str(tmp_path / "runs"), "--verbose"]) == 0
    out, err = capsys.readouterr()
    assert f"{tmp_path / 'runs' / 'pipe.json'}: a FIFO, not a results file: left out" in err
    assert f"{tmp_path / 'runs' / 'gone.json'}: a broken symlink, not a results file: left out" in err
    assert "2 file(s) read: 2 run(s) added" in out and stored_runs(db) == 2


def test_the_files_a_folder_holds_that_are_no_results_file_are_one_summary_line(tmp_path, capsys):
    assert main(["import", "--db", str(tmp_path / "h.sqlite"), str(MEASUREMENTS)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and " file(s) in the folders left out, none a results file: " in err[0], err
    assert err[0].endswith(" more (--verbose lists each with its reason)")


def test_another_history_database_merges_in_with_what_it_knew(tmp_path, capsys):
    files = write_history(tmp_path / "runs", simulate(np.random.default_rng(0), 4))
    runner = tmp_path / "runner.sqlite"
    assert main(["import", "--db", str(runner), *map(str, files[:3])]) == 0
    with HistoryStore.open(str(runner)) as store, store.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE runs SET host = 'gpu-runner-7'")
    shared = tmp_path / "shared.sqlite"
    assert main(["import", "--db", str(shared), str(files[0]), str(runner), str(files[3])]) == 0
    assert "4 run(s) added" in capsys.readouterr().out
    with HistoryStore.open(str(shared)) as store:
        hosts = [r.host for r in store.runs()]
    # The first copy of a run wins: files[0] came before the runner's database, so it has no host.
    assert hosts.count("gpu-runner-7") == 2 and len(hosts) == 4


def test_check_fails_on_an_open_regression_naming_case_metric_and_commit(tmp_path, capsys):
    logs = simulate(np.random.default_rng(1), 24, step_case=1, step_night=20, step=0.05)
    db = tmp_path / "h.sqlite"
    main(["import", "--db", str(db), *map(str, write_history(tmp_path / "runs", logs))])
    capsys.readouterr()
    assert main(["check", "--db", str(db)]) == 1
    out = capsys.readouterr().out
    assert "OPEN REGRESSION: a100 paper/opt1/b1 time +" in out and "from commit c0020" in out
    assert "  commits c0019..c0020; bisect: meddpm-bench --bisect c0019..c0020 --combos opt1 --preset paper\n" in out


def test_check_passes_the_measurements_whose_memory_steps_returned_to_their_old_level(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    main(["import", "--db", str(db), str(MEASUREMENTS)])
    capsys.readouterr()
    status = main(["check", "--db", str(db)])
    out = capsys.readouterr().out
    # opt2's, opt12's and amp_bf16's peak memory rose for two runs of one dirty tree and went back: not open.
    opened = [line for line in out.splitlines() if line.startswith("OPEN REGRESSION")]
    returned = ("paper/opt2/b1 memory", "paper/opt12/b1 memory", "paper/amp_bf16/b1 memory")
    assert not [line for line in opened if any(f" {case} " in line for case in returned)], opened
    assert status == (1 if opened else 0)


def test_check_passes_a_flat_history(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    main(
        ["import", "--db", str(db), *map(str, write_history(tmp_path / "runs", simulate(np.random.default_rng(3), 12)))]
    )
    assert main(["check", "--db", str(db)]) == 0
    assert "no step changes" in capsys.readouterr().out


def test_the_database_comes_from_the_environment_else_the_working_folder(tmp_path, capsys, monkeypatch):
    files = write_history(tmp_path / "runs", simulate(np.random.default_rng(0), 2))
    monkeypatch.chdir(tmp_path)
    assert main(["import", str(files[0])]) == 0
    assert (tmp_path / "perf-history.sqlite").exists()
    monkeypatch.setenv("MEDDPM_HISTORY", str(tmp_path / "env.sqlite"))
    assert main(["import", str(files[1])]) == 0
    assert stored_runs(tmp_path / "env.sqlite") == 1 and stored_runs(tmp_path / "perf-history.sqlite") == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["check", "--db", "{tmp}/none.sqlite"], "no history database at"),
        (["report", "--db", "nosuchdb://x/y", "--out", "{tmp}/site"], "no database driver for nosuchdb://x/y"),
        (["check", "--db", "{tmp}"], "is a directory"),
    ],
    ids=["missing", "driver", "directory"],
)
def test_user_errors_are_one_line(tmp_path, capsys, args, message):
    assert main([a.replace("{tmp}", str(tmp_path)) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("meddpm-history: error: "), err


def test_bad_arguments_are_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["report"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and "the following arguments are required: --out" in err[0]


def test_report_writes_a_page_per_architecture_and_per_run(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    main(["import", "--db", str(db), str(MEASUREMENTS)])
    repo = ["--repo-url", "https://github.com/example/meddpm-perf/"]
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "site"), *repo]) == 0
    assert f"and 2 architecture page(s), {MEASURED_RUNS} run page(s)" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "site").iterdir()) == [
        "h100.html",
        "h200.html",
        "index.html",
        "runs",
    ]
    h200 = (tmp_path / "site" / "h200.html").read_text()
    assert '<a href="https://github.com/example/meddpm-perf/compare/f2f8196384b7...098de49e46c3">' in h200
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "site"), "--repo-url", "github.com/x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--repo-url 'github.com/x' is not a web address" in err[0]
    (tmp_path / "file").write_text("")
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "file")]) == 2
    assert "is a file; give a folder" in capsys.readouterr().err


def test_a_run_with_a_nan_median_is_refused_naming_case_and_field_not_read_as_already_in(tmp_path, capsys):
    good, bad = write_history(tmp_path / "runs", simulate(np.random.default_rng(0), 2))
    document = json.loads(bad.read_text())
    document["cases"][1]["stats"]["median"] = float("nan")
    bad.write_text(json.dumps(document))
    db = tmp_path / "h.sqlite"
    assert main(["import", "--db", str(db), str(good), str(bad)]) == 1
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        f"meddpm-history: {bad}: case paper/opt1/b1: stats.median holds nan; "
        "a time must be a finite number of ms above 0"
    ]
    assert "2 file(s) read, 1 skipped: 1 run(s) added, 0 already in" in out and stored_runs(db) == 1


@pytest.mark.parametrize("command", [["check"], ["report", "--out", "{tmp}/site"], ["import", "{tmp}/r.json"]])
@pytest.mark.parametrize(
    "url, message",
    [
        ("postgresql:/db.example/perf", "'postgresql:/db.example/perf' is not a database URL; give sqlite:///path, "),
        ("sqlite:relative.db", "'sqlite:relative.db' is not a database URL; give sqlite:///path, postgresql://"),
        ("postgresql://u:secret@db.example:abc/perf", "'postgresql://u:***@db.example:abc/perf': the port is not a"),
        ("sqlite://relative.db", "'sqlite://relative.db' names a host, which SQLite has none of"),
    ],
    ids=["one-slash", "no-slash", "port", "sqlite-host"],
)
def test_a_mistyped_url_is_one_line_and_creates_nothing(tmp_path, capsys, monkeypatch, command, url, message):
    files = write_history(tmp_path / "runs", simulate(np.random.default_rng(0), 1))
    (tmp_path / "r.json").write_text(files[0].read_text())
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main([*(a.replace("{tmp}", str(tmp_path)) for a in command), "--db", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"meddpm-history: error: {message}"), err
    assert "secret" not in err[0] and list(work.iterdir()) == []


def _empty_sqlite(path: Path) -> None:
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA user_version = 7")  # a real SQLite file, of something else, with no tables
    connection.commit()
    connection.close()


@pytest.mark.parametrize("command", [["check"], ["report", "--out", "{tmp}/site"]])
@pytest.mark.parametrize("make", [lambda p: p.write_bytes(b""), _empty_sqlite], ids=["zero-byte", "foreign-empty"])
def test_check_and_report_leave_a_file_that_is_no_history_database_as_it_was(tmp_path, capsys, command, make):
    db = tmp_path / "other.sqlite"
    make(db)
    before = db.read_bytes()
    assert main([*(a.replace("{tmp}", str(tmp_path)) for a in command), "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"meddpm-history: error: {db} is not a history database (it holds no tables); "
        "create one with 'meddpm-history import' or --history"
    ]
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]


def test_a_results_document_with_no_cases_or_a_newer_schema_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty.json"
    empty.write_text('{"cases": []}')
    newer = tmp_path / "newer.json"
    newer.write_text('{"schema": "meddpm-perf-results/4", "arch": "h200", "cases": []}')
    untimed = tmp_path / "untimed.json"
    environment = {"date": "2026-12-01"}
    untimed.write_text(json.dumps({"schema": "meddpm-perf-results/1", "arch": "h200", "environment": environment}))
    db = tmp_path / "h.sqlite"
    assert main(["import", "--db", str(db), str(empty), str(newer), str(untimed)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    known = "meddpm-perf-results/1, meddpm-perf-results/2, meddpm-perf-results/3, meddpm-bench/1, meddpm-bench/2, "
    known += "meddpm-bench/3, meddpm-bench/4"
    assert err == [
        f"meddpm-history: {empty}: not a meddpm results file (no schema field; known: {known}); "
        "give a results file written by the suite or meddpm-bench",
        f"meddpm-history: {newer}: a meddpm-perf-results/4 file, which this meddpm-perf cannot read "
        f"(it reads {known}); read it with the newer meddpm-perf that wrote it",
        f"meddpm-history: {untimed}: a meddpm-perf-results/1 file with no measured cases",
    ]


def test_an_nsight_compute_only_session_is_noted_as_nothing_to_store(tmp_path, capsys):
    ncu_only = tmp_path / "results.json"
    ncu_only.write_text('{"schema": "meddpm-perf-results/1", "arch": "h200", "cases": [], "ncu": [{"combo": "opt1"}]}')
    assert main(["import", "--db", str(tmp_path / "h.sqlite"), str(ncu_only)]) == 0
    assert f"{ncu_only}: no timed cases, nothing to store" in capsys.readouterr().err


# A read-only mount, for real: a user and mount namespace (util-linux's unshare, no privileges needed) in which
# the history's folder is bind-mounted read-only. chmod cannot stand in for it: the tests run as root, whom
# file permissions do not stop, but a read-only mount stops everyone.
READ_ONLY_MOUNT = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


def _on_read_only_mount(folder: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", READ_ONLY_MOUNT, "sh", str(folder), *command],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def test_a_history_on_a_read_only_mount_is_read_and_not_written(tmp_path):
    """check and report read a WAL database on a read-only mount (where SQLite cannot even make its
    shared-memory file); import is refused up front in one line; the file is not changed."""
    if shutil.which("unshare") is None or _on_read_only_mount(tmp_path, "true").returncode != 0:
        pytest.skip("no user and mount namespaces here (unshare --user --mount) to make a read-only mount")
    folder = tmp_path / "mounted"
    files = write_history(tmp_path / "runs", simulate(np.random.default_rng(0), 3))
    db = folder / "h.sqlite"
    assert main(["import", "--db", str(db), *map(str, files[:2])]) == 0
    before = db.read_bytes()
    cli = [sys.executable, "-m", "meddpm.history.cli", "--db", str(db)]
    checked = _on_read_only_mount(folder, *cli, "check")
    assert checked.returncode == 0 and "2 run(s) of 1 architecture(s)" in checked.stdout, checked.stderr
    reported = _on_read_only_mount(folder, *cli, "report", "--out", str(tmp_path / "site"))
    assert reported.returncode == 0 and "dashboard:" in reported.stdout, reported.stderr
    imported = _on_read_only_mount(folder, *cli, "import", str(files[2]))
    assert imported.returncode == 2 and imported.stderr.strip().splitlines() == [
        f"meddpm-history: error: history database {db} is read-only here (a read-only mount or no write "
        "permission); storing runs needs write access (check and report can read it)"
    ]
    assert db.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["h.sqlite"]


def test_importing_a_folder_with_nothing_to_import_says_so_and_fails(tmp_path, capsys):
    empty = tmp_path / "runs"
    empty.mkdir()
    db = tmp_path / "h.sqlite"
    assert main(["import", "--db", str(db), str(empty)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"meddpm-history: error: nothing to import: {empty} holds no .json file; give results files or folders of them"
    ]
    assert not db.exists()
