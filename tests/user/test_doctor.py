"""`invoke doctor` says what the build will use: the gcc nvcc runs (the one on PATH), and a CUDA folder
whose path make cannot hold."""

from __future__ import annotations

import os
import shutil

import pytest

from harness.compile import toolchain
from harness.user import doctor


@pytest.fixture
def fresh_toolchain():
    toolchain.find.cache_clear()
    toolchain._nvcc_top.cache_clear()
    yield
    toolchain.find.cache_clear()
    toolchain._nvcc_top.cache_clear()


def _row(item: str) -> doctor.Check | None:
    return next((r for r in doctor.check_tools() if r.item == item), None)


def test_gcc_off_path_is_missing_as_the_build_finds_it(monkeypatch, tmp_path, fresh_toolchain):
    """With no gcc on PATH, doctor said `OK gcc /usr/bin/gcc` (a fixed fallback) and the build then failed:
    nvcc runs the gcc on PATH as its host compiler."""
    nvcc = toolchain.find("nvcc").path
    empty = tmp_path / "bin"
    empty.mkdir()
    if nvcc:
        (empty / "nvcc").symlink_to(nvcc)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CC", raising=False)
    toolchain.find.cache_clear()
    row = _row("gcc")
    assert row is not None and not row.ok and "PATH" in row.detail, row
    assert "MISSING gcc" in "\n".join(doctor.lines([row], width=200))


def test_gcc_is_the_one_on_path(fresh_toolchain):
    if shutil.which("gcc") is None:
        pytest.skip("no gcc on PATH")
    row = _row("gcc")
    assert row.ok and row.detail.startswith(shutil.which("gcc"))


@pytest.mark.skipif(not toolchain.find("nvcc").found, reason="needs nvcc")
def test_a_cuda_folder_with_a_space_is_named(monkeypatch, tmp_path, fresh_toolchain):
    """The compile quotes nvcc, but make's file lists split at spaces: doctor says what then goes missing."""
    home = toolchain.cuda_home()
    spaced = tmp_path / "my cuda"
    spaced.symlink_to(home)
    monkeypatch.setenv("CUDA_HOME", str(spaced))
    row = _row("CUDA folder")
    assert row is not None and not row.ok and row.optional and str(spaced) in row.detail, row
    monkeypatch.setenv("CUDA_HOME", str(home))
    assert _row("CUDA folder") is None or " " in str(home)


@pytest.mark.skipif(not toolchain.find("nvcc").found, reason="needs nvcc")
def test_the_cuda_folder_of_an_nvcc_under_a_space_is_read_whole(monkeypatch, tmp_path, fresh_toolchain):
    """`nvcc --dryrun` prints `TOP=<folder>` on a line of its own; the folder was cut at its first space."""
    spaced = tmp_path / "my cuda"
    spaced.symlink_to(toolchain.cuda_home())
    top = toolchain._nvcc_top(str(spaced / "bin" / "nvcc"))
    assert top == toolchain.cuda_home().resolve(), top
    assert os.path.isdir(top / "include")
