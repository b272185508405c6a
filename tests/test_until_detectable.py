"""Processes where the noise is, and energy on both sides of an A/B.

With ``--perf-until-detectable`` / ``--until-detectable``, an A/B combo stops once its A/B could flag a slowdown
that small, from two processes a side on; the noisy combos get the rest of ``--perf-processes``. Each side's
first process measures energy, and the A/B judges one side's joules per iteration against the other's; side B's
first takes the last good run's instead where side A's agrees with it.
Timings and joules are planted in the workers: nothing here reads a clock.
"""

from __future__ import annotations

import dataclasses
import datetime
import math

import pytest
import torch
from test_campaign_runs import block, run_of

from meddpm.errors import UserError
from meddpm.history.last_good_run import LastGood
from meddpm.judge.ab import ab_cases
from meddpm.judge.baseline import Tolerances
from meddpm.judge.verdict import judge_ab
from meddpm.measure.campaign.inputs import detectable_target
from meddpm.measure.campaign.protocol import Source
from meddpm.measure.campaign.result import CarriedEnergy, ComboResult
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.processes.campaign import ProcessCampaign
from meddpm.measure.processes.sides import OtherSide
from meddpm.measure.statistics.compare import detectable_change
from meddpm.model.config import ModelConfig
from meddpm.suite.cases import CaseRecord, PerfCase
from meddpm.suite.judging import Judging, StoredBaselines
from meddpm.suite.measuring import Measuring
from meddpm.suite.summary import markdown_summary

# Each process's median moves by this share a process, up and down: a quiet combo and a noisy one.
SPREAD = {"baseline": 0.0002, "fast": 0.006}


def campaign_of(tmp_path, processes: int, until: float | None, joules: dict[str, float] | None = None):
    """An A/B of baseline and fast whose planted workers record which combos each process measured."""
    tree, rev = Source("working tree (abc)", tmp_path, "abc"), Source("HEAD (def)", tmp_path, "def")
    campaign = ProcessCampaign(
        ModelConfig.preset("tiny"),
        ["baseline", "fast"],
        torch.device("cpu"),
        batch_size=1,
        settings=CampaignSettings(energy=True),
        processes=processes,
        sources=[tree, rev],
        until_detectable=until,
    )
    asked: list[tuple[str, tuple[str, ...], bool]] = []

    def worker(source: Source, combos: list[str], settings: CampaignSettings) -> list[ComboResult]:
        asked.append((source.label[:4], tuple(combos), settings.energy))
        sign = 1 if len(asked) % 3 else -1  # +, +, -, +, +, -: a spread on each side
        results = []
        for c in combos:
            ms = 100.0 * (1 + sign * SPREAD[c])
            blocks = [block(joules[source.label[:4]])] if settings.energy and joules else []
            results.append(run_of(c, [ms] * 3, energy_blocks=blocks))
        return results

    campaign._run_worker = worker  # type: ignore[method-assign]
    return campaign, asked


def test_a_quiet_combo_stops_at_two_processes_a_side_and_a_noisy_one_gets_the_rest(tmp_path):
    campaign, asked = campaign_of(tmp_path, processes=6, until=0.01)
    campaign.run()
    tree, rev = campaign.sources
    assert len(campaign.measurements(tree)["baseline"].runs) == 2 == len(campaign.measurements(rev)["baseline"].runs)
    assert len(campaign.measurements(tree)["fast"].runs) == 6 == len(campaign.measurements(rev)["fast"].runs)
    assert [combos for _, combos, _ in asked] == [("baseline", "fast")] * 4 + [("fast",)] * 8
    # A B B A A B ...: each side's first process alone measures energy.
    assert [(side, energy) for side, _, energy in asked[:4]] == [("work", True), ("HEAD", True), ("HEAD", False),
                                                                  ("work", False)]  # fmt: skip
    assert campaign.reached_detectable("baseline") and not campaign.reached_detectable("fast")


@pytest.mark.parametrize("first", [True, False])
def test_an_ab_profiles_each_sides_first_process_and_a_single_source_every_one(tmp_path, first):
    ab, _ = campaign_of(tmp_path, processes=3, until=None)
    assert ab.worker_settings(first).profile is first and ab.worker_settings(first).energy is first
    single = ProcessCampaign(
        ModelConfig.preset("tiny"), ["baseline"], torch.device("cpu"), batch_size=1,
        settings=CampaignSettings(energy=True), processes=3, sources=ab.sources[:1],
    )  # fmt: skip
    assert single.worker_settings(first).profile and single.worker_settings(first).energy is first
    single.settings = CampaignSettings(profile=False)  # the profiler switched off for the run: off everywhere
    assert not single.worker_settings(True).profile


