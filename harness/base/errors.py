"""The exception types of cudalab. Every failure a user can meet is one of these (or a
ValueError/TypeError for bad arguments, raised before anything is launched)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


class CudalabError(Exception):
    """Base of cudalab's own errors."""


class CudaError(CudalabError):
    """A CUDA runtime call failed. Carries the numeric code, its name and its message."""

    def __init__(self, code: int, name: str = "", message: str = "", where: str = ""):
        self.code = int(code)
        self.name = name or f"cudaError({code})"
        self.message = message
        self.where = where
        text = f"{self.name} ({self.code}): {message}" if message else f"{self.name} ({self.code})"
        super().__init__(f"{where}: {text}" if where else text)


# The oldest Linux driver branch each CUDA toolkit's programs run on (NVIDIA's compatibility table:
# CUDA 13.0 GA needs 580). A toolkit missing here gets the sentence without the number.
MIN_DRIVER = {(13, 0): "580"}
# The one sentence for a driver older than the toolkit: `invoke doctor`, `invoke build`, NoGPUError and
# the executables (cuda/common/check.cuh spells the same text as CUDALAB_DRIVER_TOO_OLD; a test compares).
DRIVER_TOO_OLD = ("the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d these programs are built with "
                  "(%s): update the NVIDIA driver, or use a CUDA toolkit the driver supports (%d.%d or older)")


def _split_version(v: int) -> tuple[int, int]:
    """cudaDriverGetVersion's 12020 -> (12, 2)."""
    return v // 1000, (v % 1000) // 10


def driver_too_old_line(driver: int, toolkit: int) -> str | None:
    """The sentence when a driver supporting CUDA `driver` (cudaDriverGetVersion's 12020 form) is older
    than `toolkit` (the same form), else None. 0 means no driver at all: not this sentence."""
    if driver <= 0 or toolkit <= 0 or _split_version(driver) >= _split_version(toolkit):
        return None
    tk = _split_version(toolkit)
    need = f"CUDA {tk[0]}.{tk[1]} needs driver {MIN_DRIVER[tk]} or newer" if tk in MIN_DRIVER \
        else f"CUDA {tk[0]}.{tk[1]} needs a newer driver"
    return DRIVER_TOO_OLD % (*_split_version(driver), *tk, need, *_split_version(driver))


# What says this process's (driver, runtime) versions: harness.calling.cudart registers it when it is
# imported (the base layer imports nothing above it). Until then NoGPUError keeps the generic hint.
_versions: Callable[[], tuple[int, int]] | None = None


def set_version_source(fn: Callable[[], tuple[int, int]] | None) -> None:
    global _versions
    _versions = fn


def _driver_line_here() -> str | None:
    """driver_too_old_line for this process's driver and CUDA runtime, None when unknown."""
    if _versions is None:
        return None
    try:
        return driver_too_old_line(*_versions())
    except Exception:  # no libcudart, or it cannot even say its version: the generic hint stays
        return None


class NoGPUError(CudaError):
    """No usable device: the runtime said "no device" (100) or "insufficient driver" (35). For 35 with a
    driver that is there but older than the runtime, the message is DRIVER_TOO_OLD's sentence."""

    CODES = (100, 35)

    def __init__(self, code: int, name: str = "", message: str = "", where: str = "",
                 driver_line: str | None = None):
        super().__init__(code, name, message, where)
        if self.code == 35 and driver_line is None:
            driver_line = _driver_line_here()
        if self.code == 35 and driver_line:
            self.hint = driver_line
            self.args = (f"{where + ': ' if where else ''}{driver_line}",)
            return
        if self.code == 35:
            hint = (
                "no usable NVIDIA driver: the CUDA runtime needs libcuda.so from a driver at least as new "
                "as the runtime. Install or update the NVIDIA driver, or run on a machine with a GPU."
            )
        else:
            hint = "no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)."
        self.hint = hint
        self.args = (f"{self.args[0]} -- {hint}",)


class DriverTooOldError(CudalabError):
    """The NVIDIA driver is older than the CUDA toolkit the programs are built with (DRIVER_TOO_OLD)."""


class BuildError(CudalabError):
    """The compiler failed. `diagnostics` holds nvcc's `file:line` lines; `log` the whole output."""

    def __init__(self, message: str, diagnostics: list | None = None, log: str = ""):
        self.diagnostics = list(diagnostics or [])
        self.log = log
        lines = [message] + [str(d) for d in self.diagnostics]
        super().__init__("\n".join(lines))


