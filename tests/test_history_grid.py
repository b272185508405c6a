"""The index's grid of cases and metrics, and labels a newcomer reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from meddpm.history.cli import main
from meddpm.history.html_parts import CommitLinks, case_label, software_version
from meddpm.history.simulation import simulate, simulated_documents

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_history_env(monkeypatch):
    monkeypatch.delenv("MEDDPM_HISTORY", raising=False)


def _cell(index: str, case: str, column: int) -> str:
    row = re.search(rf'<tr><td><a href="[^"]+"><span title="{re.escape(case)}">.*?</tr>', index)
    assert row, case
    return re.findall(r"<td[^>]*>.*?</td>", row.group(0))[column]


def test_the_index_shows_every_case_with_its_latest_value_changes_and_trend(tmp_path, capsys, monkeypatch):
    logs = simulate(np.random.default_rng(11), 30, step_case=1, step_night=14, step=0.05)
    files = []
    for night, document in enumerate(simulated_documents(logs, "h200")):
        files.append(tmp_path / f"{night:02d}.json")
        files[-1].write_text(json.dumps(document))
    db = str(tmp_path / "h.sqlite")
    main(["import", "--db", db, *map(str, files)])
    assert main(["report", "--db", db, "--out", str(tmp_path / "site"), "--baselines", str(ROOT / "baselines")]) == 0
    index = (tmp_path / "site" / "index.html").read_text()
    assert "<h2>h200: every case</h2>" in index and index.count("<svg ") == 12  # 6 cases x time, memory
    opt1 = _cell(index, "paper/opt1/b1", 1)
    assert opt1.startswith('<td class="open" title="h200 paper/opt1/b1 time +')
    assert re.search(r"\+[3-7]\.\d% vs last good · [+-]\d+\.\d% vs baseline", opt1), opt1
    quiet = _cell(index, "paper/opt2/b1", 1)
    assert quiet.startswith('<td class="" title="">') and "vs last good" in quiet
    capsys.readouterr()
    main(["ack", "h200", "paper/opt1/b1", "time", "--db", db, "--note", "known"])
    monkeypatch.chdir(tmp_path)
    main(["report", "--db", db, "--out", str(tmp_path / "site")])
    index = (tmp_path / "site" / "index.html").read_text()
    assert _cell(index, "paper/opt1/b1", 1).startswith('<td class="acknowledged"')
    assert "no baseline" in _cell(index, "paper/opt1/b1", 1)  # no --baselines, and no ./baselines here


def test_labels_a_newcomer_reads():
    assert case_label("paper/fast/b1/p3") == '<span title="paper/fast/b1/p3">paper fast, batch 1, 3 processes</span>'
    assert "paper opt1, batch 2, data-parallel on 4 GPUs" in case_label("paper/opt1/b2/ddp4")
    assert software_version("cudnn", "91900") == "9.19.0" and software_version("cudnn", 8907) == "8.9.7"
    assert software_version("driver", "580.95") == "580.95"


def test_a_range_of_one_dirty_commit_is_not_read_as_a_range():
    sha = "5e3cb8314a7910b28a80f991368c165dc784e4f9+dirty"
    assert CommitLinks().range(sha, sha) == "<code>5e3cb8314a79+dirty</code> on both sides (uncommitted changes)"
    assert CommitLinks().range("a" * 40, "b" * 40) == "<code>aaaaaaaaaaaa..bbbbbbbbbbbb</code>"


def test_ab_runs_show_what_they_measured_against_and_the_ratio(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    main(["import", "--db", db, str(ROOT / "docs" / "measurements")])
    assert main(["report", "--db", db, "--out", str(tmp_path / "site")]) == 0
    ab = (tmp_path / "site" / "index.html").read_text().split("<h2>A/B runs</h2>")[1]
    # Files from before compare_to was recorded name the revision in every verdict.
    assert "<td>HEAD (0a89f4a15) (from its verdicts)</td>" in ab and ">unchanged 0.9974 [0.9838, 1.0112]</span>" in ab
    assert re.search(r'<span class="open" title="[^"]*">regression 1\.0\d+ \[', ab)
