"""What a session measures: the single-GPU campaigns, the pytest-benchmark timing, DDP and ncu results.

One interleaved campaign runs per (device, preset, batch size), lazily, the first time a case of
it asks for its result; in worker processes, and alternating with a revision for an A/B run, where
the options say so. :class:`Measuring` keeps every case's :class:`~meddpm.suite.cases.CaseRecord`,
the data-parallel results and the Nsight Compute profiles. It may import
:mod:`meddpm.suite.cases`, the suite's options and the rooms below the suite; nothing of the
session's judging, results files or saving.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence

import pytest
import torch

from meddpm.errors import UserError
from meddpm.judge.baseline import CaseKey, Tolerances
from meddpm.measure.campaign.interleaved import Campaign
from meddpm.measure.campaign.protocol import MeasuringCampaign, Progress
from meddpm.measure.campaign.result import CarriedEnergy, ComboResult
from meddpm.measure.campaign.sampling import SamplingResult, estimate_sampling, time_sampling
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.campaign.time_split import TimeSplit
from meddpm.measure.machine.compile_cache import activate, use_root
from meddpm.measure.machine.environment import environment
from meddpm.measure.machine.timing import synchronize
from meddpm.measure.processes.campaign import ProcessCampaign
from meddpm.measure.processes.ddp import DdpResult
from meddpm.measure.processes.revision import sources
from meddpm.measure.processes.sides import sides_line
from meddpm.measure.profiling.ncu import NcuProfile, NcuSettings, profile_combo
from meddpm.measure.profiling.ncu_metrics import family_of
from meddpm.model.config import ModelConfig
from meddpm.report.outlying import process_cards
from meddpm.report.tables import stop_reasons
from meddpm.run.combos import get_combo
from meddpm.suite.cases import CPU, CaseRecord, PerfCase
from meddpm.suite.options import SuiteOptions
from meddpm.suite.selection import CampaignKey, campaign_key


def device_for(on_gpu: bool) -> torch.device:
    """The current CUDA device, or the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")


