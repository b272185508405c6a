"""What a campaign measured: a combo's figures in one run, and its runs, one per measuring process.

A :class:`ComboResult` holds one run's rounds, memory, energy blocks and card states with the figures derived
from them. A :class:`ComboRuns` holds one combo's runs of one source, as pyperf's benchmark holds runs: an in-process
campaign gives one run; a process campaign one per worker process, whose medians are the unit of a verdict
(docs/statistics.md). It pools the runs for the tables and files (all rounds, the largest peak memory, every
energy block) and pairs rounds inside each run for the ratios between combos.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from meddpm.measure.energy.counter import ENERGY_METHOD, BlockEnergy, EnergyEstimate, WindowEnergy, resolution
from meddpm.measure.machine.nvml import GpuState
from meddpm.measure.profiling.iteration import ProfileRow
from meddpm.measure.statistics.descriptive import Stats, median_rel_se

THROTTLE_CLOCK_FRACTION = 0.98
# How a compile line names the compile cache's outcome; "miss" is the workload's source new to the cache, whose
# graphs Inductor may still find.
_CACHE_WORDS = {
    "hit": "compile cache hit",
    "miss": "compile cache: this code's first compile",
    "off": "compile cache off",
}


@dataclass
class ComboResult:
    """What one combo measured in a run: per-iteration times, energy blocks and the figures derived from them.

    A run is one process's measurement (:class:`ComboRuns` holds a combo's runs); the figures pooled
    over several processes are a ComboResult too (:attr:`ComboRuns.pooled`), whose ``energy_blocks``
    hold one block per process that measured one. ``sample_flops`` is the model FLOPs
    of one volume's full reverse diffusion (all T steps), for the estimated energy of a sample.
    """

    preset: str
    combo: str
    batch_size: int
    volume: tuple[int, int, int]
    math_precision: str
    samples_ms: list[float]
    warmup_ms: list[float]
    setup_s: float
    flops_per_iter: int
    rel_iqr_target: float
    stop_reason: str = ""
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    energy_note: str = ""
    gpu_states: list[GpuState] = field(default_factory=list)
    energy_blocks: list[BlockEnergy] = field(default_factory=list)
    sample_flops: int = 0
    # One iteration profiled after the rounds (meddpm.measure.profiling.iteration): its kernels or aten
    # operators, and the counts the gate judges (launches in all and per group, bytes allocated, FLOPs).
    profile_rows: list[ProfileRow] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    # Where this combo's share of the run's wall time went (meddpm.measure.campaign.time_split), and for a
    # compiled combo what compiling cost: seconds, the compile cache's state, Inductor's cache hits and misses.
    phase_s: dict[str, float] = field(default_factory=dict)
    compile: dict[str, object] = field(default_factory=dict)
    module_bytes: dict[str, int] = field(default_factory=dict)  # per module, what its forward left allocated
    # The card warmed up before the rounds (a run's first process of several): its temperature at the start and the
    # end (°C), the seconds it took and whether the temperature held; empty where none ran.
    preheat: dict[str, object] = field(default_factory=dict)
    # A worker process's clock (time.time(), s): when it took its job and when its combos were measured; the parent
    # tells from them and its own clock what the process spent outside every phase. Empty outside a worker.
    process_clock: dict[str, float] = field(default_factory=dict)

    def compile_line(self) -> str:
        """How compiling went in this run: "fast compiled in 5.2 s (compile cache hit; Inductor graphs 14 of 14
        from its cache)"; empty for a combo that compiles nothing."""
        c = self.compile
        if not c:
            return ""
        hits, misses = c.get("fx_graph_hits", 0), c.get("fx_graph_misses", 0)
        graphs = f"; Inductor graphs {hits} of {hits + misses} from its cache" if hits or misses else ""
        cache = _CACHE_WORDS.get(c.get("cache", "off"), f"compile cache {c.get('cache')}")
        return f"{self.combo} compiled in {c.get('seconds', 0):.1f} s ({cache}{graphs})"

    def preheat_line(self) -> str:
        """How the card was warmed before the rounds: "card warmed 34 -> 53 °C in 27 s" (", not settled" where the
        temperature had not held when its time ran out); empty where none ran."""
        p = self.preheat
        if not p:
            return ""
        held = "" if p.get("settled") else ", not settled"
        return f"card warmed {p.get('start_c')} -> {p.get('end_c')} °C in {p.get('seconds', 0):.0f} s{held}"

    @property
    def stats(self) -> Stats:
        """Statistics of the timed iterations."""
        return Stats.from_samples(self.samples_ms)

    @property
    def reliable(self) -> bool:
        """Whether the spread met the target, so a verdict on this result is not luck."""
        return self.stats.rel_iqr <= self.rel_iqr_target

    @property
    def median_rel_se(self) -> float:
        """Relative standard error of the median of the timed rounds (``statistics.descriptive.median_rel_se``)."""
        return median_rel_se(self.samples_ms)

    @property
    def tflops(self) -> float:
        """Achieved model TFLOP/s at the median iteration time."""
        return self.flops_per_iter / (self.stats.median * 1e-3) / 1e12

    @property
    def iterations_per_s(self) -> float:
        """Training iterations per second at the median."""
        return 1e3 / self.stats.median

    @property
    def voxels_per_s(self) -> float:
        """Training voxels (volume x batch) per second at the median."""
        return float(np.prod(self.volume)) * self.batch_size * self.iterations_per_s

    @property
    def energy(self) -> EnergyEstimate | None:
        """Energy per iteration over every block, its counter bound and its replicates (None if not measured):
        :func:`energy_estimate` of the blocks."""
        return energy_estimate(self.energy_blocks)

    @property
    def energy_j_per_iter(self) -> float | None:
        """Energy per training iteration from the card's total-energy counter, if it has one."""
        return self.energy.j_per_iter if self.energy else None

    @property
    def mean_power_w(self) -> float | None:
        """The card's mean power over the energy windows: their energy over their GPU time."""
        seconds = sum(w.gpu_s for b in self.energy_blocks for w in b.windows)
        return sum(b.counter_j for b in self.energy_blocks) / seconds if seconds else None

    @property
    def energy_period_ms(self) -> float | None:
        """The energy counter's update period seen while measuring (the longest over the blocks)."""
        return max((b.period_s * 1e3 for b in self.energy_blocks), default=None)

    @property
    def energy_j_per_volume(self) -> float | None:
        """Energy per training sample (one volume of the batch)."""
        e = self.energy_j_per_iter
        return None if e is None else e / self.batch_size

    @property
    def tflop_per_j(self) -> float | None:
        """Model TFLOP per joule of the card: the training step's work over its energy."""
        e = self.energy_j_per_iter
        return None if not e else self.flops_per_iter / e / 1e12

    @property
    def sample_energy_j_estimate(self) -> float | None:
        """Estimated energy of one volume's full reverse diffusion, at the training step's joules per FLOP.

        An estimate: sampling runs forward passes only, whose joules per FLOP differ from a
        training step's; ``meddpm-bench --sample`` measures it.
        """
        e = self.energy_j_per_iter
        return None if e is None or not self.sample_flops else e / self.flops_per_iter * self.sample_flops

    @property
    def clock_event_reasons(self) -> tuple[str, ...]:
        """Every clock-event reason seen while iterating (benign ones included)."""
        return tuple(sorted({r for s in self.gpu_states for r in s.clock_event_reasons}))

    @property
    def throttle_reasons(self) -> tuple[str, ...]:
        """Power or thermal reasons seen while the SM clock sat measurably below its maximum.

        A reason flagged for an instant while the clock stays within 2 % of the maximum (a
        power-cap blip of 15 MHz, say) moves no timing and does not count as throttling.
        """
        return tuple(
            sorted(
                {
                    r
                    for s in self.gpu_states
                    if s.sm_clock_mhz < THROTTLE_CLOCK_FRACTION * s.sm_clock_max_mhz
                    for r in s.throttle_reasons
                }
            )
        )

    def gpu_summary(self) -> dict[str, float | None]:
        """SM clock mean and min, temperature max, utilisation mean over the timed iterations."""
        if not self.gpu_states:
            return {
                "sm_clock_mean_mhz": None,
                "sm_clock_min_mhz": None,
                "temperature_max_c": None,
                "gpu_utilization_mean_pct": None,
            }
        clocks = [s.sm_clock_mhz for s in self.gpu_states]
        return {
            "sm_clock_mean_mhz": float(np.mean(clocks)),
            "sm_clock_min_mhz": float(min(clocks)),
            "temperature_max_c": float(max(s.temperature_c for s in self.gpu_states)),
            "gpu_utilization_mean_pct": float(np.mean([s.gpu_utilization_pct for s in self.gpu_states])),
        }

    def as_dict(self) -> dict[str, object]:
        """Everything, with the derived figures, for JSON."""
        d = asdict(self)
        d.pop("gpu_states")
        d.pop("profile_rows")  # a results file keeps a flagged case's explanation, not every run's rows
        d.pop("module_bytes")
        d.pop("process_clock")  # one worker's moments, read by its parent; a pooled case would carry its first's
        d.update(
            stats=self.stats.as_dict(),
            reliable=self.reliable,
            median_rel_se=self.median_rel_se,
            tflops=self.tflops,
            iterations_per_s=self.iterations_per_s,
            voxels_per_s=self.voxels_per_s,
            energy_j_per_iter=self.energy_j_per_iter,
            energy_quantisation=self.energy.quantisation if self.energy else None,
            energy_spread=self.energy.spread if self.energy else None,
            energy_period_ms=self.energy_period_ms,
            energy_method=ENERGY_METHOD if self.energy else None,
            mean_power_w=self.mean_power_w,
            energy_j_per_volume=self.energy_j_per_volume,
            tflop_per_j=self.tflop_per_j,
            sample_energy_j_estimate=self.sample_energy_j_estimate,
            clock_event_reasons=list(self.clock_event_reasons),
            throttle_reasons=list(self.throttle_reasons),
            **self.gpu_summary(),
        )
        return d


