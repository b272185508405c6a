"""Parity cases, sides and pairs: what is run, and how two runs of it are compared.

One *case* is a small model configuration plus a batch, a timestep and a seed. Running it
under a *side* (a combo on a device, in float32 or float64) gives the loss, the noise
prediction, one reverse-diffusion step and every parameter's gradient. A *pair* compares
two sides by relative norm ||a - b|| / ||b|| per tensor, against the measured bounds of
:mod:`meddpm.parity.bounds`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from meddpm.data.phantom import phantom_batch
from meddpm.model.config import ModelConfig
from meddpm.model.diffusion import build_model
from meddpm.run.combos import COMBOS

KINDS = ("loss", "prediction", "sample_step", "grads")

# The space cases are drawn from, shared by the Hypothesis strategy and calibration.
SIDES = (4, 8)
LEVELS = (1, 2)
ATTENTION = ((), (1,), (2,))
BATCHES = (1, 2)
TIMESTEPS = 250


@dataclass(frozen=True)
class Case:
    """One generated example: a small U-Net and the inputs of one training step."""

    volume: tuple[int, int, int]
    levels: int
    attention_ds: tuple[int, ...]
    batch: int
    t: int
    seed: int

    def config(self) -> ModelConfig:
        """The model configuration this case runs."""
        return ModelConfig(
            name="parity",
            volume=self.volume,
            in_channels=3,
            out_channels=1,
            model_channels=32,
            channel_mult=(1, 2)[: self.levels],
            num_res_blocks=1,
            attention_ds=tuple(ds for ds in self.attention_ds if ds < 2**self.levels),
        )


def random_case(rng: random.Random) -> Case:
    """A case from the same space as the Hypothesis strategy.

    Like Hypothesis, it favours the ends of the timestep range (half the cases): there one
    sampling step leans hardest on the prediction, and uniform draws alone miss the worst.
    """
    levels = rng.choice(LEVELS)
    edges = (0, 1, TIMESTEPS - 3, TIMESTEPS - 2, TIMESTEPS - 1)
    sides = [s for s in SIDES if s % 2 ** (levels - 1) == 0]
    return Case(
        volume=(rng.choice(sides), rng.choice(sides), rng.choice(sides)),
        levels=levels,
        attention_ds=rng.choice(ATTENTION),
        batch=rng.choice(BATCHES),
        t=rng.choice(edges) if rng.random() < 0.5 else rng.randrange(TIMESTEPS),
        seed=rng.randrange(2**16),
    )


@dataclass(frozen=True)
class Side:
    """How a case is run: a combo, on a device kind, in float32 or float64."""

    combo: str
    device: str  # "cpu" or "cuda"
    float64: bool = False

    def __str__(self) -> str:
        return f"{self.combo}/{self.device}" + ("/float64" if self.float64 else "")


Transform = Callable[[torch.Tensor], torch.Tensor]


def randomise_zero_initialised(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Give every all-zero parameter small random values (N(0, 0.05^2), drawn from ``generator``).

    At the original's init the zero-initialised layers make the noise prediction exactly zero and
    most gradients vanish, so any comparison of numerics would be trivial.
    """
    with torch.no_grad():
        for p in model.parameters():
            if not p.any():
                p.copy_(torch.randn(p.shape, generator=generator) * 0.05)


def run_case(case: Case, side: Side, input_transform: Transform | None = None) -> dict[str, torch.Tensor]:
    """Loss, prediction, one sampling step and gradients of ``case`` under ``side``.

    The zero-initialised layers get small random weights first (:func:`randomise_zero_initialised`).
    ``input_transform`` is applied to every input tensor (used to plant layout bugs).
    """
    cfg = case.config()
    combo = COMBOS[side.combo]
    device = torch.device("cuda", torch.cuda.current_device()) if side.device == "cuda" else torch.device("cpu")
    dtype = torch.float64 if side.float64 else torch.float32
    gen = torch.Generator().manual_seed(case.seed)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seed)
        model = build_model(cfg)
    randomise_zero_initialised(model, gen)

    images, masks = phantom_batch(cfg.volume, case.batch, cfg.out_channels, cfg.mask_channels, seed=case.seed)
    noise = torch.randn(images.shape, generator=gen)
    step_noise = torch.randn(images.shape, generator=gen)
    inputs = [images, masks, noise, step_noise]
    if input_transform is not None:
        inputs = [input_transform(x) for x in inputs]
    model = model.to(device=device, dtype=dtype, memory_format=combo.memory_format)
    combo.configure(model.denoiser)
    predict_noise = combo.compiled(model.predict_noise)
    images, masks, noise, step_noise = [
        x.to(device=device, dtype=dtype).contiguous(memory_format=combo.memory_format) for x in inputs
    ]
    t = torch.full((case.batch,), case.t, device=device, dtype=torch.long)

    with combo.flags():
        with combo.autocast(device):
            x_t = model.q_sample(images, t, noise)
            prediction = predict_noise(x_t, t, masks)
            loss = F.l1_loss(prediction.to(dtype), noise)
        loss.backward()
        with combo.autocast(device):
            sample_step = model.p_sample(x_t.detach(), t, masks, noise=step_noise)

    def out(x: torch.Tensor) -> torch.Tensor:
        return x.detach().to("cpu", torch.float64).contiguous()

    result = {"loss": out(loss), "prediction": out(prediction), "sample_step": out(sample_step)}
    result.update({f"grad/{n}": out(p.grad) for n, p in model.named_parameters() if p.grad is not None})
    return result


