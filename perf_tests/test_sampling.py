"""Sampling: one full reverse diffusion (all T steps) of one volume, against a time budget.

Every step is the same forward pass, so the sample's time is estimated from a short run of steps timed until
their ms/step agree; ``--perf-full-sample`` times all T steps instead.

Budgets are per preset, combo and architecture, stored in the architecture's baseline file
(``sampling``): measured ones sit a time tolerance above the full samples they rest on, targets
are goals (docs/baselines.md). Cases without a budget skip with the reason and are listed as not
guarded in the run's summary.
"""

import math

import pytest

from meddpm.suite.cases import PerfCase
from meddpm.suite.session import SuiteRun


def test_full_sample_within_budget(perf_case: PerfCase, perf_suite: SuiteRun):
    budget = perf_suite.sampling_budget(perf_case)
    if budget is None:
        perf_suite.judge_sampling(perf_case, None)  # listed as not guarded in the summary
        pytest.skip(
            f"no sampling budget for {perf_case.combo} ({perf_case.preset}, batch {perf_case.batch_size}) "
            f"on {perf_case.arch}"
        )
    result = perf_suite.sample(perf_case, budget.budget_s)
    perf_suite.write_line(f"meddpm: sample {perf_case.id}: {result.describe()}")
    perf_suite.judge_sampling(perf_case, budget, result.seconds)
    took = "estimated at" if result.estimated else "took"
    assert math.isfinite(result.seconds) and result.seconds <= budget.budget_s, (
        f"{perf_case.id}: full sample {took} {result.seconds:.2f} s > budget {budget.budget_s:.2f} s ({budget.source})"
    )