def energy_estimate(energy_blocks: Sequence[BlockEnergy]) -> EnergyEstimate | None:
    """Energy per iteration over every block, its counter bound and its replicates (None if none ran an iteration).

    The replicates are the blocks' figures where several processes measured, else the one
    block's windows, both read with the counter interpolated where every window has that figure.
    The plain counter's steps are the bound's share already; in the replicates' spread they would
    count twice, and more the shorter the windows: neighbours share an edge, so a step one window
    misses the next one gains (docs/energy.md, the table of quantities: "spread %").
    """
    blocks = [b for b in energy_blocks if b.iterations]
    if not blocks:
        return None
    interpolated = all(w.interpolated_j is not None for b in blocks for w in b.windows)

    def joules(w: WindowEnergy) -> float:
        return w.interpolated_j if interpolated and w.interpolated_j is not None else w.counter_j

    per_block = [sum(joules(w) for w in b.windows) / b.iterations for b in blocks]
    windows = [joules(w) / w.iterations for w in blocks[0].windows]
    return EnergyEstimate(
        j_per_iter=sum(b.counter_j for b in blocks) / sum(b.iterations for b in blocks),
        # The total's error is a sum of the blocks' errors, each under its bound x its energy.
        quantisation=max(b.quantisation for b in blocks),
        replicates=tuple(per_block if len(blocks) > 1 else windows),
    )


