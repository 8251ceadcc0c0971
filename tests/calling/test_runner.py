from __future__ import annotations

import pytest

from harness.base.errors import ProgramError
from harness.calling import runner
from harness.compile import build


@pytest.fixture(scope="module", autouse=True)
def built():
    build.build(build.targets("hello"))


def test_bad_argv_is_a_program_error_with_stderr_tail():
    # Argument checks run before any CUDA call, so this holds with or without a GPU.
    with pytest.raises(ProgramError) as ei:
        runner.run("hello", "loop", "0", "4")
    assert ei.value.returncode == 2
    assert "BLOCKS must be a positive integer" in ei.value.stderr_tail


def test_unknown_mode_prints_usage():
    r = runner.run("hello", "nope", check=False)
    assert r.returncode == 2 and "usage" in r.stderr


def test_timeout_raises(monkeypatch):
    monkeypatch.setattr(runner, "executable", lambda prog: "/bin/sleep")
    with pytest.raises(ProgramError) as ei:
        runner.run("sleep", 5, timeout=0.3)
    assert ei.value.timed_out


def test_missing_binary_says_to_build(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "bin_path", lambda prog: tmp_path / prog)
    with pytest.raises(FileNotFoundError, match="invoke build"):
        runner.run("hello", "all")


def test_cpu_hello_runs_anywhere():
    r = runner.run("hello", "cpu")
    assert r.ok and 'msg="Hello World from the CPU!"' in r.stdout
