"""The suite's ``--history`` and ``meddpm-bench --history``: the run appended after its results file is
written, the database checked before measuring, and a failing append one line that loses nothing."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from meddpm.bench.cli import main as bench_main
from meddpm.errors import UserError
from meddpm.history.append import append_results
from meddpm.history.simulation import results_document
from meddpm.history.store import HistoryStore
from meddpm.measure.machine.environment import commit_subject
from meddpm.suite.records import append_history

FAST = [
    *("-p", "no:cacheprovider", "-rfEs", "-m", "cpu", "--combos=baseline", "--perf-warmup=0"),
    *("--perf-min-rounds=1", "--perf-max-rounds=1", "--perf-benchmark-rounds=1", "--perf-rel-iqr=1.0"),
]
# The suite's training steps run for real, but its clock reads 100 ms (tests/test_suite_plugin.py does the same).
FAKE_CLOCK = """
import meddpm.measure.campaign.interleaved

pytest_plugins = ["meddpm.suite.plugin"]


def _clock(fn, device, during=None):
    fn()
    if during is not None:
        during()
    return 100.0


meddpm.measure.campaign.interleaved.time_synchronized = _clock
"""


@pytest.fixture(autouse=True)
def _no_history_env(monkeypatch):
    monkeypatch.delenv("MEDDPM_HISTORY", raising=False)


def stored(db: Path) -> list:
    with HistoryStore.open(str(db), create=False) as store:
        return store.runs()


# --- meddpm-bench --------------------------------------------------------------------------------
@pytest.fixture
def bench(fake_bench, tmp_path):
    """meddpm-bench with a fake campaign and its results in ``tmp_path``; returns the exit code."""
    return lambda *args: fake_bench("--json", str(tmp_path / "r.json"), *args)


def test_bench_appends_its_run_with_the_machine_and_options(bench, tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    assert bench("--history", str(db)) == 0
    assert f"history: run added to {db}" in capsys.readouterr().out
    (run,) = stored(db)
    assert (run.kind, run.arch, run.schema, run.cases[0].case) == ("bench", "cpu", "meddpm-bench/4", "tiny/baseline/b1")
    assert run.host and run.options["combos"] == "baseline" and run.source.startswith("meddpm-bench (")
    # The command line's --processes (not given) beside what the file says the run was.
    assert (run.options["run_kind"], run.options["processes"], run.options["compare_to"]) == ("measure", 1, None)
    assert run.cases[0].median_ms == 10.0 and run.cases[0].samples_ms == [10.0] * 3


def test_bench_history_alone_is_the_environment_else_the_default_file(bench, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert bench("--history") == 0
    assert len(stored(tmp_path / "perf-history.sqlite")) == 1
    monkeypatch.setenv("MEDDPM_HISTORY", str(tmp_path / "env.sqlite"))
    assert bench() == 0  # no flag: the environment's database still gets the run
    assert len(stored(tmp_path / "env.sqlite")) == 1


@pytest.mark.parametrize(
    "history, message",
    [
        ("nosuchdb://h/d", "no database driver for nosuchdb://h/d"),
        ("postgresql://db.example:abc/perf", "'postgresql://db.example:abc/perf': the port is not a number"),
        ("postgresql:/db.example/perf", "'postgresql:/db.example/perf' is not a database URL"),
    ],
    ids=["driver", "port", "one-slash"],
)
def test_bench_refuses_a_bad_history_before_measuring(monkeypatch, tmp_path, no_campaign, capsys, history, message):
    monkeypatch.chdir(tmp_path)
    assert bench_main(["--device", "cpu", "--json", str(tmp_path / "r.json"), "--history", history]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert list(tmp_path.iterdir()) == []


def test_bench_keeps_its_json_when_the_append_fails(bench, tmp_path, capsys, monkeypatch):
    def fail(self, runs):
        raise UserError("history database x: appending failed: disk I/O error")

    monkeypatch.setattr(HistoryStore, "add", fail)
    assert bench("--history", str(tmp_path / "h.sqlite")) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"meddpm-bench: run not appended to the history ({tmp_path / 'r.json'} has it): "
        "history database x: appending failed: disk I/O error"
    )
    assert json.loads((tmp_path / "r.json").read_text())["results"][0]["combo"] == "baseline"


# --- the suite -----------------------------------------------------------------------------------


@pytest.fixture
def suite(suite: pytest.Pytester) -> pytest.Pytester:
    """The shared folder with an empty baselines folder: the case measures, then skips for want of a baseline."""
    (suite.path / "baselines").mkdir()
    return suite


def run_suite(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    bdir, rdir = suite.path / "baselines", suite.path / "results"
    return suite.runpytest_subprocess(*FAST, f"--baseline-dir={bdir}", f"--perf-results-dir={rdir}", *args)


def test_the_suite_appends_its_run_after_writing_results(suite, monkeypatch):
    suite.makeconftest(FAKE_CLOCK)
    db = suite.path / "history.sqlite"
    job = {"SERVER_URL": "https://github.com", "REPOSITORY": "o/r", "RUN_ID": "9", "RUN_ATTEMPT": "1"}
    for name, value in job.items():
        monkeypatch.setenv(f"GITHUB_{name}", value)
    monkeypatch.delenv("MEDDPM_COMMIT", raising=False)
    result = run_suite(suite, f"--history={db}")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"*history: run added to {db}"])
    (run,) = stored(db)
    assert (run.kind, run.arch, run.cases[0].case, run.cases[0].median_ms) == (
        "suite",
        "cpu",
        "tiny/baseline/b1",
        100.0,
    )
    assert run.options["history"] == str(db) and run.options["combos"] == ["baseline"] and run.host
    assert (run.schema, run.options["run_kind"], run.options["processes"]) == ("meddpm-perf-results/3", "measure", 1)
    # The commit measured, with its subject as git has it, and the CI job that measured it.
    assert run.commit_subject == commit_subject(run.commit) and run.commit_subject
    assert run.ci_job == "https://github.com/o/r/actions/runs/9/attempts/1"


def test_a_failing_append_is_one_line_and_results_json_stays(suite_options, tmp_path, monkeypatch):
    options = suite_options(history=str(tmp_path / "h.sqlite"))
    results = options.run_results
    results.parent.mkdir()
    results.write_text(json.dumps(results_document("h200", datetime.datetime(2026, 12, 1), "c0", {"fast": 49.3})))
    lines: list[str] = []

    def fail(self, runs):
        raise UserError("history database x: appending failed: disk I/O error")

    monkeypatch.setattr(HistoryStore, "add", fail)
    append_history(options, lines.append)
    assert lines == [
        f"meddpm: run not appended to the history ({results} has it): history database x: appending failed: "
        "disk I/O error"
    ]
    assert json.loads(results.read_text())["cases"][0]["combo"] == "fast"


@pytest.mark.parametrize(
    "history, message",
    [
        ("nosuchdb://h/d", "no database driver for nosuchdb://h/d"),
        ("postgresql://db.example:abc/perf", "'postgresql://db.example:abc/perf': the port is not a number"),
    ],
    ids=["driver", "port"],
)
def test_a_bad_history_stops_the_suite_before_measuring(suite, history, message):
    suite.makeconftest(FAKE_CLOCK)
    result = run_suite(suite, f"--history={history}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert not (suite.path / "results").exists()


def test_a_live_append_of_a_nan_median_is_refused_not_read_as_already_in(tmp_path):
    results = tmp_path / "results.json"
    document = results_document("h200", datetime.datetime(2026, 12, 1), "c0", {"fast": 49.3})
    document["cases"][0]["stats"]["median"] = float("nan")
    results.write_text(json.dumps(document))
    db = tmp_path / "h.sqlite"
    HistoryStore.open(str(db)).close()  # as the run's start does
    with pytest.raises(UserError, match=r"^case paper/fast/b1: stats.median holds nan; a time must be"):
        append_results(str(db), results, {}, "pytest suite")
    assert stored(db) == []
