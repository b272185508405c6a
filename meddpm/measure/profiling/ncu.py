"""Nsight Compute (ncu) counters of whole training iterations, one combo per subprocess.

ncu profiles :mod:`meddpm.measure.profiling.profiled_step`, which warms a combo up and then runs the
measured iterations inside the NVTX range ``meddpm_step``; only kernels inside it count
(``--nvtx --nvtx-include meddpm_step``), so every kernel of the iteration is seen, not a fixed
window of launches. Ways to replay, with different costs (docs/measured.md, "What profiling costs"):

- ``range`` (default): ncu replays the whole NVTX range once per counter pass and reports one
  row for the iteration, aggregated by the hardware. A second run with kernel replay records
  each kernel's duration for the kernel mix, plus the instruction mix if asked for (ncu
  counts it by patching each kernel's code, which range replay cannot do).
- ``kernel``: every metric for every kernel (each kernel replayed once per pass), aggregated
  here: sums for counts, duration-weighted means for rates. The slowest: minutes per combo at
  128^3 with every group.
- ``app-range``: like ``range``, but ncu re-runs the whole program for each pass instead of
  saving and restoring memory; for ranges ``range`` cannot replay, at minutes per combo.

Clocks: ``--clock-control none`` by default (the card as found, like the timings); ``base``
locks them to base clocks for counter runs that must compare across days. The setting is
recorded with every profile.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from meddpm.errors import UserError
from meddpm.measure.profiling.kernel_mix import categorize, category_shares
from meddpm.measure.profiling.ncu_metrics import DEFAULT_GROUPS, METRIC_BY_KEY, Family, Metric, ncu_names, select
from meddpm.measure.profiling.profiled_step import RANGE
from meddpm.run.combos import get_combo

Replay = Literal["range", "app-range", "kernel"]
REPLAYS = ("range", "app-range", "kernel")
CLOCK_CONTROLS = ("none", "base")
# Chip-name prefixes ncu uses per family ("--list-chips"), to tell whether this ncu still supports a GPU.
CHIP_PREFIX: dict[str, tuple[str, ...]] = {
    "volta": ("gv",),
    "turing": ("tu",),
    "ampere": ("ga", "ad"),
    "hopper": ("gh",),
    "blackwell": ("gb",),
}


@dataclass(frozen=True)
class NcuSettings:
    """How to profile: metric groups, replay mode, clock control, warm-up and a time limit per ncu run."""

    groups: tuple[str, ...] = DEFAULT_GROUPS
    replay: Replay = "range"
    clock_control: str = "none"
    warmup: int = 3
    timeout_s: float = 900.0

    def __post_init__(self) -> None:
        select(self.groups)  # raises on an unknown group
        if self.replay not in REPLAYS:
            raise UserError(f"unknown ncu replay mode {self.replay!r}; choose {', '.join(REPLAYS)}")
        if self.clock_control not in CLOCK_CONTROLS:
            raise UserError(f"unknown ncu clock control {self.clock_control!r}; choose {' or '.join(CLOCK_CONTROLS)}")

    @property
    def metrics(self) -> tuple[Metric, ...]:
        return select(self.groups)


@dataclass
class NcuProfile:
    """Counters of one combo's training iteration, its kernels, and how they were taken."""

    preset: str
    combo: str
    batch_size: int
    family: Family
    settings: NcuSettings
    ncu_version: str
    totals: dict[str, float]
    kernels: pd.DataFrame  # one row per kernel launch: kernel, duration_ns, category (+ metrics in kernel replay)
    wall_s: dict[str, float] = field(default_factory=dict)
    reports: list[str] = field(default_factory=list)

    def mix(self) -> pd.DataFrame:
        """GPU time per kernel category: ms, share and launches, largest first."""
        return kernel_mix(self.kernels)

    def top_kernels(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` kernels (by name) that take the most GPU time, with their share and launches."""
        by = self.kernels.groupby("kernel").agg(
            ms=("duration_ns", "sum"), launches=("duration_ns", "size"), category=("category", "first")
        )
        by["ms"] /= 1e6
        by["share"] = by["ms"] / by["ms"].sum()
        return by.sort_values("ms", ascending=False).head(n).reset_index()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: settings, totals, the kernel mix and the top kernels."""
        return {
            "preset": self.preset,
            "combo": self.combo,
            "batch_size": self.batch_size,
            "family": self.family,
            "ncu_version": self.ncu_version,
            "replay": self.settings.replay,
            "clock_control": self.settings.clock_control,
            "groups": list(self.settings.groups),
            "totals": self.totals,
            "kernel_launches": len(self.kernels),
            "kernel_mix": self.mix().reset_index().to_dict(orient="records"),
            "top_kernels": self.top_kernels().to_dict(orient="records"),
            "wall_s": self.wall_s,
            "reports": self.reports,
        }


class NcuUnavailable(UserError):
    """ncu cannot profile here at all (not installed, or too new for this GPU): cases skip, not fail."""


# --- finding ncu ------------------------------------------------------------------------
def find_ncu() -> str:
    """The path of ``ncu``, or a UserError saying how to get it."""
    path = shutil.which("ncu")
    if path is None:
        raise NcuUnavailable(
            "ncu (Nsight Compute) is not on PATH; install Nsight Compute (it comes with the CUDA toolkit) "
            "and add its folder to PATH, or run without --ncu"
        )
    return path


def ncu_version(ncu: str) -> str:
    """ncu's version, e.g. '2025.3.1.0'."""
    out = subprocess.run([ncu, "--version"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"Version (\S+)", out)
    return found.group(1) if found else out.strip().splitlines()[-1] if out.strip() else "unknown"


def unsupported_reason(list_chips_output: str, family: Family, version: str) -> str | None:
    """Why this ncu cannot profile a GPU of ``family`` (from ``ncu --list-chips``), or None if it can."""
    chips = re.findall(r"[a-z]{2}\d{3}[a-z0-9]*", list_chips_output.lower())
    if any(chip.startswith(CHIP_PREFIX[family]) for chip in chips):
        return None
    return (
        f"this ncu ({version}) does not support {family} GPUs (its --list-chips has no "
        f"{'/'.join(CHIP_PREFIX[family])}* chip); use an older Nsight Compute for this GPU"
    )


def check_supported(ncu: str, family: Family) -> str:
    """ncu's version if it can profile ``family``; otherwise a UserError naming the problem."""
    version = ncu_version(ncu)
    chips = subprocess.run([ncu, "--list-chips"], capture_output=True, text=True, check=False).stdout
    reason = unsupported_reason(chips, family, version)
    if reason:
        raise NcuUnavailable(reason)
    return version


# --- running ----------------------------------------------------------------------------
def ncu_command(
    ncu: str, metric_names: Sequence[str], replay: Replay, clock_control: str, report: Path, target: Sequence[str]
) -> list[str]:
    """The ncu command line that profiles ``target`` inside the NVTX range into ``report``."""
    return [
        ncu,
        "--nvtx",
        "--nvtx-include",
        RANGE,  # a start/end range (a trailing slash would name a push/pop range)
        "--replay-mode",
        replay,
        "--clock-control",
        clock_control,
        "--target-processes",
        "application-only",  # not Inductor's compile workers
        "--metrics",
        ",".join(metric_names),
        "--force-overwrite",
        "--export",
        str(report),
        *target,
    ]


def target_command(preset: str, combo: str, batch_size: int, warmup: int, device_index: int) -> list[str]:
    """The profiled subprocess: this Python, warm-up, then one iteration in the NVTX range."""
    return [
        sys.executable,
        "-m",
        "meddpm.measure.profiling.profiled_step",
        f"--preset={preset}",
        f"--combo={combo}",
        f"--batch-size={batch_size}",
        f"--warmup={warmup}",
        f"--device={device_index}",
    ]


_KNOWN_FAILURES = (
    (
        "ERR_NVGPUCTRPERM",
        "ncu may not read the GPU's performance counters as this user (ERR_NVGPUCTRPERM); run as root or allow "
        "it (https://developer.nvidia.com/ERR_NVGPUCTRPERM)",
    ),
    (
        "LibraryNotLoaded",
        "ncu cannot reach the GPU's counters on this machine (LibraryNotLoaded; containers with a sandboxed "
        "driver, e.g. gVisor, do this); run on a machine that gives ncu the GPU",
    ),
    ("Failed to find metric", "this ncu does not know a metric it was asked for"),
    (
        "Unsupported API during capture",
        "ncu's range replay cannot capture this iteration: it makes a driver call that range replay does not "
        "support (the compiled fast combo does); use --ncu-replay=app-range, which re-runs "
        "the program per pass (about 1.5 min each for fast), with a --ncu-timeout to match",
    ),
)


def _run_logged(command: list[str], log: Path, timeout_s: float, on_timeout: str) -> tuple[int, float]:
    """Run ``command``, its output to ``log``: (exit status, wall seconds), or UserError ``on_timeout``."""
    started = time.perf_counter()
    try:
        with log.open("w") as out:
            proc = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise UserError(f"{on_timeout} (log: {log})") from None
    return proc.returncode, time.perf_counter() - started


def _run_ncu(command: list[str], log: Path, timeout_s: float, what: str) -> float:
    """Run one ncu command, its output to ``log``; returns its wall time or raises a one-line UserError."""
    returncode, seconds = _run_logged(
        command,
        log,
        timeout_s,
        f"ncu ran past {timeout_s:.0f} s on {what}; raise --ncu-timeout, or collect fewer metric groups "
        f"(--ncu-groups=core); range replay is the quickest for whole iterations",
    )
    text = log.read_text(errors="replace")
    for needle, message in _KNOWN_FAILURES:
        if needle in text:
            detail = re.search(rf".*{needle}.*", text)
            raise UserError(f"{message} [{what}: {detail.group(0).strip()[:160] if detail else needle}] (log: {log})")
    if returncode != 0:
        # ncu ends with generic advice; its first error line names the cause.
        lines = [line for line in text.splitlines() if line.strip()]
        cause = next((line for line in lines if line.startswith("==ERROR==")), lines[-1] if lines else "no output")
        raise UserError(f"ncu failed on {what} with exit status {returncode}: {cause[:200]} (log: {log})")
    if "No kernels were profiled" in text:
        raise UserError(f"ncu profiled no kernel inside the NVTX range {RANGE!r} on {what} (log: {log})")
    return seconds


def export_csv(ncu: str, report: Path) -> str:
    """The raw page of a report as CSV, every value in base units (no per-row auto-scaling)."""
    proc = subprocess.run(
        [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise UserError(f"ncu could not read back its report {report}: {proc.stderr.strip()[:200]}")
    return proc.stdout


# --- parsing and aggregating ------------------------------------------------------------
def parse_raw_csv(text: str) -> pd.DataFrame:
    """ncu's ``--page raw --csv`` output as a table: one row per profiled kernel (or range).

    The first line names the columns and the second gives their units; values may carry
    thousands separators. Metric columns become floats ("n/a" becomes NaN).
    """
    lines = [line for line in text.splitlines() if line.startswith('"')]  # drop ncu's ==PROF== notes
    if len(lines) < 2:
        raise UserError("ncu's CSV has no rows (was anything profiled?)")
    table = pd.read_csv(io.StringIO("\n".join(lines)), dtype=str, keep_default_na=False)
    table = table.iloc[1:].reset_index(drop=True)  # the units row
    for column in table.columns:
        if "__" not in column:  # ncu metric names are unit__counter[.rollup...]
            continue
        text = table[column].str.replace(",", "")
        values = pd.to_numeric(text, errors="coerce").astype(float)
        # Attributes such as device__attribute_display_name stay text.
        if values.notna().sum() == (~text.isin(["", "n/a"])).sum():
            table[column] = values
    return table


def kernels_table(raw: pd.DataFrame, metrics: Sequence[Metric], family: Family) -> pd.DataFrame:
    """Per-kernel table keyed by the suite's metric keys, with each kernel's category.

    A metric served by several ncu metrics is their sum; one ncu did not collect is left out.
    """
    name_column = next((c for c in ("Kernel Name", "Range Name", "Name") if c in raw.columns), None)
    kernel_names = raw[name_column].astype(str) if name_column else pd.Series([RANGE] * len(raw))
    table = pd.DataFrame({"kernel": kernel_names})
    for metric in metrics:
        collected = [n for n in metric.ncu_names(family) if n in raw.columns]
        if collected:
            table[metric.key] = raw[collected].sum(axis=1, min_count=1)
    table["category"] = table["kernel"].map(categorize)
    return table


def aggregate(kernels: pd.DataFrame, metrics: Sequence[Metric]) -> dict[str, float]:
    """One iteration's figures: sums for counts, duration-weighted means for rates.

    A rate's mean skips kernels where it is NaN (ncu reports n/a for some counters on some
    kernels) and weights the rest by their share of their combined duration.
    """
    duration = kernels["duration_ns"]
    totals: dict[str, float] = {}
    for metric in metrics:
        if metric.key not in kernels.columns:
            continue
        values = kernels[metric.key]
        if metric.kind == "count":
            totals[metric.key] = float(values.sum(min_count=1))
        else:
            known = values.notna() & duration.notna()
            weight = duration[known].sum()
            totals[metric.key] = float((values[known] * duration[known]).sum() / weight) if weight else float("nan")
    return totals


def kernel_mix(kernels: pd.DataFrame) -> pd.DataFrame:
    """GPU time per category: ms, share of the iteration's kernel time and launches, largest first."""
    return category_shares(kernels.assign(us=kernels["duration_ns"] / 1e3, launches=1))


# --- one combo ----------------------------------------------------------------------------
def profile_combo(
    preset: str,
    combo: str,
    *,
    family: Family,
    out_dir: Path,
    settings: NcuSettings = NcuSettings(),
    batch_size: int = 1,
    device_index: int = 0,
    ncu: str | None = None,
) -> NcuProfile:
    """Profile one training iteration of ``combo`` under ncu; reports and logs go to ``out_dir``."""
    ncu = ncu or find_ncu()
    version = check_supported(ncu, family)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = target_command(preset, combo, batch_size, settings.warmup, device_index)
    stem = f"{preset}-{combo}-b{batch_size}"
    wall: dict[str, float] = {}
    if get_combo(combo).compile:
        wall["compile"] = round(_compile_outside_ncu(target, out_dir / f"{stem}-compile.log", settings.timeout_s), 1)
    reports: list[str] = []
    totals: dict[str, float] = {}
    kernels = pd.DataFrame()
    for name, replay, metrics in _passes(settings):
        report = out_dir / f"{stem}-{name}.ncu-rep"
        command = ncu_command(ncu, ncu_names(metrics, family), replay, settings.clock_control, report, target)
        wall[name] = round(_run_ncu(command, out_dir / f"{stem}-{name}.log", settings.timeout_s, f"{combo}"), 1)
        csv_text = export_csv(ncu, report)
        (out_dir / f"{stem}-{name}.csv").write_text(csv_text)
        table = kernels_table(parse_raw_csv(csv_text), metrics, family)
        # Passes run range first: the kernel pass's duration (the sum of kernel times, no idle
        # gaps) replaces the range's elapsed time.
        totals.update(aggregate(table, metrics))
        if replay == "kernel":
            kernels = table
        reports.append(str(report))
    return NcuProfile(preset, combo, batch_size, family, settings, version, totals, kernels, wall, reports)


def _compile_outside_ncu(target: list[str], log: Path, timeout_s: float) -> float:
    """Run the target once without ncu, so that the profiled runs find Inductor's on-disk cache.

    Compiling under ncu is slow (every autotuning launch is intercepted): the fast combo may not
    reach its NVTX range within minutes (docs/measured.md). Returns the wall time.
    """
    returncode, seconds = _run_logged(
        target, log, timeout_s, f"compiling before profiling ran past {timeout_s:.0f} s; raise --ncu-timeout"
    )
    if returncode != 0:
        raise UserError(f"the profiled step failed before profiling, with exit status {returncode} (log: {log})")
    return seconds


def _passes(settings: NcuSettings) -> list[tuple[str, Replay, tuple[Metric, ...]]]:
    """The ncu runs a profile needs: (name, replay mode, metrics)."""
    metrics = settings.metrics
    if settings.replay == "kernel":
        return [("kernels", "kernel", metrics)]
    per_kernel = (METRIC_BY_KEY["duration_ns"], *(m for m in metrics if not m.range_replay))
    whole = tuple(m for m in metrics if m.range_replay)
    return [("range", settings.replay, whole), ("kernels", "kernel", per_kernel)]
