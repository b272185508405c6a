"""Every measurement setting of the suite, ``meddpm-bench`` and the worker: declared once, with its defaults and checks.

:class:`CampaignSettings` is what one campaign runs with, each field with its own default and check.
:data:`SETTINGS` is the table of options: per setting its option name, type, help, check and the
:class:`CampaignSettings` field it sets, and per tool that offers it the default on a GPU and on the CPU
(:data:`OWN`: the field's own default). The worker receives the whole :class:`CampaignSettings` the suite
or the bench resolved (:func:`worker_arguments`).
:func:`add_settings` declares them on an argparse parser or a pytest option group (``add_argument`` and
``addoption`` take the same keywords) under a prefix (``--perf-`` in the suite, none in the bench);
:func:`given_settings` reads and checks the values given; :func:`campaign_settings` fills in the defaults.
The options default to ``None``, so that what a user gave can be told from a default that depends on the device.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from meddpm.errors import UserError
from meddpm.measure.energy.heat_soak import SoakPlan

Tool = Literal["suite", "bench"]
SUITE: Tool = "suite"
BENCH: Tool = "bench"
OWN = "CampaignSettings' own"  # a default that is the CampaignSettings field's own default

# GPU defaults of the suite and the bench. A process median is the unit of their verdicts, so it
# should carry little noise of its own: `fast`'s consecutive rounds correlate, and its median of the
# minimum 5 rounds is uncertain by more than its medians differ between processes; a 0.2 % target
# costs it seconds a process and leaves the eager combos at their 5 (the figures: docs/statistics.md).
GPU_MEDIAN_PRECISION = 0.002
GPU_MAX_ROUNDS = 500

# Upper bounds of the counts both tools take: far above any useful run, yet low enough that a
# typo (an extra zero) is refused at once instead of measuring for hours.
MAX_WARMUP = 1000  # warm-up iterations per combo: about a minute of the paper preset on an H200
MAX_ROUNDS = 10_000  # timed rounds: the adaptive rule stops far sooner


@dataclass(frozen=True)
class CampaignSettings:
    """How long to measure: warm-up, round limits, the noise target and the time budget."""

    # The first iteration autotunes; the second already runs as the third does (docs/ci.md). A combo with CUDA
    # graphs warms up over the calls it needs to record them, whatever this says.
    warmup: int = 1
    min_rounds: int = 5
    max_rounds: int = 30
    rel_iqr_target: float = 0.02
    budget_s: float = 300.0
    # Relative standard error each combo's median must reach before it stops (0: no such rule).
    median_precision: float = 0.0
    energy_error: float = 0.01  # bound on the energy counter's quantisation error per block
    energy_windows: int = 3  # windows per block, for the spread of energy per iteration
    # An energy block per combo after the rounds (1.25 counter periods / energy_error of GPU time,
    # about 12 s at a 100 ms period); off where only time is judged, as in an A/B run.
    energy: bool = True
    # Each block's windows run until the card's temperature has settled over them (leakage power follows it).
    energy_soak: SoakPlan = SoakPlan()
    # One iteration of each combo profiled after the rounds, for its kernels and counts; off in an A/B's later
    # processes, which repeat them exactly (launches and FLOPs; bytes allocated within the counts gate's slack).
    profile: bool = True
    # The combos run in turns, untimed, until the card's temperature holds before any round is timed: a run's first
    # process, on a card its previous work left cool, would measure a power-capped combo faster than every later
    # process (the campaign's PREHEAT). Only a run of several processes asks for it, for its first.
    preheat: bool = False

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise UserError(f"warm-up iterations must be 0 or more, got {self.warmup}")
        if self.min_rounds < 1 or self.max_rounds < self.min_rounds:
            raise UserError(
                f"rounds must satisfy 1 <= min ({self.min_rounds}) <= max ({self.max_rounds}); fix the round options"
            )
        if not self.rel_iqr_target > 0:
            raise UserError(f"the relative-IQR target must be above 0, got {self.rel_iqr_target}")
        if not self.budget_s > 0:
            raise UserError(f"the time budget must be above 0 s, got {self.budget_s}")
        if not 0 <= self.median_precision < 1:
            raise UserError(f"the median precision must be 0 (off) or between 0 and 1, got {self.median_precision}")
        if not 0 < self.energy_error < 1:
            raise UserError(f"the energy error target must be between 0 and 1, got {self.energy_error}")
        if self.energy_windows < 2:
            raise UserError(f"energy needs at least 2 windows per block for a spread, got {self.energy_windows}")

    @property
    def stop_rule(self) -> str:
        """When a combo stops, in words: "3% rel. IQR and a median within 0.2%"."""
        precision = f" and a median within {self.median_precision:.1%}" if self.median_precision else ""
        return f"{self.rel_iqr_target:.0%} rel. IQR{precision}"


Check = Callable[[str, Any, Mapping[str, Any]], None]  # (option, value, the values given by field)


def check_count(option: str, value: int | None, least: int, most: int | None = None) -> int | None:
    """``value`` if it is None or within [least, most], else a one-line UserError naming ``option``."""
    if value is not None and value < least:
        raise UserError(f"{option} must be at least {least}, got {value}")
    if value is not None and most is not None and value > most:
        raise UserError(f"{option} must be at most {most}, got {value}; see --help for what it costs")
    return value


def _count(least: int, most: int) -> Check:
    def check(option: str, value: int, given: Mapping[str, Any]) -> None:
        check_count(option, value, least, most)

    return check


def _max_rounds(option: str, value: int, given: Mapping[str, Any]) -> None:
    least = given.get("min_rounds")  # not given: the default, CampaignSettings' in every tool
    check_count(option, value, CampaignSettings.min_rounds if least is None else least, MAX_ROUNDS)


def _above_zero(option: str, value: float, given: Mapping[str, Any]) -> None:
    if not value > 0:
        raise UserError(f"{option} must be above 0, got {value}")
    if math.isinf(value):  # it is stored in the results JSON, which has no number for inf
        raise UserError(f"{option} must be finite, got {value}; give a number of the size you mean")


def _precision(option: str, value: float, given: Mapping[str, Any]) -> None:
    if not 0 <= value < 1:
        raise UserError(f"{option} must be 0 (off) or between 0 and 1, got {value}")


def _share(option: str, value: float, given: Mapping[str, Any]) -> None:
    if not 0 < value < 1:
        raise UserError(f"{option} must be between 0 and 1, e.g. 0.02, got {value}")


@dataclass(frozen=True)
class Setting:
    """One measurement setting: its option, the CampaignSettings field it sets, and its defaults per tool."""

    name: str  # the option without its prefix: --perf-<name> in the suite, --<name> in the bench
    field: str  # the CampaignSettings field it sets
    type: type
    help: str  # "{default}" is replaced by the tool's defaults in words
    check: Check
    defaults: Mapping[Tool, tuple[object, object]]  # (on a GPU, on the CPU) per tool that offers it
    adaptive: bool = True  # the bench's adaptive rounds (which --iters replaces)
    raised_to: str | None = None  # a default below this field's value rises to it

    def option(self, prefix: str) -> str:
        return f"--{prefix}{self.name}"

    def default(self, tool: Tool, on_gpu: bool) -> object:
        """The tool's default on this device; :data:`OWN` resolved to CampaignSettings'."""
        value = self.defaults[tool][0 if on_gpu else 1]
        return getattr(CampaignSettings, self.field) if value is OWN else value

    def help_for(self, tool: Tool) -> str:
        gpu, cpu = (f"{self.default(tool, on_gpu):g}" for on_gpu in (True, False))
        words = gpu if gpu == cpu else f"{gpu} on a GPU, {cpu} on the CPU"
        text = self.help.format(default=words)
        return f"adaptive: {text}" if tool == BENCH and self.adaptive else text


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "warmup",
        "warmup",
        int,
        "untimed warm-up iterations per combo (default: {default}; never fewer than a combo's CUDA graphs need; "
        f"at most {MAX_WARMUP})",
        _count(0, MAX_WARMUP),
        {SUITE: (OWN, OWN), BENCH: (OWN, OWN)},
        adaptive=False,
    ),
    Setting(
        "min-rounds",
        "min_rounds",
        int,
        f"timed rounds at least (default: {{default}}, the fewest that can reach p < 0.01; at most {MAX_ROUNDS})",
        _count(1, MAX_ROUNDS),
        {SUITE: (OWN, OWN), BENCH: (OWN, OWN)},
    ),
    Setting(
        "max-rounds",
        "max_rounds",
        int,
        f"timed rounds at most (default: {{default}}, and never fewer than the least; at most {MAX_ROUNDS})",
        _max_rounds,
        {SUITE: (GPU_MAX_ROUNDS, 8), BENCH: (GPU_MAX_ROUNDS, OWN)},
        raised_to="min_rounds",
    ),
    Setting(
        "rel-iqr",
        "rel_iqr_target",
        float,
        "stop once every combo's IQR/median is below this (default: {default})",
        _above_zero,
        # CPU runners share cores with everything else; they rarely get under 3 %.
        {SUITE: (0.03, 0.25), BENCH: (OWN, OWN)},
    ),
    Setting(
        "budget",
        "budget_s",
        float,
        "seconds of timed rounds per preset at most (default: {default})",
        _above_zero,
        {SUITE: (600.0, 60.0), BENCH: (OWN, OWN)},
    ),
    Setting(
        "median-precision",
        "median_precision",
        float,
        "a combo stops only once the standard error of its median, relative to it, is below this; 0: no such "
        "rule (default: {default})",
        _precision,
        # Off on the CPU: its rounds spread 25 % and would run to the limit.
        {SUITE: (GPU_MEDIAN_PRECISION, OWN), BENCH: (GPU_MEDIAN_PRECISION, OWN)},
    ),
    Setting(
        "energy-bound",
        "energy_error",
        float,
        "plan each energy block so the counter's steps err by at most this share of its energy (default: "
        "{default}: with the default 10%% energy threshold, two such bounds leave 6%% to the runs' spreads; a block "
        "lasts 0.125 s / bound at a 100 ms counter period)",
        _share,
        {SUITE: (0.02, 0.02)},
        adaptive=False,
    ),
)
BY_FIELD: Mapping[str, Setting] = {s.field: s for s in SETTINGS}


def offered(tool: Tool) -> tuple[Setting, ...]:
    """The settings ``tool`` has options for."""
    return tuple(s for s in SETTINGS if tool in s.defaults)


def add_settings(addoption: Callable[..., Any], tool: Tool, prefix: str = "") -> None:
    """Declare ``tool``'s settings with ``addoption`` (``parser.add_argument`` or a pytest group's ``addoption``)."""
    for s in offered(tool):
        addoption(s.option(prefix), type=s.type, default=None, help=s.help_for(tool))


def given_settings(get: Callable[[str], Any], tool: Tool, prefix: str = "") -> dict[str, Any]:
    """The values given for ``tool``'s settings by CampaignSettings field (None: not given), checked.

    ``get`` reads an option by its name (``config.getoption``, or :func:`namespace_reader`); a bad value
    is a UserError naming the option.
    """
    given = {s.field: get(s.option(prefix)) for s in offered(tool)}
    for s in offered(tool):
        if given[s.field] is not None:
            s.check(s.option(prefix), given[s.field], given)
    return given


def namespace_reader(args: argparse.Namespace) -> Callable[[str], Any]:
    """Reads an argparse namespace by option name, as pytest's ``config.getoption`` does."""
    return lambda option: getattr(args, option.lstrip("-").replace("-", "_"))


