"""The GPU's conditions while a measurement runs: SM clock, power, temperature and the reasons NVML
gives for holding the clocks down, sampled through NVML (the `nvidia-ml-py` package, `pynvml`).

    with Sampler(device_index=0, period_s=0.005) as s:
        ...  # the timed work
    s.summary()  # sm_clock_mean_mhz, ..., clock_reasons, nvml_note

A timing is only comparable with another taken at the same clocks. A GPU that reaches its power cap
or its thermal limit lowers the SM clock in the middle of a run, and the kernel looks slower than it
is; the summary says so beside the timing, and `throttled` / `warning_line` turn it into one line for
the user. NVML is optional: without the package, or without a driver, the Sampler records nothing,
raises nothing, and `nvml_note` says why.
"""

from __future__ import annotations

import math
import os
import threading

NaN = float("nan")

# nvmlClocksEventReasons (nvml.h; "throttle reasons" before driver 535), bit -> the name we report.
REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
# gpu_idle is left out of the reasons we report: it means "the clocks are low because there is no
# work", which is true of the sample taken at the start and at the exit of every region and of the
# gaps between launches. It does not limit the work being measured, and reporting it would flag every
# short region as slowed. For the same reason the SM clock statistics leave out the samples that
# carry it (see Sampler.summary).
NOT_REPORTED = 0x1
GPU_IDLE = 0x1

KEYS = ("sm_clock_mean_mhz", "sm_clock_min_mhz", "sm_clock_max_mhz", "power_mean_w", "power_max_w",
        "temp_max_c", "nvml_samples", "clock_reasons", "nvml_note")

INSTALL_HINT = "nvidia-ml-py not installed (pip install nvidia-ml-py)"


def decode_reasons(mask: int) -> str:
    """The reasons set in `mask`, comma-separated in bit order, gpu_idle left out (see NOT_REPORTED);
    bits this table does not know come out as one hex number, so nothing is silently dropped."""
    mask = int(mask) & ~NOT_REPORTED
    names = [name for bit, name in REASON_BITS if mask & bit]
    known = 0
    for bit, _ in REASON_BITS:
        known |= bit
    if mask & ~known:
        names.append(hex(mask & ~known))
    return ",".join(names)


def nvml_index(cuda_device: int, visible: str | None) -> int | str:
    """The NVML device that CUDA calls `cuda_device`, given $CUDA_VISIBLE_DEVICES (`visible`).

    Unset: the same index. An integer list ("1,3"): CUDA device i is the i-th entry, an NVML index.
    UUIDs ("GPU-...", or "MIG-..."): the i-th entry, returned as the string, for
    nvmlDeviceGetHandleByUUID (the Sampler also takes a unique prefix of one, as CUDA does). Like CUDA,
    the list ends at its first entry that is neither. ValueError when that list has no entry i.

    This assumes CUDA numbers the GPUs in NVML's (PCI bus) order, which holds under
    CUDA_DEVICE_ORDER=PCI_BUS_ID and on machines of identical GPUs; pass the Sampler `pci_bus_id`
    where it might not hold."""
    if isinstance(cuda_device, bool) or not isinstance(cuda_device, int) or cuda_device < 0:
        raise ValueError(f"cuda_device must be an int >= 0, got {cuda_device!r}")
    if visible is None:
        return cuda_device
    entries: list[int | str] = []
    for raw in visible.split(","):
        e = raw.strip()
        if e.isdigit():
            entries.append(int(e))
        elif e.startswith(("GPU-", "MIG-")) and len(e) > 4:
            entries.append(e)
        else:
            break  # CUDA ignores the rest of the list from the first invalid entry ("-1" hides every GPU)
    if cuda_device >= len(entries):
        raise ValueError(f"CUDA_VISIBLE_DEVICES={visible!r} makes {len(entries)} device(s) visible, "
                         f"so there is no CUDA device {cuda_device}")
    return entries[cuda_device]


def _finite(xs: list[float]) -> list[float]:
    return [x for x in xs if x is not None and math.isfinite(x)]


def _err(e: BaseException) -> str:
    return str(e) or type(e).__name__


