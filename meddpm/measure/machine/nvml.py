"""NVML readings for the GPU a torch device runs on: energy counter and card state.

NVML (nvidia-ml-py) is optional: where it is missing or unsupported, :func:`open_gpu`
returns None and a reason, and callers report energy as unavailable instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class GpuState:
    """A snapshot of the card's condition, recorded beside every measurement."""

    name: str
    driver: str
    sm_clock_mhz: int
    sm_clock_max_mhz: int
    mem_clock_mhz: int
    temperature_c: int
    power_w: float
    power_limit_w: float
    gpu_utilization_pct: int
    clock_event_reasons: tuple[str, ...]

    @property
    def throttle_reasons(self) -> tuple[str, ...]:
        """The clock-event reasons that mean the card ran slower than it could (power, heat)."""
        return tuple(r for r in self.clock_event_reasons if r in THROTTLE_REASONS)


# Reasons that lower clocks against the workload's will. The others NVML reports
# (GpuIdle, ApplicationsClocksSetting, SyncBoost, DisplayClockSetting) are benign.
THROTTLE_REASONS = frozenset(
    {"SwPowerCap", "HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown"}
)


def _clock_event_reason_bits() -> dict[int, str]:
    """NVML's clock-event (formerly "throttle") reason bits, named from pynvml's constants."""
    import pynvml

    prefix = "nvmlClocksEventReason"
    bits = {}
    for attr in dir(pynvml):
        if attr.startswith(prefix) and attr not in (prefix + "All", prefix + "None"):
            bits.setdefault(int(getattr(pynvml, attr)), attr[len(prefix) :])
    return bits


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Names of the reason bits set in an NVML clock-event mask (unknown bits in hex)."""
    bits = _clock_event_reason_bits()
    names = [name for bit, name in sorted(bits.items()) if mask & bit]
    unknown = mask & ~sum(bits)
    if unknown:
        names.append(hex(unknown))
    return tuple(names)


class Gpu:
    """An NVML handle for one torch CUDA device."""

    def __init__(self, nvml: Any, handle: Any):
        self._nvml = nvml
        self._handle = handle
        self._instant_power = True  # until the card says it has no such field: then never asked again

    def energy_mj(self) -> int | None:
        """The card's total-energy counter in millijoules, or None if unsupported."""
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except self._nvml.NVMLError:
            return None

    def instant_power_w(self) -> float | None:
        """Instant board power in watts (NVML's field value), or None where the card does not report it.

        nvmlDeviceGetPowerUsage averages over one second on Ampere and newer (NVML's docs), far
        too slow to follow a 50 ms iteration; the instant field is what a power trace needs.
        """
        n = self._nvml
        if self._instant_power:
            try:
                (value,) = n.nvmlDeviceGetFieldValues(self._handle, [n.NVML_FI_DEV_POWER_INSTANT])
                self._instant_power = value.nvmlReturn == n.NVML_SUCCESS
            except (n.NVMLError, AttributeError):  # an old driver, or an nvidia-ml-py without the field
                self._instant_power = False
        return _field_number(n, value) / 1000.0 if self._instant_power else None

    def sm_clock_mhz(self) -> int | None:
        """The current SM clock in MHz, or None if unsupported."""
        try:
            return int(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
        except self._nvml.NVMLError:
            return None

    def temperature_c(self) -> int:
        """The GPU die temperature in °C (NVML reads whole degrees)."""
        return int(self._nvml.nvmlDeviceGetTemperature(self._handle, self._nvml.NVML_TEMPERATURE_GPU))

    def state(self) -> GpuState:
        """Current clocks, temperature, power and clock-event reasons."""
        n, h = self._nvml, self._handle
        get_reasons = (
            getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        name = n.nvmlDeviceGetName(h)
        driver = n.nvmlSystemGetDriverVersion()
        return GpuState(
            name=name.decode() if isinstance(name, bytes) else name,
            driver=driver.decode() if isinstance(driver, bytes) else driver,
            sm_clock_mhz=n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            sm_clock_max_mhz=n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM),
            mem_clock_mhz=n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
            temperature_c=self.temperature_c(),
            power_w=n.nvmlDeviceGetPowerUsage(h) / 1000.0,
            power_limit_w=n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
            gpu_utilization_pct=n.nvmlDeviceGetUtilizationRates(h).gpu,
            clock_event_reasons=decode_clock_event_reasons(get_reasons(h)),
        )


def _field_number(nvml: Any, value: Any) -> float:
    """The number in an NVML field value, read by its type tag (power is an unsigned int of mW)."""
    by_type = {
        nvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        nvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
    }
    return float(getattr(value.value, by_type.get(value.valueType, "uiVal")))


def open_gpu(device: torch.device) -> tuple[Gpu | None, str]:
    """An NVML handle for ``device`` and "" , or None and the reason it is unavailable."""
    if device.type != "cuda":
        return None, "not a CUDA device"
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
        # Match by UUID: CUDA_VISIBLE_DEVICES can renumber devices, NVML never does.
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except pynvml.NVMLError:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
    except pynvml.NVMLError as exc:
        return None, f"NVML unsupported here ({exc})"
    return Gpu(pynvml, handle), ""
