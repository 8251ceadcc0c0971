"""harness.measuring.conditions: the NVML sampler's summary, its failure paths, device mapping, the throttle verdict.

NVML is replaced by a fake pynvml module (sys.modules) whose devices return scripted clocks, power
and temperatures and record what they returned, so every number in a summary can be checked; no
GPU, driver or nvidia-ml-py is needed.
"""

from __future__ import annotations

import math
import sys
import time
import types

import pytest

from harness.measuring import conditions
from harness.measuring.conditions import Sampler, nvml_index, throttled, warning_line

LONG = 60.0  # a period no test waits for: the summary holds exactly the entry and the exit sample


class FakeNVMLError(Exception):
    pass


class FakeDevice:
    """Returns its scripts in turn (the last value repeats) and records every value it returned."""

    def __init__(self, uuid, clocks, power_mw, temps, reasons, power_error=None):
        self.uuid = uuid
        self.scripts = {"clock": list(clocks), "power": list(power_mw), "temp": list(temps), "reasons": list(reasons)}
        self.given = {k: [] for k in self.scripts}
        self.power_error = power_error

    def next(self, what):
        s = self.scripts[what]
        v = s.pop(0) if len(s) > 1 else s[0]
        self.given[what].append(v)
        return v


def fake_pynvml(devices, init_error=None, event_reasons=True):
    nv = types.ModuleType("pynvml")
    nv.NVMLError = FakeNVMLError
    nv.NVML_CLOCK_SM = 1
    nv.NVML_TEMPERATURE_GPU = 0
    nv.calls = []

    def init():
        nv.calls.append("init")
        if init_error:
            raise FakeNVMLError(init_error)

    def by_uuid(u):
        for d in devices:
            if d.uuid == u:
                return d
        raise FakeNVMLError("Not Found")

    def clock(h, kind):
        assert kind == nv.NVML_CLOCK_SM
        return h.next("clock")

    def power(h):
        if h.power_error:
            raise FakeNVMLError(h.power_error)
        return h.next("power")

    def temp(h, sensor):
        assert sensor == nv.NVML_TEMPERATURE_GPU
        return h.next("temp")

    nv.nvmlInit = init
    nv.nvmlShutdown = lambda: nv.calls.append("shutdown")
    nv.nvmlDeviceGetCount = lambda: len(devices)
    nv.nvmlDeviceGetHandleByIndex = lambda i: devices[i]
    nv.nvmlDeviceGetHandleByUUID = by_uuid
    nv.nvmlDeviceGetHandleByPciBusId = lambda bus: next(d for d in devices if d.uuid == "GPU-" + bus)
    nv.nvmlDeviceGetUUID = lambda h: h.uuid
    nv.nvmlDeviceGetClockInfo = clock
    nv.nvmlDeviceGetPowerUsage = power
    nv.nvmlDeviceGetTemperature = temp
    reasons = lambda h: h.next("reasons")  # noqa: E731
    if event_reasons:
        nv.nvmlDeviceGetCurrentClocksEventReasons = reasons
    else:  # bindings older than 12.535 have only the throttle name
        nv.nvmlDeviceGetCurrentClocksThrottleReasons = reasons
    return nv


def dev(uuid="GPU-aaaa", clocks=(1980,), power_mw=(500_000,), temps=(50,), reasons=(0,), **kw):
    return FakeDevice(uuid, clocks, power_mw, temps, reasons, **kw)


