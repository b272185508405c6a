"""The kernels as custom operators: one call each for Dynamo, their own ops again for Inductor (CPU)."""

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch._inductor import decomposition

from meddpm import COMBOS, build_model
from meddpm.kernels.operators import NAMESPACE, operator_versions, prepare_inductor
from meddpm.model.nn import GroupNorm32

KERNEL_OPERATORS = (
    "concat_channels",
    "group_norm",
    "group_norm_backward",
    "shifted_tap_sum",
    "shifted_tap_sum_backward",
    "split_channels_dense",
)


def _fast_denoiser(tiny):
    model = build_model(tiny).double()
    COMBOS["fast"].configure(model.denoiser)
    model = model.to(memory_format=torch.channels_last_3d)
    with torch.no_grad():
        for p in model.parameters():
            if not p.any():  # wake the zero-initialised layers, so every gradient is checked
                p.normal_(std=0.05)
    x = torch.randn(2, tiny.in_channels, *tiny.volume, dtype=torch.float64)
    return model.denoiser, x.contiguous(memory_format=torch.channels_last_3d), torch.tensor([0, 249])


def _targets(gm: torch.fx.GraphModule) -> list[str]:
    return [str(node.target) for node in gm.graph.nodes if node.op == "call_function"]


def _ours(targets: list[str]) -> list[str]:
    return [t for t in targets if t.startswith(f"{NAMESPACE}.")]


def test_dynamo_records_each_kernel_as_one_operator_call(tiny):
    # As autograd.Functions, every GroupNorm was traced into a forward and a backward subgraph of
    # its own (most of Dynamo's time for `fast`); as operators each is one node.
    denoiser, x, t = _fast_denoiser(tiny)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(lambda x, t: denoiser(x, t).square().mean(), backend=record)(x, t)
    (graph,) = graphs
    targets = _targets(graph)
    norms = sum(isinstance(m, GroupNorm32) for m in denoiser.modules())
    assert _ours(targets).count("meddpm.group_norm.default") == norms > 0
    assert _ours(targets).count("meddpm.shifted_tap_sum.default") == 1
    assert not [t for t in targets if "autograd_function_apply" in t]


def _inductors_graphs(denoiser, x, t) -> tuple[torch.Tensor, list[torch.fx.GraphModule]]:
    """The loss, and AOTAutograd's forward and backward graphs traced with Inductor's decompositions."""
    prepare_inductor()
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=keep, bw_compiler=keep, decompositions=decomposition.select_decomp_table())
    torch._dynamo.reset()
    loss = torch.compile(lambda x, t: denoiser(x, t).square().mean(), backend=backend)(x, t)
    loss.backward()
    return loss, graphs


