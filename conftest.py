"""Root conftest: GPU-only tests skip, with the reason, where no CUDA GPU is visible."""

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is visible to PyTorch on this machine")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
