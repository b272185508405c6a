"""Peak memory in every A/B: each side's per-process peaks, allocated and reserved, judged against the other's by
the time verdict's rules, failing the case the same way. Peaks are planted in the workers: nothing here reads a GPU.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from planted_workers import planted_ab
from test_campaign_runs import run_of

from meddpm.bench.processes import ab_table
from meddpm.errors import UserError
from meddpm.judge.ab import ab_cases
from meddpm.judge.baseline import Tolerances
from meddpm.judge.verdict import judge_memory_ab
from meddpm.measure.campaign.result import ComboResult
from meddpm.measure.processes.campaign import result_from_dict
from meddpm.suite.cases import CaseRecord, PerfCase
from meddpm.suite.judging import Judging, StoredBaselines
from meddpm.suite.summary import markdown_summary

GIB = 2**30


def campaign_of(tmp_path, processes: int, peaks: dict[str, list[int | None]], reserved: dict[str, list[int]] | None):
    """An A/B of one combo whose planted workers report ``peaks[side][i]`` as process i's peak allocation."""

    def result(side: str, i: int, combo: str) -> ComboResult:
        key = {"A": "work", "B": "HEAD"}[side]
        fields = {"peak_allocated_bytes": peaks[key][i]}
        if reserved:
            fields["peak_reserved_bytes"] = reserved[key][i]
        return run_of(combo, [100.0 + i * 0.1] * 3, **fields)

    return planted_ab(tmp_path, ["amp_bf16"], processes, result)


def test_a_peak_that_grew_by_a_fifth_fails_the_ab_though_time_did_not_move(tmp_path):
    a, b = int(16.8 * GIB), int(13.7 * GIB)
    campaign = campaign_of(tmp_path, 3, {"work": [a] * 3, "HEAD": [b] * 3}, {"work": [a + GIB] * 3, "HEAD": [b] * 3})
    case = ab_cases(campaign)["amp_bf16"]
    assert case.time.outcome == "unchanged"
    allocated, reserved = case.memory
    assert (allocated.metric, allocated.outcome) == ("peak memory", "regression")
    assert allocated.change == pytest.approx(16.8 / 13.7 - 1, rel=1e-6)
    assert allocated.p_value == 0.0  # identical peaks a side: the difference is exact
    assert (reserved.metric, reserved.outcome) == ("peak reserved", "regression")
    assert case.failed and allocated in case.verdicts and reserved in case.verdicts
    assert allocated.message().startswith("tiny/amp_bf16/b1 peak memory regression: B 13.70 GiB, A 16.80 GiB (+22.6%")
    assert "save-baseline" not in allocated.message()  # no baseline is judged in an A/B


def test_a_peak_within_the_tolerance_is_unchanged(tmp_path):
    b = 10 * GIB
    campaign = campaign_of(tmp_path, 2, {"work": [int(b * 1.01)] * 2, "HEAD": [b] * 2}, None)
    (allocated,) = ab_cases(campaign)["amp_bf16"].memory  # no side read a reserved peak: no such verdict
    assert allocated.outcome == "unchanged" and allocated.tolerance == Tolerances().memory_rel
    assert not ab_cases(campaign)["amp_bf16"].failed


def test_peaks_that_vary_between_processes_raise_the_threshold_as_times_do():
    # Each side's peaks move by about 3 % from process to process: a 4 % growth is within twice that spread.
    a = [int(x * GIB) for x in (10.4, 10.1, 10.7)]
    b = [int(x * GIB) for x in (10.0, 9.7, 10.3)]
    verdict = judge_memory_ab("x", "peak memory", a, b, Tolerances())
    assert verdict.tolerance > 0.05 and verdict.outcome == "unchanged"
    # The same growth with peaks that repeat exactly is beyond the tolerance and exact.
    assert judge_memory_ab("x", "peak memory", [a[0]] * 3, [b[0]] * 3, Tolerances()).outcome == "regression"


def test_one_process_a_side_is_judged_by_the_tolerance_alone():
    tol = Tolerances()
    assert judge_memory_ab("x", "peak memory", [103 * GIB], [100 * GIB], tol).outcome == "regression"
    assert judge_memory_ab("x", "peak memory", [101 * GIB], [100 * GIB], tol).outcome == "unchanged"
    assert judge_memory_ab("x", "peak memory", [90 * GIB], [100 * GIB], tol).outcome == "improvement"


