"""The training step: optimizer, gradient accumulation and the original's EMA schedule."""

import dataclasses
import math

import pytest
import torch

from meddpm import COMBOS, EmaSettings, TrainStep, UserError
from meddpm.run.combos import Combo


def _params(module):
    return [p.detach().clone() for p in module.parameters()]


def test_a_step_updates_the_weights(tiny):
    step = TrainStep(tiny, COMBOS["baseline"])
    before = _params(step.model.denoiser)
    loss = step()
    after = _params(step.model.denoiser)
    assert torch.isfinite(loss) and loss > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, after))
    assert step.step_count == 1
    assert all(p.grad is None for p in step.model.parameters())  # zeroed after the step


def test_same_seed_same_model(tiny):
    a, b = TrainStep(tiny, COMBOS["baseline"], seed=3), TrainStep(tiny, COMBOS["baseline"], seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters()))
    assert torch.equal(a.images, b.images)


def test_gradient_accumulation_takes_one_optimizer_step(tiny, monkeypatch):
    step = TrainStep(tiny, COMBOS["baseline"], grad_accumulate=2)
    calls = {"backward": 0, "step": 0}
    original_loss = step.loss_fn

    def counting_loss(*args, **kwargs):
        calls["backward"] += 1
        return original_loss(*args, **kwargs)

    original_step = step.optimizer.step

    def counting_step(*args, **kwargs):
        calls["step"] += 1
        return original_step(*args, **kwargs)

    monkeypatch.setattr(step, "loss_fn", counting_loss)
    monkeypatch.setattr(step.optimizer, "step", counting_step)
    step()
    assert calls == {"backward": 2, "step": 1}


def test_ema_follows_the_original_schedule(tiny):
    step = TrainStep(tiny, COMBOS["baseline"], ema=EmaSettings(decay=0.5, every=2, start_step=4))
    live, shadow = step.model.denoiser, step.ema.shadow
    step()  # step 1: not due
    assert not all(torch.equal(a, b) for a, b in zip(live.parameters(), shadow.parameters()))
    step()  # step 2 < start: reset to the live weights
    assert all(torch.equal(a, b) for a, b in zip(live.parameters(), shadow.parameters()))
    old_shadow = _params(shadow)
    step(), step()  # step 4 >= start: shadow = 0.5 shadow + 0.5 live
    for s, old, p in zip(shadow.parameters(), old_shadow, live.parameters()):
        torch.testing.assert_close(s, 0.5 * old + 0.5 * p.detach())
    assert all(not p.requires_grad for p in shadow.parameters())


def test_custom_batch_is_used(tiny):
    images = torch.zeros(1, 1, *tiny.volume)
    masks = -torch.ones(1, 2, *tiny.volume)
    step = TrainStep(tiny, COMBOS["opt2"], images=images, masks=masks)
    assert torch.equal(step.images, images)
    assert step.images.is_contiguous(memory_format=torch.channels_last_3d)
    assert torch.isfinite(step())


def test_cuda_graphs_apply_on_one_gpu_only(tiny):
    # On the CPU, and under a wrapper such as DDP, the combo's CUDA graphs are off.
    assert COMBOS["fast"].cuda_graphs
    assert not TrainStep(tiny, COMBOS["fast"]).cuda_graphs
    assert not TrainStep(tiny, COMBOS["fast"], wrap_denoiser=lambda m: m).cuda_graphs
    assert not TrainStep(tiny, COMBOS["fast"]).whole_step_graph


