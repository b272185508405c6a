"""The regression suite: real training iterations per combo, judged against stored baselines.

``pytest perf_tests -m h200`` (or v100, a100, h100) measures every combo of the preset on
this GPU, interleaved, and fails with a one-line reason when a case got slower (significant
and beyond its threshold), hungrier or less efficient than ``baselines/<arch>.json``, or when a
ratio between combos leaves the architecture's stored expectation. With ``--compare-to=REV``
it measures REV and the working tree in alternating processes instead, and fails a case whose
working-tree time is significantly slower by more than the case's noise threshold. Either way a case
whose deterministic counts (kernel launches, bytes allocated, FLOPs) left the reference's spread fails,
even one whose time is too noisy to judge (docs/explain.md).
"""

import math

import pytest

from meddpm.suite.cases import PerfCase, RatioCase
from meddpm.suite.session import SuiteRun


@pytest.mark.training
def test_training_step(perf_case: PerfCase, perf_suite: SuiteRun, request: pytest.FixtureRequest):
    result = perf_suite.result(perf_case)
    assert result.samples_ms and all(math.isfinite(s) and s > 0 for s in result.samples_ms)
    assert result.stats.rounds >= perf_suite.options.min_rounds
    assert result.flops_per_iter > 0
    perf_suite.time_with_benchmark(perf_case, request)

    if perf_suite.options.ab:
        # A/B: side A against side B (a revision, or another interpreter or environment); stored numbers play no part.
        failures = [v.message() for v in perf_suite.judge_against_revision(perf_case) if v.failed]
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
        return
    if not result.reliable:
        # Counts need no quiet machine: a case too noisy to time still fails when they move.
        moved = [v.message() for v in perf_suite.judge_counts(perf_case) if v.failed]
        if moved and not perf_suite.options.save_baseline:
            pytest.fail("\n".join(moved), pytrace=False)
        perf_suite.record(perf_case).outcome = "unreliable"
        pytest.skip(
            f"UNRELIABLE {perf_case.id}: rel. IQR {result.stats.rel_iqr:.1%} > {result.rel_iqr_target:.0%} "
            f"({result.stop_reason}); quiet the machine or raise --perf-budget / --perf-max-rounds"
        )
    if perf_suite.stored_case(perf_case) is None:
        perf_suite.record(perf_case).outcome = "no baseline"
        saving = " (this run saves one)" if perf_suite.options.save_baseline else ": run with --save-baseline"
        pytest.skip(f"no baseline for {perf_case.key} on {perf_case.arch}{saving}")

    failures = [v.message() for v in perf_suite.judge(perf_case) if v.failed]
    if result.throttle_reasons:
        failures = [f"{f} [card throttled: {', '.join(result.throttle_reasons)}]" for f in failures]
    if failures and not perf_suite.options.save_baseline:
        pytest.fail("\n".join(failures), pytrace=False)


@pytest.mark.training
def test_relative_expectation(ratio_case: RatioCase, perf_suite: SuiteRun):
    expectations = perf_suite.expectations(ratio_case)
    if not expectations:
        pytest.skip(
            f"no time expectation for {ratio_case.combo}/{ratio_case.reference} in {ratio_case.arch}'s baseline"
        )
    campaign = perf_suite.campaign(True, ratio_case.preset, ratio_case.batch_size)
    for combo in (ratio_case.combo, ratio_case.reference):
        if combo not in campaign.results:
            pytest.skip(f"{combo} is not measured in this run (see --combos)")
        if not campaign.results[combo].reliable:
            pytest.skip(f"UNRELIABLE: {combo}'s timing is too noisy to judge a ratio")
    measured = campaign.ratio(ratio_case.combo, ratio_case.reference)
    verdicts = [perf_suite.judge_ratio(ratio_case.arch, e, measured.median) for e in expectations]
    failed = [f"{v.message()} [{e.source}]" for v, e in zip(verdicts, expectations) if v.failed]
    assert not failed, "\n".join(failed)