@pytest.fixture
def nvml(monkeypatch):
    """Install a fake pynvml built from the devices given; CUDA_VISIBLE_DEVICES unset."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def install(*devices, **kw):
        nv = fake_pynvml(list(devices), **kw)
        monkeypatch.setitem(sys.modules, "pynvml", nv)
        return nv

    return install


def test_summary_of_the_entry_and_exit_samples(nvml):
    d = dev(clocks=(1980, 1410), power_mw=(400_500, 690_000), temps=(61, 78), reasons=(0x4, 0x0))
    nv = nvml(d)
    with Sampler(period_s=LONG) as s:
        pass
    out = s.summary()
    assert list(out) == list(conditions.KEYS)
    assert out["nvml_samples"] == 2 and isinstance(out["nvml_samples"], int)
    assert out["sm_clock_mean_mhz"] == 1695.0
    assert (out["sm_clock_min_mhz"], out["sm_clock_max_mhz"]) == (1410.0, 1980.0)
    assert out["power_mean_w"] == pytest.approx(545.25)  # milliwatts to watts
    assert out["power_max_w"] == pytest.approx(690.0)
    assert out["temp_max_c"] == 78.0
    assert out["clock_reasons"] == "sw_power_cap"  # seen in one sample: reported
    assert out["nvml_note"] == ""
    assert nv.calls == ["init", "shutdown"]


def _sample_until(d, n: int) -> dict:
    """A Sampler at 1 ms held open until the fake device has answered `n` clock queries (1 s at most)."""
    with Sampler(period_s=0.001) as s:
        deadline = time.monotonic() + 1.0
        while len(d.given["clock"]) < n and time.monotonic() < deadline:
            time.sleep(0.002)
    return s.summary()


def test_the_thread_samples_between_entry_and_exit(nvml):
    d = dev(clocks=(1980, 1755, 1410, 1830, 1980), power_mw=(300_000, 700_000, 650_000), temps=(40, 83, 70),
            reasons=(0, 0x40, 0x4, 0))
    nvml(d)
    out = _sample_until(d, 6)
    clocks, watts = d.given["clock"], [p / 1000 for p in d.given["power"]]
    assert out["nvml_samples"] == len(clocks) >= 6  # entry + the thread's + exit
    assert out["sm_clock_mean_mhz"] == pytest.approx(sum(clocks) / len(clocks))
    assert out["sm_clock_min_mhz"] == 1410.0 and out["sm_clock_max_mhz"] == 1980.0
    assert out["power_mean_w"] == pytest.approx(sum(watts) / len(watts)) and out["power_max_w"] == 700.0
    assert out["temp_max_c"] == 83.0
    assert out["clock_reasons"] == "sw_power_cap,hw_thermal_slowdown"  # bit order, each once
    # The thread has stopped: nothing is sampled after exit.
    n = len(clocks)
    time.sleep(0.01)
    assert len(d.given["clock"]) == n


def test_idle_samples_are_left_out_of_the_clock_statistics(nvml):
    # Entry and exit samples caught the GPU idle (gpu_idle set, idle clocks): not throttling.
    d = dev(clocks=(345, 1980, 1410, 600), power_mw=(70_000, 650_000, 690_000, 90_000), temps=(40, 60, 70, 65),
            reasons=(0x1, 0x0, 0x4, 0x1))
    nvml(d)
    out = _sample_until(d, 4)
    busy = [c for c, r in zip(d.given["clock"], d.given["reasons"]) if not r & 0x1]
    assert min(busy) == 1410 and out["sm_clock_min_mhz"] == 1410.0 and out["sm_clock_max_mhz"] == 1980.0
    assert out["sm_clock_mean_mhz"] == pytest.approx(sum(busy) / len(busy))
    assert out["power_max_w"] == 690.0 and out["power_mean_w"] < 690.0  # power keeps every sample
    assert out["clock_reasons"] == "sw_power_cap"  # gpu_idle is not reported


def test_a_region_idle_throughout_still_has_clock_numbers(nvml):
    nvml(dev(clocks=(345, 360), reasons=(0x1,)))
    with Sampler(period_s=LONG) as s:
        pass
    out = s.summary()
    assert (out["sm_clock_min_mhz"], out["sm_clock_max_mhz"], out["sm_clock_mean_mhz"]) == (345.0, 360.0, 352.5)
    assert out["clock_reasons"] == ""


def test_older_bindings_use_the_throttle_reasons_name(nvml):
    nvml(dev(reasons=(0x20 | 0x80,)), event_reasons=False)
    with Sampler(period_s=LONG) as s:
        pass
    assert s.summary()["clock_reasons"] == "sw_thermal_slowdown,hw_power_brake_slowdown"


def test_decode_reasons():
    assert conditions.decode_reasons(0) == ""
    assert conditions.decode_reasons(0x1) == ""
    assert conditions.decode_reasons(0x1FF) == ("applications_clocks_setting,sw_power_cap,hw_slowdown,sync_boost,"
                                                "sw_thermal_slowdown,hw_thermal_slowdown,hw_power_brake_slowdown,"
                                                "display_clock_setting")
    assert conditions.decode_reasons(0x8 | 0x1000) == "hw_slowdown,0x1000"  # unknown bits are not dropped


def _all_nan(out):
    nums = [k for k in conditions.KEYS if k not in ("nvml_samples", "clock_reasons", "nvml_note")]
    return all(math.isnan(out[k]) for k in nums)


def test_without_pynvml_nothing_raises_and_the_note_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with Sampler(period_s=0.001) as s:
        pass
    out = s.summary()
    assert list(out) == list(conditions.KEYS)
    assert _all_nan(out) and out["nvml_samples"] == 0 and out["clock_reasons"] == ""
    assert out["nvml_note"] == "nvidia-ml-py not installed (pip install nvidia-ml-py)"


def test_nvml_init_failure_is_a_note(nvml):
    nv = nvml(dev(), init_error="Driver Not Loaded")
    with Sampler(period_s=0.001) as s:
        pass
    out = s.summary()
    assert _all_nan(out) and out["nvml_samples"] == 0
    assert out["nvml_note"] == "NVML: Driver Not Loaded"
    assert "shutdown" not in nv.calls  # nvmlInit failed: nothing to shut down


def test_a_missing_device_is_a_note(nvml, monkeypatch):
    nv = nvml(dev())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with Sampler(device_index=1, period_s=0.001) as s:
        pass
    out = s.summary()
    assert out["nvml_samples"] == 0 and "no CUDA device 1" in out["nvml_note"]
    assert nv.calls == ["init", "shutdown"]


def test_one_unsupported_quantity_keeps_the_others(nvml):
    nvml(dev(clocks=(1500,), power_error="Not Supported"))
    with Sampler(period_s=LONG) as s:
        pass
    out = s.summary()
    assert out["nvml_samples"] == 2 and out["sm_clock_mean_mhz"] == 1500.0
    assert math.isnan(out["power_mean_w"]) and math.isnan(out["power_max_w"])
    assert out["nvml_note"] == "NVML: power: Not Supported"


def test_the_sampler_reads_the_gpu_cuda_visible_devices_names(nvml, monkeypatch):
    a, b, c = dev("GPU-aaaa", clocks=(1000,)), dev("GPU-bbbb", clocks=(2000,)), dev("GPU-cccc", clocks=(3000,))
    nvml(a, b, c)
    for visible, device, clock in (("2,0", 0, 3000), ("2,0", 1, 1000), ("GPU-bbbb", 0, 2000),
                                   ("GPU-cccc,GPU-aaaa", 1, 1000), ("GPU-cc", 0, 3000), (None, 1, 2000)):
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        with Sampler(device_index=device, period_s=LONG) as s:
            pass
        assert s.summary()["sm_clock_max_mhz"] == clock, (visible, device)


def test_a_pci_bus_id_overrides_the_index(nvml, monkeypatch):
    nvml(dev("GPU-aaaa", clocks=(1000,)), dev("GPU-00000000:1B:00.0", clocks=(2000,)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with Sampler(device_index=0, period_s=LONG, pci_bus_id="00000000:1B:00.0") as s:
        pass
    assert s.summary()["sm_clock_max_mhz"] == 2000.0


def test_an_ambiguous_uuid_prefix_is_a_note(nvml, monkeypatch):
    nvml(dev("GPU-ab12"), dev("GPU-ab34"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-ab")
    with Sampler(period_s=LONG) as s:
        pass
    out = s.summary()
    assert out["nvml_samples"] == 0 and out["nvml_note"].startswith("NVML: no handle for CUDA device 0")


def test_nvml_index():
    assert nvml_index(0, None) == 0 and nvml_index(3, None) == 3
    assert nvml_index(0, "1") == 1
    assert nvml_index(1, "3, 1,2") == 1 and nvml_index(0, "3,1,2") == 3
    uuid = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
    assert nvml_index(0, uuid) == uuid
    assert nvml_index(1, f"MIG-x,{uuid}") == uuid
    with pytest.raises(ValueError, match="no CUDA device 1"):
        nvml_index(1, "2")
    with pytest.raises(ValueError, match="0 device"):
        nvml_index(0, "")
    with pytest.raises(ValueError, match="0 device"):
        nvml_index(0, "-1")  # hides every GPU
    with pytest.raises(ValueError, match="1 device"):
        nvml_index(1, "0,bogus,2")  # CUDA stops at the first entry it cannot read
    with pytest.raises(ValueError):
        nvml_index(-1, None)


HOT = {"sm_clock_mean_mhz": 1600.0, "sm_clock_min_mhz": 1410.0, "sm_clock_max_mhz": 1980.0, "power_mean_w": 650.0,
       "power_max_w": 690.2, "temp_max_c": 78.0, "nvml_samples": 40, "clock_reasons": "sw_power_cap", "nvml_note": ""}


def test_throttled():
    assert throttled(HOT, 1980.0)  # 1410 < 0.9 * 1980 = 1782
    assert not throttled({**HOT, "sm_clock_min_mhz": 1800.0}, 1980.0)
    assert not throttled({**HOT, "sm_clock_min_mhz": 1782.0}, 1980.0)  # exactly the fraction: not under it
    assert throttled({**HOT, "sm_clock_min_mhz": 1781.0}, 1980.0)
    assert not throttled(HOT, 1980.0, fraction=0.7)
    assert not throttled({**HOT, "sm_clock_min_mhz": math.nan}, 1980.0)
    assert not throttled(HOT, math.nan)


def test_warning_line():
    line = warning_line("matmul 09_tuned 4096^3", HOT, 1980.0)
    assert line == ("warning: matmul 09_tuned 4096^3 ran throttled: SM clock down to 1410 MHz (71% of the 1980 MHz "
                    "highest seen), power 690 W, 78 C, reasons: sw_power_cap")
    quiet = warning_line("x", {**HOT, "power_max_w": math.nan, "clock_reasons": ""}, 2000.0)
    assert quiet == "warning: x ran throttled: SM clock down to 1410 MHz (70% of the 2000 MHz highest seen), " \
                    "78 C, reasons: none reported"


def test_a_real_nvml_when_there_is_one():
    """On a machine with a driver and nvidia-ml-py: numbers, or a note saying why not (never an exception)."""
    pytest.importorskip("pynvml")
    with Sampler(period_s=0.002) as s:
        time.sleep(0.02)
    out = s.summary()
    if out["nvml_samples"] == 0:
        assert out["nvml_note"], out
    else:
        assert out["sm_clock_max_mhz"] > 0 and out["sm_clock_min_mhz"] <= out["sm_clock_max_mhz"]
        assert out["nvml_samples"] >= 2
