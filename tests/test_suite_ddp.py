"""Data-parallel results in the baseline files: saved per world size, judged like any case."""

from meddpm.judge.baseline import load_baseline
from meddpm.measure.processes.ddp import DdpResult
from meddpm.suite.cases import PerfCase
from meddpm.suite.session import SuiteRun


def ddp(world: int, ms: float) -> DdpResult:
    rounds = [[ms + i * 0.1 for i in range(6)] for _ in range(world)]
    return DdpResult("paper", "opt1", world, 1, "gloo", rounds, rounds, [None] * world, [1.0] * world, [None] * world)


def test_ddp_results_become_world_size_cases_and_catch_a_slowdown(tmp_path, suite_options):
    saving = SuiteRun(suite_options(save_baseline=True), None, lambda line: None)
    saving.record_ddp([ddp(1, 230.0), ddp(2, 232.0)])
    assert saving.save(failed_tests=0) == f"baseline saved: 1 case(s) to {tmp_path / 'cpu.json'}"
    stored = load_baseline(tmp_path / "cpu.json", "cpu")
    assert list(stored.cases) == ["paper/opt1/b1/ddp2"]
    case = stored.cases["paper/opt1/b1/ddp2"]
    assert (case.world_size, case.median_ms, case.energy_j_per_iter) == (2, 232.25, 1.0)

    checking = SuiteRun(suite_options(), None, lambda line: None)
    same = checking.judge_ddp(PerfCase("cpu", "paper", "opt1", 1), ddp(2, 232.0))
    slower = checking.judge_ddp(PerfCase("cpu", "paper", "opt1", 1), ddp(2, 300.0))
    assert same.outcome == "unchanged" and slower.outcome == "regression"
    assert slower.message().startswith("paper/opt1/b1/ddp2 time regression: baseline 232.2 ms, now 300.2 ms")
    assert checking.judge_ddp(PerfCase("cpu", "paper", "opt2", 1), ddp(2, 300.0)) is None  # nothing stored
