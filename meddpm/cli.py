"""``meddpm-bench``: time Med-DDPM training iterations for chosen combos on this machine."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn

import pandas as pd
import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from meddpm.atomic import write_json_atomic
from meddpm.bench import Campaign, CampaignSettings, ComboResult
from meddpm.bench import Progress as CampaignProgress
from meddpm.combos import COMBOS, get_combo
from meddpm.config import PRESETS, ModelConfig
from meddpm.distributed import run_ddp
from meddpm.errors import UserError
from meddpm.measure.environment import environment
from meddpm.measure.kernel_mix import category_shares, profile_kernels
from meddpm.report import ddp_table, format_table, kernel_mix_table, results_table
from meddpm.sampling import time_sampling

PROG = "meddpm-bench"
JSON_SCHEMA = "meddpm-bench/2"


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
    p.add_argument("--combos", default="all", help=f"comma-separated combos or 'all': {', '.join(COMBOS)}")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto = cuda if present)")
    p.add_argument("--batch-size", type=int, default=1, help="volumes per iteration (default: 1)")
    p.add_argument("--warmup", type=int, help="untimed warm-up iterations per combo (default: 3 on GPU, 1 on CPU)")
    p.add_argument("--iters", type=int, help="exactly this many timed rounds (default: adaptive on GPU, 3 on CPU)")
    p.add_argument("--min-rounds", type=int, default=5, help="adaptive: at least this many rounds (default: 5)")
    p.add_argument("--max-rounds", type=int, default=30, help="adaptive: at most this many rounds (default: 30)")
    p.add_argument(
        "--rel-iqr", type=float, default=0.02, help="adaptive: stop once every combo's IQR/median is below (0.02)"
    )
    p.add_argument("--budget", type=float, default=300.0, help="adaptive: stop after this many seconds (300)")
    p.add_argument("--sample", action="store_true", help="also time one full reverse diffusion (all T steps) per combo")
    p.add_argument(
        "--kernel-mix", action="store_true", help="also profile one iteration per combo: GPU time by kernel category"
    )
    p.add_argument(
        "--gpus", type=int, default=0, help="also measure DDP (torchrun, NCCL) on 1..N GPUs per combo, weak scaling"
    )
    p.add_argument("--json", type=Path, help="where to write results (default: bench-results/<time>-<preset>.json)")
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
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError("no CUDA GPU is visible to PyTorch; use --device cpu")
        if (device.index or 0) >= torch.cuda.device_count():
            raise UserError(f"device {name!r} does not exist; this machine has {torch.cuda.device_count()} GPU(s)")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def resolve_combos(spec: str) -> list[str]:
    """Combo names from a comma-separated list (or 'all'), validated."""
    names = list(COMBOS) if spec == "all" else [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise UserError(f"no combos given; choose from {', '.join(COMBOS)} or 'all'")
    for name in names:
        get_combo(name)
    return names


def _positive(name: str, value: int) -> int:
    if value < 1:
        raise UserError(f"{name} must be at least 1, got {value}")
    return value


def _settings(args: argparse.Namespace, on_gpu: bool) -> CampaignSettings:
    warmup = args.warmup if args.warmup is not None else (3 if on_gpu else 1)
    iters = args.iters if args.iters is not None else (None if on_gpu else 3)
    if iters is not None:
        _positive("--iters", iters)
        return CampaignSettings(warmup=warmup, min_rounds=iters, max_rounds=iters, budget_s=args.budget)
    return CampaignSettings(
        warmup=warmup,
        min_rounds=args.min_rounds,
        max_rounds=args.max_rounds,
        rel_iqr_target=args.rel_iqr,
        budget_s=args.budget,
    )


def run(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, measure, print the table and write the JSON; returns the exit code."""
    args = _parser().parse_args(argv)
    device = resolve_device(args.device)
    on_gpu = device.type == "cuda"
    config = ModelConfig.preset(args.preset or ("paper" if on_gpu else "tiny"))
    combos = resolve_combos(args.combos)
    batch = _positive("--batch-size", args.batch_size)
    settings = _settings(args, on_gpu)
    if on_gpu:
        torch.cuda.set_device(device)

    env = environment(device)
    where = env.get("gpu_name") or env.get("cpu")
    rounds = (
        f"{settings.min_rounds}"
        if settings.min_rounds == settings.max_rounds
        else f"{settings.min_rounds}-{settings.max_rounds} (to {settings.rel_iqr_target:.0%} rel. IQR)"
    )
    print(
        f"{PROG}: preset {config.name} {config.volume}, batch {batch}, on {device} ({where}); "
        f"{settings.warmup} warm-up iterations per combo, then {rounds} interleaved rounds",
        file=sys.stderr,
    )

    campaign = Campaign(config, [get_combo(n) for n in combos], device, batch_size=batch, settings=settings)
    columns = [TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, transient=False) as progress:
        tasks = {name: progress.add_task(f"warm-up {name}", total=settings.warmup) for name in combos}
        rounds_task = progress.add_task("interleaved rounds", total=settings.max_rounds)

        def show(p: CampaignProgress) -> None:
            if p.phase == "warmup":
                progress.update(tasks[p.combo], completed=p.done, description=f"warm-up {p.combo} {p.detail}")
            else:
                progress.update(rounds_task, completed=p.done, description=f"rounds {p.detail}")

        results = list(campaign.run(show).values())
    # The training table first, and the JSON rewritten after every extra: the kernel mix, sampling
    # and DDP take minutes, and an interrupted or timed-out run keeps what it had measured.
    print(format_table(results_table(results)))
    print(f"stopped: {results[0].stop_reason}")
    _print_gpu_state(results)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    json_path = args.json or Path("bench-results") / f"{stamp}-{config.name}.json"
    extras: dict[str, object] = {}

    def save() -> None:
        document = {
            "schema": JSON_SCHEMA,
            "environment": env,
            "preset": config.name,
            "settings": asdict(settings),
            "results": [r.as_dict() for r in results],
            **extras,
        }
        write_json_atomic(json_path, document)

    save()
    if args.kernel_mix:
        extras["kernel_mix"] = _kernel_mix(campaign, device)
        save()
    campaign.close()
    if args.sample:
        extras["sampling"] = _sampling(config, combos, device)
        save()
    if args.gpus:
        extras["ddp"] = _ddp(config, combos, args.gpus, device, batch, settings)
        save()
    print(f"results written to {json_path}")
    return 0


