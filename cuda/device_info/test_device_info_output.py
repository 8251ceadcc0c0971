"""device_info's output as recorded on a real GPU (fixtures/), read and checked on the CPU."""

from __future__ import annotations

from pathlib import Path

from harness.programs import device_info

FIX = Path(__file__).parent / "fixtures"


def test_device_info_fixture():
    d = device_info.parse_output((FIX / "device_info_h200.txt").read_text())
    assert d["name"] == "NVIDIA H200" and d["compute_capability"] == "9.0"
    assert d["sm_count"] == 132 and d["warp_size"] == 32 and d["max_threads_per_block"] == 1024
    # The derived peaks follow the formulas printed beside them.
    lanes, sms, clock_hz = d["fp32_lanes_per_sm"], d["sm_count"], d["clock_mhz"] * 1e6
    assert abs(d["fp32_tflops"] - sms * lanes * 2 * clock_hz / 1e12) < 1e-2
    assert abs(d["fp32_inst_per_s"] / (sms * lanes * clock_hz) - 1) < 1e-5
    bw = 2 * d["mem_clock_mhz"] * 1e6 * d["bus_width_bits"] / 8 / 1e9
    assert abs(d["mem_bandwidth_gbs"] - bw) < 0.1
