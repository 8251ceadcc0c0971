"""Starting, watching and stopping a child process and everything it starts: the one way the lab does it.

Children that start others (make and its compilers, nvcc's cicc/ptxas/gcc, the NVBench session, a
%%cuda cell's program, the ranks, an exercise's workers) run in a process group of their own, so that
an interrupted parent can stop the whole group at once: waiting for the child, or killing only the
child, would leave the rest of the group running.

Three ways a group could outlive the code that started it, and what closes each:

* Ctrl-C, SIGTERM or SIGHUP (a timeout, a job scheduler, a closed terminal or an ssh drop) to the lab's
  process: `sigterm_as_interrupt` makes the last two unwind like the first, so the code that started
  the group stops it (`stop_group`) before the process exits.
* SIGKILL to the lab's process (a notebook kernel restarted, the OOM killer): nothing in it runs. Each
  group started by `start` is led by a small supervisor (this file run as a script) that asks the
  kernel for a signal when its parent dies (Linux's PR_SET_PDEATHSIG) and then kills its own group.
  The signal reaches the direct child only, which is why the supervisor, not the program, leads the
  group: make -> nvcc -> cicc all die with it.
* A program that exits and leaves a child of its own running (a fork, a `system("x &")`): `run_bounded`
  stops what is left of the group once the program has ended and says what it stopped.

`run_bounded` also keeps the memory a child's output takes bounded: a head and a tail of each stream,
and the count of the bytes dropped between them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

# The signals that mean "stop now" besides Ctrl-C's SIGINT: a timeout or a job scheduler sends SIGTERM,
# a closed terminal or a dropped ssh connection SIGHUP.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

# What a child's output may keep in memory, per stream: half for its head, half for its tail.
OUTPUT_LIMIT = 1 << 20
# After a program has ended, how long to wait for its pipes to close once its group is stopped (a process
# that left the group may still hold them; what it writes after this is not read).
DRAIN_S = 1.0
# How long to wait, after SIGKILL, for a stopped group's processes to be gone.
KILL_WAIT_S = 2.0
_PR_SET_PDEATHSIG = 1
# The signal the kernel sends the supervisor when the lab's process dies: one nobody sends a group.
_PARENT_DIED = signal.SIGUSR1


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
    _await_gone(proc.pid)


def _await_gone(pgid: int) -> None:
    """A SIGKILL is delivered, not yet acted on: a straggler may run on for a moment. Return once the
    group is gone, so that nothing the program started runs past the call that stopped it."""
    gone = time.monotonic() + KILL_WAIT_S
    while group_members(pgid) and time.monotonic() < gone:
        time.sleep(0.01)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While the block runs a child, a SIGTERM or SIGHUP to this process (a timeout, a job scheduler, a
    closed terminal, an ssh drop) unwinds like Ctrl-C, so that the code that started the child stops its
    group and releases what it holds, rather than dying around them and leaving the group running. Only
    the main thread can take a signal handler: elsewhere the block runs as it is (and `start`'s
    supervisor still stops the group if this process dies)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _supervised() -> bool:
    return sys.platform.startswith("linux") and bool(sys.executable)


def _check_runnable(argv: list[str], env: dict | None, cwd) -> None:
    """The errors Popen raises for a program that cannot start, raised here: under the supervisor the
    exec happens one process further down, where the caller could not catch them."""
    prog = str(argv[0])
    if os.sep in prog:
        path = prog if os.path.isabs(prog) or cwd is None else os.path.join(str(cwd), prog)
        if not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", prog)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(13, "Permission denied", prog)
        return
    import shutil

    search = (env if env is not None else os.environ).get("PATH", os.defpath)
    if shutil.which(prog, path=search) is None:
        raise FileNotFoundError(2, "No such file or directory", prog)


def start(argv, *, status_fd: int = -1, **popen_kwargs) -> subprocess.Popen:
    """subprocess.Popen(argv, **popen_kwargs) in a process group of its own that dies with this process.

    The group's leader (Popen's pid, the group's id) is a supervisor: it runs `argv` as its child,
    passes the child's exit status on as its own (a signal as the same signal), and kills the whole
    group if this process dies, however it dies. Stop the group with `stop_group(proc)`. `status_fd`
    (the write end of a pipe) gets the child's own wall and CPU seconds, without the supervisor's."""
    argv = [str(a) for a in argv]
    if not argv:
        raise ValueError("start: an empty command")
    popen_kwargs["start_new_session"] = True
    if not _supervised():
        return subprocess.Popen(argv, **popen_kwargs)
    _check_runnable(argv, popen_kwargs.get("env"), popen_kwargs.get("cwd"))
    if status_fd >= 0:
        popen_kwargs["pass_fds"] = tuple(popen_kwargs.get("pass_fds", ())) + (status_fd,)
    # Imported here, not at the top: the supervisor runs this file with no harness to import.
    from harness.base import paths

    # -I -S: the supervisor needs the standard library only, and none of the environment's Python settings.
    script = paths.ROOT / "harness" / "base" / "procs.py"
    cmd = [sys.executable, "-I", "-S", str(script), str(os.getpid()), str(status_fd), "--", *argv]
    return subprocess.Popen(cmd, **popen_kwargs)


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, name) of every live process in process group `pgid`, from /proc (zombies left out)."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        name, _, rest = stat.partition("(")[2].rpartition(")")
        fields = rest.split()
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            out.append((int(e), name))
    return out


def describe_status(code: int | None) -> str:
    """'exited with status 3', 'was killed by SIGSEGV'."""
    if code is None:
        return "is still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


class BoundedOutput:
    """A stream's bytes with a bounded memory: the first `limit // 2` bytes, the last `limit // 2`, and
    the count of those dropped in between."""

    def __init__(self, limit: int = OUTPUT_LIMIT):
        if limit < 2:
            raise ValueError(f"the output limit must be at least 2 bytes, got {limit}")
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    @property
    def total(self) -> int:
        """Every byte fed, kept or dropped."""
        return len(self.head) + len(self.tail) + self.dropped

    def feed(self, data: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        extra = len(self.tail) - self.half
        if extra > 0:
            del self.tail[:extra]
            self.dropped += extra

    def text(self) -> str:
        """The kept bytes, decoded; where bytes were dropped, a line between head and tail says how many."""
        head = self.head.decode(errors="replace")
        tail = self.tail.decode(errors="replace")
        if not self.dropped:
            return head + tail
        gap = (f"\n[... {self.dropped} bytes of output dropped here: the first {len(self.head)} and the last "
               f"{len(self.tail)} are kept ...]\n")
        return head + gap + tail


@dataclass
class Finished:
    """What `run_bounded` saw. `returncode` is negative for a signal (-9: SIGKILL), as in subprocess;
    `stdout`/`stderr` hold at most a bounded head and tail (`dropped_*`: the bytes left out);
    `left` the processes the program left running in its group when it ended, all stopped since;
    `child_seconds`/`child_cpu` the program's own wall and user+sys CPU seconds where known."""
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    seconds: float = 0.0
    dropped_stdout: int = 0
    dropped_stderr: int = 0
    left: list[tuple[int, str]] = field(default_factory=list)
    child_seconds: float | None = None
    child_cpu: float | None = None

    @property
    def dropped(self) -> int:
        return self.dropped_stdout + self.dropped_stderr

    def what_happened(self, timeout: float | None = None) -> str:
        """One clause: how the program ended, what was stopped with it, what output was dropped."""
        if self.timed_out:
            what = "timed out" + (f" after {timeout:g} s" if timeout else "") + "; its process group was stopped"
        else:
            what = describe_status(self.returncode)
        if self.left and not self.timed_out:
            names = ", ".join(f"{n} (pid {p})" for p, n in self.left[:5]) + (" ..." if len(self.left) > 5 else "")
            what += f", and left {len(self.left)} process(es) running ({names}), stopped since"
        if self.dropped:
            what += f"; {self.dropped} bytes of its output were dropped (a head and a tail are kept)"
        return what