def test_the_whole_iteration_is_one_graph_where_nothing_runs_between_its_parts(tiny, monkeypatch):
    # What a step records is decided when it is built: on a CPU, let the combos replay graphs and record
    # what each loss is compiled with.
    monkeypatch.setattr(Combo, "replays_graphs", lambda self, device: self.compile and self.cuda_graphs)
    trees = []
    monkeypatch.setattr(Combo, "compiled", lambda self, fn, *, cuda_graphs=False: trees.append(cuda_graphs) or fn)
    whole = TrainStep(tiny, COMBOS["fast"])
    accumulating = TrainStep(tiny, COMBOS["fast"], grad_accumulate=2)
    syncing = TrainStep(tiny, COMBOS["fast"], gradient_sync=lambda module: lambda: None)
    eager = TrainStep(tiny, COMBOS["amp_bf16"])
    assert whole.whole_step_graph and whole.calls_before_replay == 3 and whole.optimizer.defaults["capturable"]
    for step in (accumulating, syncing):  # something runs between backward's parts or before Adam: graph trees
        assert step.cuda_graphs and not step.whole_step_graph and not step.optimizer.defaults["capturable"]
        assert step.calls_before_replay == 2
    assert not eager.cuda_graphs and eager.calls_before_replay == 0
    assert trees == [False, True, True, False]  # Inductor's graph trees only where the iteration is not one graph


def test_a_combo_can_be_given_by_name(tiny):
    step = TrainStep(tiny, "opt2")
    assert step.combo is COMBOS["opt2"]
    assert step.images.is_contiguous(memory_format=torch.channels_last_3d)


@pytest.mark.parametrize(
    "combo, kwargs, message",
    [
        ("nope", {}, "unknown combo 'nope'; choose from baseline"),
        (None, {}, r"combo must be a Combo or the name of one \(baseline, .*\), not NoneType$"),
        (3, {}, r"combo must be a Combo or the name of one \(baseline, .*\), not int$"),
        (COMBOS["baseline"], {"batch_size": 0}, "batch_size=0 must be at least 1"),
        (COMBOS["baseline"], {"batch_size": -2}, "batch_size=-2 must be at least 1"),
        (COMBOS["baseline"], {"grad_accumulate": 0}, "grad_accumulate=0 must be at least 1"),
    ],
)
def test_bad_arguments_are_one_line_errors(tiny, combo, kwargs, message):
    with pytest.raises(UserError, match=message) as info:
        TrainStep(tiny, combo, **kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.gpu
def test_a_graphed_step_trains_in_every_replay_and_returns_a_loss_that_outlives_the_next(tiny):
    step = TrainStep(tiny, COMBOS["fast"], device="cuda")
    assert step.whole_step_graph
    losses = [step() for _ in range(3)]  # two eager iterations, then the recording (which replays at once)
    for _ in range(3):
        before = [p.detach().clone() for p in step.model.denoiser.parameters()]
        losses.append(step())
        assert any(not torch.equal(a, b) for a, b in zip(before, step.model.denoiser.parameters()))  # Adam stepped
    values = [loss.item() for loss in losses]
    # Each loss kept its value past the later replays, which overwrite the graph's own output.
    assert all(math.isfinite(v) for v in values) and len(set(values[2:])) == 4, values
    assert all(p.grad is None for p in step.model.denoiser.parameters()) and step.step_count == 6


@pytest.mark.gpu
def test_every_replay_draws_new_timesteps_and_noise(tiny):
    step = TrainStep(tiny, COMBOS["fast"], device="cuda", lr=0.0)  # the weights stay: only the draws move the loss
    values = [step().item() for _ in range(6)]
    assert len(set(values[2:])) == 4, values


@pytest.mark.gpu
def test_a_graphed_step_computes_what_the_same_step_without_graphs_does(tiny):
    losses, updates = {}, {}
    for graphs in (True, False):
        torch.cuda.manual_seed(0)
        step = TrainStep(tiny, dataclasses.replace(COMBOS["fast"], cuda_graphs=graphs), device="cuda")
        assert step.whole_step_graph is graphs
        before = _params(step.model.denoiser)
        losses[graphs] = torch.stack([step() for _ in range(6)]).cpu()
        after = step.model.denoiser.parameters()
        updates[graphs] = torch.cat([(p.detach() - b).flatten() for p, b in zip(after, before)]).double()
    # The same random draws in the same order, and Adam fed the gradients of the iteration it ends.
    torch.testing.assert_close(losses[True], losses[False], rtol=1e-4, atol=0)
    assert torch.nn.functional.cosine_similarity(updates[True], updates[False], dim=0) > 0.99
