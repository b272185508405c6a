"""Measuring combos of one preset, interleaved: the engine behind ``meddpm-bench`` and the suite.

All combos of a run are built and warmed up first, then timed in rounds that run each
combo once (A B C A B C ...), so slow drift of the machine (clocks, temperature, other
tenants) hits every combo alike and the ratios between them stay honest. A combo leaves the
rotation once its relative IQR is under a target and, where a median precision is asked for, the
standard error of its median is under that (see :func:`meddpm.measure.statistics.descriptive.median_rel_se`); the
others go on until they do, or the time budget or the round limit is reached. A combo still
noisier than the IQR target is reported as unreliable.

A run of several processes first warms the card in its first process: the combos run in turns, untimed, until
the card's temperature holds (:data:`PREHEAT`), so that process times them at the temperature the later ones
start from.

Energy comes after the rounds, from one block of back-to-back iterations per combo, long enough
that a step of the card's energy counter is under 1 % of the block's energy (see
:mod:`meddpm.measure.energy.counter`): a single iteration is shorter than the counter's period and
reads 0 J or a whole step.

Last, one iteration of each combo runs under the profiler, for its kernels (aten operators on a CPU)
and the counts a baseline gates on (:mod:`meddpm.measure.profiling.iteration`, docs/explain.md).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence

import torch

from meddpm.errors import UserError
from meddpm.measure.campaign.flops import forward_flops, train_step_flops
from meddpm.measure.campaign.protocol import Progress, Source
from meddpm.measure.campaign.result import ComboResult, ComboRuns
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.campaign.time_split import TimeSplit
from meddpm.measure.energy.block import measure_soaked_block, probe_combo
from meddpm.measure.energy.heat_soak import SoakPlan, settled, spanning
from meddpm.measure.energy.power_sampler import PowerSampler, poll_period
from meddpm.measure.machine.compile_cache import CompileCache, activate, inductor_counters
from meddpm.measure.machine.nvml import Gpu, GpuState, open_gpu
from meddpm.measure.machine.timing import synchronize, time_once, time_synchronized
from meddpm.measure.machine.warmup import warm_up
from meddpm.measure.profiling.iteration import profile_iteration
from meddpm.measure.statistics.descriptive import Stats
from meddpm.model.config import ModelConfig
from meddpm.run.combos import Combo
from meddpm.run.train import TrainStep

# The median's standard error is judged only after this much timed time per combo: estimated from a
# handful of rounds it reads too low (docs/statistics.md).
_PRECISION_MIN_TIMED_S = 1.0

# The warm-up of a run's first process: the temperature read after every iteration, the turns grouped into windows
# of at least PREHEAT_WINDOW_S (a window's mean over many readings, as the soak's: single readings swing by degrees),
# and the card warm once the windows' means over at least 5 s lie within 2 °C, as an energy block's soak judges
# them, or after a minute. A power-capped combo runs faster on a cool card than at the temperature its rounds hold
# it at (docs/statistics.md).
PREHEAT = SoakPlan(window_s=5.0, tolerance_c=2.0, max_s=60.0)
PREHEAT_WINDOW_S = 1.0

# What the CPU allocator says when a request cannot be met (Linux, then Windows wording).
_CPU_OUT_OF_MEMORY = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory")


class Campaign:
    """Interleaved measurement of several combos of one preset on one device, in this process.

    A :class:`~meddpm.measure.campaign.protocol.MeasuringCampaign` with one run per combo (``results``, filled as
    it is measured) and no sources: it measures the code this process imported. The combos' training steps stay
    alive after :meth:`run` (for a caller that times them again, such as pytest-benchmark) until :meth:`close`.
    """

    def __init__(
        self,
        config: ModelConfig,
        combos: Sequence[Combo],
        device: torch.device,
        *,
        batch_size: int = 1,
        settings: CampaignSettings = CampaignSettings(),
        before_first_iteration: Callable[[], None] | None = None,
    ):
        if not combos:
            raise UserError("no combos to measure")
        self.config = config
        self.combos = list(combos)
        self.device = device
        self.batch_size = batch_size
        self.settings = settings
        # Where compiled artifacts are kept, set by run() where a combo compiles (meddpm.measure.machine.compile_cache).
        self.compile_cache: CompileCache | None = None
        self.steps: dict[str, TrainStep] = {}
        self.results: dict[str, ComboResult] = {}
        self._own_bytes: dict[str, int] = {}
        self._gpu: Gpu | None = None
        self._gpu_note = ""
        # Called once, after the first combo is built and before any iteration: a worker waits there for the one
        # before it to exit (meddpm.measure.processes.launch), so that nothing else runs on the GPU beside them.
        self._before_first_iteration = before_first_iteration

    def run(self, on_progress: Callable[[Progress], None] | None = None) -> dict[str, ComboResult]:
        """Build and warm up every combo, then time interleaved rounds; returns results by combo."""
        notify = on_progress or (lambda _: None)
        if any(combo.compile for combo in self.combos):
            self.compile_cache = activate(None, self.device)
        self._gpu, self._gpu_note = open_gpu(self.device)
        current = ""
        try:
            for combo in self.combos:
                current = combo.name
                self._prepare(combo, notify)
            current = ""
            if self.settings.preheat:
                self._preheat(notify)
            self._rounds(notify)
            if self.settings.energy:
                self._energy(notify)
            if self.settings.profile:
                self._profile()
        except RuntimeError as exc:  # torch.cuda.OutOfMemoryError is one
            if not _out_of_memory(exc):
                raise
            self.close()
            where = f"combo {current!r}" if current else "the interleaved rounds"
            memory = "GPU" if self.device.type == "cuda" else "CPU (RAM)"
            raise UserError(
                f"out of {memory} memory in {where} on preset {self.config.name!r} at batch size {self.batch_size}; "
                "try a smaller batch size or preset, or fewer combos at once"
            ) from None
        return self.results

    @property
    def sources(self) -> tuple[Source, ...]:
        """None: the code measured is this process's own."""
        return ()

    def measurements(self, source: Source | None = None) -> dict[str, ComboRuns]:
        """Each combo's one run, measured in this process (which has no other source than None)."""
        if source is not None:
            raise ValueError(f"an in-process campaign measures no source of its own, not {source.label}")
        return {name: ComboRuns([result]) for name, result in self.results.items()}

    @property
    def time_split(self) -> TimeSplit:
        """Where the combos' time went, by phase (meddpm.measure.campaign.time_split)."""
        split = TimeSplit()
        split.add_all(r.phase_s for r in self.results.values())
        return split

    def ratio(self, combo: str, reference: str) -> Stats:
        """Statistics of the per-round time ratio combo / reference (paired by round)."""
        runs = self.measurements()
        return runs[combo].ratio_to(runs[reference])

    def close(self) -> None:
        """Free the training steps and cached GPU memory."""
        self.steps.clear()
        _release_memory(self.device)

    # --- phases ---------------------------------------------------------------------
    def _prepare(self, combo: Combo, notify: Callable[[Progress], None]) -> None:
        _release_memory(self.device)
        before = _allocated(self.device)
        t0 = time.perf_counter()
        step = TrainStep(self.config, combo, self.batch_size, self.device)
        setup_s = time.perf_counter() - t0
        # A step still recording its CUDA graphs is not timed: fewer warm-ups would put a recording in a round.
        warmup = max(self.settings.warmup, step.calls_before_replay)
        warmup_ms: list[float] = []

        def warm(i: int) -> None:
            warmup_ms.append(time_once(step, self.device))
            notify(Progress("warmup", combo.name, i + 1, warmup, f"{warmup_ms[-1] / 1e3:.1f} s"))

        if self._before_first_iteration is not None:
            self._before_first_iteration()
            self._before_first_iteration = None
        counted = inductor_counters()
        recording_peak = warm_up(step, self.device, warmup, warm)
        graph_peak = None if recording_peak is None else recording_peak - before
        first_s, rest_s = sum(warmup_ms[:1]) / 1e3, sum(warmup_ms[1:]) / 1e3
        phase_s = {"start-up": setup_s, "compiling" if combo.compile else "warm-up": first_s}
        phase_s["warm-up"] = phase_s.get("warm-up", 0.0) + rest_s
        self.steps[combo.name] = step
        # Parameters, gradients' absence and Adam state: what this combo keeps between iterations.
        self._own_bytes[combo.name] = _allocated(self.device) - before
        self.results[combo.name] = ComboResult(
            preset=self.config.name,
            combo=combo.name,
            batch_size=self.batch_size,
            volume=self.config.volume,
            math_precision=combo.math_precision,
            samples_ms=[],
            warmup_ms=warmup_ms,
            setup_s=setup_s,
            flops_per_iter=train_step_flops(self.config, self.batch_size),
            rel_iqr_target=self.settings.rel_iqr_target,
            energy_note="" if self._gpu else self._gpu_note,
            peak_allocated_bytes=graph_peak,
            sample_flops=self.config.timesteps * forward_flops(self.config),
            phase_s=phase_s,
            compile=self._compiled(first_s, counted) if combo.compile else {},
        )

    def _compiled(self, first_s: float, counted_before: dict[str, int]) -> dict[str, object]:
        """What compiling a combo cost: its first iteration's seconds, whether this workload was compiled in the
        cache before ("hit", "miss", "off" without one) and Inductor's and AOTAutograd's cache hits and misses."""
        cache = self.compile_cache
        state = "off" if cache is None else "hit" if cache.warm else "miss"
        if cache is not None:
            cache.mark_compiled()
        now = inductor_counters()
        return {"seconds": first_s, "cache": state, **{k: v - counted_before.get(k, 0) for k, v in now.items()}}

    def _preheat(self, notify: Callable[[Progress], None]) -> None:
        """Run the combos in turns, untimed, until the card's temperature holds over the last windows of turns
        (:data:`PREHEAT`, :data:`PREHEAT_WINDOW_S`); recorded in every combo's ``preheat`` and counted as its warm-up.
        Nothing to do without a card's temperature (the CPU, NVML missing)."""
        gpu = self._gpu
        if gpu is None:
            return
        started = time.perf_counter()
        history = [(started, gpu.temperature_c())]
        edges = [started]
        steady = False
        while not steady and history[-1][0] - started < PREHEAT.max_s:
            for name, step in self.steps.items():
                t0 = time.perf_counter()
                step()
                synchronize(self.device)
                self._spent(name, "warm-up", t0)
                history.append((time.perf_counter(), gpu.temperature_c()))
            if history[-1][0] - edges[-1] >= PREHEAT_WINDOW_S:
                edges.append(history[-1][0])
                steady = settled(history, _last_windows(edges, PREHEAT), PREHEAT)
        record = {
            "start_c": history[0][1],
            "end_c": history[-1][1],
            "seconds": round(history[-1][0] - started, 1),
            "settled": steady,
        }
        for result in self.results.values():
            result.preheat = dict(record)
        windows = len(edges) - 1
        notify(Progress("preheat", "", windows, windows, next(iter(self.results.values())).preheat_line()))

    def _rounds(self, notify: Callable[[Progress], None]) -> None:
        s = self.settings
        started = time.perf_counter()
        timing = dict(self.steps)  # the combos still in the rotation
        reason = f"round limit of {s.max_rounds} reached"
        for done in range(1, s.max_rounds + 1):
            round_start = time.perf_counter()
            for name, step in timing.items():
                t0 = time.perf_counter()
                self._time_one(name, step)
                self._spent(name, "measuring", t0)
            elapsed = time.perf_counter() - started
            worst = max((self.results[name] for name in timing), key=lambda r: r.stats.rel_iqr)
            detail = f"worst rel. IQR {worst.stats.rel_iqr:.1%} ({worst.combo})" if done > 1 else ""
            notify(Progress("round", "", done, s.max_rounds, detail))
            # Fixed rounds (min = max) run to the end: "converged" would claim a stop rule that never ran.
            if done < s.min_rounds or s.min_rounds == s.max_rounds:
                continue
            for name in [name for name in timing if self._settled(self.results[name])]:
                self.results[name].stop_reason = f"converged after {done} rounds"
                del timing[name]
            if not timing:
                break
            if elapsed + (time.perf_counter() - round_start) > s.budget_s:
                reason = f"time budget of {s.budget_s:.0f} s spent after {done} rounds"
                break
        for name in timing:
            self.results[name].stop_reason = reason

    def _settled(self, result: ComboResult) -> bool:
        """Whether ``result`` meets the IQR target and, if one is set, the median's precision."""
        if not result.reliable:
            return False
        if not self.settings.median_precision:
            return True
        timed_s = sum(result.samples_ms) / 1e3
        return timed_s >= _PRECISION_MIN_TIMED_S and result.median_rel_se <= self.settings.median_precision

    def _energy(self, notify: Callable[[Progress], None]) -> None:
        """Per combo, windows of back-to-back iterations until the card's temperature has settled over the last
        of them (:func:`meddpm.measure.energy.block.run_soaked_block`), planned from the counter's period and a
        probe's time per iteration.

        The combos take their turns in the order of their probed power, highest first. The rounds end with the
        fastest combo alone, usually the hungriest, so the first block starts at its own temperature and the card
        then cools from one combo's temperature to the next in small steps; lowest first, the first block had
        to cool from there to the coolest combo's and the card then warmed again, for longer blocks and the same
        J/iter (docs/energy.md, "The phase in one run").
        """
        gpu, s = self._gpu, self.settings
        if gpu is None:
            return
        period = poll_period(gpu.energy_mj)
        if period is None:
            for r in self.results.values():
                r.energy_note = "the energy counter is unsupported on this GPU or did not advance in 1.5 s"
            return
        probes = {}
        for name, step in self.steps.items():
            t0 = time.perf_counter()
            probes[name] = probe_combo(step, self.device, PowerSampler(gpu), self.results[name].stats.median / 1e3)
            self._spent(name, "waiting", t0)
        order = sorted(self.steps, key=lambda name: probes[name].power_w, reverse=True)
        detail = f"{s.energy_windows} windows to a {s.energy_error * 100:g}% counter bound, once the temperature holds"
        for done, name in enumerate(order, 1):
            notify(Progress("energy", name, done, len(order), f"{detail} (probed at {probes[name].power_w:.0f} W)"))
            t0 = time.perf_counter()
            block = measure_soaked_block(
                self.steps[name],
                self.device,
                PowerSampler(gpu),
                period,
                probes[name].iteration_s,
                s.energy_error,
                s.energy_windows,
                gpu.temperature_c,
                s.energy_soak,
            )
            self.results[name].energy_blocks.append(block)
            kept_s = sum(w.gpu_s for w in block.windows)
            self._spent(name, "waiting", t0 + kept_s)  # the leads and the windows before the temperature held
            self.results[name].phase_s["energy"] = self.results[name].phase_s.get("energy", 0.0) + kept_s

    def _profile(self) -> None:
        """One more iteration of each combo under the profiler, after every timed one: its rows and counts.

        Last, so that nothing timed runs under (or after) the profiler; see
        :mod:`meddpm.measure.profiling.iteration`.
        """
        for name, step in self.steps.items():
            result, t0 = self.results[name], time.perf_counter()
            profiled = profile_iteration(step, self.device, result.flops_per_iter)
            result.profile_rows, result.counts = list(profiled.rows), profiled.counts
            result.module_bytes = profiled.module_bytes
            self._spent(name, "profiling", t0)

    def _spent(self, name: str, phase: str, since: float) -> None:
        """Add the wall time since ``since`` to ``phase`` of combo ``name``'s time split."""
        phase_s = self.results[name].phase_s
        phase_s[phase] = phase_s.get(phase, 0.0) + time.perf_counter() - since

    def _time_one(self, name: str, step: TrainStep) -> None:
        result, gpu, device = self.results[name], self._gpu, self.device
        synchronize(device)
        others = _allocated(device) - self._own_bytes[name]
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        states: list[GpuState] = []
        sample_state = (lambda: states.append(gpu.state())) if gpu else None
        result.samples_ms.append(time_synchronized(step, device, during=sample_state))
        result.gpu_states.extend(states)
        if device.type == "cuda":
            # Peak allocation is additive over live tensors, so subtracting what the other
            # combos hold leaves this combo's own peak, as if it ran alone.
            peak = torch.cuda.max_memory_allocated(device) - others
            result.peak_allocated_bytes = max(result.peak_allocated_bytes or 0, peak)
            result.peak_reserved_bytes = max(result.peak_reserved_bytes or 0, torch.cuda.max_memory_reserved(device))


def _last_windows(edges: Sequence[float], plan: SoakPlan) -> list[float]:
    """The last edges that bound at least two windows and span ``plan.window_s`` where there are enough."""
    return spanning(edges, len(edges) - 3, plan) if len(edges) >= 3 else []


def _out_of_memory(exc: RuntimeError) -> bool:
    """Whether ``exc`` is the GPU's or the CPU allocator's out-of-memory error."""
    return isinstance(exc, torch.cuda.OutOfMemoryError) or any(m in str(exc) for m in _CPU_OUT_OF_MEMORY)


def _allocated(device: torch.device) -> int:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def _release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
