"""Combos: names, scoped global flags (nothing leaks), and strict FP32 meaning strict."""

import pytest
import torch
import torch.nn.functional as F

from meddpm import COMBOS, TrainStep, UserError, get_combo
from meddpm.kernels.operators import operator_versions
from meddpm.run.combos import backend_flags, snapshot_flags


def test_the_combos():
    assert list(COMBOS) == ["baseline", "opt1", "opt2", "opt12", "amp_bf16", "fast"]
    fast = COMBOS["fast"]
    assert (fast.autocast_dtype, fast.channels_last, fast.compile, fast.sdpa_attention) == (
        torch.bfloat16,
        True,
        True,
        True,
    )
    assert [c.math_precision for c in COMBOS.values()] == ["fp32", "tf32", "fp32", "tf32", "bf16", "bf16"]
    assert (COMBOS["opt1"].tf32, COMBOS["opt2"].channels_last) == (True, True)
    assert COMBOS["opt12"].tf32 and COMBOS["opt12"].channels_last
    assert COMBOS["amp_bf16"].autocast_dtype == torch.bfloat16
    assert not any([COMBOS["baseline"].tf32, COMBOS["baseline"].channels_last, COMBOS["baseline"].cudnn_benchmark])


def test_unknown_combo_names_the_choices():
    with pytest.raises(UserError, match="unknown combo 'fastest'; choose from baseline, opt1"):
        get_combo("fastest")


@pytest.mark.parametrize("name", list(COMBOS))
def test_flags_restored_after_each_combo(micro, name, monkeypatch):
    if COMBOS[name].compile:
        # Dynamo and AOTAutograd trace the step as for Inductor, but Inductor's C++ build of its
        # kernels would take 100 s of a 2-core CI's 15 minutes; the flags are the combo's, set and
        # restored around the call whichever backend compiles. The GPU suite runs Inductor itself.
        compile_ = torch.compile
        monkeypatch.setattr(torch, "compile", lambda fn, options=None: compile_(fn, backend="aot_eager"))
    before = snapshot_flags()
    combo = COMBOS[name]
    with combo.flags():
        inside = snapshot_flags()
        assert torch.backends.cudnn.allow_tf32 is combo.tf32
        assert torch.backends.cuda.matmul.allow_tf32 is combo.tf32
        assert torch.backends.cudnn.benchmark is combo.cudnn_benchmark
    assert snapshot_flags() == before
    # The legacy flags stay readable (mixing APIs badly makes these reads raise).
    assert isinstance(torch.backends.cudnn.allow_tf32, bool)
    assert isinstance(torch.backends.cuda.matmul.allow_tf32, bool)
    # A whole training step under the combo leaves nothing behind either.
    TrainStep(micro, combo)()
    assert snapshot_flags() == before
    assert torch.get_default_dtype() == torch.float32
    assert not torch.is_autocast_enabled("cpu")
    del inside


def test_compiled_calls_key_the_compile_caches_by_the_kernels_source(monkeypatch):
    # The caches key a graph by its operators' names; the kernels' source version must be in the
    # options torch.compile gets, so an edited kernel is compiled again.
    seen = {}
    monkeypatch.setattr(torch, "compile", lambda fn, options=None: seen.update(options) or fn)
    assert COMBOS["fast"].compiled(lambda x: x + 1)(torch.ones(1)).item() == 2.0
    versions = seen["unsafe_marked_cacheable_functions"]
    assert versions == operator_versions()
    assert "torch.ops.meddpm.group_norm" in versions and "torch.ops.meddpm.shifted_tap_sum_backward" in versions
    assert len(set(versions.values())) == 1 and len(next(iter(versions.values()))) == 16


def test_framework_default_cudnn_tf32_is_overridden():
    # Recent PyTorch allows TF32 for cuDNN convolutions by default; a strict baseline
    # must switch it off, whatever the surrounding default.
    torch.backends.cudnn.allow_tf32 = True
    try:
        with COMBOS["baseline"].flags():
            assert torch.backends.cudnn.allow_tf32 is False
            assert torch.backends.cudnn.conv.fp32_precision == "ieee"
    finally:
        torch.backends.cudnn.allow_tf32 = True


def test_legacy_flags_readable_inside_every_combo_in_turn():
    # torch.compile and other libraries read the legacy flags while a combo is active.
    for combo in list(COMBOS.values()) * 2:
        with combo.flags():
            assert torch.backends.cudnn.allow_tf32 is combo.tf32
            assert torch.backends.cuda.matmul.allow_tf32 is combo.tf32
        assert torch.backends.cuda.matmul.allow_tf32 is False


def test_flags_restored_when_the_block_raises():
    before = snapshot_flags()
    with pytest.raises(RuntimeError, match="boom"):
        with backend_flags(tf32=not torch.backends.cudnn.allow_tf32, cudnn_benchmark=True):
            raise RuntimeError("boom")
    assert snapshot_flags() == before


def test_flags_restored_from_a_new_api_state():
    # A user who set the new fp32_precision API before us gets those settings back. (Their
    # mix already makes the hidden legacy matmul state unreadable, so it cannot be saved.)
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    try:
        before = snapshot_flags()
        assert before["float32_matmul_precision"] is None
        for combo in COMBOS.values():
            with combo.flags():
                assert torch.backends.cuda.matmul.allow_tf32 is combo.tf32
            after = snapshot_flags()
            assert {k: v for k, v in after.items() if k != "float32_matmul_precision"} == {
                k: v for k, v in before.items() if k != "float32_matmul_precision"
            }
    finally:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.fp32_precision = "none"


@pytest.mark.gpu
def test_baseline_is_strict_fp32_and_opt1_uses_tf32_on_gpu():
    # A 3x3x3 convolution against a float64 reference: strict float32 lands far under
    # 1e-5 relative error, TF32 (10-bit mantissa) near 1e-4..1e-3.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 64, 32, 32, 32, generator=g, dtype=torch.float64)
    w = torch.randn(64, 64, 3, 3, 3, generator=g, dtype=torch.float64)
    ref = F.conv3d(x, w, padding=1)

    def rel_error(combo: str) -> float:
        with COMBOS[combo].flags():
            out = F.conv3d(x.float().cuda(), w.float().cuda(), padding=1).double().cpu()
        return ((out - ref).norm() / ref.norm()).item()

    assert rel_error("baseline") < 1e-5
    assert rel_error("opt1") > 5e-5
