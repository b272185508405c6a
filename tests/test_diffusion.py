"""The diffusion: cosine schedule, forward process, reverse sampling."""

import math

import pytest
import torch

from meddpm import COMBOS, build_model
from meddpm.model.diffusion import cosine_beta_schedule


def test_betas_in_range_and_alpha_bar_decreasing():
    betas = cosine_beta_schedule(250)
    assert betas.shape == (250,)
    assert (betas > 0).all() and (betas <= 0.999).all()
    alpha_bar = torch.cumprod(1 - betas, 0)
    assert (alpha_bar[1:] < alpha_bar[:-1]).all()
    assert alpha_bar[0] == pytest.approx(1 - betas[0].item())
    assert alpha_bar[-1] < 1e-3  # almost pure noise at t = T - 1


def test_cosine_schedule_matches_closed_form():
    # alpha-bar(t) = f(t) / f(0), f(t) = cos(((t/T) + s) / (1 + s) * pi/2)^2
    T, s = 250, 0.008
    f = lambda t: math.cos((t / T + s) / (1 + s) * math.pi / 2) ** 2  # noqa: E731
    alpha_bar = torch.cumprod(1 - cosine_beta_schedule(T), 0)
    for t in [0, 10, 100, 200]:
        assert alpha_bar[t].item() == pytest.approx(f(t + 1) / f(0), rel=1e-9)


def test_q_sample_matches_closed_form(tiny):
    model = build_model(tiny).double()
    x0 = torch.rand(3, 1, 4, 4, 4, dtype=torch.float64) * 2 - 1
    noise = torch.randn_like(x0)
    t = torch.tensor([0, 100, 249])
    betas = cosine_beta_schedule(tiny.timesteps)
    alpha_bar = torch.cumprod(1 - betas, 0)[t].reshape(-1, 1, 1, 1, 1)
    expected = alpha_bar.sqrt() * x0 + (1 - alpha_bar).sqrt() * noise
    torch.testing.assert_close(model.q_sample(x0, t, noise), expected, rtol=1e-6, atol=1e-6)


def test_sampling_a_few_steps(tiny):
    model = build_model(tiny)
    mask = torch.randn(2, tiny.mask_channels, *tiny.volume)
    seen = []
    out = model.sample(mask, steps=3, generator=torch.Generator().manual_seed(0), progress=seen.append)
    assert out.shape == (2, tiny.out_channels, *tiny.volume)
    assert torch.isfinite(out).all()
    assert seen == [2, 1, 0]


def test_last_step_adds_no_noise(tiny):
    model = build_model(tiny)
    x = torch.randn(1, 1, *tiny.volume)
    mask = torch.randn(1, tiny.mask_channels, *tiny.volume)
    t0 = torch.zeros(1, dtype=torch.long)
    a = model.p_sample(x, t0, mask, noise=torch.randn_like(x))
    b = model.p_sample(x, t0, mask, noise=torch.randn_like(x))
    torch.testing.assert_close(a, b)
    t5 = torch.full((1,), 5, dtype=torch.long)
    assert not torch.equal(model.p_sample(x, t5, mask), model.p_sample(x, t5, mask))


def test_predicted_x0_is_clipped(tiny):
    model = build_model(tiny)
    x = torch.full((1, 1, *tiny.volume), 50.0)  # far outside the data range
    mask = torch.zeros(1, tiny.mask_channels, *tiny.volume)
    mean, _ = model.p_mean_log_variance(x, torch.tensor([0]), mask)
    # At t = 0 the posterior mean is essentially x0, which must lie in [-1, 1].
    assert mean.abs().max() <= 1.0 + 1e-4


def test_sampler_runs_reverse_steps_under_a_combo(tiny):
    from meddpm.run.sampling import Sampler

    out = Sampler(tiny, COMBOS["opt2"], "cpu")(steps=2)
    assert out.shape == (1, tiny.out_channels, *tiny.volume) and torch.isfinite(out).all()
    assert out.is_contiguous(memory_format=torch.channels_last_3d)


def test_a_compiled_sampler_compiles_its_reverse_step_once(tiny, monkeypatch):
    """Each step's output is the next step's input: laid out unlike the first input, Dynamo's stride guard would
    compile the step again. Dynamo's eager backend guards as Inductor does, without Inductor's minutes of C++ here."""
    from meddpm.run.combos import Combo
    from meddpm.run.sampling import Sampler

    monkeypatch.setattr(Combo, "compiled", lambda self, fn, cuda_graphs=False: torch.compile(fn, backend="eager"))
    sampler = Sampler(tiny, COMBOS["fast"], "cpu")
    with torch._dynamo.config.patch(error_on_recompile=True):
        for steps in (2, 3):
            out = sampler(steps=steps)
    assert out.shape == (1, tiny.out_channels, *tiny.volume) and torch.isfinite(out).all()
