"""The exception types of cudalab. Every failure a user can meet is one of these (or a
ValueError/TypeError for bad arguments, raised before anything is launched)."""

from __future__ import annotations


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


class NoGPUError(CudaError):
    """No usable device: the runtime said "no device" (100) or "insufficient driver" (35)."""

    CODES = (100, 35)

    def __init__(self, code: int, name: str = "", message: str = "", where: str = ""):
        super().__init__(code, name, message, where)
        if self.code == 35:
            hint = (
                "no usable NVIDIA driver: the CUDA runtime needs libcuda.so from a driver at least as new "
                "as the runtime. Install or update the NVIDIA driver, or run on a machine with a GPU."
            )
        else:
            hint = "no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)."
        self.hint = hint
        self.args = (f"{self.args[0]} -- {hint}",)


class BuildError(CudalabError):
    """The compiler failed. `diagnostics` holds nvcc's `file:line` lines; `log` the whole output."""

    def __init__(self, message: str, diagnostics: list | None = None, log: str = ""):
        self.diagnostics = list(diagnostics or [])
        self.log = log
        lines = [message] + [str(d) for d in self.diagnostics]
        super().__init__("\n".join(lines))


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
        super().__init__(msg)


class TraceError(CudalabError):
    """A printed trace is missing lines or has duplicates; a partial trace is never used."""

    def __init__(self, message: str, missing=(), duplicated=()):
        self.missing = list(missing)
        self.duplicated = list(duplicated)
        super().__init__(message)


def raise_for_code(code: int, name: str = "", message: str = "", where: str = "") -> None:
    """Raise the right exception for a non-zero cudaError_t; do nothing for 0."""
    if code == 0:
        return
    cls = NoGPUError if code in NoGPUError.CODES else CudaError
    raise cls(code, name, message, where)
