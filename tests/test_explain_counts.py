"""Explaining a flagged case and gating on deterministic counts: the diff of rows, the gate, the baseline's
``counts`` (schema 4 and its upgrade), the A/B loop, the suite's verdicts, results file and summary.

Counts need no timing: each planted change here is a count, so nothing depends on a busy machine.
"""

import json
import re
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from meddpm.judge.ab import ab_cases
from meddpm.judge.baseline import SCHEMA, BaselineError, BaselineFile, CountRange, load_baseline, save_baseline
from meddpm.judge.counts import count_ranges, judge_counts
from meddpm.judge.explain import explain, explain_counts, flagged
from meddpm.measure.campaign.interleaved import Campaign, CampaignSettings
from meddpm.measure.campaign.protocol import Source
from meddpm.measure.campaign.result import ComboResult
from meddpm.measure.processes.campaign import ProcessCampaign, result_from_dict
from meddpm.measure.profiling.iteration import ProfileRow, iteration_counts
from meddpm.model.config import ModelConfig
from meddpm.report.explanation import counts_table, explain_table, explanation_lines, share_line
from meddpm.run.combos import COMBOS
from meddpm.suite.cases import CaseRecord, PerfCase
from meddpm.suite.records import results_payload
from meddpm.suite.session import SuiteRun
from meddpm.suite.summary import markdown_summary

CONV = ProfileRow("aten::convolution", "convolution", 10, 5.0)
ADD = ProfileRow("aten::add_", "elementwise", 20, 1.0)
PLANTED = ProfileRow("aten::special_erf", "other", 3, 0.2)
ROWS = [CONV, ADD]


def counts_of(rows: list[ProfileRow]) -> dict[str, int]:
    return iteration_counts(rows, bytes_allocated=1000, flops=10**9)


def result(combo: str, rows: list[ProfileRow], samples_ms: list[float] | None = None) -> ComboResult:
    """One process's result as a worker reports it, with a profiled iteration of ``rows``."""
    return ComboResult(
        "tiny", combo, 1, (16, 16, 16), "fp32", samples_ms or [100.0] * 3, [50.0], 0.1, 10**9, 0.02,
        profile_rows=list(rows), counts=counts_of(rows),
    )  # fmt: skip


# --- the explanation ------------------------------------------------------------------------
def test_a_planted_operator_is_the_first_row_and_appeared():
    rows = explain([[CONV, ADD, PLANTED]], [ROWS])
    by_name = [r for r in rows if r.level == "name"]
    assert by_name[0].name == "aten::special_erf" and by_name[0].change == "appeared"
    assert (by_name[0].count_a, by_name[0].count_b, by_name[0].ms_a, by_name[0].ms_b) == (3, 0, 0.2, 0.0)
    groups = {r.name: r for r in rows if r.level == "category"}
    assert groups["other"].count_a == 3 and groups["other"].count_b == 0 and "gemm" not in groups  # none ran
    assert rows[0].level == "module" and rows[0].name == "outside modules"  # rows without a scope: one roll-up
    first_group = next(r for r in rows if r.level == "category")
    assert first_group.name == "other"  # the group whose calls changed first
    vanished = [r for r in explain([ROWS], [[CONV, ADD, PLANTED]]) if r.level == "name"][0]
    assert vanished.change == "vanished"
    fields = {"level", "name", "category", "count_a", "count_b", "ms_a", "ms_b", "change", "module", "op", "label"}
    assert fields <= set(vanished.as_dict())


def test_rows_with_the_same_calls_sort_by_the_time_they_moved():
    slower_add = replace(ADD, ms=3.0)
    by_name = [r for r in explain([[CONV, slower_add]], [ROWS]) if r.level == "name"]
    assert [r.name for r in by_name] == ["aten::add_", "aten::convolution"] and by_name[0].change == "time"


def test_against_a_stored_baseline_the_rows_are_its_counts():
    stored = count_ranges([counts_of(ROWS)])
    rows = explain_counts(counts_of([CONV, ADD, PLANTED]), stored)
    assert (rows[0].name, rows[0].count_a, rows[0].count_b) in {("launches", 33, 30), ("launches.other", 3, 0)}
    assert {r.name for r in rows[:2]} == {"launches", "launches.other"}
    assert all(r.level == "count" and r.ms_a is None for r in rows)


