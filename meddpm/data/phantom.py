"""Deterministic synthetic head phantoms, so everything runs with no downloaded data.

A phantom is an ellipsoidal head (scalp and skull shell), a brain inside it with a smooth
cortical texture and darker ventricles, and a spherical tumour in the brain. The mask's
labels follow the original: 0 background, 1 brain, 2 tumour; the model sees them as
one-hot channels (brain, tumour, ...).
"""

from __future__ import annotations

import math

import torch


def _grid(volume: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    axes = [torch.linspace(-1.0, 1.0, n) for n in volume]
    return torch.meshgrid(*axes, indexing="ij")


def phantom_labels(volume: tuple[int, int, int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """An image in [-1, 1] of shape (D, H, W) and its label map (0 bg, 1 brain, 2 tumour)."""
    g = torch.Generator().manual_seed(seed)
    z, y, x = _grid(volume)

    def rand(lo: float, hi: float) -> float:
        return lo + (hi - lo) * torch.rand((), generator=g).item()

    head_r = (rand(0.85, 0.95), rand(0.8, 0.9), rand(0.7, 0.8))
    head = (z / head_r[0]) ** 2 + (y / head_r[1]) ** 2 + (x / head_r[2]) ** 2
    brain = (z / (0.8 * head_r[0])) ** 2 + (y / (0.8 * head_r[1])) ** 2 + (x / (0.8 * head_r[2])) ** 2
    ventricles = ((z / 0.25) ** 2 + (y / 0.12) ** 2 + (x / 0.3) ** 2) <= 1.0

    centre = (rand(-0.3, 0.3), rand(-0.3, 0.3), rand(-0.3, 0.3))
    radius = rand(0.1, 0.2)
    tumour = ((z - centre[0]) ** 2 + (y - centre[1]) ** 2 + (x - centre[2]) ** 2) <= radius**2

    f = rand(4.0, 8.0)
    texture = 0.1 * torch.sin(f * math.pi * x) * torch.cos(f * math.pi * y) * torch.sin(f * math.pi * z)

    image = torch.zeros(volume)
    image[head <= 1.0] = 0.35  # scalp
    image[(head <= 0.9) & (brain > 1.0)] = 0.1  # skull
    in_brain = brain <= 1.0
    image[in_brain] = 0.6 + texture[in_brain]
    image[in_brain & ventricles] = 0.25
    image[in_brain & tumour] = 0.9

    labels = torch.zeros(volume, dtype=torch.long)
    labels[in_brain] = 1
    labels[in_brain & tumour] = 2
    return image * 2 - 1, labels


def one_hot_mask(labels: torch.Tensor, channels: int) -> torch.Tensor:
    """Labels 1..channels as one-hot channels (C, D, H, W) in [-1, 1]; background is all -1.

    The original maps masks like images, from [0, 1] to [-1, 1].
    """
    onehot = torch.stack([(labels == k + 1) for k in range(channels)]).float()
    return onehot * 2 - 1


def phantom_batch(
    volume: tuple[int, int, int],
    batch_size: int,
    image_channels: int,
    mask_channels: int,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of phantoms: images (B, image_channels, ...) and masks (B, mask_channels, ...).

    Extra image channels (e.g. BraTS' four modalities) are contrast variants of the first.
    """
    images, masks = [], []
    for i in range(batch_size):
        image, labels = phantom_labels(volume, seed=seed + i)
        contrasts = [image * (1 - 0.15 * c) for c in range(image_channels)]
        images.append(torch.stack(contrasts))
        masks.append(one_hot_mask(labels, mask_channels))
    return torch.stack(images), torch.stack(masks)
