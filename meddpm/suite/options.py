"""Every command-line option of the regression suite, declared and validated in one place.

The measurement settings (``--perf-warmup`` and the rest) come from their one declaration in
:mod:`meddpm.measure.campaign.settings`, and the checks of the options ``meddpm-bench`` takes too (preset,
combos, processes, a writable folder) from :mod:`meddpm.measure.campaign.inputs`, so the two commands accept
and refuse the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from meddpm.atomic import run_stamp, write_target
from meddpm.errors import UserError
from meddpm.history.last_good import LAST_GOOD, check_known, compare_to_last_good
from meddpm.history.last_good_run import LastGood
from meddpm.history.target import ENV_VAR as HISTORY_ENV_VAR
from meddpm.history.target import history_target
from meddpm.judge.arch import KNOWN_ARCHS, detect_arch, validate_arch
from meddpm.measure.campaign import inputs
from meddpm.measure.campaign.settings import (
    SUITE,
    CampaignSettings,
    add_settings,
    campaign_settings,
    check_count,
    default_of,
    given_settings,
)
from meddpm.measure.machine import compile_cache
from meddpm.measure.processes.campaign import AB_PROCESSES
from meddpm.measure.processes.sides import ENV_OPTION, PYTHON_OPTION, SAME, OtherSide, interpreter, parse_env
from meddpm.measure.profiling.ncu import CLOCK_CONTROLS, NcuSettings
from meddpm.measure.profiling.ncu_metrics import DEFAULT_GROUPS, GROUPS
from meddpm.run.combos import COMBOS

if TYPE_CHECKING:
    import pytest

# Upper bounds of the counts both commands take: far above any useful run, yet low enough that a
# typo (an extra zero) is refused at once instead of measuring for hours.
MAX_WARMUP = 1000  # warm-up iterations per combo: about a minute of the paper preset on an H200
MAX_ROUNDS = 10_000  # timed rounds: the adaptive rule stops far sooner
MAX_PROCESSES = 32  # measuring processes (a side): each builds and warms every combo, tens of seconds on a GPU

# pytest-benchmark's rounds where a run stores or compares them, and the options (dests) that do
BENCHMARK_ROUNDS = 3
BENCHMARK_STORAGE = ("benchmark_json", "benchmark_autosave", "benchmark_save", "benchmark_compare")


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
    min_rounds: int  # the same default on every device, so resolved when parsed
    max_rounds: int | None
    rel_iqr: float | None
    budget_s: float | None
    benchmark_rounds: int
    results_dir: Path
    ncu: NcuSettings | None = None  # None: Nsight Compute cases are off
    processes: int = 1  # measuring processes per case (per side in an A/B run); 1: in this process
    # An A/B combo needs no more processes once it could flag a slowdown this small (None: all of ``processes``).
    until_detectable: float | None = None
    full_sample: bool = False  # the sampling cases time all T steps instead of estimating from a short run
    compile_cache: str | None = None  # a folder, or "off"; None: MEDDPM_COMPILE_CACHE or the user's cache folder
    compare_to: str | None = None  # a git revision to measure against, alternating processes
    last_good: LastGood | None = None  # the history's run whose commit compare_to is (--compare-to=last-good)
    other: OtherSide = SAME  # side B's interpreter and extra environment (--compare-python, --compare-env)
    history: str | None = None  # the history database the run is appended to; None: none
    median_precision: float | None = None  # None: the device's default
    energy: bool = True  # an energy block per combo (counter windows until the temperature holds)
    energy_bound: float | None = None  # the counter bound each energy block is planned to; None: the suite's default
    run_stamp: str = field(default_factory=run_stamp)  # names this run's own results file

    @property
    def run_results(self) -> Path:
        """This run's own results file in ``results_dir``, which no other run writes."""
        return self.results_dir / f"results-{self.run_stamp}.json"

    @property
    def ab(self) -> bool:
        """Whether this is an A/B run: against a revision, another interpreter or another environment."""
        return self.compare_to is not None or self.other.given

    @property
    def in_processes(self) -> bool:
        """Whether cases are measured in worker processes rather than in the pytest process."""
        return self.processes > 1 or self.ab

    def preset_for(self, on_gpu: bool) -> str:
        """``--preset``, else paper on a GPU and tiny on the CPU."""
        return inputs.preset_for(self.preset, on_gpu).name

    def combos_for(self, on_gpu: bool) -> tuple[str, ...]:
        """``--combos``, else all of them on a GPU and the quick ones on the CPU."""
        return inputs.combos_for(self.combos, on_gpu)

    def campaign_settings(self, on_gpu: bool) -> CampaignSettings:
        """Measurement settings, with the suite's defaults for the device where no option was given."""
        given = {
            "warmup": self.warmup,
            "min_rounds": self.min_rounds,
            "max_rounds": self.max_rounds,
            "rel_iqr_target": self.rel_iqr,
            "budget_s": self.budget_s,
            "median_precision": self.median_precision,
            "energy_error": self.energy_bound,
        }
        return campaign_settings(given, SUITE, on_gpu, energy=self.energy)


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
    g.addoption(
        "--combos",
        default=None,
        help=f"comma-separated combos or 'all': {', '.join(COMBOS)} "
        f"(default: all on a GPU, {','.join(inputs.CPU_DEFAULT_COMBOS)} on the CPU)",
    )
    g.addoption("--batch-size", type=int, default=1, help="volumes per iteration (default: 1)")
    add_settings(g.addoption, SUITE, prefix="perf-")
    g.addoption(
        "--perf-energy",
        choices=("on", "off"),
        default="on",
        help="on (default): after the rounds, each combo runs energy windows back to back until the card's "
        "temperature holds over them (seconds a combo: docs/energy.md); off: time and memory only",
    )
    compile_cache.add_option(g.addoption, "--perf-compile-cache")
    g.addoption(
        "--perf-full-sample",
        action="store_true",
        help="the sampling cases time a full reverse diffusion (all T steps) instead of estimating it from a short "
        "run of steps until their ms/step agree (docs/suite.md)",
    )
    g.addoption(
        "--perf-benchmark-rounds",
        type=int,
        default=None,
        help="synchronised rounds per case that pytest-benchmark times itself, for its storage and comparisons; no "
        f"verdict reads them (default: {BENCHMARK_ROUNDS} where {' or '.join(_flag(d) for d in BENCHMARK_STORAGE)} is "
        "given, else 0: pytest-benchmark times nothing)",
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
        help="measure every case in N fresh processes (each its own CUDA context, autotuning and compilation) and "
        f"judge the per-process medians (default: 1, in the pytest process; {AB_PROCESSES} a side with --compare-to; "
        f"at most {inputs.MAX_PROCESSES})",
    )
    g.addoption(
        "--perf-until-detectable",
        type=float,
        default=None,
        metavar="SHARE",
        help="A/B: from 2 processes a side on, stop measuring a combo once its A/B could flag a slowdown of SHARE "
        "(0.01: 1 %%), so the processes of --perf-processes (now the most a side) go to the noisy combos",
    )
    g.addoption(
        "--compare-to",
        default=None,
        metavar="REV",
        help="A/B: measure git revision REV and the working tree in alternating processes on this device "
        "and fail a case whose slowdown is significant and beyond its noise threshold; "
        f"{LAST_GOOD}: the commit of the newest good suite run of this architecture in the history (--history), "
        "and say per case whether the code or the machine moved",
    )
    g.addoption(
        PYTHON_OPTION,
        default=None,
        metavar="PATH",
        help="A/B: run side B (the working tree, or REV with --compare-to) with this Python interpreter, e.g. "
        "another venv's with another torch, CUDA or cuDNN; it runs this tree's harness and needs torch",
    )
    g.addoption(
        ENV_OPTION,
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="A/B: run side B (the working tree, or REV with --compare-to) with this environment variable too; "
        "repeatable",
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


def benchmark_rounds(config: pytest.Config) -> int:
    """pytest-benchmark's own rounds per case: as given, else :data:`BENCHMARK_ROUNDS` where one of its options
    stores or compares them, else none. Its rounds repeat iterations the verdicts never read (a tenth of a plain
    run's GPU time), so only a run that keeps them pays for them."""
    given = config.getoption("--perf-benchmark-rounds")
    if given is not None:
        return given
    asked = any(config.getoption(option, default=None) for option in BENCHMARK_STORAGE)  # None without the plugin
    return BENCHMARK_ROUNDS if asked else 0


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _at_least(option: str, value: int | None, minimum: int) -> None:
    check_count(option, value, minimum)


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


def _baseline_dir(config: pytest.Config, saving: bool) -> Path:
    """``--baseline-dir`` (else ``<rootdir>/baselines``), checked now rather than after the measurements."""
    given = config.getoption("--baseline-dir")
    path = given or Path(config.rootpath) / "baselines"
    if saving:
        inputs.writable_folder("--baseline-dir", path)
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
        inputs.preset_for(opt("--preset"), on_gpu=True)  # raises the unknown-preset error
    _at_least("--batch-size", opt("--batch-size"), 1)
    _at_least("--perf-benchmark-rounds", opt("--perf-benchmark-rounds"), 0)
    settings = given_settings(opt, SUITE, prefix="perf-")
    saving = opt("--save-baseline") or opt("--force-save-baseline")
    history = history_target(opt("--history"))
    baseline_dir = _baseline_dir(config, saving)
    arch = _arch(opt("--arch"), baseline_dir)
    compare_to = _revision(opt("--compare-to"), saving)
    other = _other_side(opt(PYTHON_OPTION), opt(ENV_OPTION), saving)
    ab = _ab_option(compare_to, other)
    processes = inputs.process_count("--perf-processes", opt("--perf-processes"), ab)
    until_detectable = inputs.detectable_target("--perf-until-detectable", opt("--perf-until-detectable"), ab)
    last_good = compare_to_last_good(compare_to, history, arch or _measured_arch(config), "suite", processes)
    if last_good is not None:
        check_known(last_good)
    compare_to = last_good.commit if last_good else compare_to
    if saving and opt("--perf-energy") == "off":
        raise UserError("--save-baseline stores energy too, which --perf-energy=off skips; drop one of them")
    inputs.writable_folder("--perf-results-dir", opt("--perf-results-dir"))
    for name in ("results.json", "summary.md"):  # a pipe or device there would be found only after measuring
        write_target(opt("--perf-results-dir") / name)
    ncu = _ncu_settings(config)  # checked without --ncu too: a mistyped --ncu-* value is refused, not ignored
    return SuiteOptions(
        save_baseline=saving,
        force_save=opt("--force-save-baseline"),
        baseline_dir=baseline_dir,
        arch=arch,
        preset=opt("--preset"),
        combos=inputs.parse_combos(opt("--combos")),
        batch_size=opt("--batch-size"),
        warmup=settings["warmup"],
        min_rounds=settings["min_rounds"] or default_of("min_rounds", SUITE, on_gpu=True),
        max_rounds=settings["max_rounds"],
        rel_iqr=settings["rel_iqr_target"],
        budget_s=settings["budget_s"],
        median_precision=settings["median_precision"],
        energy=opt("--perf-energy") == "on",
        energy_bound=settings["energy_error"],
        benchmark_rounds=benchmark_rounds(config),
        results_dir=opt("--perf-results-dir"),
        ncu=ncu if opt("--ncu") else None,
        compare_to=compare_to,
        last_good=last_good,
        other=other,
        processes=processes,
        until_detectable=until_detectable,
        history=history,
        full_sample=opt("--perf-full-sample"),
        compile_cache=compile_cache.checked_root(opt("--perf-compile-cache"), "--perf-compile-cache"),
    )


def _measured_arch(config: pytest.Config) -> str:
    """The architecture whose cases this run measures: ``cpu`` where ``-m cpu`` selects the CPU cases alone (a GPU
    machine runs them too), else this machine's first GPU's, or ``cpu`` without one."""
    if (config.getoption("markexpr", None) or "").strip() == "cpu":
        return "cpu"
    return detect_arch(torch.device("cuda")) if torch.cuda.is_available() else "cpu"


def _revision(rev: str | None, saving: bool) -> str | None:
    rev = inputs.revision(rev)
    if rev is not None and saving:
        raise UserError("--compare-to measures two revisions and saves neither; drop --save-baseline or --compare-to")
    return rev


def _ab_option(compare_to: str | None, other: OtherSide) -> str | None:
    """What makes the run an A/B, in words (None: it is none)."""
    return compare_to or (f"{PYTHON_OPTION}/{ENV_OPTION}" if other.given else None)


def _other_side(python: str | None, env: list[str] | None, saving: bool) -> OtherSide:
    other = OtherSide(interpreter(python), parse_env(env))
    if other.given and saving:
        given = PYTHON_OPTION if other.python else ENV_OPTION
        raise UserError(f"{given} measures two environments and saves neither; drop --save-baseline or {given}")
    return other


def _ncu_settings(config: pytest.Config) -> NcuSettings:
    opt = config.getoption
    if not opt("--ncu-timeout") > 0:
        raise UserError(f"--ncu-timeout must be above 0, got {opt('--ncu-timeout')}")
    groups = tuple(g.strip() for g in opt("--ncu-groups").split(",") if g.strip())
    return NcuSettings(
        groups=groups,
        replay=opt("--ncu-replay"),
        clock_control=opt("--ncu-clock-control"),
        warmup=opt("--perf-warmup") if opt("--perf-warmup") is not None else default_of("warmup", SUITE, on_gpu=True),
        timeout_s=opt("--ncu-timeout"),
    )
