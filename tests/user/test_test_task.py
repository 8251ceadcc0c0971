"""`invoke test` stopped part way: one line, status 130, pytest and its workers gone, and the junit file
of the last whole run (what `invoke report` summarises) kept. The task runs through invoke's own CLI in a
child whose build/ is a temporary folder, so this suite's own results are never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import pythonpath, sigint_as_from_a_terminal
from harness.compile import build

# invoke's CLI over tasks.py, with the lab's build/ moved to argv[1] (tasks read it at call time).
DRIVER = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from harness.base import paths
    paths.BUILD = Path(sys.argv[1])
    import tasks
    from invoke import Collection, Program
    Program(namespace=Collection.from_module(tasks), name="invoke", binary="invoke").run(["invoke", *sys.argv[2:]])
""")

SLOW_TEST = textwrap.dedent("""\
    import os, time
    def test_waits():
        with open({marker!r}, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
""")


def _start(tmp_path, test_file):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": pythonpath(build.ROOT)}
    return subprocess.Popen([sys.executable, str(driver), str(tmp_path / "build"), "test", "--jobs", "1",
                             "--args", f"{test_file} -p no:cacheprovider -q"],
                            cwd=build.ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_as_from_a_terminal,
                            start_new_session=True)


@pytest.mark.parametrize("to_group", [False, True], ids=["to-invoke", "to-the-terminals-group"])
def test_ctrl_c_during_invoke_test_is_one_line_and_keeps_the_last_junit(tmp_path, to_group):
    results = tmp_path / "build" / "test-results"
    results.mkdir(parents=True)
    (results / "junit.xml").write_text("<testsuites>the last whole run</testsuites>")
    marker = tmp_path / "started"
    test_file = tmp_path / "suite" / "test_slow.py"
    test_file.parent.mkdir()
    test_file.write_text(SLOW_TEST.format(marker=str(marker)))
    proc = _start(tmp_path, test_file)
    try:
        deadline = time.monotonic() + 120
        while not (marker.exists() and marker.read_text()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), proc.communicate(timeout=30)
        pytest_pid = int(marker.read_text())
        if to_group:  # a terminal's Ctrl-C: the foreground group, which the task's pytest is not in
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, out, err)
    # The task's own words are its last line, alone (pytest's own warnings, if any, come before it).
    lines = err.strip().splitlines()
    # The task's own lines: the one before pytest starts, and the interrupt's, which ends the output.
    said = [x for x in lines if x.startswith("test:")]
    assert lines[-1].startswith("test: interrupted") and [x for x in said if not x.startswith("test: starting pytest")] == lines[-1:], err
    assert "Traceback" not in err and "closed file" not in err
    assert (results / "junit.xml").read_text() == "<testsuites>the last whole run</testsuites>"
    assert sorted(p.name for p in results.iterdir()) == ["junit.xml"]  # no temporary left
    for _ in range(50):
        if not build._running(pytest_pid):
            break
        time.sleep(0.1)
    assert not build._running(pytest_pid), "the test process outlived the task"


def test_a_whole_run_publishes_its_junit(tmp_path):
    results = tmp_path / "build" / "test-results"
    results.mkdir(parents=True)
    (results / "junit.xml").write_text("old")
    test_file = tmp_path / "suite" / "test_quick.py"
    test_file.parent.mkdir()
    test_file.write_text("def test_ok():\n    pass\n")
    proc = _start(tmp_path, test_file)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    assert "test_ok" in (results / "junit.xml").read_text()
    assert sorted(p.name for p in results.iterdir()) == ["junit.xml"]
