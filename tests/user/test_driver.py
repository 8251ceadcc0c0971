"""A driver older than the toolkit (nvcc 13.0's programs need driver 580, CUDA 13.0): `invoke doctor`,
`invoke build`, NoGPUError and the executables all say the same one line with the two ways out.
CPU tests: the driver is a recorded nvidia-smi header (a Colab T4 on driver 535, CUDA 12.2) or a
cudaDriverGetVersion number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from invoke import Context, Exit

from harness.base import context, errors
from harness.base.context import raise_for_code
from harness.base.errors import DriverTooOldError, NoGPUError, ToolMissing
from harness.calling import cudart
from harness.compile import build, toolchain
from harness.user import doctor

FIXTURE = Path(__file__).parent.parent / "fixtures" / "nvidia_smi_535_t4_colab.txt"
LINE_12_2 = ("the NVIDIA driver supports CUDA 12.2, older than the CUDA 13.0 these programs are built with "
             "(CUDA 13.0 needs driver 580 or newer): update the NVIDIA driver, or use a CUDA toolkit the driver "
             "supports (12.2 or older)")


@pytest.fixture
def colab_t4(monkeypatch):
    """No libcudart to ask (cudaDriverGetVersion unavailable): nvidia-smi's recorded header answers;
    nvcc is 13.0.88."""
    def no_cudart():
        raise ToolMissing("libcudart")

    monkeypatch.setattr(cudart, "driver_version", no_cudart)
    monkeypatch.setattr(doctor, "_nvidia_smi_text", lambda: FIXTURE.read_text())
    monkeypatch.setattr(toolchain, "find", lambda name: toolchain.Tool(name, "/x/nvcc", "13.0.88", "PATH"))


def test_nvidia_smi_header_is_read():
    assert doctor.nvidia_smi_cuda_version(FIXTURE.read_text()) == 12020
    assert doctor.nvidia_smi_cuda_version("NVIDIA-SMI has failed because it couldn't communicate") == 0


def test_the_sentence_for_each_pair_of_versions():
    assert errors.driver_too_old_line(12020, 13000) == LINE_12_2
    assert errors.driver_too_old_line(13000, 13000) is None   # the same: fine
    assert errors.driver_too_old_line(13010, 13000) is None   # newer driver: fine
    assert errors.driver_too_old_line(0, 13000) is None       # no driver at all is another problem
    assert "CUDA 13.1 needs a newer driver" in errors.driver_too_old_line(13000, 13010)


def test_doctor_says_it_in_one_line_and_fails(colab_t4):
    drv, source = doctor.driver_cuda_version()
    assert (drv, source) == (12020, "nvidia-smi")
    row = doctor.check_driver()
    assert not row.ok and not row.optional and row.detail == LINE_12_2
    assert doctor.driver_problem() == LINE_12_2


def test_doctor_prefers_the_runtime_driver_query(monkeypatch):
    monkeypatch.setattr(cudart, "driver_version", lambda: 12080)
    monkeypatch.setattr(doctor, "_nvidia_smi_text", lambda: pytest.fail("nvidia-smi asked although the runtime knew"))
    monkeypatch.setattr(toolchain, "find", lambda name: toolchain.Tool(name, "/x/nvcc", "13.0.88", "PATH"))
    assert doctor.driver_cuda_version() == (12080, "cudaDriverGetVersion")
    assert "supports CUDA 12.8" in doctor.driver_problem()
    monkeypatch.setattr(cudart, "driver_version", lambda: 13000)
    assert doctor.driver_problem() is None and doctor.check_driver().ok


def test_no_driver_is_a_warning_and_does_not_stop_a_build(monkeypatch):
    monkeypatch.setattr(cudart, "driver_version", lambda: 0)
    monkeypatch.setattr(doctor, "_nvidia_smi_text", lambda: "")
    row = doctor.check_driver()
    assert not row.ok and row.optional
    doctor.require_driver()  # CI builds with no driver at all


def test_invoke_build_refuses_with_the_same_line(colab_t4, monkeypatch):
    import tasks

    monkeypatch.setattr(build, "build_programs", lambda *a, **k: pytest.fail("compiled although the driver is too old"))
    with pytest.raises(Exit) as ei:
        tasks.build(Context())
    assert str(ei.value.message) == f"build: {LINE_12_2}"
    with pytest.raises(DriverTooOldError, match=re.escape(LINE_12_2)):
        doctor.require_driver()


def test_no_gpu_error_for_code_35_names_the_versions(monkeypatch):
    monkeypatch.setattr(context, "_lost", None)
    monkeypatch.setattr(cudart, "driver_version", lambda: 12020)
    monkeypatch.setattr(cudart, "runtime_version", lambda: 13000)
    with pytest.raises(NoGPUError) as ei:
        raise_for_code(35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime "
                       "version", where="square_run")
    assert str(ei.value) == f"square_run: {LINE_12_2}"
    assert "insufficient" not in str(ei.value)
    # No driver at all (cudaDriverGetVersion gives 0): the old hint, which says to install one.
    monkeypatch.setattr(cudart, "driver_version", lambda: 0)
    with pytest.raises(NoGPUError, match="no usable NVIDIA driver"):
        raise_for_code(35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient")


def test_executables_print_the_same_sentence():
    """cuda/common/check.cuh spells the sentence for the executables: its format is errors.DRIVER_TOO_OLD,
    and its one toolkit with a known driver branch agrees with errors.MIN_DRIVER."""
    text = (build.CUDA_DIR / "common" / "check.cuh").read_text()
    m = re.search(r"#define CUDALAB_DRIVER_TOO_OLD\s*\\\s*((?:\"[^\"]*\"\s*\\?\s*)+)", text)
    assert m, "CUDALAB_DRIVER_TOO_OLD not found in check.cuh"
    c_format = "".join(re.findall(r"\"([^\"]*)\"", m.group(1)))
    assert c_format == errors.DRIVER_TOO_OLD
    assert '"CUDA 13.0 needs driver 580 or newer"' in text and errors.MIN_DRIVER == {(13, 0): "580"}
