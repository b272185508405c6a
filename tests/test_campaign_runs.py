"""A combo's runs, one per measuring process, and the one protocol both kinds of campaign satisfy.

The figures pooled over the runs (rounds, peak memory, energy blocks, stop reason) are what the tables and
results files show; the process medians, the unit of a verdict, come from the runs themselves; the A/B loop
judges every combo of a two-source campaign the same way for the suite and the bench.
"""

from pathlib import Path
from typing import Protocol, runtime_checkable

import pytest
import torch

from meddpm import COMBOS
from meddpm.judge.ab import ab_verdicts
from meddpm.judge.baseline import CaseKey, Tolerances
from meddpm.measure.campaign.interleaved import Campaign
from meddpm.measure.campaign.protocol import MeasuringCampaign, Source
from meddpm.measure.campaign.result import ComboResult, ComboRuns
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.energy.counter import BlockEnergy, WindowEnergy
from meddpm.measure.processes.campaign import ProcessCampaign
from meddpm.model.config import ModelConfig


def run_of(combo: str, samples_ms: list[float], **fields) -> ComboResult:
    """One process's result of ``combo``, as a worker reports it."""
    return ComboResult("tiny", combo, 1, (16, 16, 16), "fp32", samples_ms, [50.0], 0.1, 10**9, 0.02, **fields)


def block(counter_j: float) -> BlockEnergy:
    """An energy block of two windows of 5 iterations, ``counter_j`` in all."""
    window = WindowEnergy(iterations=5, gpu_s=0.5, counter_j=counter_j / 2, interpolated_j=None, integrated_j=None)
    return BlockEnergy(windows=(window, window), period_s=0.1, quantisation=0.01, trace=())


@runtime_checkable
class CheckableCampaign(MeasuringCampaign, Protocol):
    """The protocol, checkable with isinstance (in the tests only: the code never asks a campaign's kind)."""


def test_runs_of_worker_processes_pool_their_figures_and_give_their_medians():
    runs = ComboRuns(
        [
            run_of("fast", [10.0, 11.0, 12.0], stop_reason="converged after 3 rounds", peak_allocated_bytes=100),
            run_of("fast", [20.0, 21.0, 22.0, 23.0], stop_reason="round limit of 4 reached", peak_reserved_bytes=7),
            run_of("fast", [30.0], peak_allocated_bytes=300, peak_reserved_bytes=5, energy_blocks=[block(60.0)]),
        ],
        in_workers=True,
    )
    assert runs.process_medians_ms == [11.0, 21.5, 30.0]
    assert runs.samples_ms == [10.0, 11.0, 12.0, 20.0, 21.0, 22.0, 23.0, 30.0]  # run after run
    assert (runs.peak_allocated_bytes, runs.peak_reserved_bytes) == (300, 7)  # each the largest a run knew
    assert runs.energy_blocks == [block(60.0)]
    assert runs.stop_reason == "3 processes; first: converged after 3 rounds"
    pooled = runs.pooled
    assert pooled.samples_ms == runs.samples_ms and pooled.stop_reason == runs.stop_reason
    assert pooled.stats.rounds == 8 and pooled.warmup_ms == [50.0] and pooled.setup_s == pytest.approx(0.1)
    assert pooled.energy_j_per_iter == pytest.approx(6.0)
    assert runs.runs[0].samples_ms == [10.0, 11.0, 12.0]  # pooling copies, it never merges into a run


def test_the_one_run_of_an_in_process_campaign_is_its_own_pooled_figure_and_has_no_process_medians():
    run = run_of("fast", [10.0, 12.0, 11.0], stop_reason="converged after 3 rounds", peak_allocated_bytes=None)
    runs = ComboRuns([run])
    assert runs.process_medians_ms == []  # its rounds, not processes, are the unit of its verdicts
    assert runs.stop_reason == "converged after 3 rounds" and runs.peak_allocated_bytes is None
    assert runs.pooled.as_dict() == run.as_dict()


def test_ratios_pair_rounds_inside_each_run_never_across_processes():
    combo = ComboRuns([run_of("opt2", [10.0, 20.0]), run_of("opt2", [30.0, 60.0, 90.0])], in_workers=True)
    reference = ComboRuns([run_of("baseline", [5.0, 10.0]), run_of("baseline", [10.0, 20.0])], in_workers=True)
    ratio = combo.ratio_to(reference)
    assert ratio.rounds == 4 and (ratio.min, ratio.max) == (2.0, 3.0)  # 2, 2 in the first; 3, 3 in the second


