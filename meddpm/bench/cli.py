"""``meddpm-bench``: time Med-DDPM training iterations for chosen combos on this machine."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from meddpm.atomic import run_stamp, write_json_atomic
from meddpm.bench import bisect, cpu_time, host_ram
from meddpm.bench import extras as bench_extras
from meddpm.bench import processes as bench_processes
from meddpm.bench.output import say, say_gpu_state
from meddpm.errors import UserError, run_command
from meddpm.history.results import RunHeader
from meddpm.history.target import DEFAULT_DB as HISTORY_DB
from meddpm.history.target import ENV_VAR as HISTORY_ENV_VAR
from meddpm.history.target import history_target
from meddpm.judge.arch import detect_arch
from meddpm.measure.campaign import inputs
from meddpm.measure.campaign.interleaved import Campaign, ComboResult
from meddpm.measure.campaign.interleaved import Progress as CampaignProgress
from meddpm.measure.campaign.protocol import MeasuringCampaign
from meddpm.measure.campaign.settings import (
    BENCH,
    MAX_ROUNDS,
    CampaignSettings,
    add_settings,
    campaign_settings,
    check_count,
    default_of,
    given_settings,
    namespace_reader,
    offered,
)
from meddpm.measure.campaign.time_split import TimeSplit
from meddpm.measure.machine import compile_cache
from meddpm.measure.machine.environment import environment
from meddpm.measure.processes.campaign import ProcessCampaign, ProcessFailed, signals_as_interrupt
from meddpm.model.config import PRESETS
from meddpm.report.power_plot import power_chart
from meddpm.report.tables import (
    BENCH_CPU_TABLE,
    BENCH_TABLE,
    energy_table,
    format_table,
    results_table,
    stop_reasons,
)
from meddpm.run.combos import COMBOS, get_combo

PROG = "meddpm-bench"
JSON_SCHEMA = "meddpm-bench/4"
CPU_DEFAULT_ITERS = 3
# Other processes take a shared machine's cores at will: one run can read many times another made minutes later.
CPU_NOTE = (
    "note: CPU timings on a shared machine are indicative only (other processes take the cores, so runs minutes "
    "apart can differ several-fold and wide spreads are usual); regression verdicts and speedups need a GPU"
)


class _Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line like every other user error here."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see {PROG} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Time Med-DDPM training iterations (forward, L1 loss, backward, Adam) per combo.",
    )
    p.add_argument("--preset", help=f"model preset: {', '.join(PRESETS)} (default: paper on a GPU, tiny on CPU)")
    p.add_argument(
        "--combos",
        help=f"comma-separated combos or 'all': {', '.join(COMBOS)} "
        f"(default: all on a GPU, {','.join(inputs.CPU_DEFAULT_COMBOS)} on CPU)",
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto = cuda if present)")
    p.add_argument("--batch-size", type=int, default=1, help="volumes per iteration (default: 1)")
    p.add_argument(
        "--iters",
        type=int,
        help=f"exactly this many timed rounds (default: adaptive on GPU, {CPU_DEFAULT_ITERS} on CPU "
        f"unless an adaptive option is given; at most {MAX_ROUNDS})",
    )
    add_settings(p.add_argument, BENCH)
    p.add_argument("--sample", action="store_true", help="also time one full reverse diffusion (all T steps) per combo")
    p.add_argument(
        "--kernel-mix", action="store_true", help="also profile one iteration per combo: GPU time by kernel category"
    )
    p.add_argument(
        "--gpus",
        type=int,
        default=0,
        help="also measure DDP (torchrun) on 1..N GPUs per combo, weak scaling (NCCL; on the CPU: N gloo processes)",
    )
    bench_processes.add_arguments(p)
    p.add_argument(
        "--bisect",
        metavar="GOOD..BAD",
        help="find the commit that made one combo slower: measure the ends, then halve the first-parent commits "
        f"between them, each step an A/B against GOOD in alternating processes ({bisect.PROCESSES} a side unless "
        "--processes); prints the culprit with its ratio against its parent",
    )
    p.add_argument(
        "--follow-counts",
        action="store_true",
        help="with --bisect: follow the counts instead of the time (a regression of launches, bytes allocated or "
        "FLOPs, slower or not): the culprit is the commit where they first rose beyond GOOD's, each halving one "
        "profiled process, then timed against its parent",
    )
    compile_cache.add_option(p.add_argument, "--compile-cache")
    p.add_argument(
        cpu_time.OPTION,
        action="store_true",
        help=f"run on the CPU even where the run is estimated to take over {cpu_time.BOUND_S / 60:.0f} minutes",
    )
    p.add_argument("--json", help="where to write results (default: bench-results/<time>-<preset>.json)")
    p.add_argument(
        "--history",
        nargs="?",
        const="",
        metavar="PATH_OR_URL",
        help=f"append the run to this history database (SQLite file or SQLAlchemy URL) once the JSON is written; "
        f"alone: ${HISTORY_ENV_VAR}, else ./{HISTORY_DB} (default: ${HISTORY_ENV_VAR} if set, else none)",
    )
    return p


def resolve_device(name: str) -> torch.device:
    """The torch device for a --device value, or a UserError naming the valid choices."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {name!r}; choose auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise UserError(f"unsupported device {name!r}; choose auto, cpu, cuda or cuda:N")
    if device.type == "cpu" and device.index is not None:
        # PyTorch runs every CPU tensor on the one "cpu" device: an index would be ignored.
        raise UserError(f"device {name!r}: the CPU takes no index; use --device cpu")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError("no CUDA GPU is visible to PyTorch; use --device cpu")
        if (device.index or 0) >= torch.cuda.device_count():
            raise UserError(f"device {name!r} does not exist; this machine has {torch.cuda.device_count()} GPU(s)")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def _positive(name: str, value: int) -> int:
    if value < 1:
        raise UserError(f"{name} must be at least 1, got {value}")
    return value


