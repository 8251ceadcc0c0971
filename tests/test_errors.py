from __future__ import annotations

import pytest

from harness.errors import BuildError, CudaError, NoGPUError, ProgramError, TraceError, raise_for_code


def test_codes_map_to_types():
    raise_for_code(0)
    with pytest.raises(NoGPUError, match="driver"):
        raise_for_code(35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient")
    with pytest.raises(NoGPUError, match="no CUDA device"):
        raise_for_code(100, "cudaErrorNoDevice", "no CUDA-capable device is detected")
    with pytest.raises(CudaError) as ei:
        raise_for_code(700, "cudaErrorIllegalAddress", "an illegal memory access", where="square.run")
    assert not isinstance(ei.value, NoGPUError)
    assert ei.value.code == 700 and "square.run" in str(ei.value)


def test_program_error_carries_status_and_tail():
    e = ProgramError(["build/bin/x", "1"], 2, "error: N must be positive")
    assert e.returncode == 2 and "N must be positive" in str(e) and "status 2" in str(e)
    t = ProgramError(["x"], -1, "", timed_out=True)
    assert "timed out" in str(t)


def test_build_and_trace_errors():
    b = BuildError("build failed", ["a.cu:3: error: x"])
    assert "a.cu:3" in str(b)
    t = TraceError("missing", missing=[3])
    assert t.missing == [3]
