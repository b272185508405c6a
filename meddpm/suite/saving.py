"""Saving a session as the new baseline: whether it may be saved, and what each measurement becomes.

:func:`save` merges every measured case, data-parallel result (world sizes of 2 and more) and
Nsight Compute profile into its architecture's baseline file, unless the session is incomplete or
:func:`save_refusals` finds a reason not to (failed tests, unreliable or throttled cases) and
``--force-save-baseline`` was not given. It may import :mod:`meddpm.suite.measuring`,
:mod:`meddpm.suite.judging` (for the stored files), :mod:`meddpm.suite.cases`, the baseline files
and the rooms below the suite; nothing of the session's results files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache, partial
from typing import Any

import torch

from meddpm.judge.baseline import BaselineFile, CaseBaseline, NcuBaseline, Noise, update_baseline
from meddpm.judge.counts import count_ranges
from meddpm.judge.stored_profile import compact_profile
from meddpm.measure.energy.counter import ENERGY_METHOD
from meddpm.measure.machine.environment import environment
from meddpm.measure.processes.ddp import DdpResult
from meddpm.measure.profiling.ncu import NcuProfile
from meddpm.measure.statistics.compare import between_process_spread
from meddpm.measure.statistics.descriptive import Stats
from meddpm.suite.cases import CPU, CaseRecord
from meddpm.suite.judging import StoredBaselines
from meddpm.suite.measuring import Measuring, device_for


def save_refusals(records: Iterable[CaseRecord], failed_tests: int) -> list[str]:
    """Why this run must not become a baseline (empty if it may)."""
    reasons = [f"{failed_tests} test(s) failed"] if failed_tests else []
    for record in records:
        r = record.result
        if not r.reliable:
            reasons.append(f"{record.case.id} is unreliable (rel. IQR {r.stats.rel_iqr:.1%})")
        if r.throttle_reasons:
            reasons.append(f"{record.case.id} was throttled ({', '.join(r.throttle_reasons)})")
    return reasons


def save(
    measured: Measuring, baselines: StoredBaselines, failed_tests: int, incomplete: Sequence[str], force: bool
) -> str:
    """Save every measured case into its architecture's file, unless refused; returns the outcome.

    ``incomplete`` says why the session did not run all it selected (interrupted, stopped
    early); such a session is never saved, not even with ``force`` (--force-save-baseline), because
    a partial campaign's rounds are not the ones a full run would time.
    Data-parallel results join as cases keyed ``preset/combo/bN/ddpW`` (world sizes of 2 and
    more; one process under DDP is only the reference for the efficiency).
    """
    ddp = [r for r in measured.ddp_results if r.world_size > 1]
    if not measured.records and not ddp and not measured.ncu_profiles:  # one-process DDP runs are no case
        return "baseline not saved: no case was measured"
    if incomplete:
        return f"baseline not saved: {'; '.join(incomplete)}; run the whole selection again to save"
    refusals = save_refusals(measured.records.values(), failed_tests)
    if refusals and not force:
        return f"baseline not saved: {'; '.join(refusals)}; fix that, or pass --force-save-baseline"
    cases, ncu = _baselines_by_arch(measured, ddp)
    saved = [
        _save_arch(measured, baselines, arch, cases.get(arch, []), ncu.get(arch, []))
        for arch in sorted(set(cases) | set(ncu))
    ]
    forced = " (forced past: " + "; ".join(refusals) + ")" if refusals else ""
    return f"baseline saved: {', '.join(saved)}{forced}"


def _baselines_by_arch(
    measured: Measuring, ddp: list[DdpResult]
) -> tuple[dict[str, list[CaseBaseline]], dict[str, list[NcuBaseline]]]:
    """The cases and ncu totals to store, by the architecture whose file they go to."""

    @cache
    def env(on_gpu: bool) -> dict[str, Any]:  # read once per device: it asks git, NVML and torch
        return environment(device_for(on_gpu))

    cases: dict[str, list[CaseBaseline]] = {}
    for record in measured.records.values():
        cases.setdefault(record.case.arch, []).append(_case_baseline(record, env(record.case.on_gpu)))
    for result in ddp:  # gloo runs on CPU machines
        cases.setdefault(measured.running_arch or CPU, []).append(
            _ddp_case_baseline(result, env(torch.cuda.is_available()))
        )
    ncu: dict[str, list[NcuBaseline]] = {}
    for profile in measured.ncu_profiles.values():
        ncu.setdefault(measured.running_arch or CPU, []).append(_ncu_baseline(profile, env(torch.cuda.is_available())))
    return cases, ncu


def _save_arch(
    measured: Measuring, baselines: StoredBaselines, arch: str, cases: list[CaseBaseline], ncu: list[NcuBaseline]
) -> str:
    """Merge ``arch``'s cases and ncu totals into its file; returns what went where."""
    path = baselines.path(arch)
    ratios = measured.ratio_table(on_gpu=arch != CPU) if cases else {}
    update_baseline(path, arch, partial(_merged, cases=cases, ratios=ratios, ncu=ncu))
    baselines.forget(arch)
    counts = [f"{n} {what}" for n, what in ((len(cases), "case(s)"), (len(ncu), "ncu profile(s)")) if n]
    return f"{' and '.join(counts)} to {path}"


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
        environment={**env, "backend": result.backend, "exposed_comm_ms": _rounded(result.exposed_comm_ms)},
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
        counts=count_ranges(record.run_counts),
        profile=compact_profile(record.run_profiles, record.run_module_bytes) if record.run_profiles else None,
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 5)