# Some gradients are analytically zero (a conv bias cancelled by the GroupNorm right after
# it), so rounding alone makes their relative error huge. Gradients are measured against
# at least this fraction of the largest gradient norm in the model.
GRAD_FLOOR = 1e-2


def rel_error(a: torch.Tensor, b: torch.Tensor, floor: float = 0.0) -> float:
    """||a - b|| / max(||b||, floor); infinite where ``a`` holds a NaN or Inf or shapes differ."""
    if a.shape != b.shape or not torch.isfinite(a).all():
        return math.inf
    diff, ref = (a - b).norm().item(), max(b.norm().item(), floor)
    if ref == 0:
        return 0.0 if diff == 0 else math.inf
    return diff / ref


def compare(variant: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict[str, tuple[float, str]]:
    """Worst relative error per kind (loss, prediction, sample_step, grads) and the tensor it was in."""
    if variant.keys() != reference.keys():
        missing = sorted(set(reference) ^ set(variant))
        return {kind: (math.inf, f"tensors differ: {missing[:3]}") for kind in KINDS}
    grad_scale = max((r.norm().item() for n, r in reference.items() if n.startswith("grad/")), default=0.0)
    worst: dict[str, tuple[float, str]] = {}
    for name, ref in reference.items():
        kind = "grads" if name.startswith("grad/") else name
        error = rel_error(variant[name], ref, GRAD_FLOOR * grad_scale if kind == "grads" else 0.0)
        if kind not in worst or error > worst[kind][0]:
            worst[kind] = (error, name)
    return worst


@dataclass(frozen=True)
class Pair:
    """Two sides that must compute the same function within measured bounds."""

    name: str
    variant: Side
    reference: Side

    @property
    def device(self) -> str:
        """'cuda' if either side needs a GPU."""
        return "cuda" if "cuda" in (self.variant.device, self.reference.device) else "cpu"

    def covers(self, case: Case) -> bool:
        """Whether this pair judges ``case``: not where a known library bug would be judged instead of the model.

        PyTorch 2.13's CPU (oneDNN) bf16 conv3d returns a weight gradient of garbage (up to 1e37) in
        many calls when its input's depth is 2 (how often: docs/parity.md, "bf16 on the CPU"). The
        deepest level of a two-level model over a depth of 4 has depth 2, so the CPU's bf16 pairs leave
        those cases out.
        """
        bf16 = "bf16" in (COMBOS[self.variant.combo].math_precision, COMBOS[self.reference.combo].math_precision)
        return not (self.device == "cpu" and bf16 and case.volume[0] // 2 ** (case.levels - 1) == 2)

    def errors(self, case: Case, input_transform: Transform | None = None) -> dict[str, tuple[float, str]]:
        """Worst error per kind of the variant against the reference on ``case``."""
        return compare(run_case(case, self.variant, input_transform), run_case(case, self.reference))


def _pairs(device: str) -> list[Pair]:
    f64 = Side("baseline", "cpu", float64=True)
    pairs = [
        Pair("channels_last~contiguous", Side("opt2", device), Side("baseline", device)),
        Pair("fp32~fp64", Side("baseline", device), f64),
        Pair("channels_last_fp32~fp64", Side("opt2", device), f64),
        Pair("bf16~fp32", Side("amp_bf16", device), Side("baseline", device)),
        Pair("bf16~fp64", Side("amp_bf16", device), f64),
    ]
    if device == "cuda":
        pairs += [
            Pair("tf32~fp32", Side("opt1", device), Side("baseline", device)),
            Pair("tf32_channels_last~fp32", Side("opt12", device), Side("baseline", device)),
            Pair("tf32~fp64", Side("opt1", device), f64),
        ]
    return pairs


# The fast combo (bf16, channels-last, compiled, SDPA attention) must keep the eager bf16
# combo's measured bounds against strict FP32: its speed may not cost accuracy.
FAST_PAIR = Pair("fast~fp32", Side("fast", "cuda"), Side("baseline", "cuda"))
FAST_BOUNDS_FROM = "cuda:bf16~fp32"


PAIRS: dict[str, list[Pair]] = {"cpu": _pairs("cpu"), "cuda": _pairs("cuda")}
