"""The interleaved campaign on the CPU: stop rules, paired ratios, settings validation."""

import pytest
import torch

from meddpm import COMBOS, UserError
from meddpm.bench import Campaign, CampaignSettings


def run(micro, **settings) -> Campaign:
    campaign = Campaign(
        micro,
        [COMBOS["baseline"], COMBOS["opt2"]],
        torch.device("cpu"),
        settings=CampaignSettings(warmup=1, **settings),
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
    ],
)
def test_bad_settings_are_user_errors(settings, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        CampaignSettings(**settings)
