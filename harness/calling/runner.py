"""Run build/bin/<prog> with a timeout and hand back stdout, stderr and the exit status."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.base.errors import ProgramError
from harness.compile import build as _build

DEFAULT_TIMEOUT = 120.0
STDERR_TAIL_LINES = 20


@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def executable(prog: str, faults: bool = False) -> Path:
    """build/bin/<prog>, once it is checked to be the file its build wrote (NotBuilt naming the
    command that builds it when it is missing, truncated or changed since). faults=True: the fault
    build's twin, build/faults/bin/<prog> (`make FAULTS=1 ...`, for tests only)."""
    return _build.require(prog, "exe", faults=True) if faults else _build.require(prog, "exe")


def tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def run(prog: str, *args, timeout: float = DEFAULT_TIMEOUT, check: bool = True, prefix: list[str] | None = None,
        env: dict | None = None, faults: bool = False) -> Result:
    """Run `build/bin/<prog> args...`. With check=True a non-zero status raises ProgramError with
    the tail of stderr; a timeout always raises. `prefix` wraps the command (a profiler, say).
    faults=True runs the fault build's twin instead (see executable)."""
    import time

    exe = executable(prog, faults=True) if faults else executable(prog)
    argv = list(prefix or []) + [str(exe)] + [str(a) for a in args]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})}, errors="replace")
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise ProgramError(argv, -1, tail(err), out, timed_out=True) from None
    res = Result(argv, p.returncode, p.stdout, p.stderr, time.perf_counter() - t0)
    if check and p.returncode != 0:
        raise ProgramError(argv, p.returncode, tail(p.stderr), p.stdout)
    return res
