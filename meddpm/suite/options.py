"""Every command-line option of the regression suite, declared and validated in one place.

The checks of options that ``meddpm-bench`` declares too (combos, warm-up, rounds, processes)
are the functions both call, so the two commands accept and refuse the same values. pytest is
imported for type hints only: the bench imports this module and does not depend on pytest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from meddpm.atomic import run_stamp, write_target
from meddpm.errors import UserError
from meddpm.history.append import history_target
from meddpm.history.store import ENV_VAR as HISTORY_ENV_VAR
from meddpm.judge.arch import KNOWN_ARCHS, detect_arch, validate_arch
from meddpm.measure.campaign.interleaved import (
    CPU_DEFAULT_COMBOS,
    GPU_MAX_ROUNDS,
    GPU_MEDIAN_PRECISION,
    CampaignSettings,
)
from meddpm.measure.processes.campaign import AB_PROCESSES
from meddpm.measure.profiling.ncu import CLOCK_CONTROLS, NcuSettings
from meddpm.measure.profiling.ncu_metrics import DEFAULT_GROUPS, GROUPS
from meddpm.model.config import ModelConfig
from meddpm.run.combos import COMBOS, get_combo

if TYPE_CHECKING:
    import pytest

# Upper bounds of the counts both commands take: far above any useful run, yet low enough that a
# typo (an extra zero) is refused at once instead of measuring for hours.
MAX_WARMUP = 1000  # warm-up iterations per combo: about a minute of the paper preset on an H200
MAX_ROUNDS = 10_000  # timed rounds: the adaptive rule stops far sooner
MAX_PROCESSES = 32  # measuring processes (a side): each builds and warms every combo, tens of seconds on a GPU


@dataclass(frozen=True)
class SuiteOptions:
    """The parsed options; ``None`` means "the default for the device the case runs on"."""

    save_baseline: bool
    force_save: bool
    baseline_dir: Path
    arch: str | None
    preset: str | None
    combos: tuple[str, ...] | None
    batch_size: int
    warmup: int | None
    min_rounds: int
    max_rounds: int | None
    rel_iqr: float | None
    budget_s: float | None
    benchmark_rounds: int
    results_dir: Path
    ncu: NcuSettings | None = None  # None: Nsight Compute cases are off
    processes: int = 1  # measuring processes per case (per side in an A/B run); 1: in this process
    compare_to: str | None = None  # a git revision to measure against, alternating processes
    history: str | None = None  # the history database the run is appended to; None: none
    median_precision: float | None = None  # None: the device's default
    energy: bool = True  # an energy block per combo (counter windows until the temperature holds)
    energy_bound: float = 0.02  # the counter bound each energy block is planned to (CampaignSettings.energy_error)
    run_stamp: str = field(default_factory=run_stamp)  # names this run's own results file

    @property
    def run_results(self) -> Path:
        """This run's own results file in ``results_dir``, which no other run writes."""
        return self.results_dir / f"results-{self.run_stamp}.json"

    @property
    def in_processes(self) -> bool:
        """Whether cases are measured in worker processes rather than in the pytest process."""
        return self.processes > 1 or self.compare_to is not None

    def preset_for(self, on_gpu: bool) -> str:
        """``--preset``, else paper on a GPU and tiny on the CPU."""
        return self.preset or ("paper" if on_gpu else "tiny")

    def combos_for(self, on_gpu: bool) -> tuple[str, ...]:
        """``--combos``, else all of them on a GPU and the quick ones on the CPU."""
        return self.combos or (tuple(COMBOS) if on_gpu else CPU_DEFAULT_COMBOS)

    def campaign_settings(self, on_gpu: bool) -> CampaignSettings:
        """Measurement settings, with device-dependent defaults where no option was given."""

        def pick(value, gpu_default, cpu_default):
            return value if value is not None else (gpu_default if on_gpu else cpu_default)

        max_default = max(self.min_rounds, GPU_MAX_ROUNDS if on_gpu else 8)
        return CampaignSettings(
            warmup=pick(self.warmup, 3, 1),
            min_rounds=self.min_rounds,
            max_rounds=pick(self.max_rounds, max_default, max_default),
            # CPU runners share cores with everything else; they rarely get under 3 %.
            rel_iqr_target=pick(self.rel_iqr, 0.03, 0.25),
            budget_s=pick(self.budget_s, 600.0, 60.0),
            # Off on CPU runners: their rounds spread 25 % and would run to the limit.
            median_precision=pick(self.median_precision, GPU_MEDIAN_PRECISION, 0.0),
            energy=self.energy,
            energy_error=self.energy_bound,
        )


