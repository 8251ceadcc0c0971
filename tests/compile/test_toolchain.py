"""Toolchain discovery: PATH, the tool's variable, CUDA_HOME, install folders."""

from __future__ import annotations

import os
import stat

import pytest

from harness.compile import toolchain


@pytest.fixture(autouse=True)
def fresh_cache():
    toolchain.find.cache_clear()
    yield
    toolchain.find.cache_clear()


def _fake_tool(path, version_text):
    path.write_text(f"#!/bin/sh\necho '{version_text}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_nvcc_and_gcc_are_found():
    nvcc = toolchain.find("nvcc")
    assert nvcc.found, "CI and dev machines have nvcc"
    assert nvcc.version and nvcc.version.split(".")[0].isdigit()
    assert toolchain.find("gcc").found
    home = toolchain.cuda_home()
    assert home is not None and (home / "bin").is_dir()


def test_missing_tool_is_reported_not_raised(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setitem(toolchain._USUAL, "ncu", [])
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    t = toolchain.find("ncu")
    assert not t.found and t.path is None


def test_env_variable_is_used(monkeypatch, tmp_path):
    fake = _fake_tool(tmp_path / "my-nsys", "NVIDIA Nsight Systems version 2099.1.1")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("NSYS", str(fake))
    t = toolchain.find("nsys")
    assert t.path == str(fake) and t.how == "$NSYS" and t.version == "2099.1.1"


def test_nsys_inside_nsight_compute_is_found(monkeypatch, tmp_path):
    d = tmp_path / "nsight-compute" / "2025.3.1" / "host" / "target-linux-x64"
    d.mkdir(parents=True)
    fake = _fake_tool(d / "nsys", "NVIDIA Nsight Systems version 2025.3.1.90")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setitem(toolchain._USUAL, "nsys", [str(tmp_path / "nsight-compute" / "*" / "host" / "target-linux-x64" / "nsys")])
    t = toolchain.find("nsys")
    assert t.path == str(fake)


def test_cuda_home_bin_is_searched(monkeypatch, tmp_path):
    (tmp_path / "bin").mkdir()
    fake = _fake_tool(tmp_path / "bin" / "compute-sanitizer", "Compute Sanitizer Version 2099.1.0")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("COMPUTE_SANITIZER", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    t = toolchain.find("compute-sanitizer")
    assert t.path == str(fake) and t.how == "$CUDA_HOME"


def test_libcudart_is_found():
    p = toolchain.find_libcudart()
    assert p and os.path.exists(p)


def test_nsys_importer_check(monkeypatch, tmp_path):
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    (tmp_path / "libdw.so.1").write_bytes(b"")
    assert toolchain.nsys_importer_missing() is None
