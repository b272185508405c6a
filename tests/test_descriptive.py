"""Descriptive statistics of a case's rounds: quartiles and spread, and the median's standard error."""

import numpy as np
import pytest

from meddpm.measure.statistics.descriptive import Stats, median_rel_se


def test_stats_of_samples():
    s = Stats.from_samples([10, 11, 12, 13, 100])
    assert (s.median, s.min, s.max, s.rounds) == (12, 10, 100, 5)
    assert (s.q1, s.q3, s.iqr) == (11, 13, 2)
    assert s.rel_iqr == pytest.approx(2 / 12)
    assert s.as_dict()["iqr"] == 2
    with pytest.raises(ValueError):
        Stats.from_samples([])


@pytest.mark.parametrize("r", [0.0, 0.6])
def test_the_medians_standard_error_matches_the_spread_of_medians(r):
    # 300 series of 400 rounds, 1 % noise, each round carrying r of the last one's deviation (AR(1);
    # `fast`'s rounds correlate so, docs/statistics.md): the estimate from one series is what the medians of many
    # independent series actually spread by. Counting correlated rounds as independent would be
    # half that at r = 0.6.
    rng = np.random.default_rng(1)
    series = np.empty((300, 400))
    series[:, 0] = rng.standard_normal(300)
    for i in range(1, 400):
        series[:, i] = r * series[:, i - 1] + np.sqrt(1 - r * r) * rng.standard_normal(300)
    rounds = 100 * (1 + 0.01 * series)
    actual = np.std(np.median(rounds, axis=1)) / 100
    estimates = [median_rel_se(s) for s in rounds]
    assert np.median(estimates) == pytest.approx(actual, rel=0.2)


def test_the_medians_standard_error_needs_three_rounds():
    assert median_rel_se([1.0, 2.0]) == float("inf") and median_rel_se([5.0] * 10) == 0.0
