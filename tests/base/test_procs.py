"""harness/base/procs.py: nothing the lab starts outlives the lab's process, however that process ends
(SIGHUP like SIGTERM; SIGKILL through the group's supervisor), and a child's output is kept bounded.

The checks go by process group and by parentage, read from /proc, never by a process's name."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.base import procs

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A parent process that starts a child group through one of the lab's users of procs and waits. The
# group's program writes its pid to WORK/pid0 (pidR for rank R), and starts a child of its own.
PARENT = r"""
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
user, work = sys.argv[1], Path(sys.argv[2])
mark = f"{{work}}/pid${{{{RANK:-0}}}}"
prog = ["sh", "-c", f'echo $$ > "{{mark}}.tmp" && mv "{{mark}}.tmp" "{{mark}}"; sleep 60 & sleep 60']
try:
    if user == "run_bounded":
        from harness.base import procs
        procs.run_bounded(prog, timeout=120)
    elif user == "inline_compile":
        from harness.compile import jit
        jit._run_nvcc(prog, work / "lib.so")
    elif user == "ranks":
        from harness.calling import launch
        launch.launch(prog, 2, 120.0, folder=work)
except KeyboardInterrupt:
    sys.exit(130)
"""


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, process group) of a live process, None when gone."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return rest[0], int(rest[1]), int(rest[2])


def _all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _descendants(root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for p in _all_pids():
        s = _stat(p)
        if s:
            kids.setdefault(s[1], []).append(p)
    out, todo = set(), [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.add(k)
            todo.append(k)
    return out


def _alive(pids: set[int], groups: set[int]) -> list[int]:
    """Which of `pids` still run, and any process whose group is one of `groups` (zombies are done)."""
    left = []
    for p in _all_pids():
        s = _stat(p)
        if s and s[0] not in ("Z", "X") and (p in pids or s[2] in groups):
            left.append(p)
    return left


def _started(user: str, tmp_path: Path):
    marker = tmp_path / "pid0"
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(root=str(ROOT)), user, str(tmp_path)],
                              start_new_session=True)
    end = time.monotonic() + 30
    while not marker.exists():
        assert parent.poll() is None and time.monotonic() < end, "the child group did not start"
        time.sleep(0.05)
    time.sleep(0.3)  # the program's own child (the background sleep) is up
    program = int(marker.read_text())
    group = _stat(program)[2]
    family = _descendants(parent.pid)
    assert program in family and len(family) >= 3, family  # a group, not a lone process
    assert group != parent.pid  # the child group is not the parent's own
    return parent, family, {group}


def _wait_gone(family: set[int], groups: set[int], deadline_s: float = 5.0) -> list[int]:
    end = time.monotonic() + deadline_s
    while (left := _alive(family, groups)) and time.monotonic() < end:
        time.sleep(0.05)
    return left


def _cleanup(parent, family):
    for p in family:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)
    if parent.poll() is None:
        parent.kill()
        parent.wait()


USERS = ["run_bounded", "inline_compile", "ranks"]


@pytest.mark.parametrize("user", USERS)
def test_a_hangup_stops_the_child_group_as_a_sigterm_does(tmp_path, user):
    """A closed terminal or an ssh drop (SIGHUP) unwinds like Ctrl-C: the group is stopped before the
    parent exits, so nothing of it remains, by group or by parentage."""
    parent, family, groups = _started(user, tmp_path)
    try:
        parent.send_signal(signal.SIGHUP)
        assert parent.wait(timeout=20) == 130, "SIGHUP did not unwind like an interrupt"
        assert _wait_gone(family, groups, 1.0) == [], "the child group outlived a hung-up parent"
        assert not list(tmp_path.glob("cudalab-ranks-*"))
    finally:
        _cleanup(parent, family)


@pytest.mark.parametrize("user", USERS)
def test_a_killed_parent_takes_its_child_group_with_it(tmp_path, user):
    """SIGKILL (a notebook kernel restarted) runs nothing in the parent: the group's supervisor is told
    by the kernel and kills the group, grandchildren included."""
    parent, family, groups = _started(user, tmp_path)
    try:
        parent.kill()
        parent.wait(timeout=10)
        assert _wait_gone(family, groups) == [], "the child group outlived a killed parent"
    finally:
        _cleanup(parent, family)


def test_the_supervisor_passes_the_program_status_on():
    assert procs.run_bounded(["sh", "-c", "exit 7"], timeout=10).returncode == 7
    r = procs.run_bounded(["sh", "-c", "kill -SEGV $$"], timeout=10)
    assert r.returncode == -signal.SIGSEGV and r.what_happened() == "was killed by SIGSEGV"
    with pytest.raises(FileNotFoundError):
        procs.run_bounded(["/nonexistent/program"], timeout=10)


def test_a_program_that_leaves_a_child_running_is_reported_and_the_child_stopped(tmp_path):
    marker = tmp_path / "child"
    t0 = time.monotonic()
    r = procs.run_bounded(["sh", "-c", f'sleep 45 & echo $! > {marker}; echo forked'], timeout=20)
    assert time.monotonic() - t0 < 5, "waited for the child that was left"
    assert r.returncode == 0 and not r.timed_out and r.stdout == "forked\n"
    child = int(marker.read_text())
    assert [p for p, _ in r.left] == [child]
    assert "exited with status 0, and left 1 process(es) running" in r.what_happened()
    assert _wait_gone({child}, set(), 2.0) == []


def test_a_timeout_stops_the_whole_group(tmp_path):
    marker = tmp_path / "child"
    t0 = time.monotonic()
    r = procs.run_bounded(["sh", "-c", f'sleep 45 & echo $! > {marker}; sleep 45'], timeout=1)
    assert r.timed_out and time.monotonic() - t0 < 5
    assert "timed out after 1 s" in r.what_happened(1)
    assert _wait_gone({int(marker.read_text())}, set(), 2.0) == []


def test_output_is_kept_bounded_with_a_head_a_tail_and_the_count_dropped():
    r = procs.run_bounded([sys.executable, "-c", "import sys; sys.stdout.write('A' * 100 + 'x' * 10**7 + 'Z' * 100)"],
                          timeout=60, limit=400)
    assert r.returncode == 0 and r.dropped_stdout == 100 + 10**7 + 100 - 400
    assert r.stdout.startswith("A" * 100 + "x" * 100) and r.stdout.endswith("x" * 100 + "Z" * 100)
    assert f"[... {r.dropped_stdout} bytes of output dropped here" in r.stdout
    assert "bytes of its output were dropped" in r.what_happened()


def test_bounded_output_keeps_at_most_its_limit():
    b = procs.BoundedOutput(10)
    for _ in range(1000):
        b.feed(b"0123456789abc")
    assert len(b.head) == 5 and len(b.tail) == 5 and b.dropped == 13000 - 10
    assert b.head == b"01234" and b.tail == b"89abc"
