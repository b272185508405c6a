"""The drift experiment's reference kernels: timing arithmetic and no leaked global flags.

The kernels live beside the experiment that uses them (docs/measurements/2026-11-23-calibration/), not in the
package: nothing else measures with them.
"""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

_MODULE = Path(__file__).resolve().parent.parent / "docs" / "measurements" / "2026-11-23-calibration" / "calibration.py"
_SPEC = importlib.util.spec_from_file_location("calibration", _MODULE)
calibration = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(calibration)
calibrate, machine_factor = calibration.calibrate, calibration.machine_factor


def test_calibrate_times_each_kernel_and_restores_the_global_flags(monkeypatch):
    clock = iter(float(ms) for ms in range(1, 100))
    monkeypatch.setattr(calibration, "time_synchronized", lambda fn, device: (fn(), next(clock))[1])
    seen = []
    before = (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        kernels = {
            "a": lambda: seen.append((torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32)),
            "b": lambda: None,
        }
        medians = calibrate(torch.device("cpu"), kernels, repeats=3)
        assert torch.backends.cuda.matmul.allow_tf32 is True, "calibrate left TF32 matmuls off"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before[2]
    # One untimed call each, then three timed: "a" reads 1, 2, 3 ms, "b" 4, 5, 6 ms.
    assert medians == {"a": 2.0, "b": 5.0}
    assert set(seen) == {(False, False)}, "the reference kernels ran with autotuning or TF32 on"
    assert (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32) == before[:2]


def test_machine_factor_is_the_geometric_mean_of_the_kernel_ratios():
    reference = {"gemm": 1.0, "copy": 2.0}
    assert machine_factor({"gemm": 1.1, "copy": 2.2}, reference) == pytest.approx(1.1)
    assert machine_factor({"gemm": 2.0, "copy": 1.0}, reference) == pytest.approx(math.sqrt(2 * 0.5))
