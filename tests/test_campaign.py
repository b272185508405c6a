"""The interleaved campaign on the CPU: stop rules, paired ratios, settings validation, memory."""

import numpy as np
import pytest
import torch

from meddpm import COMBOS, TrainStep, UserError
from meddpm.measure.campaign.inputs import CPU_DEFAULT_COMBOS
from meddpm.measure.campaign.interleaved import Campaign
from meddpm.measure.campaign.settings import CampaignSettings


def run(micro, **settings) -> Campaign:
    campaign = Campaign(
        micro,
        [COMBOS["baseline"], COMBOS["opt2"]],
        torch.device("cpu"),
        settings=CampaignSettings(**{"warmup": 1, **settings}),
    )
    campaign.run()
    return campaign


def test_rounds_stop_at_the_limit_and_pair_the_combos(micro):
    campaign = run(micro, min_rounds=3, max_rounds=3, rel_iqr_target=1e-9)
    base, opt2 = campaign.results["baseline"], campaign.results["opt2"]
    assert len(base.samples_ms) == len(opt2.samples_ms) == 3 and len(base.warmup_ms) == 1
    assert base.stop_reason == "round limit of 3 reached" and not base.reliable
    ratio = campaign.ratio("opt2", "baseline")
    assert ratio.rounds == 3 and ratio.median == pytest.approx(
        sorted(o / b for o, b in zip(opt2.samples_ms, base.samples_ms))[1]
    )
    assert base.energy_note == "not a CUDA device" and base.peak_allocated_bytes is None
    campaign.close()
    assert not campaign.steps


@pytest.mark.parametrize("profile", [True, False])
def test_the_profiled_iteration_runs_only_where_the_settings_ask(micro, profile):
    campaign = run(micro, min_rounds=2, max_rounds=2, profile=profile)
    for result in campaign.results.values():
        assert bool(result.counts) is profile and bool(result.profile_rows) is profile
        assert ("profiling" in result.phase_s) is profile


def test_rounds_stop_once_quiet_enough(micro):
    campaign = run(micro, min_rounds=2, max_rounds=50, rel_iqr_target=10.0)
    assert campaign.results["opt2"].stop_reason == "converged after 2 rounds"
    assert all(r.reliable for r in campaign.results.values())


def test_rounds_stop_when_the_budget_is_spent(micro):
    campaign = run(micro, min_rounds=2, max_rounds=50, rel_iqr_target=1e-9, budget_s=1e-6)
    assert campaign.results["baseline"].stop_reason.startswith("time budget of 0 s spent after 2 rounds")


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(min_rounds=0), "rounds must satisfy 1 <= min (0) <= max (30)"),
        (dict(min_rounds=5, max_rounds=4), "rounds must satisfy 1 <= min (5) <= max (4)"),
        (dict(rel_iqr_target=0), "the relative-IQR target must be above 0"),
        (dict(budget_s=-1), "the time budget must be above 0 s"),
        (dict(warmup=-1), "warm-up iterations must be 0 or more"),
        (dict(median_precision=-0.1), "the median precision must be 0 (off) or between 0 and 1, got -0.1"),
    ],
)
def test_bad_settings_are_user_errors(settings, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        CampaignSettings(**settings)


def test_fixed_rounds_run_to_the_end_and_never_claim_convergence(micro):
    # min = max: the stop rules never ran, even where the spread would have met the target.
    campaign = run(micro, min_rounds=2, max_rounds=2, rel_iqr_target=10.0)
    assert campaign.results["baseline"].stop_reason == "round limit of 2 reached"


def scripted_rounds(monkeypatch, times_ms: dict[str, list[float]]) -> None:
    """Each combo's rounds take the given times, in turn (the step itself does not run)."""
    feed = {name: iter(times) for name, times in times_ms.items()}
    monkeypatch.setattr(
        "meddpm.measure.campaign.interleaved.time_synchronized", lambda step, *_, **__: next(feed[step.combo.name])
    )


def test_a_combo_leaves_the_rotation_once_its_median_is_precise(micro, monkeypatch):
    # baseline: rounds of 500 ms within 0.01 %, so its median is precise after the 1 s of timing the
    # rule first asks for; opt2: +-3 % in alternation, whose median's error stays near 0.8 % in 40 rounds.
    rng = np.random.default_rng(0)
    quiet = list(500 * (1 + 1e-4 * rng.standard_normal(100)))
    noisy = [100 * (1.03 if i % 2 else 0.97) for i in range(100)]
    scripted_rounds(monkeypatch, {"baseline": quiet, "opt2": noisy})
    campaign = run(micro, min_rounds=2, max_rounds=40, rel_iqr_target=10.0, median_precision=0.002)
    base, opt2 = campaign.results["baseline"], campaign.results["opt2"]
    assert base.stop_reason == "converged after 3 rounds" and len(base.samples_ms) == 3
    assert base.median_rel_se <= 0.002
    assert opt2.stop_reason == "round limit of 40 reached" and len(opt2.samples_ms) == 40
    assert opt2.median_rel_se > 0.002
    assert campaign.ratio("opt2", "baseline").rounds == 3  # paired while both were timed


def test_without_a_median_precision_the_combos_stop_together(micro, monkeypatch):
    scripted_rounds(
        monkeypatch, {"baseline": [500.0] * 10, "opt2": [100 * (1.03 if i % 2 else 0.97) for i in range(10)]}
    )
    campaign = run(micro, min_rounds=2, max_rounds=10, rel_iqr_target=10.0)
    assert [len(r.samples_ms) for r in campaign.results.values()] == [2, 2]
    assert {r.stop_reason for r in campaign.results.values()} == {"converged after 2 rounds"}


def test_a_step_is_timed_only_once_its_cuda_graphs_are_recorded(micro, monkeypatch):
    monkeypatch.setattr(TrainStep, "calls_before_replay", property(lambda step: 3))
    for asked, ran in [(1, 3), (5, 5)]:
        campaign = run(micro, warmup=asked, min_rounds=2, max_rounds=2)
        assert [len(r.warmup_ms) for r in campaign.results.values()] == [ran, ran]


def test_cpu_out_of_memory_is_a_user_error(micro, monkeypatch):
    def out_of_memory(*_):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 21474836480 bytes. Error code 12 (Cannot allocate memory)"
        )

    monkeypatch.setattr("meddpm.measure.campaign.interleaved.time_once", out_of_memory)
    campaign = Campaign(micro, [COMBOS["baseline"]], torch.device("cpu"), settings=CampaignSettings(warmup=1))
    message = "out of CPU (RAM) memory in combo 'baseline' on preset 'micro' at batch size 1; try a smaller"
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        campaign.run()
    assert not campaign.steps


def test_other_runtime_errors_are_not_taken_for_out_of_memory(micro, monkeypatch):
    def broken(*_):
        raise RuntimeError("a bug, not memory")

    monkeypatch.setattr("meddpm.measure.campaign.interleaved.time_once", broken)
    campaign = Campaign(micro, [COMBOS["baseline"]], torch.device("cpu"), settings=CampaignSettings(warmup=1))
    with pytest.raises(RuntimeError, match="a bug, not memory"):
        campaign.run()


def test_without_combos_the_suite_runs_the_campaigns_cpu_default(suite_options):
    # The suite takes the bench's quick combos on the CPU and every combo on a GPU; --combos wins on both.
    assert suite_options().combos_for(on_gpu=False) == CPU_DEFAULT_COMBOS
    assert suite_options().combos_for(on_gpu=True) == tuple(COMBOS)
    assert suite_options(combos=("fast",)).combos_for(on_gpu=False) == ("fast",)
