"""An interrupted suite session on the CPU (tiny preset), in an isolated pytest run: the interrupt is planted
(raised from an injected step), and results.json keeps what was measured, its cases marked "interrupted"."""

import json
import sqlite3

import pytest

FAST = [
    *("-p", "no:cacheprovider", "-rfEs", "-m", "cpu", "--combos=baseline,opt2", "--perf-warmup=0"),
    *("--perf-min-rounds=5", "--perf-max-rounds=5", "--perf-benchmark-rounds=1", "--perf-rel-iqr=1.0"),
]

# The training steps run for real; each timed iteration reads 100 ms, and the {stop}th (from 0) is a Ctrl-C.
CLOCK_WITH_CTRL_C = """
import itertools

import meddpm.measure.campaign.interleaved

pytest_plugins = ["meddpm.suite.plugin"]
_calls = itertools.count()


def _clock(fn, device, during=None):
    fn()
    if next(_calls) == {stop}:
        raise KeyboardInterrupt
    return 100.0


meddpm.measure.campaign.interleaved.time_synchronized = _clock
"""

# Ctrl-C while pytest-benchmark times the first case, after the campaign measured it and before any verdict.
CTRL_C_IN_BENCHMARK = """
import meddpm.suite.measuring

pytest_plugins = ["meddpm.suite.plugin"]


def _interrupted(self, case, request):
    raise KeyboardInterrupt


meddpm.suite.measuring.Measuring.time_with_benchmark = _interrupted
"""

# Ctrl-C while the second of the three measuring processes runs; the first reports 100 ms a round.
CTRL_C_IN_SECOND_PROCESS = """
import meddpm.measure.processes.campaign
from meddpm.measure.campaign.interleaved import ComboResult
from meddpm.run.combos import get_combo

pytest_plugins = ["meddpm.suite.plugin"]
_started = []


def _run_worker(self, source, combos, settings):
    _started.append(source)
    if len(_started) == 2:
        raise KeyboardInterrupt
    return [
        ComboResult(
            preset="tiny", combo=c, batch_size=1, volume=(16, 16, 16), math_precision=get_combo(c).math_precision,
            samples_ms=[100.0] * 5, warmup_ms=[], setup_s=0.1, flops_per_iter=10**9, rel_iqr_target=1.0,
            stop_reason="round limit of 5 reached",
        )
        for c in combos
    ]


meddpm.measure.processes.campaign.ProcessCampaign._run_worker = _run_worker
"""


@pytest.fixture
def suite(suite: pytest.Pytester) -> pytest.Pytester:
    """The shared folder with an empty baselines folder: the case measures, then skips for want of a baseline."""
    (suite.path / "baselines").mkdir()
    return suite


def run(suite: pytest.Pytester, conftest: str, *args: str) -> tuple[pytest.RunResult, dict]:
    suite.makeconftest(conftest)
    bdir, rdir = suite.path / "baselines", suite.path / "results"
    result = suite.runpytest_subprocess(*FAST, f"--baseline-dir={bdir}", f"--perf-results-dir={rdir}", *args)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    assert (rdir / "results.json").exists(), result.stdout.str()
    return result, json.loads((rdir / "results.json").read_text())


def interrupted_line(result: pytest.RunResult, marked: int) -> None:
    # pytest's progress line may precede it on the same line
    lines = [line for line in result.stdout.lines if "meddpm: interrupted;" in line]
    assert len(lines) == 1, result.stdout.str()
    assert lines[0].endswith(f'{marked} case(s) with the outcome "interrupted" (cut short or not judged)'), lines


def test_ctrl_c_in_the_rounds_writes_the_rounds_done_marked_interrupted(suite):
    result, document = run(suite, CLOCK_WITH_CTRL_C.format(stop=6))  # after 3 rounds of 2 combos
    cases = {c["combo"]: c for c in document["cases"]}
    assert set(cases) == {"baseline", "opt2"}
    for case in cases.values():
        assert case["outcome"] == "interrupted"
        assert case["samples_ms"] == [100.0] * 3 and case["stop_reason"] == "interrupted after 3 rounds"
    assert document["ratios"] == {}  # no ratio from cut-short rounds
    interrupted_line(result, 2)
    assert document["partial"] is True
    assert "outcome" in (suite.path / "results" / "summary.md").read_text()


def test_ctrl_c_before_a_case_is_judged_marks_it_interrupted(suite):
    result, document = run(
        suite, CTRL_C_IN_BENCHMARK, "--combos=baseline", "--perf-min-rounds=2", "--perf-max-rounds=2"
    )
    assert [(c["combo"], c["outcome"]) for c in document["cases"]] == [("baseline", "interrupted")]
    assert len(document["cases"][0]["samples_ms"]) == 2  # its campaign was whole
    interrupted_line(result, 1)


def test_ctrl_c_in_a_process_campaign_writes_the_processes_that_finished(suite):
    result, document = run(suite, CTRL_C_IN_SECOND_PROCESS, "--perf-processes=3")
    cases = {c["combo"]: c for c in document["cases"]}
    assert set(cases) == {"baseline", "opt2"}
    for case in cases.values():
        assert case["outcome"] == "interrupted"
        assert len(case["samples_ms"]) == 5 and len(case["process_medians_ms"]) == 1
    interrupted_line(result, 2)
    # The progress of the measuring goes past pytest's capture: a long run shows each process as it ends.
    result.stdout.fnmatch_lines(["meddpm: measuring tiny b1 on cpu in 3 processes*", "  process 1/3 (*): *"])


def test_an_interrupted_session_is_not_appended_to_the_history(suite):
    """Its cut-short rounds would enter the history's series as a full run's."""
    history = suite.path / "history.sqlite"
    result, document = run(suite, CLOCK_WITH_CTRL_C.format(stop=6), f"--history={history}")
    assert document["partial"] is True
    result.stdout.fnmatch_lines(["*run not appended to the history: it was interrupted (results.json is partial)*"])
    if history.exists():  # the option's check at the start may have made the database
        with sqlite3.connect(history) as db:
            assert db.execute("select count(*) from runs").fetchone() == (0,)
