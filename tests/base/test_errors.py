from __future__ import annotations

import pytest

from harness.base import context, errors
from harness.base.context import raise_for_code
from harness.base.errors import BuildError, CudaError, NoGPUError, ProgramError, TraceError


@pytest.fixture(autouse=True)
def _fresh_context(monkeypatch):
    """A sticky code below marks the process's context as lost: keep that inside each test."""
    monkeypatch.setattr(context, "_lost", None)


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
        context.check_context("grayscale.grayscale_host")


def test_a_sticky_code_returned_as_an_argument_check_does_not_lose_the_context():
    # square_f32_dev returns cudaErrorMisalignedAddress for a misaligned pointer before any launch;
    # the runtime then reports nothing more, so the context is fine.
    with pytest.raises(CudaError) as ei:
        raise_for_code(716, "cudaErrorMisalignedAddress", "misaligned address", still_failing=False)
    assert not isinstance(ei.value, errors.ContextLostError)
    context.check_context()  # does not raise


STICKY_SCRIPT = r'''
import numpy as np
from harness.calling import inline; from harness.base import errors
from harness.programs import square
mod = inline.load(r"""
__global__ void poke(int *p) { *p = 1; }
extern "C" int crash(void) {
    poke<<<1, 1>>>((int *)8);  // an illegal address: the context is lost for good
    return (int)cudaDeviceSynchronize();
}
""", name="sticky")
for call in (mod.crash, lambda: square.square(np.ones(4, np.float32)), mod.crash):
    try:
        call()
        print("no error")
    except errors.ContextLostError as e:
        print(type(e).__name__, "|", e)
'''


@pytest.mark.gpu
def test_after_an_illegal_address_every_call_says_to_restart():
    """A sticky error is provoked in a subprocess (it poisons the whole process): the first call says
    what happened and that the process must restart; every later call, in any library, says so too."""
    import subprocess
    import sys

    from harness.compile import build

    r = subprocess.run([sys.executable, "-c", STICKY_SCRIPT], capture_output=True, text=True, timeout=300,
                       cwd=build.ROOT)
    lines = [x for x in r.stdout.splitlines() if "|" in x]
    assert len(lines) == 3, r.stdout + r.stderr
    assert "cudaErrorIllegalAddress" in lines[0] and "Restart the process" in lines[0]
    for later in lines[1:]:
        assert later.startswith("ContextLostError") and "lost earlier: cudaErrorIllegalAddress" in later


def test_not_built_names_what_and_the_command_that_builds_it():
    from pathlib import Path

    e = errors.NotBuilt([Path("build/lib/liba.so"), Path("build/bin/b")], ["a", "b", "a"])
    assert isinstance(e, errors.CudalabError) and isinstance(e, FileNotFoundError)
    assert e.programs == ["a", "b"]
    assert str(e) == ("build/lib/liba.so, build/bin/b are missing: run `invoke build --programs a,b` "
                      "(or `invoke build` for every program)")
    one = errors.NotBuilt("build/bin/a", "a", "not the file its build wrote")
    assert str(one).startswith("build/bin/a is not the file its build wrote: run `invoke build --programs a` ")


def test_tool_missing_says_which_tool_and_its_fix():
    e = errors.ToolMissing("compute-sanitizer", "searched PATH")
    assert isinstance(e, errors.CudalabError) and isinstance(e, FileNotFoundError)
    assert e.tool == "compute-sanitizer" and e.fix == errors.TOOL_FIXES["compute-sanitizer"]
    assert str(e) == f"compute-sanitizer not found (searched PATH): {e.fix}"
    assert set(errors.TOOL_FIXES) == {"nvcc", "cuobjdump", "nvdisasm", "compute-sanitizer", "libcudart", "cuda-bench"}
    with pytest.raises(KeyError):
        errors.ToolMissing("no-such-tool")  # every tool raised has its fix in the one table


def test_no_gpu_error_asks_the_registered_version_source(monkeypatch):
    """The base layer imports nothing above it: the calling layer's cudart registers who says the
    driver and runtime versions, and a driver older than the runtime gets the one sentence."""
    monkeypatch.setattr(errors, "_versions", None)
    assert "no usable NVIDIA driver" in str(NoGPUError(35, "cudaErrorInsufficientDriver"))
    errors.set_version_source(lambda: (12020, 13000))
    assert str(NoGPUError(35, "cudaErrorInsufficientDriver")) == errors.driver_too_old_line(12020, 13000)
    errors.set_version_source(lambda: (_ for _ in ()).throw(OSError("no libcudart")))
    assert "no usable NVIDIA driver" in str(NoGPUError(35, "cudaErrorInsufficientDriver"))


def test_cudart_registers_itself_as_the_version_source():
    from harness.calling import cudart, library

    assert library.cudart is cudart and errors._versions is not None
