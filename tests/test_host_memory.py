"""The host memory a CPU run needs, estimated before it starts."""

import pytest

from meddpm import COMBOS, ModelConfig
from meddpm.measure.machine.host_memory import host_memory_needed


def test_host_memory_estimate_is_a_lower_bound_of_the_measured_peak():
    paper, gib = ModelConfig.preset("paper"), 2**30
    baseline = host_memory_needed(paper, [COMBOS["baseline"]], 1)
    # The peak measured for paper/baseline on an H200, cuDNN's workspace included (docs/measured.md).
    assert 16 * gib < baseline < 18.73 * gib
    # bf16 keeps at most half the activations; a compiled combo's are not bounded at all.
    assert host_memory_needed(paper, [COMBOS["amp_bf16"]], 1) < 0.6 * baseline
    assert host_memory_needed(paper, [COMBOS["fast"]], 1) < 0.1 * baseline
    # Another combo adds only its resident state; DDP ranks each hold a whole step.
    pair = host_memory_needed(paper, [COMBOS["baseline"], COMBOS["opt2"]], 1)
    assert baseline < pair < baseline + gib
    assert host_memory_needed(paper, [COMBOS["baseline"]], 1, ddp_processes=2) == pytest.approx(2 * baseline, 1e-6)
