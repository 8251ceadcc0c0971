"""Run build/bin/<prog> with a timeout and hand back stdout, stderr and the exit status.

The program runs through harness/base/procs.py's run_bounded: in a process group of its own that a
timeout or an interrupt stops whole and that dies with this process, its output kept to a bounded head
and tail."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.base import procs
from harness.base.errors import ProgramError
from harness.compile import build as _build

DEFAULT_TIMEOUT = 120.0
STDERR_TAIL_LINES = 20
# A lab program's output is parsed whole: far more than any of them prints, and still a bound.
OUTPUT_LIMIT = 64 << 20


@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float = 0.0
    dropped: int = 0  # bytes of output left out (the middle of a stream past OUTPUT_LIMIT)

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
    faults=True runs the fault build's twin instead (see executable). Output beyond OUTPUT_LIMIT per
    stream is cut from the middle; with check=True that raises too (a parser would read a partial run)."""

    exe = executable(prog, faults=True) if faults else executable(prog)
    return run_command(list(prefix or []) + [str(exe)] + [str(a) for a in args], timeout=timeout, check=check,
                       env=env)


def run_command(argv: list, *, timeout: float = DEFAULT_TIMEOUT, check: bool = False, env: dict | None = None) -> Result:
    """Run any command line the way `run` runs a program: the tool a profiler or sanitizer wraps around
    one (its whole argv already built), or a tool over a report it wrote (`nsys stats`, `ncu --import`).
    `env` is added to this process's environment. A timeout raises ProgramError(timed_out=True); with
    check=True a non-zero status or output cut past OUTPUT_LIMIT raises ProgramError as well."""
    argv = [str(a) for a in argv]
    fin = procs.run_bounded(argv, timeout=timeout, env={**os.environ, **(env or {})}, limit=OUTPUT_LIMIT)
    if fin.timed_out:
        raise ProgramError(argv, -1, tail(fin.stderr), fin.stdout, timed_out=True)
    res = Result(argv, fin.returncode, fin.stdout, fin.stderr, fin.seconds, fin.dropped)
    if check and (fin.returncode != 0 or fin.dropped):
        why = "" if fin.returncode != 0 else f"{argv[0]} {fin.what_happened()}\n"
        raise ProgramError(argv, fin.returncode, why + tail(fin.stderr), fin.stdout)
    return res
