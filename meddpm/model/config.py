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
    With L levels (``len(channel_mult)``) the factors are 1, 2, ..., 2**(L-1); others are
    refused, as the U-Net would never use them. Impossible values raise :class:`UserError`.
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
        # Basic ranges first, so that the shape checks below never divide by zero or
        # report a consequence instead of the cause.
        if len(self.volume) != 3 or any(side < 1 for side in self.volume):
            raise UserError(f"volume {self.volume} must have three positive sides (D, H, W), e.g. (16, 16, 16)")
        if not self.channel_mult:
            raise UserError("channel_mult is empty; give one width multiplier per U-Net level, e.g. (1, 2)")
        if any(m < 1 for m in self.channel_mult):
            raise UserError(
                f"channel_mult {self.channel_mult} has multipliers below 1; each level is model_channels "
                "times its multiplier wide, so use 1 or more"
            )
        if self.model_channels < 1:
            raise UserError(f"model_channels={self.model_channels} must be positive, e.g. 32")
        if self.model_channels % 2:
            raise UserError(
                f"model_channels={self.model_channels} must be even: the timestep embedding is "
                "its cosine and sine halves"
            )
        if self.num_groups < 1:
            raise UserError(f"num_groups={self.num_groups} must be positive, e.g. 32 (GroupNorm's number of groups)")
        if self.num_res_blocks < 0:
            raise UserError(f"num_res_blocks={self.num_res_blocks} must be 0 or more (residual blocks per level)")
        if self.out_channels < 1:
            raise UserError(f"out_channels={self.out_channels} must be at least 1 (the image channels generated)")
        if self.in_channels <= self.out_channels:
            raise UserError("in_channels must exceed out_channels: the rest are mask channels")
        if self.timesteps < 1:
            raise UserError(f"timesteps={self.timesteps} must be at least 1 (the diffusion's noise levels)")
        if not 0 <= self.dropout < 1:  # written so that NaN fails too
            raise UserError(f"dropout={self.dropout} must be in [0, 1): it is the chance of zeroing an activation")
        # The U-Net only tests ``ds in attention_ds`` at the factors it reaches, so any other
        # factor would be silently ignored.
        reached = [2**level for level in range(len(self.channel_mult))]
        unreached = [f for f in self.attention_ds if f not in reached]
        if unreached:
            raise UserError(
                f"attention_ds {self.attention_ds} has factors {unreached} the U-Net never reaches; "
                f"with {len(reached)} levels choose from {', '.join(map(str, reached))}"
            )
        factor = reached[-1]
        if any(side % factor for side in self.volume):
            raise UserError(
                f"volume {self.volume} is not divisible by {factor}, the U-Net's total "
                f"downsampling for {len(self.channel_mult)} levels; choose sides that are"
            )
        widths = [self.model_channels * m for m in self.channel_mult]
        if any(w % self.num_groups for w in widths):
            raise UserError(f"channel widths {widths} must be multiples of num_groups={self.num_groups}")

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
