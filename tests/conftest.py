"""Shared fixtures for the package's CPU tests."""

import pytest
import torch

from meddpm import ModelConfig


@pytest.fixture
def tiny() -> ModelConfig:
    """The tiny preset (16^3, two levels, attention at 2x downsampling)."""
    return ModelConfig.preset("tiny")


@pytest.fixture
def micro() -> ModelConfig:
    """Smaller still, for CPU paths that are slow (bf16 autocast of conv3d)."""
    return ModelConfig.preset("tiny").replace(name="micro", volume=(8, 8, 8))


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
