"""Load build/lib/lib<prog>.so with cuda/<prog>/<prog>.h as its cffi cdef, and call into it.

Calls go through `Library.<function>(...)`. Each argument is checked against the C prototype
before the call: numpy arrays for pointer parameters (dtype from the pointee type, C-contiguous;
a non-const pointer also needs a writeable array), integers and floats for scalars, and device
pointers (cffi `void *` or harness.calling.cudart.DeviceBuffer) where the code passes device memory.
A return declared `cudalab_status` (cuda/common/cudalab.h: a cudaError_t as int) is a status:
non-zero raises CudaError (NoGPUError for 100 and 35). A plain `int` return is a value (a count, a
flag) and is handed back as it is. Headers written before `cudalab_status` existed declare their
statuses as `int`; for a header that never names `cudalab_status`, every `int` is still a status.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import cffi
import numpy as np

from harness.base import paths
from harness.base.context import check_context, raise_for_code
from harness.calling import cdecl, cudart  # noqa: F401  (cudart tells NoGPUError the driver and runtime versions)
from harness.calling.cdecl import header_to_cdef  # noqa: F401  (re-exported: library.header_to_cdef)
from harness.compile import build as _build

COMMON_HEADER = paths.CUDA_DIR / "common" / "cudalab.h"

# C pointee type -> numpy dtype. Only these cross the boundary as arrays.
_DTYPES = {
    "float": np.float32,
    "double": np.float64,
    "int": np.int32,
    "int32_t": np.int32,
    "unsigned int": np.uint32,
    "uint32_t": np.uint32,
    "long long": np.int64,
    "int64_t": np.int64,
    "unsigned long long": np.uint64,
    "uint64_t": np.uint64,
    "unsigned char": np.uint8,
    "uint8_t": np.uint8,
    "signed char": np.int8,
    "int8_t": np.int8,
    "short": np.int16,
    "int16_t": np.int16,
    "unsigned short": np.uint16,
    "uint16_t": np.uint16,
}
# Types that are typedefs of another in C, told apart by the name the header declares (cffi resolves
# typedefs, so `cudalab_bf16 *` and `uint16_t *` look the same once parsed; see declared_pointees).
# cudalab_bf16 (cuda/common/cudalab.h) is bfloat16 stored as uint16_t: an ml_dtypes.bfloat16 array.
try:
    import ml_dtypes as _ml_dtypes

    _DTYPES["cudalab_bf16"] = _ml_dtypes.bfloat16
except ImportError:  # pragma: no cover - ml_dtypes is a dependency; without it bf16 parameters refuse arrays
    pass


def _pointee(ctype) -> str | None:
    if ctype.kind != "pointer":
        return None
    item = ctype.item
    return item.cname if item.kind in ("primitive",) else None


# The header's own words, which cffi forgets once it has parsed them, come from harness.calling.cdecl (the
# same reader harness.calling.inline uses for sources).
status_functions = cdecl.status_functions
const_params = cdecl.const_params
param_names = cdecl.param_names


def declared_pointees(cdef: str) -> dict[str, list[str | None]]:
    """For each function, the typedef'd element type (`cudalab_bf16`) of each pointer parameter that
    has a dtype of its own in _DTYPES, else None."""
    return cdecl.declared_pointees(cdef, [n for n in _DTYPES if n.startswith("cudalab_")])


class ArgumentRangeError(ValueError, OverflowError):
    """An integer argument does not fit its C parameter. A ValueError (a bad argument, refused
    before any call) that is also the OverflowError cffi would have raised, without its vagueness."""


def int_range(ffi: cffi.FFI, cname: str) -> tuple[int, int]:
    """The values a C integer type holds."""
    bits = 8 * ffi.sizeof(cname)
    unsigned = cname.startswith(("unsigned", "uint", "size_t", "_Bool")) or cname in ("uintptr_t",)
    return (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def as_pointer(ffi: cffi.FFI, ctype, value, argname: str, const: bool = False, declared: str | None = None):
    """Marshal one argument for a pointer parameter; raise TypeError/ValueError before any call.
    `declared` is the pointee's name as the header writes it, when that is a typedef with a dtype
    of its own (`cudalab_bf16`: ml_dtypes.bfloat16 rather than the uint16 cffi sees)."""
    from harness.calling.cudart import DeviceBuffer, Stream  # local: cudart needs libcudart only when used

    if isinstance(value, DeviceBuffer):
        # Device memory that knows its element type (harness.calling.inline's DeviceArray) is checked like an array.
        dtype = getattr(value, "dtype", None)
        want = _DTYPES.get(declared or _pointee(ctype) or "")
        if dtype is not None and want is not None and np.dtype(dtype) != np.dtype(want):
            raise TypeError(f"{argname}: device array is {np.dtype(dtype)}, but the parameter is {ctype.cname}")
        return ffi.cast(ctype, value.ptr)
    if isinstance(value, Stream):
        return ffi.cast(ctype, value.handle)
    if isinstance(value, (str, bytes)):
        # A `const char *` parameter (a variant name, say) takes a Python string.
        if ctype.item.cname != "char" or not const:
            raise TypeError(f"{argname}: only const char * takes a string; this parameter is {ctype.cname}"
                            f"{'' if ctype.item.cname != 'char' else ' (written by the function): pass a numpy array'}")
        return ffi.new("char[]", value.encode() if isinstance(value, str) else value)
    if isinstance(value, ffi.CData):
        return ffi.cast(ctype, value)
    if isinstance(value, np.ndarray):
        cname = declared or _pointee(ctype)
        want = _DTYPES.get(cname) if cname else None
        if want is None:
            raise TypeError(f"{argname}: parameter type {ctype.cname} does not take a numpy array")
        if value.dtype != np.dtype(want):
            raise TypeError(f"{argname}: expected a {np.dtype(want).name} array for {ctype.cname}, got {value.dtype}")
        if not value.flags.c_contiguous:
            raise ValueError(f"{argname}: the array must be C-contiguous (use np.ascontiguousarray)")
        if not value.flags.writeable and not const:
            raise ValueError(f"{argname}: the array is read-only but the parameter is written ({ctype.cname})")
        return ffi.cast(ctype, ffi.from_buffer(value, require_writable=False))
    if value is None:
        return ffi.NULL
    raise TypeError(f"{argname}: expected a numpy array or a device pointer for {ctype.cname}, "
                    f"got {type(value).__name__}")


def marshal(ffi: cffi.FFI, func, fname: str, args: tuple, consts: list[bool] | None = None,
            pointees: list[str | None] | None = None, names: list[str | None] | None = None) -> list:
    ftype = ffi.typeof(func)
    params = ftype.args
    if len(args) != len(params):
        raise TypeError(f"{fname}() takes {len(params)} arguments, got {len(args)}")
    out = []
    for i, (p, v) in enumerate(zip(params, args)):
        pname = names[i] if names and i < len(names) else None
        name = f"{fname}() argument {i + 1}" + (f" ({pname})" if pname else "")
        if p.kind == "pointer":
            out.append(as_pointer(ffi, p, v, name, bool(consts and i < len(consts) and consts[i]),
                                  pointees[i] if pointees and i < len(pointees) else None))
        elif p.kind == "primitive":
            if p.cname == "_Bool" and isinstance(v, (bool, np.bool_)):
                out.append(bool(v))
            elif p.cname in ("float", "double"):
                if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool):
                    raise TypeError(f"{name}: expected a number for {p.cname}, got {type(v).__name__}")
                out.append(float(v))
            else:
                if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                    raise TypeError(f"{name}: expected an integer for {p.cname}, got {type(v).__name__}")
                lo, hi = int_range(ffi, p.cname)
                if int(v) > hi:
                    raise ArgumentRangeError(f"{name}: must be at most {hi} (it is a C {p.cname}), got {int(v)}")
                if int(v) < lo:
                    raise ArgumentRangeError(f"{name}: must be at least {lo} (it is a C {p.cname}), got {int(v)}")
                out.append(int(v))
        else:
            out.append(v)
    return out


class _StreamSlot:
    """The placeholder for the stream argument of `Library.prepare`."""

    def __repr__(self):
        return "library.STREAM"


STREAM = _StreamSlot()


class EntryPoints:
    """Attribute access to a loaded library's C functions, shared by Library and inline's InlineModule:
    each name's wrapper is made once, by the class's `_wrap(fname)` (AttributeError for a name that is
    not an entry point), and kept in `_wrapped`. Names starting with "_" are never entry points: copy,
    pickle and hasattr probe them, and `_wrapped` itself is looked up before __init__ sets it."""

    _wrapped: dict[str, object]

    def _wrap(self, fname: str):
        raise NotImplementedError

    def __getattr__(self, fname: str):
        if fname.startswith("_"):
            raise AttributeError(fname)
        w = self._wrapped.get(fname)
        if w is None:
            w = self._wrapped[fname] = self._wrap(fname)
        return w


class Library(EntryPoints):
    """A loaded lib<prog>.so. Attribute access returns a checked wrapper of each entry point;
    `prepare` marshals the arguments once, for the timing loop."""

    def __init__(self, name: str, path: Path, cdef: str):
        self.name = name
        self.path = Path(path)
        self.ffi = cffi.FFI()
        common = header_to_cdef(COMMON_HEADER.read_text())
        # The common header first: it declares `cudalab_status`, which program headers use.
        self.ffi.cdef(common)
        self.ffi.cdef(cdef)
        self._consts = const_params(cdef)
        self._pointees = declared_pointees(cdef)
        self._names = param_names(cdef)
        self._status = status_functions(cdef) | status_functions(common)
        self.lib = self.ffi.dlopen(str(self.path))
        self._wrapped: dict[str, object] = {}

    def error_name(self, code: int) -> str:
        return self.ffi.string(self.lib.cudalab_error_name(code)).decode()

    def error_string(self, code: int) -> str:
        return self.ffi.string(self.lib.cudalab_error_string(code)).decode()

    def raw(self, fname: str):
        """The bare cffi function, for the few callers that marshal themselves."""
        return getattr(self.lib, fname)

    def _raise(self, fname: str, code: int) -> None:
        # A failed launch leaves a non-sticky error behind; clear it so the next call is clean.
        # A sticky one (the context is lost) is still there on the second read.
        self.lib.cudalab_clear_error()
        still = self.lib.cudalab_context_check() != 0
        raise_for_code(code, self.error_name(code), self.error_string(code), f"{self.name}.{fname}",
                       still_failing=still)

    def _invoke(self, fname: str, func, cargs: list, returns_code: bool) -> int:
        """The one way into a C function: refuse after a lost context, call, raise on a status."""
        check_context(f"{self.name}.{fname}")  # after a sticky error, say so rather than call in
        code = func(*cargs)
        if returns_code and code != 0:
            self._raise(fname, code)
        return code

    def prepare(self, fname: str, *args) -> Callable[[object], int]:
        """Marshal `args` for `fname` once and return `launch(stream)`, which only makes the call
        (and raises on a non-zero status). Pass `library.STREAM` where the stream goes. This is what
        bench cases hand to harness.measuring.timing: the timed span then holds the launch and nothing of
        Python's argument checking (tens of microseconds, as long as a small kernel). The arrays
        and buffers in `args` are kept alive by the returned function."""
        func = getattr(self.lib, fname)  # AttributeError for an unknown entry point
        slots = [i for i, a in enumerate(args) if a is STREAM]
        params = self.ffi.typeof(func).args
        cargs = marshal(self.ffi, func, fname, tuple(None if a is STREAM else a for a in args),
                        self._consts.get(fname), self._pointees.get(fname), self._names.get(fname))
        returns_code = fname in self._status
        ffi, keep = self.ffi, args
        last: list = [object(), None]  # the last stream seen and its cast: one stream per timing loop

        def launch(stream=None):
            if slots:
                if stream is not last[0]:
                    last[0], last[1] = stream, (ffi.NULL if stream is None else ffi.cast(params[slots[0]], stream))
                for i in slots:
                    cargs[i] = last[1]
            return self._invoke(fname, func, cargs, returns_code)

        launch.keep = keep
        launch.__name__ = f"{fname}_prepared"
        return launch

    def _wrap(self, fname: str):
        try:
            func = getattr(self.lib, fname)
        except AttributeError:
            raise AttributeError(f"lib{self.name}.so has no entry point {fname!r}") from None
        ftype = self.ffi.typeof(func)
        returns_code = fname in self._status

        def call(*args):
            cargs = marshal(self.ffi, func, fname, args, self._consts.get(fname), self._pointees.get(fname),
                            self._names.get(fname))
            return self._invoke(fname, func, cargs, returns_code)

        call.__name__ = fname
        call.__doc__ = f"{ftype.result.cname} {fname}({', '.join(a.cname for a in ftype.args)})"
        return call


@functools.cache
def load(prog: str, faults: bool = False) -> Library:
    """Load lib<prog>.so once per process. A missing or stale library raises NotBuilt (which names
    the `invoke build --programs` command); an unknown program ValueError. faults=True loads the fault
    build's twin, build/faults/lib/lib<prog>.so (`make FAULTS=1 ...`, for tests only), whose cdef also
    holds what the header declares under `#ifdef CUDALAB_FAULTS` (which the product lacks)."""
    header = paths.CUDA_DIR / prog / f"{prog}.h"
    if not header.exists():
        raise ValueError(f"no program {prog!r}: {header} does not exist")
    # Checked against the build's record before dlopen: a truncated library would kill Python (SIGBUS).
    path = _build.require(prog, "lib", faults=True) if faults else _build.require(prog, "lib")
    return Library(prog, path, header_to_cdef(header.read_text(), faults=faults))


_TABLES: dict[tuple[str, str], tuple[str, ...]] = {}


def read_table(prog: str, kind: str = "variant") -> tuple[str, ...]:
    """The names in lib<prog>.so's one table of `kind` ("variant", "config", or collectives' "tp_gemm" and
    "tp_allreduce": the GEMMs and all-reduces its tensor-parallel block runs), in its order, through `<prog>_<kind>_count()` /
    `<prog>_<kind>_name(i)`; "tags": each variant's tags, in the variant
    table's order, through `<prog>_variant_tags(i)`. The only reader of these tables on the Python side:
    the names are never typed again. AttributeError when the library has no such table. Read once per
    process, however it is asked for (`read_table(p)` and `read_table(p, "variant")` are one read)."""
    key = (prog, kind)
    if key not in _TABLES:
        accessors = {"variant": ("_variant_count", "_variant_name"), "config": ("_config_count", "_config_name"),
                     "tp_gemm": ("_tp_gemm_count", "_tp_gemm_name"),
                     "tp_allreduce": ("_tp_allreduce_count", "_tp_allreduce_name"),
                     "tags": ("_variant_count", "_variant_tags")}
        if kind not in accessors:
            raise ValueError(f"kind must be 'variant', 'config', 'tp_gemm', 'tp_allreduce' or 'tags', got {kind!r}")
        lib = load(prog)
        count, name = (getattr(lib, prog + suffix) for suffix in accessors[kind])
        _TABLES[key] = tuple(lib.ffi.string(name(i)).decode() for i in range(count()))
    return _TABLES[key]


read_table.cache_clear = _TABLES.clear  # type: ignore[attr-defined]


def tagged(prog: str, tag: str) -> tuple[str, ...]:
    """The variants, in the table's order, whose tags (`<prog>_variant_tags(i)`: words the C side
    derives from what each variant is, e.g. "allreduce graph") include `tag`. A kind of variant is
    asked of the library, never typed as a list of names."""
    return tuple(v for v, tags in zip(read_table(prog), read_table(prog, "tags")) if tag in tags.split())


def table_attributes(module: str, prog: str, **more: Callable[[], object]):
    """A program module's __getattr__ (PEP 562) for the names read from its library's tables when first
    asked for, never typed in Python: VARIANTS, the variant table, and each of `more` (a name and the
    function that reads it). Any other name is the usual AttributeError of `module`."""

    def __getattr__(name: str):
        if name == "VARIANTS":
            return read_table(prog)
        if name in more:
            return more[name]()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def table_index(prog: str, kind: str, name: str) -> int:
    """The position of `name` in lib<prog>.so's `kind` table (what the C entry points take); ValueError
    naming the valid ones otherwise; TypeError for a name that is no string (a variant's number, None)."""
    if not isinstance(name, str):
        raise TypeError(f"{kind} must be a string, got {type(name).__name__}")
    names = read_table(prog, kind)
    if name not in names:
        raise ValueError(f"unknown {prog} {'configuration' if kind == 'config' else kind} {name!r}; "
                         f"valid: {', '.join(names)}")
    return names.index(name)


def check_int(v, name: str, lo: int | None = None, hi: int | None = None, why: str = "") -> int:
    """An integer argument of a program's public function, checked before any launch: TypeError for a
    bool, a float or anything else that is no integer; ValueError outside lo..hi (`why` says where hi
    comes from, e.g. " (a C int)")."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be at least {lo}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be at most {hi}{why}, got {v}")
    return int(v)


def check_array(a, name: str, dtype, ndim: int | None = None, shape: tuple | None = None,
                contiguous: str = "require") -> np.ndarray:
    """Validate one array argument of a program's public function before any launch.

    contiguous="require" raises ValueError for a non-contiguous array; "copy" makes it contiguous.
    """
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != np.dtype(dtype):
        raise TypeError(f"{name} must be {np.dtype(dtype).name}, got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {a.shape}")
    if not a.flags.c_contiguous:
        if contiguous == "copy":
            return np.ascontiguousarray(a)
        raise ValueError(f"{name} must be C-contiguous (got strides {a.strides}); use np.ascontiguousarray")
    return a
