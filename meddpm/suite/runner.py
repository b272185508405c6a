"""One pytest session of the suite: which cases exist, their measurements, verdicts and baselines.

The plugin (``meddpm.suite.plugin``) holds one :class:`SuiteRun` per session; tests ask it for
results and verdicts. Measurements happen lazily, one interleaved :class:`Campaign` per
(device, preset, batch size), the first time a case of it runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from meddpm.atomic import write_json_atomic, write_text_atomic
from meddpm.errors import UserError
from meddpm.measure.campaign import Campaign, ComboResult, Progress
from meddpm.measure.compare import between_process_spread
from meddpm.measure.energy import ENERGY_METHOD
from meddpm.measure.environment import environment
from meddpm.measure.ncu import NcuProfile, profile_combo
from meddpm.measure.ncu_metrics import METRICS, family_of
from meddpm.measure.processes import ProcessCampaign
from meddpm.measure.revision import checkout_root, package_root, revision, working_tree
from meddpm.measure.stats import Stats
from meddpm.measure.timing import synchronize
from meddpm.model.config import ModelConfig
from meddpm.report.plots import kernel_mix_chart
from meddpm.report.power_plot import power_chart
from meddpm.report.tables import kernel_mix_table, ncu_table
from meddpm.run.combos import get_combo
from meddpm.run.distributed import DdpResult
from meddpm.suite.arch import KNOWN_ARCHS, PEAKS
from meddpm.suite.baseline import (
    BaselineFile,
    CaseBaseline,
    CaseKey,
    Expectation,
    NcuBaseline,
    Noise,
    Tolerances,
    baseline_path,
    load_baseline,
    update_baseline,
)
from meddpm.suite.options import SuiteOptions
from meddpm.suite.summary import markdown_summary
from meddpm.suite.verdict import Verdict, judge_ab, judge_case, judge_expectation, judge_samples

RESULTS_SCHEMA = "meddpm-perf-results/1"
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
        return self.arch != CPU

    @property
    def key(self) -> CaseKey:
        return CaseKey(self.preset, self.combo, self.batch_size)

    @property
    def id(self) -> str:
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
        return f"{self.arch}-{self.preset}-{self.combo}/{self.reference}-b{self.batch_size}"


@dataclass
class CaseRecord:
    """What the suite learnt about one case, for the summary, the results file and saving."""

    case: PerfCase
    result: ComboResult
    outcome: str = "measured"  # then "ok", "regression", "improvement", "unreliable", "no baseline"
    verdicts: list[Verdict] = field(default_factory=list)
    process_medians_ms: list[float] = field(default_factory=list)  # empty: measured in the pytest process


class SuiteRun:
    """State of one session: options, the architecture it runs on, campaigns and records."""

    def __init__(self, options: SuiteOptions, running_arch: str | None, write_line: Callable[[str], None]):
        self.options = options
        self.running_arch = running_arch  # None where no GPU is visible
        self.write_line = write_line
        self.records: dict[str, CaseRecord] = {}
        self.expectation_verdicts: list[tuple[str, Verdict, str]] = []
        self.save_message = ""
        self.summary_path: Path | None = None
        self.ddp_results: list[DdpResult] = []
        self.ncu_profiles: dict[str, NcuProfile] = {}  # by PerfCase.id
        self._ncu_errors: dict[str, UserError] = {}
        self._baselines: dict[str, BaselineFile | None] = {}
        self._campaigns: dict[tuple[str, str, int], Campaign] = {}
        self._campaign_errors: dict[tuple[str, str, int], UserError] = {}

    # --- cases ------------------------------------------------------------------------
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

    @property
    def measured_anything(self) -> bool:
        """Whether this session measured a case, a DDP run or an ncu profile: something to report or save."""
        return bool(self.records or self.ddp_results or self.ncu_profiles)

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

    # --- baselines --------------------------------------------------------------------
    def baseline(self, arch: str) -> BaselineFile | None:
        """The stored baseline of ``arch`` (cached), None if there is none; BaselineError if unusable."""
        if arch not in self._baselines:
            self._baselines[arch] = load_baseline(baseline_path(self.options.baseline_dir, arch), arch)
        return self._baselines[arch]

    def stored_case(self, case: PerfCase) -> CaseBaseline | None:
        """The stored measurement of ``case``, or None."""
        stored = self.baseline(case.arch)
        return stored.case(case.key) if stored else None

    # --- measuring --------------------------------------------------------------------
    def device(self, on_gpu: bool) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")

    def campaign(self, on_gpu: bool, preset: str, batch_size: int) -> Campaign:
        """The interleaved measurement of every selected combo of ``preset``, run on first use."""
        key = ("cuda" if on_gpu else CPU, preset, batch_size)
        if key not in self._campaigns:
            self._campaigns[key] = self._run_campaign(on_gpu, preset, batch_size, key)
        if key in self._campaign_errors:
            # Every case of a failed campaign reports the same one-line error.
            raise self._campaign_errors[key]
        return self._campaigns[key]

    def _run_campaign(
        self, on_gpu: bool, preset: str, batch_size: int, key: tuple[str, str, int]
    ) -> Campaign | ProcessCampaign:
        combos = self.options.combos_for(on_gpu)
        settings = self.options.campaign_settings(on_gpu)
        o = self.options
        processes = f" in {o.processes} processes" + (f" each, alternating with {o.compare_to}" if o.compare_to else "")
        self.write_line(
            f"\nmeddpm: measuring {preset} b{batch_size} on {self.running_arch if on_gpu else CPU}{processes}: "
            f"{', '.join(combos)}; {settings.warmup} warm-up iterations each, then "
            f"{settings.min_rounds}-{settings.max_rounds} interleaved rounds to "
            f"{settings.rel_iqr_target:.0%} rel. IQR within {settings.budget_s:.0f} s"
        )
        config, device = ModelConfig.preset(preset), self.device(on_gpu)
        with contextlib.ExitStack() as checkouts:
            try:
                if o.in_processes:
                    root = checkout_root() if o.compare_to else package_root()
                    sources = [working_tree(root)]
                    if o.compare_to:
                        sources.append(checkouts.enter_context(revision(o.compare_to, root)))
                    campaign: Campaign | ProcessCampaign = ProcessCampaign(
                        config,
                        combos,
                        device,
                        batch_size=batch_size,
                        settings=settings,
                        processes=o.processes,
                        sources=sources,
                    )
                else:
                    campaign = Campaign(
                        config, [get_combo(c) for c in combos], device, batch_size=batch_size, settings=settings
                    )
                results = campaign.run(self._progress)
            except UserError as exc:
                self._campaign_errors[key] = exc
                return campaign
        self.write_line(f"meddpm: {preset} b{batch_size}: {next(iter(results.values())).stop_reason}")
        return campaign

    def _progress(self, p: Progress) -> None:
        if p.phase == "process":
            self.write_line(f"  process {p.done}/{p.total} ({p.combo}): {p.detail}")
        elif p.phase == "warmup" and p.done == 1:
            self.write_line(f"  warm-up {p.combo}: first iteration (autotuning, compilation) {p.detail}")
        elif p.phase == "round" and (p.done <= 2 or p.done % 5 == 0):
            self.write_line(f"  round {p.done} {p.detail}")
        elif p.phase == "energy":
            self.write_line(f"  energy {p.combo} ({p.done}/{p.total}): {p.detail}")

    def result(self, case: PerfCase) -> ComboResult:
        """The measurement of ``case`` (running its campaign if needed), recorded for the summary."""
        campaign = self.campaign(case.on_gpu, case.preset, case.batch_size)
        result = campaign.results[case.combo]
        medians = campaign.process_medians(case.combo) if isinstance(campaign, ProcessCampaign) else []
        self.records.setdefault(case.id, CaseRecord(case, result, process_medians_ms=medians))
        return result

    def time_with_benchmark(self, case: PerfCase, request: pytest.FixtureRequest) -> None:
        """Let pytest-benchmark time a few synchronised iterations itself and store our figures.

        Its own rounds measure host wall time around a synchronised iteration; our CUDA-event
        samples, statistics, NVML readings and verdicts go into ``extra_info``, so its JSON,
        comparisons and histograms carry everything. Cases measured in worker processes have no
        model in this process, and pytest-benchmark records nothing for them.
        """
        campaign = self.campaign(case.on_gpu, case.preset, case.batch_size)
        if not isinstance(campaign, Campaign):
            return
        benchmark = request.getfixturevalue("benchmark")
        step, device = campaign.steps[case.combo], campaign.device

        def synchronised_iteration() -> None:
            step()
            synchronize(device)

        benchmark.pedantic(synchronised_iteration, rounds=self.options.benchmark_rounds, iterations=1)
        benchmark.extra_info.update(self.case_payload(case))

    # --- verdicts ---------------------------------------------------------------------
    def judge(self, case: PerfCase) -> list[Verdict]:
        """Time, memory and energy verdicts of ``case`` against its stored baseline."""
        record = self.records[case.id]
        stored = self.stored_case(case)
        assert stored is not None, "judge() needs a stored case"
        tol = self.baseline(case.arch).tolerances_for(case.key)  # type: ignore[union-attr]
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
        return self._settle(record)

    def judge_against_revision(self, case: PerfCase) -> list[Verdict]:
        """The A/B time verdict of ``case``: the working tree's process medians against the revision's."""
        record = self.records[case.id]
        campaign = self.campaign(case.on_gpu, case.preset, case.batch_size)
        assert isinstance(campaign, ProcessCampaign) and len(campaign.sources) == 2, "needs --compare-to"
        tree, rev = campaign.sources
        candidate, reference = (campaign.process_medians(case.combo, s) for s in (tree, rev))
        stored = self.baseline(case.arch)
        tol = stored.tolerances_for(case.key) if stored else Tolerances()
        record.verdicts = [judge_ab(f"{case.key} {tree.label} vs {rev.label}", candidate, reference, tol)]
        return self._settle(record)

    @staticmethod
    def _settle(record: CaseRecord) -> list[Verdict]:
        failed = any(v.failed for v in record.verdicts)
        improved = any(v.outcome == "improvement" for v in record.verdicts)
        record.outcome = "regression" if failed else "improvement" if improved else "ok"
        return record.verdicts

    def expectations(self, ratio: RatioCase) -> list[Expectation]:
        """The stored time expectations for ``ratio``'s combo and reference."""
        stored = self.baseline(ratio.arch)
        return stored.expectations_for(ratio.preset, "time", ratio.combo, ratio.reference) if stored else []

    def scaling_expectations(self, case: PerfCase, world_size: int) -> list[Expectation]:
        """Stored scaling-efficiency expectations of ``case``'s combo at ``world_size`` GPUs."""
        stored = self.baseline(case.arch)
        if stored is None:
            return []
        return stored.expectations_for(case.preset, "scaling_efficiency", case.combo, case.combo, world_size)

    def record_ddp(self, results: list[DdpResult]) -> None:
        """Keep data-parallel results for the summary, the results file and saving."""
        self.ddp_results.extend(results)

    def ncu_profile(self, case: PerfCase) -> NcuProfile:
        """Nsight Compute counters of one iteration of ``case`` (profiled once per session, in a subprocess)."""
        settings = self.options.ncu
        if settings is None:
            raise UserError("Nsight Compute cases are off; run with --ncu")
        if case.id in self._ncu_errors:
            raise self._ncu_errors[case.id]
        if case.id not in self.ncu_profiles:
            device = self.device(True)
            props = torch.cuda.get_device_properties(device)
            self.write_line(
                f"\nmeddpm: ncu {case.id}: {settings.replay} replay, groups {','.join(settings.groups)}, "
                f"clock control {settings.clock_control}, {settings.warmup} warm-up iterations..."
            )
            try:
                profile = profile_combo(
                    case.preset,
                    case.combo,
                    family=family_of((props.major, props.minor)),
                    out_dir=self.options.results_dir / "ncu",
                    settings=settings,
                    batch_size=case.batch_size,
                    device_index=device.index or 0,
                )
            except UserError as exc:
                self._ncu_errors[case.id] = exc
                raise
            self.ncu_profiles[case.id] = profile
            passes = ", ".join(f"{name} {s:.0f} s" for name, s in profile.wall_s.items())
            self.write_line(f"meddpm: ncu {case.id}: {len(profile.kernels)} kernel launches; ncu took {passes}")
        return self.ncu_profiles[case.id]

    def ncu_expectations(self, ratio: RatioCase) -> list[Expectation]:
        """The stored ``ncu:<metric>`` expectations for ``ratio``'s combo and reference."""
        stored = self.baseline(ratio.arch)
        if stored is None:
            return []
        return [
            e
            for m in METRICS
            for e in stored.expectations_for(ratio.preset, f"ncu:{m.key}", ratio.combo, ratio.reference)
        ]

    def judge_ddp(self, case: PerfCase, result: DdpResult) -> Verdict | None:
        """Time verdict of a DDP result (slowest rank per round) against its stored case, if any."""
        key = CaseKey(case.preset, case.combo, case.batch_size, result.world_size)
        stored = self.baseline(case.arch)
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

    # --- output -----------------------------------------------------------------------
    def case_payload(self, case: PerfCase) -> dict[str, Any]:
        """JSON-ready figures of a case, with the fraction of the architecture's peak."""
        record = self.records[case.id]
        payload = record.result.as_dict()
        peaks = PEAKS.get(case.arch)
        peak = peaks.for_precision(record.result.math_precision) if peaks else None
        payload.update(
            arch=case.arch,
            outcome=record.outcome,
            peak_tflops=peak,
            peak_source=peaks.source if peaks else None,
            fraction_of_peak=record.result.tflops / peak if peak else None,
            verdicts=[v.message() for v in record.verdicts],
            process_medians_ms=record.process_medians_ms,
            detectable_time_change=next((v.detectable for v in record.verdicts if v.metric == "time"), None),
            between_process_rel=between_process_spread(record.process_medians_ms),
            comparisons=[
                {
                    "metric": v.metric,
                    "outcome": v.outcome,
                    "threshold": v.tolerance,
                    "detectable": v.detectable,
                    **v.comparison.as_dict(),
                }
                for v in record.verdicts
                if v.comparison is not None
            ],
        )
        return payload

    def ratio_table(self, on_gpu: bool) -> dict[str, dict[str, dict[str, float]]]:
        """Interleaved time ratios combo / baseline per preset and batch, from each campaign."""
        table: dict[str, dict[str, dict[str, float]]] = {}
        for (device, preset, batch), campaign in self._campaigns.items():
            if (device != CPU) != on_gpu or "baseline" not in campaign.results:
                continue
            table[f"{preset}/b{batch}"] = {
                f"{combo}/baseline": {
                    k: round(v, 4)
                    for k, v in campaign.ratio(combo, "baseline").as_dict().items()
                    if k in ("median", "q1", "q3", "min", "max")
                }
                for combo in campaign.results
                if combo != "baseline"
            }
        return table

    def write_results(self) -> Path | None:
        """Write the run's results JSON and Markdown summary; returns the summary's path."""
        if not self.measured_anything:
            return None
        out = self.options.results_dir
        on_gpu = torch.cuda.is_available() and (
            bool(self.ddp_results or self.ncu_profiles) or any(r.case.on_gpu for r in self.records.values())
        )
        payload = {
            "schema": RESULTS_SCHEMA,
            "arch": self.running_arch if on_gpu else CPU,
            "environment": environment(self.device(on_gpu)),
            "cases": [self.case_payload(r.case) for r in self.records.values()],
            "ratios": self.ratio_table(on_gpu),
            "expectations": [
                {"arch": arch, "check": v.metric, "measured": v.now, "outcome": v.outcome, "source": source}
                for arch, v, source in self.expectation_verdicts
            ],
            "ddp": [r.as_dict() for r in self.ddp_results],
            "ncu": [p.as_dict() for p in self.ncu_profiles.values()],
            "baseline_saved": self.save_message,
        }
        if self.ncu_profiles:
            self._write_ncu_tables(out / "ncu")
        measured = [r.result for r in self.records.values() if r.result.energy_blocks]
        if measured:
            where = f"{self.running_arch if on_gpu else CPU}, {measured[0].preset} b{measured[0].batch_size}"
            payload["power_chart"] = str(power_chart(measured, out / "power.png", f"power and SM clock, {where}"))
        write_json_atomic(out / "results.json", payload)
        summary = out / "summary.md"
        write_text_atomic(summary, markdown_summary(payload))
        return summary

    def ncu_tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The per-combo Nsight Compute table and the kernel-mix shares (categories x combos)."""
        profiles = self.ncu_profiles.values()
        return (
            ncu_table({p.combo: p.totals for p in profiles}),
            kernel_mix_table({p.combo: p.mix() for p in profiles}),
        )

    def _write_ncu_tables(self, out: Path) -> None:
        table, shares = self.ncu_tables()
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "ncu-per-combo.csv")
        shares.to_csv(out / "kernel-mix.csv")
        first = next(iter(self.ncu_profiles.values()))
        title = f"kernel mix per combo, {first.preset} b{first.batch_size}, {self.running_arch}"
        kernel_mix_chart(shares, out / "kernel-mix.png", title)

    def close(self) -> None:
        """Free every campaign's models and GPU memory."""
        for campaign in self._campaigns.values():
            campaign.close()

    # --- saving -----------------------------------------------------------------------
    def save_refusals(self, failed_tests: int) -> list[str]:
        """Why this run must not become a baseline (empty if it may)."""
        reasons = [f"{failed_tests} test(s) failed"] if failed_tests else []
        for record in self.records.values():
            r = record.result
            if not r.reliable:
                reasons.append(f"{record.case.id} is unreliable (rel. IQR {r.stats.rel_iqr:.1%})")
            if r.throttle_reasons:
                reasons.append(f"{record.case.id} was throttled ({', '.join(r.throttle_reasons)})")
        return reasons

    def save(self, failed_tests: int, incomplete: Sequence[str] = ()) -> str:
        """Save every measured case into its architecture's file, unless refused; returns the outcome.

        ``incomplete`` says why the session did not run all it selected (interrupted, stopped
        early); such a session is never saved, not even with --force-save-baseline, because a
        partial campaign's rounds are not the ones a full run would time.
        Data-parallel results join as cases keyed ``preset/combo/bN/ddpW`` (world sizes of 2 and
        more; one process under DDP is only the reference for the efficiency).
        """
        ddp = [r for r in self.ddp_results if r.world_size > 1]
        if not self.records and not ddp and not self.ncu_profiles:  # one-process DDP runs are no case
            self.save_message = "baseline not saved: no case was measured"
            return self.save_message
        if incomplete:
            self.save_message = f"baseline not saved: {'; '.join(incomplete)}; run the whole selection again to save"
            return self.save_message
        refusals = self.save_refusals(failed_tests)
        if refusals and not self.options.force_save:
            self.save_message = f"baseline not saved: {'; '.join(refusals)}; fix that, or pass --force-save-baseline"
            return self.save_message
        cases: dict[str, list[CaseBaseline]] = {}
        environments: dict[bool, dict[str, Any]] = {}

        def env(on_gpu: bool) -> dict[str, Any]:  # read once per device: it asks git, NVML and torch
            if on_gpu not in environments:
                environments[on_gpu] = environment(self.device(on_gpu))
            return environments[on_gpu]

        for record in self.records.values():
            cases.setdefault(record.case.arch, []).append(_case_baseline(record, env(record.case.on_gpu)))
        for result in ddp:  # gloo runs on CPU machines
            cases.setdefault(self.running_arch or CPU, []).append(
                _ddp_case_baseline(result, env(torch.cuda.is_available()))
            )
        ncu: dict[str, list[NcuBaseline]] = {}
        for profile in self.ncu_profiles.values():
            ncu.setdefault(self.running_arch or CPU, []).append(_ncu_baseline(profile, env(torch.cuda.is_available())))
        saved = []
        for arch in sorted(set(cases) | set(ncu)):
            path = baseline_path(self.options.baseline_dir, arch)
            arch_cases, arch_ncu = cases.get(arch, []), ncu.get(arch, [])
            ratios = self.ratio_table(on_gpu=arch != CPU) if arch_cases else {}
            update_baseline(path, arch, partial(_merged, cases=arch_cases, ratios=ratios, ncu=arch_ncu))
            self._baselines.pop(arch, None)
            counts = [
                f"{n} {what}" for n, what in ((len(arch_cases), "case(s)"), (len(arch_ncu), "ncu profile(s)")) if n
            ]
            saved.append(f"{' and '.join(counts)} to {path}")
        forced = " (forced past: " + "; ".join(refusals) + ")" if refusals else ""
        self.save_message = f"baseline saved: {', '.join(saved)}{forced}"
        return self.save_message


