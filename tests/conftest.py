"""Shared fixtures for the package's CPU tests."""

import pytest
import torch

from meddpm import ModelConfig
from meddpm.suite.options import SuiteOptions


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


@pytest.fixture
def suite_options(tmp_path):
    """A factory of suite options with the defaults, baselines and results under ``tmp_path``."""

    def make(**overrides) -> SuiteOptions:
        defaults = dict(
            save_baseline=False,
            force_save=False,
            baseline_dir=tmp_path,
            arch=None,
            preset=None,
            combos=None,
            batch_size=1,
            warmup=None,
            min_rounds=5,
            max_rounds=None,
            rel_iqr=None,
            budget_s=None,
            benchmark_rounds=1,
            results_dir=tmp_path / "results",
        )
        return SuiteOptions(**{**defaults, **overrides})

    return make