def test_inductor_expands_the_operators_into_their_ops_with_the_same_values_and_gradients(tiny):
    # What Inductor compiles: AOTAutograd's forward and backward graphs traced with Inductor's
    # decompositions hold none of our operators (so their ops fuse with their neighbours), and
    # running those graphs gives eager's output and gradients.
    denoiser, x, t = _fast_denoiser(tiny)
    loss, graphs = _inductors_graphs(denoiser, x, t)
    compiled_grads = [p.grad.clone() for p in denoiser.parameters()]
    assert len(graphs) == 2
    assert not [t for gm in graphs for t in _ours(_targets(gm))]

    denoiser.zero_grad()
    reference = denoiser(x, t).square().mean()
    reference.backward()
    torch.testing.assert_close(loss, reference, rtol=1e-10, atol=1e-12)
    for compiled, p in zip(compiled_grads, denoiser.parameters()):
        torch.testing.assert_close(compiled, p.grad, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("dense", [True, False])
def test_no_convolution_gradient_is_a_slice_with_dense_concat_gradients(tiny, dense):
    # cuDNN copies a strided gradient to a dense one, once for the data and once for the weight
    # gradient (28 copies, 1.4 ms of a paper-preset iteration on an H200). The decoder's
    # concatenations made such gradients: channel slices of their output's gradient.
    denoiser, x, t = _fast_denoiser(tiny)
    denoiser.use_dense_concat_gradients(dense)
    _, (_, backward) = _inductors_graphs(denoiser, x, t)
    convolution_grads = [
        n.args[0] for n in backward.graph.nodes if n.target == torch.ops.aten.convolution_backward.default
    ]
    assert len(convolution_grads) > 10
    slices = [g.name for g in convolution_grads if _view_base(g).target == torch.ops.aten.slice.Tensor]
    assert (slices == []) == dense, slices


def _view_base(node: torch.fx.Node) -> torch.fx.Node:
    """The node a chain of views starts from."""
    while node.target in (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default):
        node = node.args[0]
    return node


def test_concat_operators_pass_pytorchs_operator_checks():
    parts = [torch.randn(2, c, 3, 4, 5, dtype=torch.float64, requires_grad=True) for c in (3, 5)]
    torch.library.opcheck(torch.ops.meddpm.concat_channels.default, (parts,))
    grad = torch.randn(2, 8, 3, 4, 5, dtype=torch.float64).contiguous(memory_format=torch.channels_last_3d)
    torch.library.opcheck(torch.ops.meddpm.split_channels_dense.default, (grad, [3, 5]))


@pytest.mark.gpu
def test_few_channel_operators_pass_pytorchs_operator_checks():
    # Opaque operators (Triton kernels): their fakes, schemas and registered gradient against the real run.
    pytest.importorskip("triton")
    from meddpm.kernels import few_channel_convolution

    padded = torch.randn(2, 3, 10, 9, 8, device="cuda", dtype=torch.bfloat16)
    by_tap = torch.randn(81, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    torch.library.opcheck(few_channel_convolution.conv3d_few_channels, (padded, by_tap))
    grad = torch.randn(2 * 8 * 7 * 6, 64, device="cuda", dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.meddpm.few_channel_conv3d_weight_grad.default, (padded, grad, 81))


def test_registration_reaches_an_inductor_table_memoised_before_it():
    # Inductor memoises its decomposition table on first use; a compile before ours must not hide them.
    overloads = [getattr(torch.ops.meddpm, name).default for name in KERNEL_OPERATORS]
    saved = {op: decomposition.decompositions.pop(op) for op in overloads if op in decomposition.decompositions}
    try:
        decomposition.select_decomp_table()  # memoised without ours
        prepare_inductor()
        prepare_inductor()  # idempotent
        assert all(op in decomposition.select_decomp_table() for op in overloads)
    finally:
        decomposition.decompositions.update(saved)


def test_compile_options_name_every_operator_with_the_kernels_source_version():
    options = prepare_inductor()
    assert options == {"unsafe_marked_cacheable_functions": operator_versions()}
    assert sorted(options["unsafe_marked_cacheable_functions"]) == sorted(
        f"torch.ops.meddpm.{name}" for name in KERNEL_OPERATORS
    )


@pytest.mark.parametrize("silu", [False, True])
def test_group_norm_operators_pass_pytorchs_operator_checks(silu):
    # Schema, fake (shapes, dtypes, strides) against the real kernel, and the registered autograd.
    x = torch.randn(2, 8, 3, 4, 5, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(8, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(8, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.meddpm.group_norm.default, (x, weight, bias, 4, 1e-5, silu))
    _, stats = torch.ops.meddpm.group_norm.default(x, weight, bias, 4, 1e-5, silu)
    grad = torch.randn_like(x)
    torch.library.opcheck(
        torch.ops.meddpm.group_norm_backward.default, (grad, x.detach(), weight.detach(), stats.detach(), 4, silu)
    )


def test_shifted_tap_sum_operators_pass_pytorchs_operator_checks():
    by_tap = torch.randn(1, 2, 3, 3, 3, 4, 5, 6, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.meddpm.shifted_tap_sum.default, (by_tap,))
    grad = torch.randn(1, 2, 4, 5, 6, dtype=torch.float64)
    torch.library.opcheck(torch.ops.meddpm.shifted_tap_sum_backward.default, (grad, [3, 3, 3]))
