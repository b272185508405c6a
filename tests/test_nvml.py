"""NVML: clock-event reasons by name, no GPU on the CPU, the instant power field."""

from types import SimpleNamespace

import torch

from meddpm.measure.machine.nvml import Gpu, decode_clock_event_reasons, open_gpu


def test_clock_event_reasons_are_named():
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x1 | 0x4 | 0x40) == ("GpuIdle", "SwPowerCap", "HwThermalSlowdown")
    assert decode_clock_event_reasons(0x10000000) == ("0x10000000",)


def test_no_nvml_on_the_cpu():
    gpu, reason = open_gpu(torch.device("cpu"))
    assert gpu is None and reason == "not a CUDA device"


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
