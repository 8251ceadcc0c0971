"""Stopping a child process and everything it started: the one way the lab does it.

Children that start others (make and its compilers, nvcc's cicc/ptxas/gcc, the NVBench session, an
exercise's workers) run in a process group of their own (start_new_session=True), so that an
interrupted parent can stop the whole group at once: waiting for the child, or killing only the
child, would leave the rest of the group running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading


def stop_group(proc: subprocess.Popen, grace_s: float = 1.0, first: int = signal.SIGTERM) -> None:
    """`first` to the child's process group (make takes SIGINT, and then deletes the targets it was
    writing), SIGKILL to whatever is left after `grace_s`, then reap the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, first)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):  # stragglers, once the leader is gone too
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While the block runs a child, a SIGTERM to this process (a timeout, a closed terminal, a job
    scheduler) unwinds like Ctrl-C, so that the code that started the child stops its group and
    releases what it holds, rather than dying around them and leaving the group running. Only the main
    thread can take a signal handler: elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