class Sampler:
    """Sample the GPU's SM clock, power, temperature and clock-event reasons every `period_s` on a
    daemon thread, from `with` entry to exit: one sample at entry, one at exit, and the thread's in
    between, so that a region shorter than the period still has numbers.

    pynvml calls go through ctypes, which releases the GIL while NVML runs, so the thread takes
    little from a Python timing loop beside it; it does take a CPU core's attention every period,
    which is why the period is milliseconds, not microseconds.

    Never raises for NVML's sake: without pynvml, with nvmlInit failing (no driver) or with no such
    device, summary() has NaN numbers, nvml_samples 0 and nvml_note saying why.
    `pci_bus_id` ("00000000:1B:00.0", as cudaDeviceGetPCIBusId gives it), when given, picks the device
    instead of `device_index` and $CUDA_VISIBLE_DEVICES (see nvml_index for when that matters)."""

    def __init__(self, device_index: int = 0, period_s: float = 0.005, pci_bus_id: str | None = None):
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s!r}")
        self.device_index = device_index
        self.period_s = float(period_s)
        self.pci_bus_id = pci_bus_id
        self._nvml = None  # the pynvml module once nvmlInit succeeded
        self._handle = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._clock: list[float] = []
        self._clock_busy: list[float] = []  # the SM clock of the samples NVML did not mark gpu_idle
        self._power: list[float] = []
        self._temp: list[float] = []
        self._reasons = 0
        self._samples = 0
        self._note = "not started (use the Sampler in a with statement)"
        self._field_errors: dict[str, str] = {}  # quantity -> NVML's error, first one only

    # --- NVML --------------------------------------------------------------------------------------

    def _open(self) -> None:
        try:
            import pynvml
        except ImportError:
            self._note = INSTALL_HINT
            return
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError (no driver, no libnvidia-ml.so), or anything else: never raise
            self._note = f"NVML: {_err(e)}"
            return
        try:
            self._handle = self._device_handle(pynvml)
        except Exception as e:
            self._note = f"NVML: no handle for CUDA device {self.device_index}: {_err(e)}"
            self._shutdown(pynvml)
            return
        self._nvml = pynvml
        self._note = ""

    def _device_handle(self, nv):
        if self.pci_bus_id:
            return nv.nvmlDeviceGetHandleByPciBusId(self.pci_bus_id)
        which = nvml_index(self.device_index, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if isinstance(which, int):
            return nv.nvmlDeviceGetHandleByIndex(which)
        try:
            return nv.nvmlDeviceGetHandleByUUID(which)
        except Exception:
            # CUDA takes a unique prefix of a UUID; NVML wants it whole, so look for the one it begins.
            matches = []
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                uuid = nv.nvmlDeviceGetUUID(h)
                uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
                if uuid.startswith(which):
                    matches.append(h)
            if len(matches) != 1:
                raise
            return matches[0]

    @staticmethod
    def _shutdown(nv) -> None:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass

    def _query(self, what: str, fn, *args):
        """One NVML query; None (and the error noted once) when it fails, e.g. power Not Supported."""
        try:
            return fn(*args)
        except Exception as e:
            self._field_errors.setdefault(what, _err(e))
            return None

    def _sample(self) -> None:
        nv, h = self._nvml, self._handle
        clock = self._query("sm clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        power = self._query("power", nv.nvmlDeviceGetPowerUsage, h)
        temp = self._query("temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        # Renamed "clocks event reasons" in driver 535 / nvidia-ml-py 12.535; older bindings have the
        # throttle name only.
        reasons_fn = (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                      or getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        reasons = self._query("clock reasons", reasons_fn, h) if reasons_fn else None
        if clock is None and power is None and temp is None and reasons is None:
            return
        with self._lock:
            self._samples += 1
            if clock is not None:
                self._clock.append(float(clock))
                if reasons is None or not int(reasons) & GPU_IDLE:
                    self._clock_busy.append(float(clock))
            if power is not None:
                self._power.append(float(power) / 1000.0)  # NVML gives milliwatts
            if temp is not None:
                self._temp.append(float(temp))
            if reasons is not None:
                self._reasons |= int(reasons)

    def _run(self) -> None:
        # wait() returns True once stop is set: the exit sample is __exit__'s, not the thread's.
        while not self._stop.wait(self.period_s):
            self._sample()

    # --- context manager ---------------------------------------------------------------------------

    def __enter__(self) -> Sampler:
        self._open()
        if self._nvml is not None:
            self._sample()
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        if self._nvml is not None:
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
                self._thread = None
            self._sample()
            self._shutdown(self._nvml)
            self._nvml = None
        return False

    # --- results -----------------------------------------------------------------------------------

    def summary(self) -> dict:
        """The region's conditions: exactly the keys in KEYS. Numbers are NaN where nothing was sampled.

        The SM clock's mean, min and max are over the samples NVML did not mark gpu_idle: an idle GPU
        drops to its idle clock (345 MHz on an H100) within milliseconds, so a sample taken before the
        work started or in a gap between launches would read as deep throttling. Where every sample was
        idle (a region shorter than the clocks take to rise, or no GPU work at all), they are over all
        samples, so a short region still has numbers. Power and temperature are over all samples."""
        with self._lock:
            clock = _finite(self._clock_busy) or _finite(self._clock)
            power, temp = _finite(self._power), _finite(self._temp)
            samples, reasons = self._samples, self._reasons
        note = self._note
        if not note and samples == 0:
            note = "NVML: every query failed: " + "; ".join(f"{k}: {v}" for k, v in self._field_errors.items())
        elif not note and self._field_errors:
            # Some quantities only (power is Not Supported on some boards): say which, keep the rest.
            note = "NVML: " + "; ".join(f"{k}: {v}" for k, v in self._field_errors.items())
        return {
            "sm_clock_mean_mhz": sum(clock) / len(clock) if clock else NaN,
            "sm_clock_min_mhz": min(clock) if clock else NaN,
            "sm_clock_max_mhz": max(clock) if clock else NaN,
            "power_mean_w": sum(power) / len(power) if power else NaN,
            "power_max_w": max(power) if power else NaN,
            "temp_max_c": max(temp) if temp else NaN,
            "nvml_samples": int(samples),
            "clock_reasons": decode_reasons(reasons),
            "nvml_note": note,
        }


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return NaN


def throttled(summary: dict, highest_mhz: float, fraction: float = 0.9) -> bool:
    """True when the region's lowest SM clock fell under `fraction` of `highest_mhz` (the highest SM
    clock seen in the whole run, say). False where either number is missing (NaN): no NVML, no verdict."""
    low, high = _num(summary.get("sm_clock_min_mhz")), _num(highest_mhz)
    if not (math.isfinite(low) and math.isfinite(high)) or high <= 0:
        return False
    return low < fraction * high


def warning_line(label: str, summary: dict, highest_mhz: float) -> str:
    """One sentence for the user, e.g. "warning: matmul 09_tuned 4096^3 ran throttled: SM clock down to
    1410 MHz (71% of the 1980 MHz highest seen), power 690 W, 78 C, reasons: sw_power_cap"."""
    low, high = _num(summary.get("sm_clock_min_mhz")), _num(highest_mhz)
    if math.isfinite(low) and math.isfinite(high) and high > 0:
        clock = f"SM clock down to {low:.0f} MHz ({100 * low / high:.0f}% of the {high:.0f} MHz highest seen)"
    elif math.isfinite(low):
        clock = f"SM clock down to {low:.0f} MHz"
    else:
        clock = "SM clock not sampled"
    parts = [clock]
    power, temp = _num(summary.get("power_max_w")), _num(summary.get("temp_max_c"))
    if math.isfinite(power):
        parts.append(f"power {power:.0f} W")
    if math.isfinite(temp):
        parts.append(f"{temp:.0f} C")
    parts.append(f"reasons: {summary.get('clock_reasons') or 'none reported'}")
    return f"warning: {label} ran throttled: " + ", ".join(parts)


__all__ = ["Sampler", "nvml_index", "throttled", "warning_line", "decode_reasons", "REASON_BITS", "KEYS"]
