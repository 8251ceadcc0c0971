"""CUDA in notebook cells: the `%%cuda` and `%%cuda_lib` magics (IPython, optional).

    %load_ext harness.user.notebook

    %%cuda [--args "ARGV"] [--arch 90] [--flags "NVCC FLAGS"] [--timeit N] [--profile nsys|ncu]
           [--compile-only] [--timeout SECONDS] [--name NAME] [-v]
    #include <cstdio>
    __global__ void helloGPU() { printf("Hello World from the GPU!\\n"); }
    int main() { helloGPU<<<1, 1>>>(); cudaDeviceSynchronize(); return 0; }

compiles the cell as a whole program (it has `main`) with harness.calling.inline.compile_program -- the
project's nvcc, flags and cache -- runs it, and shows its stdout and stderr. A failing compile
shows nvcc's messages with the cell's line numbers, counting the `%%cuda` line as line 1 as Jupyter
does, and the offending lines quoted. A program that exits non-zero fails the cell.

* `--args "..."` is the program's argv, split as a shell would (`--args "-n 5"` works too).
* `--arch` sets the compute capability (default: the visible GPU's, else 90, as the Makefile).
* `--timeit N` runs the program N times and reports the process times (wall time of each whole
  process, so start-up and CUDA context creation are in it; the compile is not).
* `--timeout S` (default 120) stops the program and everything it started: it runs in a process group
  of its own, which also dies with the notebook's kernel. A program that exits leaving a child of its
  own running (a fork, `system("x &")`) has that child stopped, and the cell says so. Output past
  1 MiB per stream keeps its head and tail and says how many bytes were dropped between them.
* `--profile nsys|ncu` runs it under a profiler through harness.profiling.profile, the orchestration's
  profile machinery, and prints its kernel table. Where that module is missing the cell says so
  and runs without a profiler.

    %%cuda_lib NAME [--arch 90] [--flags "..."] [-v]

compiles the cell with harness.calling.inline.load (extern "C" functions, launchers taking
`const cudalab_launch *`) and binds the module to NAME in the notebook's namespace.

Importing `harness` never imports IPython; only this module needs it (`pip install -e '.[notebook]'`).
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

try:
    from IPython.core.error import UsageError
    from IPython.core.magic import Magics, cell_magic, magics_class
except ImportError as e:  # pragma: no cover - exercised only where IPython is absent
    raise ImportError("harness.user.notebook needs IPython: pip install -e '.[notebook]'") from e

from harness.base import procs
from harness.base.errors import BuildError, CudalabError, NoGPUError, ProgramError
from harness.calling import inline

# Jupyter numbers a cell's lines from its first line, the `%%cuda` line; the cell body starts on 2.
CELL_LINE_OFFSET = 1
VALUE_OPTIONS = ("--args", "--flags")


class CellProgramError(ProgramError):
    """The cell's program failed; its output has been shown already, so IPython shows one line."""

    def __init__(self, argv, returncode: int, stderr_tail: str = "", stdout: str = "", timed_out: bool = False,
                 what: str | None = None):
        super().__init__(argv, returncode, stderr_tail, stdout, timed_out)
        self.what = what or ("timed out" if timed_out else procs.describe_status(returncode))

    def _render_traceback_(self):
        return [f"ProgramError: the cell's program {self.what}"]


class CellNoGPUError(CellProgramError, NoGPUError):
    """The cell's program tried to reach the GPU and there is none: every CUDA call in it failed, and a
    program that does not check them still exits 0 with no GPU output. It is the lab's NoGPUError too
    (code 100, cudaErrorNoDevice), so one `except NoGPUError` catches a library call's and a cell's alike."""

    def __init__(self, argv, returncode: int, why: str, stderr_tail: str = "", stdout: str = ""):
        CellProgramError.__init__(self, argv, returncode, stderr_tail, stdout)
        NoGPUError.__init__(self, 100, "cudaErrorNoDevice", "no CUDA-capable device is detected",
                            where="the cell's program")
        self.why = why
        self.args = (f"the cell's program ran without a GPU: it looked for the CUDA driver and there is no usable "
                     f"GPU here, so its CUDA calls failed and no kernel ran. {why}",)

    def _render_traceback_(self):
        return [f"NoGPUError: {self.args[0]}"]


