"""Measuring in several processes: the campaign of ``--perf-processes`` / ``--processes`` and of A/B runs.

Each process (``python -m meddpm.measure.processes.worker``) measures every combo interleaved, as an in-process
:class:`~meddpm.measure.campaign.interleaved.Campaign` does; the processes run one after another on the same device.
With two sources (the working tree and a git revision, or another interpreter or environment:
:mod:`meddpm.measure.processes.sides`) they alternate A B B A A B ..., so drift of the card over the run
falls on both alike. A :class:`ProcessCampaign` is a
:class:`~meddpm.measure.campaign.protocol.MeasuringCampaign` whose combos hold one run per process and source,
the process medians that verdicts use as their unit among their figures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import torch

from meddpm.errors import UserError
from meddpm.measure.campaign.protocol import Progress, Source
from meddpm.measure.campaign.result import CarriedEnergy, ComboResult, ComboRuns
from meddpm.measure.campaign.settings import CampaignSettings, worker_arguments
from meddpm.measure.campaign.time_split import TimeSplit
from meddpm.measure.energy.counter import BlockEnergy
from meddpm.measure.machine.nvml import GpuState
from meddpm.measure.processes.launch import StartedWorker, harness_root
from meddpm.measure.processes.sides import side_record
from meddpm.measure.processes.worker import WORKER_SCHEMA
from meddpm.measure.profiling.iteration import ProfileRow
from meddpm.measure.statistics.compare import detectable_change
from meddpm.measure.statistics.descriptive import Stats
from meddpm.model.config import ModelConfig
from meddpm.run.train import TrainStep
from meddpm.versioned.loader import DocumentError, Kind, load_one

WORKER_OUTPUT = Kind(
    family="meddpm-worker",
    versions=(WORKER_SCHEMA,),
    noun="measuring process's output",
    fix="a worker of this tree writes it; report this as a bug",
)


class ProcessFailed(UserError):
    """A measuring process failed; the processes that finished before it are kept in the campaign."""


# The signals that end a run as Ctrl-C does (SIGHUP exists on POSIX only).
_INTERRUPTING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))

# How long a worker that wrote its results may take to exit (about 3 s on an H200) before it is killed and the run
# fails; the next worker waits for it before its first iteration.
_EXIT_TIMEOUT_S = 120.0

# Processes a side in an A/B run unless told otherwise: with the measured 0.3 % between-process
# spread, five a side find 95 % of 1 % slowdowns (docs/statistics.md).
AB_PROCESSES = 5


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """For the span of the block, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, as Ctrl-C does.

    Python's default for both ends the process at once and runs no ``finally``: an A/B's extracted revision
    and a worker's folder stayed behind, and a running worker process went on alone. Raised as an
    interrupt, they run the cleanup a Ctrl-C runs (the running worker is killed and reaped), and the suite
    and the bench keep what was measured as they do after a Ctrl-C. SIGHUP is a closed terminal or a
    dropped ssh session: the user did not ask to keep the run going. Outside the main thread no handler
    can be set, and the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = {signum: signal.signal(signum, interrupt) for signum in _INTERRUPTING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            # None: a handler set outside Python, which cannot be set back; the default is the nearest.
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def paired(sources: Sequence[Source], index: int) -> list[Source]:
    """The sources' ``index``-th processes (from 0), in the order of A B B A A B ... (one source: A)."""
    return list(sources) if index % 2 == 0 else list(reversed(sources))


def result_from_dict(data: dict) -> ComboResult:
    """A worker's ComboResult, read back from its JSON; a peak that is no count of bytes is a one-line UserError,
    since the A/B memory verdict would read a NaN or a negative peak as unchanged."""
    fields = dict(data)
    for name in ("peak_allocated_bytes", "peak_reserved_bytes"):
        peak = fields.get(name)
        if peak is not None and (isinstance(peak, bool) or not isinstance(peak, int) or peak < 0):
            raise UserError(
                f"a measuring process wrote {name} {peak!r} for {fields.get('combo')}, not a count of bytes; "
                "report this as a bug"
            )
    fields["volume"] = tuple(fields["volume"])
    fields["gpu_states"] = [
        GpuState(**{**s, "clock_event_reasons": tuple(s["clock_event_reasons"])}) for s in fields.get("gpu_states", [])
    ]
    fields["energy_blocks"] = [BlockEnergy.from_dict(b) for b in fields.get("energy_blocks", [])]
    fields["profile_rows"] = [ProfileRow(**r) for r in fields.get("profile_rows", [])]
    return ComboResult(**fields)


class ProcessCampaign:
    """Every combo of one preset measured in ``processes`` worker processes per source.

    Each combo of each source holds its runs, one per process that finished (:meth:`measurements`); ``results``
    pools the first source's. No model lives in this process, so there are no training steps to time again.
    """

    def __init__(
        self,
        config: ModelConfig,
        combos: Sequence[str],
        device: torch.device,
        *,
        batch_size: int,
        settings: CampaignSettings,
        processes: int,
        sources: Sequence[Source],
        timeout_s: float = 3600.0,
        until_detectable: float | None = None,
        alpha: float = 0.01,
        carried_energy: Mapping[str, CarriedEnergy] | None = None,
        preheat: bool = True,
    ):
        if processes < 1:
            raise UserError(f"the number of processes must be at least 1, got {processes}")
        if until_detectable is not None and len(sources) != 2:
            raise UserError("stopping at a detectable change needs an A/B run (two sides to compare)")
        self.config = config
        self.combos = list(combos)
        self.device = device
        self.batch_size = batch_size
        self.settings = settings
        self.processes = processes
        self.sources = list(sources)
        self.timeout_s = timeout_s
        # None: every combo runs in ``processes`` processes a side. Else a combo stops, from two processes a side
        # on, once its A/B could flag a slowdown this small (at ``alpha``): the processes go where the noise is.
        self.until_detectable = until_detectable
        self.alpha = alpha
        # Side B's energy by combo as an earlier run of its code measured it on this card (the last good night's):
        # its first process measures none where side A's first agrees with every one (energy_disagreement).
        self.carried_energy = dict(carried_energy or {})
        # False where no round's time is judged (a bisection's counts process): the card need not be warm.
        self.preheat = preheat
        self._measured = {s.label: {c: ComboRuns(in_workers=True) for c in self.combos} for s in self.sources}
        self._environments: dict[str, dict] = {}  # by label: the environment its first worker reported
        self._started: set[str] = set()  # the labels of the sources whose first process has started
        # The next turn's source, and its worker once started (meddpm.measure.processes.launch).
        self._ahead: StartedWorker | None = None
        self._next_source: Source | None = None
        # The worker whose results were read and that may still be exiting, with the words that name it.
        self._exiting: tuple[StartedWorker, str] | None = None
        self._turn = ""  # the words that name the turn now running, as its failure would
        self.time_split = TimeSplit()  # where the workers' time went; a worker's own start-up included

    @property
    def steps(self) -> Mapping[str, TrainStep]:
        """None: the models lived and died in the workers."""
        return {}

    @property
    def results(self) -> dict[str, ComboResult]:
        """The first source's figures by combo, pooled over the processes that finished."""
        return {c: runs.pooled for c, runs in self.measurements().items() if runs.runs}

    def run(self, on_progress: Callable[[Progress], None] | None = None) -> dict[str, ComboResult]:
        """Run the worker processes in turn; returns the first source's results by combo, pooled over its processes.

        Each turn's worker is started during the turn before it and waits, imported, for its job
        (:class:`~meddpm.measure.processes.launch.StartedWorker`), and gets its job once the one before wrote its
        results: the GPU still runs one process's iterations at a time.

        Each source's first process also measures energy, where the settings ask for it: one block a combo
        (about 12 s), not one a process, which would push a nightly run past 10 minutes; side B's takes the carried
        figures instead where side A's agree with them (:meth:`energy_disagreement`). In an A/B the first process of
        each side alone profiles an iteration of each combo (:meth:`worker_settings`). With
        ``until_detectable``, later processes measure only the combos that have not reached it.
        Interrupted (Ctrl-C, SIGTERM or SIGHUP), the running worker is killed and the measurements keep the
        processes that finished, for the caller to write as a partial run; so they do when a worker fails
        (:class:`ProcessFailed`, which says which process).
        """
        notify = on_progress or (lambda _: None)
        turns = [source for index in range(self.processes) for source in paired(self.sources, index)]
        pending, planned, done = list(self.combos), len(turns), 0
        with signals_as_interrupt(), self._workers_ahead():
            for index in range(self.processes):
                for source in paired(self.sources, index):
                    self._next_source = turns[done + 1] if done + 1 < planned else None
                    measured = self.measurements(source)
                    first = source.label not in self._started
                    # Side B's first process with carried figures: decided once, before it runs (side A's first ran).
                    may_carry = first and self._may_carry(source)
                    disagreement = self.energy_disagreement(pending) if may_carry else ""
                    carried = may_carry and not disagreement
                    self._started.add(source.label)
                    started, sent = time.monotonic(), time.time()
                    self._turn = which = f"measuring process {done + 1}/{planned}, of {source.label},"
                    try:
                        results = self._run_worker(source, pending, self.worker_settings(first, carried))
                    except ProcessFailed:  # the one before it, failing at its exit
                        raise
                    except UserError as exc:
                        raise ProcessFailed(f"{which} failed: {exc}") from None
                    ended = time.time()
                    for result in results:
                        measured[result.combo].runs.append(result)
                        if carried:
                            measured[result.combo].carried_energy = self.carried_energy[result.combo]
                    wall_s = time.monotonic() - started
                    self.time_split.add_all(r.phase_s for r in results)
                    self.time_split.add("start-up", wall_s - sum(sum(r.phase_s.values()) for r in results))
                    done += 1
                    medians = ", ".join(
                        f"{c} {measured[c].runs[-1].stats.median:.4g} ms" for c in pending if measured[c].runs
                    )
                    compiled = "".join(f"; {r.compile_line()}" for r in results if r.compile)
                    warmed = "".join(f"; {r.preheat_line()}" for r in results[:1] if r.preheat)
                    energy = f"; {self._carried_line(pending, disagreement)}" if may_carry else ""
                    outside = outside_phases(results, sent, ended)
                    detail = f"{medians} ({wall_s:.0f} s{warmed}{energy}{compiled}{outside})"
                    notify(Progress("process", source.label, done, planned, detail))
                pending = [c for c in pending if not self.reached_detectable(c)]
                if not pending:
                    break
            self._let_the_last_exit()
        return self.results

    def _may_carry(self, source: Source) -> bool:
        """Whether ``source`` is side B of an A/B that measures energy and was given carried figures."""
        carries = len(self.sources) == 2 and source == self.sources[1]
        return carries and self.settings.energy and bool(self.carried_energy)

    def energy_disagreement(self, combos: Sequence[str]) -> str:
        """Why side B's first process measures its energy again though figures were carried, for the first combo that
        does not agree ("fast: side A read +6.2% of run #7's, beyond 5.0%"); empty where every combo agrees, and
        side B's first process then takes the carried figures instead of measuring (one combo that does not, and it
        measures all, as it does without carried figures;
        :meth:`~meddpm.measure.campaign.result.CarriedEnergy.disagreement`)."""
        side_a = self.measurements(self.sources[0])
        for combo in combos:
            carried = self.carried_energy.get(combo)
            measured = side_a[combo].runs[0].energy if side_a[combo].runs else None
            why = "none was carried" if carried is None else carried.disagreement(measured)
            if why:
                return f"{combo}: {why}"
        return ""

    def _carried_line(self, combos: Sequence[str], disagreement: str) -> str:
        """What a process line says of side B's energy where figures were carried: "energy as run #12 measured it
        (A's first process within 5.0% of it)", or with the ``disagreement`` (:meth:`energy_disagreement`) "energy
        measured again (fast: side A read +6.2% of run #12's, beyond 5.0%)"."""
        if disagreement:
            return f"energy measured again ({disagreement})"
        carried = [self.carried_energy[c] for c in combos]
        halves = sorted({f"{e.threshold / 2:.1%}" for e in carried})
        sources = sorted({e.source for e in carried})
        return f"energy as {', '.join(sources)} measured it (A's first process within {', '.join(halves)} of it)"

    def detectable(self, combo: str) -> float:
        """The smallest slowdown of ``combo`` the A/B measured so far can flag (inf before two processes a side)."""
        a, b = (self.measurements(s)[combo].process_medians_ms for s in self.sources)
        return detectable_change(a, b, self.alpha)

    def reached_detectable(self, combo: str) -> bool:
        """Whether ``combo`` needs no more processes: its A/B reached ``until_detectable`` (never without one)."""
        return self.until_detectable is not None and self.detectable(combo) <= self.until_detectable

    def measurements(self, source: Source | None = None) -> dict[str, ComboRuns]:
        """Each combo's runs from ``source`` (default: the first), one per process that finished."""
        return self._measured[(source or self.sources[0]).label]

    def ratio(self, combo: str, reference: str) -> Stats:
        """Per-round time ratio combo / reference of the first source, paired inside each process."""
        runs = self.measurements()
        return runs[combo].ratio_to(runs[reference])

    def sides(self) -> list[dict]:
        """Each source's record (:func:`~meddpm.measure.processes.sides.side_record`): its code, interpreter,
        extra variables and the environment its first worker reported (empty before one finished)."""
        return [
            side_record(s.label, s.commit, s.python or sys.executable, s.env, self._environments.get(s.label, {}))
            for s in self.sources
        ]

    def close(self) -> None:
        """Nothing to free: the models lived and died in the workers."""

    @contextlib.contextmanager
    def _workers_ahead(self) -> Iterator[None]:
        """For the span of the block, each turn's worker starts during the turn before it; one left over at the end
        (the run stopped early, failed or was cut short) is killed before it ever touches the GPU."""
        try:
            yield
        finally:
            ahead, exiting = self._ahead, self._exiting
            self._ahead = self._exiting = None
            try:
                if ahead is not None:
                    ahead.cancel()
            finally:
                if exiting is not None:  # its results are kept; a run cut short does not wait for its exit
                    exiting[0].cancel()

    def _let_the_last_exit(self) -> None:
        """Wait for the exit of the worker before the next turn's (its results were read); one that fails there
        fails the run, as a worker failing before it wrote its results does (:class:`ProcessFailed`)."""
        if self._exiting is None:
            return
        worker, which = self._exiting
        try:
            ended = worker.end(_EXIT_TIMEOUT_S)  # killed, should it not end in time
        except subprocess.TimeoutExpired:
            raise ProcessFailed(f"{which} did not exit within {_EXIT_TIMEOUT_S:.0f} s of writing its results") from None
        finally:
            self._exiting = None
        if ended.returncode != 0:
            raise ProcessFailed(f"{which} failed after writing its results: {_last_error(ended.stderr)}")

    def _worker_for(self, source: Source) -> StartedWorker:
        """The worker started ahead for ``source``'s turn (the turn before it started it), else one started now;
        then the next turn's is started."""
        worker = self._ahead or StartedWorker(source.workload, source.python, source.env)
        upcoming = self._next_source
        self._ahead = None if upcoming is None else StartedWorker(upcoming.workload, upcoming.python, upcoming.env)
        return worker

    def worker_settings(self, first: bool, carried: bool = False) -> CampaignSettings:
        """A worker's settings: energy in each source's first process only (where the settings ask for it), and the
        profiled iteration there too in an A/B, whose later processes would repeat its counts exactly
        (docs/explain.md); every process of a single source is profiled, for the spread a saved profile keeps. The
        run's first process (none has finished yet) warms the card up before its rounds: it alone starts on a card
        that no process of this run has heated (docs/statistics.md). ``carried``: the process takes its energy as
        carried (:meth:`energy_disagreement`) and measures none."""
        s = self.settings
        profile = s.profile and (first or len(self.sources) == 1)
        opening = self.preheat and not any(runs.runs for combos in self._measured.values() for runs in combos.values())
        return dataclasses.replace(s, energy=s.energy and first and not carried, profile=profile, preheat=opening)

    def _run_worker(self, source: Source, combos: Sequence[str], settings: CampaignSettings) -> list[ComboResult]:
        worker = self._worker_for(source)
        with tempfile.TemporaryDirectory(prefix="meddpm-worker-") as tmp:
            out = Path(tmp) / "result.json"
            job = [
                *("--preset", self.config.name, "--combos", ",".join(combos), "--device", str(self.device)),
                *("--batch-size", str(self.batch_size), *worker_arguments(settings), "--out", str(out)),
            ]
            written = worker.run(job, self.timeout_s, gpu_free=self._let_the_last_exit)
            self._exiting = (worker, self._turn)  # at once: a run cut short from here on ends it
            if not written or not out.exists():
                ended = worker.cancel()
                self._exiting = None
                raise UserError(_last_error(ended.stderr))
            try:
                document = load_one(out, WORKER_OUTPUT)
            except DocumentError as exc:
                raise UserError(f"it wrote {exc.problem}; {exc.fix}") from None
        for role, expected in (("harness", harness_root()), ("workload", source.workload)):
            imported = Path(document[role]).resolve()
            if imported != (expected / "meddpm").resolve():
                # An installed copy of meddpm shadowed the tree meant: the A/B would compare a tree with itself.
                raise UserError(f"the worker for {source.label} imported its {role} from {imported}, not {expected}")
        self._environments.setdefault(source.label, document["environment"])
        return [result_from_dict(r) for r in document["results"]]


def outside_phases(results: Sequence[ComboResult], sent: float, ended: float) -> str:
    """What a worker spent outside every phase, from its clock (``process_clock``) and the parent's (``sent``: its job
    handed over; ``ended``: its results read back), as "; outside its phases: 0.1 s importing before its job, 1.2 s
    setting up, 0.9 s waiting for the one before to exit, 0.4 s writing and read back"; empty where the worker kept
    no clock. A worker not started ahead (a run's first) imports everything in the first part; its exit, after its
    results were read, overlaps the next worker's setting up."""
    clock = results[0].process_clock if results else {}
    if not clock:
        return ""
    waited = clock.get("waited", 0.0)
    inside = clock["measured"] - clock["job"] - waited - sum(sum(r.phase_s.values()) for r in results)
    parts = [
        (clock["job"] - sent, "importing before its job"),
        (inside, "setting up"),
        (waited, "waiting for the one before to exit"),
        (ended - clock["measured"], "writing and read back"),
    ]
    return "; outside its phases: " + ", ".join(f"{max(0.0, s):.1f} s {what}" for s, what in parts)


def _last_error(stderr: str) -> str:
    """The worker's last exception line, else the end of its output."""
    lines = [line.strip() for line in stderr.splitlines() if "Error: " in line or "Exception: " in line]
    return lines[-1] if lines else (stderr.strip().splitlines() or ["no output"])[-1]
