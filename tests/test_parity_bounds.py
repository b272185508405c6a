"""The parity bounds file: read with one-line errors, and shipped inside the package."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from meddpm.errors import UserError
from meddpm.parity.bounds import BOUNDS_FILE, BOUNDS_SCHEMA, load_bounds

ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_bounds_load_and_live_inside_the_package():
    assert BOUNDS_FILE.parent == ROOT / "meddpm" / "parity"
    pairs = load_bounds()
    assert "cpu:bf16~fp32" in pairs and "cuda:bf16~fp32" in pairs


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not JSON"),
        ('{"schema": "other/1", "pairs": {}}', "not a parity bounds file \\(schema 'other/1'"),
        ("[]", "the JSON is not an object"),
        ('{"schema": "meddpm-parity-bounds/2", "pairs": {}}', "which this meddpm-perf cannot read"),
        ('{"schema": "meddpm-parity-bounds/1", "pairs": []}', 'no "pairs" object of bounds'),
    ],
)
def test_a_bad_bounds_file_is_one_line(tmp_path, text, problem):
    path = tmp_path / "bounds.json"
    path.write_text(text)
    with pytest.raises(UserError, match=problem):
        load_bounds(path)
    with pytest.raises(UserError, match="no parity bounds yet; run python -m meddpm.parity calibrate"):
        load_bounds(tmp_path / "missing.json")


def test_a_wheel_of_the_package_carries_the_bounds(tmp_path):
    """A non-editable install reads the bounds from the package, not from a checkout's perf_tests/."""
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if build.returncode != 0 and "No matching distribution" in build.stderr:
        pytest.skip(f"pip could not fetch the build backend: {build.stderr.strip().splitlines()[-1]}")
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("meddpm_perf-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = json.loads(archive.read("meddpm/parity/bounds.json"))
    assert shipped["schema"] == BOUNDS_SCHEMA
