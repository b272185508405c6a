"""Synthetic phantoms and the NIfTI loader."""

import re

import numpy as np
import pytest
import torch

from meddpm import UserError
from meddpm.data import one_hot_mask, phantom_batch, phantom_labels


def test_phantom_is_deterministic_and_in_range():
    a_img, a_lab = phantom_labels((24, 24, 24), seed=7)
    b_img, b_lab = phantom_labels((24, 24, 24), seed=7)
    assert torch.equal(a_img, b_img) and torch.equal(a_lab, b_lab)
    assert a_img.min() >= -1 and a_img.max() <= 1
    assert set(a_lab.unique().tolist()) == {0, 1, 2}  # background, brain and tumour all present
    other, _ = phantom_labels((24, 24, 24), seed=8)
    assert not torch.equal(a_img, other)


def test_one_hot_mask_channels():
    labels = torch.tensor([[[0, 1, 2]]])
    mask = one_hot_mask(labels, 2)
    assert mask.shape == (2, 1, 1, 3)
    assert mask[:, 0, 0, 0].tolist() == [-1, -1]  # background
    assert mask[:, 0, 0, 1].tolist() == [1, -1]  # brain
    assert mask[:, 0, 0, 2].tolist() == [-1, 1]  # tumour


def test_phantom_batch_shapes():
    images, masks = phantom_batch((16, 16, 16), batch_size=2, image_channels=4, mask_channels=4)
    assert images.shape == (2, 4, 16, 16, 16) and masks.shape == (2, 4, 16, 16, 16)


nibabel = pytest.importorskip("nibabel", reason="the NIfTI extra (nibabel) is not installed")


def _write(path, array):
    nibabel.save(nibabel.Nifti1Image(array, affine=np.eye(4)), str(path))


def test_nifti_round_trip(tmp_path):
    from meddpm.data.nifti import load_pair

    image, labels = phantom_labels((20, 24, 28), seed=1)
    # Store as (X, Y, Z) with raw scanner-like intensities, as real files are.
    raw = ((image + 1) * 500 + 100).permute(2, 1, 0).numpy().astype(np.float32)
    _write(tmp_path / "img.nii.gz", raw)
    _write(tmp_path / "msk.nii.gz", labels.permute(2, 1, 0).numpy().astype(np.uint8))

    img, mask = load_pair(tmp_path / "img.nii.gz", tmp_path / "msk.nii.gz", volume=(20, 24, 28))
    assert img.shape == (1, 20, 24, 28) and mask.shape == (2, 20, 24, 28)
    assert img.min().item() == pytest.approx(-1) and img.max().item() == pytest.approx(1)
    # Same volume size: min-max scaling recovers the phantom, and the labels survive.
    torch.testing.assert_close(img[0], (image - image.min()) / (image.max() - image.min()) * 2 - 1)
    assert torch.equal(mask, one_hot_mask(labels, 2))

    img, mask = load_pair(tmp_path / "img.nii.gz", tmp_path / "msk.nii.gz", volume=(8, 8, 8))
    assert img.shape == (1, 8, 8, 8) and set(mask.unique().tolist()) <= {-1.0, 1.0}


def test_nifti_bad_inputs_are_one_line_errors(tmp_path):
    from meddpm.data.nifti import load_image, load_labels

    with pytest.raises(UserError, match="no such file"):
        load_image(tmp_path / "missing.nii.gz", (8, 8, 8))
    _write(tmp_path / "bad.nii.gz", np.full((4, 4, 4), 7, dtype=np.uint8))
    with pytest.raises(UserError, match=r"unexpected mask labels \[7\]"):
        load_labels(tmp_path / "bad.nii.gz", (4, 4, 4))
    (tmp_path / "junk.nii.gz").write_bytes(b"not a nifti")
    with pytest.raises(UserError, match="not a readable NIfTI file"):
        load_image(tmp_path / "junk.nii.gz", (4, 4, 4))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nifti_non_finite_voxels_are_refused(tmp_path, bad):
    from meddpm.data.nifti import load_image, load_labels

    array = np.linspace(0, 1, 4 * 4 * 4, dtype=np.float32).reshape(4, 4, 4)
    array[1, 2, 3] = array[0, 0, 0] = bad
    _write(tmp_path / "img.nii.gz", array)
    with pytest.raises(UserError, match=r"img\.nii\.gz: 2 of 64 voxels are NaN or infinite") as info:
        load_image(tmp_path / "img.nii.gz", (4, 4, 4))
    assert "\n" not in str(info.value)

    labels = np.zeros((4, 4, 4), dtype=np.float32)
    labels[2, 2, 2] = bad
    _write(tmp_path / "msk.nii.gz", labels)
    with pytest.raises(UserError, match=r"msk\.nii\.gz: 1 of 64 voxels are NaN or infinite"):
        load_labels(tmp_path / "msk.nii.gz", (4, 4, 4))


