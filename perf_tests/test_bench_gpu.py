"""The bench engine on a real GPU: every combo trains, and NVML energy is recorded.

The full regression suite (per-architecture baselines and verdicts) builds on this.
"""

import math

import pytest
import torch

from meddpm import COMBOS, ModelConfig
from meddpm.bench import measure_combo

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("combo", list(COMBOS))
def test_every_combo_trains_on_the_gpu(combo):
    result = measure_combo(
        ModelConfig.preset("tiny"),
        COMBOS[combo],
        torch.device("cuda", torch.cuda.current_device()),
        warmup=2,
        iterations=5,
    )
    assert len(result.samples_ms) == 5 and all(math.isfinite(s) and s > 0 for s in result.samples_ms)
    assert result.peak_allocated_bytes > 0 and result.peak_reserved_bytes >= result.peak_allocated_bytes
    assert result.gpu_state_after is not None and result.gpu_state_after.sm_clock_mhz > 0
    # The energy counter exists on Volta and newer; where it does not, the reason is kept.
    assert (result.energy_j_per_iter is not None and result.energy_j_per_iter > 0) or result.energy_note