def run_bounded(argv, *, timeout: float, env: dict | None = None, cwd=None, limit: int = OUTPUT_LIMIT,
                stdin=subprocess.DEVNULL) -> Finished:
    """Run `argv` in a group of its own (`start`) with a deadline and a bounded capture of its stdout and
    stderr (`BoundedOutput`). At the deadline, or when this process is interrupted (Ctrl-C, SIGTERM,
    SIGHUP: the interrupt is raised again), the whole group is stopped. When the program ends before,
    whatever it left running in its group is stopped too and listed in `left`. Raises what Popen raises
    for a program that cannot start."""
    import selectors

    if not timeout > 0:
        raise ValueError(f"the timeout must be a positive number of seconds, got {timeout!r}")
    argv = [str(a) for a in argv]
    outs = {"stdout": BoundedOutput(limit), "stderr": BoundedOutput(limit)}
    status_r, status_w = os.pipe() if _supervised() else (-1, -1)
    t0 = time.monotonic()
    try:
        proc = start(argv, status_fd=status_w, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=stdin,
                     env=env, cwd=cwd)
    finally:
        if status_w >= 0:
            os.close(status_w)
    timed_out, left = False, []
    sel = selectors.DefaultSelector()
    try:
        for name in outs:
            stream = getattr(proc, name)
            os.set_blocking(stream.fileno(), False)
            sel.register(stream, selectors.EVENT_READ, outs[name])
        with sigterm_as_interrupt():
            end = t0 + timeout
            while sel.get_map():
                _read_ready(sel, min(0.05, max(0.0, end - time.monotonic())))
                if proc.poll() is not None:
                    break
                if time.monotonic() >= end:
                    timed_out = True
                    break
            if not timed_out:
                try:
                    proc.wait(timeout=max(0.0, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
        if timed_out:
            stop_group(proc)
        else:
            # The program has ended; anything still in its group is a process it left behind.
            left = [m for m in group_members(proc.pid) if m[0] != proc.pid]
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            if left:
                _await_gone(proc.pid)
        drain = time.monotonic() + DRAIN_S
        while sel.get_map() and time.monotonic() < drain:
            _read_ready(sel, 0.05)
    except BaseException:
        stop_group(proc)
        raise
    finally:
        sel.close()
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        if proc.poll() is None:
            stop_group(proc)
    wall, cpu = _read_status(status_r)
    return Finished(argv, proc.returncode, outs["stdout"].text(), outs["stderr"].text(), timed_out,
                    time.monotonic() - t0, outs["stdout"].dropped, outs["stderr"].dropped, left, wall, cpu)


def _read_ready(sel, wait: float) -> None:
    for key, _ in sel.select(wait):
        try:
            data = os.read(key.fd, 1 << 16)
        except BlockingIOError:
            continue
        if data:
            key.data.feed(data)
        else:
            sel.unregister(key.fileobj)


def _read_status(fd: int) -> tuple[float | None, float | None]:
    if fd < 0:
        return None, None
    try:
        os.set_blocking(fd, False)
        with contextlib.suppress(BlockingIOError):
            words = os.read(fd, 256).split()
            if len(words) == 3:
                return float(words[0]), float(words[1]) + float(words[2])
        return None, None
    finally:
        os.close(fd)


# =================================================================================================
# The supervisor: this file run as a script (`start`), before any of the lab is imported
# =================================================================================================

def _supervise(args: list[str]) -> None:
    """argv: PARENT_PID STATUS_FD -- PROGRAM ARGS... (see `start`)."""
    import ctypes
    import resource

    parent, status_fd, argv = int(args[0]), int(args[1]), args[3:]

    def parent_died(signum, frame):
        # The signal also comes when only the thread that started us ends: the lab's process lives on then.
        if os.getppid() != parent:
            os.killpg(0, signal.SIGKILL)

    signal.signal(_PARENT_DIED, parent_died)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(_PARENT_DIED), 0, 0, 0)
    if os.getppid() != parent:  # it died before the request took effect
        os.killpg(0, signal.SIGKILL)
    # A stop sent to the group reaches the program directly; the supervisor outlives it (make may take
    # seconds to delete what it was writing) to pass its status on.
    for s in (signal.SIGINT, *STOP_SIGNALS):
        signal.signal(s, lambda signum, frame: None)
    if status_fd >= 0:
        os.set_inheritable(status_fd, False)
    defaults = {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, _PARENT_DIED, *STOP_SIGNALS}
    t0 = time.monotonic()
    try:
        pid = os.posix_spawnp(argv[0], argv, os.environ, setsigdef=defaults)
    except OSError as e:
        print(f"cannot run {argv[0]}: {e.strerror}", file=sys.stderr, flush=True)
        os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    if status_fd >= 0:
        with contextlib.suppress(OSError):
            os.write(status_fd, f"{time.monotonic() - t0:.6f} {usage.ru_utime:.6f} {usage.ru_stime:.6f}\n".encode())
            os.close(status_fd)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(ValueError, OSError):  # the program's core dump, if any, is its own, not ours
            resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        with contextlib.suppress(ValueError, OSError):  # SIGKILL's and SIGSTOP's cannot be set, nor need to be
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    _supervise(sys.argv[1:])