def add_options(parser: pytest.Parser) -> None:
    """Declare the suite's options (called from ``pytest_addoption``)."""
    g = parser.getgroup("meddpm", "Med-DDPM performance regression suite")
    g.addoption(
        "--save-baseline",
        action="store_true",
        help="write this run's measurements into baselines/<arch>.json (refused after failures, "
        "unreliable timings or throttling, unless --force-save-baseline)",
    )
    g.addoption("--force-save-baseline", action="store_true", help="save even when the run would be refused")
    g.addoption(
        "--baseline-dir", type=Path, default=None, help="where baseline files live (default: <rootdir>/baselines)"
    )
    g.addoption(
        "--arch",
        default=None,
        help="use this architecture's baselines and cases instead of the detected one "
        "(v100, a100, h100, h200, or a key with a file in --baseline-dir)",
    )
    g.addoption("--preset", default=None, help="model preset (default: paper on a GPU, tiny on the CPU)")
    g.addoption("--combos", default=None, help=f"comma-separated combos (default: all on GPU); {', '.join(COMBOS)}")
    g.addoption("--batch-size", type=int, default=1, help="volumes per iteration (default: 1)")
    g.addoption(
        "--perf-warmup",
        type=int,
        default=None,
        help="warm-up iterations per combo (default: 3 GPU, 1 CPU; never fewer than a combo's CUDA graphs need; "
        f"at most {MAX_WARMUP})",
    )
    g.addoption(
        "--perf-min-rounds",
        type=int,
        default=5,
        help=f"timed rounds at least (default: 5, the fewest that can reach p < 0.01; at most {MAX_ROUNDS})",
    )
    g.addoption(
        "--perf-max-rounds", type=int, default=None, help=f"timed rounds at most (default: {GPU_MAX_ROUNDS} GPU, 8 CPU)"
    )
    g.addoption(
        "--perf-rel-iqr",
        type=float,
        default=None,
        help="stop once every combo's IQR/median is below this (default: 0.03 GPU, 0.25 CPU)",
    )
    g.addoption(
        "--perf-budget",
        type=float,
        default=None,
        help="seconds of timed rounds per preset at most (default: 600 GPU, 60 CPU)",
    )
    g.addoption(
        "--perf-median-precision",
        type=float,
        default=None,
        help="a combo stops only once the standard error of its median, relative to it, is below this; 0: no such "
        f"rule (default: {GPU_MEDIAN_PRECISION} GPU, 0 CPU)",
    )
    g.addoption(
        "--perf-energy",
        choices=("on", "off"),
        default="on",
        help="on (default): after the rounds, each combo runs energy windows back to back until the card's "
        "temperature holds over them (seconds a combo: docs/energy.md); off: time and memory only",
    )
    g.addoption(
        "--perf-energy-bound",
        type=float,
        default=SuiteOptions.energy_bound,
        help="plan each energy block so the counter's steps err by at most this share of its energy (default: "
        f"{SuiteOptions.energy_bound}: with the default 10%% energy threshold, two such bounds leave 6%% to the runs' "
        "spreads; a block lasts 0.125 s / bound at a 100 ms counter period)",
    )
    g.addoption(
        "--perf-benchmark-rounds",
        type=int,
        default=3,
        help="synchronised rounds per case that pytest-benchmark times itself (default: 3)",
    )
    g.addoption(
        "--perf-results-dir",
        type=Path,
        default=Path("perf-results"),
        help="where the run's results JSON and Markdown summary go (default: perf-results)",
    )
    g.addoption(
        "--perf-processes",
        type=int,
        default=None,
        help="measure every case in N fresh processes (each its own CUDA context, autotuning and compilation) "
        "and judge the per-process medians (default: 1, in the pytest process; 5 a side with --compare-to; "
        f"at most {MAX_PROCESSES})",
    )
    g.addoption(
        "--compare-to",
        default=None,
        metavar="REV",
        help="A/B: measure git revision REV and the working tree in alternating processes on this device "
        "and fail a case whose slowdown is significant and beyond its noise threshold",
    )
    g.addoption("--ncu", action="store_true", help="run the Nsight Compute cases (tests marked ncu; off by default)")
    g.addoption(
        "--ncu-groups",
        default=",".join(DEFAULT_GROUPS),
        help=f"metric groups to collect: {', '.join(GROUPS)} (default: {','.join(DEFAULT_GROUPS)}; "
        "instmix patches every kernel and costs minutes per combo)",
    )
    g.addoption(
        "--ncu-replay",
        default="range",
        help="range (default: the iteration replayed per counter pass), app-range (the program re-run "
        "per pass) or kernel (every metric per kernel, slow)",
    )
    g.addoption(
        "--ncu-clock-control",
        default="none",
        help=f"ncu --clock-control: {' or '.join(CLOCK_CONTROLS)} (default: none, the card as found)",
    )
    g.addoption("--ncu-timeout", type=float, default=900.0, help="seconds one ncu run may take (default: 900)")
    g.addoption(
        "--history",
        default=None,
        metavar="PATH_OR_URL",
        help="append the run to this history database after results.json is written: an SQLite file or an "
        f"SQLAlchemy URL (default: ${HISTORY_ENV_VAR}, else none; see docs/history.md)",
    )


