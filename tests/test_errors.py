from __future__ import annotations

import pytest

from harness import errors
from harness.errors import BuildError, CudaError, NoGPUError, ProgramError, TraceError, raise_for_code


@pytest.fixture(autouse=True)
def _fresh_context(monkeypatch):
    """A sticky code below marks the process's context as lost: keep that inside each test."""
    monkeypatch.setattr(errors, "_lost", None)


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


def test_a_sticky_error_says_the_context_is_lost_and_every_later_call_says_so_again():
    with pytest.raises(errors.ContextLostError, match="restart the kernel") as first:
        raise_for_code(700, "cudaErrorIllegalAddress", "an illegal memory access", where="square.square",
                       still_failing=True)
    assert isinstance(first.value, CudaError) and first.value.code == 700
    # Any later failure, or a check before a call, names the first error and says to restart.
    with pytest.raises(errors.ContextLostError, match="lost earlier: .*cudaErrorIllegalAddress"):
        raise_for_code(1, "cudaErrorInvalidValue", "invalid argument", where="matmul.matmul_host")
    with pytest.raises(errors.ContextLostError, match="Restart the process"):
        errors.check_context("grayscale.grayscale_host")


def test_a_sticky_code_returned_as_an_argument_check_does_not_lose_the_context():
    # square_f32_dev returns cudaErrorMisalignedAddress for a misaligned pointer before any launch;
    # the runtime then reports nothing more, so the context is fine.
    with pytest.raises(CudaError) as ei:
        raise_for_code(716, "cudaErrorMisalignedAddress", "misaligned address", still_failing=False)
    assert not isinstance(ei.value, errors.ContextLostError)
    errors.check_context()  # does not raise
