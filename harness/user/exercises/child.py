"""Running a learner's code in a child process, and what comes back from it.

The checker never imports a learner's Python file nor loads their compiled library itself: the
worker (harness/user/exercises/worker.py) does, in a process group of its own, under a deadline.
Two things come back from it:

* its output, stdout and stderr together, kept bounded (`Output`, the lab's procs.BoundedOutput):
  the first and the last few kilobytes and a count of the bytes dropped between them, so a kernel
  that prints in a loop costs the checker no memory;
* records over a pipe of their own (`Channel`): raw results, arrays and small JSON values, never a
  verdict. The checker compares them with the reference and decides. A line the child prints
  decides nothing, and a child that ends early (exit() in a constructor, os._exit() in an import)
  simply has no results: it fails.

The records are parsed as data only (JSON, and .npy arrays with pickling refused), and their total
size is capped, so nothing the learner's code writes into the pipe can run in the checker.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import selectors
import signal
import struct
import subprocess
import time
from dataclasses import dataclass, field

import numpy as np

from harness.base import procs
from harness.base.procs import BoundedOutput, sigterm_as_interrupt, stop_group

OUTPUT_BYTES = 8192  # of a child's output kept: its first 4 kB and its last 4 kB
CHANNEL_MAX_BYTES = 512 << 20  # every case's outputs of the largest exercise fit many times over
_RECORD_MAX_BYTES = 1 << 20
_LINGER_S = 1.0  # after the child exits, how long a grandchild holding its pipes is waited for
CHANNEL_VAR = "CUDALAB_EXERCISE_CHANNEL"  # the pipe's descriptor number, for the worker (which unsets it)


class Output(BoundedOutput):
    """A child's output, kept as procs.BoundedOutput keeps it (its first and last `limit // 2` bytes and
    the count dropped between them), shown as the exercises show it: its first and last lines."""

    def excerpt(self, n: int = 10) -> str:
        """The output's first and last n lines, and what was left out between them."""
        lines = self.text().rstrip("\n").splitlines()
        if len(lines) <= 2 * n + 1:
            return "\n".join(lines)
        hidden = len(lines) - 2 * n - (1 if self.dropped else 0)  # text() puts one line of its own in the gap
        gap = f"{hidden} lines" + (f" and {self.dropped} bytes" if self.dropped else "")
        return "\n".join(lines[:n] + [f"[... {gap} not shown ...]"] + lines[-n:])

    def last_lines(self, n: int = 8) -> str:
        """The output's last n lines (from the tail), with a note of how much came before them."""
        lines = self.text().rstrip().splitlines()
        if len(lines) <= n:
            return "\n".join(lines)
        return f"[... {self.total} bytes of output in all; the last {n} lines:]\n" + "\n".join(lines[-n:])


# --- the records: the child's side ---------------------------------------------------------------

class Channel:
    """The worker's end of the pipe: `send(record, arrays)` writes one record, a JSON object, and the
    arrays that go with it (numpy's .npy format)."""

    def __init__(self, fd: int):
        self._f = os.fdopen(fd, "wb")

    @classmethod
    def from_environment(cls) -> Channel | None:
        """The pipe the checker opened, taken out of the environment before any learner code runs;
        None for a run without one (under compute-sanitizer, whose verdict is its own report)."""
        fd = os.environ.pop(CHANNEL_VAR, None)
        return cls(int(fd)) if fd else None

    def send(self, record: dict, arrays: dict | None = None) -> None:
        arrays = arrays or {}
        blobs = []
        for a in arrays.values():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(a), allow_pickle=False)
            blobs.append(buf.getvalue())
        head = json.dumps({**record, "arrays": list(arrays)}).encode()
        self._f.write(struct.pack(">I", len(head)) + head)
        for b in blobs:
            self._f.write(struct.pack(">Q", len(b)) + b)
        self._f.flush()


class ChannelError(ValueError):
    """The pipe's bytes are not whole records: the child was stopped half-way, or something wrote into it."""


def parse_records(data: bytes) -> list[tuple[dict, dict]]:
    out, pos, n = [], 0, len(data)
    view = memoryview(data)

    def take(k: int) -> bytes:
        nonlocal pos
        if pos + k > n:
            raise ChannelError(f"a record ends after {n - pos} of its {k} bytes")
        b = bytes(view[pos:pos + k])
        pos += k
        return b

    while pos < n:
        (size,) = struct.unpack(">I", take(4))
        if size > _RECORD_MAX_BYTES:
            raise ChannelError(f"a record's header claims {size} bytes")
        try:
            record = json.loads(take(size))
        except ValueError as e:
            raise ChannelError(f"a record is not JSON ({e})") from None
        if not isinstance(record, dict) or not isinstance(record.get("arrays", []), list):
            raise ChannelError("a record is not a JSON object with a list of arrays")
        arrays = {}
        for name in record.pop("arrays", []):
            (size,) = struct.unpack(">Q", take(8))
            try:
                arrays[str(name)] = np.lib.format.read_array(io.BytesIO(take(size)), allow_pickle=False)
            except (ValueError, OSError, EOFError) as e:
                raise ChannelError(f"array {name!r} is not a plain .npy array ({e})") from None
        out.append((record, arrays))
    return out


