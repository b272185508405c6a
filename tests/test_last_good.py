"""--compare-to=last-good: the A/B against the history's last good run, and whether the code or the machine moved.

The end-to-end test runs the suite twice in the planted repository (planted_repo.py): once to put a good run
into the history, then on a later commit against it. That commit slows the baseline combo (the code), while a
variable both sides read slows opt1 (the machine), so one A/B shows both causes.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from planted_repo import PACKAGE, git, make_repo
from test_settings import _Config

from meddpm.errors import UserError
from meddpm.history.store import HistoryStore
from meddpm.judge.drift import (
    BOTH,
    CODE,
    DRIFT,
    INCONCLUSIVE,
    NOT_MEASURED,
    UNCHANGED,
    attribute,
    environment_differences,
)
from meddpm.judge.verdict import Verdict
from meddpm.suite.options import parse_options

SUITE_TESTS = PACKAGE.parent / "perf_tests" / "test_training.py"
MACHINE_VARIABLE = "MEDDPM_TEST_OPT1_MS"  # opt1's planted time: what a slower machine does to both sides


def _ab(outcome: str, a_ms: float, b_ms: float) -> Verdict:
    return Verdict("paper/opt1/b1", "time", outcome, b_ms, a_ms, "ms")


@pytest.mark.parametrize(
    "outcome, a_ms, b_ms, last_ms, cause",
    [
        ("regression", 105.0, 100.0, 100.0, CODE),  # only the code moved
        ("unchanged", 105.0, 105.0, 100.0, DRIFT),  # the last good commit itself is 5 % slower today
        ("regression", 110.0, 105.0, 100.0, BOTH),
        ("slower under threshold", 100.6, 100.0, 100.0, CODE),  # significant, if small: the code
        ("unchanged", 100.5, 100.4, 100.0, UNCHANGED),
        ("unchanged", 100.5, 100.4, None, NOT_MEASURED),
        # An A/B too weak to see 4 %, its commit as before: not the machine's doing.
        ("underpowered", 104.0, 100.0, 100.0, INCONCLUSIVE),
    ],
)
def test_the_cause_follows_which_ratios_moved(outcome, a_ms, b_ms, last_ms, cause):
    found = attribute("paper/opt1/b1", _ab(outcome, a_ms, b_ms), last_ms, 0.02, ["driver 570.1 -> 580.2"])
    assert found.cause == cause
    assert found.ab_ratio == pytest.approx(a_ms / b_ms)
    if last_ms is not None:
        assert found.against_last_run == pytest.approx(a_ms / last_ms)
        assert found.same_code == pytest.approx(b_ms / last_ms)
    line = found.line()
    assert line.startswith(f"paper/opt1/b1: {cause} (A/B {a_ms / b_ms:.4f}")
    assert ("[driver 570.1 -> 580.2]" in line) == (cause in (DRIFT, BOTH))


def test_environment_differences_name_each_field_that_moved_and_skip_what_one_side_lacks():
    then = {"driver": "570.86", "torch": "2.11.0", "cudnn": 91900, "gpu_uuid": "GPU-a", "power_limit_w": 700.0}
    now = {"driver": "580.159", "torch": "2.11.0", "cudnn": 91900, "gpu_uuid": "GPU-b", "cuda": "13.0"}
    assert environment_differences(then, now) == ["gpu_uuid GPU-a -> GPU-b", "driver 570.86 -> 580.159"]
    assert environment_differences({**then, "sm_clock_max_mhz": 1980}, {**then, "sm_clock_max_mhz": 1755}) == [
        "sm_clock_max_mhz 1980 -> 1755"
    ]


def test_last_good_without_a_history_is_one_line_naming_the_fix(tmp_path):
    config = _Config(tmp_path, **{"--compare-to": "last-good", "--history": str(tmp_path / "empty.sqlite")})
    with pytest.raises(UserError, match=r"^no last good run: .*; run the suite .*--history first") as error:
        parse_options(config)
    assert "\n" not in str(error.value)


def test_on_a_gpu_machine_minus_m_cpu_looks_for_the_last_good_cpu_run(tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("meddpm.suite.options.detect_arch", lambda device: "h200")
    history = tmp_path / "empty.sqlite"
    with HistoryStore.open(str(history), create=True):
        pass
    for markexpr, arch in (("cpu", "cpu"), ("h200", "h200"), ("", "h200")):
        config = _Config(tmp_path, **{"--compare-to": "last-good", "--history": str(history), "markexpr": markexpr})
        with pytest.raises(UserError, match=f"^no last good run: the history .* holds no suite run on {arch};"):
            parse_options(config)


def _planted(repo: Path, baseline_ms: float) -> None:
    combos = repo / "meddpm" / "run" / "combos.py"
    combos.write_text(
        (PACKAGE / "run" / "combos.py").read_text()
        + f"\nimport os\n\nPLANTED_MS = {{'baseline': {baseline_ms}, 'opt1': float(os.environ.get("
        f"{MACHINE_VARIABLE!r}, '100'))}}\n"
    )


def _suite(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfEs", "-m", "cpu", "--combos=baseline,opt1"]
    cmd += ["--perf-warmup=0", "--perf-min-rounds=3", "--perf-max-rounds=3", "--perf-rel-iqr=1.0"]
    cmd += [f"--perf-results-dir={repo / 'results'}", f"--history={repo / 'history.sqlite'}", *args]
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(repo), "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*cmd, "test_training.py"], cwd=repo, env={**environment, **env}, capture_output=True, text=True
    )


def test_a_nightly_against_the_last_good_run_tells_the_code_from_the_machine(tmp_path):
    repo = make_repo(tmp_path)
    (repo / "test_training.py").write_text(SUITE_TESTS.read_text())
    (repo / "conftest.py").write_text('pytest_plugins = ["meddpm.suite.plugin"]\n')
    _planted(repo, 100.0)
    git(repo, "commit", "-qam", "good: 100 ms")
    good = git(repo, "rev-parse", "HEAD")
    first = _suite(repo)
    assert first.returncode in (0, 1), first.stdout + first.stderr  # no baseline stored: cases skip

    _planted(repo, 110.0)
    git(repo, "commit", "-qam", "slower baseline: 110 ms")
    night = _suite(repo, "--compare-to=last-good", "--perf-processes=2", **{MACHINE_VARIABLE: "120"})
    out = night.stdout
    assert night.returncode == 1, out + night.stderr  # the code's slowdown fails the case
    assert "alternating with the last good suite run on cpu, #1 of " in out and f"commit {good[:12]}" in out, out
    assert "code or machine, against the last good suite run on cpu, #1" in out
    # The planted times differ by up to 0.2 % between processes, as real ones do.
    assert re.search(r"tiny/baseline/b1: code \(A/B 1\.(09|10)\d\d, vs last good run 1\.(09|10)\d\d, its", out), out
    # opt1 moved with the machine alone; the processes' planted 0.1-0.2 % (by pid, with no spread within a
    # process) can make its A/B significant under the threshold, which the line then names beside the drift.
    drift = r"tiny/opt1/b1: (code, and )?machine or environment drift \(A/B (0\.99|1\.00)\d\d, vs last good run "
    assert re.search(drift + r"1\.(19|20)\d\d, its commit again 1\.(19|20)\d\d\) \[no recorded difference\]", out), out
    results = json.loads((repo / "results" / "results.json").read_text())
    assert results["last_good"]["run_id"] == 1 and results["last_good"]["commit"] == good
    causes = {c["combo"]: c["attribution"]["cause"] for c in results["cases"]}
    assert causes["baseline"] == CODE and causes["opt1"] in (DRIFT, BOTH)
    assert "Code or machine, against the last good run #1" in (repo / "results" / "summary.md").read_text()
    # The night's run is a trend run: the next night may A/B against it.
    with HistoryStore.open(str(repo / "history.sqlite"), create=False) as store:
        assert [run.kind for run in store.runs()] == ["suite", "suite"]


def test_the_bench_refuses_last_good_without_such_a_run_in_one_line(tmp_path, capsys):
    from meddpm.bench.cli import main

    history = tmp_path / "h.sqlite"
    HistoryStore.open(str(history)).close()  # a history database with no run in it
    args = ["--device=cpu", "--combos=baseline", f"--json={tmp_path / 'r.json'}", f"--history={history}"]
    assert main([*args, "--compare-to=last-good"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no last good run: the history " in err[0] and "holds no bench run on cpu" in err[0], err


def test_a_last_good_commit_git_does_not_know_says_it_came_from_the_history(tmp_path, capsys, monkeypatch):
    import datetime

    from meddpm.bench import processes
    from meddpm.bench.cli import main
    from meddpm.history.last_good_run import LastGood

    when = datetime.datetime(2026, 11, 20, 3, 0)
    gone = LastGood("f" * 40, 7, when, "cpu", "bench", 3, None, None, None, None, None, None, None, {}, {})
    monkeypatch.setattr(processes, "compare_to_last_good", lambda *args: gone)
    args = ["--device=cpu", "--combos=baseline", f"--json={tmp_path / 'r.json'}", "--history=h.sqlite"]
    assert main([*args, "--compare-to=last-good"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "meddpm-bench: error: --compare-to=last-good: the last good bench run on cpu, #7 of 2026-11-20 03:00 UTC "
        "(3 process(es)), commit ffffffffffff, a commit that git does not know in "
    ), err


def test_the_suite_says_a_last_good_commit_git_does_not_know_came_from_the_history(tmp_path):
    import sqlite3

    repo = make_repo(tmp_path)
    (repo / "test_training.py").write_text(SUITE_TESTS.read_text())
    (repo / "conftest.py").write_text('pytest_plugins = ["meddpm.suite.plugin"]\n')
    _planted(repo, 100.0)
    git(repo, "commit", "-qam", "good: 100 ms")
    first = _suite(repo)
    assert first.returncode in (0, 1), first.stdout + first.stderr
    with sqlite3.connect(repo / "history.sqlite") as db:  # the good run's commit, one this clone never had
        db.execute("update runs set \"commit\" = '0123456789abcdef0123456789abcdef01234567'")
    night = _suite(repo, "--compare-to=last-good", "--perf-processes=2")
    err = [line for line in night.stderr.splitlines() if line.strip()]
    assert night.returncode == 4 and len(err) == 1, night.stdout + night.stderr
    assert "--compare-to=last-good: the last good suite run on cpu, #1 of " in err[0], err
    assert "commit 0123456789ab, a commit that git does not know in " in err[0], err
