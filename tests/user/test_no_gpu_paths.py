"""Every command that needs a GPU says so in one line when there is none: the timing engine's one
check (harness.measuring.timing.require_gpu) is on every path into a measurement."""

from __future__ import annotations

import pytest
from test_tasks import inv_many

from conftest import GPU_OK, ensure_built
from harness.base.errors import NoGPUError
from harness.calling import cudart
from harness.measuring import bench
from harness.profiling import profile as hp


def _no_device():
    raise NoGPUError(100, "cudaErrorNoDevice", "no CUDA-capable device is detected", "cudaGetDeviceCount")


def test_bench_checks_for_a_gpu_before_measuring_ceilings(monkeypatch):
    """bench.run asks before resolving the ceilings, some of which touch the device."""
    monkeypatch.setattr(cudart, "device_count", _no_device)
    case = bench.BenchCase("square", "01_naive", "2^24", "harness.programs.square:bench_setup", "GB/s", 1.0, "fp32")
    with pytest.raises(NoGPUError, match="no CUDA device is visible"):
        bench.run([case], {"fp32": lambda quick: pytest.fail("a ceiling resolved without a GPU")}, quick=True)


def test_profile_without_a_gpu_is_the_no_gpu_error(monkeypatch, tmp_path):
    """`invoke profile` falls back to event timing when no profiler gives a report; with no device
    that fallback's NoGPUError is the answer (not a list of profiler failures that follow from it)."""
    for name in ("run_nsys", "run_ncu"):
        monkeypatch.setattr(hp, name, lambda *a, **kw: (_ for _ in ()).throw(hp.ToolFailure("x", "not found")))

    def fallback(prog, variants):
        _no_device()

    with pytest.raises(NoGPUError):
        hp.profile("hello", [(None, ["all"])], outdir=tmp_path, fallback=fallback)


@pytest.mark.skipif(GPU_OK, reason="checks the no-GPU message; a GPU would run the commands")
def test_bench_and_profile_commands_end_in_one_line_without_a_gpu():
    ensure_built("square")
    ensure_built("device_info")
    cases = [["bench", "--quick", "-p", "square"], ["bench", "--programs", "square"], ["profile", "square"],
             ["profile", "square", "--tool", "auto", "--variant", "all"]]
    for args, r in zip(cases, inv_many(cases)):
        assert r.returncode == 1, (args, r.stderr)
        assert "Traceback" not in r.stderr and "ImportError" not in r.stderr, (args, r.stderr)
        last = r.stderr.strip().splitlines()[-1]
        assert "cudaGetDeviceCount" in last and "Install or update the NVIDIA driver" in last \
            or "no CUDA device is visible" in last, (args, r.stderr)
        # Nothing else but (at most) the progress bar's last state.
        assert len(r.stderr.strip().splitlines()) <= 2, (args, r.stderr)
