"""device_info agrees with the runtime's own attributes."""

from __future__ import annotations

import pytest

from harness.calling import cudart
from harness.compile import build
from harness.programs import device_info

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def built():
    build.build(build.targets("device_info"))


def test_executable_agrees_with_cudart():
    d = device_info.run()
    a = cudart.attributes()
    assert d["name"] == cudart.device_name()
    assert d["compute_capability"] == f"{a['cc_major']}.{a['cc_minor']}"
    for key in ("sm_count", "l2_bytes", "bus_width_bits", "smem_per_block", "smem_per_block_optin",
                "smem_per_sm", "regs_per_block", "regs_per_sm", "max_threads_per_block",
                "max_threads_per_sm", "max_blocks_per_sm", "warp_size"):
        assert d[key] == a[key], key
    assert d["clock_mhz"] == pytest.approx(a["clock_khz"] / 1e3)
    assert d["global_mem_bytes"] == cudart.mem_info()[1]
    assert d["driver_version"] == cudart.driver_version()


def test_library_agrees_with_executable():
    q, d = device_info.query(), device_info.run()
    assert q["name"] == d["name"]
    assert q["fp32_tflops"] == pytest.approx(d["fp32_tflops"], rel=1e-3)
    assert q["mem_bandwidth_gbs"] == pytest.approx(d["mem_bandwidth_gbs"], rel=1e-3)
    assert q["fp32_lanes_per_sm"] > 0


def test_bad_device_index_is_a_usage_error():
    from harness.base.errors import ProgramError
    from harness.calling import runner

    with pytest.raises(ProgramError) as ei:
        runner.run("device_info", cudart.device_count())
    assert ei.value.returncode == 2 and "does not exist" in ei.value.stderr_tail
