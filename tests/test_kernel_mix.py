"""Kernel categories from real kernel names recorded on an H200 (meddpm-bench --kernel-mix)."""

import pandas as pd
import pytest

from meddpm.measure.profiling.kernel_mix import categorize, category_shares


@pytest.mark.parametrize(
    "name, category",
    [
        ("triton_poi_fused__to_copy__unsafe_index_put_add_mul_neg_new_zeros_31", "triton"),
        ("triton_red_fused__to_copy_clone_native_group_norm_backward_silu_silu_backward_22", "triton"),
        (
            "sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1",
            "conv_wgrad",
        ),
        ("void cudnn::cnn::wgrad2d_grouped_direct_kernel<true, true, int, __nv_bfloat16, float, float>", "conv_wgrad"),
        (
            "sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x64x32_warpgroupsize1x1x1_g1",
            "conv_dgrad",
        ),
        (
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x64x32_warpgroupsize1x1x1_g1",
            "conv_fwd",
        ),
        (
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(Params)",
            "gemm",
        ),
        (
            "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>(long, float)",
            "normalization",
        ),
        (
            "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true>",
            "layout",
        ),
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>",
            "copy",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)>",
            "elementwise",
        ),
        (
            "void at::native::(anonymous namespace)::ComputeInternalGradientsCUDAKernel<float>(long, float const*)",
            "normalization",
        ),
    ],
)
def test_real_kernel_names_fall_in_their_category(name, category):
    assert categorize(name) == category


def test_category_shares_add_up():
    kernels = pd.DataFrame(
        {"kernel": ["a", "b", "c"], "us": [3000.0, 1000.0, 4000.0], "launches": [1, 2, 3], "category": ["x", "x", "y"]}
    )
    shares = category_shares(kernels)
    assert list(shares.index) == ["x", "y"] and shares["ms"].tolist() == [4.0, 4.0]
    assert shares["share"].sum() == pytest.approx(1.0) and shares.loc["x", "launches"] == 3