def test_nifti_pair_with_different_shapes_is_refused(tmp_path):
    from meddpm.data.nifti import load_pair

    # Both would resize to the same volume: the mismatch must be caught before that.
    _write(tmp_path / "img.nii.gz", np.linspace(0, 1, 8 * 8 * 6, dtype=np.float32).reshape(8, 8, 6))
    _write(tmp_path / "msk.nii.gz", np.ones((8, 8, 8), dtype=np.uint8))
    with pytest.raises(UserError) as info:
        load_pair(tmp_path / "img.nii.gz", tmp_path / "msk.nii.gz", volume=(8, 8, 8))
    message = str(info.value)
    assert "\n" not in message
    assert str(tmp_path / "img.nii.gz") in message and str(tmp_path / "msk.nii.gz") in message
    assert "(8, 8, 6)" in message and "(8, 8, 8)" in message


def _pair(tmp_path, mask_affine, labels=None):
    image = np.linspace(0, 1, 8 * 8 * 8, dtype=np.float32).reshape(8, 8, 8)
    if labels is None:
        labels = np.zeros((8, 8, 8), dtype=np.uint8)
        labels[2:6, 2:6, 2:6] = 1
    nibabel.save(nibabel.Nifti1Image(image, np.eye(4)), str(tmp_path / "img.nii.gz"))
    nibabel.save(nibabel.Nifti1Image(labels, mask_affine), str(tmp_path / "msk.nii.gz"))
    return tmp_path / "img.nii.gz", tmp_path / "msk.nii.gz"


@pytest.mark.parametrize(
    "affine, words",
    [
        (np.diag([-1.0, 1.0, 1.0, 1.0]), "LAS (1, 1, 1) mm"),  # flipped left-right
        (np.diag([2.0, 2.0, 2.0, 1.0]), "RAS (2, 2, 2) mm"),  # 2 mm voxels
    ],
)
def test_nifti_pair_on_another_grid_is_refused(tmp_path, affine, words):
    from meddpm.data.nifti import load_pair

    image, mask = _pair(tmp_path, affine)
    with pytest.raises(UserError) as info:
        load_pair(image, mask, volume=(8, 8, 8))
    message = str(info.value)
    assert "\n" not in message and str(image) in message and str(mask) in message
    assert "RAS (1, 1, 1) mm" in message and words in message and "resample the mask onto the image's grid" in message


def test_nifti_affines_agree_within_float_noise(tmp_path):
    from meddpm.data.nifti import load_pair

    noisy = np.eye(4)
    noisy[:3, :3] += 1e-6
    noisy[:3, 3] = [1e-5, -1e-5, 0.0]
    _, mask = load_pair(*_pair(tmp_path, noisy), volume=(8, 8, 8))
    assert mask.shape == (2, 8, 8, 8)


def test_nifti_empty_and_fractional_masks_are_refused(tmp_path):
    from meddpm.data.nifti import load_labels, load_pair

    with pytest.raises(UserError, match=r"msk\.nii\.gz: every voxel is 0 \(background\); a mask needs brain or"):
        load_pair(*_pair(tmp_path, np.eye(4), np.zeros((8, 8, 8), dtype=np.uint8)), volume=(8, 8, 8))
    blurred = np.zeros((8, 8, 8), dtype=np.float32)
    blurred[2:6, 2:6, 2:6] = 1
    blurred[2, 2, 2] = 0.5  # a mask resampled with linear interpolation
    _write(tmp_path / "blur.nii.gz", blurred)
    with pytest.raises(UserError, match=r"blur\.nii\.gz: 1 of 512 voxels hold fractional labels \(e\.g\. 0\.5\)"):
        load_labels(tmp_path / "blur.nii.gz", (8, 8, 8))


@pytest.mark.parametrize("volume", [(0, 16, 16), (16, 16), (16, 16, 16, 16), (-1, 8, 8), None, 16])
def test_nifti_bad_volume_is_a_one_line_error(tmp_path, volume):
    from meddpm.data.nifti import load_image, load_labels, load_pair

    image, mask = _pair(tmp_path, np.eye(4))
    for load in (lambda: load_image(image, volume), lambda: load_labels(mask, volume)):
        with pytest.raises(UserError, match=r"volume must be three sizes \(D, H, W\) of at least 1 voxel"):
            load()
    with pytest.raises(UserError, match=r"volume must be three sizes"):
        load_pair(image, mask, volume)


@pytest.mark.parametrize("count", [-1, 0, 1.5, True, "2"])
def test_nifti_bad_label_counts_name_the_argument(tmp_path, count):
    # 0 or -1 labels reached the label check, which then called every label in the file unexpected.
    from meddpm.data.nifti import load_labels, load_pair

    image, mask = _pair(tmp_path, np.eye(4))
    for load, name in (
        (lambda: load_labels(mask, (8, 8, 8), num_labels=count), "num_labels"),
        (lambda: load_pair(image, mask, (8, 8, 8), mask_channels=count), "mask_channels"),
    ):
        words = rf"^{name} must be a whole number of at least 1 \(.*\), e\.g\. 2 for brain and tumour; got "
        with pytest.raises(UserError, match=words + re.escape(repr(count)) + "$") as err:
            load()
        assert "\n" not in str(err.value)