def test_counts_against_a_stored_baseline_are_shown_as_counts_not_as_calls_and_time():
    stored = count_ranges([counts_of(ROWS)])
    rows = [r.as_dict() for r in explain_counts(counts_of([CONV, ADD, PLANTED]), stored)]
    text = "\n".join(explanation_lines(rows, markdown=False))
    assert "calls A" not in text and "ms A" not in text and "time" not in text, text
    table = counts_table(rows).set_index("count")
    assert list(table.columns) == ["A", "B", "change"]
    assert table.loc["launches"].tolist() == ["33", "30", "+3 (+10.00%)"]
    assert table.loc["launches.other"].tolist() == ["3", "0", "+3"]  # no relative change from 0
    markdown = "\n".join(explanation_lines(rows, markdown=True))
    assert "| launches       | 33  | 30  | +3 (+10.00%) |" in markdown, markdown


# --- the counts gate --------------------------------------------------------------------------
def test_the_gate_fails_a_planted_count_change_and_passes_equal_counts():
    stored = count_ranges([counts_of(ROWS), counts_of(ROWS)])
    equal = judge_counts("tiny/opt1/b1", [counts_of(ROWS)], stored)
    assert [(v.metric, v.outcome) for v in equal] == [("counts", "unchanged")] and not flagged(equal)
    moved = judge_counts("tiny/opt1/b1", [counts_of(ROWS), counts_of([CONV, ADD, PLANTED])], stored)
    assert {(v.metric, v.outcome) for v in moved} == {("launches", "regression"), ("other launches", "regression")}
    assert all(v.failed for v in moved) and flagged(moved)
    assert "tiny/opt1/b1 other launches regression: baseline 0 launches, now 3 launches" in moved[1].message()


def test_counts_within_the_measured_spread_pass_and_fewer_are_an_improvement():
    spread = {"launches": CountRange(100, 104)}
    assert judge_counts("c", [{"launches": 104}, {"launches": 100}], spread)[0].outcome == "unchanged"
    fewer = judge_counts("c", [{"launches": 90}], spread)
    assert [(v.outcome, v.baseline, v.now) for v in fewer] == [("improvement", 100, 90)] and not fewer[0].failed


def test_no_counts_on_either_side_is_not_measured_and_does_not_fail():
    assert judge_counts("c", [], {"launches": CountRange(1, 1)})[0].outcome == "not measured"
    assert judge_counts("c", [{"launches": 1}], {})[0].outcome == "not measured"


# --- the baseline's counts: schema 4, and the upgrade of version 3 ----------------------------
def stored_file(counts: dict[str, CountRange]) -> BaselineFile:
    from tests.test_suite_baseline import case  # the suite-baseline tests' stored case

    return BaselineFile(arch="h200", cases={"paper/opt1/b1": replace(case(), counts=counts)})


def test_counts_round_trip_in_the_current_schema(tmp_path):
    path = tmp_path / "h200.json"
    saved = stored_file({"launches": CountRange(6076, 6080), "bytes_allocated": CountRange(10, 10)})
    save_baseline(path, saved)
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA == "meddpm-baseline/5"
    assert data["cases"]["paper/opt1/b1"]["counts"]["launches"] == {"min": 6076, "max": 6080}
    assert load_baseline(path, "h200") == saved


def test_a_version_3_file_is_read_with_no_counts_and_written_back_as_the_current_one(tmp_path):
    path = tmp_path / "h200.json"
    save_baseline(path, stored_file({}))
    data = json.loads(path.read_text())
    assert "counts" not in data["cases"]["paper/opt1/b1"]  # nothing profiled: nothing stored
    data["schema"] = "meddpm-baseline/3"
    path.write_text(json.dumps(data))
    loaded = load_baseline(path, "h200")
    assert loaded.cases["paper/opt1/b1"].counts == {}
    save_baseline(path, loaded)
    assert json.loads(path.read_text())["schema"] == SCHEMA
    data["cases"]["paper/opt1/b1"]["counts"] = {"launches": {"min": 1, "max": 1}}
    path.write_text(json.dumps(data))
    message = "a malformed meddpm-baseline/3 file (cases['paper/opt1/b1'].counts, which meddpm-baseline/4 and later "
    message += "read); "
    with pytest.raises(BaselineError, match=re.escape(message + f'set "schema" to "{SCHEMA}"')):
        load_baseline(path, "h200")


@pytest.mark.parametrize(
    "spread, message",
    [
        ({"min": 5, "max": 4}, "counts['launches'].min = 5, which must be 0 or more, up to max"),
        ({"min": 1.5, "max": 4}, "counts['launches'].min = 1.5, which must be a whole number"),
        ({"min": 1}, "no 'max' in cases['paper/opt1/b1'].counts['launches']"),
    ],
)
def test_stored_counts_no_gate_can_use_are_refused(tmp_path, spread, message):
    path = tmp_path / "h200.json"
    save_baseline(path, stored_file({"launches": CountRange(1, 1)}))
    data = json.loads(path.read_text())
    data["cases"]["paper/opt1/b1"]["counts"]["launches"] = spread
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_baseline(path, "h200")


