"""The suite's vocabulary: which cases a session plans, and what it learns about each one.

A :class:`PerfCase` is one training step to measure, a :class:`RatioCase` one relative
expectation to check, a :class:`CaseRecord` what was learnt about a measured case (its result,
verdicts and outcome) with its JSON-ready figures; :class:`Plan` lists the cases of a session.
The bottom of the suite's session modules: it may import the suite's options, architectures,
baseline keys and verdicts and the rooms below the suite, and no other suite module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from meddpm.judge.arch import KNOWN_ARCHS, PEAKS
from meddpm.judge.baseline import CaseKey
from meddpm.judge.drift import Attribution
from meddpm.judge.explain import ExplainRow
from meddpm.judge.verdict import COUNT_UNITS, MEMORY_METRICS, Verdict
from meddpm.measure.campaign.result import ComboResult
from meddpm.measure.profiling.iteration import ProfileRow
from meddpm.measure.statistics.compare import between_process_spread
from meddpm.suite.options import SuiteOptions

CPU = "cpu"


@dataclass(frozen=True)
class PerfCase:
    """One parametrized case: a training step of a preset and combo on an architecture."""

    arch: str  # a GPU architecture key, or "cpu"
    preset: str
    combo: str
    batch_size: int

    @property
    def on_gpu(self) -> bool:
        """Whether the case runs on a GPU (any architecture but ``cpu``)."""
        return self.arch != CPU

    @property
    def key(self) -> CaseKey:
        """The case's key in a baseline file."""
        return CaseKey(self.preset, self.combo, self.batch_size)

    @property
    def id(self) -> str:
        """The pytest id: ``<arch>-<preset>-<combo>-b<batch>``."""
        return f"{self.arch}-{self.preset}-{self.combo}-b{self.batch_size}"


@dataclass(frozen=True)
class RatioCase:
    """A relative expectation to check: time(combo) / time(reference) on an architecture."""

    arch: str
    preset: str
    combo: str
    reference: str
    batch_size: int

    @property
    def id(self) -> str:
        """The pytest id: ``<arch>-<preset>-<combo>/<reference>-b<batch>``."""
        return f"{self.arch}-{self.preset}-{self.combo}/{self.reference}-b{self.batch_size}"


@dataclass
class CaseRecord:
    """What the suite learnt about one case, for the summary, the results file and saving."""

    case: PerfCase
    result: ComboResult
    outcome: str = "measured"  # then "ok", "regression", "improvement", an under-threshold change, "no baseline"...
    verdicts: list[Verdict] = field(default_factory=list)
    process_medians_ms: list[float] = field(default_factory=list)  # empty: measured in the pytest process
    # Each worker process's median and the card's state over its rounds, both sides of an A/B (report.outlying).
    process_cards: list[dict[str, Any]] = field(default_factory=list)
    run_counts: list[dict[str, int]] = field(default_factory=list)  # each run's counts of its profiled iteration
    run_profiles: list[list[ProfileRow]] = field(default_factory=list)  # each run's profiled rows, for saving
    run_module_bytes: list[dict[str, int]] = field(default_factory=list)  # each run's bytes kept per module
    explain: list[ExplainRow] = field(default_factory=list)  # what moved, where a verdict flags the case
    attribution: Attribution | None = None  # code or machine, in a run against the last good run's commit

    def payload(self) -> dict[str, Any]:
        """JSON-ready figures of the case, with the fraction of the architecture's peak."""
        payload = self.result.as_dict()
        peaks = PEAKS.get(self.case.arch)
        peak = peaks.for_precision(self.result.math_precision) if peaks else None
        payload.update(
            arch=self.case.arch,
            outcome=self.outcome,
            peak_tflops=peak,
            peak_source=peaks.source if peaks else None,
            fraction_of_peak=self.result.tflops / peak if peak else None,
            verdicts=[v.message() for v in self.verdicts],
            process_medians_ms=self.process_medians_ms,
            process_cards=self.process_cards,
            detectable_time_change=next((v.detectable for v in self.verdicts if v.metric == "time"), None),
            between_process_rel=between_process_spread(self.process_medians_ms),
            comparisons=[
                {
                    "metric": v.metric,
                    "outcome": v.outcome,
                    "threshold": v.tolerance,
                    "detectable": v.detectable,
                    **v.comparison.as_dict(),
                }
                for v in self.verdicts
                if v.comparison is not None
            ],
            energy_verdict=next((v.figures() for v in self.verdicts if v.metric == "energy"), None),
            memory_verdicts=[v.figures() for v in self.verdicts if v.metric in MEMORY_METRICS],
            counts_verdicts=[v.figures() for v in self.verdicts if v.unit in COUNT_UNITS],
            explain=[r.as_dict() for r in self.explain],
            attribution=self.attribution.as_dict() if self.attribution else None,
        )
        return payload


@dataclass(frozen=True)
class Plan:
    """The cases of one session, from its options and the architecture it runs on."""

    options: SuiteOptions
    running_arch: str | None  # None where no GPU is visible

    def gpu_archs(self) -> tuple[str, ...]:
        """Every architecture that gets cases: the known ones and the one this run is on."""
        extra = () if self.running_arch in (None, *KNOWN_ARCHS) else (self.running_arch,)
        return (*KNOWN_ARCHS, *extra)

    def cases(self) -> list[PerfCase]:
        """Cases for every GPU architecture (others' skip at run time), then the CPU cases."""
        o = self.options
        gpu = [PerfCase(a, o.preset_for(True), c, o.batch_size) for a in self.gpu_archs() for c in o.combos_for(True)]
        cpu = [PerfCase(CPU, o.preset_for(False), c, o.batch_size) for c in o.combos_for(False)]
        return gpu + cpu

    def ncu_cases(self) -> list[PerfCase]:
        """The GPU cases; each gets an Nsight Compute profile when ``--ncu`` is on."""
        return [c for c in self.cases() if c.on_gpu]

    def ratio_cases(self) -> list[RatioCase]:
        """Every selected combo against the baseline combo, per GPU architecture."""
        o = self.options
        return [
            RatioCase(a, o.preset_for(True), c, "baseline", o.batch_size)
            for a in self.gpu_archs()
            for c in o.combos_for(True)
            if c != "baseline"
        ]
