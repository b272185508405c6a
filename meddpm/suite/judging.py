"""How a session judges what it measured: against the stored baselines, or against a revision.

:class:`StoredBaselines` reads each architecture's baseline file once; :class:`Judging` applies
the rules of :mod:`meddpm.judge.verdict` to a case's record (time, memory and energy against its
stored case, or the working tree against ``--compare-to``'s revision), to DDP results, and to the
stored expectations of ratios, scaling and ncu counters, and keeps the expectation verdicts for the
summary. It may import :mod:`meddpm.suite.cases`, the baseline files, the verdict rules and the
rooms below the suite; nothing of the session's measuring, results files or saving.
"""

from __future__ import annotations

from pathlib import Path

from meddpm.history.last_good_run import LastGood
from meddpm.judge.ab import ab_cases
from meddpm.judge.baseline import (
    BaselineFile,
    CaseBaseline,
    CaseKey,
    Expectation,
    SamplingBudget,
    Tolerances,
    baseline_path,
    load_baseline,
)
from meddpm.judge.counts import farthest, judge_counts
from meddpm.judge.explain import explain_counts, flagged
from meddpm.judge.stored_profile import explain_stored
from meddpm.judge.verdict import UNDER_THRESHOLD, Verdict, judge_case, judge_expectation, judge_figures, judge_samples
from meddpm.measure.campaign.protocol import MeasuringCampaign
from meddpm.measure.processes.campaign import ProcessCampaign
from meddpm.measure.processes.ddp import DdpResult
from meddpm.measure.profiling.ncu_metrics import METRICS
from meddpm.suite.cases import CaseRecord, PerfCase, RatioCase


class StoredBaselines:
    """The baseline files in one directory, each read on first use and again after it was saved."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._files: dict[str, BaselineFile | None] = {}

    def path(self, arch: str) -> Path:
        """Where ``arch``'s baseline file lives."""
        return baseline_path(self.directory, arch)

    def load(self, arch: str) -> BaselineFile | None:
        """The stored baseline of ``arch`` (cached), None if there is none; BaselineError if unusable."""
        if arch not in self._files:
            self._files[arch] = load_baseline(self.path(arch), arch)
        return self._files[arch]

    def forget(self, arch: str) -> None:
        """Read ``arch``'s file again on next use (it was just saved)."""
        self._files.pop(arch, None)

    def case(self, case: PerfCase) -> CaseBaseline | None:
        """The stored measurement of ``case``, or None."""
        stored = self.load(case.arch)
        return stored.case(case.key) if stored else None