@dataclass(frozen=True)
class CarriedEnergy:
    """A combo's energy blocks as an earlier run measured the same code on this card (the last good night's side A),
    for an A/B's side B to take instead of measuring them again.

    Taken only where side A's own figure lies within half of ``threshold`` (the case's energy threshold) of it, at a
    resolution under the threshold (:meth:`disagreement` empty): a verdict on the carried figure then reads
    "unchanged", as one on a figure measured again would unless this card's joules moved since by more than half the
    threshold (docs/energy.md, "Side B's energy in a nightly").
    """

    blocks: tuple[BlockEnergy, ...]
    source: str  # the run that measured it, as a verdict names it: "run #12"
    threshold: float

    @property
    def estimate(self) -> EnergyEstimate | None:
        """The carried blocks' energy per iteration (:func:`energy_estimate`)."""
        return energy_estimate(self.blocks)

    def disagreement(self, measured: EnergyEstimate | None) -> str:
        """Why ``measured`` (side A's) does not agree with the carried figure, in words; empty where it agrees: within
        half the threshold of it, at a resolution under the threshold (never where either is missing)."""
        carried = self.estimate
        if carried is None or not carried.j_per_iter > 0:
            return f"{self.source} kept no energy per iteration"
        if measured is None:
            return "side A measured none"
        change = measured.j_per_iter / carried.j_per_iter - 1
        if abs(change) > self.threshold / 2:
            return f"side A read {change:+.1%} of {self.source}'s, beyond {self.threshold / 2:.1%}"
        res = resolution(measured, carried)
        if not res < self.threshold:
            return f"their resolution {res:.1%} is not under the threshold {self.threshold:.0%}"
        return ""