def _kernel_mix(campaign: Campaign, device: torch.device) -> dict[str, list[dict[str, object]]]:
    """Profile one more iteration of each combo; print and return GPU time by kernel category."""
    if device.type != "cuda":
        raise UserError("--kernel-mix profiles CUDA kernels; run it on a GPU")
    kernels_by_combo: dict[str, list[dict[str, object]]] = {}
    by_category = {}
    for name, step in campaign.steps.items():
        kernels = profile_kernels(step)
        by_category[name] = category_shares(kernels)
        kernels_by_combo[name] = kernels.to_dict(orient="records")
        print(f"top kernels of {name}:")
        print(kernels.head(8).to_string(index=False, formatters={"kernel": lambda k: k[:90]}))
    print("GPU time share by kernel category:")
    print(kernel_mix_table(by_category).to_string(float_format=lambda v: f"{v:.1%}"))
    return kernels_by_combo


def _sampling(config: ModelConfig, combos: Sequence[str], device: torch.device) -> list[dict[str, object]]:
    """Time a full reverse diffusion per combo; print and return the figures."""
    rows = []
    for name in combos:
        r = time_sampling(config, get_combo(name), device)
        rows.append({"combo": name, "seconds": r.seconds, "ms/step": r.ms_per_step, "warm-up s": r.warmup_s})
    print(f"sampling: {config.timesteps} reverse steps of one {config.volume} volume")
    print(pd.DataFrame(rows).set_index("combo").to_string(float_format=lambda v: f"{v:.2f}"))
    return rows


def _ddp(
    config: ModelConfig, combos: Sequence[str], gpus: int, device: torch.device, batch: int, settings: CampaignSettings
) -> list[dict[str, object]]:
    """World sizes 1..gpus per combo under DDP; print the scaling table and return the raw results."""
    kind = "cuda" if device.type == "cuda" else "cpu"
    results = []
    for name in combos:
        for world in range(1, _positive("--gpus", gpus) + 1):
            print(f"DDP: {name} on {world} {'GPU' if kind == 'cuda' else 'process'}(es)...", file=sys.stderr)
            results.append(
                run_ddp(
                    config.name,
                    name,
                    world,
                    device=kind,
                    batch_per_rank=batch,
                    warmup=settings.warmup,
                    rounds=settings.min_rounds,
                )
            )
    print(f"data-parallel weak scaling, batch {batch} per rank, slowest rank per round:")
    print(ddp_table(results).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return [r.as_dict() for r in results]


def _print_gpu_state(results: Sequence[ComboResult]) -> None:
    """One line on the card's condition, so a throttled run is visible at a glance."""
    states = [s for r in results for s in r.gpu_states]
    if not states:
        return
    reasons = sorted({reason for r in results for reason in r.clock_event_reasons} - {"GpuIdle"})
    print(
        f"GPU {states[0].name}, driver {states[0].driver}: SM clock {min(s.sm_clock_mhz for s in states)}-"
        f"{max(s.sm_clock_mhz for s in states)} MHz (max {states[0].sm_clock_max_mhz}), "
        f"temperature up to {max(s.temperature_c for s in states)} C, "
        f"clock events: {', '.join(reasons) or 'none'}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: user errors print one line and exit with status 2."""
    try:
        return run(argv)
    except UserError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