def _settings(args: argparse.Namespace, on_gpu: bool) -> CampaignSettings:
    """Fixed rounds for --iters (and on the CPU by default), else adaptive with the options given."""
    given = given_settings(namespace_reader(args), BENCH)
    adaptive = [s.option("") for s in offered(BENCH) if s.adaptive and given[s.field] is not None]
    if args.iters is not None and adaptive:
        raise UserError(
            f"--iters fixes the number of rounds, so {', '.join(adaptive)} would be ignored; give one or the other"
        )
    if args.iters is None and (on_gpu or adaptive):
        return campaign_settings(given, BENCH, on_gpu)
    iters = check_count("--iters", args.iters if args.iters is not None else CPU_DEFAULT_ITERS, 1, MAX_ROUNDS)
    warmup = given["warmup"] if given["warmup"] is not None else default_of("warmup", BENCH, on_gpu)
    return CampaignSettings(warmup=warmup, min_rounds=iters, max_rounds=iters)


def _check_extras(args: argparse.Namespace, device: torch.device) -> None:
    """Refuse the extras that cannot work here now, rather than after minutes of measuring."""
    if args.kernel_mix and device.type != "cuda":
        raise UserError("--kernel-mix profiles CUDA kernels; run it on a GPU or leave it out")
    if args.gpus < 0:
        raise UserError(f"--gpus must be 0 (no DDP) or more, got {args.gpus}")
    if not args.gpus:
        return
    if not torch.distributed.is_available():
        raise UserError("--gpus needs torch.distributed, which this PyTorch build lacks; leave --gpus out")
    if device.type == "cuda" and args.gpus > torch.cuda.device_count():
        raise UserError(f"--gpus {args.gpus} asks for more GPUs than the {torch.cuda.device_count()} visible; lower it")
    cores = os.cpu_count() or 1
    if device.type == "cpu" and args.gpus > cores:
        # torchrun gives each rank one thread: more ranks than cores would time contention, not scaling.
        raise UserError(
            f"--gpus {args.gpus} on the CPU runs {args.gpus} processes on {cores} cores; use {cores} at most"
        )


def _json_path(given: str | None, preset: str) -> Path:
    """Where the results go, checked writable now: a failed write would lose the whole run."""
    if given == "":
        raise UserError("--json is empty; give a file path such as results.json")
    if given is not None:
        path = Path(given)
    else:
        # Unique per run, and never one that exists: two runs in one folder each keep their file.
        stem = f"{run_stamp()}-{preset}"
        path, n = Path("bench-results") / f"{stem}.json", 1
        while path.exists():
            n += 1
            path = path.with_name(f"{stem}-{n}.json")
    inputs.writable_file("--json", path, "the results")
    return path


