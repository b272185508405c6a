"""Real image/mask pairs from NIfTI files (needs the optional ``nifti`` extra: nibabel).

Normalisation follows the original: the volume is min-max scaled to [0, 1] and mapped to
[-1, 1]; mask labels are 0 background, 1 brain, 2 tumour. Arrays stored as (X, Y, Z) are
reordered to (Z, Y, X) = (D, H, W) like the original's transposes, then resized to the
preset's volume (trilinear for images, nearest for labels). An image and its mask must share
one voxel grid: the same shape and, within float noise, the same affine.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from meddpm.data.phantom import one_hot_mask
from meddpm.errors import UserError

# Affines agree when every entry differs by less than this (mm, or mm per voxel): NIfTI stores
# them as float32, so a file written and re-read, or by another tool, differs in the last digits.
AFFINE_TOLERANCE = 1e-4


def _nibabel():
    try:
        import nibabel
    except ImportError:
        raise UserError("reading NIfTI needs nibabel; install it with: pip install 'meddpm-perf[nifti]'") from None
    return nibabel


def _check_volume(volume: Sequence[int]) -> tuple[int, int, int]:
    """``volume`` as three sizes of at least 1, else a UserError (it would reach F.interpolate as a torch error)."""
    try:
        sizes = tuple(volume)
    except TypeError:  # None, a number: not a sequence of sizes at all
        sizes = ()
    if len(sizes) != 3 or not all(isinstance(n, int | np.integer) and n >= 1 for n in sizes):
        raise UserError(f"volume must be three sizes (D, H, W) of at least 1 voxel, e.g. (16, 16, 16); got {volume}")
    return sizes  # type: ignore[return-value]


def _check_label_count(name: str, value: int, meaning: str) -> int:
    """``value`` if it is a whole number of at least 1, else a UserError naming ``name`` and what it may be.

    Otherwise 0 or a negative count reached the label check, which then called the file's every label unexpected.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise UserError(
            f"{name} must be a whole number of at least 1 ({meaning}), e.g. 2 for brain and tumour; got {value!r}"
        )
    return int(value)


def _load_array(path: Path) -> torch.Tensor:
    """The volume at ``path`` as a float32 (D, H, W) tensor; every voxel is finite."""
    return _load(path)[0]


def _load(path: Path) -> tuple[torch.Tensor, np.ndarray]:
    """The volume at ``path`` as a float32 (D, H, W) tensor (every voxel finite), and its voxel-to-world affine."""
    nibabel = _nibabel()
    try:
        nifti = nibabel.load(str(path))
        data = nifti.get_fdata()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except Exception as exc:  # nibabel raises several types for unreadable files
        raise UserError(f"{path}: not a readable NIfTI file ({exc})") from None
    if data.ndim != 3:
        raise UserError(f"{path}: expected a 3-D volume, got shape {data.shape}")
    x = torch.from_numpy(data).float().permute(2, 1, 0)
    # Checked after the cast to float32, which is what gets normalised: one NaN would make the
    # min-max scaling give a constant volume, and a mask's NaN would become an arbitrary label.
    bad = int((~torch.isfinite(x)).sum())
    if bad:
        raise UserError(
            f"{path}: {bad} of {x.numel()} voxels are NaN or infinite; replace them with finite values in the file"
        )
    return x, np.asarray(nifti.affine, dtype=float)


def _grid(affine: np.ndarray) -> str:
    """An affine in words: orientation, voxel size and origin, as nibabel's helpers read it."""
    nibabel = _nibabel()
    codes = "".join(nibabel.orientations.aff2axcodes(affine))
    sizes = ", ".join(f"{v:g}" for v in nibabel.affines.voxel_sizes(affine))
    origin = ", ".join(f"{v:g}" for v in affine[:3, 3])
    return f"{codes} ({sizes}) mm at ({origin})"


def _file_shape(x: torch.Tensor) -> tuple[int, ...]:
    """The shape of a loaded volume as the file stores it, (X, Y, Z)."""
    return tuple(reversed(x.shape))


def _to_image(x: torch.Tensor, volume: tuple[int, int, int]) -> torch.Tensor:
    lo, hi = x.min(), x.max()
    x = (x - lo) / (hi - lo) if hi > lo else torch.zeros_like(x)
    x = F.interpolate(x[None, None], size=volume, mode="trilinear", align_corners=False)[0]
    return x * 2 - 1


def _to_labels(x: torch.Tensor, path: Path, volume: tuple[int, int, int], num_labels: int) -> torch.Tensor:
    # A fractional label is a mask resampled with interpolation: rounding would move its borders.
    fractional = (x - x.round()).abs() > 1e-3
    if fractional.any():
        example = x[fractional][0].item()
        raise UserError(
            f"{path}: {int(fractional.sum())} of {x.numel()} voxels hold fractional labels (e.g. {example:g}); "
            f"a mask holds whole labels 0..{num_labels}: resample it with nearest-neighbour interpolation"
        )
    x = x.round().long()
    bad = sorted(set(x.unique().tolist()) - set(range(num_labels + 1)))
    if bad:
        raise UserError(
            f"{path}: unexpected mask labels {bad}; expected 0..{num_labels} (0 background, 1 brain, 2 tumour)"
        )
    if not x.any():
        raise UserError(f"{path}: every voxel is 0 (background); a mask needs brain or tumour labels: check the file")
    x = F.interpolate(x[None, None].float(), size=volume, mode="nearest")[0, 0]
    return x.long()


def load_image(path: str | Path, volume: tuple[int, int, int]) -> torch.Tensor:
    """An image volume (1, D, H, W) in [-1, 1], resized to ``volume``."""
    volume = _check_volume(volume)
    return _to_image(_load_array(Path(path)), volume)


def load_labels(path: str | Path, volume: tuple[int, int, int], num_labels: int = 2) -> torch.Tensor:
    """A label map (D, H, W) with values 0..num_labels, resized to ``volume``."""
    path, volume = Path(path), _check_volume(volume)
    num_labels = _check_label_count("num_labels", num_labels, "the highest label; 0 is background")
    return _to_labels(_load_array(path), path, volume, num_labels)


def load_pair(
    image_path: str | Path, mask_path: str | Path, volume: tuple[int, int, int], mask_channels: int = 2
) -> tuple[torch.Tensor, torch.Tensor]:
    """An image (1, D, H, W) and its one-hot mask (mask_channels, D, H, W), both in [-1, 1].

    The two files must hold volumes on the same grid (shape and affine): a mask is only meaningful
    voxel for voxel.
    """
    image_path, mask_path, volume = Path(image_path), Path(mask_path), _check_volume(volume)
    mask_channels = _check_label_count("mask_channels", mask_channels, "one channel for each label 1..mask_channels")
    (image, image_affine), (labels, mask_affine) = _load(image_path), _load(mask_path)
    # Compared before resizing, which would make any two shapes agree and misalign the mask.
    if image.shape != labels.shape:
        raise UserError(
            f"image {image_path} has shape {_file_shape(image)} but mask {mask_path} has shape "
            f"{_file_shape(labels)}; resample them onto the same grid"
        )
    # Same shape yet another affine (flipped, other voxel size, shifted): voxel i of one is not voxel i of the other.
    if not np.allclose(image_affine, mask_affine, rtol=0, atol=AFFINE_TOLERANCE):
        raise UserError(
            f"image {image_path} lies on {_grid(image_affine)} but mask {mask_path} on {_grid(mask_affine)}; "
            "resample the mask onto the image's grid"
        )
    mask = one_hot_mask(_to_labels(labels, mask_path, volume, mask_channels), mask_channels)
    return _to_image(image, volume), mask
