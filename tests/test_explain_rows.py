"""Explanations a person can act on: short names of real kernels, renumbered Inductor kernels matched, each row's
module and aten operator on the tiny preset (forward and backward), the roll-up per module type, the rows shown
only where they moved beyond the processes' variation, and the one line a flagged case opens with.

Each planted change is a count or a planted figure: nothing depends on the clock of a busy machine.
"""

import pytest
import torch

from meddpm import COMBOS, ModelConfig, TrainStep
from meddpm.judge.explain import explain, memory_rows, module_type
from meddpm.measure.profiling.iteration import ProfileRow, profile_iteration
from meddpm.measure.profiling.names import match_key, op_label, short_name
from meddpm.report.explanation import case_first_line, first_line, rollup_lines

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    "name, short",
    [
        # recorded on H100 and H200 (docs/measurements, tests/test_iteration_profile.py)
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
            "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::"
            "BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, "
            "3ul>)",
            "mul float32",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, "
            "3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
            "add float32",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::sin_kernel_cuda(at::TensorIteratorBase&)::"
            "{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, "
            "2ul> >(int, at::native::sin_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::"
            "{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)",
            "sin float32",
        ),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
            "float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, "
            "float, float>, unsigned int, float, 4, 4>)",
            "mean float32",
        ),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", "copy"),
        (
            "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>(long, float)",
            "RowwiseMoments float32",
        ),
        (
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x64x32_warpgroupsize1x1x1_g1",
            "xmma fprop implicit gemm bfloat16",
        ),
        (
            "sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_",
            "xmma wgrad indexed implicit gemm bfloat16",
        ),
        (
            "void cudnn::cnn::wgrad2d_grouped_direct_kernel<true, true, int, __nv_bfloat16, float, float>",
            "cudnn wgrad2d_grouped_direct_kernel bfloat16",
        ),
        (
            "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true>",
            "cudnn nchwToNhwcKernel bfloat16",
        ),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(Params)", "cutlass_80_simt_sgemm_nn"),
        ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)"),
        (
            "triton_red_fused__to_copy_clone_native_group_norm_backward_silu_silu_backward_22",
            "triton_red_fused__to_copy_clone_native_group_norm_backward_silu_silu_backward",
        ),  # fmt: skip
        ("triton_tem_fused_convolution_0", "triton_tem_fused_convolution"),
        ("aten::convolution_backward", "convolution_backward"),
    ],
)
def test_real_kernel_names_get_short_names_that_tell_them_apart(name, short):
    assert short_name(name) == short


def test_an_operator_and_its_dtypes_name_the_kernels_it_launched():
    assert op_label("aten::copy_", ["float", "c10::BFloat16", "Scalar"]) == "copy bfloat16 -> float32"
    assert op_label("aten::mul", ["float", "float"]) == "mul float32"
    assert op_label("aten::cat", ["TensorList", "Scalar"]) == "cat"


def row(name: str, count: int, ms: float, module: str = "", label: str = "") -> ProfileRow:
    return ProfileRow(name, "elementwise", count, ms, module, "aten::add", label or short_name(name))


def test_kernels_that_differ_only_by_their_compile_numbering_are_one_row():
    assert match_key("triton_red_fused_17") == match_key("triton_red_fused_19") == "triton_red_fused"
    a, b = [[row("triton_red_fused_19", 4, 1.0)]], [[row("triton_red_fused_17", 4, 1.0)]]
    (named,) = [r for r in explain(a, b) if r.level == "name"]
    assert (named.change, named.label, named.shown) == ("time", "triton_red_fused", False)


def test_a_row_is_shown_only_beyond_its_processes_spread_and_the_floors():
    conv = "aten::convolution"
    # Both sides' processes overlap: noise. A 0.4 % move with one process a side: under the floor.
    noisy = explain([[row(conv, 1, 5.0)], [row(conv, 1, 5.3)]], [[row(conv, 1, 5.1)], [row(conv, 1, 5.2)]])
    small = explain([[row(conv, 1, 28.1257)]], [[row(conv, 1, 27.9998)]])
    moved = explain([[row(conv, 1, 7.0)], [row(conv, 1, 7.1)]], [[row(conv, 1, 5.0)], [row(conv, 1, 5.1)]])
    assert [r.shown for r in (*noisy, *small) if r.level == "name"] == [False, False]
    assert [r.shown for r in moved if r.level == "name"] == [True]


@pytest.fixture(scope="module")
def tiny_step() -> TrainStep:
    torch.manual_seed(0)
    step = TrainStep(ModelConfig.preset("tiny"), COMBOS["baseline"], 1, CPU)
    step()
    return step


@pytest.fixture(scope="module")
def tiny_profile(tiny_step):
    return profile_iteration(tiny_step, CPU)


def test_each_aten_row_names_its_module_and_operator_forward_and_backward(tiny_step, tiny_profile):
    conv = [r for r in tiny_profile.rows if module_type(r.module) == "Conv3d"]
    forward = {r.op for r in conv}
    assert "aten::conv3d" in forward and "aten::convolution_backward" in forward  # backward: the forward's module
    assert all(r.module.startswith("denoiser.") for r in conv)
    assert any(r.module.startswith("Optimizer.step") for r in tiny_profile.rows)
    assert all(r.label for r in tiny_profile.rows)
    hooks = [m._forward_hooks or m._forward_pre_hooks for m in tiny_step.model.modules()]
    assert not any(hooks)  # the scopes leave nothing behind


