"""Process-level statistics: ratios, intervals, tests and detectable effects of process medians."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meddpm.judge.verdict import judge_processes
from meddpm.measure.processes.campaign import Source, paired
from meddpm.measure.statistics.compare import (
    THRESHOLD_FLOOR,
    between_process_spread,
    compare_processes,
    noise_threshold,
    pooled_spread,
)


def draws(rng: np.random.Generator, median: float, spread: float, n: int) -> list[float]:
    return list(median * np.exp(rng.normal(0, spread, n)))


def test_a_planted_one_percent_slowdown_is_found_and_its_size_reported():
    # Between-process spread of fast on an H200: 49.5 / 49.6 / 49.8 ms, about 0.3 %.
    rng = np.random.default_rng(1)
    reference, candidate = draws(rng, 49.6, 0.003, 5), draws(rng, 49.6 * 1.01, 0.003, 5)
    c = compare_processes(candidate, reference)
    assert c.ci_low < 1.01 < c.ci_high and c.ci_low > 1.0
    assert c.p_slower < 0.01 and c.mde < 0.01
    verdict = judge_processes(
        "paper/fast/b1", "time", c, noise_threshold(pooled_spread(candidate, reference), 0.05), 0.01
    )
    assert verdict.outcome == "regression"
    assert "ratio 1.01" in verdict.message() and "5 vs 5 processes" in verdict.message()


def test_clean_comparisons_almost_never_raise_an_alarm():
    # 2000 simulated A/B runs with no change, at the measured noise: the threshold and the test
    # together fire at most once in a thousand.
    rng = np.random.default_rng(2)
    outcomes = []
    for _ in range(2000):
        a, b = draws(rng, 100.0, 0.003, 5), draws(rng, 100.0, 0.003, 5)
        threshold = noise_threshold(pooled_spread(a, b), 0.05)
        outcomes.append(judge_processes("case", "time", compare_processes(a, b), threshold, 0.01).outcome)
    assert outcomes.count("regression") <= 2


def test_the_detectable_effect_shrinks_with_more_processes_and_grows_with_noise():
    rng = np.random.default_rng(3)
    mde = {
        (n, s): compare_processes(draws(rng, 100, s, n), draws(rng, 100, s, n)).mde
        for n in (3, 8)
        for s in (0.003, 0.03)
    }
    assert mde[(8, 0.003)] < mde[(3, 0.003)] and mde[(3, 0.003)] < mde[(3, 0.03)]


def test_one_process_a_side_is_untestable_and_says_so():
    c = compare_processes([101.0], [100.0, 100.5])
    assert not c.testable and math.isinf(c.mde) and c.ratio == pytest.approx(101 / math.sqrt(100 * 100.5))
    verdict = judge_processes("case", "time", c, 0.01, 0.01)
    assert verdict.outcome == "underpowered" and "raise --perf-processes" in verdict.message()


def test_identical_processes_give_an_exact_answer():
    assert compare_processes([110.0, 110.0], [100.0, 100.0]).p_slower == 0.0
    assert compare_processes([100.0, 100.0], [100.0, 100.0]).p_slower == 1.0


def test_spreads_and_thresholds():
    assert between_process_spread([100.0]) is None
    assert between_process_spread([99.0, 101.0]) == pytest.approx(math.log(101 / 99) / math.sqrt(2), rel=1e-6)
    assert pooled_spread([100.0], [5.0]) is None
    assert pooled_spread([99.0, 101.0], [49.5, 50.5]) == pytest.approx(between_process_spread([99.0, 101.0]), rel=1e-3)
    assert noise_threshold(None, 0.05) == 0.05
    assert noise_threshold(0.0001, 0.05) == THRESHOLD_FLOOR
    assert noise_threshold(0.01, 0.05) == pytest.approx(0.02)


def test_sources_alternate_abba():
    a, b = Source("A", None, ""), Source("B", None, "")  # type: ignore[arg-type]
    assert [s.label for i in range(3) for s in paired([a, b], i)] == ["A", "B", "B", "A", "A", "B"]
    assert [s.label for i in range(3) for s in paired([a], i)] == ["A", "A", "A"]


@pytest.mark.parametrize(
    "sources, energy, expected",
    [(1, True, ["1", "0", "0"]), (2, True, ["1", "1", "0", "0", "0", "0"]), (1, False, ["0"] * 3)],
)
def test_energy_blocks_run_in_each_sides_first_process_only_and_not_when_off(
    monkeypatch, tmp_path, sources, energy, expected
):
    from meddpm.measure.campaign.settings import CampaignSettings
    from meddpm.measure.processes import campaign as processes
    from meddpm.measure.processes.campaign import ProcessCampaign
    from meddpm.measure.processes.worker import WORKER_SCHEMA
    from meddpm.model.config import ModelConfig

    switches = []
    harness = Path(processes.__file__).resolve().parents[2]

    class Worker:
        """A worker that measures nothing: it records its energy switch and bound and writes an empty document."""

        def __init__(self, workload, python, env):
            pass

        def run(self, job, timeout_s, gpu_free):
            gpu_free()
            settings = json.loads(job[job.index("--settings") + 1])
            switches.append(str(int(settings["energy"])))
            assert settings["energy_error"] == 0.02
            out = Path(job[job.index("--out") + 1])
            document = {"schema": WORKER_SCHEMA, "harness": str(harness), "workload": str(tmp_path / "meddpm")}
            out.write_text(json.dumps({**document, "environment": {}, "results": []}))
            return True

        def end(self, timeout_s):
            return subprocess.CompletedProcess([], 0, "", "")

        def cancel(self):
            pass

    monkeypatch.setattr(processes, "StartedWorker", Worker)
    campaign = ProcessCampaign(
        ModelConfig.preset("tiny"),
        ["baseline"],
        "cpu",
        batch_size=1,
        settings=CampaignSettings(energy=energy, energy_error=0.02),
        processes=3,
        sources=[Source(label, tmp_path, "") for label in "AB"[:sources]],
    )
    campaign.run()
    assert switches == expected


def test_the_bench_and_the_suite_import_scipy_stats_only_when_they_judge():
    # scipy.stats took 1-1.6 s of every bench and suite start, before any measuring; only a verdict needs it.
    script = (
        "import sys; import meddpm.bench.cli, meddpm.suite.plugin; print('scipy.stats' in sys.modules); "
        "from meddpm.measure.statistics.compare import compare_processes; "
        "compare_processes([1.0, 1.1], [1.0, 1.2]); print('scipy.stats' in sys.modules)"
    )
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert shown.stdout.split() == ["False", "True"], shown.stdout + shown.stderr
