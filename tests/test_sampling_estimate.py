"""A sample's time from a short run: pairs of a short and a longer call, timed until their ms per step agree;
T x that plus what a call costs once.

The sampler is a stand-in that counts the steps asked of it; the calls' times are planted through the clock.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from meddpm.measure.campaign import sampling
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo

CPU = torch.device("cpu")
SHORT, LONG = sampling.SHORT_STEPS, sampling.LONG_STEPS


class CountingSampler:
    """Records the steps of each call, as :class:`meddpm.run.sampling.Sampler` would run them."""

    calls: list[int | None] = []

    def __init__(self, config, combo, device):
        CountingSampler.calls = []

    def __call__(self, steps=None):
        CountingSampler.calls.append(steps)


@pytest.fixture(autouse=True)
def counting_sampler(monkeypatch):
    monkeypatch.setattr(sampling, "Sampler", CountingSampler)


def planted(ms_per_step, call_ms=8.0, full_ms=None):
    """A clock reading ``call_ms`` + steps x the next of ``ms_per_step`` (one value a pair), and ``full_ms`` for a
    call of every step; counts its calls."""
    per_step, calls = iter(ms_per_step), []

    def clock(fn, device):
        fn()
        steps = CountingSampler.calls[-1]
        calls.append(steps)
        if steps is None:
            return full_ms
        if steps == SHORT:
            clock.step_ms = next(per_step)
        return call_ms + steps * clock.step_ms

    return clock, calls


def estimate(clock, timesteps=250, limit_s=None):
    config = dataclasses.replace(ModelConfig.preset("tiny"), timesteps=timesteps)
    return sampling.estimate_sampling(config, get_combo("baseline"), CPU, clock=clock, limit_s=limit_s)


def test_pairs_that_agree_stop_the_run_and_the_calls_own_cost_is_counted_once():
    clock, calls = planted([20.0, 20.1, 19.95, 40.0])
    result = estimate(clock)
    assert sampling.MIN_PAIRS == 2  # two pairs within a percent of each other end the run
    assert calls == [SHORT, LONG] * 2
    assert CountingSampler.calls[0] == sampling.EAGER_WARMUP_STEPS == 1  # the warm-up first
    assert result.estimated and result.timed_steps == 2 * (SHORT + LONG)
    assert result.call_ms == pytest.approx(8.0)  # a per-call cost spread over 6-step calls would read 21.3 ms/step
    assert result.seconds == pytest.approx((8.0 + 250 * 20.05) / 1e3)
    line = "5.02 s estimated from 14 timed steps in 2 pairs of calls (20.05 ms/step, 8.0 ms a call)"
    assert line in result.describe()


def test_a_compiled_combo_warms_up_over_two_calls_an_eager_one_over_one():
    assert sampling.warmup_steps_for(get_combo("fast")) == 2
    assert sampling.warmup_steps_for(get_combo("amp_bf16")) == 1


def test_pairs_that_never_agree_stop_at_the_most_pairs():
    clock, calls = planted([18.0, 22.0] * sampling.MAX_PAIRS)
    result = estimate(clock)
    assert len(calls) == 2 * sampling.MAX_PAIRS and len(result.pair_ms_per_step) == sampling.MAX_PAIRS
    assert float(sorted(result.pair_ms_per_step)[4]) == pytest.approx(18.0)


@pytest.mark.parametrize("limit_s", [5.0, 5.2], ids=["estimate over the limit", "the slowest pair over it"])
def test_pairs_that_never_agree_across_the_limit_are_confirmed_by_the_whole_sample(limit_s):
    # Ten pairs of 18 and 22 ms a step: 250 x their median 20 ms + 8 ms = 5.008 s estimated; the slowest, 5.508 s.
    clock, calls = planted([18.0, 22.0] * sampling.MAX_PAIRS, full_ms=4400.0)
    result = estimate(clock, limit_s=limit_s)
    assert calls == [SHORT, LONG] * sampling.MAX_PAIRS + [None]  # the same warm sampler, every step, once
    assert not result.estimated and result.seconds == pytest.approx(4.4) and result.timed_steps == 250
    assert result.replaced_estimate_s == pytest.approx(5.008) and len(result.pair_ms_per_step) == sampling.MAX_PAIRS
    line = "4.40 s for 250 steps (17.60 ms/step), timed whole: estimated at 5.01 s from 10 pairs of calls that never"
    assert line in result.describe()


@pytest.mark.parametrize(
    "pairs, limit_s",
    [([18.0, 22.0] * sampling.MAX_PAIRS, 5.6), ([20.0, 20.1], 4.5)],
    ids=["never agreed, the slowest under the limit", "agreed, over the limit"],
)
def test_an_estimate_whose_slowest_pair_is_under_its_limit_or_whose_pairs_agreed_stands(pairs, limit_s):
    clock, calls = planted(pairs, full_ms=1.0)
    result = estimate(clock, limit_s=limit_s)
    assert None not in calls and result.estimated and result.replaced_estimate_s == 0.0


def test_a_diffusion_no_longer_than_the_short_run_is_timed_whole():
    clock, calls = planted([1.0])
    steps = (SHORT + LONG) * sampling.MIN_PAIRS
    result = estimate(clock, timesteps=steps)
    assert calls == [] and not result.estimated and result.timed_steps == result.steps == steps
    assert CountingSampler.calls == [1, None]  # the warm-up, then every step
    assert f"for {steps} steps" in result.describe()


def test_pairs_whose_steps_read_no_time_fall_back_to_timing_the_whole_sample():
    clock, calls = planted([-3.0, 0.0, -1.0] * sampling.MAX_PAIRS)
    result = estimate(clock)
    assert len(calls) == 2 * sampling.MAX_PAIRS and CountingSampler.calls[-1] is None  # then every step, timed
    assert not result.estimated and result.seconds >= 0 and result.timed_steps == result.steps == 250


@pytest.mark.parametrize(
    "pairs, agree", [([10.0, 10.05, 9.98], True), ([10.0, 10.2, 9.9], False), ([-1.0, 0.0, 1.0], False)]
)
def test_pairs_agree_within_a_percent_of_a_positive_median(pairs, agree):
    assert sampling.pairs_agree(pairs) is agree