def planted_profile(step: TrainStep, kind: str, plant) -> object:
    """The step profiled with ``plant(output)`` after the forward of every module of type ``kind``."""
    handles = [
        m.register_forward_hook(lambda m, args, out: plant(out))
        for m in step.model.modules()
        if type(m).__name__ == kind
    ]
    try:
        return profile_iteration(step, CPU)
    finally:
        for h in handles:
            h.remove()


def test_a_planted_swish_after_one_module_type_opens_the_explanation(tiny_step, tiny_profile):
    swish = planted_profile(tiny_step, "Conv3d", lambda out: out * torch.sigmoid(out))
    rows = [r.as_dict() for r in explain([swish.rows], [tiny_profile.rows])]
    top = rows[0]
    assert (top["level"], top["label"]) == ("module", "Conv3d")
    assert top["detail"].endswith("more float32 elementwise aten calls"), top["detail"]
    sigmoid = next(r for r in rows if r["level"] == "name" and r["label"] == "sigmoid float32")
    assert sigmoid["change"] == "appeared" and "(Conv3d)" in sigmoid["module"] and sigmoid["op"] == "aten::sigmoid"
    assert rollup_lines(rows)[0].startswith("Conv3d: ")
    line = first_line("tiny/baseline/b1", (0.0139, 0.0113, 0.0165), None, rows)
    assert line.startswith("tiny/baseline/b1: time +1.39 % [1.13, 1.65]: Conv3d runs ")


def test_a_module_type_that_keeps_more_for_backward_is_named(tiny_step, tiny_profile):
    kept = planted_profile(tiny_step, "GroupNormSiLU", lambda out: out * out.clone())
    rows = memory_rows([kept.module_bytes], [tiny_profile.module_bytes])
    assert rows[0].label == "GroupNormSiLU" and rows[0].count_a > rows[0].count_b and rows[0].shown
    case = {
        "preset": "tiny", "combo": "baseline", "batch_size": 1, "comparisons": [],
        "memory_verdicts": [{"metric": "peak memory", "outcome": "regression", "change": 0.226}],
        "explain": [r.as_dict() for r in rows],
    }  # fmt: skip
    assert case_first_line(case).startswith("tiny/baseline/b1: peak memory +22.6 %: GroupNormSiLU's forward keeps ")


def _event(name, id, device_type, parent=None, start=0.0, **fields):
    """A profiler event with the fields Attribution reads (``FunctionEvent``'s names)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        name=name, id=id, device_type=device_type, cpu_parent=parent, sequence_nr=-1,
        time_range=SimpleNamespace(start=start, end=start + 1.0), **fields,
    )  # fmt: skip


@pytest.mark.parametrize("linked", [True, False], ids=["linked correlation id", "runtime call only (older torch)"])
def test_a_kernel_is_tied_to_the_operator_and_module_that_launched_it(linked):
    from torch.autograd import DeviceType

    from meddpm.measure.profiling.scopes import Attribution

    # An older torch's events carry neither the linked id nor the dtypes: those come from Kineto's own records.
    extra = {"linked_correlation_id": 0, "input_dtypes": ["float", "float"]} if linked else {}
    scope = _event("output_blocks.3.0.out_layers.2 (Conv3d)", 1, DeviceType.CPU)
    op = _event("aten::mul", 2, DeviceType.CPU, scope, 1.0, **extra)
    launch = _event("cudaLaunchKernel", 40, DeviceType.CPU, op, 2.0, **({"linked_correlation_id": 2} if linked else {}))
    kernel_fields = {"linked_correlation_id": 2} if linked else {}
    kernel = _event("void at::native::vectorized_elementwise_kernel<4, ...>", 40, DeviceType.CUDA, **kernel_fields)
    dtypes = {} if linked else {2: ["float", "float"]}
    site = Attribution([scope, op, launch, kernel], dtypes).of_kernel(kernel)
    assert site.module == "output_blocks.3.0.out_layers.2 (Conv3d)" and site.op == "aten::mul"
    assert site.label == "mul float32"


def test_the_gpu_spans_of_module_scopes_are_neither_kernels_nor_launches_but_copies_are():
    from torch.autograd import DeviceType

    from meddpm.measure.profiling.scopes import device_kernels

    names = ["denoiser.output_blocks.8.0.in_layers.1 (Conv3d)", "Optimizer.step#Adam.step"]
    ranges = [_event(name, i, DeviceType.CPU) for i, name in enumerate(names)]
    spans = [_event(name, 10 + i, DeviceType.CUDA) for i, name in enumerate(names)]
    flagged = _event("any range", 20, DeviceType.CUDA, is_user_annotation=True)
    work = [
        _event("void cudnn::engines_precompiled::nchwToNhwcKernel<float>(...)", 30, DeviceType.CUDA),
        _event("Memcpy DtoD (Device -> Device)", 31, DeviceType.CUDA),
        _event("Memset (Device)", 32, DeviceType.CUDA),
    ]
    assert device_kernels([*ranges, *spans, flagged, *work]) == work


def test_kineto_records_give_the_dtypes_an_older_torch_leaves_off_its_events():
    from torch.profiler import profile

    from meddpm.measure.profiling.scopes import KinetoDtypes

    x = torch.randn(4, 4)
    with profile(record_shapes=True) as prof:
        (torch.nn.functional.silu(x) * 2).to(torch.bfloat16)
    dtypes = KinetoDtypes(prof.profiler.kineto_results.events())
    operators = [e for e in prof.events() if e.name.startswith("aten::")]
    assert operators and all(list(dtypes[e.id]) == list(e.input_dtypes) for e in operators)
    assert dtypes.get(-1) is None


def test_a_compiled_graph_without_module_scopes_opens_with_the_row_that_moved_most():
    """A compiled combo's kernels run outside every module's scope: "outside modules runs 3 more copy/layout
    kernels" told nothing, where a cuDNN convolution had replaced Triton's kernels."""
    from meddpm.measure.profiling.scopes import OUTSIDE
    from meddpm.report.explanation import first_line

    def row(level, name, label, change, a, b, ms_a, ms_b):
        return {"level": level, "name": name, "label": label, "change": change, "count_a": a, "count_b": b,
                "ms_a": ms_a, "ms_b": ms_b, "module": "", "op": "", "shown": True}  # fmt: skip

    rows = [
        {**row("module", OUTSIDE, OUTSIDE, "calls", 1100, 1095, 52.4, 50.4), "detail": "3 more copy/layout kernels"},
        row(
            "name",
            "void implicit_convolveNd_sgemm<__nv_bfloat16, 3>",
            "implicit_convolveNd_sgemm bfloat16",
            "appeared",
            1,
            0,
            1.81,
            None,
        ),
        row("name", "triton_poi_fused_add_7", "triton_poi_fused_add", "calls", 9, 8, 0.95, 0.50),
    ]
    line = first_line("paper/fast/b1", (0.0392, 0.0354, 0.0430), None, rows)
    assert line == "paper/fast/b1: time +3.92 % [3.54, 4.30]: implicit_convolveNd_sgemm bfloat16 appeared (+1.8 ms)"
    assert first_line("x", None, None, [rows[0], rows[2]]).endswith("triton_poi_fused_add ran 8 -> 9 times (+0.4 ms)")


