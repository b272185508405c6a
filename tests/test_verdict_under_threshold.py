"""The third verdict: a change of process medians that is significant but within the threshold.

Process medians are injected, so the outcome depends on the figures alone: 0.55 % slower with a tight
spread is "slower under threshold" (reported, not failed) in the message, the case's outcome, the JSON
payload, summary.md, the terminal table and the bench's A/B table; with a wide spread it is unchanged; 1 %
is a regression.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from meddpm.bench.processes import ab_table
from meddpm.judge.ab import AbCase
from meddpm.judge.baseline import Tolerances
from meddpm.judge.verdict import FASTER_UNDER_THRESHOLD, SLOWER_UNDER_THRESHOLD, judge_ab
from meddpm.measure.campaign.interleaved import ComboResult
from meddpm.measure.campaign.protocol import Source
from meddpm.report.tables import TERMINAL_TABLE, results_table
from meddpm.suite.cases import CaseRecord, PerfCase
from meddpm.suite.judging import Judging, StoredBaselines
from meddpm.suite.summary import markdown_summary

TIGHT = [100.0, 100.02, 99.98, 100.01, 99.99]  # 0.02 % between processes: threshold at its 0.6 % floor
WIDE = [100.0, 100.6, 99.4, 100.9, 99.1]  # 0.7 % between processes


def scaled(medians: list[float], factor: float) -> list[float]:
    return [m * factor for m in medians]


def test_a_significant_change_under_the_threshold_is_reported_and_does_not_fail():
    v = judge_ab("paper/fast/b1", scaled(TIGHT, 1.0055), TIGHT, Tolerances())
    assert v.outcome == SLOWER_UNDER_THRESHOLD and not v.failed
    assert v.tolerance == pytest.approx(0.006) and v.p_value < 1e-6
    assert "time slower under threshold: " in v.message()
    assert "slower by 0.55%, significant, under the 0.6% threshold: reported, not failed" in v.message()


def test_the_same_change_with_a_wide_spread_is_unchanged():
    v = judge_ab("paper/fast/b1", scaled(WIDE, 1.0055), WIDE, Tolerances())
    assert v.outcome == "unchanged" and v.p_value > 0.01


def test_a_change_beyond_the_threshold_is_still_a_regression():
    v = judge_ab("paper/fast/b1", scaled(TIGHT, 1.01), TIGHT, Tolerances())
    assert v.outcome == "regression" and v.failed


def test_a_significant_speed_up_under_the_threshold_is_its_mirror():
    v = judge_ab("paper/fast/b1", scaled(TIGHT, 1 / 1.0055), TIGHT, Tolerances())
    assert v.outcome == FASTER_UNDER_THRESHOLD and not v.failed
    assert "faster by 0.55%, significant, under the 0.6% threshold" in v.message()


def test_identical_sides_are_unchanged_not_a_significant_change():
    # Each side's medians identical: the test's answer is exact, but there is no change to report.
    assert judge_ab("paper/fast/b1", [100.0, 100.0], [100.0, 100.0], Tolerances()).outcome == "unchanged"


def _fake_ab_campaign(candidate: list[float], reference: list[float]) -> SimpleNamespace:
    """Just what the A/B verdicts read of a campaign: two sources and each one's process medians."""
    tree = Source("this tree (c1)", Path("."), "c1", name="this tree")
    rev = Source("HEAD (c0)", Path("."), "c0", name="HEAD")
    medians = {tree: candidate, rev: reference}
    return SimpleNamespace(
        sources=(tree, rev),
        config=SimpleNamespace(name="paper"),
        batch_size=1,
        measurements=lambda source: {
            "fast": SimpleNamespace(
                process_medians_ms=medians[source],
                run_counts=[],
                profile_rows=(),
                energy_blocks=[],
                energy_source=None,
                process_peaks=lambda kind: [],
            )
        },
    )


def test_the_suite_case_json_summary_and_terminal_show_it(tmp_path):
    campaign = _fake_ab_campaign(scaled(TIGHT, 1.0055), TIGHT)
    result = ComboResult("paper", "fast", 1, (128, 128, 128), "bf16", [100.5] * 3, [], 2.0, 2 * 10**13, 0.03)
    record = CaseRecord(PerfCase("h200", "paper", "fast", 1), result, process_medians_ms=scaled(TIGHT, 1.0055))
    Judging(StoredBaselines(tmp_path)).judge_against_revision(record, campaign)  # no baseline file: defaults
    assert record.outcome == SLOWER_UNDER_THRESHOLD
    payload = record.payload()
    assert payload["comparisons"][0]["outcome"] == SLOWER_UNDER_THRESHOLD
    assert "significant, under the 0.6% threshold" in payload["verdicts"][0]
    results = {
        "arch": "h200",
        "environment": {"gpu_name": "H200", "torch": "2", "cuda": "12", "cudnn": "9", "commit": "c", "date": "d"},
        "cases": [payload],
        "ratios": {},
        "expectations": [],
    }
    summary = markdown_summary(results)
    assert summary.count(SLOWER_UNDER_THRESHOLD) == 3  # the case table, the process-level table, the list
    assert "- paper/fast/b1 time slower under threshold: HEAD 100.0 ms, this tree 100.6 ms (ratio 1.0055" in summary
    terminal = results_table([payload], TERMINAL_TABLE).to_string(index=False)
    assert terminal.splitlines()[1].endswith(SLOWER_UNDER_THRESHOLD)


def test_the_bench_ab_table_shows_it():
    campaign = _fake_ab_campaign(TIGHT, TIGHT)
    cases = {"fast": AbCase(judge_ab("paper/fast/b1", scaled(TIGHT, 1.0055), TIGHT, Tolerances()), ())}
    assert ab_table(cases, campaign.sources).loc["fast", "verdict"] == SLOWER_UNDER_THRESHOLD
