"""The process Nsight Compute profiles: warm a combo's training step up, then run one inside NVTX.

Run as ``python -m meddpm.measure.profiling.profiled_step --preset paper --combo opt1``. Only kernels
inside the NVTX range :data:`RANGE` are profiled (``--nvtx-include RANGE``), so warm-up, cuDNN
autotuning and compilation are left out while every kernel of the measured iterations is kept,
whatever their number. It is a start/end range, not a push/pop one: push/pop ranges belong to
the thread that pushed them, and autograd launches the backward kernels from its own device
thread, so a push/pop range would keep the forward pass and the optimizer and lose the backward.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch

from meddpm.errors import UserError
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo
from meddpm.run.train import TrainStep

RANGE = "meddpm_step"


def run(
    preset: str, combo: str, *, warmup: int = 3, iterations: int = 1, batch_size: int = 1, device_index: int = 0
) -> None:
    """Warm up, then run ``iterations`` training iterations inside the NVTX range, on GPU ``device_index``."""
    if not torch.cuda.is_available():
        raise UserError("profiling needs a CUDA GPU; none is visible to PyTorch")
    device = torch.device("cuda", device_index)
    torch.cuda.set_device(device)
    step = TrainStep(ModelConfig.preset(preset), get_combo(combo), batch_size, device)
    for _ in range(max(warmup, step.calls_before_replay)):  # the range holds replays, never a recording
        step()
    torch.cuda.synchronize()
    range_id = torch.cuda.nvtx.range_start(RANGE)
    for _ in range(iterations):
        step()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_end(range_id)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the profiled subprocess; user errors print one line and exit with 2."""
    p = argparse.ArgumentParser(prog="python -m meddpm.measure.profiling.profiled_step")
    p.add_argument("--preset", required=True)
    p.add_argument("--combo", required=True)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--device", type=int, default=0, help="CUDA device index")
    args = p.parse_args(argv)
    try:
        run(
            args.preset,
            args.combo,
            warmup=args.warmup,
            iterations=args.iterations,
            batch_size=args.batch_size,
            device_index=args.device,
        )
    except UserError as exc:
        print(f"profiled_step: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