def default_of(field_name: str, tool: Tool, on_gpu: bool) -> object:
    """``tool``'s default of one setting on this device."""
    return BY_FIELD[field_name].default(tool, on_gpu)


def campaign_settings(given: Mapping[str, Any], tool: Tool, on_gpu: bool, **fixed: Any) -> CampaignSettings:
    """CampaignSettings of the values given, with ``tool``'s defaults on this device where none was given.

    ``given``: by field, as :func:`given_settings` read and checked them; ``fixed``: fields no option sets
    (the suite's energy switch).
    """
    values: dict[str, Any] = {}
    for s in offered(tool):
        if given.get(s.field) is not None:
            values[s.field] = given[s.field]
    for s in offered(tool):
        if s.field not in values:
            default = s.default(tool, on_gpu)
            floor = values.get(s.raised_to, default) if s.raised_to else default
            values[s.field] = max(default, floor)
    return CampaignSettings(**values, **fixed)


def worker_arguments(settings: CampaignSettings) -> list[str]:
    """The worker's command-line arguments carrying every field of ``settings``.

    The worker is always this tree's (a revision supplies only its workload), so the whole
    dataclass travels as JSON and a new field needs no change here.
    """
    return ["--settings", json.dumps(dataclasses.asdict(settings))]


def add_worker_settings(parser: argparse.ArgumentParser) -> None:
    """The worker's ``--settings`` option, read back into CampaignSettings."""
    parser.add_argument("--settings", type=_from_json, required=True, help="CampaignSettings as JSON")


def _from_json(text: str) -> CampaignSettings:
    fields = json.loads(text)
    return CampaignSettings(**{**fields, "energy_soak": SoakPlan(**fields["energy_soak"])})