# --- measuring: every run carries its profiled iteration ---------------------------------------
def test_the_campaign_profiles_each_combo_once_after_its_rounds(micro, monkeypatch):
    import meddpm.measure.campaign.interleaved as interleaved

    seen: list[int] = []
    real = interleaved.profile_iteration

    def spy(step, device, flops=None):
        seen.append(len(campaign.results[step.combo.name].samples_ms))
        return real(step, device, flops)

    monkeypatch.setattr(interleaved, "profile_iteration", spy)
    settings = CampaignSettings(warmup=1, min_rounds=2, max_rounds=2)
    campaign = Campaign(micro, [COMBOS["baseline"]], torch.device("cpu"), settings=settings)
    results = campaign.run()
    assert seen == [2]  # after both rounds, once
    assert results["baseline"].counts["launches"] == sum(r.count for r in results["baseline"].profile_rows) > 0
    assert results["baseline"].counts["flops"] == results["baseline"].flops_per_iter
    assert "profile_rows" not in results["baseline"].as_dict() and "counts" in results["baseline"].as_dict()
    campaign.close()


def test_a_workers_rows_and_counts_survive_its_json():
    placed = replace(CONV, module="denoiser.out.1 (Conv3d)", op="aten::conv3d", label="convolution float32")
    sent = replace(result("opt1", [placed, ADD]), module_bytes={"denoiser.out.1 (Conv3d)": 4096})
    received = result_from_dict(json.loads(json.dumps(asdict(sent))))
    assert received.profile_rows == [placed, ADD] and received.counts == sent.counts
    assert received.module_bytes == {"denoiser.out.1 (Conv3d)": 4096}


# --- the A/B loop ---------------------------------------------------------------------------------
def ab_campaign(tmp_path: Path, planted: set[str]) -> ProcessCampaign:
    """Three processes a side; the working tree's combos in ``planted`` run one more operator."""
    tree, rev = Source("working tree (abc)", tmp_path, "abc"), Source("HEAD (def)", tmp_path, "def")
    campaign = ProcessCampaign(
        ModelConfig.preset("tiny"), ["baseline", "opt1"], torch.device("cpu"), batch_size=1,
        settings=CampaignSettings(energy=False), processes=3, sources=[tree, rev],
    )  # fmt: skip
    done: list[Source] = []

    def worker(source: Source, combos: list[str], settings: CampaignSettings) -> list[ComboResult]:
        done.append(source)
        ms = [100.0 * (1 + 0.0001 * len(done))] * 3  # time unchanged
        extra = [PLANTED] if source is tree else []
        return [result(c, ROWS + (extra if c in planted else []), ms) for c in combos]

    campaign._run_worker = worker  # type: ignore[method-assign]
    campaign.run()
    return campaign


def test_the_ab_loop_fails_a_count_change_with_unchanged_time_and_explains_it(tmp_path):
    cases = ab_cases(ab_campaign(tmp_path, {"opt1"}))
    assert cases["opt1"].time.outcome == "unchanged" and cases["opt1"].failed
    assert {v.metric for v in cases["opt1"].counts} == {"launches", "other launches"}
    first = [r for r in cases["opt1"].explain if r.level == "name"][0]
    assert (first.name, first.change, first.count_a, first.count_b) == ("aten::special_erf", "appeared", 3, 0)
    assert not cases["baseline"].failed and cases["baseline"].explain == ()
    assert [v.outcome for v in cases["baseline"].counts] == ["unchanged"]


def test_the_suite_ab_records_the_counts_verdicts_and_the_explanation(tmp_path, suite_options):
    run = SuiteRun(suite_options(compare_to="HEAD"), None, lambda line: None)
    campaign = ab_campaign(tmp_path, {"opt1"})
    case = PerfCase("cpu", "tiny", "opt1", 1)
    runs = campaign.measurements()["opt1"]
    record = CaseRecord(case, runs.pooled, process_medians_ms=runs.process_medians_ms, run_counts=runs.run_counts)
    run.measuring.records[case.id] = record
    verdicts = run.judging.judge_against_revision(record, campaign)
    assert record.outcome == "regression" and any(v.failed and v.metric == "launches" for v in verdicts)
    assert record.payload()["explain"][len(record.explain) - 1]["level"] == "name"
    # The nightly's alarm reads them from results.json to bisect a case red for its counts alone.
    assert {"metric": "launches", "outcome": "regression"}.items() <= record.payload()["counts_verdicts"][0].items()


