"""Measuring helpers: statistics, timing, NVML decoding and atomic result files."""

import json
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from meddpm.atomic import write_json_atomic
from meddpm.measure.machine.environment import git_commit
from meddpm.measure.machine.nvml import Gpu, decode_clock_event_reasons, open_gpu
from meddpm.measure.machine.timing import time_synchronized
from meddpm.measure.statistics.descriptive import Stats, median_rel_se


def test_stats_of_samples():
    s = Stats.from_samples([10, 11, 12, 13, 100])
    assert (s.median, s.min, s.max, s.rounds) == (12, 10, 100, 5)
    assert (s.q1, s.q3, s.iqr) == (11, 13, 2)
    assert s.rel_iqr == pytest.approx(2 / 12)
    assert s.as_dict()["iqr"] == 2
    with pytest.raises(ValueError):
        Stats.from_samples([])


@pytest.mark.parametrize("r", [0.0, 0.6])
def test_the_medians_standard_error_matches_the_spread_of_medians(r):
    # 300 series of 400 rounds, 1 % noise, each round carrying r of the last one's deviation (AR(1);
    # `fast` on an H200 has r = 0.5-0.6): the estimate from one series is what the medians of many
    # independent series actually spread by. Counting correlated rounds as independent would be
    # half that at r = 0.6.
    rng = np.random.default_rng(1)
    series = np.empty((300, 400))
    series[:, 0] = rng.standard_normal(300)
    for i in range(1, 400):
        series[:, i] = r * series[:, i - 1] + np.sqrt(1 - r * r) * rng.standard_normal(300)
    rounds = 100 * (1 + 0.01 * series)
    actual = np.std(np.median(rounds, axis=1)) / 100
    estimates = [median_rel_se(s) for s in rounds]
    assert np.median(estimates) == pytest.approx(actual, rel=0.2)


def test_the_medians_standard_error_needs_three_rounds():
    assert median_rel_se([1.0, 2.0]) == float("inf") and median_rel_se([5.0] * 10) == 0.0


def test_cpu_timing_runs_the_sampler_after_the_call():
    calls = []
    elapsed = time_synchronized(lambda: calls.append("step"), torch.device("cpu"), during=lambda: calls.append("nvml"))
    assert calls == ["step", "nvml"] and elapsed >= 0


def test_clock_event_reasons_are_named():
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x1 | 0x4 | 0x40) == ("GpuIdle", "SwPowerCap", "HwThermalSlowdown")
    assert decode_clock_event_reasons(0x10000000) == ("0x10000000",)


def test_no_nvml_on_the_cpu():
    gpu, reason = open_gpu(torch.device("cpu"))
    assert gpu is None and reason == "not a CUDA device"


def test_json_written_whole_or_not_at_all(tmp_path):
    path = tmp_path / "out" / "r.json"
    write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}

    class Unserialisable:
        def __str__(self):
            raise RuntimeError("crash while writing")

    with pytest.raises(RuntimeError, match="crash while writing"):
        write_json_atomic(path, {"a": 2, "b": Unserialisable()})
    assert json.loads(path.read_text()) == {"a": 1}  # the old file is intact
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary left behind


def test_the_recorded_commit_says_when_the_code_differs_from_it(tmp_path, monkeypatch):
    monkeypatch.delenv("MEDDPM_COMMIT", raising=False)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f.py").write_text("a = 1\n")
    subprocess.run([*git, "add", "f.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert git_commit(tmp_path) == head
    (tmp_path / "f.py").write_text("a = 2\n")
    assert git_commit(tmp_path) == f"{head}+dirty"
    assert git_commit(tmp_path / "missing") == "unknown"


class FakeNvml:
    """The few pynvml names Gpu.instant_power_w reads, answering with ``ret`` and 412.5 W."""

    NVMLError = RuntimeError
    NVML_SUCCESS = 0
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_VALUE_TYPE_DOUBLE, NVML_VALUE_TYPE_UNSIGNED_INT, NVML_VALUE_TYPE_UNSIGNED_LONG = 0, 1, 2
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, NVML_VALUE_TYPE_SIGNED_LONG_LONG = 3, 4
    NVML_VALUE_TYPE_SIGNED_INT, NVML_VALUE_TYPE_UNSIGNED_SHORT = 5, 7

    def __init__(self, ret: int):
        self.ret, self.calls = ret, 0

    def nvmlDeviceGetFieldValues(self, handle, fields):
        self.calls += 1
        assert fields == [186]
        return [SimpleNamespace(nvmlReturn=self.ret, valueType=1, value=SimpleNamespace(uiVal=412_500))]


def test_instant_power_comes_from_the_field_and_is_not_asked_again_where_missing():
    assert Gpu(FakeNvml(ret=0), handle=None).instant_power_w() == 412.5
    missing = FakeNvml(ret=3)  # NVML_ERROR_NOT_SUPPORTED
    gpu = Gpu(missing, handle=None)
    assert gpu.instant_power_w() is None and gpu.instant_power_w() is None and missing.calls == 1