def parse_combos(spec: str) -> tuple[str, ...]:
    """The combos of a ``--combos`` value (comma-separated names, or 'all'), or a one-line UserError.

    A name given twice is refused: the combo would be built and measured twice and show twice.
    """
    names = tuple(COMBOS) if spec.strip() == "all" else tuple(n.strip() for n in spec.split(",") if n.strip())
    if not names:
        raise UserError(f"no combos given in --combos; choose from {', '.join(COMBOS)} or 'all'")
    for name in names:
        get_combo(name)
    twice = sorted({name for name in names if names.count(name) > 1}, key=names.index)
    if twice:
        raise UserError(f"--combos names {', '.join(twice)} more than once; give each combo once")
    return names


def check_count(option: str, value: int | None, minimum: int, maximum: int | None = None) -> int | None:
    """``value`` if it is None or within [minimum, maximum], else a one-line UserError."""
    if value is not None and value < minimum:
        raise UserError(f"{option} must be at least {minimum}, got {value}")
    if value is not None and maximum is not None and value > maximum:
        raise UserError(f"{option} must be at most {maximum}, got {value}; see --help for what it costs")
    return value


def _at_least(option: str, value: int | None, minimum: int) -> None:
    check_count(option, value, minimum)


def check_processes(option: str, given: int | None, compare_to: str | None) -> int:
    """Measuring processes (a side with --compare-to): the default when not given, 2 or more for an A/B run."""
    processes = given if given is not None else AB_PROCESSES if compare_to is not None else 1
    check_count(option, processes, 2 if compare_to is not None else 1, MAX_PROCESSES)
    return processes


def _arch(name: str | None, baseline_dir: Path) -> str | None:
    """``--arch``: a known architecture, one with a baseline file, or this machine's GPU; else a UserError.

    Any other key would run cases that find no baseline and skip, a run that passes having judged nothing.
    """
    if name is None:
        return None
    validate_arch(name)
    files = {p.stem for p in baseline_dir.glob("*.json")} if baseline_dir.is_dir() else set()
    detected = {detect_arch(torch.device("cuda"))} if torch.cuda.is_available() else set()
    known = sorted((set(KNOWN_ARCHS) | files | detected) - {"cpu"})
    if name not in known:
        raise UserError(
            f"--arch {name!r} is not a known architecture; choose one of {', '.join(known)} (or leave it out: "
            "the GPU is detected)"
        )
    return name


def inapplicable_options(options: SuiteOptions, gpu_cases: int, ncu_cases: int) -> list[str]:
    """One line per option given that has nothing to act on in this session's selection (e.g. ``-m cpu``)."""
    lines = []
    if options.arch is not None and not gpu_cases:
        lines.append(f"--arch {options.arch} has no effect: no GPU case runs in this session (-m cpu, or no GPU)")
    if not options.energy and not gpu_cases:
        lines.append("--perf-energy=off has no effect: energy is measured on GPUs only, and no GPU case runs")
    if options.ncu is not None and not ncu_cases:
        lines.append("--ncu has no effect: no Nsight Compute case runs in this session (they need a GPU)")
    return lines


