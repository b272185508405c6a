"""A session measures what was selected: -k, markers and --combos narrow the campaign, not just the report."""

from __future__ import annotations

import json

import pytest

from meddpm.suite.cases import PerfCase, RatioCase
from meddpm.suite.selection import selected_combos

ALL = ("baseline", "opt1", "opt2", "opt12", "amp_bf16", "fast")


def allowed(on_gpu: bool) -> tuple[str, ...]:
    return ALL if on_gpu else ("baseline", "opt1")


def test_one_selected_case_measures_its_combo_alone():
    selection, notes = selected_combos([PerfCase("h200", "paper", "amp_bf16", 1)], allowed, lambda r: True)
    assert selection == {("cuda", "paper", 1): ["amp_bf16"]} and notes == []


def test_a_checked_ratio_measures_its_reference_too_and_says_so():
    ratio = RatioCase("h200", "paper", "opt1", "baseline", 1)
    selection, notes = selected_combos([ratio, PerfCase("h200", "paper", "fast", 1)], allowed, lambda r: True)
    assert selection == {("cuda", "paper", 1): ["baseline", "opt1", "fast"]}  # in --combos' order
    assert notes == ["measuring baseline too: the expectation of opt1/baseline needs it"]


def test_a_ratio_with_no_expectation_or_a_reference_outside_combos_adds_nothing():
    ratio = RatioCase("h200", "paper", "opt1", "baseline", 1)
    assert selected_combos([ratio], allowed, lambda r: False) == ({}, [])
    only_opt1 = selected_combos([ratio], lambda on_gpu: ("opt1",), lambda r: True)
    assert only_opt1 == ({("cuda", "paper", 1): ["opt1"]}, [])


def test_cases_of_other_devices_and_batches_get_campaigns_of_their_own():
    cases = [PerfCase("cpu", "tiny", "opt1", 1), PerfCase("h200", "paper", "opt1", 2)]
    selection, _ = selected_combos(cases, allowed, lambda r: True)
    assert selection == {("cpu", "tiny", 1): ["opt1"], ("cuda", "paper", 2): ["opt1"]}


def run(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    (suite.path / "baselines").mkdir(exist_ok=True)
    return suite.runpytest_subprocess(
        *("-p", "no:cacheprovider", "-rs", "-m", "cpu", "--combos=baseline,opt1", "--perf-warmup=0"),
        *("--perf-min-rounds=3", "--perf-max-rounds=3", "--perf-benchmark-rounds=1", "--perf-rel-iqr=1.0"),
        f"--baseline-dir={suite.path / 'baselines'}",
        f"--perf-results-dir={suite.path / 'results'}",
        *args,
    )


def test_k_narrows_what_the_session_measures(suite):
    result = run(suite, "-k", "test_training_step and opt1")
    out = result.stdout.str()
    assert "meddpm: measuring tiny b1 on cpu in 1 process: opt1;" in out, out
    results = json.loads((suite.path / "results" / "results.json").read_text())
    assert [c["combo"] for c in results["cases"]] == ["opt1"]
    # Where the time went: the one line last, the split in results.json and summary.md.
    assert "meddpm: where the time went: " in out and ", measuring " in out
    split = results["time_split"]
    assert split["seconds"]["measuring"] > 0 and split["wall_s"] >= sum(split["seconds"].values())
    assert "Where the run's" in (suite.path / "results" / "summary.md").read_text()


def test_a_selection_that_reads_no_campaign_measures_nothing(suite):
    result = run(suite, "-k", "test_relative_expectation")  # GPU ratios only: they skip on a CPU
    assert "meddpm: measuring" not in result.stdout.str()
    assert not (suite.path / "results" / "results.json").exists()
