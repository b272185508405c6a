"""Real image/mask pairs from NIfTI files (needs the optional ``nifti`` extra: nibabel).

Normalisation follows the original: the volume is min-max scaled to [0, 1] and mapped to
[-1, 1]; mask labels are 0 background, 1 brain, 2 tumour. Arrays stored as (X, Y, Z) are
reordered to (Z, Y, X) = (D, H, W) like the original's transposes, then resized to the
preset's volume (trilinear for images, nearest for labels).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from meddpm.data.phantom import one_hot_mask
from meddpm.errors import UserError


def _load_array(path: Path) -> torch.Tensor:
    try:
        import nibabel
    except ImportError:
        raise UserError("reading NIfTI needs nibabel; install it with: pip install 'meddpm-perf[nifti]'") from None
    try:
        data = nibabel.load(str(path)).get_fdata()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except Exception as exc:  # nibabel raises several types for unreadable files
        raise UserError(f"{path}: not a readable NIfTI file ({exc})") from None
    if data.ndim != 3:
        raise UserError(f"{path}: expected a 3-D volume, got shape {data.shape}")
    return torch.from_numpy(data).float().permute(2, 1, 0)


def load_image(path: str | Path, volume: tuple[int, int, int]) -> torch.Tensor:
    """An image volume (1, D, H, W) in [-1, 1], resized to ``volume``."""
    x = _load_array(Path(path))
    lo, hi = x.min(), x.max()
    x = (x - lo) / (hi - lo) if hi > lo else torch.zeros_like(x)
    x = F.interpolate(x[None, None], size=volume, mode="trilinear", align_corners=False)[0]
    return x * 2 - 1


def load_labels(path: str | Path, volume: tuple[int, int, int], num_labels: int = 2) -> torch.Tensor:
    """A label map (D, H, W) with values 0..num_labels, resized to ``volume``."""
    path = Path(path)
    x = _load_array(path).round().long()
    bad = sorted(set(x.unique().tolist()) - set(range(num_labels + 1)))
    if bad:
        raise UserError(
            f"{path}: unexpected mask labels {bad}; expected 0..{num_labels} (0 background, 1 brain, 2 tumour)"
        )
    x = F.interpolate(x[None, None].float(), size=volume, mode="nearest")[0, 0]
    return x.long()


def load_pair(
    image_path: str | Path, mask_path: str | Path, volume: tuple[int, int, int], mask_channels: int = 2
) -> tuple[torch.Tensor, torch.Tensor]:
    """An image (1, D, H, W) and its one-hot mask (mask_channels, D, H, W), both in [-1, 1]."""
    image = load_image(image_path, volume)
    mask = one_hot_mask(load_labels(mask_path, volume, num_labels=mask_channels), mask_channels)
    return image, mask