@dataclass
class ComboRuns:
    """One combo's runs from one source, one per measuring process, and the figures pooled over them.

    ``in_workers``: each run is a worker process of its own, fresh CUDA context, autotuning and
    compilation, so the runs' medians are a verdict's unit; else the one run of an in-process
    campaign, whose rounds are (it then has no process medians, and its stop reason is its run's).
    """

    runs: list[ComboResult] = field(default_factory=list)
    in_workers: bool = False
    # Energy this run did not measure again but took from an earlier run of the same code (an A/B's side B).
    carried_energy: CarriedEnergy | None = None

    @property
    def process_medians_ms(self) -> list[float]:
        """Each worker process's median time (ms), in the order they ran; empty for a run in this process."""
        return [r.stats.median for r in self.runs] if self.in_workers else []

    @property
    def samples_ms(self) -> list[float]:
        """Every timed round of every run, run after run."""
        return [s for r in self.runs for s in r.samples_ms]

    @property
    def setup_s(self) -> float:
        """The mean time to build the combo's training step."""
        return float(np.mean([r.setup_s for r in self.runs]))

    @property
    def peak_allocated_bytes(self) -> int | None:
        """The largest peak allocation of any run (None where no run knows its own)."""
        return max(self.process_peaks("allocated"), default=None)

    @property
    def peak_reserved_bytes(self) -> int | None:
        """The largest peak the allocator reserved in any run (None where no run knows it)."""
        return max(self.process_peaks("reserved"), default=None)

    def process_peaks(self, kind: str) -> list[int]:
        """Each run's peak memory, ``"allocated"`` or ``"reserved"``, in run order (runs that read none left out)."""
        peaks = (getattr(r, f"peak_{kind}_bytes") for r in self.runs)
        return [p for p in peaks if p is not None]

    @property
    def energy_blocks(self) -> list[BlockEnergy]:
        """Every run's energy blocks: one per process that measured energy (never the carried ones)."""
        return [b for r in self.runs for b in r.energy_blocks]

    @property
    def energy(self) -> EnergyEstimate | None:
        """Energy per iteration of the measured blocks; where no run measured any, of the carried ones (None: none)."""
        measured = self.energy_blocks
        if measured or self.carried_energy is None:
            return energy_estimate(measured)
        return self.carried_energy.estimate

    @property
    def energy_source(self) -> str | None:
        """The earlier run whose figure :attr:`energy` is, where it was carried (None: measured here, or none)."""
        return self.carried_energy.source if self.carried_energy and not self.energy_blocks else None

    @property
    def gpu_states(self) -> list[GpuState]:
        """The card's states read during every run's rounds."""
        return [g for r in self.runs for g in r.gpu_states]

    @property
    def phase_s(self) -> list[dict[str, float]]:
        """Each run's time split of this combo (meddpm.measure.campaign.time_split)."""
        return [r.phase_s for r in self.runs]

    @property
    def run_counts(self) -> list[dict[str, int]]:
        """Each run's counts of its profiled iteration, in run order (runs profiled by no harness left out)."""
        return [r.counts for r in self.runs if r.counts]

    @property
    def run_profiles(self) -> list[list[ProfileRow]]:
        """Each run's profiled rows, in run order (runs profiled by no harness left out)."""
        return [r.profile_rows for r in self.runs if r.profile_rows]

    @property
    def run_module_bytes(self) -> list[dict[str, int]]:
        """Each run's bytes left allocated per module by its forward, in run order (runs without them left out)."""
        return [r.module_bytes for r in self.runs if r.module_bytes]

    @property
    def profile_rows(self) -> list[ProfileRow]:
        """The first run's profiled iteration (the first process of its side), or none."""
        return self.runs[0].profile_rows if self.runs else []

    @property
    def stop_reason(self) -> str:
        """Why the rounds stopped: the run's reason, or for worker processes their number and the first's reason."""
        first = self.runs[0].stop_reason
        return f"{len(self.runs)} processes; first: {first}" if self.in_workers else first

    @property
    def pooled(self) -> ComboResult:
        """One ComboResult of every run, for tables and files: the first run's settings with the pooled figures."""
        return dataclasses.replace(
            self.runs[0],
            samples_ms=self.samples_ms,
            setup_s=self.setup_s,
            stop_reason=self.stop_reason,
            peak_allocated_bytes=self.peak_allocated_bytes,
            peak_reserved_bytes=self.peak_reserved_bytes,
            energy_blocks=self.energy_blocks,
            gpu_states=self.gpu_states,
        )

    def ratio_to(self, reference: ComboRuns) -> Stats:
        """Statistics of the per-round time ratio to ``reference``, paired by round inside each run.

        Both are the same campaign's runs, so run i of each is the same process, which timed them interleaved.
        """
        pairs = zip(self.runs, reference.runs)
        return Stats.from_samples([x / y for a, b in pairs for x, y in zip(a.samples_ms, b.samples_ms)])