def test_a_module_type_whose_work_changed_precision_opens_the_memory_line():
    """GroupNorm32 forgetting to cast back under autocast: its SiLU runs in float32, the next Conv3d casts its input
    and keeps that copy. Conv3d keeps the bytes, but the change began where the precision changed."""
    norm, conv = (
        "denoiser.output_blocks.8.0.in_layers.0 (GroupNormSiLU)",
        "denoiser.output_blocks.8.0.in_layers.1 (Conv3d)",
    )

    def rows(silu_dtype, casts_back):
        silu = [
            ProfileRow(f"void at::native::vectorized_elementwise_kernel<{4 if silu_dtype == 'float32' else 8}, {op}>",
                       "elementwise", 35, 3.0 if silu_dtype == "float32" else 1.5, norm, f"aten::{op}",
                       f"{op} {silu_dtype}")
            for op in ("silu", "silu_backward")
        ]  # fmt: skip
        cast = "void at::native::unrolled_elementwise_kernel<copy>"
        copies = [ProfileRow(cast, "copy/layout", 70, 0.7, norm, "aten::copy_", "copy float32 -> bfloat16")]
        conv_copies = [ProfileRow(cast, "copy/layout", 68, 5.5, conv, "aten::copy_", "copy float32 -> bfloat16")]
        convolution = [ProfileRow("sm90_xmma_fprop_bf16", "convolution", 50, 20.0, conv, "aten::convolution",
                                  "xmma fprop bfloat16")]  # fmt: skip
        return silu + convolution + (copies if casts_back else conv_copies)

    planted, before = rows("float32", casts_back=False), rows("bfloat16", casts_back=True)
    explained = [r.as_dict() for r in explain([planted, planted], [before, before])]
    norm_row = next(r for r in explained if r["level"] == "module" and r["label"] == "GroupNormSiLU")
    assert norm_row["detail"] == "70 elementwise kernels in float32 instead of bfloat16"
    conv_row = next(r for r in explained if r["level"] == "module" and r["label"] == "Conv3d")
    assert conv_row["detail"] == "68 more bfloat16 copy/layout kernels"  # copies alone: no change of precision
    grown = [r.as_dict() for r in memory_rows([{conv: 5856 * 2**20}] * 2, [{conv: 3445 * 2**20}] * 2)]
    line = first_line("paper/amp_bf16/b1", None, 0.225, [*explained, *grown])
    assert line == (
        "paper/amp_bf16/b1: peak memory +22.5 %: GroupNormSiLU runs 70 elementwise kernels in float32 instead of "
        "bfloat16; Conv3d's forward keeps 2411.0 MiB more"
    )