def _merged(
    current: BaselineFile,
    *,
    cases: list[CaseBaseline],
    ratios: dict[str, dict[str, dict[str, float]]],
    ncu: list[NcuBaseline],
) -> BaselineFile:
    return current.with_measurements(cases, ratios).with_ncu(ncu)


def _ncu_baseline(profile: NcuProfile, env: dict[str, Any]) -> NcuBaseline:
    return NcuBaseline(
        preset=profile.preset,
        combo=profile.combo,
        batch_size=profile.batch_size,
        provenance="measured",
        totals={k: float(f"{v:.6g}") for k, v in profile.totals.items()},
        ncu_version=profile.ncu_version,
        replay=profile.settings.replay,
        clock_control=profile.settings.clock_control,
        groups=list(profile.settings.groups),
        environment=env,
    )


def _timing_fields(samples_ms: list[float]) -> dict[str, Any]:
    """The stored timing of a case: its samples and their median, IQR and minimum, in ms."""
    stats = Stats.from_samples(samples_ms)
    return {
        "samples_ms": [round(s, 3) for s in samples_ms],
        "median_ms": round(stats.median, 3),
        "iqr_ms": round(stats.iqr, 3),
        "min_ms": round(stats.min, 3),
    }


def _ddp_case_baseline(result: DdpResult, env: dict[str, Any]) -> CaseBaseline:
    energy = result.mean_energy_j_per_iter
    return CaseBaseline(
        preset=result.preset,
        combo=result.combo,
        batch_size=result.batch_per_rank,
        world_size=result.world_size,
        provenance="measured",
        **_timing_fields(result.slowest_ms),
        peak_allocated_bytes=result.max_peak_allocated_bytes,
        peak_reserved_bytes=None,
        energy_j_per_iter=None if energy is None else round(energy, 2),
        energy_samples_j=[],
        tflops=0.0,
        environment={**env, "backend": result.backend, "exposed_comm_ms": round(result.exposed_comm_ms, 3)},
    )


def _case_baseline(record: CaseRecord, env: dict[str, Any]) -> CaseBaseline:
    r = record.result
    # Only a figure with a finite bound is stored: an unusable one would fail the file's checks.
    energy = r.energy if r.energy is not None and 0 <= r.energy.quantisation < 1 else None
    return CaseBaseline(
        preset=r.preset,
        combo=r.combo,
        batch_size=r.batch_size,
        provenance="measured",
        **_timing_fields(r.samples_ms),
        peak_allocated_bytes=r.peak_allocated_bytes,
        peak_reserved_bytes=r.peak_reserved_bytes,
        energy_j_per_iter=None if energy is None else round(energy.j_per_iter, 3),
        energy_samples_j=[],
        tflops=round(r.tflops, 3),
        environment={**env, **r.gpu_summary(), "energy_counter_period_ms": r.energy_period_ms},
        process_medians_ms=[round(m, 3) for m in record.process_medians_ms],
        noise=Noise(between_process_rel=_rounded(between_process_spread(record.process_medians_ms))),
        energy_method=ENERGY_METHOD if energy else "",
        energy_quantisation=None if energy is None else round(energy.quantisation, 5),
        energy_replicates_j=[] if energy is None else [round(x, 3) for x in energy.replicates],
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 5)
