"""Measuring combos of one preset: the engine behind ``meddpm-bench``."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from meddpm.combos import Combo
from meddpm.config import ModelConfig
from meddpm.errors import UserError
from meddpm.measure.flops import train_step_flops
from meddpm.measure.nvml import GpuState, open_gpu
from meddpm.measure.stats import Stats
from meddpm.measure.timing import synchronize, time_iterations, time_once
from meddpm.train import TrainStep


@dataclass
class ComboResult:
    """What one combo measured: per-iteration times and the figures derived from them."""

    preset: str
    combo: str
    batch_size: int
    samples_ms: list[float]
    warmup_ms: list[float]
    flops_per_iter: int
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    energy_j_per_iter: float | None = None
    energy_note: str = ""
    gpu_state_before: GpuState | None = None
    gpu_state_after: GpuState | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def stats(self) -> Stats:
        """Statistics of the timed iterations."""
        return Stats.from_samples(self.samples_ms)

    @property
    def tflops(self) -> float:
        """Achieved model TFLOP/s at the median iteration time."""
        return self.flops_per_iter / (self.stats.median * 1e-3) / 1e12

    def as_dict(self) -> dict[str, object]:
        """Everything, with the derived statistics, for JSON."""
        d = asdict(self)
        d["stats"] = self.stats.as_dict()
        d["tflops"] = self.tflops
        return d


def _release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def measure_combo(
    config: ModelConfig,
    combo: Combo,
    device: torch.device,
    *,
    batch_size: int = 1,
    warmup: int = 3,
    iterations: int = 10,
    on_iteration: Callable[[], None] | None = None,
) -> ComboResult:
    """Build a fresh model for ``combo``, warm it up, then time ``iterations`` training steps.

    Warm-up iterations (cuDNN autotuning, allocator growth, lazy initialisation) are
    timed one by one and reported apart; they never enter the statistics.
    """
    _release_memory(device)
    gpu, gpu_note = open_gpu(device)
    step: TrainStep | None = None
    try:
        step = TrainStep(config, combo, batch_size, device)

        def tick() -> None:
            step()  # type: ignore[misc]
            if on_iteration is not None:
                on_iteration()

        warmup_ms = [time_once(tick, device) for _ in range(warmup)]
        state_before = gpu.state() if gpu else None
        energy_start = gpu.energy_mj() if gpu else None
        samples = time_iterations(tick, iterations, device)
        energy_end = gpu.energy_mj() if gpu else None
        state_after = gpu.state() if gpu else None
        synchronize(device)
    except torch.cuda.OutOfMemoryError:
        step = None
        _release_memory(device)
        raise UserError(
            f"out of GPU memory running combo {combo.name!r} on preset {config.name!r} at batch "
            f"size {batch_size}; try a smaller --batch-size or preset"
        ) from None

    result = ComboResult(
        preset=config.name,
        combo=combo.name,
        batch_size=batch_size,
        samples_ms=samples,
        warmup_ms=warmup_ms,
        flops_per_iter=train_step_flops(config, batch_size),
        gpu_state_before=state_before,
        gpu_state_after=state_after,
    )
    if device.type == "cuda":
        result.peak_allocated_bytes = torch.cuda.max_memory_allocated(device)
        result.peak_reserved_bytes = torch.cuda.max_memory_reserved(device)
    if energy_start is not None and energy_end is not None:
        result.energy_j_per_iter = (energy_end - energy_start) / 1e3 / iterations
    else:
        result.energy_note = gpu_note or "energy counter unsupported on this GPU"
    step = None
    _release_memory(device)
    return result