def _shell_words(text: str, what: str) -> list[str]:
    """shlex.split, with an unbalanced quote as a one-line UsageError instead of a ValueError traceback."""
    try:
        return shlex.split(text)
    except ValueError as e:
        raise UsageError(f"{what}: {e} in {text!r} (quote a value with a matching pair of quotes)") from None


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return v


def _count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of runs, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be at least 1 (or 0: no timing), got {v}")
    return v


def _no_gpu() -> str | None:
    """Why no CUDA device can be used here, or None when one can."""
    from harness.calling import cudart

    try:
        ok, why = cudart.gpu_available()
    except (OSError, CudalabError) as e:  # the runtime library itself cannot be loaded
        return str(e)
    return None if ok else why


def _looked_for_the_driver(folder: str) -> bool:
    """Whether a process run with LD_DEBUG=libs and LD_DEBUG_OUTPUT under `folder` looked for libcuda: the
    CUDA runtime loads the driver at its first call, and a program without CUDA calls never does."""
    for f in Path(folder).glob("ld*"):
        with open(f, errors="replace") as fh:
            if any("libcuda.so" in line for line in fh):
                return True
    return False


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage()}")


def _split(line: str) -> list[str]:
    """shlex-split the magic line; `--args VALUE` becomes `--args=VALUE` so that a value starting
    with a dash is still taken as the value."""
    toks = _shell_words(line, "the magic's line")
    out, i = [], 0
    while i < len(toks):
        if toks[i] in VALUE_OPTIONS and i + 1 < len(toks):
            out.append(f"{toks[i]}={toks[i + 1]}")
            i += 2
        else:
            out.append(toks[i])
            i += 1
    return out


def _cuda_parser() -> _Parser:
    p = _Parser(prog="%%cuda", add_help=False, description="compile the cell as a CUDA program and run it")
    p.add_argument("--args", default="", help="the program's argv, one string split like a shell does")
    p.add_argument("--arch", default=None, help="compute capability, e.g. 90 or sm_90a")
    p.add_argument("--flags", default="", help="extra nvcc flags, one string")
    p.add_argument("--timeit", type=_count, default=0, metavar="N", help="run N times and report the times")
    p.add_argument("--profile", choices=("nsys", "ncu", "nvprof"), default=None,
                   help="run under a profiler (nsys or ncu; nvprof is gone, and the cell says why)")
    p.add_argument("--compile-only", action="store_true", help="compile, do not run")
    p.add_argument("--timeout", type=_seconds, default=120.0, help="seconds before a run is stopped")
    p.add_argument("--name", default="cell", help="label for the cache file and messages")
    p.add_argument("-v", "--verbose", action="store_true", help="say what is compiled or cached")
    return p


def _lib_parser() -> _Parser:
    p = _Parser(prog="%%cuda_lib", add_help=False, description="compile the cell with harness.calling.inline.load")
    p.add_argument("name", help="the Python name to bind the module to")
    p.add_argument("--arch", default=None)
    p.add_argument("--flags", default="")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def _show_warnings(warnings) -> None:
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)


def _show(p: subprocess.CompletedProcess) -> None:
    if p.stdout:
        sys.stdout.write(p.stdout)
        sys.stdout.flush()
    if p.stderr:
        sys.stderr.write(p.stderr)
        sys.stderr.flush()


