"""``meddpm-bench``: time Med-DDPM training iterations for chosen combos on this machine."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from meddpm.bench import ComboResult, measure_combo
from meddpm.combos import COMBOS, get_combo
from meddpm.config import PRESETS, ModelConfig
from meddpm.errors import UserError
from meddpm.measure.environment import environment
from meddpm.report import format_table, results_table, write_json_atomic

PROG = "meddpm-bench"
JSON_SCHEMA = "meddpm-bench/1"


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
    p.add_argument("--iters", type=int, help="timed iterations per combo (default: 10 on GPU, 3 on CPU)")
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


def run(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, measure, print the table and write the JSON; returns the exit code."""
    args = _parser().parse_args(argv)
    device = resolve_device(args.device)
    on_gpu = device.type == "cuda"
    config = ModelConfig.preset(args.preset or ("paper" if on_gpu else "tiny"))
    combos = resolve_combos(args.combos)
    batch = _positive("--batch-size", args.batch_size)
    warmup = args.warmup if args.warmup is not None else (3 if on_gpu else 1)
    iters = _positive("--iters", args.iters if args.iters is not None else (10 if on_gpu else 3))
    if warmup < 0:
        raise UserError(f"--warmup must be 0 or more, got {warmup}")
    if on_gpu:
        torch.cuda.set_device(device)

    env = environment(device)
    where = env.get("gpu_name") or env.get("cpu")
    print(
        f"{PROG}: preset {config.name} {config.volume}, batch {batch}, on {device} ({where}); "
        f"{warmup} warm-up + {iters} timed iterations per combo",
        file=sys.stderr,
    )

    results: list[ComboResult] = []
    columns = [TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, transient=False) as progress:
        for name in combos:
            task = progress.add_task(name, total=warmup + iters)
            results.append(
                measure_combo(
                    config,
                    get_combo(name),
                    device,
                    batch_size=batch,
                    warmup=warmup,
                    iterations=iters,
                    on_iteration=lambda task=task: progress.advance(task),
                )
            )

    table = results_table(results)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    json_path = args.json or Path("bench-results") / f"{stamp}-{config.name}.json"
    write_json_atomic(
        json_path,
        {
            "schema": JSON_SCHEMA,
            "environment": env,
            "preset": config.name,
            "results": [r.as_dict() for r in results],
        },
    )
    print(format_table(table))
    _print_gpu_state(results)
    print(f"results written to {json_path}")
    return 0


def _print_gpu_state(results: Sequence[ComboResult]) -> None:
    """One line on the card's condition, so a throttled run is visible at a glance."""
    states = [s for r in results for s in (r.gpu_state_before, r.gpu_state_after) if s is not None]
    if not states:
        return
    reasons = sorted({reason for s in states for reason in s.clock_event_reasons} - {"GpuIdle"})
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
