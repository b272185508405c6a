"""Verdicts on synthetic samples: significance and tolerance both needed, messages that say what to do."""

from dataclasses import replace

import numpy as np
import pytest

from meddpm.judge.baseline import CaseBaseline, Expectation, Tolerances
from meddpm.judge.verdict import (
    judge_ceiling,
    judge_energy,
    judge_expectation,
    judge_figures,
    judge_samples,
    min_p_value,
)
from meddpm.measure.energy.counter import EnergyEstimate

TOL = Tolerances()  # 5 % time, 2 % memory, 10 % energy, alpha 0.01
rng = np.random.default_rng(0)


def samples(median: float, n: int = 10, spread: float = 0.005) -> list[float]:
    return list(median * (1 + spread * rng.standard_normal(n)))


def time_verdict(now, base):
    return judge_samples("paper/opt1/b1", "time", now, base, TOL.time_rel, TOL.alpha, "ms")


def test_identical_runs_are_unchanged():
    base = samples(230.0)
    v = time_verdict(list(base), base)
    assert v.outcome == "unchanged" and not v.failed and v.p_value > 0.4


def test_a_large_significant_slowdown_is_a_regression_with_a_useful_message():
    v = time_verdict(samples(1223.0), samples(230.0))
    assert v.outcome == "regression" and v.failed and v.p_value < 1e-3
    msg = v.message()
    for part in ("paper/opt1/b1", "time", "baseline 2", "now 12", "+4", "tolerance 5%", "p=", "--save-baseline"):
        assert part in msg, (part, msg)


def test_a_significant_but_small_change_is_within_tolerance():
    v = time_verdict(samples(236.0, spread=0.001), samples(230.0, spread=0.001))  # +2.6 %, p tiny
    assert v.p_value < 1e-3 and v.outcome == "unchanged"


def test_a_large_but_noisy_change_is_not_significant():
    base = [100.0, 300.0, 100.0, 300.0, 100.0]
    now = [110.0, 310.0, 110.0, 310.0, 105.0]  # median +5 %... and drowned in noise
    now = [x * 1.05 for x in now]
    v = time_verdict(now, base)
    assert v.outcome == "unchanged" and v.p_value > TOL.alpha


def test_too_few_samples_can_never_be_significant():
    assert min_p_value(3, 3) == pytest.approx(1 / 20) and min_p_value(5, 5) == pytest.approx(1 / 252)
    v = time_verdict(samples(400.0, n=3), samples(200.0, n=3))
    assert v.outcome == "underpowered" and not v.failed and "--perf-min-rounds" in v.message()


def test_improvements_are_reported_not_failed():
    v = time_verdict(samples(100.0), samples(230.0))
    assert v.outcome == "improvement" and not v.failed and "--save-baseline" in v.message()


def test_samples_are_needed_on_both_sides():
    v = judge_samples("c", "time", [], [1.0, 2.0], 0.05, 0.01, "ms")
    assert v.outcome == "not measured" and not v.failed and "not measured" in v.message()


@pytest.mark.parametrize(
    "now, outcome", [(18.7, "unchanged"), (19.5, "regression"), (17.0, "improvement"), (None, "not measured")]
)
def test_peak_memory_against_its_tolerance(now, outcome):
    v = judge_ceiling("paper/baseline/b1", "peak memory", now, 18.73, TOL.memory_rel, "GiB")
    assert v.outcome == outcome and v.failed is (outcome == "regression")


def test_expectations_hold_or_are_violated():
    e = Expectation("paper", "time", "opt1", "baseline", "paper", "ICPE '26", max=0.25)
    assert judge_expectation(e, 0.19).outcome == "holds"
    violated = judge_expectation(e, 1.0)
    assert violated.failed and "measured 1.000, expected time opt1/baseline <= 0.25 (paper)" in violated.message()
    assert judge_expectation(e, float("nan")).failed
    band = Expectation("paper", "time", "opt1", "baseline", "paper", "V100 has no TF32", max=1.1, min=0.9)
    assert [judge_expectation(band, r).outcome for r in (0.85, 1.0, 1.2)] == ["violated", "holds", "violated"]


