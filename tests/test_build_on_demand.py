"""conftest.py's build on demand: tests build what they load (ensure_built, built_names) rather
than skip for want of `invoke build`; a failed build fails the test with one line; without a GPU, GPU
tests are skipped before anything is built."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import conftest
from conftest import built_names, ensure_built, pythonpath
from harness.base.errors import BuildError, NotBuilt
from harness.compile import build

DIAG = build.Diagnostic("cuda/x/x.cu", 12, None, "error", 'identifier "foo" is undefined')


@pytest.fixture
def fake_build(monkeypatch):
    """build.build and build.require stand-ins: `calls` lists each build's targets; `fail` (a BuildError)
    makes the next builds raise it; `stale` makes require raise NotBuilt until the next build."""
    state = {"calls": [], "fail": None, "stale": False}

    def fake(targets_, **kw):
        state["calls"].append(list(targets_))
        if state["fail"] is not None:
            raise state["fail"]
        state["stale"] = False

    def require(prog, kind="lib"):
        if state["stale"]:
            raise NotBuilt(build.lib_path(prog), prog, "changed since")
        return build.lib_path(prog) if kind == "lib" else build.bin_path(prog)

    monkeypatch.setattr(build, "build", fake)
    monkeypatch.setattr(build, "require", require)
    monkeypatch.setattr(conftest, "_BUILT", set())
    return state


def test_ensure_built_builds_once_and_again_when_changed(fake_build):
    assert ensure_built("square") == build.lib_path("square")
    assert ensure_built("square", "exe") == build.bin_path("square")
    assert fake_build["calls"] == [build.targets("square")]  # the second call trusts the first build
    fake_build["stale"] = True  # the library changed since: build it again, not fail on the old one
    assert ensure_built("square") == build.lib_path("square")
    assert len(fake_build["calls"]) == 2


def test_a_failed_build_fails_with_its_first_diagnostic(fake_build):
    fake_build["fail"] = BuildError("build failed: 1 error(s)", [DIAG], "log")
    with pytest.raises(pytest.fail.Exception) as ei:
        ensure_built("square")
    assert str(ei.value) == f"building square failed: {DIAG}"
    assert "square" not in conftest._BUILT


def test_a_failed_make_without_diagnostics_fails_with_its_last_line(fake_build):
    fake_build["fail"] = BuildError("make failed (status 2):\nmake: *** No rule to make target 'x'.  Stop.")
    with pytest.raises(pytest.fail.Exception, match=r"^building square failed: make: \*\*\* No rule"):
        ensure_built("square")


def test_built_names_builds_first_with_a_gpu_only(fake_build, monkeypatch):
    monkeypatch.setattr(conftest, "GPU_OK", False)
    assert built_names(lambda: ["a", "b"], "square") == ["a", "b"]
    assert fake_build["calls"] == []  # no GPU: collecting never builds

    def not_built():
        raise NotBuilt(build.lib_path("square"), "square")

    [placeholder] = built_names(not_built, "square")
    assert placeholder.values == ("not-built",) and placeholder.marks[0].name == "skip"

    monkeypatch.setattr(conftest, "GPU_OK", True)
    assert built_names(lambda: ["a"], "square") == ["a"]
    assert fake_build["calls"] == [build.targets("square")]
    assert built_names(lambda: ["a"], "square") == ["a"] and len(fake_build["calls"]) == 1

    fake_build["fail"] = BuildError("build failed: 1 error(s)", [DIAG], "log")
    [placeholder] = built_names(lambda: ["a"], "mandelbrot")
    assert placeholder.values == ("build-failed",)
    assert placeholder.marks[0].name == "build_failed"
    assert placeholder.marks[0].args == (f"building mandelbrot failed: {DIAG}",)


SAMPLE = '''
import pytest

from conftest import ensure_built
from harness.compile import build


def _never(*a, **k):
    raise AssertionError("a GPU test built without a GPU")


build.build = _never


@pytest.mark.gpu
def test_gpu_builds_only_once_it_runs():
    ensure_built("square")


@pytest.mark.build_failed("building x failed: cuda/x/x.cu:12: error: boom")
def test_placeholder():
    pass
'''


@pytest.mark.skipif(conftest.GPU_OK, reason="checks the run without a GPU")
def test_without_a_gpu_gpu_tests_skip_before_building(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-ra", "-p", "no:cacheprovider",
                        "-o", "addopts=", str(tmp_path / "test_sample.py")], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": pythonpath(build.ROOT / "tests", build.ROOT)})
    out = r.stdout
    assert r.returncode == 1 and "1 skipped" in out and "1 error" in out, out + r.stderr  # the fixture fails it
    assert "needs a GPU" in out and "a GPU test built" not in out
    assert "building x failed: cuda/x/x.cu:12: error: boom" in out
