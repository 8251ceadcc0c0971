"""CUDA C from a Python string: compile it with the project's nvcc and flags, load it through cffi.

    from harness.calling import inline

    src = r'''
    __global__ void scale_k(float *x, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] *= a;
    }
    // Host-pointer form: numpy arrays in, numpy arrays out (copies done in C).
    extern "C" int scale(float *x, float a, int n) { ... cudaMalloc, copy, launch, copy back ... }
    // Launcher form: the first parameter is `const cudalab_launch *`; Python gives grid= and block=.
    extern "C" int scale_launch(const cudalab_launch *L, float *x, float a, int n) {
        scale_k CUDALAB_LAUNCH(L)(x, a, n);
        return (int)cudaGetLastError();
    }
    '''
    mod = inline.load(src, name="scale")
    mod.scale(x, 2.0, x.size)                                   # x: float32 numpy array, changed in place
    d = inline.to_device(x)
    mod.scale_launch(d, 2.0, x.size, grid=inline.cdiv(x.size, 256), block=256)
    y = d.to_host()

What `load` does
----------------
* **Signatures.** Without `header`, the cffi cdef is read from the source's `extern "C"` functions
  (`extern "C" { ... }` blocks and single `extern "C" int f(...)` declarations or definitions),
  after removing comments, applying object-like `#define`s and dropping CUDA qualifiers.
  `__global__` and `__device__` functions are not host-callable and are left out. Parameter types
  must be plain C: built-in scalars, the <stdint.h> and <stddef.h> names, pointers (to pointers)
  to those, `cudaStream_t`, `cudaError_t`, `cudalab_launch`, and structs/typedefs declared inside
  the `extern "C"` block. Anything else (a C++ reference `float &`, a template, a namespaced name,
  a CUDA vector type such as `float4` or `dim3`, `__half`) raises UnsupportedSignature naming each
  function. Pass `header=` (plain C declarations) to choose the cdef yourself.
* **Calls** go through harness.calling.library's marshalling: numpy arrays for pointer parameters (dtype
  from the pointee type, C-contiguous, writeable unless `const`), device arrays from `to_device` /
  `empty` (dtype checked too), Python numbers for scalars, `str`/`bytes` for `const char *`.
  An `int` (or `cudaError_t`) return value is a CUDA status, as in every cudalab library: 0 is
  success, anything else raises CudaError (NoGPUError where there is no usable device). Return
  other results through a pointer, or declare another return type (`long`, `float`, `void`).
* **Launcher convention.** An `extern "C"` function whose first parameter is
  `const cudalab_launch *` (or `cudalab_launch *`) is a launcher. The struct, pre-included into
  every inline source, is::

      typedef struct cudalab_launch {
          unsigned int grid[3], block[3];   /* gridDim and blockDim, x y z */
          unsigned int shared_bytes;        /* dynamic shared memory per block */
          void *stream;                     /* cudaStream_t; NULL is the default stream */
      } cudalab_launch;

  and `kernel CUDALAB_LAUNCH(L)(args...)` expands to `kernel<<<grid, block, shared, stream>>>(...)`.
  From Python a launcher is called without the struct, with keywords:
  `f(args..., grid=G, block=B, shared=0, stream=None)`, where G and B are an int, a 1-3 tuple or
  a harness.base.sim.dim3. Pointer arguments of a launcher must be device memory (`to_device`,
  `empty`, a DeviceBuffer): a numpy array there would hand the kernel a host address, so it is
  refused with TypeError before the call. A launcher does not synchronise: kernels run
  asynchronously, `to_host()` waits for them, and so does `mod.synchronize()`.
* **Cache.** The shared library is cached under `$CUDALAB_CACHE`, else `$XDG_CACHE_HOME/cudalab/inline`
  (`~/.cache/cudalab/inline`). The key hashes the source, the flags, the arch, nvcc's path and
  version, the host compiler, nvcc's environment flags ($NVCC_PREPEND_FLAGS, $NVCC_APPEND_FLAGS,
  $NVCC_CCBIN), the link flags and the project's headers; every other header nvcc read (through a
  user's -I, say) is listed with its hash in the entry's manifest (nvcc -MD) and a change recompiles.
  A hit compiles nothing (`verbose=True` says so) and is used only when its manifest verifies (the
  SHA-256 of the library and its log): a truncated or replaced entry is rebuilt, said once on
  stderr. Each compile writes a temporary file in the cache folder and renames it into place with
  os.replace, one process at a time per entry (a lock), so two processes compiling the same key at
  once both end with a whole library. The folder is created 0700; one that another user owns or can
  write is refused (InlineCacheError, one line), as is a $CUDALAB_CACHE that cannot be a folder.
  nvcc runs in its own process group with its temporary files in a private folder of the cache:
  an interrupt stops it and everything it started at once and removes them.
* **Errors.** A failed compile raises BuildError (InlineBuildError) whose diagnostics name
  `<inline>` (or the name given) with line numbers of the user's string, each offending line quoted.
* **Load-time code.** Before this process loads the library, a child process loads it with a deadline
  (PROBE_TIMEOUT_S): a constructor or a global object that crashes, aborts, exits or never returns
  raises InlineLoadError, one line naming the signal, the status or the deadline, and the caller (a
  notebook's kernel) lives on. Once a library has loaded here, a later load of it is not probed again.
* **printf.** Device printf writes to the process's standard output (file descriptor 1), like a
  C program's, when the device synchronises. `with capture_stdout() as out: ...` captures it at
  the descriptor level (it synchronises the device and flushes C stdio before reading) into
  `out.text`; `capture_stdout(echo=True)` also writes it to Python's sys.stdout.

The build flags are the Makefile's, read from `make print-nvcc` (harness/compile/build.py nvcc_flags), so
the two never differ: -O3 -lineinfo -std=c++17, SASS and PTX for ARCH (the visible GPU's compute
capability, else sm_90 with compute_90 PTX; `arch=` or $ARCH overrides), -I cuda/common and
-I cuda/shared (`#include "check.cuh"` gives CUDA_TRY, CUDA_TRY_LAUNCH and cdiv), host warnings as errors
(-Xcompiler -fPIC,-Wall,-Wextra,-Werror), -Xptxas -v (see `mod.resource_usage()`), and -shared. nvcc's
own warnings about device code are reported in `mod.warnings`; `flags=["-Xcompiler", "-Wno-error"]`
turns host warnings back into warnings for code that is not yet clean.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import tempfile
from pathlib import Path

import cffi
import numpy as np

from harness.base.errors import CudalabError
from harness.calling import cudart, library
from harness.calling.cdecl import _CDEF_PREAMBLE, Extracted, Signature, UnsupportedSignature, extract_cdef  # noqa: F401
from harness.calling.cdecl import header_cdef as _header_cdef
from harness.compile import build as _build
from harness.compile.jit import (  # noqa: F401  (the compiler half, re-exported: inline.cache_dir(), inline.Program, ...)
    COMMON_DIR,
    FORMAT_VERSION,
    PRELUDE,
    InlineBuildError,
    InlineCacheError,
    Program,
    _compile,
    _Compiled,
    _normalize_arch,
    cache_dir,
    compile_program,
    default_arch,
)

__all__ = [
    "load", "compile_program", "InlineModule", "Program", "DeviceArray", "to_device", "empty",
    "capture_stdout", "synchronize", "cdiv", "cache_dir", "default_arch", "extract_cdef",
    "UnsupportedSignature", "InlineBuildError", "InlineCacheError", "InlineSourceError", "InlineLoadError", "PRELUDE",
]

def cdiv(n: int, b: int) -> int:
    """Ceiling division, for grid sizes: the number of b-sized blocks that cover n items."""
    return -(-int(n) // int(b))


# =================================================================================================
# The loaded module
# =================================================================================================

_ffi_libc = cffi.FFI()
_ffi_libc.cdef("int fflush(void *stream);")
_libc = _ffi_libc.dlopen(None)


def _flush_c_stdio() -> None:
    """C's stdout is buffered apart from Python's: flush every C stream (fflush(NULL))."""
    _libc.fflush(_ffi_libc.NULL)


def synchronize() -> None:
    """Wait for the device (which also prints pending device printf), then flush C stdio."""
    try:
        cudart.synchronize()
    finally:
        _flush_c_stdio()
        sys.stdout.flush()


def _dims(value, what: str) -> tuple[int, int, int]:
    if hasattr(value, "x") and hasattr(value, "y") and hasattr(value, "z"):
        dims = (value.x, value.y, value.z)
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        dims = (value,)
    elif isinstance(value, (tuple, list)) and 1 <= len(value) <= 3:
        dims = tuple(value)
    else:
        raise TypeError(f"{what} must be an int, a tuple of 1 to 3 ints or a dim3, got {value!r}")
    out = []
    for v in dims:
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not 1 <= int(v) <= 0xFFFFFFFF:
            raise ValueError(f"{what}={value!r}: every dimension must be a positive integer")
        out.append(int(v))
    return tuple(out + [1] * (3 - len(out)))


def _stream_address(stream) -> int:
    if stream is None:
        return 0
    if isinstance(stream, cudart.Stream):
        stream = stream.handle
    if isinstance(stream, (int, np.integer)):
        return int(stream)
    if isinstance(stream, cudart.ffi.CData):
        return int(cudart.ffi.cast("uintptr_t", stream))
    raise TypeError(f"stream must be a harness.calling.cudart.Stream, a cudaStream_t or None, got {type(stream).__name__}")


class InlineModule(library.EntryPoints):
    """The extern "C" functions of an inline source, as attributes. See the module docstring."""

    def __init__(self, name: str, compiled: _Compiled, extracted: Extracted, source: str):
        self.name = name
        self.path = compiled.path
        self.source_path = compiled.source_path
        self.source = source
        self.cache_hit = compiled.cache_hit
        self.compile_seconds = compiled.seconds
        self.arch = compiled.arch
        self.key = compiled.key
        self.log = compiled.log
        self.warnings = compiled.warnings
        self.cdef = extracted.cdef
        self.kernels = dict(extracted.kernels)
        self._sigs = {f.name: f for f in extracted.functions}
        self.library = _library(name, compiled.path, extracted.cdef)
        self.ffi = self.library.ffi
        self._wrapped: dict[str, object] = {}

    @property
    def functions(self) -> list[str]:
        return list(self._sigs)

    @property
    def launchers(self) -> list[str]:
        return [n for n, s in self._sigs.items() if s.launcher]

    def signature(self, fname: str) -> str:
        s = self._sigs[fname]
        if s.launcher:
            rest = ", ".join(s.params[1:])
            return f"{fname}({rest}{', ' if rest else ''}*, grid, block, shared=0, stream=None)"
        return s.decl.rstrip(";")

    def synchronize(self) -> None:
        synchronize()

    def resource_usage(self):
        """Registers, shared memory, stack and spills per kernel (ptxas -v), as a DataFrame."""
        return _build.parse_ptxas(self.log)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._sigs))

    def __repr__(self):
        how = "from cache" if self.cache_hit else f"compiled in {self.compile_seconds:.1f} s"
        return f"<inline module {self.name!r} sm_{self.arch} ({how}): {', '.join(self._sigs) or 'no functions'}>"

    def _wrap(self, fname: str):
        sig = self._sigs.get(fname)
        if sig is None:
            if fname in self.kernels:
                raise AttributeError(
                    f"{fname} is a __global__/__device__ function of {self.name}: Python cannot call it. "
                    f"Add an extern \"C\" launcher, e.g. `extern \"C\" int {fname}_launch(const cudalab_launch *L, "
                    f"...) {{ {fname} CUDALAB_LAUNCH(L)(...); return (int)cudaGetLastError(); }}`, "
                    f"and call mod.{fname}_launch(..., grid=..., block=...)")
            raise AttributeError(f"inline module {self.name!r} has no extern \"C\" function {fname!r} (it has: "
                                 f"{', '.join(self._sigs) or 'none'}; functions made by function-like macros "
                                 f"need header=)")
        return self._make_call(sig)

    def _make_call(self, sig: Signature):
        checked = getattr(self.library, sig.name)  # harness.calling.library's marshalling and status check
        ftype = self.ffi.typeof(self.library.raw(sig.name))
        params = ftype.args
        fname = sig.name
        ffi = self.ffi

        def prepare(args, skip_first: bool):
            # harness.calling.library marshals and checks every argument (dtype, contiguity, const, strings,
            # streams, device arrays); what is added here is only what a launcher needs on top.
            user_params = params[1:] if skip_first else params
            if len(args) != len(user_params):
                raise TypeError(f"{self.signature(fname)} takes {len(user_params)} argument(s) "
                                f"{'besides the launch keywords ' if skip_first else ''}, got {len(args)}")
            if skip_first:
                for i, (p, v) in enumerate(zip(user_params, args, strict=True)):
                    if isinstance(v, np.ndarray) and p.kind == "pointer" and "CUstream_st" not in p.cname:
                        raise TypeError(f"{fname}() argument {i + 1}: {fname} is a kernel launcher, so its "
                                        f"pointers must be device memory: pass inline.to_device(array) or "
                                        f"inline.empty(shape, dtype), not a numpy array (a host address "
                                        f"would crash the kernel)")
            return list(args), []

        if sig.launcher:
            def call(*args, grid=None, block=None, shared=0, stream=None):
                if grid is None or block is None:
                    raise TypeError(f"{fname} is a kernel launcher: call it as {self.signature(fname)}")
                g, b = _dims(grid, "grid"), _dims(block, "block")
                if not isinstance(shared, (int, np.integer)) or int(shared) < 0:
                    raise ValueError(f"shared must be a number of bytes >= 0, got {shared!r}")
                launch = ffi.new("cudalab_launch *")
                launch.grid = list(g)
                launch.block = list(b)
                launch.shared_bytes = int(shared)
                launch.stream = ffi.cast("void *", _stream_address(stream))
                rest, keep = prepare(args, True)
                try:
                    return checked(launch, *rest)
                finally:
                    _flush_c_stdio()
                    del keep
        else:
            def call(*args, **kwargs):
                if kwargs:
                    extra = ", ".join(kwargs)
                    raise TypeError(f"{fname}() got keyword argument(s) {extra}; only launchers (first parameter "
                                    f"`const cudalab_launch *`) take grid=/block=/shared=/stream=")
                rest, keep = prepare(args, False)
                try:
                    return checked(*rest)
                finally:
                    _flush_c_stdio()
                    del keep

        call.__name__ = fname
        call.__qualname__ = f"{self.name}.{fname}"
        call.__doc__ = (f"{sig.decl}\n\nFrom inline module {self.name!r} (line {sig.line}). "
                        + ("A launcher: pass grid= and block= (shared=, stream= optional) and device arrays."
                           if sig.launcher else "An int return is a CUDA status: non-zero raises CudaError."))
        return call


_LIBS: dict[tuple[Path, str], library.Library] = {}


def _library(name: str, path: Path, cdef: str) -> library.Library:
    key = (Path(path), cdef)
    lib = _LIBS.get(key)
    if lib is None:
        lib = library.Library(name, path, cdef)
        _LIBS[key] = lib
    return lib


def load(source: str, *, name: str | None = None, arch=None, flags=(), header=None,
         verbose: bool = False, _display: str | None = None, _line_offset: int = 0,
         _probe: bool = True) -> InlineModule:
    """Compile a CUDA C string into a shared library (cached) and return its extern "C" functions.

    name:    a label for the cache file and messages (default "inline").
    arch:    compute capability (90, "9.0", "sm_90", "sm_90a"); default the Makefile's.
    flags:   extra nvcc arguments, a list (e.g. ["-use_fast_math"] or ["-lcublas"]).
    header:  plain C declarations (a str, or a pathlib.Path to read) to use as the cffi cdef instead
             of the declarations read from the source.
    verbose: say on stderr whether it compiled or came from the cache.

    Raises UnsupportedSignature (a TypeError) before compiling when an extern "C" function cannot
    be expressed in cffi, and InlineBuildError (a BuildError) when nvcc fails.
    _probe=False: no test load in a child first, for a caller that is itself that child (the exercise
    checker's worker, whose parent judges how its load ended).
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str of CUDA C, got {type(source).__name__}")
    extracted = _header_cdef(header) if header is not None else extract_cdef(source, line_offset=_line_offset)
    label = name or "inline"
    if not extracted.functions:
        kernels = ", ".join(extracted.kernels) or "none"
        raise InlineSourceError(
            f"inline.load({label!r}): {'header=' if header is not None else 'the source'} declares no extern \"C\" "
            f"function, so Python has nothing to call (kernels seen: {kernels}; functions made by macros need "
            f"header=). Add a host function such as "
            f"`extern \"C\" int run(float *x, int n) {{ ...; return (int)cudaGetLastError(); }}`; a whole program "
            f"with main() is compiled with inline.compile_program (or the %%cuda cell magic).")
    if header is not None:
        _check_header_against_source(extracted, source, label)
    display = _display or "<inline>"
    compiled = _compile(source, kind="lib", name=name, arch=arch, flags=flags, verbose=verbose,
                        display=display, line_offset=_line_offset)
    if verbose:
        for w in compiled.warnings:
            print(f"harness.calling.inline: {w}", file=sys.stderr)
    if _probe:
        _probe_load(compiled.path, label)
    _check_symbols(compiled.path, extracted, label, header is not None)
    return InlineModule(label, compiled, extracted, source)


# How long a library's load-time code (constructors, global objects: a CUDA context, say) may take.
PROBE_TIMEOUT_S = 60.0
_PROBED: set[Path] = set()
# Loads the library in a child and then prints a token the library's code never sees (it is taken out of
# the environment before the load): a constructor that prints or exits cannot pass for a whole load.
_PROBE = ("import ctypes, os, sys\n"
          "token = os.environ.pop('CUDALAB_PROBE_TOKEN')\n"
          "try:\n"
          "    ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n"
          "except OSError:\n"
          "    sys.exit(3)\n"
          "sys.stdout.write(token)\n")


class InlineLoadError(CudalabError):
    """The library's own load-time code failed in a test process (crashed, exited, hung); the notebook's
    process never loaded it. IPython shows the sentence only."""

    def _render_traceback_(self):
        return [f"InlineLoadError: {self.args[0]}"]


def _probe_load(path: Path, label: str) -> None:
    """Load the library in a child process with a deadline before this process loads it: code that runs
    at load time (a constructor, a global object's) runs there first, so a crash, an exit or a hang
    ends in one line here instead of taking the caller (a notebook's kernel) down. A library that does
    not link (status 3) is left to _check_symbols, which names the symbol."""
    import secrets

    from harness.base import procs

    path = Path(path).resolve()
    if path in _PROBED:  # already loaded in this process (a cache entry never changes in place)
        return
    token = secrets.token_hex(16)
    fin = procs.run_bounded([sys.executable, "-I", "-S", "-c", _PROBE, str(path)], timeout=PROBE_TIMEOUT_S,
                            env={**os.environ, "CUDALAB_PROBE_TOKEN": token}, limit=1 << 16)
    if fin.returncode == 3 or (fin.returncode == 0 and fin.stdout.endswith(token)):
        _PROBED.add(path)
        return
    if fin.timed_out:
        what = f"did not finish loading within {PROBE_TIMEOUT_S:g} s (load-time code that never returns)"
    elif fin.returncode == 0:
        what = "exited with status 0 while loading, before the load was done (exit() in load-time code)"
    else:
        what = f"{procs.describe_status(fin.returncode)} while loading"
    last = fin.stderr.strip().splitlines()[-1:] if fin.stderr.strip() else []
    raise InlineLoadError(f"inline.load({label!r}): a test process that loaded the library {what}, so this process "
                          f"did not load it: look at its constructors and global objects"
                          + (f" (its last line: {last[0].strip()})" if last else ""))


class InlineSourceError(CudalabError, ValueError):
    """The source (or header=) cannot give a callable module: no extern "C" function, a header that
    does not match the source, a symbol nothing defines. IPython shows the sentence only."""

    def _render_traceback_(self):
        return f"InlineSourceError: {self.args[0]}".splitlines()


def _fn_type(ffi: cffi.FFI, decl: str, name: str) -> str:
    return ffi.typeof(decl.rstrip().rstrip(";").replace(f" {name}(", " (*)(", 1)).cname


def _check_header_against_source(extracted: Extracted, source: str, label: str) -> None:
    """header= must describe the source's functions: same names where the source declares them
    extern "C", and the same C types (a wrong header makes cffi pass arguments wrongly)."""
    try:
        src = extract_cdef(source, strict=False)
    except Exception:  # the source's own declarations cannot be read: the symbol check still runs
        return
    ours = {f.name: f for f in src.functions}
    fa, fb = cffi.FFI(), cffi.FFI()
    try:
        fa.cdef(extracted.cdef)
        fb.cdef(src.cdef)
    except Exception:
        return
    bad = []
    for f in extracted.functions:
        g = ours.get(f.name)
        if g is None:
            continue
        try:
            if _fn_type(fa, f.decl, f.name) != _fn_type(fb, g.decl, g.name):
                bad.append(f"header= declares `{f.decl.strip()}` but the source defines `{g.decl.strip()}` "
                           f"(line {g.line})")
        except Exception:
            continue
    if bad:
        raise InlineSourceError(f"inline.load({label!r}): header= does not match the source:\n  " + "\n  ".join(bad))


def _check_symbols(path: Path, extracted: Extracted, label: str, from_header: bool) -> None:
    """The library loads (no host symbol that nothing defines) and defines every declared function."""
    import ctypes

    try:
        lib = ctypes.CDLL(str(path), mode=getattr(os, "RTLD_NOW", 2))
    except OSError as e:
        m = re.search(r"undefined symbol: (\S+)", str(e))
        if m is None:
            raise
        raise InlineSourceError(
            f"inline.load({label!r}): the library uses `{m.group(1)}`, which nothing defines: a function declared "
            f"but never defined in the source, or one from a library not linked (add it with flags=['-l<name>'])"
        ) from None
    missing = [f.name for f in extracted.functions if not hasattr(lib, f.name)]
    if missing:
        where = "header= declares" if from_header else "the source declares"
        raise InlineSourceError(f"inline.load({label!r}): {where} {', '.join(missing)}, which the compiled library "
                                f"does not define")


# =================================================================================================
# Device memory
# =================================================================================================

# DeviceArray, to_device and empty live in harness.calling.cudart (device memory is cudart's business);
# they are re-exported here, where the inline examples use them.
DeviceArray = cudart.DeviceArray
to_device = cudart.to_device
empty = cudart.empty


# =================================================================================================
# printf capture
# =================================================================================================

@dataclasses.dataclass
class Captured:
    text: str = ""


@contextlib.contextmanager
def capture_stdout(echo: bool = False, sync: bool = True):
    """Capture everything written to file descriptor 1 inside the block -- device printf, C printf,
    and Python's print where sys.stdout writes to fd 1 -- into `.text` of the yielded object.

    On exit it synchronises the device (device printf is only emitted at synchronisation points;
    sync=False skips this, e.g. without a GPU), flushes C stdio (fflush(NULL)) and Python's
    sys.stdout, then restores fd 1. echo=True writes the captured text to sys.stdout afterwards.
    """
    cap = Captured()
    sys.stdout.flush()
    _flush_c_stdio()
    saved = os.dup(1)
    tmp = tempfile.TemporaryFile()
    try:
        os.dup2(tmp.fileno(), 1)
        try:
            yield cap
        finally:
            try:
                if sync:
                    with contextlib.suppress(CudalabError):
                        cudart.synchronize()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                _flush_c_stdio()
                os.dup2(saved, 1)
    finally:
        os.close(saved)
        tmp.seek(0)
        cap.text = tmp.read().decode(errors="replace")
        tmp.close()
    if echo and cap.text:
        sys.stdout.write(cap.text)
        sys.stdout.flush()