def test_a_ratio_over_a_reference_of_0_cannot_be_judged_and_fails():
    # A lower bound on x/0 = inf used to "hold" whatever was measured.
    e = Expectation("paper", "ncu:tensor_pipe_pct", "opt1", "baseline", "paper", "ICPE '26", min=3.0)
    verdict = judge_figures(e, 20.6, 0.0)
    assert verdict.outcome == "cannot judge" and verdict.failed
    assert verdict.message() == (
        "paper ncu:tensor_pipe_pct opt1/baseline: cannot judge ncu:tensor_pipe_pct 3 <= opt1/baseline (paper): "
        'reference is 0 (measured 20.6 over 0); state the claim as an absolute bound ("reference": null) in the '
        "baseline file"
    )
    assert judge_expectation(e, float("inf")).failed
    assert judge_figures(e, 20.6, 1.4).outcome == "holds"


@pytest.mark.parametrize("share, outcome", [(20.6, "holds"), (7.81, "holds"), (0.0, "violated"), (7.0, "violated")])
def test_an_absolute_bound_judges_the_combos_own_figure(share, outcome):
    e = Expectation("paper", "ncu:tensor_pipe_pct", "opt1", None, "paper", "ICPE '26: H100 1.4% -> 7.81%", min=7.81)
    verdict = judge_figures(e, share, None)
    assert verdict.outcome == outcome and verdict.now == share
    assert "expected ncu:tensor_pipe_pct 7.81 <= opt1 (paper)" in verdict.message()


def stored_energy(j_per_iter: float | None, **fields) -> CaseBaseline:
    """A stored case with only what the energy verdict reads (energy by the windowed method unless overridden)."""
    energy = dict(energy_method="counter-window/1", energy_quantisation=0.008, energy_replicates_j=[j_per_iter] * 3)
    energy.update(fields)
    return CaseBaseline(
        "paper", "fast", 1, "measured", [49.0], 49.0, 0.5, 48.5, None, None, j_per_iter, [], 1.0, {}, **energy
    )


def now_energy(j_per_iter: float, spread: float = 0.005) -> EnergyEstimate:
    return EnergyEstimate(j_per_iter, 0.008, (j_per_iter * (1 - spread), j_per_iter, j_per_iter * (1 + spread)))


@pytest.mark.parametrize("now, outcome", [(31.0, "unchanged"), (34.5, "regression"), (26.0, "improvement")])
def test_energy_is_judged_where_the_resolution_supports_the_threshold(now, outcome):
    v = judge_energy("paper/fast/b1", now_energy(now), stored_energy(30.0), TOL.energy_rel)
    assert v.outcome == outcome and v.failed is (outcome == "regression")
    assert v.resolution == pytest.approx(0.016 + 0.01, rel=1e-6)  # both bounds, the spreads in quadrature
    assert "resolution 2.6%" in v.message()


def test_energy_too_coarse_for_the_threshold_is_not_judged_in_one_line():
    v = judge_energy("paper/fast/b1", now_energy(40.0, spread=0.06), stored_energy(30.0), TOL.energy_rel)
    assert v.outcome == "not judged" and not v.failed
    assert v.message() == (
        "paper/fast/b1 energy not judged: resolution 13.6% exceeds threshold 10% (baseline 30 J/iter, now 40 J/iter)"
    )


def test_an_old_baseline_of_single_iteration_reads_is_not_comparable():
    # What the H200 baseline held for fast: per-iteration reads of 0 or a whole step.
    old = stored_energy(30.21, energy_method="", energy_quantisation=None, energy_replicates_j=[])
    old = replace(old, energy_samples_j=[0.0, 63.359, 46.583, 0.0, 61.175, 0.0, 0.0, 58.035])
    v = judge_energy("paper/fast/b1", now_energy(24.0), old, TOL.energy_rel)
    assert v.outcome == "not comparable" and not v.failed
    assert v.message() == (
        "paper/fast/b1 energy not comparable: the baseline's 30.21 J/iter came from single-iteration reads "
        "of the energy counter (0 J for short iterations); re-save with --save-baseline"
    )


def test_energy_missing_on_either_side_is_not_measured():
    assert judge_energy("c", None, stored_energy(30.0), 0.1).outcome == "not measured"
    no_energy = stored_energy(None, energy_method="", energy_quantisation=None, energy_replicates_j=[])
    assert judge_energy("c", now_energy(30.0), no_energy, 0.1).outcome == "not measured"