class Measuring:
    """A session's measurements: campaigns by (device, preset, batch), case records, DDP results, ncu profiles."""

    def __init__(
        self,
        options: SuiteOptions,
        running_arch: str | None,
        write_line: Callable[[str], None],
        tolerances: Callable[[str, CaseKey], Tolerances] = lambda arch, key: Tolerances(),
    ):
        self.options = options
        self.running_arch = running_arch  # None where no GPU is visible
        self.write_line = write_line
        self.tolerances = tolerances  # a case's own, by architecture and case: its energy threshold, for carrying
        self.records: dict[str, CaseRecord] = {}  # by PerfCase.id
        self.ddp_results: list[DdpResult] = []
        self.ncu_profiles: dict[str, NcuProfile] = {}  # by PerfCase.id
        self._ncu_errors: dict[str, UserError] = {}
        self._campaigns: dict[CampaignKey, MeasuringCampaign] = {}
        self._campaign_errors: dict[CampaignKey, UserError] = {}
        self._interrupted: set[CampaignKey] = set()  # campaigns cut short by Ctrl-C (or SIGTERM)
        self._selected: dict[CampaignKey, list[str]] | None = None  # None: every combo --combos allows
        self.started = time.perf_counter()
        self.time_split = TimeSplit()  # where the session's time went (meddpm.measure.campaign.time_split)
        use_root(options.compile_cache)

    @property
    def wall_s(self) -> float:
        """Seconds since the session's measuring was set up (pytest_configure)."""
        return time.perf_counter() - self.started

    def select(self, combos: dict[CampaignKey, list[str]]) -> None:
        """Measure only ``combos`` in each campaign (meddpm.suite.selection): what the selected cases need."""
        self._selected = combos

    @property
    def anything(self) -> bool:
        """Whether this session measured a case, a DDP run or an ncu profile: something to report or save."""
        return bool(self.records or self.ddp_results or self.ncu_profiles)

    # --- single-GPU (or CPU) campaigns ------------------------------------------------
    def campaign(self, on_gpu: bool, preset: str, batch_size: int) -> MeasuringCampaign:
        """The interleaved measurement of every selected combo of ``preset``, run on first use."""
        key = campaign_key(on_gpu, preset, batch_size)
        if key not in self._campaigns and key not in self._campaign_errors:
            self._run_campaign(on_gpu, preset, batch_size, key)
        if key in self._campaign_errors:
            # Every case of a failed campaign reports the same one-line error.
            raise self._campaign_errors[key]
        return self._campaigns[key]

    def _run_campaign(self, on_gpu: bool, preset: str, batch_size: int, key: CampaignKey) -> None:
        """Run the campaign of ``key`` into ``_campaigns``, or its one-line error into ``_campaign_errors``."""
        combos = self.options.combos_for(on_gpu)
        if self._selected is not None and self._selected.get(key):
            combos = tuple(self._selected[key])
        settings = self.options.campaign_settings(on_gpu)
        self._announce(on_gpu, preset, batch_size, combos, settings)
        config, device = ModelConfig.preset(preset), device_for(on_gpu)
        with contextlib.ExitStack() as checkouts:
            try:
                with self.time_split.timed("start-up"):
                    campaign = self._new_campaign(config, combos, device, batch_size, settings, checkouts)
                # Kept before it runs, so that close() frees what a campaign that fails part-way built.
                self._campaigns[key] = campaign
                try:
                    results = campaign.run(self._progress)
                finally:
                    self.time_split.add_all(campaign.time_split.seconds)
            except UserError as exc:  # a revision that cannot be checked out fails before any campaign exists
                self._campaign_errors[key] = exc
                return
            except KeyboardInterrupt:
                self._keep_interrupted(key)
                raise
        self.write_line(f"meddpm: {preset} b{batch_size}: {stop_reasons(results.values())}")
        for result in results.values():
            if result.compile:
                self.write_line(f"meddpm: {result.compile_line()}")
        if isinstance(campaign, ProcessCampaign) and len(campaign.sources) == 2:
            self.write_line(f"meddpm: A/B sides: {sides_line(campaign.sides())}")

    def sides(self) -> list[dict]:
        """Each side of the first campaign in worker processes (its code, interpreter, extra variables and its
        first worker's environment), A first; empty where every campaign ran in this process."""
        in_workers = [c for c in self._campaigns.values() if isinstance(c, ProcessCampaign)]
        return in_workers[0].sides() if in_workers else []

    def _keep_interrupted(self, key: CampaignKey) -> None:
        """Record what the interrupted campaign of ``key`` had timed, each case's outcome "interrupted".

        Its rounds (or processes) are fewer than the run asked for, and no test judged them; the
        results file keeps them so that nothing measured is lost, marked so that nobody reads
        them as a full run.
        """
        campaign = self._campaigns.get(key)
        if campaign is None:  # interrupted while checking the revision out: nothing was measured
            return
        self._interrupted.add(key)
        device, preset, batch_size = key
        arch = CPU if device == CPU else self.running_arch or device
        for combo, runs in campaign.measurements().items():
            if not runs.samples_ms:  # built or warmed up, never timed
                continue
            result = runs.pooled
            result.stop_reason = result.stop_reason or f"interrupted after {len(result.samples_ms)} rounds"
            case = PerfCase(arch, preset, combo, batch_size)
            self.records.setdefault(
                case.id, CaseRecord(case, result, outcome="interrupted", process_medians_ms=runs.process_medians_ms)
            )

    def mark_interrupted(self) -> int:
        """Mark the cases measured but never judged "interrupted" (the session was); returns how many are so marked."""
        for record in self.records.values():
            if record.outcome == "measured":
                record.outcome = "interrupted"
        return sum(r.outcome == "interrupted" for r in self.records.values())

    def _announce(
        self, on_gpu: bool, preset: str, batch_size: int, combos: Sequence[str], settings: CampaignSettings
    ) -> None:
        o = self.options
        against = o.other.label((o.last_good.describe() if o.last_good else o.compare_to) or "this tree")
        plural = "es" if o.processes != 1 else ""
        processes = f" in {o.processes} process{plural}" + (f" each, alternating with {against}" if o.ab else "")
        if o.until_detectable is not None:
            processes += f" (at most; a combo stops once a {o.until_detectable:.1%} slowdown is detectable)"
        self.write_line(
            f"\nmeddpm: measuring {preset} b{batch_size} on {self.running_arch if on_gpu else CPU}{processes}: "
            f"{', '.join(combos)}; {settings.warmup} warm-up iterations each, then "
            f"{settings.min_rounds}-{settings.max_rounds} interleaved rounds to "
            f"{settings.stop_rule} within {settings.budget_s:.0f} s"
        )

    def _new_campaign(
        self,
        config: ModelConfig,
        combos: Sequence[str],
        device: torch.device,
        batch_size: int,
        settings: CampaignSettings,
        checkouts: contextlib.ExitStack,
    ) -> MeasuringCampaign:
        """In this process, or in worker processes of the working tree (and of ``--compare-to``'s revision)."""
        o = self.options
        if not o.in_processes:
            return Campaign(config, [get_combo(c) for c in combos], device, batch_size=batch_size, settings=settings)
        measured = checkouts.enter_context(sources(o.compare_to, o.other))
        return ProcessCampaign(
            config,
            combos,
            device,
            batch_size=batch_size,
            settings=settings,
            processes=o.processes,
            sources=measured,
            until_detectable=o.until_detectable,
            carried_energy=self._carried_energy(config.name, combos, batch_size, device, settings),
        )

    def _carried_energy(
        self, preset: str, combos: Sequence[str], batch_size: int, device: torch.device, settings: CampaignSettings
    ) -> dict[str, CarriedEnergy]:
        """Side B's energy by combo as the last good run measured it, for its first process not to measure it again
        where side A's agrees (:meth:`~meddpm.measure.processes.campaign.ProcessCampaign.energy_disagreement`);
        none in an A/B against another revision, where side B runs under another interpreter or variables, or where
        this card or its software is not that run's (said in one line)."""
        good, arch = self.options.last_good, self.running_arch
        if good is None or arch is None or self.options.other.given or not settings.energy or device.type != "cuda":
            return {}
        keys = {combo: CaseKey(preset, combo, batch_size) for combo in combos}
        thresholds = {str(key): self.tolerances(arch, key).energy_rel for key in keys.values()}
        carried, differs = good.carried_energy(thresholds, environment(device))
        if differs:
            self.write_line(f"meddpm: side B measures its energy again: not on {good.describe()}'s machine ({differs})")
        return {combo: carried[str(key)] for combo, key in keys.items() if str(key) in carried}

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
        runs = campaign.measurements()[case.combo]
        record = self.records.setdefault(
            case.id,
            CaseRecord(
                case,
                runs.pooled,
                process_medians_ms=runs.process_medians_ms,
                process_cards=process_cards(campaign, case.combo),
                run_counts=runs.run_counts,
                run_profiles=runs.run_profiles,
                run_module_bytes=runs.run_module_bytes,
            ),
        )
        return record.result

    def time_with_benchmark(self, case: PerfCase, request: pytest.FixtureRequest) -> None:
        """Let pytest-benchmark time a few synchronised iterations itself and store our figures, where a run keeps
        them (``--perf-benchmark-rounds``, by default only with pytest-benchmark's storing or comparing options).

        Its own rounds measure host wall time around a synchronised iteration; our CUDA-event
        samples, statistics, NVML readings and verdicts go into ``extra_info``, so its JSON,
        comparisons and histograms carry everything. Cases measured in worker processes have no
        model in this process, and pytest-benchmark records nothing for them.
        """
        campaign = self.campaign(case.on_gpu, case.preset, case.batch_size)
        step, device = campaign.steps.get(case.combo), campaign.device
        if step is None or not self.options.benchmark_rounds:  # measured in workers, or nobody keeps its rounds
            return
        benchmark = request.getfixturevalue("benchmark")

        def synchronised_iteration() -> None:
            step()
            synchronize(device)

        with self.time_split.timed("measuring"):
            benchmark.pedantic(synchronised_iteration, rounds=self.options.benchmark_rounds, iterations=1)
        benchmark.extra_info.update(self.records[case.id].payload())

    def ratio_table(self, on_gpu: bool) -> dict[str, dict[str, dict[str, float]]]:
        """Interleaved time ratios combo / baseline per preset and batch, from each campaign."""
        table: dict[str, dict[str, dict[str, float]]] = {}
        for (device, preset, batch), campaign in self._campaigns.items():
            if (device != CPU) != on_gpu or "baseline" not in campaign.results:
                continue
            if (device, preset, batch) in self._interrupted:  # a ratio of unequal, cut-short rounds
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

    def sample(self, case: PerfCase, limit_s: float | None = None) -> SamplingResult:
        """A full reverse diffusion's time of ``case``'s combo: estimated from a short run of steps (timed whole
        where the estimate did not settle and is over ``limit_s``, the budget it is judged by), or timed whole with
        ``--perf-full-sample``; its compile and warm-up, and its timed steps, counted in the time split."""
        combo, device = get_combo(case.combo), device_for(case.on_gpu)
        if combo.compile:
            activate(None, device)
        config = ModelConfig.preset(case.preset)
        t0 = time.perf_counter()
        if self.options.full_sample:
            result = time_sampling(config, combo, device)
        else:
            result = estimate_sampling(config, combo, device, limit_s=limit_s)
        self.time_split.add("compiling" if combo.compile else "warm-up", result.warmup_s)
        self.time_split.add("sampling", time.perf_counter() - t0 - result.warmup_s)
        return result

    # --- data-parallel runs and Nsight Compute ----------------------------------------
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
            try:
                with self.time_split.timed("profiling"):
                    self.ncu_profiles[case.id] = self._profile(case, settings)
            except UserError as exc:
                self._ncu_errors[case.id] = exc
                raise
            profile = self.ncu_profiles[case.id]
            passes = ", ".join(f"{name} {s:.0f} s" for name, s in profile.wall_s.items())
            self.write_line(f"meddpm: ncu {case.id}: {len(profile.kernels)} kernel launches; ncu took {passes}")
        return self.ncu_profiles[case.id]

    def _profile(self, case: PerfCase, settings: NcuSettings) -> NcuProfile:
        device = device_for(True)
        props = torch.cuda.get_device_properties(device)
        self.write_line(
            f"\nmeddpm: ncu {case.id}: {settings.replay} replay, groups {','.join(settings.groups)}, "
            f"clock control {settings.clock_control}, {settings.warmup} warm-up iterations..."
        )
        return profile_combo(
            case.preset,
            case.combo,
            family=family_of((props.major, props.minor)),
            out_dir=self.options.results_dir / "ncu",
            settings=settings,
            batch_size=case.batch_size,
            device_index=device.index or 0,
        )

    def close(self) -> None:
        """Free every campaign's models and GPU memory."""
        for campaign in self._campaigns.values():
            campaign.close()