# What fixes each missing tool, said once: ToolMissing's message, and `invoke doctor` prints the same.
_TOOLKIT = "put it on PATH, set CUDA_HOME, or `pip install -e '.[toolkit]'`"
TOOL_FIXES = {
    "nvcc": _TOOLKIT,
    "cuobjdump": _TOOLKIT,
    "nvdisasm": "it comes with cuobjdump in the CUDA toolkit: put the toolkit's bin/ on PATH or set CUDA_HOME",
    "compute-sanitizer": "install the CUDA toolkit (compute-sanitizer comes with it; NVIDIA's pip wheels lack it), "
                         "or set $COMPUTE_SANITIZER",
    "libcudart": "set CUDA_HOME to the CUDA toolkit, or `pip install -e '.[toolkit]'`",
    "cuda-bench": "`pip install -e .` (NVIDIA's NVBench for Python, cuda-bench[cu13], is a base dependency; "
                  "wheels for CPython 3.10-3.13)",
}


class ToolMissing(CudalabError, FileNotFoundError):
    """A tool the lab drives (nvcc, cuobjdump, nvdisasm, compute-sanitizer, libcudart, cuda-bench) is
    not here. `fix` is what installs it or points the lab at it; `detail` what was searched, or why."""

    def __init__(self, tool: str, detail: str = ""):
        self.tool = tool
        self.fix = TOOL_FIXES[tool]
        super().__init__(f"{tool} not found{f' ({detail})' if detail else ''}: {self.fix}")


def not_built_message(paths, progs, why: str | None = None) -> str:
    """Which build outputs are missing (or stale: `why` says how), and the command that builds only
    those programs."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    progs = [progs] if isinstance(progs, str) else list(dict.fromkeys(progs))
    verb = "is" if len(paths) == 1 else "are"
    faults = [Path(p) for p in paths if Path(p).parent.parent.name == "faults"]
    if faults:  # the fault build (build/faults/, tests only) is made by make alone, target by target
        targets = " ".join("build/faults/" + "/".join(p.parts[-2:]) for p in faults)
        return f"{', '.join(map(str, paths))} {verb} {why or 'missing'}: run `make FAULTS=1 {targets}`"
    return (f"{', '.join(map(str, paths))} {verb} {why or 'missing'}: run `invoke build --programs {','.join(progs)}` "
            "(or `invoke build` for every program)")


class NotBuilt(CudalabError, FileNotFoundError):
    """A library, executable or build report of a program is missing, or is not the file its build
    wrote. The message names the command that builds it: `invoke build --programs a,b`."""

    def __init__(self, paths, progs, why: str | None = None):
        self.paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
        self.programs = [progs] if isinstance(progs, str) else list(dict.fromkeys(progs))
        super().__init__(not_built_message(self.paths, self.programs, why))


class ProgramError(CudalabError):
    """An executable exited non-zero (or timed out). Carries the status and the tail of stderr."""

    def __init__(self, argv, returncode: int, stderr_tail: str = "", stdout: str = "", timed_out: bool = False):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        self.stdout = stdout
        self.timed_out = timed_out
        cmd = " ".join(str(a) for a in self.argv)
        what = "timed out" if timed_out else f"exited with status {returncode}"
        msg = f"{cmd} {what}"
        if stderr_tail.strip():
            msg += ":\n" + stderr_tail.rstrip()
        # Not super(): a class that is a ProgramError and a NoGPUError at once (the notebook's cell without a
        # GPU) would hand this text to CudaError, which takes a code; each part is initialised by its class.
        CudalabError.__init__(self, msg)


class TraceError(CudalabError):
    """A printed trace is missing lines or has duplicates; a partial trace is never used."""

    def __init__(self, message: str, missing=(), duplicated=()):
        self.missing = list(missing)
        self.duplicated = list(duplicated)
        super().__init__(message)


RESTART = ("the CUDA context is lost: every later CUDA call in this process fails. Restart the process "
           "(in a notebook: restart the kernel)")


class ContextLostError(CudaError):
    """A sticky error (an illegal address, a kernel fault, a device-side assert) poisoned the CUDA
    context. The first one says what happened; every later call raises this again, naming the first
    error, since nothing can be done with the device until the process is restarted."""

    def __init__(self, code: int, name: str = "", message: str = "", where: str = "", earlier=None):
        super().__init__(code, name, message, where)
        self.earlier = earlier
        if earlier is None:
            self.args = (f"{self.args[0]} -- {RESTART}",)
        else:
            first = f"{earlier.name} ({earlier.code})" + (f" in {earlier.where}" if earlier.where else "")
            self.args = (f"{where + ': ' if where else ''}{RESTART} (lost earlier: {first})",)

    def _render_traceback_(self):  # IPython: the sentence, not a traceback
        return [f"ContextLostError: {self.args[0]}"]
