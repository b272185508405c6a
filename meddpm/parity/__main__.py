"""``python -m meddpm.parity calibrate``: measure the pairs' errors and merge their bounds into the bounds file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from meddpm.atomic import write_json_atomic
from meddpm.errors import UserError
from meddpm.parity.bounds import BOUNDS_FILE, BOUNDS_SCHEMA, calibrate, load_bounds

PROG = "python -m meddpm.parity"


def main(argv: Sequence[str] | None = None) -> int:
    """Calibrate on a device and write the merged bounds; user errors are one line and exit 2."""
    p = argparse.ArgumentParser(prog=PROG)
    p.add_argument("command", choices=["calibrate"])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--examples", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=BOUNDS_FILE)
    args = p.parse_args(argv)
    try:
        if args.device == "cuda" and not torch.cuda.is_available():
            raise UserError("no CUDA GPU is visible to PyTorch; calibrate with --device cpu")
        pairs = load_bounds(args.out) if args.out.exists() else {}
        pairs.update(calibrate(args.device, args.examples, args.seed, lambda m: print(m, file=sys.stderr)))
        write_json_atomic(args.out, {"schema": BOUNDS_SCHEMA, "pairs": dict(sorted(pairs.items()))})
    except UserError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    for key, entry in sorted(pairs.items()):
        print(key, {k: f"{v:.2e}" for k, v in entry["worst_observed"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
