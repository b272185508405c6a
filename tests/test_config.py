"""Presets: shapes, parameter counts and FLOPs (full-size presets on the meta device)."""

import pytest
import torch

from meddpm import ModelConfig, UserError, build_model
from meddpm.measure.campaign.flops import forward_flops, train_step_flops


def expected_parameters(cfg: ModelConfig) -> int:
    """Parameter count worked out from the architecture description, independently of the code."""

    def conv3(ci, co, k):
        return ci * co * k**3 + co

    def linear(i, o):
        return i * o + o

    def norm(c):
        return 2 * c

    def res(ci, co, emb):
        skip = conv3(ci, co, 1) if ci != co else 0
        return norm(ci) + conv3(ci, co, 3) + linear(emb, co) + norm(co) + conv3(co, co, 3) + skip

    def attn(c):
        return norm(c) + (c * 3 * c + 3 * c) + (c * c + c)

    c, emb = cfg.model_channels, 4 * cfg.model_channels
    total = linear(c, emb) + linear(emb, emb)
    ch = c * cfg.channel_mult[0]
    total += conv3(cfg.in_channels, ch, 3)
    skips, ds = [ch], 1
    for level, mult in enumerate(cfg.channel_mult):
        for _ in range(cfg.num_res_blocks):
            total += res(ch, c * mult, emb)
            ch = c * mult
            total += attn(ch) if ds in cfg.attention_ds else 0
            skips.append(ch)
        if level < len(cfg.channel_mult) - 1:
            total += conv3(ch, ch, 3)
            skips.append(ch)
            ds *= 2
    total += 2 * res(ch, ch, emb) + attn(ch)
    for level, mult in reversed(list(enumerate(cfg.channel_mult))):
        for i in range(cfg.num_res_blocks + 1):
            total += res(ch + skips.pop(), c * mult, emb)
            ch = c * mult
            total += attn(ch) if ds in cfg.attention_ds else 0
            if level and i == cfg.num_res_blocks:
                total += conv3(ch, ch, 3)
                ds //= 2
    return total + norm(ch) + conv3(ch, cfg.out_channels, 3)


@pytest.mark.parametrize("name", ["paper", "brats", "tiny"])
def test_parameter_count_matches_architecture(name):
    cfg = ModelConfig.preset(name)
    with torch.device("meta"):
        model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == expected_parameters(cfg)


def test_paper_preset_matches_original_size():
    # The original create_model(128, 64, 1, in_channels=3, out_channels=1) has 40,226,433
    # parameters; the paper quotes about 16.6 TFLOP per iteration (3x forward).
    cfg = ModelConfig.preset("paper")
    with torch.device("meta"):
        model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == 40_226_433
    assert 3 * forward_flops(cfg) == pytest.approx(16.6e12, rel=0.01)
    assert forward_flops(cfg) == 5_536_663_142_400
    assert train_step_flops(cfg) == 16_588_246_122_496


@pytest.mark.parametrize("name", ["paper", "brats"])
def test_full_size_output_shape_on_meta(name):
    cfg = ModelConfig.preset(name)
    with torch.device("meta"):
        model = build_model(cfg)
        x = torch.empty(2, cfg.in_channels, *cfg.volume)
        out = model.denoiser(x, torch.zeros(2, dtype=torch.long))
    assert out.shape == (2, cfg.out_channels, *cfg.volume)


def test_unknown_preset_names_the_choices():
    with pytest.raises(UserError, match="unknown preset 'huge'; choose one of paper, brats, tiny"):
        ModelConfig.preset("huge")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"volume": (17, 16, 16)}, "not divisible by 2"),
        ({"model_channels": 24}, "multiples of num_groups"),
        ({"in_channels": 1}, "mask channels"),
        ({"volume": (16, 16)}, r"volume \(16, 16\) must have three positive sides"),
        ({"volume": (16, 16, 16, 16)}, "must have three positive sides"),
        ({"volume": (16, 0, 16)}, "must have three positive sides"),
        ({"volume": (16, -16, 16)}, "must have three positive sides"),
        ({"channel_mult": ()}, "channel_mult is empty"),
        ({"channel_mult": (1, 0)}, r"channel_mult \(1, 0\) has multipliers below 1"),
        ({"channel_mult": (-1, 2)}, "multipliers below 1"),
        ({"model_channels": 0}, "model_channels=0 must be positive"),
        ({"model_channels": -32}, "model_channels=-32 must be positive"),
        ({"model_channels": 33, "num_groups": 1}, "model_channels=33 must be even"),
        ({"num_groups": 0}, "num_groups=0 must be positive"),
        ({"num_groups": -1}, "num_groups=-1 must be positive"),
        ({"num_res_blocks": -1}, "num_res_blocks=-1 must be 0 or more"),
        ({"out_channels": 0, "in_channels": 2}, "out_channels=0 must be at least 1"),
        ({"timesteps": 0}, "timesteps=0 must be at least 1"),
        ({"dropout": 1.0}, r"dropout=1.0 must be in \[0, 1\)"),
        ({"dropout": -0.1}, "must be in"),
        ({"dropout": float("nan")}, "must be in"),
        ({"attention_ds": (4,)}, r"attention_ds \(4,\) has factors \[4\] the U-Net never reaches"),
        ({"attention_ds": (2, 3)}, r"factors \[3\]"),
        ({"attention_ds": (0,)}, r"factors \[0\]"),
        # The most basic problem is named first, not a division by zero in a later check.
        ({"channel_mult": (), "num_groups": 0}, "channel_mult is empty"),
        ({"model_channels": 0, "num_groups": 0}, "model_channels=0 must be positive"),
    ],
)
def test_invalid_configs_are_refused(changes, message):
    with pytest.raises(UserError, match=message) as info:
        ModelConfig.preset("tiny").replace(**changes)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "changes",
    [
        {"num_res_blocks": 0},  # the decoder still has one block per level
        {"attention_ds": (1, 2)},  # every factor the two-level U-Net reaches
        {"attention_ds": ()},
        {"channel_mult": (1,), "attention_ds": (1,)},
        {"dropout": 0.5},
        {"timesteps": 1},
    ],
)
def test_edge_configs_are_accepted_and_build(changes):
    cfg = ModelConfig.preset("tiny").replace(**changes)
    with torch.device("meta"):
        model = build_model(cfg)
        out = model.denoiser(torch.empty(1, cfg.in_channels, *cfg.volume), torch.zeros(1, dtype=torch.long))
    assert out.shape == (1, cfg.out_channels, *cfg.volume)
    assert sum(p.numel() for p in model.parameters()) == expected_parameters(cfg)