def _writable_folder(option: str, path: Path) -> None:
    """A UserError unless ``path`` is a folder that exists or can be made, and can be written to."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path} is a file; point it at a folder")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path} cannot be written (no write permission on {existing}); choose another folder")


def _baseline_dir(config: pytest.Config, saving: bool) -> Path:
    """``--baseline-dir`` (else ``<rootdir>/baselines``), checked now rather than after the measurements."""
    given = config.getoption("--baseline-dir")
    path = given or Path(config.rootpath) / "baselines"
    if saving:
        _writable_folder("--baseline-dir", path)
    elif path.exists() and not path.is_dir():
        raise UserError(f"--baseline-dir {path} is a file; point it at the folder that holds <arch>.json files")
    elif given and not path.exists():
        # Every case would skip with "no baseline" and the run would pass having judged nothing.
        raise UserError(f"--baseline-dir {path} does not exist; fix the path, or create baselines with --save-baseline")
    return path


def parse_options(config: pytest.Config) -> SuiteOptions:
    """The suite's options from ``config``, or a one-line UserError naming the bad one."""
    opt = config.getoption
    if opt("--preset") is not None:
        ModelConfig.preset(opt("--preset"))  # raises the unknown-preset error
    _at_least("--batch-size", opt("--batch-size"), 1)
    check_count("--perf-warmup", opt("--perf-warmup"), 0, MAX_WARMUP)
    check_count("--perf-min-rounds", opt("--perf-min-rounds"), 1, MAX_ROUNDS)
    check_count("--perf-max-rounds", opt("--perf-max-rounds"), opt("--perf-min-rounds"), MAX_ROUNDS)
    _at_least("--perf-benchmark-rounds", opt("--perf-benchmark-rounds"), 1)
    for name in ("--perf-rel-iqr", "--perf-budget"):
        if opt(name) is not None and not opt(name) > 0:
            raise UserError(f"{name} must be above 0, got {opt(name)}")
    precision = opt("--perf-median-precision")
    if precision is not None and not 0 <= precision < 1:
        raise UserError(f"--perf-median-precision must be 0 (off) or between 0 and 1, got {precision}")
    if not 0 < opt("--perf-energy-bound") < 1:
        raise UserError(f"--perf-energy-bound must be between 0 and 1, e.g. 0.02, got {opt('--perf-energy-bound')}")
    saving = opt("--save-baseline") or opt("--force-save-baseline")
    if saving and opt("--perf-energy") == "off":
        raise UserError("--save-baseline stores energy too, which --perf-energy=off skips; drop one of them")
    _writable_folder("--perf-results-dir", opt("--perf-results-dir"))
    for name in ("results.json", "summary.md"):  # a pipe or device there would be found only after measuring
        write_target(opt("--perf-results-dir") / name)
    baseline_dir = _baseline_dir(config, saving)
    return SuiteOptions(
        save_baseline=saving,
        force_save=opt("--force-save-baseline"),
        baseline_dir=baseline_dir,
        arch=_arch(opt("--arch"), baseline_dir),
        preset=opt("--preset"),
        combos=parse_combos(opt("--combos")) if opt("--combos") is not None else None,
        batch_size=opt("--batch-size"),
        warmup=opt("--perf-warmup"),
        min_rounds=opt("--perf-min-rounds"),
        max_rounds=opt("--perf-max-rounds"),
        rel_iqr=opt("--perf-rel-iqr"),
        budget_s=opt("--perf-budget"),
        median_precision=opt("--perf-median-precision"),
        energy=opt("--perf-energy") == "on",
        energy_bound=opt("--perf-energy-bound"),
        benchmark_rounds=opt("--perf-benchmark-rounds"),
        results_dir=opt("--perf-results-dir"),
        ncu=_ncu_settings(config) if opt("--ncu") else None,
        processes=check_processes("--perf-processes", opt("--perf-processes"), opt("--compare-to")),
        compare_to=_revision(opt("--compare-to"), saving),
        history=history_target(opt("--history")),
    )


def _revision(rev: str | None, saving: bool) -> str | None:
    if rev is None:
        return None
    if not rev.strip():
        raise UserError("--compare-to is empty; give a commit, branch or tag, e.g. --compare-to=origin/main")
    if saving:
        raise UserError("--compare-to measures two revisions and saves neither; drop --save-baseline or --compare-to")
    return rev.strip()


def _ncu_settings(config: pytest.Config) -> NcuSettings:
    opt = config.getoption
    if not opt("--ncu-timeout") > 0:
        raise UserError(f"--ncu-timeout must be above 0, got {opt('--ncu-timeout')}")
    groups = tuple(g.strip() for g in opt("--ncu-groups").split(",") if g.strip())
    return NcuSettings(
        groups=groups,
        replay=opt("--ncu-replay"),
        clock_control=opt("--ncu-clock-control"),
        warmup=opt("--perf-warmup") if opt("--perf-warmup") is not None else 3,
        timeout_s=opt("--ncu-timeout"),
    )
