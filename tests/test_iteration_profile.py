"""One profiled training iteration on the CPU (tiny preset): its rows, its counts, their determinism.

The counts gate rests on aten calls and allocations being the same in every process of the same code;
these tests check that on the real training step, and that a planted extra operator shows in the rows.
"""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from meddpm import COMBOS, ModelConfig, TrainStep
from meddpm.measure.profiling.iteration import (
    BYTES_ALLOCATED,
    FLOPS,
    LAUNCHES,
    ProfileRow,
    iteration_counts,
    launch_key,
    profile_iteration,
)
from meddpm.measure.profiling.kernel_mix import GROUPS, group_of

CPU = torch.device("cpu")

# One process: build the tiny preset's baseline step, run it once, print its profiled counts.
_COUNTS_SCRIPT = textwrap.dedent(
    """
    import json, torch
    from meddpm import COMBOS, ModelConfig, TrainStep
    from meddpm.measure.profiling.iteration import profile_iteration
    torch.manual_seed(0)
    step = TrainStep(ModelConfig.preset("tiny"), COMBOS["baseline"], 1, torch.device("cpu"))
    step()
    print(json.dumps(profile_iteration(step, torch.device("cpu")).counts))
    """
)


@pytest.fixture(scope="module")
def tiny_step() -> TrainStep:
    torch.manual_seed(0)
    step = TrainStep(ModelConfig.preset("tiny"), COMBOS["baseline"], 1, CPU)
    step()  # warmed up, as after a campaign's rounds
    return step


@pytest.fixture(scope="module")
def tiny_profile(tiny_step):
    return profile_iteration(tiny_step, CPU, flops=123)


def test_a_real_training_step_profiles_into_aten_rows_and_counts(tiny_profile):
    rows, counts = tiny_profile.rows, tiny_profile.counts
    names = {r.name for r in rows}
    assert all(n.startswith("aten::") for n in names)
    assert {"aten::convolution", "aten::native_group_norm", "aten::addmm"} <= names
    assert [r.ms for r in rows] == sorted((r.ms for r in rows), reverse=True)
    assert counts[LAUNCHES] == sum(r.count for r in rows) > 0
    assert sum(counts[launch_key(g)] for g in GROUPS) == counts[LAUNCHES]
    for group in ("convolution", "gemm", "normalization", "elementwise", "copy/layout"):
        assert counts[launch_key(group)] > 0, group
    assert counts[launch_key("communication")] == 0  # one process, no collective
    assert counts[BYTES_ALLOCATED] > 0 and counts[FLOPS] == 123


def test_profiling_leaves_no_profiler_running(tiny_profile):
    assert not torch.autograd.profiler._is_profiler_enabled


def test_two_processes_of_the_same_code_count_the_same(tiny_profile):
    """Aten calls and bytes allocated are deterministic on a CPU: the gate needs no spread there."""
    runs = [
        subprocess.run([sys.executable, "-c", _COUNTS_SCRIPT], capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first == second
    assert first == {k: v for k, v in tiny_profile.counts.items() if k != FLOPS}  # and the same as this process's


def test_profiling_on_the_cpu_prints_nothing_of_the_profilers_own(tmp_path):
    # Kineto's "USDT: ... profiler_start" / "profiler_stop" lines came on stderr for every profiled iteration.
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    run = subprocess.run([sys.executable, "-c", _COUNTS_SCRIPT], capture_output=True, text=True, check=True, env=env)
    assert "USDT" not in run.stderr and "profiler_start" not in run.stderr, run.stderr


def test_the_profilers_false_cycles_warning_is_kept_from_the_user_and_other_warnings_are_not():
    # Some PyTorch releases warn of cycles on a profile that has none; planted in the step, as the release raises it
    # inside the profiled block. A warning of anything else still reaches the user.
    def step() -> None:
        cycles = "Warning: Profiler clears events at the end of each cycle. Only events from the current cycle"
        warnings.warn(cycles, UserWarning, stacklevel=1)
        warnings.warn("the workload's own warning", UserWarning, stacklevel=1)
        torch.ones(4).mul_(2)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile_iteration(step, CPU)
    assert [str(w.message) for w in caught] == ["the workload's own warning"]


def test_a_planted_operator_shows_in_the_rows_and_the_counts(tiny_step, tiny_profile):
    planted = torch.ones(4)

    def step_with_an_extra_op() -> None:
        tiny_step()
        torch.special.erf(planted)

    changed = profile_iteration(step_with_an_extra_op, CPU, flops=123)
    assert "aten::special_erf" in {r.name for r in changed.rows} - {r.name for r in tiny_profile.rows}
    assert changed.counts[LAUNCHES] > tiny_profile.counts[LAUNCHES]


@pytest.mark.parametrize(
    "name, group",
    [
        # aten operators, as the CPU profile of the tiny preset names them
        ("aten::convolution_backward", "convolution"),
        ("aten::mkldnn_convolution", "convolution"),
        ("aten::slow_conv3d_forward", "convolution"),
        ("aten::addmm", "gemm"),
        ("aten::bmm", "gemm"),
        ("aten::native_group_norm_backward", "normalization"),
        ("aten::copy_", "copy/layout"),
        ("aten::_to_copy", "copy/layout"),
        ("aten::permute", "copy/layout"),
        ("aten::cat", "copy/layout"),
        ("aten::add_", "elementwise"),
        ("aten::addcdiv_", "elementwise"),
        ("aten::silu_backward", "elementwise"),
        ("aten::upsample_trilinear3d_backward", "elementwise"),
        ("aten::broadcast_tensors", "other"),
        ("aten::empty_strided", "other"),
        ("aten::item", "other"),
        # CUDA kernels recorded on an H200 (meddpm-bench --kernel-mix), cuDNN, cutlass, NCCL and Inductor's
        (
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x64x32_warpgroupsize1x1x1_g1",
            "convolution",
        ),
        ("void cudnn::cnn::wgrad2d_grouped_direct_kernel<true, true, int, __nv_bfloat16, float, float>", "convolution"),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(Params)", "gemm"),
        ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>(long, float)", "normalization"),
        (
            "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true>",
            "copy/layout",
        ),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", "copy/layout"),
        ("Memcpy DtoD (Device -> Device)", "copy/layout"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)>",
            "elementwise",
        ),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
        ("triton_red_fused__to_copy_clone_native_group_norm_backward_silu_silu_backward_22", "normalization"),
        ("triton_poi_fused__to_copy__unsafe_index_put_add_mul_neg_new_zeros_31", "elementwise"),
        ("triton_tem_fused_convolution_0", "convolution"),
        ("triton_tem_fused_addmm_1", "gemm"),
    ],
)
def test_real_names_fall_in_their_group(name, group):
    assert group_of(name) == group


def test_counts_hold_every_group_and_leave_out_what_is_unknown():
    rows = [ProfileRow("aten::convolution", "convolution", 3, 1.0), ProfileRow("aten::add", "elementwise", 2, 0.5)]
    counts = iteration_counts(rows, bytes_allocated=None, flops=None)
    assert counts[LAUNCHES] == 5 and counts[launch_key("convolution")] == 3 and counts[launch_key("gemm")] == 0
    assert set(counts) == {LAUNCHES, *(launch_key(g) for g in GROUPS)}
