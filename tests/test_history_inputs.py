"""Odd inputs to the history: a FIFO as the database, numbers that do not fit, corrupt rows, colliding page
names, a repository address no link can follow, a locked database."""

from __future__ import annotations

import json
import os
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
