"""Acknowledged regressions: ``meddpm-history ack``, check quiet on them, the dashboard's state and note, and
open regressions that stay open until a later step returns them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from meddpm.history.cli import main
from meddpm.history.last_good_lookup import last_good
from meddpm.history.simulation import simulate, simulated_documents

MEASUREMENTS = Path(__file__).resolve().parent.parent / "docs" / "measurements"
NOTE = "opt1 trades 3 % of time for the <b>exact</b> reduction order"


@pytest.fixture(autouse=True)
def _no_history_env(monkeypatch):
    monkeypatch.delenv("MEDDPM_HISTORY", raising=False)


def write(folder: Path, logs: np.ndarray, first: int = 0) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for night, document in enumerate(simulated_documents(logs, "a100")):
        if night < first:
            continue
        document["environment"]["commit"] = f"{night:04x}" + "b" * 36
        files.append(folder / f"{night:02d}.json")
        files[-1].write_text(json.dumps(document))
    return files


def thirty_nights(second_step: bool = False) -> np.ndarray:
    """30 nights; opt1 (column 1) 5 % slower from night 14; with ``second_step`` 5 % slower again from 24."""
    logs = simulate(np.random.default_rng(11), 30, step_case=1, step_night=14, step=0.05)
    if second_step:
        logs[24:, 1] += math.log1p(0.05)
    return logs


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_a_regression_nobody_fixed_stays_open_past_fourteen_runs(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    run(capsys, "import", "--db", db, *map(str, write(tmp_path / "runs", thirty_nights())))
    status, out, _ = run(capsys, "check", "--db", db)
    assert status == 1 and "OPEN REGRESSION: a100 paper/opt1/b1 time +" in out and "16 run(s) ago" in out


def test_ack_makes_check_quiet_and_prints_the_step_as_acknowledged(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    run(capsys, "import", "--db", db, *map(str, write(tmp_path / "runs", thirty_nights())))
    status, out, _ = run(capsys, "ack", "a100", "paper/opt1/b1", "time", "--db", db, "--note", NOTE)
    assert status == 0 and out.startswith("meddpm-history: acknowledged a100 paper/opt1/b1 time (the step from ")
    status, out, _ = run(capsys, "check", "--db", db)
    assert status == 0 and "OPEN REGRESSION" not in out
    assert "ACKNOWLEDGED: a100 paper/opt1/b1 time +" in out and f"  {NOTE} (acknowledged " in out
    assert out.rstrip().endswith("no open regressions (1 acknowledged)")
    # The last good run is no longer held before the acknowledged step: the nights after it are good.
    assert last_good(db, "a100", "suite").commit.startswith(f"{29:04x}")
    status, _, _ = run(capsys, "report", "--db", db, "--out", str(tmp_path / "site"))
    index = (tmp_path / "site" / "index.html").read_text()
    page = (tmp_path / "site" / "a100.html").read_text()
    for html in (index, page):
        assert "<h2>Acknowledged regressions</h2>" in html
        assert "opt1 trades 3 % of time for the &lt;b&gt;exact&lt;/b&gt; reduction order" in html
    assert '<h2>Open regressions</h2><p class="none">None.</p>' in index


def test_a_step_after_the_acknowledged_one_is_open_again(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    files = write(tmp_path / "runs", thirty_nights(second_step=True))
    run(capsys, "import", "--db", db, *map(str, files[:22]))
    assert run(capsys, "ack", "a100", "paper/opt1/b1", "time", "--db", db, "--note", NOTE)[0] == 0
    run(capsys, "import", "--db", db, *map(str, files[22:]))
    status, out, _ = run(capsys, "check", "--db", db)
    assert status == 1 and "OPEN REGRESSION: a100 paper/opt1/b1 time +" in out and "from commit 0018" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["a100", "paper/opt2/b1", "time"], "no open regression of a100 paper/opt2/b1 time to acknowledge (open: "),
        (["h200", "paper/opt1/b1", "time"], "no open regression of h200 paper/opt1/b1 time to acknowledge"),
    ],
)
def test_acknowledging_what_is_not_open_is_one_line_naming_the_open_ones(tmp_path, capsys, args, message):
    db = str(tmp_path / "h.sqlite")
    run(capsys, "import", "--db", db, *map(str, write(tmp_path / "runs", thirty_nights())))
    status, _, err = run(capsys, "ack", *args, "--db", db, "--note", NOTE)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and message in lines[0], lines
    assert "a100 paper/opt1/b1 time" in lines[0]


def test_an_empty_note_is_refused(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    run(capsys, "import", "--db", db, *map(str, write(tmp_path / "runs", thirty_nights())))
    status, _, err = run(capsys, "ack", "a100", "paper/opt1/b1", "time", "--db", db, "--note", "  ")
    assert status == 2 and "--note is empty" in err


@pytest.mark.parametrize("note", ["\x1b[31mred\x1b[0m", "bell\x07", "\u202eevil"])
def test_a_note_with_control_characters_is_refused(tmp_path, capsys, note):
    db = str(tmp_path / "h.sqlite")
    run(capsys, "import", "--db", db, *map(str, write(tmp_path / "runs", thirty_nights())))
    status, out, err = run(capsys, "ack", "a100", "paper/opt1/b1", "time", "--db", db, "--note", note)
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--note holds control characters" in err and "plain text" in err
    assert "ACKNOWLEDGED" not in run(capsys, "check", "--db", db)[1]


def test_acknowledging_again_says_the_note_replaces_the_earlier_one(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    run(capsys, "import", "--db", db, *map(str, write(tmp_path / "runs", thirty_nights())))
    assert "replaces" not in run(capsys, "ack", "a100", "paper/opt1/b1", "time", "--db", db, "--note", "first")[1]
    status, out, _ = run(capsys, "ack", "a100", "paper/opt1/b1", "time", "--db", db, "--note", "second")
    assert status == 0 and "; this note replaces that of " in out
    assert "  second (acknowledged " in run(capsys, "check", "--db", db)[1]


def test_acknowledgements_travel_with_a_merged_database(tmp_path, capsys):
    runner = str(tmp_path / "runner.sqlite")
    run(capsys, "import", "--db", runner, *map(str, write(tmp_path / "runs", thirty_nights())))
    run(capsys, "ack", "a100", "paper/opt1/b1", "time", "--db", runner, "--note", NOTE)
    shared = str(tmp_path / "shared.sqlite")
    status, out, _ = run(capsys, "import", "--db", shared, runner)
    assert status == 0 and "30 run(s) added" in out and "1 acknowledgement(s) read" in out
    assert run(capsys, "import", "--db", shared, runner)[0] == 0  # again: nothing twice
    status, out, _ = run(capsys, "check", "--db", shared)
    assert status == 0 and out.count("ACKNOWLEDGED:") == 1


def test_the_measurements_pass_check_with_the_fast_memory_step_acknowledged(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    run(capsys, "import", "--db", db, str(MEASUREMENTS))
    status, out, _ = run(capsys, "check", "--db", db)
    assert status == 0, out
    assert "ACKNOWLEDGED: h200 paper/fast/b1 memory +1.5%" in out
    assert "ACKNOWLEDGED: h200 paper/fast/b1/p3 memory +3.2%" in out
    assert "ACKNOWLEDGED: h100 paper/fast/b1/p3 memory +3.1%" in out  # the same step, seen on H100s since


def test_one_change_seen_in_one_process_and_in_three_is_one_row(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    run(capsys, "import", "--db", db, str(MEASUREMENTS))
    run(capsys, "report", "--db", db, "--out", str(tmp_path / "site"))
    index = (tmp_path / "site" / "index.html").read_text()
    acknowledged = index.split("<h2>Acknowledged regressions</h2>")[1].split("</table>")[0]
    assert acknowledged.count("<tr>") == 3  # the header, the H200s' one change and the H100s' same step
    assert "paper fast, batch 1</span><br><span" in acknowledged and "+1.5%<br>+3.2%" in acknowledged
