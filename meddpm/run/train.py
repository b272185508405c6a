"""One Med-DDPM training iteration, as the original trainer runs it, under a chosen combo."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from meddpm.data.phantom import phantom_batch
from meddpm.errors import UserError
from meddpm.model.config import ModelConfig
from meddpm.model.diffusion import GaussianDiffusion, build_model
from meddpm.run.combos import COMBOS, Combo, get_combo
from meddpm.run.step_graph import CapturedStep


@dataclass(frozen=True)
class EmaSettings:
    """The original trainer's EMA: decay 0.995, updated every 10 steps after step 2000.

    Before ``start_step`` the EMA copy is reset to the live weights at each update.
    """

    decay: float = 0.995
    every: int = 10
    start_step: int = 2000


class ExponentialMovingAverage:
    """An EMA copy of a module's parameters."""

    def __init__(self, module: torch.nn.Module, settings: EmaSettings):
        self.settings = settings
        self.module = module
        self.shadow = copy.deepcopy(module).requires_grad_(False)

    def update(self, step: int) -> None:
        """Update on the original's schedule (a no-op on steps that are not due)."""
        s = self.settings
        if step % s.every:
            return
        with torch.no_grad():
            live = list(self.module.parameters())
            shadow = list(self.shadow.parameters())
            if step < s.start_step:
                torch._foreach_copy_(shadow, live)
            else:
                torch._foreach_lerp_(shadow, live, 1 - s.decay)


class TrainStep:
    """A callable that runs one training iteration: forward, L1 loss, backward, Adam step.

    The batch is fixed (synthetic phantoms unless ``images``/``masks`` are given) while
    timesteps and noise are drawn fresh each iteration, as in real training. With
    ``grad_accumulate`` > 1 an iteration runs that many micro-batches per optimizer step,
    as the original trainer does (it uses 2); the benchmark default is 1. ``loss_fn`` is the
    loss callable (compiled when the combo says so); ``wrap_denoiser`` wraps the U-Net after it
    is on the device (``DistributedDataParallel`` for data-parallel training); a combo's CUDA
    graphs are then off, as DDP's gradient hooks run outside the compiled graphs.
    ``gradient_sync``, called with the U-Net once it is on the device, returns what to run
    after backward and before the optimizer step (an all-reduce of the gradients, kept as
    :attr:`gradient_sync`); it leaves CUDA graphs on. A combo's CUDA graphs record the whole
    iteration, forward, backward and Adam, as one graph after two eager iterations
    (:class:`meddpm.run.step_graph.CapturedStep`) where it has one micro-batch and no
    ``gradient_sync`` (:attr:`whole_step_graph`); otherwise Inductor's graph trees replay the compiled
    forward and backward. A recorded iteration keeps what it was recorded with: change
    :attr:`images` and :attr:`masks` in place, and the optimizer's learning rate not at all.
    ``combo`` is a :class:`Combo` or the name of one in :data:`meddpm.run.combos.COMBOS`;
    ``batch_size`` and ``grad_accumulate`` must be at least 1 (else :class:`UserError`).
    """

    def __init__(
        self,
        config: ModelConfig,
        combo: Combo | str,
        batch_size: int = 1,
        device: torch.device | str = "cpu",
        *,
        lr: float = 1e-5,
        grad_accumulate: int = 1,
        ema: EmaSettings | None = None,
        seed: int = 0,
        images: torch.Tensor | None = None,
        masks: torch.Tensor | None = None,
        wrap_denoiser: Callable[[nn.Module], nn.Module] | None = None,
        gradient_sync: Callable[[nn.Module], Callable[[], None]] | None = None,
    ):
        if isinstance(combo, str):
            combo = get_combo(combo)
        elif not isinstance(combo, Combo):
            raise UserError(
                f"combo must be a Combo or the name of one ({', '.join(COMBOS)}), not {type(combo).__name__}"
            )
        if batch_size < 1:
            raise UserError(f"batch_size={batch_size} must be at least 1 (volumes per micro-batch)")
        if grad_accumulate < 1:
            raise UserError(f"grad_accumulate={grad_accumulate} must be at least 1 (micro-batches per optimizer step)")
        self.config = config
        self.combo = combo
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.grad_accumulate = grad_accumulate
        self.step_count = 0

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = build_model(config)
        combo.configure(model.denoiser)
        self.model: GaussianDiffusion = model.to(self.device, memory_format=combo.memory_format)
        if wrap_denoiser is not None:  # e.g. DistributedDataParallel, which syncs gradients in backward
            self.model.denoiser = wrap_denoiser(self.model.denoiser)
        self.gradient_sync = gradient_sync(self.model.denoiser) if gradient_sync is not None else None
        # Compiling the whole loss (noising, concatenation, U-Net, L1) lets Inductor fuse the
        # elementwise and normalisation work around the convolutions; backward comes with it.
        self.cuda_graphs = combo.replays_graphs(self.device) and wrap_denoiser is None
        # With one micro-batch and nothing run between backward and the optimizer, the whole iteration
        # is recorded as one graph; otherwise Inductor's graph trees replay the forward and backward.
        self.whole_step_graph = self.cuda_graphs and grad_accumulate == 1 and self.gradient_sync is None
        self.loss_fn = combo.compiled(self.model.loss, cuda_graphs=self.cuda_graphs and not self.whole_step_graph)
        if images is None or masks is None:
            images, masks = phantom_batch(
                config.volume, batch_size, config.out_channels, config.mask_channels, seed=seed
            )
        self.images = images.to(self.device, memory_format=combo.memory_format)
        self.masks = masks.to(self.device, memory_format=combo.memory_format)
        self.optimizer = torch.optim.Adam(
            self.model.denoiser.parameters(), lr=lr, fused=combo.fused_adam or None, capturable=self.whole_step_graph
        )
        self.ema = ExponentialMovingAverage(self.model.denoiser, ema) if ema is not None else None
        self._captured = CapturedStep(self._iteration, self.device) if self.whole_step_graph else None

    @property
    def calls_before_replay(self) -> int:
        """Calls until this step only replays CUDA graphs (0 without them): time none of them.

        The whole iteration is recorded after its eager calls; Inductor's graph trees run their first
        call as a warm-up and record in the second.
        """
        if self._captured is not None:
            return self._captured.calls_before_replay
        return 2 if self.cuda_graphs else 0

    def __call__(self) -> torch.Tensor:
        """Run one iteration; returns the (undivided) loss of the last micro-batch, unsynced."""
        if self._captured is not None:
            loss = self._captured()
        else:
            if self.cuda_graphs:
                torch.compiler.cudagraph_mark_step_begin()
            loss = self._iteration()
            # A CUDA graph's output is overwritten by the graph's next replay.
            loss = loss.clone() if self.cuda_graphs else loss
        self.step_count += 1
        if self.ema is not None:
            self.ema.update(self.step_count)
        return loss

    def _iteration(self) -> torch.Tensor:
        """Forward and backward of every micro-batch, then the optimizer step; the last micro-batch's loss."""
        with self.combo.flags():
            for _ in range(self.grad_accumulate):
                with self.combo.autocast(self.device):
                    loss = self.loss_fn(self.images, self.masks)
                (loss / self.grad_accumulate).backward()
            if self.gradient_sync is not None:
                self.gradient_sync()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()