def run(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, measure, print the table and write the JSON; returns the exit code."""
    started = time.perf_counter()
    args = _parser().parse_args(argv)
    if args.follow_counts and args.bisect is None:
        raise UserError("--follow-counts steers a bisection; give it with --bisect GOOD..BAD")
    compile_cache.use_root(compile_cache.checked_root(args.compile_cache, "--compile-cache"))
    device = resolve_device(args.device)
    on_gpu = device.type == "cuda"
    config = inputs.preset_for(args.preset, on_gpu)
    combos = inputs.combos_for(inputs.parse_combos(args.combos), on_gpu)
    batch = _positive("--batch-size", args.batch_size)
    settings = _settings(args, on_gpu)
    _check_extras(args, device)
    arch = detect_arch(device) if on_gpu else "cpu"
    if not on_gpu:  # every path that builds a model, a bisection's workers too
        host_ram.check_ram(config, combos, batch, args.gpus)
        cpu_time.check_time(config, combos, batch, settings, insist=args.allow_slow_cpu, say=say)
    if args.bisect is not None:  # its own A/B steps: the process plan's options are refused there, not read
        json_path = _json_path(args.json, config.name)
        return bisect.from_options(args, config, combos, device, batch, settings, json_path, say)
    process_plan = bench_processes.plan(
        args.processes,
        args.compare_to,
        kernel_mix=args.kernel_mix,
        sample=args.sample,
        gpus=args.gpus,
        compare_python=args.compare_python,
        compare_env=args.compare_env,
        history=args.history or None,
        arch=arch,
        until_detectable=args.until_detectable,
    )
    json_path = _json_path(args.json, config.name)
    history = history_target(args.history or None, HISTORY_DB if args.history == "" else None)
    if on_gpu:
        torch.cuda.set_device(device)

    env = environment(device)
    where = env.get("gpu_name") or env.get("cpu")
    rounds = (
        f"{settings.min_rounds}"
        if settings.min_rounds == settings.max_rounds
        else f"{settings.min_rounds}-{settings.max_rounds} (to {settings.stop_rule})"
    )
    print(
        f"{PROG}: preset {config.name} {config.volume}, batch {batch}, on {device} ({where}); "
        f"{settings.warmup} warm-up iterations per combo, then {rounds} interleaved rounds",
        file=sys.stderr,
    )
    if args.combos is None and not on_gpu:
        rest = [name for name in COMBOS if name not in combos]
        print(
            f"{PROG}: on the CPU the default is {', '.join(combos)}; --combos all adds {', '.join(rest)} "
            "(TF32 is plain fp32 on CPUs, and bf16 convolution some 40 times slower: minutes more)",
            file=sys.stderr,
        )

    campaign: MeasuringCampaign | None = None
    interrupted = ""  # what a Ctrl-C, SIGTERM or SIGHUP cut short: the file then says "partial": true
    failed: ProcessFailed | None = None  # a measuring process that failed: the processes before it are kept
    try:
        if process_plan.active:
            with bench_processes.campaign(process_plan, config, combos, device, batch, settings) as campaign:
                results = list(campaign.run(bench_processes.log_progress(PROG)).values())
        else:
            campaign = Campaign(config, [get_combo(n) for n in combos], device, batch_size=batch, settings=settings)
            results = list(_measure(campaign, combos, settings).values())
    except (KeyboardInterrupt, ProcessFailed) as exc:
        results = _measured_so_far(campaign)
        if not results:
            raise
        failed = exc if isinstance(exc, ProcessFailed) else None
        interrupted = "the timed rounds" + (" (a measuring process failed)" if failed else "")
    # The training table first, and the JSON rewritten after every extra: the kernel mix, sampling
    # and DDP take minutes, and an interrupted or timed-out run keeps what it had measured.
    say(format_table(results_table(results, BENCH_TABLE if on_gpu else BENCH_CPU_TABLE)))
    say(f"stopped: {stop_reasons(results)}")
    if not on_gpu:
        say(CPU_NOTE)
    say_gpu_state(results)
    energy = energy_table(results)
    if not energy.empty:
        say("energy (NVML counter over windows of back-to-back iterations; docs/energy.md):")
        say(format_table(energy))
    extras: dict[str, object] = {}
    status = 0
    if process_plan.active and interrupted:
        extras["process_medians_ms"] = bench_processes.process_medians(campaign)  # too few for spreads or verdicts
    elif process_plan.active:
        status = bench_processes.report(campaign, process_plan.processes, extras, process_plan.last_good)

    split = TimeSplit(campaign.time_split.seconds if campaign is not None else {})

    def save() -> None:
        document = {
            "schema": JSON_SCHEMA,
            **RunHeader.of(
                arch,
                process_plan.processes,
                process_plan.compare_to,
                env,
                campaign.sides() if isinstance(campaign, ProcessCampaign) else [],
            ).as_dict(),
            "preset": config.name,
            "settings": asdict(settings),
            "results": [r.as_dict() for r in results],
            **extras,
            "time_split": {"wall_s": time.perf_counter() - started, "seconds": split.seconds},
            **({"partial": True, "interrupted": interrupted} if interrupted else {}),
            **({"failed": str(failed)} if failed else {}),
        }
        try:
            write_json_atomic(json_path, document)
        except OSError as exc:  # checked writable at the start, so the disk filled or the folder went
            raise UserError(f"cannot write the results to {json_path}: {exc.strerror}; free space or fix it") from None

    save()
    if failed:
        raise UserError(f"{failed}; {json_path} has the processes that finished before it, marked partial")
    if interrupted:
        return _interrupted(interrupted, json_path)
    assert campaign is not None  # measured, so made
    say(f"results written to {json_path}")
    if history is not None:
        _append_history(history, json_path, args)
    if any(r.energy_blocks for r in results):
        title = f"power and SM clock, {config.name} b{batch}, {where}"
        say(f"power chart: {power_chart(results, json_path.with_suffix('.power.png'), title)}")
    stage = ""  # the extra under way
    try:
        if args.kernel_mix:
            stage = "--kernel-mix"
            with split.timed("profiling"):
                extras["kernel_mix"] = bench_extras.kernel_mix(campaign)
            save()
        campaign.close()
        if args.sample:
            stage = "--sample"
            with split.timed("sampling"):
                extras["sampling"] = bench_extras.sampling(config, combos, device)
            save()
        if args.gpus:
            stage = "--gpus"
            extras["ddp"] = bench_extras.ddp(config, combos, args.gpus, device, batch, settings)
            save()
    except KeyboardInterrupt:
        interrupted = stage or "the end of the run"
        save()  # the training results and the extras that finished, marked partial
        return _interrupted(interrupted, json_path)
    if extras:
        save()  # with the time the extras took
        say(f"results written to {json_path}, with {', '.join(extras)}")
    say(f"where the time went: {split.line(time.perf_counter() - started)}")
    return status


def _append_history(target: str, json_path: Path, args: argparse.Namespace) -> None:
    """Append the run to the history; a failure is one line, and the JSON stays as written."""
    from meddpm.history.append import append_results  # the store's imports, only for a run that keeps a history

    try:
        say(append_results(target, json_path, vars(args), PROG))
    except (UserError, OSError) as exc:
        reason = " ".join(str(exc).split())
        print(f"{PROG}: run not appended to the history ({json_path} has it): {reason}", file=sys.stderr)


def _measured_so_far(campaign: MeasuringCampaign | None) -> list[ComboResult]:
    """What an interrupted campaign had timed: the combos with at least one round (or finished process)."""
    if campaign is None:
        return []
    results = [r for r in campaign.results.values() if r.samples_ms]
    for r in results:
        r.stop_reason = r.stop_reason or f"interrupted after {len(r.samples_ms)} rounds"
    return results


def _interrupted(during: str, json_path: Path) -> int:
    """Say in one line that the run was cut short and where its partial results are; Ctrl-C's status."""
    print(
        f"{PROG}: interrupted during {during}; {json_path} has what was measured before, marked partial",
        file=sys.stderr,
    )
    return 130


def _measure(campaign: Campaign, combos: Sequence[str], settings: CampaignSettings) -> dict[str, ComboResult]:
    """Run the campaign with progress on stderr: rich's bars on a terminal, else a plain line per step.

    rich draws only on a terminal, so a log file (CI) would otherwise show nothing for minutes.
    """
    console = Console(stderr=True)
    if not console.is_terminal:

        def log(p: CampaignProgress) -> None:
            step = {"warmup": f"warm-up {p.combo}", "energy": f"energy {p.combo}"}.get(p.phase, "round")
            detail = f": {p.detail}" if p.detail else ""
            print(f"{PROG}: {step} {p.done}/{p.total}{detail}", file=sys.stderr, flush=True)

        return campaign.run(log)
    columns = [TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=False) as progress:
        tasks = {name: progress.add_task(f"warm-up {name}", total=settings.warmup) for name in combos}
        rounds_task = progress.add_task("interleaved rounds", total=settings.max_rounds)

        def show(p: CampaignProgress) -> None:
            if p.phase == "warmup":
                progress.update(tasks[p.combo], completed=p.done, description=f"warm-up {p.combo} {p.detail}")
            elif p.phase == "energy":
                progress.update(rounds_task, description=f"energy {p.combo} {p.done}/{p.total}")
            else:
                progress.update(rounds_task, completed=p.done, description=f"rounds {p.detail}")

        return campaign.run(show)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: user errors print one line and exit with status 2; SIGTERM stops it as Ctrl-C does."""
    with signals_as_interrupt():
        return run_command(PROG, lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())