def test_an_in_process_campaign_satisfies_the_protocol_with_one_run_per_combo_and_live_steps(micro):
    settings = CampaignSettings(warmup=0, min_rounds=2, max_rounds=2)
    campaign = Campaign(micro, [COMBOS["baseline"], COMBOS["opt2"]], torch.device("cpu"), settings=settings)
    assert isinstance(campaign, CheckableCampaign)
    results = campaign.run()
    assert campaign.sources == () and set(campaign.steps) == {"baseline", "opt2"}
    runs = campaign.measurements()
    assert [r.runs for r in runs.values()] == [[results["baseline"]], [results["opt2"]]]
    assert not any(r.in_workers for r in runs.values())
    assert campaign.ratio("opt2", "baseline") == runs["opt2"].ratio_to(runs["baseline"])
    with pytest.raises(ValueError, match="no source of its own"):
        campaign.measurements(Source("HEAD", Path("."), ""))
    campaign.close()
    assert not campaign.steps


def two_source_campaign(tmp_path: Path, slower: dict[str, float]) -> ProcessCampaign:
    """A/B of baseline and opt2 in 3 processes a side; each planted worker's rounds read 100 ms (x ``slower``
    in the working tree), plus 0.1 % per process so that each side has a spread."""
    tree = Source("this tree (abc)", tmp_path, "abc", name="this tree")
    rev = Source("main (def)", tmp_path, "def", name="main")
    campaign = ProcessCampaign(
        ModelConfig.preset("tiny"),
        ["baseline", "opt2"],
        torch.device("cpu"),
        batch_size=1,
        settings=CampaignSettings(energy=False),
        processes=3,
        sources=[tree, rev],
    )
    started: list[Source] = []

    def worker(source: Source, combos: list[str], settings: CampaignSettings) -> list[ComboResult]:
        started.append(source)
        ms = 100.0 * (1 + 0.001 * len(started))
        return [run_of(c, [ms * (slower.get(c, 1.0) if source is tree else 1.0)] * 3) for c in combos]

    campaign._run_worker = worker  # type: ignore[method-assign]
    return campaign


def test_a_process_campaign_satisfies_the_protocol_and_keeps_each_sources_runs_in_process_order(tmp_path):
    campaign = two_source_campaign(tmp_path, {})
    assert isinstance(campaign, CheckableCampaign)
    results = campaign.run()
    tree, rev = campaign.sources
    assert campaign.steps == {}  # nothing lives in this process
    # A B B A A B: the tree ran 1st, 4th and 5th, the revision 2nd, 3rd and 6th.
    assert campaign.measurements(tree)["opt2"].process_medians_ms == pytest.approx([100.1, 100.4, 100.5])
    assert campaign.measurements(rev)["opt2"].process_medians_ms == pytest.approx([100.2, 100.3, 100.6])
    assert campaign.measurements() is campaign.measurements(tree)
    assert results["baseline"].stop_reason == "3 processes; first: " and len(results["baseline"].samples_ms) == 9
    assert list(results) == ["baseline", "opt2"]


def test_one_ab_loop_judges_every_combo_with_each_cases_tolerances(tmp_path):
    campaign = two_source_campaign(tmp_path, {"baseline": 1.10})
    campaign.run()
    asked: list[CaseKey] = []

    def tolerances(key: CaseKey) -> Tolerances:
        asked.append(key)
        return Tolerances()

    verdicts = ab_verdicts(campaign, tolerances)
    assert asked == [CaseKey("tiny", "baseline", 1), CaseKey("tiny", "opt2", 1)]
    assert {c: v.outcome for c, v in verdicts.items()} == {"baseline": "regression", "opt2": "unchanged"}
    # The sides by their short names, B then A, and no baseline advice: the run's legend defines the names.
    message = verdicts["baseline"].message()
    assert message.startswith("tiny/baseline/b1 time regression: main 100.3 ms, this tree 110.4 ms (ratio 1.0996")
    assert "(abc)" not in message and "save-baseline" not in message
    assert verdicts["baseline"].comparison.ratio == pytest.approx(1.10, rel=1e-3)  # and the drift of 0.1 % a process


def test_the_ab_loop_needs_two_sources(tmp_path):
    one = ProcessCampaign(
        ModelConfig.preset("tiny"),
        ["baseline"],
        torch.device("cpu"),
        batch_size=1,
        settings=CampaignSettings(),
        processes=2,
        sources=[Source("working tree (abc)", tmp_path, "abc")],
    )
    with pytest.raises(ValueError, match="needs two sources"):
        ab_verdicts(one)


def test_an_interrupted_ab_keeps_the_processes_that_finished_and_empty_runs_for_the_rest(tmp_path):
    from meddpm.bench.processes import process_medians

    campaign = two_source_campaign(tmp_path, {})
    planted = campaign._run_worker

    def interrupted_in_the_second(source: Source, combos: list[str], settings: CampaignSettings) -> list[ComboResult]:
        if source is campaign.sources[1]:
            raise KeyboardInterrupt
        return planted(source, combos, settings)

    campaign._run_worker = interrupted_in_the_second  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        campaign.run()
    assert [len(r.samples_ms) for r in campaign.results.values()] == [3, 3]
    assert process_medians(campaign) == {
        "this tree (abc)": {"baseline": [pytest.approx(100.1)], "opt2": [pytest.approx(100.1)]},
        "main (def)": {"baseline": [], "opt2": []},
    }
