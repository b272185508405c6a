"""Data-parallel training (NCCL, started by torchrun): numerics and weak scaling.

Gradients are averaged by DDP, or by one all-reduce after backward for combos that replay
CUDA graphs (``fast``); the parity check covers both.

Each case launches ``torchrun --standalone`` subprocesses on this host's GPUs, so the
runner's NCCL environment applies as it is set.
"""

import pytest
import torch

from meddpm.measure.processes.ddp import run_ddp, scaling_efficiency
from meddpm.parity.bounds import load_bounds
from meddpm.parity.ddp import check_parity
from meddpm.suite.cases import PerfCase
from meddpm.suite.session import SuiteRun

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]


def _gpus() -> int:
    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip(f"needs 2 or more GPUs; {count} visible")
    return count


@pytest.mark.parametrize("gradient_sync", ["ddp", "after_backward"])
def test_ddp_step_equals_one_gpu_step_on_the_whole_batch(perf_suite: SuiteRun, gradient_sync: str):
    gpus = _gpus()
    errors = check_parity(perf_suite.options.preset_for(True), gpus, gradient_sync=gradient_sync)
    # Strict FP32 with reductions in another order: the parity suite's FP32 gradient bound applies.
    bound = load_bounds()["cuda:fp32~fp64"]["bounds"]["grads"]
    assert errors["params"] <= bound and errors["updates"] <= bound, f"{errors} vs bound {bound}"


def test_ddp_weak_scaling(perf_case: PerfCase, perf_suite: SuiteRun):
    if not perf_case.on_gpu:
        pytest.skip("DDP cases run on GPUs")
    gpus = _gpus()
    settings = perf_suite.options.campaign_settings(True)
    results = [
        run_ddp(
            perf_case.preset,
            perf_case.combo,
            world,
            batch_per_rank=perf_case.batch_size,
            warmup=settings.warmup,
            rounds=settings.min_rounds,
        )
        for world in range(1, gpus + 1)
    ]
    perf_suite.record_ddp(results)
    assert all(r.median_ms > 0 for r in results)
    measured = {r.world_size: scaling_efficiency(r, results[0]) for r in results[1:]}
    checks = [(e, measured[n]) for n in measured for e in perf_suite.scaling_expectations(perf_case, n)]
    time_verdicts = [v for r in results[1:] if (v := perf_suite.judge_ddp(perf_case, r)) is not None]
    if not checks and not time_verdicts:
        found = ", ".join(f"{n} GPUs {eff:.3f}" for n, eff in measured.items())
        saving = " (this run saves them)" if perf_suite.options.save_baseline else "; run with --save-baseline"
        pytest.skip(
            f"no DDP baseline or expectation for {perf_case.combo} on {perf_case.arch}{saving} (efficiency: {found})"
        )
    failed = [
        f"{v.message()} [{e.source}]"
        for e, eff in checks
        if (v := perf_suite.judge_ratio(perf_case.arch, e, eff)).failed
    ]
    if not perf_suite.options.save_baseline:
        failed += [v.message() for v in time_verdicts if v.failed]
    assert not failed, "\n".join(failed)
