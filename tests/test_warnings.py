"""Warnings a user of the suite should not have to read in every run."""

from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_torch_compile_deprecation_noise_is_filtered(pytester: pytest.Pytester):
    # torch.compile imports torch.utils.mkldnn, whose classes still use torch.jit.script_method:
    # 14 DeprecationWarnings in the summary of every run that compiled a combo.
    pytester.makepyprojecttoml(PYPROJECT.read_text())  # the project's own warning filters
    pytester.makepyfile(
        test_compile_import="""
import importlib
import sys


def test_imports_what_torch_compile_imports():
    sys.modules.pop("torch.utils.mkldnn", None)
    importlib.import_module("torch.utils.mkldnn")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_compile_import.py")
    result.assert_outcomes(passed=1)
    assert "script_method" not in result.stdout.str()