def run_program(prog: inline.Program, argv: list[str], timeout: float,
                env: dict | None = None) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run the compiled cell once: (completed process, wall seconds, user+sys CPU seconds).

    The program runs through harness.base.procs.run_bounded: in a process group of its own (a
    `system()` or a fork of the cell's stops with it, at the timeout and when the program ends), dying
    with the notebook's kernel, its output kept to a bounded head and tail. What was stopped or dropped
    is said on stderr. The times are the program's own, measured by its supervisor."""
    cmd = [str(prog.path), *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    fin = procs.run_bounded(cmd, timeout=timeout, env=env)
    p = subprocess.CompletedProcess(cmd, fin.returncode, fin.stdout, fin.stderr)
    if fin.timed_out:
        _show(p)
        raise CellProgramError(cmd, -1, fin.stderr[-2000:], fin.stdout, timed_out=True,
                               what=fin.what_happened(timeout))
    if fin.left or fin.dropped:
        print(f"%%cuda: the cell's program {fin.what_happened()}", file=sys.stderr)
    wall = fin.child_seconds if fin.child_seconds is not None else time.perf_counter() - t0
    if fin.child_cpu is not None:
        return p, wall, fin.child_cpu
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def profile_program(tool: str, prog: inline.Program, argv: list[str], timeout: float, name: str = "cell") -> bool:
    """Profile the cell's program with harness.profiling.profile's run_nsys / run_ncu (the orchestration's
    profile machinery: discovery, nsys's importer environment, CSV parsing) and print its kernel
    table. False, after saying why, when that machinery is missing or the tool gives no report."""
    try:
        from harness.profiling import profile as _profile
    except ImportError:
        print(f"--profile {tool}: harness.profiling.profile (the lab's profiler runner) is not in "
              f"this checkout, so the cell runs without a profiler. By hand: "
              + (f"nsys profile --stats=true {prog.path}" if tool == "nsys" else f"ncu {prog.path}"),
              file=sys.stderr)
        return False
    fn = getattr(_profile, "run_nsys" if tool == "nsys" else "run_ncu", None)
    if fn is None:
        print(f"--profile {tool}: harness.profiling.profile has no run_{tool}(), so the cell runs without a profiler.",
              file=sys.stderr)
        return False
    outdir = _profile.PROFILES / f"inline-{name}"
    try:
        if "exe" in inspect.signature(fn).parameters:
            kernels = fn(name, argv, outdir, exe=prog.path, timeout=timeout)[0]
        else:
            # run_nsys/run_ncu profile build/bin/<prog>; point their executable lookup at the cell's
            # program for this one call (an `exe=` parameter there would make this unnecessary).
            with mock.patch.object(_profile, "_exe", lambda _prog: prog.path):
                kernels = fn(name, argv, outdir, timeout=timeout)[0]
    except _profile.ToolFailure as e:
        print(f"--profile {tool}: no report: {e.reason}. The cell runs without a profiler.", file=sys.stderr)
        return False
    print(f"{tool} kernel table of {name} (CSV under {outdir}):")
    print(kernels.to_string(index=False))
    return True


def _nvprof_message() -> str:
    try:
        from harness.profiling.profile import nvprof_message
        return nvprof_message()
    except ImportError:
        return ("nvprof was removed in CUDA 13 and never supported compute capability 7.5 or newer: "
                "use %%cuda --profile nsys (or `nsys nvprof` where nsys is installed), or --profile ncu")


@magics_class
class CudaMagics(Magics):
    """%%cuda (a whole program) and %%cuda_lib NAME (an inline library); see harness.user.notebook."""

    @cell_magic
    def cuda(self, line: str, cell: str):
        """Compile the cell as a CUDA program with main, run it, show its output.

        %%cuda [--args "ARGV"] [--arch A] [--flags "F"] [--timeit N] [--profile nsys|ncu]
               [--compile-only] [--timeout S] [--name NAME] [-v]
        """
        opts = _cuda_parser().parse_args(_split(line))
        flags = _shell_words(opts.flags, "%%cuda --flags")
        argv = _shell_words(opts.args, "%%cuda --args")
        try:
            prog = inline.compile_program(cell, name=opts.name, arch=opts.arch, flags=flags, verbose=opts.verbose,
                                          _display=opts.name, _line_offset=CELL_LINE_OFFSET)
        except BuildError as e:
            if "undefined reference to `main'" in f"{e}\n{e.log}":
                raise UsageError("%%cuda: the cell has no main(): %%cuda compiles and runs a whole program. For "
                                 "functions to call from Python, use %%cuda_lib NAME; to run this cell, add "
                                 "int main() { ... }") from None
            raise
        except (ValueError, TypeError) as e:  # a bad --arch or --name: the line, not the code
            if isinstance(e, CudalabError):
                raise
            raise UsageError(f"%%cuda: {e}") from None
        _show_warnings(prog.warnings)
        if opts.compile_only:
            how = "from the cache, nothing compiled" if prog.cache_hit else f"compiled in {prog.compile_seconds:.1f} s"
            print(f"{opts.name}: {how} for sm_{prog.arch} -> {prog.path}")
            return None
        if opts.profile == "nvprof":
            raise UsageError(_nvprof_message())
        if opts.profile and profile_program(opts.profile, prog, argv, opts.timeout, opts.name):
            return None
        runs = max(opts.timeit, 1)
        walls, cpus = [], []
        no_gpu = _no_gpu()
        for i in range(runs):
            with tempfile.TemporaryDirectory(prefix="cudalab-cell-") as watch:
                env = None
                if no_gpu and i == 0:
                    # Without a GPU, watch whether the program reaches for one: glibc's loader notes each
                    # library it looks for, and the CUDA runtime looks for libcuda at its first call.
                    env = {**os.environ, "LD_DEBUG": "libs", "LD_DEBUG_OUTPUT": os.path.join(watch, "ld")}
                p, wall, cpu = run_program(prog, argv, opts.timeout, env=env)
                if i == 0 or p.returncode != 0:
                    _show(p)
                if env is not None and _looked_for_the_driver(watch):
                    raise CellNoGPUError(p.args, p.returncode, no_gpu, p.stderr[-2000:], p.stdout)
            if p.returncode != 0:
                raise CellProgramError(p.args, p.returncode, p.stderr[-2000:], p.stdout)
            walls.append(wall)
            cpus.append(cpu)
        if opts.timeit:
            print(f"timeit: {runs} run{'s' if runs > 1 else ''} of {opts.name}: wall median "
                  f"{statistics.median(walls):.4f} s (min {min(walls):.4f}, max {max(walls):.4f}); "
                  f"CPU user+sys median {statistics.median(cpus):.4f} s. Whole processes: start-up and CUDA "
                  f"context creation included, the compile not.")
        return None

    @cell_magic
    def cuda_lib(self, line: str, cell: str):
        """Compile the cell with harness.calling.inline.load and bind the module to NAME.

        %%cuda_lib NAME [--arch A] [--flags "F"] [-v]
        """
        opts = _lib_parser().parse_args(_split(line))
        if not opts.name.isidentifier():
            raise UsageError(f"%%cuda_lib: {opts.name!r} is not a Python identifier")
        flags = _shell_words(opts.flags, "%%cuda_lib --flags")
        try:
            mod = inline.load(cell, name=opts.name, arch=opts.arch, flags=flags,
                              verbose=opts.verbose, _display=opts.name, _line_offset=CELL_LINE_OFFSET)
        except (ValueError, TypeError) as e:  # a bad --arch: the line (the cell's own errors are CudalabErrors)
            if isinstance(e, CudalabError):
                raise
            raise UsageError(f"%%cuda_lib: {e}") from None
        self.shell.user_ns[opts.name] = mod
        _show_warnings(mod.warnings)
        how = "from the cache, nothing compiled" if mod.cache_hit else f"compiled in {mod.compile_seconds:.1f} s"
        funcs = "; ".join(mod.signature(f) for f in mod.functions) or "no extern \"C\" functions"
        print(f"{opts.name} ({how}, sm_{mod.arch}): {funcs}")
        return None


def load_ipython_extension(ipython) -> None:
    """`%load_ext harness.user.notebook`."""
    ipython.register_magics(CudaMagics)


__all__ = ["CudaMagics", "load_ipython_extension", "run_program", "profile_program", "CellProgramError",
           "CellNoGPUError"]