def test_the_runs_first_process_alone_warms_the_card(tmp_path):
    campaign, _ = campaign_of(tmp_path, processes=2, until=None)
    planted, warmed = campaign._run_worker, []

    def worker(source, combos, settings):
        warmed.append(settings.preheat)
        results = planted(source, combos, settings)
        for result in results if warmed[-1] else []:
            result.preheat = {"start_c": 34, "end_c": 52, "seconds": 27.4, "settled": True}
        return results

    campaign._run_worker = worker  # type: ignore[method-assign]
    lines = []
    campaign.run(lambda p: lines.append(p.detail))
    assert warmed == [True, False, False, False]
    assert " s; card warmed 34 -> 52 °C in 27 s" in lines[0] and "warmed" not in "".join(lines[1:])


@pytest.mark.parametrize("preheat", [True, False])
def test_a_run_whose_rounds_judge_nothing_does_not_warm_the_card(tmp_path, preheat):
    ab, _ = campaign_of(tmp_path, processes=1, until=None)
    counts = ProcessCampaign(
        ModelConfig.preset("tiny"), ["baseline"], torch.device("cpu"), batch_size=1, settings=CampaignSettings(),
        processes=1, sources=ab.sources[:1], preheat=preheat,
    )  # fmt: skip
    assert counts.worker_settings(True).preheat is preheat  # a bisection's counts process asks for none


def test_without_a_target_every_combo_runs_in_every_process(tmp_path):
    campaign, asked = campaign_of(tmp_path, processes=3, until=None)
    campaign.run()
    assert [combos for _, combos, _ in asked] == [("baseline", "fast")] * 6


def test_the_stopping_rule_reads_the_detectable_change_the_verdict_reports():
    a, b = [100.0, 100.3, 99.8], [100.1, 99.9, 100.4]
    assert detectable_change(a, b) == pytest.approx(judge_ab("x", a, b, Tolerances()).detectable)
    assert detectable_change([100.0], b) == math.inf  # one process: no spread, nothing detectable yet


def test_the_ab_judges_each_sides_energy_from_its_first_process(tmp_path):
    campaign, _ = campaign_of(tmp_path, processes=2, until=None, joules={"work": 60.0, "HEAD": 50.0})
    campaign.run()
    cases = ab_cases(campaign)
    energy = cases["baseline"].energy
    assert energy is not None and energy.outcome == "regression" and energy.change == pytest.approx(0.2)
    assert energy in cases["baseline"].verdicts and cases["baseline"].failed
    assert "energy regression: B 5.000 J/iter, A 6.000 J/iter (+20.0%, threshold 10.0%" in energy.message()


def test_the_ab_has_no_energy_verdict_where_neither_side_measured_it(tmp_path):
    campaign, _ = campaign_of(tmp_path, processes=2, until=None)
    campaign.run()
    assert all(case.energy is None for case in ab_cases(campaign).values())


@pytest.mark.parametrize(
    "given, ab, message",
    [
        (0.01, None, "--perf-until-detectable stops an A/B's combos early; give --compare-to"),
        (1.5, "--compare-to", "must be a share between 0 and 1, e.g. 0.01 for 1 %, got 1.5"),
        (0.0, "--compare-to", "must be a share between 0 and 1"),
    ],
)
def test_a_bad_target_is_one_line(given, ab, message):
    with pytest.raises(UserError, match=message):
        detectable_target("--perf-until-detectable", given, ab)


def test_a_target_needs_two_sides(tmp_path):
    with pytest.raises(UserError, match="needs an A/B run"):
        ProcessCampaign(
            ModelConfig.preset("tiny"),
            ["baseline"],
            torch.device("cpu"),
            batch_size=1,
            settings=CampaignSettings(),
            processes=3,
            sources=[Source("working tree (abc)", tmp_path, "abc")],
            until_detectable=0.01,
        )