# --- the suite against a stored baseline: gate, results file, summary -----------------------------
def stored_suite(tmp_path, suite_options, rows: list[ProfileRow]) -> tuple[SuiteRun, CaseRecord]:
    """A CPU session whose stored tiny/opt1 case was saved from ``ROWS``; this run profiled ``rows``."""
    saving = SuiteRun(suite_options(save_baseline=True), None, lambda line: None)
    case = PerfCase("cpu", "tiny", "opt1", 1)
    saved = result("opt1", ROWS, [10.0, 10.01, 10.02])
    saving.measuring.records[case.id] = CaseRecord(case, saved, run_counts=[saved.counts, saved.counts])
    assert saving.save(failed_tests=0).startswith("baseline saved")
    assert load_baseline(tmp_path / "cpu.json", "cpu").cases["tiny/opt1/b1"].counts == count_ranges([saved.counts])
    run = SuiteRun(suite_options(), None, lambda line: None)
    now = result("opt1", rows, [10.0, 10.01, 10.02])
    record = CaseRecord(case, now, run_counts=[now.counts])
    run.measuring.records[case.id] = record
    return run, record


def test_the_stored_spread_gates_a_planted_count_change_and_the_summary_shows_its_rows(tmp_path, suite_options):
    run, record = stored_suite(tmp_path, suite_options, [CONV, ADD, PLANTED])
    verdicts = run.judge(record.case)
    assert record.outcome == "regression" and [v.outcome for v in verdicts if v.metric == "time"] == ["unchanged"]
    payload = results_payload(run.measuring, [], "", on_gpu=False)
    (case,) = payload["cases"]
    assert case["counts"]["launches"] == 33
    assert {r["name"] for r in case["explain"][:2]} == {"launches", "launches.other"}
    assert {"name", "category", "count_a", "count_b", "ms_a", "ms_b"} <= set(case["explain"][0])
    summary = markdown_summary(payload)
    assert "**tiny/opt1/b1: counts moved: launches 30 -> 33**" in summary and "| launches.other " in summary
    assert "launches.communication" not in summary  # a count that did not move is not shown
    assert "- tiny/opt1/b1 other launches regression: baseline 0 launches, now 3 launches" in summary


def test_equal_counts_pass_and_leave_nothing_to_explain(tmp_path, suite_options):
    run, record = stored_suite(tmp_path, suite_options, ROWS)
    run.judge(record.case)
    assert (
        record.outcome == "ok"
        and record.explain == []
        and "What moved" not in markdown_summary(results_payload(run.measuring, [], "", on_gpu=False))
    )


def test_a_case_too_noisy_to_time_is_still_gated_on_its_counts(tmp_path, suite_options):
    run, record = stored_suite(tmp_path, suite_options, [CONV, ADD, PLANTED])
    assert any(v.failed for v in run.judge_counts(record.case)) and record.outcome == "regression"


def test_the_explanation_table_shows_only_the_rows_that_moved_and_their_share():
    rows = [r.as_dict() for r in explain([[CONV, ADD, PLANTED]], [ROWS])]
    table = explain_table(rows, n=2)
    assert list(table["row"]) == ["aten::special_erf"]  # rows without a label: their name; the unmoved left out
    assert (
        share_line(rows) == "1 of 3 rows moved beyond their processes' variation; they hold +0.20 ms of the "
        "iteration's +0.20 ms (100%)"
    )
    assert list(table.columns) == ["row", "where", "change", "calls A", "calls B", "ms A", "ms B"]


def test_bytes_allocated_may_move_within_the_slack_between_machine_starts_and_no_further():
    from meddpm.judge.counts import SLACK, judge_counts
    from meddpm.measure.profiling.iteration import BYTES_ALLOCATED, LAUNCHES

    stored = {LAUNCHES: CountRange(2137, 2137), BYTES_ALLOCATED: CountRange(67_220_573_184, 67_220_573_184)}
    # Two H200 starts of the same code: the bytes moved by 5.7 MB (cuDNN's workspaces), the launches not at all.
    other_start = [{LAUNCHES: 2137, BYTES_ALLOCATED: 67_214_907_904}]
    assert [v.outcome for v in judge_counts("amp_bf16", other_start, stored)] == ["unchanged"]
    one_more_tensor = [{LAUNCHES: 2137, BYTES_ALLOCATED: int(67_220_573_184 * (1 + 2 * SLACK[BYTES_ALLOCATED]))}]
    assert [v.outcome for v in judge_counts("amp_bf16", one_more_tensor, stored)] == ["regression"]
    assert [
        v.outcome for v in judge_counts("amp_bf16", [{LAUNCHES: 2138, BYTES_ALLOCATED: 67_220_573_184}], stored)
    ] == ["regression"]