# --- running the child: the checker's side -------------------------------------------------------

@dataclass
class Outcome:
    """What a child left: `status` None when it was stopped at its deadline (else its exit status,
    negative for a signal), its bounded output, and its records (or why they could not be read)."""
    status: int | None
    output: Output
    records: list = field(default_factory=list)
    channel_error: str | None = None
    seconds: float = 0.0

    @property
    def timed_out(self) -> bool:
        return self.status is None


class Child:
    """A started child: `finish(until)` collects what it leaves, stopping its group at `until`
    (a time.monotonic() instant) and, in every case, once it is done (nothing it started outlives it)."""

    def __init__(self, cmd: list[str], *, env: dict, cwd: str, channel: bool, limit: int = OUTPUT_BYTES):
        self.output = Output(limit)
        self._chan_r = self._chan_w = None
        pass_fds: tuple = ()
        if channel:
            self._chan_r, self._chan_w = os.pipe()
            pass_fds = (self._chan_w,)
            env = {**env, CHANNEL_VAR: str(self._chan_w)}
        self.t0 = time.monotonic()
        try:
            # Its own process group (procs.start): a run stopped at its deadline takes along what it
            # started (under compute-sanitizer, the worker is the sanitizer's child), a Ctrl-C at the
            # terminal reaches the checker alone, which then stops the group, and the group dies with
            # the checker even when the checker is killed outright.
            self.proc = procs.start(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, env=env, cwd=cwd, pass_fds=pass_fds)
        except BaseException:
            self._close_channel()
            raise
        finally:
            if self._chan_w is not None:
                os.close(self._chan_w)  # the child holds the write end now: EOF comes when it is gone
                self._chan_w = None

    def _close_channel(self) -> None:
        for fd in (self._chan_r, self._chan_w):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._chan_r = self._chan_w = None

    def _exited(self) -> bool:
        """The child has ended; it is left unreaped (a zombie), so that its process group's id cannot
        be taken by another process before _end_group has stopped what the child left running."""
        if self.proc.returncode is not None:
            return True
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def _end_group(self) -> None:
        if self.proc.returncode is not None:
            return
        if self._exited():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # whatever it started and left behind
            self.proc.wait()
        else:
            stop_group(self.proc)

    def stop(self) -> None:
        self._end_group()
        self._close_channel()

    def finish(self, until: float) -> Outcome:
        chan = bytearray()
        too_big = False
        timed_out = False
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ, "out")
        if self._chan_r is not None:
            sel.register(self._chan_r, selectors.EVENT_READ, "chan")
        exited_at = None
        try:
            with sigterm_as_interrupt():  # a SIGTERM (a timeout around the check) unwinds like Ctrl-C
                while sel.get_map():
                    now = time.monotonic()
                    if now >= until:
                        timed_out = True
                        break
                    if self._exited():
                        exited_at = exited_at or now
                        if now - exited_at > _LINGER_S:
                            break  # something it started still holds the pipes: stopped below
                    for key, _ in sel.select(min(until - now, 0.25)):
                        data = os.read(key.fd, 1 << 16)
                        if not data:
                            sel.unregister(key.fileobj)
                        elif key.data == "out":
                            self.output.feed(data)
                        elif len(chan) + len(data) > CHANNEL_MAX_BYTES:
                            too_big = True  # read on, so the child is never blocked, but keep nothing more
                        else:
                            chan += data
        finally:
            sel.close()
            self._end_group()  # the deadline, an interrupt, or leftovers of a child that ended
            self.proc.stdout.close()
            self._close_channel()
        out = Outcome(None if timed_out else self.proc.returncode, self.output, seconds=time.monotonic() - self.t0)
        if too_big:
            out.channel_error = f"the results were over {CHANNEL_MAX_BYTES >> 20} MiB"
        else:
            try:
                out.records = parse_records(bytes(chan))
            except ChannelError as e:
                out.channel_error = str(e)
        return out


def run(cmd: list[str], deadline_s: float, **kw) -> Outcome:
    child = Child(cmd, **kw)
    try:
        return child.finish(child.t0 + deadline_s)
    except BaseException:
        child.stop()
        raise


def how_it_ended(status: int) -> str:
    """`exited with status 3` or `was killed by SIGSEGV (a bad memory access)`."""
    if status >= 0:
        return f"exited with status {status}"
    try:
        sig = signal.Signals(-status)
    except ValueError:
        return f"was killed by signal {-status}"
    why = {signal.SIGSEGV: "a bad memory access", signal.SIGABRT: "abort(): an uncaught C++ exception, or a failed "
           "assertion", signal.SIGBUS: "a bad memory access", signal.SIGFPE: "an arithmetic error such as an integer "
           "division by zero", signal.SIGILL: "an illegal instruction", signal.SIGKILL: "killed from outside, "
           "or out of memory"}.get(sig)
    return f"was killed by {sig.name}" + (f" ({why})" if why else "")