def test_a_side_that_read_no_peak_is_not_measured_and_neither_side_means_no_verdict(tmp_path):
    one = campaign_of(tmp_path, 2, {"work": [GIB, GIB], "HEAD": [None, None]}, None)
    (allocated,) = ab_cases(one)["amp_bf16"].memory
    assert allocated.outcome == "not measured" and not allocated.failed
    cpu = campaign_of(tmp_path, 2, {"work": [None, None], "HEAD": [None, None]}, None)
    assert ab_cases(cpu)["amp_bf16"].memory == ()


def test_the_suite_fails_the_case_and_its_summary_and_results_carry_the_memory_verdicts(tmp_path):
    a, b = int(16.8 * GIB), int(13.7 * GIB)
    campaign = campaign_of(tmp_path, 2, {"work": [a] * 2, "HEAD": [b] * 2}, {"work": [a] * 2, "HEAD": [a] * 2})
    runs = campaign.measurements()["amp_bf16"]
    case = PerfCase("h200", "tiny", "amp_bf16", 1)
    record = CaseRecord(case, runs.pooled, process_medians_ms=runs.process_medians_ms)
    Judging(StoredBaselines(tmp_path)).judge_against_revision(record, campaign)  # no baseline file: defaults
    assert record.outcome == "regression"
    payload = record.payload()
    outcomes = {m["metric"]: m["outcome"] for m in payload["memory_verdicts"]}
    assert outcomes == {"peak memory": "regression", "peak reserved": "unchanged"}
    summary = markdown_summary(
        {"arch": "h200", "environment": {"gpu_name": "H200", "torch": "2", "cuda": "12", "cudnn": "9", "commit": "c",
         "date": "d"}, "cases": [payload], "ratios": {}, "expectations": [], "sides": campaign.sides()}
    )  # fmt: skip
    table = summary[summary.index("Memory verdicts (reference: side B's processes):") :]
    assert "| tiny/amp_bf16/b1 | peak memory   |    13.7 |    16.8 |       22.6 |" in table, table
    # A/B words: the sides' labels once, then their short names; no baseline in sight.
    assert "\nA/B: A: working tree (abc) | B: HEAD (def)\n" in summary
    changes = summary[summary.index("Changes, side A against side B:") :]
    assert "- tiny/amp_bf16/b1 peak memory regression: B 13.70 GiB, A 16.80 GiB (+22.6%, threshold 2.0%" in changes
    assert "save-baseline" not in summary and "now " not in changes


def test_the_benchs_ab_table_shows_both_sides_peaks_and_the_verdict(tmp_path):
    a, b = int(16.8 * GIB), int(13.7 * GIB)
    campaign = campaign_of(tmp_path, 2, {"work": [a] * 2, "HEAD": [b] * 2}, None)
    row = ab_table(ab_cases(campaign), campaign.sources).loc["amp_bf16"]
    assert row["peak memory GiB"] == "13.70 -> 16.80" and row["peak memory verdict"] == "regression"


@pytest.mark.parametrize("peak", [float("nan"), float("inf"), -GIB, 1.5, "20G", True])
def test_a_worker_json_with_a_peak_that_is_no_count_of_bytes_is_one_line(peak):
    sent = json.loads(json.dumps(asdict(run_of("fast", [10.0] * 3, peak_reserved_bytes=peak))))
    with pytest.raises(UserError) as caught:
        result_from_dict(sent)
    assert "peak_reserved_bytes" in str(caught.value) and "report this as a bug" in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


@pytest.mark.parametrize(
    "candidate, reference, outcome",
    [
        ([float("nan")] * 2, [GIB] * 2, "not measured"),
        ([float("inf")] * 2, [GIB] * 2, "not measured"),
        ([-GIB] * 2, [GIB] * 2, "not measured"),
        ([20 * GIB] * 2, [0] * 2, "regression"),  # a peak where the other side had none grew beyond any tolerance
        ([0] * 2, [0] * 2, "unchanged"),
    ],
)
def test_peaks_that_are_no_byte_counts_judge_nothing_and_growth_from_zero_regresses(candidate, reference, outcome):
    assert judge_memory_ab("x", "peak memory", candidate, reference, Tolerances()).outcome == outcome
