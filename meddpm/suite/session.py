"""One pytest session of the suite: the object the plugin and the perf tests hold.

The plugin (``meddpm.suite.plugin``) keeps one :class:`SuiteRun` per session; tests ask it for
results and verdicts. It composes the suite's rooms and does no work of its own: the plan
(:mod:`~meddpm.suite.cases`), what is measured (:mod:`~meddpm.suite.measuring`), how it is judged
(:mod:`~meddpm.suite.judging`), what is kept (:mod:`~meddpm.suite.records`) and saved
(:mod:`~meddpm.suite.saving`). It may import all of them; only the plugin imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

from meddpm.judge.baseline import CaseBaseline, Expectation, SamplingBudget
from meddpm.judge.verdict import Verdict
from meddpm.measure.campaign.interleaved import ComboResult
from meddpm.measure.campaign.protocol import MeasuringCampaign
from meddpm.measure.campaign.sampling import SamplingResult
from meddpm.measure.processes.ddp import DdpResult
from meddpm.measure.profiling.ncu import NcuProfile
from meddpm.suite.cases import CaseRecord, PerfCase, Plan, RatioCase
from meddpm.suite.judging import Judging, StoredBaselines
from meddpm.suite.measuring import Measuring, device_for
from meddpm.suite.options import SuiteOptions
from meddpm.suite.records import write_results
from meddpm.suite.saving import save


class SuiteRun:
    """State of one session: its options and plan, what it measured and judged, what it saved and wrote."""

    def __init__(self, options: SuiteOptions, running_arch: str | None, write_line: Callable[[str], None]):
        self.options = options
        self.running_arch = running_arch  # None where no GPU is visible
        self.write_line = write_line
        self.plan = Plan(options, running_arch)
        self.judging = Judging(StoredBaselines(options.baseline_dir))
        self.measuring = Measuring(options, running_arch, write_line, self.judging.tolerances)
        self.save_message = ""
        self.summary_path: Path | None = None

    # --- measuring: meddpm.suite.measuring ----------------------------------------------
    def device(self, on_gpu: bool) -> torch.device:
        """The current CUDA device, or the CPU."""
        return device_for(on_gpu)

    def campaign(self, on_gpu: bool, preset: str, batch_size: int) -> MeasuringCampaign:
        """The interleaved measurement of every selected combo of ``preset``, run on first use."""
        return self.measuring.campaign(on_gpu, preset, batch_size)

    def result(self, case: PerfCase) -> ComboResult:
        """The measurement of ``case`` (running its campaign if needed), recorded for the summary."""
        return self.measuring.result(case)

    def sample(self, case: PerfCase, limit_s: float | None = None) -> SamplingResult:
        """A full sample's time of ``case``'s combo, to be judged against ``limit_s``
        (meddpm.suite.measuring.Measuring.sample)."""
        return self.measuring.sample(case, limit_s)

    def record(self, case: PerfCase) -> CaseRecord:
        """What this session learnt about ``case`` (measured by :meth:`result`)."""
        return self.measuring.records[case.id]

    def time_with_benchmark(self, case: PerfCase, request: pytest.FixtureRequest) -> None:
        """Let pytest-benchmark time a few synchronised iterations of ``case`` and keep our figures."""
        self.measuring.time_with_benchmark(case, request)

    def record_ddp(self, results: list[DdpResult]) -> None:
        """Keep data-parallel results for the summary, the results file and saving."""
        self.measuring.record_ddp(results)

    def ncu_profile(self, case: PerfCase) -> NcuProfile:
        """Nsight Compute counters of one iteration of ``case`` (profiled once per session)."""
        return self.measuring.ncu_profile(case)

    # --- judging: meddpm.suite.judging --------------------------------------------------
    def stored_case(self, case: PerfCase) -> CaseBaseline | None:
        """The stored measurement of ``case``, or None."""
        return self.judging.baselines.case(case)

    def judge(self, case: PerfCase) -> list[Verdict]:
        """Time, memory and energy verdicts of ``case`` against its stored baseline."""
        return self.judging.judge(self.record(case))

    def judge_counts(self, case: PerfCase) -> list[Verdict]:
        """The counts verdicts of ``case`` against its stored spread (none where no case is stored)."""
        if self.stored_case(case) is None:
            return []
        return self.judging.judge_counts(self.record(case))

    def judge_against_revision(self, case: PerfCase) -> list[Verdict]:
        """The A/B verdicts of ``case``: the working tree's process medians and counts against the revision's."""
        record, campaign = self.record(case), self.campaign(case.on_gpu, case.preset, case.batch_size)
        return self.judging.judge_against_revision(record, campaign, self.options.last_good)

    def expectations(self, ratio: RatioCase) -> list[Expectation]:
        """The stored time expectations for ``ratio``'s combo and reference."""
        return self.judging.expectations(ratio)

    def scaling_expectations(self, case: PerfCase, world_size: int) -> list[Expectation]:
        """Stored scaling-efficiency expectations of ``case``'s combo at ``world_size`` GPUs."""
        return self.judging.scaling_expectations(case, world_size)

    def ncu_expectations(self, ratio: RatioCase) -> list[Expectation]:
        """The stored ``ncu:<metric>`` expectations for ``ratio``'s combo and reference."""
        return self.judging.ncu_expectations(ratio)

    def absolute_ncu_expectations(self, case: PerfCase) -> list[Expectation]:
        """The stored ``ncu:<metric>`` bounds on ``case``'s own figures (``"reference": null``)."""
        return self.judging.absolute_ncu_expectations(case)

    def judge_ncu(
        self, arch: str, expectation: Expectation, totals: dict[str, float], reference: dict[str, float] | None
    ) -> Verdict:
        """Check an ncu expectation on a combo's totals (and its reference's, for a ratio); kept for the summary."""
        return self.judging.judge_ncu(arch, expectation, totals, reference)

    def sampling_budget(self, case: PerfCase) -> SamplingBudget | None:
        """The stored full-sample budget of ``case``, or None."""
        return self.judging.sampling_budget(case)

    def judge_sampling(self, case: PerfCase, budget: SamplingBudget | None, seconds: float | None = None) -> Verdict:
        """A full sample's time against its budget ("no budget" where it has none), kept for the summary."""
        return self.judging.judge_sampling(case, budget, seconds)

    def judge_ddp(self, case: PerfCase, result: DdpResult) -> Verdict | None:
        """Time verdict of a DDP result (slowest rank per round) against its stored case, if any."""
        return self.judging.judge_ddp(case, result)

    def judge_ratio(self, arch: str, expectation: Expectation, measured: float) -> Verdict:
        """Check a measured ratio against an expectation and remember it for the summary."""
        return self.judging.judge_ratio(arch, expectation, measured)

    # --- keeping: meddpm.suite.records and meddpm.suite.saving ---------------------------
    def save(self, failed_tests: int, incomplete: Sequence[str] = ()) -> str:
        """Save every measurement as the baseline unless refused (see :func:`meddpm.suite.saving.save`)."""
        force = self.options.force_save
        self.save_message = save(self.measuring, self.judging.baselines, failed_tests, incomplete, force)
        return self.save_message

    def write_results(self, interrupted: bool = False) -> Path | None:
        """Write the run's results JSON and Markdown summary; returns the summary's path.

        After an interrupted session the cases it measured but never judged are written with the
        outcome "interrupted", and a line says so.
        """
        marked = self.measuring.mark_interrupted() if interrupted else 0
        verdicts = self.judging.expectation_verdicts
        summary = write_results(self.measuring, verdicts, self.save_message, self.options.results_dir, interrupted)
        if interrupted and summary is not None:
            self.write_line(
                f"meddpm: interrupted; {summary.parent / 'results.json'} has what was measured before, "
                f'{marked} case(s) with the outcome "interrupted" (cut short or not judged)'
            )
        return summary

    def close(self) -> None:
        """Free every campaign's models and GPU memory."""
        self.measuring.close()