@pytest.mark.parametrize(
    "carried_energy, joules_b, measured_by",
    [(None, 50.0, "its first process"), ({"baseline": 50.0, "fast": 50.0}, 10.0, "run #7")],
)
def test_the_summary_lists_each_sides_energy_verdict_and_where_side_bs_came_from(
    tmp_path, carried_energy, joules_b, measured_by
):
    campaign, _ = campaign_of(tmp_path, processes=2, until=None, joules={"work": 52.0, "HEAD": joules_b})
    campaign.carried_energy = {c: carried(j) for c, j in (carried_energy or {}).items()}
    campaign.run()
    runs = campaign.measurements()["baseline"]
    case = PerfCase("h200", "tiny", "baseline", 1)
    record = CaseRecord(case, runs.pooled, process_medians_ms=runs.process_medians_ms)
    Judging(StoredBaselines(tmp_path)).judge_against_revision(record, campaign)  # no baseline file: defaults
    payload = record.payload()
    figures = payload["energy_verdict"]
    assert (figures["outcome"], figures["baseline"], figures["now"]) == ("unchanged", 5.0, 5.2)
    assert figures["reference_source"] == (None if carried_energy is None else "run #7")
    assert payload["energy_j_per_iter"] == 5.2  # side A's own, never a carried figure
    environment = {"gpu_name": "H200", "torch": "2", "cuda": "12", "cudnn": "9", "commit": "c", "date": "d"}
    sides = campaign.sides()
    summary = markdown_summary(
        {"arch": "h200", "environment": environment, "cases": [payload], "ratios": {}, "expectations": [],
         "sides": sides}
    )  # fmt: skip
    table = summary[summary.index("Energy verdicts (reference: side B's, as the column says):") :]
    row = next(line for line in table.splitlines() if line.startswith("| tiny/baseline/b1 |"))
    assert [cell.strip() for cell in row.split("|")[1:-1]] == [
        "tiny/baseline/b1", "5", "5.2", "4", "2", "10", "unchanged", measured_by,
    ]  # fmt: skip


def carried(joules: float, threshold: float = 0.10) -> CarriedEnergy:
    """Side B's energy as a planted last good run measured it: ``joules`` a block of 10 iterations."""
    return CarriedEnergy((block(joules),), "run #7", threshold)


def test_side_b_takes_the_last_good_runs_energy_where_side_as_agrees_and_measures_none(tmp_path):
    campaign, asked = campaign_of(tmp_path, processes=2, until=None, joules={"work": 50.5, "HEAD": 40.0})
    campaign.carried_energy = {"baseline": carried(50.0), "fast": carried(52.0)}
    lines = []
    campaign.run(lambda p: lines.append(p.detail))
    assert [(side, energy) for side, _, energy in asked] == [("work", True), ("HEAD", False), ("HEAD", False),
                                                              ("work", False)]  # fmt: skip
    assert "energy as run #7 measured it (A's first process within 5.0% of it)" in lines[1]
    assert "energy as" not in lines[0] + lines[2] + lines[3]
    energy = ab_cases(campaign)["baseline"].energy
    assert energy is not None and energy.outcome == "unchanged" and energy.change == pytest.approx(0.01)
    assert "energy unchanged: B as run #7 measured it 5.000 J/iter, A 5.050 J/iter (+1.0%" in energy.message()


@pytest.mark.parametrize(
    "carried_energy",
    [
        {"baseline": carried(50.0), "fast": carried(44.0)},  # fast: A's 50.5 J is 14.8 % above it, beyond 5 %
        {"baseline": carried(50.0)},  # fast's was not carried
        {"baseline": carried(50.0), "fast": carried(50.0, threshold=0.01)},  # A's 1 % over a threshold of 1 %
    ],
)
def test_side_b_measures_its_energy_again_unless_every_combo_agrees(tmp_path, carried_energy):
    campaign, asked = campaign_of(tmp_path, processes=2, until=None, joules={"work": 50.5, "HEAD": 40.0})
    campaign.carried_energy = carried_energy
    campaign.run()
    assert [energy for _, _, energy in asked] == [True, True, False, False]
    energy = ab_cases(campaign)["baseline"].energy
    assert energy is not None and energy.outcome == "regression"  # against side B's own 4.0 J/iter, as measured
    assert "as run #7" not in energy.message()


def test_carried_energy_agrees_within_half_its_threshold_at_a_resolution_under_it():
    assert not carried(50.0).disagreement(carried(52.4).estimate)  # +4.8 %
    assert carried(50.0).disagreement(carried(52.6).estimate)  # +5.2 %
    assert carried(50.0).disagreement(carried(47.4).estimate)  # -5.2 %
    assert carried(50.0).disagreement(None)
    coarse = CarriedEnergy((dataclasses.replace(block(50.0), quantisation=0.095),), "run #7", 0.10)
    assert coarse.disagreement(carried(50.0).estimate)  # resolution 9.5 % + 1 %: no verdict could judge it


def _last_good(uuid: str = "GPU-1") -> LastGood:
    """A last good run on card ``uuid`` that kept a block of 50 J over 10 iterations for baseline alone."""
    return LastGood(
        commit="a" * 40, run_id=7, started_at=datetime.datetime(2026, 11, 27, 2), arch="h200", kind="suite",
        processes=3, gpu_name="NVIDIA H200", gpu_uuid=uuid, driver="580.159.04", torch="2.11.0", cuda="13.0",
        cudnn="91900", python="3.12.3", environment={}, medians_ms={"tiny/baseline/b1": 100.0},
        energy_blocks={"tiny/baseline/b1": (block(50.0),)},
    )  # fmt: skip


