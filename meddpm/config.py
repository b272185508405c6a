"""Model configuration and the named presets of Med-DDPM."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from meddpm.errors import UserError


@dataclass(frozen=True)
class ModelConfig:
    """Everything that fixes the shape of a Med-DDPM model and its diffusion.

    ``attention_ds`` holds downsample factors (1 = full resolution) at which the
    encoder and decoder insert an attention block; the middle block always has one.
    The mask channels are ``in_channels - out_channels``: the noisy image is
    concatenated with the one-hot mask before the U-Net.
    """

    name: str
    volume: tuple[int, int, int]
    in_channels: int
    out_channels: int
    model_channels: int
    channel_mult: tuple[int, ...]
    num_res_blocks: int
    attention_ds: tuple[int, ...]
    num_groups: int = 32
    dropout: float = 0.0
    timesteps: int = 250

    def __post_init__(self) -> None:
        factor = 2 ** (len(self.channel_mult) - 1)
        if any(side % factor for side in self.volume):
            raise UserError(
                f"volume {self.volume} is not divisible by {factor}, the U-Net's total "
                f"downsampling for {len(self.channel_mult)} levels; choose sides that are"
            )
        widths = [self.model_channels * m for m in self.channel_mult]
        if any(w % self.num_groups for w in widths):
            raise UserError(f"channel widths {widths} must be multiples of num_groups={self.num_groups}")
        if self.in_channels <= self.out_channels:
            raise UserError("in_channels must exceed out_channels: the rest are mask channels")

    @property
    def mask_channels(self) -> int:
        """Number of one-hot mask channels concatenated to the noisy image."""
        return self.in_channels - self.out_channels

    @property
    def voxels(self) -> int:
        """Voxels in one volume."""
        d, h, w = self.volume
        return d * h * w

    @classmethod
    def preset(cls, name: str) -> ModelConfig:
        """Return the named preset (``paper``, ``brats`` or ``tiny``)."""
        try:
            return PRESETS[name]
        except KeyError:
            raise UserError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None

    def replace(self, **changes: object) -> ModelConfig:
        """A copy with some fields changed (validated like a new config)."""
        return dataclasses.replace(self, **changes)


PRESETS: dict[str, ModelConfig] = {
    # Whole-head model of the ICPE paper's runs; the original's create_model(128, 64, 1)
    # with attention_resolutions="16", i.e. attention at 128/16 = 8x downsampling.
    "paper": ModelConfig(
        name="paper",
        volume=(128, 128, 128),
        in_channels=3,
        out_channels=1,
        model_channels=64,
        channel_mult=(1, 1, 2, 3, 4),
        num_res_blocks=1,
        attention_ds=(8,),
    ),
    # BraTS: four modalities generated together, conditioned on a four-channel mask.
    "brats": ModelConfig(
        name="brats",
        volume=(144, 192, 192),
        in_channels=8,
        out_channels=4,
        model_channels=64,
        channel_mult=(1, 1, 2, 3, 4),
        num_res_blocks=2,
        attention_ds=(),
    ),
    # Small enough for a CPU test run, yet with every block type present.
    "tiny": ModelConfig(
        name="tiny",
        volume=(16, 16, 16),
        in_channels=3,
        out_channels=1,
        model_channels=32,
        channel_mult=(1, 2),
        num_res_blocks=1,
        attention_ds=(2,),
    ),
}
