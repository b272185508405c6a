"""Where results go and how they get there: never over a device, a pipe or a link, never over another
run's file, and all of it written even when stdout's reader has gone (``| head``)."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from meddpm.bench import cli as bench_cli
from meddpm.history.cli import main as history_main
from meddpm.history.simulation import simulate, simulated_documents
from meddpm.history.store import HistoryStore
from meddpm.judge.verdict import Verdict
from meddpm.measure.processes.ddp import DdpResult
from meddpm.suite.records import append_history
from meddpm.suite.session import SuiteRun

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(os.name != "posix", reason="named pipes, symlinks and SIGPIPE are POSIX")


@pytest.fixture(autouse=True)
def _no_history_env(monkeypatch):
    monkeypatch.delenv("MEDDPM_HISTORY", raising=False)


def stored(db: Path) -> list:
    with HistoryStore.open(str(db), create=False) as store:
        return store.runs()


# --- the target of a write ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["named pipe", "link to a named pipe"])
def test_bench_refuses_a_json_that_is_not_a_regular_file_before_measuring(tmp_path, no_campaign, capsys, kind):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    given = fifo
    if kind.startswith("link"):
        given = tmp_path / "r.json"
        given.symlink_to(fifo)
    assert bench_cli.main(["--device", "cpu", "--json", str(given)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    what = f"it links to {fifo}, a named pipe" if given != fifo else "it is a named pipe"
    assert line == (
        f"meddpm-bench: error: cannot write {given}: {what}; give the path of a regular file or of a new one"
    )
    assert fifo.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == sorted({"fifo", given.name})


def test_bench_writes_through_a_json_symlink_and_keeps_it(tmp_path, fake_bench):
    target = tmp_path / "kept" / "r.json"
    target.parent.mkdir()
    target.write_text("{}")
    link = tmp_path / "r.json"
    link.symlink_to(target)
    assert fake_bench("--json", str(link)) == 0
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text())["results"][0]["combo"] == "baseline"


# --- one file per run ---------------------------------------------------------------------------
def test_bench_default_files_of_runs_in_one_second_are_distinct(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    frozen = SimpleNamespace(datetime=SimpleNamespace(now=lambda: datetime.datetime(2026, 1, 2, 3, 4, 5)))
    for module in ("meddpm.bench.cli", "meddpm.atomic"):
        monkeypatch.setattr(f"{module}.datetime", frozen, raising=False)
    first = bench_cli._json_path(None, "tiny")
    first.parent.mkdir()
    first.write_text("{}")  # the first run's results
    again = bench_cli._json_path(None, "tiny")  # same clock, same process: never the file that exists
    monkeypatch.setattr(os, "getpid", lambda: 424242)
    other = bench_cli._json_path(None, "tiny")  # another process in the same second
    assert len({first, again, other}) == 3 and not again.exists() and not other.exists()
    assert first.parent == Path("bench-results") and first.name.endswith("-tiny.json")


def _ddp(combo: str) -> DdpResult:
    return DdpResult("tiny", combo, 1, 1, "gloo", [[5.0, 5.1, 5.2]], [[4.0, 4.1, 4.2]], [2**20], [1.0], [1000])


def _suite_runs(suite_options, combos: list[str], **options) -> list[SuiteRun]:
    """Sessions started one after another with the same options, each with a DDP result of its combo."""
    runs = []
    for combo in combos:
        runs.append(SuiteRun(suite_options(**options), "cpu", lambda line: None))
        runs[-1].measuring.ddp_results.append(_ddp(combo))
    return runs


def test_two_suite_runs_sharing_a_results_dir_each_keep_their_cases(suite_options, tmp_path):
    for run in _suite_runs(suite_options, ["baseline", "opt1"]):
        run.write_results()
    out = tmp_path / "results"
    own = sorted(out.glob("results-*.json"))
    assert [[d["combo"] for d in json.loads(p.read_text())["ddp"]] for p in own] == [["baseline"], ["opt1"]]
    assert json.loads((out / "results.json").read_text()) == json.loads(own[1].read_text())  # the latest
    assert {p.name for p in out.iterdir()} == {"results.json", "summary.md", *(p.name for p in own)}


def test_a_session_of_sampling_cases_alone_writes_its_samples_verdicts(suite_options, tmp_path):
    run = SuiteRun(suite_options(), "cpu", lambda line: None)
    check = "tiny sample baseline/b1 time <= 600 s (target)"
    verdict = Verdict("tiny sample baseline/b1", check, "holds", 600.0, 3.2, "s")
    run.judging.expectation_verdicts.append(("cpu", verdict, "x"))
    assert run.write_results() is not None
    payload = json.loads((tmp_path / "results" / "results.json").read_text())
    assert check in json.dumps(payload["expectations"])


def test_a_session_that_measured_nothing_writes_no_results(suite_options, tmp_path):
    run = SuiteRun(suite_options(), "cpu", lambda line: None)
    subject = "tiny sample baseline/b1"
    no_budget = Verdict(subject, f"{subject} time (no budget)", "no budget", None, None, "s")
    run.judging.expectation_verdicts.append(("cpu", no_budget, "x"))
    assert run.write_results() is None and not (tmp_path / "results").exists()


def test_the_suite_appends_its_own_run_not_the_latest_in_a_shared_folder(suite_options, tmp_path):
    db = tmp_path / "h.sqlite"
    first, second = _suite_runs(suite_options, ["baseline", "opt1"], history=str(db))
    first.write_results()
    second.write_results()  # finishes before the first session appends
    lines: list[str] = []
    append_history(first.options, lines.append)
    assert len(lines) == 1 and "not appended" not in lines[0], lines
    (run,) = stored(db)
    assert {c.combo for c in run.cases} == {"baseline"}


# --- stdout's reader gone -----------------------------------------------------------------------
BENCH_WITH_A_FAKE_CAMPAIGN = """
import sys
from bench_fakes import FakeCampaign
from meddpm.bench import cli, host_ram
cli.Campaign = FakeCampaign
host_ram.available_memory = lambda: None
sys.exit(cli.main(sys.argv[1:]))
"""


def _closed_stdout(*args: str, unbuffered: bool = True) -> subprocess.CompletedProcess:
    """Run ``python args`` with stdout a pipe whose reader has left, as ``| head`` leaves it.

    Unbuffered, the first line written meets the closed pipe, as a long report's would; buffered,
    a short one meets it only in the flush at exit.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    python = [sys.executable, *(["-u"] if unbuffered else [])]
    proc = subprocess.Popen([*python, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # before the command has written: its first line meets a closed pipe
    err = proc.stderr.read().decode()
    proc.stderr.close()
    return subprocess.CompletedProcess(args, proc.wait(), "", err)


def test_bench_writes_its_results_and_history_when_stdout_is_closed(tmp_path):
    out, db = tmp_path / "r.json", tmp_path / "h.sqlite"
    args = ["--device", "cpu", "--combos", "baseline", "--json", str(out), "--history", str(db)]
    done = _closed_stdout("-c", BENCH_WITH_A_FAKE_CAMPAIGN, *args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    assert json.loads(out.read_text())["results"][0]["combo"] == "baseline"
    assert len(stored(db)) == 1


def test_bench_started_with_no_stdout_at_all_still_writes_its_results(tmp_path):
    """``meddpm-bench >&-``: Python then has no sys.stdout, and the report has nowhere to go but the file."""
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    args = ["--device", "cpu", "--combos", "baseline", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", BENCH_WITH_A_FAKE_CAMPAIGN, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: os.close(1),
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert json.loads(out.read_text())["results"][0]["combo"] == "baseline"


@pytest.mark.parametrize("unbuffered", [True, False])
def test_history_check_into_a_closed_pipe_exits_quietly(tmp_path, capsys, unbuffered):
    db = tmp_path / "h.sqlite"
    files = []
    for night, document in enumerate(simulated_documents(simulate(np.random.default_rng(0), 3), "a100")):
        files.append(tmp_path / f"{night:02d}.json")
        files[-1].write_text(json.dumps(document))
    assert history_main(["import", "--db", str(db), *map(str, files)]) == 0
    capsys.readouterr()
    done = _closed_stdout("-m", "meddpm.history.cli", "--db", str(db), "check", unbuffered=unbuffered)
    assert (done.returncode, done.stderr) == (1, "")


def test_the_suite_refuses_a_results_json_that_is_a_pipe_before_measuring(pytester: pytest.Pytester):
    pytester.makeconftest('pytest_plugins = ["meddpm.suite.plugin"]')
    pytester.makepyfile(test_training=(ROOT / "perf_tests" / "test_training.py").read_text())
    results = pytester.path / "results"
    results.mkdir()
    os.mkfifo(results / "results.json")
    done = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--perf-results-dir={results}")
    assert done.ret == pytest.ExitCode.USAGE_ERROR
    done.stderr.fnmatch_lines([f"*cannot write {results / 'results.json'}: it is a named pipe; give the path of a*"])
    assert (results / "results.json").is_fifo()