@pytest.mark.parametrize(
    "overrides, carried_combos, line",
    [
        ({}, ["baseline"], None),  # fast kept no energy in that run: its side B measures its own
        ({"other": OtherSide(env=(("OMP_NUM_THREADS", "1"),))}, [], None),  # side B runs under other variables
        ({"last_good": _last_good("GPU-2")}, [], "not on the last good suite run on h200, #7 of 2026-11-27 02:00 UTC"),
        ({"last_good": None}, [], None),  # an A/B against a revision given by hand
    ],
)
def test_the_suite_carries_the_last_good_runs_energy_on_its_card_to_a_plain_side_b(
    suite_options, monkeypatch, overrides, carried_combos, line
):
    here = {"gpu_uuid": "GPU-1", "gpu_name": "NVIDIA H200", "driver": "580.159.04", "torch": "2.11.0", "cuda": "13.0"}
    monkeypatch.setattr("meddpm.suite.measuring.environment", lambda device: here)
    options = dataclasses.replace(suite_options(compare_to="a" * 40, processes=3), last_good=_last_good())
    lines: list[str] = []
    tolerances = {"tiny/baseline/b1": Tolerances(energy_rel=0.2)}
    measuring = Measuring(
        dataclasses.replace(options, **overrides), "h200", lines.append,
        lambda arch, key: tolerances.get(str(key), Tolerances()),
    )  # fmt: skip
    gpu, settings = torch.device("cuda", 0), CampaignSettings(energy=True)
    carried = measuring._carried_energy("tiny", ["baseline", "fast"], 1, gpu, settings)
    assert sorted(carried) == carried_combos
    assert all(c.source == "run #7" and c.threshold == 0.2 for c in carried.values())
    assert (line is None and not lines) or (
        len(lines) == 1 and line in lines[0] and "card GPU-1 -> GPU-1" not in lines[0]
    )
    assert measuring._carried_energy("tiny", ["baseline"], 1, torch.device("cpu"), settings) == {}
    assert measuring._carried_energy("tiny", ["baseline"], 1, gpu, CampaignSettings(energy=False)) == {}


@pytest.mark.parametrize(
    "joules_a, carried_energy, why",
    [
        (None, {"baseline": 50.0, "fast": 50.0}, "baseline: side A measured none"),
        (56.0, {"baseline": 50.0, "fast": 50.0}, "baseline: side A read +12.0% of run #7's, beyond 5.0%"),
        (50.5, {"baseline": 50.0}, "fast: none was carried"),
    ],
)
def test_a_side_b_that_measures_its_energy_again_says_why(tmp_path, joules_a, carried_energy, why):
    campaign, asked = campaign_of(tmp_path, processes=2, until=None, joules={"work": joules_a or 0.0, "HEAD": 40.0})
    if joules_a is None:  # side A's first process measured no energy (NVML without a counter, say)
        planted = campaign._run_worker
        campaign._run_worker = lambda source, combos, settings: [  # type: ignore[method-assign]
            dataclasses.replace(r, energy_blocks=[] if source is campaign.sources[0] else r.energy_blocks)
            for r in planted(source, combos, settings)
        ]
    campaign.carried_energy = {c: carried(j) for c, j in carried_energy.items()}
    lines = []
    campaign.run(lambda p: lines.append(p.detail))
    assert [energy for _, _, energy in asked] == [True, True, False, False]
    assert f"; energy measured again ({why})" in lines[1]


def test_with_one_process_a_side_b_carries_and_side_a_keeps_its_own(tmp_path):
    campaign, asked = campaign_of(tmp_path, processes=1, until=None, joules={"work": 50.5, "HEAD": 40.0})
    campaign.carried_energy = {"baseline": carried(50.0), "fast": carried(50.0)}
    campaign.run()
    assert [energy for _, _, energy in asked] == [True, False]
    tree, rev = campaign.sources
    a, b = campaign.measurements(tree)["baseline"], campaign.measurements(rev)["baseline"]
    assert a.carried_energy is None and a.energy_source is None and a.energy is not None
    assert a.energy.j_per_iter == pytest.approx(5.05)
    assert b.energy_blocks == [] and b.energy_source == "run #7" and b.energy is not None
    assert b.energy.j_per_iter == pytest.approx(5.0)  # the carried figure, though no block was measured
    assert b.pooled.energy is None  # a pooled result holds what its runs measured, never a carried block
