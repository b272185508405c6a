"""Nsight Compute counters of whole training iterations, and the paper's relative claims on them.

Off by default: ``pytest perf_tests -m h100 --ncu``. Each combo is profiled once, in a
subprocess under ncu (see ``meddpm.measure.profiling.ncu``); tables, the kernel-mix chart, the CSVs and
the ncu reports go to ``<perf-results>/ncu/``. Without ncu on PATH, or with an ncu too new for
the GPU, the cases skip with that reason.
"""

import math

import pytest

from meddpm.measure.profiling.ncu import NcuUnavailable
from meddpm.suite.cases import PerfCase, RatioCase
from meddpm.suite.session import SuiteRun

pytestmark = [pytest.mark.gpu, pytest.mark.ncu]


def _profile(perf_suite: SuiteRun, case: PerfCase):
    try:
        return perf_suite.ncu_profile(case)
    except NcuUnavailable as exc:
        pytest.skip(str(exc))


def test_ncu_profile(ncu_case: PerfCase, perf_suite: SuiteRun):
    profile = _profile(perf_suite, ncu_case)
    totals = profile.totals
    assert totals["duration_ns"] > 0 and totals["sm_cycles"] > 0 and totals["instructions"] > 0, totals
    bad = {k: v for k, v in totals.items() if not math.isfinite(v) or v < 0}
    assert not bad, f"non-finite or negative counters: {bad}"
    assert len(profile.kernels) > 0
    assert profile.mix()["share"].sum() == pytest.approx(1.0)
    # Bounds on this combo's own figures (e.g. its tensor-pipe share), which need no reference profile.
    expectations = perf_suite.absolute_ncu_expectations(ncu_case)
    missing = [e.metric for e in expectations if e.metric.removeprefix("ncu:") not in totals]
    checked = [
        (perf_suite.judge_ncu(ncu_case.arch, e, totals, None), e) for e in expectations if e.metric not in missing
    ]
    failed = [f"{v.message()} [{e.source}]" for v, e in checked if v.failed]
    assert not failed, "\n".join(failed)
    if missing:
        pytest.skip(f"{', '.join(missing)} not collected (see --ncu-groups)")


def test_ncu_expectation(ncu_ratio_case: RatioCase, perf_suite: SuiteRun):
    r = ncu_ratio_case
    expectations = perf_suite.ncu_expectations(r)
    if not expectations:
        pytest.skip(f"no ncu expectation for {r.combo}/{r.reference} in {r.arch}'s baseline")
    selected = perf_suite.options.combos_for(True)
    if r.reference not in selected:
        pytest.skip(f"{r.reference} is not profiled in this run (see --combos)")
    combo, reference = (
        _profile(perf_suite, PerfCase(r.arch, r.preset, name, r.batch_size)).totals for name in (r.combo, r.reference)
    )
    failed = []
    for e in expectations:
        key = e.metric.removeprefix("ncu:")
        if key not in combo or key not in reference:
            pytest.skip(f"{key} was not collected (see --ncu-groups)")
        verdict = perf_suite.judge_ncu(r.arch, e, combo, reference)  # a reference of 0: "cannot judge", failed
        if verdict.failed:
            failed.append(f"{verdict.message()} [{e.source}]")
    assert not failed, "\n".join(failed)
