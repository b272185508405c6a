"""Two runs side by side (``meddpm-history compare`` and its page), and run pages that link to their neighbours
and say what changed against the run before."""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pytest

from meddpm.history.cli import main
from meddpm.history.simulation import simulate, simulated_documents


@pytest.fixture(autouse=True)
def _no_history_env(monkeypatch):
    monkeypatch.delenv("MEDDPM_HISTORY", raising=False)


@pytest.fixture
def history(tmp_path, capsys) -> str:
    """Four nights; on the fourth, opt1 (column 1) takes 20 % longer, the driver changed and amp_bf16 is gone."""
    logs = simulate(np.random.default_rng(5), 4)
    logs[3, 1] += math.log(1.2)
    files = []
    for night, document in enumerate(simulated_documents(logs, "a100", driver="570.86")):
        if night == 3:
            document["environment"]["driver"] = "580.95"
            document["cases"] = [c for c in document["cases"] if c["combo"] != "amp_bf16"]
        files.append(tmp_path / f"{night}.json")
        files[-1].write_text(json.dumps(document))
    db = str(tmp_path / "h.sqlite")
    assert main(["import", "--db", db, *map(str, files)]) == 0
    capsys.readouterr()
    return db


def test_compare_prints_every_case_side_by_side_with_the_ratio(tmp_path, capsys, history):
    page = tmp_path / "site" / "compare.html"
    assert main(["compare", "3", "4", "--db", history, "--out", str(page)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A = run 3: a100 suite, commit c0002, 2026-12-03 02:17 UTC\nB = run 4: a100 suite")
    opt1 = re.search(r"^paper/opt1/b1 +time +(\S+) ms/iter +(\S+) ms/iter +(\S+) +(\S*)$", out, re.M)
    assert opt1 and opt1.group(4) == "worse", out
    assert float(opt1.group(3)) == pytest.approx(float(opt1.group(2)) / float(opt1.group(1)), abs=2e-3)
    assert re.search(r"^paper/amp_bf16/b1 +time +\S+ ms/iter +- +- +only in A$", out, re.M), out
    assert "1 worse, 0 better beyond the suite's thresholds (time 5%, memory 2%, energy 10%)" in out
    html = page.read_text()
    assert '<a href="runs/3.html">run 3</a>' in html and '<a href="runs/4.html">run 4</a>' in html
    assert '<td><span title="paper/opt1/b1">paper opt1, batch 1</span></td><td>time</td>' in html
    assert '<span class="open">worse</span>' in html


def test_comparing_a_run_that_is_not_there_is_one_line(capsys, history):
    assert main(["compare", "3", "99", "--db", history]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run 99 in " in err[0] and "run pages give each run's number" in err[0]


def test_comparing_a_run_with_itself_is_one_line(capsys, history):
    assert main(["compare", "2", "2", "--db", history]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == (
        "meddpm-history: error: RUN_A and RUN_B are both run 2; give two different runs to set side by side"
    )


@pytest.mark.parametrize("out", ["a-file/compare.html", "a-fifo", "."])
def test_an_out_that_cannot_be_written_is_refused_before_the_table(tmp_path, capsys, history, out):
    (tmp_path / "a-file").write_text("x")
    os.mkfifo(tmp_path / "a-fifo")
    assert main(["compare", "1", "2", "--db", history, "--out", str(tmp_path / out)]) == 2
    stdout, err = capsys.readouterr()
    assert stdout == "" and len(err.strip().splitlines()) == 1 and "File exists" not in err, err


def test_runs_of_two_architectures_are_compared_with_a_note_saying_so(tmp_path, capsys, history):
    document = simulated_documents(simulate(np.random.default_rng(6), 1), "h100")[0]
    (tmp_path / "h100.json").write_text(json.dumps(document))
    assert main(["import", "--db", history, str(tmp_path / "h100.json")]) == 0
    capsys.readouterr()
    assert main(["compare", "1", "5", "--db", history]) == 0
    out = capsys.readouterr().out
    assert out.startswith("note: run 1 ran on a100, run 5 on h100: a ratio compares the machines as well\n"), out


def test_a_run_page_links_its_neighbours_and_says_what_changed_against_the_run_before(tmp_path, capsys, history):
    assert main(["report", "--db", history, "--out", str(tmp_path / "site")]) == 0
    runs = tmp_path / "site" / "runs"
    last, first = (runs / "4.html").read_text(), (runs / "1.html").read_text()
    assert '<a href="../a100.html">a100 charts</a>' in last and '<a href="3.html">&larr; previous run (3)</a>' in last
    assert "next run" not in last and '<a href="2.html">next run (2) &rarr;</a>' in first
    assert "<h2>Against the run before</h2><p>Commits <code>c0002..c0003</code>; environment: driver 570.86 " in last
    assert "&rarr; 580.95; 1 worse and 0 better beyond the suite's thresholds, of 12 figures." in last
    label = '<span title="paper/opt1/b1">paper opt1, batch 1</span>'
    assert f'<a href="../a100.html#case-paper-opt1-b1">{label}</a>' in last
    assert "The first run of its kind here." in first
    assert 'id="case-paper-opt1-b1"' in (tmp_path / "site" / "a100.html").read_text()
