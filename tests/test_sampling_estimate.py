"""A sample's time from a short run of steps: chunks timed until their ms/step agree, T x their median.

The sampler is a stand-in that counts the steps asked of it; the chunks' times are planted through the clock.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from meddpm.measure.campaign import sampling
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo

CPU = torch.device("cpu")


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


def planted(chunk_ms):
    """A clock that runs the call and reads the next of ``chunk_ms``; the calls it timed are counted."""
    times, calls = iter(chunk_ms), []

    def clock(fn, device):
        fn()
        calls.append(1)
        return next(times)

    return clock, calls


def test_chunks_that_agree_stop_the_short_run_and_give_t_times_their_median():
    clock, calls = planted([50.0, 50.2, 49.9, 99.0])
    result = sampling.estimate_sampling(ModelConfig.preset("tiny"), get_combo("baseline"), CPU, clock=clock)
    assert len(calls) == sampling.MIN_CHUNKS and result.timed_steps == 3 * sampling.CHUNK_STEPS
    assert CountingSampler.calls == [3, 5, 5, 5]  # the warm-up, then the chunks
    assert result.estimated and result.steps == 250
    assert result.ms_per_step == pytest.approx(50.0 / sampling.CHUNK_STEPS)
    assert result.seconds == pytest.approx(250 * 10.0 / 1e3)
    assert "2.50 s estimated from 15 timed steps in 3 chunks (10.00 ms/step)" in result.describe()


def test_chunks_that_never_agree_stop_at_the_most_chunks():
    clock, calls = planted(itertools.cycle([40.0, 60.0]))
    result = sampling.estimate_sampling(ModelConfig.preset("tiny"), get_combo("baseline"), CPU, clock=clock)
    assert len(calls) == sampling.MAX_CHUNKS == len(result.chunk_ms_per_step)
    assert result.ms_per_step == pytest.approx(10.0)


def test_a_diffusion_no_longer_than_the_short_run_is_timed_whole():
    config = dataclasses.replace(ModelConfig.preset("tiny"), timesteps=sampling.CHUNK_STEPS * sampling.MIN_CHUNKS)
    clock, calls = planted([1.0])
    result = sampling.estimate_sampling(config, get_combo("baseline"), CPU, clock=clock)
    assert calls == [] and not result.estimated and result.timed_steps == result.steps == 15
    assert CountingSampler.calls == [3, None]  # the warm-up, then every step
    assert "for 15 steps" in result.describe()


@pytest.mark.parametrize("chunks, agree", [([10.0, 10.05, 9.98], True), ([10.0, 10.2, 9.9], False)])
def test_chunks_agree_within_a_percent_of_their_median(chunks, agree):
    assert sampling.chunks_agree(chunks) is agree
