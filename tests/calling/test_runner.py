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


def test_a_timeout_stops_what_the_program_started(monkeypatch, tmp_path):
    from pathlib import Path

    monkeypatch.setattr(runner, "executable", lambda prog: "/bin/sh")
    pidfile = tmp_path / "child.pid"
    with pytest.raises(ProgramError) as ei:
        runner.run("sh", "-c", f"sleep 45 & echo $! > {pidfile}; sleep 45", timeout=1)
    assert ei.value.timed_out
    pid = int(pidfile.read_text())
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"), "its child runs on"


def test_output_past_the_limit_is_cut_and_said(monkeypatch):
    monkeypatch.setattr(runner, "executable", lambda prog: "/bin/sh")
    monkeypatch.setattr(runner, "OUTPUT_LIMIT", 1000)
    r = runner.run("sh", "-c", "yes | head -c 100000", check=False)
    assert r.ok and r.dropped == 99000 and len(r.stdout) < 1200
    with pytest.raises(ProgramError, match="99000 bytes of its output were dropped"):
        runner.run("sh", "-c", "yes | head -c 100000")