class Judging:
    """A session's verdicts: each case's against what is stored, and the expectation checks kept for the summary."""

    def __init__(self, baselines: StoredBaselines):
        self.baselines = baselines
        self.expectation_verdicts: list[tuple[str, Verdict, str]] = []  # (arch, verdict, the expectation's source)

    def judge(self, record: CaseRecord) -> list[Verdict]:
        """Time, memory and energy verdicts of the record's case against its stored baseline."""
        case = record.case
        stored = self.baselines.case(case)
        assert stored is not None, "judge() needs a stored case"
        tol = self.baselines.load(case.arch).tolerances_for(case.key)  # type: ignore[union-attr]
        r = record.result
        record.verdicts = judge_case(
            str(case.key),
            r.samples_ms,
            r.peak_allocated_bytes,
            r.energy,
            stored,
            tol,
            record.process_medians_ms,
        )
        return self.judge_counts(record)

    def judge_counts(self, record: CaseRecord) -> list[Verdict]:
        """Add the counts verdicts of the record's case against its stored spread and, if flagged, what moved: by
        rows against the stored profile, or by counts where the baseline keeps none.

        Counts need no quiet machine: the suite judges them for a case whose time is too noisy to judge.
        """
        stored = self.baselines.case(record.case)
        assert stored is not None, "judge_counts() needs a stored case"
        counts = judge_counts(str(record.case.key), record.run_counts, stored.counts)
        record.verdicts = [*record.verdicts, *counts]
        if flagged(record.verdicts) and stored.profile and record.run_profiles:
            record.explain = explain_stored(record.run_profiles, record.run_module_bytes, stored.profile)
        elif flagged(record.verdicts) and stored.counts and record.run_counts:  # saved before profiles
            record.explain = explain_counts(farthest(record.run_counts, stored.counts), stored.counts)
        return _settle(record)

    def judge_against_revision(
        self, record: CaseRecord, campaign: MeasuringCampaign, last_good: LastGood | None = None
    ) -> list[Verdict]:
        """The A/B verdicts of the record's case: the working tree's process medians and counts against the
        revision's, and what moved where one flags it. Against ``last_good``'s commit, also whether the code or
        the machine moved the case (:meth:`~meddpm.history.last_good.LastGood.attribution`)."""
        case = record.case
        judged = ab_cases(campaign, lambda key: self.tolerances(case.arch, key))[case.combo]
        record.verdicts, record.explain = judged.verdicts, list(judged.explain)
        if last_good is not None:
            sides = campaign.sides() if isinstance(campaign, ProcessCampaign) else []
            now = (sides or [{}])[0].get("environment") or {}
            time_rel = self.tolerances(case.arch, case.key).time_rel
            record.attribution = last_good.attribution(str(case.key), judged.time, time_rel, now)
        return _settle(record)

    def tolerances(self, arch: str, key: CaseKey) -> Tolerances:
        """The tolerances of case ``key`` in ``arch``'s stored baseline, the defaults where it has none."""
        stored = self.baselines.load(arch)
        return stored.tolerances_for(key) if stored else Tolerances()

    def expectations(self, ratio: RatioCase) -> list[Expectation]:
        """The stored time expectations for ``ratio``'s combo and reference."""
        stored = self.baselines.load(ratio.arch)
        return stored.expectations_for(ratio.preset, "time", ratio.combo, ratio.reference) if stored else []

    def scaling_expectations(self, case: PerfCase, world_size: int) -> list[Expectation]:
        """Stored scaling-efficiency expectations of ``case``'s combo at ``world_size`` GPUs."""
        stored = self.baselines.load(case.arch)
        if stored is None:
            return []
        return stored.expectations_for(case.preset, "scaling_efficiency", case.combo, case.combo, world_size)

    def ncu_expectations(self, ratio: RatioCase) -> list[Expectation]:
        """The stored ``ncu:<metric>`` ratio expectations for ``ratio``'s combo and reference."""
        stored = self.baselines.load(ratio.arch)
        if stored is None:
            return []
        return [
            e
            for m in METRICS
            for e in stored.expectations_for(ratio.preset, f"ncu:{m.key}", ratio.combo, ratio.reference)
        ]

    def absolute_ncu_expectations(self, case: PerfCase) -> list[Expectation]:
        """The stored ``ncu:<metric>`` bounds on ``case``'s own figures (``"reference": null``)."""
        stored = self.baselines.load(case.arch)
        if stored is None:
            return []
        return [e for m in METRICS for e in stored.expectations_for(case.preset, f"ncu:{m.key}", case.combo, None)]

    def judge_ncu(
        self, arch: str, expectation: Expectation, totals: dict[str, float], reference: dict[str, float] | None
    ) -> Verdict:
        """Check an ncu expectation on a combo's totals (and its reference's, for a ratio); remembered for the summary.

        A ratio over a reference figure of 0 is "cannot judge" and fails: it has no finite value to bound.
        """
        key = expectation.metric.removeprefix("ncu:")
        verdict = judge_figures(expectation, totals[key], None if reference is None else reference[key])
        self.expectation_verdicts.append((arch, verdict, expectation.source))
        return verdict

    def sampling_budget(self, case: PerfCase) -> SamplingBudget | None:
        """The stored full-sample budget of ``case``'s combo on its architecture, or None."""
        stored = self.baselines.load(case.arch)
        return stored.sampling_budget(case.preset, case.combo, case.batch_size) if stored else None

    def judge_sampling(self, case: PerfCase, budget: SamplingBudget | None, seconds: float | None = None) -> Verdict:
        """A full sample's time against its budget, kept for the summary.

        With no budget the verdict is "no budget": not a failure, but listed beside the cases
        with no training baseline, so a runner that guards no sampling says so.
        """
        subject = f"{case.preset} sample {case.combo}/b{case.batch_size}"
        if budget is None:
            verdict = Verdict(subject, f"{subject} time (no budget)", "no budget", None, seconds, "s")
            source = f"no sampling entry in {self.baselines.path(case.arch).name}"
        else:
            assert seconds is not None, "a budget needs the measured time"
            outcome = "holds" if seconds <= budget.budget_s else "violated"  # NaN is never within the budget
            check = f"{subject} time <= {budget.budget_s:g} s ({budget.provenance})"
            verdict = Verdict(subject, check, outcome, budget.budget_s, seconds, "s")
            source = budget.source
        self.expectation_verdicts.append((case.arch, verdict, source))
        return verdict

    def judge_ddp(self, case: PerfCase, result: DdpResult) -> Verdict | None:
        """Time verdict of a DDP result (slowest rank per round) against its stored case, if any."""
        key = CaseKey(case.preset, case.combo, case.batch_size, result.world_size)
        stored = self.baselines.load(case.arch)
        stored_case = stored.case(key) if stored else None
        if stored is None or stored_case is None:
            return None
        tol = stored.tolerances_for(key)
        return judge_samples(str(key), "time", result.slowest_ms, stored_case.samples_ms, tol.time_rel, tol.alpha, "ms")

    def judge_ratio(self, arch: str, expectation: Expectation, measured: float) -> Verdict:
        """Check a measured ratio against an expectation and remember it for the summary."""
        verdict = judge_expectation(expectation, measured)
        self.expectation_verdicts.append((arch, verdict, expectation.source))
        return verdict


def _settle(record: CaseRecord) -> list[Verdict]:
    """Set the record's outcome from its verdicts; returns them."""
    failed = any(v.failed for v in record.verdicts)
    improved = any(v.outcome == "improvement" for v in record.verdicts)
    under = next((v.outcome for v in record.verdicts if v.outcome in UNDER_THRESHOLD), None)
    record.outcome = "regression" if failed else "improvement" if improved else under or "ok"
    return record.verdicts
