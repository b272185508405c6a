"""Shared fixtures for the package's CPU tests."""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from bench_fakes import FakeCampaign

from meddpm import ModelConfig
from meddpm.bench.cli import main as bench_main
from meddpm.suite.options import SuiteOptions

# The suite's training test, run in isolated pytest runs (pytester) by the plugin's own tests
SUITE_TRAINING = Path(__file__).resolve().parent.parent / "perf_tests" / "test_training.py"


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester folder holding the suite's training test and a conftest that loads the suite's plugin (a test
    may write its own conftest over it, with an injected clock)."""
    pytester.makeconftest('pytest_plugins = ["meddpm.suite.plugin"]')
    pytester.makepyfile(test_training=SUITE_TRAINING.read_text())
    return pytester


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


@pytest.fixture(autouse=True, scope="session")
def _compile_cache(tmp_path_factory):
    """The tests' compiled artifacts and workers' bytecode in a folder of their own, not the user's cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDDPM_COMPILE_CACHE", str(tmp_path_factory.mktemp("compile-cache")))
        yield


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


@pytest.fixture
def fake_bench(monkeypatch) -> Callable[..., int]:
    """``meddpm-bench --device cpu --combos baseline ARGS`` measuring with a FakeCampaign; returns the exit code."""
    monkeypatch.setattr("meddpm.bench.cli.Campaign", FakeCampaign)
    # The RAM estimate traces the model (a second or so); it has tests of its own.
    monkeypatch.setattr("meddpm.bench.host_ram.available_memory", lambda: None)
    return lambda *args: bench_main(["--device", "cpu", "--combos", "baseline", *args])


@pytest.fixture
def no_campaign(monkeypatch):
    """Fail the test if ``meddpm-bench`` gets as far as measuring."""

    def refuse(*_, **__):
        raise AssertionError("the command started measuring instead of refusing")

    monkeypatch.setattr("meddpm.bench.cli.Campaign", refuse)
