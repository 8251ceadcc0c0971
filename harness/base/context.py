"""The process's CUDA context state: whether a sticky error (an illegal address, a kernel fault, a
device-side assert) has lost it, recorded by the one function that turns a cudaError_t into its
exception. The exception types themselves are in harness.base.errors."""

from __future__ import annotations

from harness.base.errors import ContextLostError, CudaError, NoGPUError

# Codes that leave the context unusable (driver_types.h: "the process must be terminated and relaunched").
# A function may also return one of them as a plain argument check (square's misaligned pointer), so a
# code counts as sticky only when the runtime still reports an error after it (see `raise_for_code`).
STICKY_CODES = frozenset({214, 220, 700, 702, 709, 710, 714, 715, 716, 717, 718, 719, 720, 721, 999})
_lost: ContextLostError | None = None


def context_lost() -> ContextLostError | None:
    """The first sticky error this process met, or None."""
    return _lost


def check_context(where: str = "") -> None:
    """Raise ContextLostError when an earlier call lost the context (call before touching the GPU)."""
    if _lost is not None:
        raise ContextLostError(_lost.code, _lost.name, _lost.message, where, earlier=_lost)


def raise_for_code(code: int, name: str = "", message: str = "", where: str = "",
                   still_failing: bool | None = None) -> None:
    """Raise the right exception for a non-zero cudaError_t; do nothing for 0.

    `still_failing`: whether the runtime kept reporting an error after this one was read (a sticky
    error never clears). A sticky code with still_failing (or None, when the caller cannot tell)
    raises ContextLostError and makes every later check_context() raise it again."""
    global _lost
    if code == 0:
        return
    check_context(where)
    if code in STICKY_CODES and still_failing is not False:
        _lost = ContextLostError(code, name, message, where)
        raise _lost
    cls = NoGPUError if code in NoGPUError.CODES else CudaError
    raise cls(code, name, message, where)
