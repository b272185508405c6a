"""The measured parity bounds: shipped with the package (``bounds.json`` beside this module), read and recalibrated.

A pair's bounds are about twice the worst error seen over many random cases on a device
(:func:`calibrate`), rounded up to two significant digits, stored per device and pair with the
card, torch version and date they were measured with.
"""

from __future__ import annotations

import datetime
import math
import random
from collections.abc import Callable
from pathlib import Path

import torch

from meddpm.errors import UserError
from meddpm.parity.cases import KINDS, PAIRS, Pair, random_case
from meddpm.versioned.loader import Kind, MissingDocument, load_one

BOUNDS_FILE = Path(__file__).resolve().with_name("bounds.json")
BOUNDS_SCHEMA = "meddpm-parity-bounds/1"
CALIBRATE = "python -m meddpm.parity calibrate"
BOUNDS = Kind(
    family="meddpm-parity-bounds",
    versions=(BOUNDS_SCHEMA,),
    noun="parity bounds file",
    fix=f"restore it from git or recalibrate ({CALIBRATE})",
)


def bound_key(pair: Pair) -> str:
    """Where a pair's bounds live in the bounds file: per device, since kernels differ."""
    return f"{pair.device}:{pair.name}"


def load_bounds(path: Path = BOUNDS_FILE) -> dict[str, dict]:
    """The measured bounds per pair key, or a UserError naming the file and the problem."""
    try:
        data = load_one(path, BOUNDS)
    except MissingDocument:
        raise UserError(f"{path}: no parity bounds yet; run {CALIBRATE}") from None
    pairs = data.get("pairs")
    if not isinstance(pairs, dict):
        raise UserError(f'{path}: no "pairs" object of bounds; {BOUNDS.fix}')
    return pairs


def _round_up(x: float) -> float:
    """Round up to two significant digits (bounds read better, and stay >= the value)."""
    if x <= 0 or not math.isfinite(x):
        return x
    scale = 10 ** (math.floor(math.log10(x)) - 1)
    return math.ceil(x / scale) * scale


def calibrate(device: str, examples: int, seed: int, progress: Callable[[str], None]) -> dict[str, dict]:
    """Run ``examples`` random cases per pair; bounds are twice the worst error observed."""
    rng = random.Random(seed)
    cases = [random_case(rng) for _ in range(examples)]
    entries = {}
    for pair in PAIRS[device]:
        worst = {kind: 0.0 for kind in KINDS}
        for i, case in enumerate(cases):
            if not pair.covers(case):
                continue
            for kind, (error, _) in pair.errors(case).items():
                worst[kind] = max(worst[kind], error)
            progress(f"{pair.name}: {i + 1}/{examples}")
        entries[bound_key(pair)] = {
            "bounds": {k: _round_up(2 * w) for k, w in worst.items()},
            "worst_observed": worst,
            "examples": examples,
            "measured_on": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__,
            "date": datetime.date.today().isoformat(),
        }
    return entries
