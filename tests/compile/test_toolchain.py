"""Toolchain discovery: PATH, the tool's variable, CUDA_HOME, install folders."""

from __future__ import annotations

import os
import stat

import pytest

from harness.base import paths
from harness.base.errors import ToolMissing
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


# --- one "tool missing" error, each naming its fix -------------------------------------------------

def _nowhere(monkeypatch, name):
    real = toolchain.find
    monkeypatch.setattr(toolchain, "find", lambda n: toolchain.Tool(n, None) if n == name else real(n))


def test_require_raises_tool_missing_with_the_fix(monkeypatch):
    _nowhere(monkeypatch, "nvcc")
    with pytest.raises(ToolMissing) as e:
        toolchain.require("nvcc")
    assert isinstance(e.value, FileNotFoundError) and e.value.tool == "nvcc"
    assert str(e.value).startswith("nvcc not found (searched PATH, $NVCC, $CUDA_HOME/bin")
    assert str(e.value).endswith(": put it on PATH, set CUDA_HOME, or `pip install -e '.[toolkit]'`")


def test_every_nvcc_user_raises_the_same_error(monkeypatch, tmp_path):
    from harness.compile import build, jit, sass
    from harness.profiling import sanitize

    _nowhere(monkeypatch, "nvcc")
    with pytest.raises(ToolMissing, match=r"^nvcc not found"):
        build.make_command(["build/bin/hello"])
    with pytest.raises(ToolMissing, match=r"^nvcc not found"):
        jit._nvcc()
    _nowhere(monkeypatch, "compute-sanitizer")
    with pytest.raises(ToolMissing, match=r"^compute-sanitizer not found .*install the CUDA toolkit"):
        sanitize.find_sanitizer()
    monkeypatch.setattr(sass, "find_cuobjdump", lambda: None)
    with pytest.raises(ToolMissing, match=r"^cuobjdump not found"):
        sass.dump(tmp_path / "x")
    lone = tmp_path / "bin"
    lone.mkdir()
    monkeypatch.setattr(sass, "find_cuobjdump", lambda: str(lone / "cuobjdump"))
    monkeypatch.setenv("PATH", str(lone))
    with pytest.raises(ToolMissing, match=r"^nvdisasm not found \(cuobjdump at .* runs it"):
        sass.dump(tmp_path / "x")


def test_libcudart_missing_is_tool_missing(monkeypatch):
    from harness.calling import cudart

    monkeypatch.setattr(toolchain, "find_libcudart", lambda: None)
    cudart.lib.cache_clear()
    try:
        with pytest.raises(ToolMissing, match=r"^libcudart not found .*set CUDA_HOME"):
            cudart.lib()
    finally:
        cudart.lib.cache_clear()


def test_every_fix_names_an_extra_that_exists_and_doctor_prints_it(monkeypatch):
    """A fix that names `pip install -e '.[x]'` names an extra pyproject.toml defines (`.[bench]` did
    not exist, and `invoke doctor` printed it)."""
    import re

    from harness.base import errors
    from harness.measuring import timing
    from harness.user import doctor

    text = (paths.ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^(\w+) = \[", section, re.M))
    assert {"dev", "toolkit"} <= extras
    named = {x for fix in errors.TOOL_FIXES.values() for x in re.findall(r"\.\[(\w+)\]", fix)}
    assert named and named <= extras, named - extras
    assert '"cuda-bench[cu13]' in text.split("dependencies = [", 1)[1].split("]\n", 1)[0]  # a base dependency
    monkeypatch.setattr(timing, "engine_version", lambda: None)
    row = next(c for c in doctor.check_packages() if c.item == "python:cuda-bench")
    assert not row.ok and row.fix == errors.TOOL_FIXES["cuda-bench"] and row.fix.startswith("`pip install -e .`")
    with pytest.raises(ToolMissing, match=r"^cuda-bench not found .*`pip install -e \.`"):
        timing.require_engine()
