"""Architecture keys from real GPU names and compute capabilities; the peak table."""

import pytest

from meddpm.errors import UserError
from meddpm.judge.arch import KNOWN_ARCHS, PEAKS, arch_from_gpu, validate_arch


@pytest.mark.parametrize(
    "name, cc, arch",
    [
        ("Tesla V100-SXM2-32GB", (7, 0), "v100"),
        ("Tesla V100-PCIE-16GB", (7, 0), "v100"),
        ("NVIDIA A100-SXM4-80GB", (8, 0), "a100"),
        ("NVIDIA A100 80GB PCIe", (8, 0), "a100"),
        ("NVIDIA A100-PCIE-40GB", (8, 0), "a100"),
        ("NVIDIA H100 80GB HBM3", (9, 0), "h100"),
        ("NVIDIA H100 PCIe", (9, 0), "h100"),
        ("NVIDIA H100 NVL", (9, 0), "h100"),
        ("NVIDIA H200", (9, 0), "h200"),
        ("NVIDIA H200 NVL", (9, 0), "h200"),
        ("NVIDIA GH200 480GB", (9, 0), "gh200_480gb"),  # an H100-class GPU, kept apart
        ("NVIDIA L40S", (8, 9), "l40s"),
        ("NVIDIA A800 80GB PCIe", (8, 0), "a800_80gb_pcie"),
    ],
)
def test_real_gpu_names_map_to_baseline_keys(name, cc, arch):
    assert arch_from_gpu(name, cc) == arch


def test_forced_arch_names_are_checked():
    assert validate_arch("h100") == "h100" and validate_arch("l40s") == "l40s"
    with pytest.raises(UserError, match=r"--arch 'H100!' is not a valid architecture key"):
        validate_arch("H100!")


def test_every_known_arch_has_peaks_with_a_source():
    assert set(PEAKS) == set(KNOWN_ARCHS)
    assert PEAKS["v100"].for_precision("tf32") is None and PEAKS["v100"].for_precision("bf16") is None
    assert PEAKS["a100"].for_precision("bf16") == 2 * PEAKS["a100"].for_precision("tf32")
    assert all(p.source for p in PEAKS.values())
