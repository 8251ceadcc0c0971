"""CUDA C from a Python string: compile it with the project's nvcc and flags, load it through cffi.

    from harness import inline

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
* **Calls** go through harness.library's marshalling: numpy arrays for pointer parameters (dtype
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
  a harness.sim.dim3. Pointer arguments of a launcher must be device memory (`to_device`,
  `empty`, a DeviceBuffer): a numpy array there would hand the kernel a host address, so it is
  refused with TypeError before the call. A launcher does not synchronise: kernels run
  asynchronously, `to_host()` waits for them, and so does `mod.synchronize()`.
* **Cache.** The shared library is cached under `$CUDALAB_CACHE`, else `$XDG_CACHE_HOME/cudalab/inline`
  (`~/.cache/cudalab/inline`). The key hashes the source, the flags, the arch, nvcc's path and
  version and the project's headers. A hit compiles nothing (`verbose=True` says so). Each
  compile writes a temporary file in the cache folder and renames it into place with os.replace,
  so two processes compiling the same key at once both end with a whole library.
* **Errors.** A failed compile raises BuildError (InlineBuildError) whose diagnostics name
  `<inline>` (or the name given) with line numbers of the user's string, each offending line quoted.
* **printf.** Device printf writes to the process's standard output (file descriptor 1), like a
  C program's, when the device synchronises. `with capture_stdout() as out: ...` captures it at
  the descriptor level (it synchronises the device and flushes C stdio before reading) into
  `out.text`; `capture_stdout(echo=True)` also writes it to Python's sys.stdout.

The build flags are the Makefile's: -O3 -lineinfo -std=c++17, SASS and PTX for ARCH (the visible
GPU's compute capability from nvidia-smi, else sm_90 with compute_90 PTX; `arch=` or $ARCH
overrides), -Xcompiler -fPIC, -shared, -Xptxas -v (see `mod.resource_usage()`), and
`-I cuda/common` so that `#include "check.cuh"` gives CUDA_TRY, CUDA_TRY_LAUNCH and cdiv. Host
warnings are reported (`mod.warnings`), not made errors, for code typed into a notebook.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import cffi
import numpy as np

from . import build as _build
from . import cudart, library, toolchain
from .errors import BuildError, CudalabError

__all__ = [
    "load", "compile_program", "InlineModule", "Program", "DeviceArray", "to_device", "empty",
    "capture_stdout", "synchronize", "cdiv", "cache_dir", "default_arch", "extract_cdef",
    "UnsupportedSignature", "InlineBuildError", "PRELUDE",
]

FORMAT_VERSION = 1  # bump when the way a cached file is made changes
COMMON_DIR = _build.CUDA_DIR / "common"

# Pre-included (nvcc -include) before every inline library source, so the user's line numbers
# stay the user's. It holds the launcher convention and cudalab.h's types (cudalab_status,
# cudalab_bf16); check.cuh stays opt-in because the lectures' own `cdiv` would clash with its overload.
PRELUDE = r"""// harness.inline prelude: pre-included before the user's source (nvcc -include).
#pragma once
#include <cuda_runtime.h>
#include "cudalab.h"
typedef struct cudalab_launch {
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int shared_bytes;
    void *stream;
} cudalab_launch;
#ifdef __cplusplus
#define CUDALAB_LAUNCH(L)                                                                   \
    <<<dim3((L)->grid[0], (L)->grid[1], (L)->grid[2]),                                       \
       dim3((L)->block[0], (L)->block[1], (L)->block[2]), (L)->shared_bytes,                 \
       (cudaStream_t)(L)->stream>>>
#endif
"""

# The types every inline cdef may use beside the user's own.
_CDEF_PREAMBLE = {
    "cudaError_t": "typedef int cudaError_t;",
    "cudalab_status": "typedef int cudalab_status;",
    "cudalab_bf16": "typedef uint16_t cudalab_bf16;",
    "cudaStream_t": "typedef struct CUstream_st *cudaStream_t;",
    "cudaEvent_t": "typedef struct CUevent_st *cudaEvent_t;",
    "cudalab_launch": ("typedef struct cudalab_launch { unsigned int grid[3]; unsigned int block[3]; "
                       "unsigned int shared_bytes; void *stream; } cudalab_launch;"),
}


def cdiv(n: int, b: int) -> int:
    """Ceiling division, for grid sizes: the number of b-sized blocks that cover n items."""
    return -(-int(n) // int(b))


# =================================================================================================
# Signatures: extern "C" declarations -> cffi cdef
# =================================================================================================

class UnsupportedSignature(CudalabError, TypeError):
    """Some extern "C" functions use types cffi cannot express. `problems` maps name -> reason."""

    def __init__(self, problems: dict[str, str]):
        self.problems = dict(problems)
        self.functions = list(self.problems)
        lines = [f"cannot call {len(self.problems)} extern \"C\" function(s) from Python through cffi: "
                 + ", ".join(self.problems)]
        lines += [f"  {name}: {why}" for name, why in self.problems.items()]
        lines.append("Use plain C types in their signatures (pointers to float, int, unsigned char, ...), "
                     "or pass header= with plain C declarations of the functions you want to call.")
        super().__init__("\n".join(lines))

    def _render_traceback_(self):  # IPython: the message, without a Python traceback
        return f"UnsupportedSignature: {self.args[0]}".splitlines()


@dataclasses.dataclass
class Signature:
    name: str
    decl: str  # the cdef declaration, `int f(float *x, int n);`
    line: int  # where it starts in the source (1-based)
    params: list[str]
    launcher: bool = False


@dataclasses.dataclass
class Extracted:
    cdef: str
    functions: list[Signature]
    kernels: dict[str, int]  # __global__ / __device__ functions declared extern "C": name -> line
    problems: dict[str, str]


_TOKEN = re.compile(r"""
    (?P<str>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<id>[A-Za-z_]\w*)
  | (?P<num>\.?\d(?:[\w.]|[eEpP][+-])*)
  | (?P<punct>::|\.\.\.|->|&&|\|\||<<=|>>=|<<|>>|[-+*/%&|^!=<>]=|[{}()\[\];,<>*&=+\-/%!~^|?:.#@\\])
  | (?P<space>\s+)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)

_INTS = {f"{s}int{n}_t" for s in ("", "u") for n in (8, 16, 32, 64)}
_C_TYPE_WORDS = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "bool",
                 "_Bool", "size_t", "ssize_t", "ptrdiff_t", "intptr_t", "uintptr_t", "wchar_t"} | _INTS
_QUALIFIERS = {"const", "volatile"}
_DROP = {"inline", "__inline__", "__inline", "__forceinline__", "__noinline__", "__host__", "extern",
         "__restrict__", "__restrict", "restrict", "register", "__cdecl", "CUDARTAPI"}
_DROP_WITH_ARGS = {"__attribute__", "__declspec", "__launch_bounds__", "__maxnreg__", "alignas",
                   "__align__", "__cluster_dims__"}
_VECTOR = re.compile(r"^(?:(?:u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4]|dim3|"
                     r"(?:double|long|ulong|longlong|ulonglong)4_(?:16|32)a)$")
_HALF = {"half", "__half", "half2", "__half2", "__nv_bfloat16", "__nv_bfloat162", "nv_bfloat16",
         "__nv_fp8_e4m3", "__nv_fp8_e5m2"}


def _strip_comments(src: str) -> str:
    """Comments become spaces (newlines kept, so offsets still give line numbers); strings stay."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _strip_directives(text: str) -> tuple[str, dict[str, str]]:
    """Blank out preprocessor lines (and `#if 0` blocks); return object-like #defines."""
    lines = text.split("\n")
    macros: dict[str, str] = {}
    out, i, dead = [], 0, 0  # dead: depth inside an `#if 0`
    depth = 0
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith("#"):
            out.append("" if dead else line)
            i += 1
            continue
        full, count = line, 1
        while full.endswith("\\") and i + count < len(lines):
            full = full[:-1] + " " + lines[i + count]
            count += 1
        out.extend([""] * count)
        i += count
        d = full.lstrip()[1:].strip()
        if re.match(r"if(n?def)?\b", d):
            depth += 1
            if dead or re.match(r"if\s+0\s*$", d):
                dead = dead or depth
        elif d.startswith("endif"):
            if dead == depth:
                dead = 0
            depth -= 1
        elif re.match(r"(else|elif)\b", d) and dead == depth and dead:
            dead = 0 if d.startswith("else") else dead
        elif not dead:
            m = re.match(r"define\s+([A-Za-z_]\w*)\b(?!\()\s*(.*)$", d)
            if m:
                macros[m.group(1)] = m.group(2).strip()
    return "\n".join(out), macros


def _tokens(text: str) -> list[tuple[str, str, int]]:
    toks = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "space":
            continue
        toks.append((kind, m.group(), m.start()))
    return toks


def _expand(toks, macros, depth=0):
    if not macros or depth > 8:
        return toks
    out, changed = [], False
    for t in toks:
        if t[0] == "id" and t[1] in macros:
            changed = True
            out.extend((k, v, t[2]) for k, v, _ in _tokens(macros[t[1]]))
        else:
            out.append(t)
    return _expand(out, macros, depth + 1) if changed else out


def _match(toks, i, open_="(", close=")"):
    """Index of the token closing the bracket opened at toks[i]."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j][1] == open_:
            depth += 1
        elif toks[j][1] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def _items(toks, lo, hi):
    """Split toks[lo:hi] into top-level items: declarations ending in `;` and definitions ending in
    a `{...}` body. Yields (tokens, is_definition)."""
    cur, i = [], lo
    while i < hi:
        t = toks[i]
        if t[1] == ";":
            if cur:
                yield cur, False
            cur = []
        elif t[1] == "{":
            j = _match(toks, i, "{", "}")
            words = [x[1] for x in cur]
            is_type = any(w in ("struct", "union", "enum", "class") for w in words) and "(" not in words
            if is_type:
                cur.extend(toks[i:j + 1])
            else:
                if cur:
                    yield cur, True
                cur = []
            i = j
        elif t[1] == "(":
            j = _match(toks, i)
            cur.extend(toks[i:j + 1])
            i = j
        else:
            cur.append(t)
        i += 1
    if cur:
        yield cur, False


def _extern_c_items(toks):
    """Every item declared with C linkage: inside `extern "C" { }` or after `extern "C"`."""
    i, n = 0, len(toks)
    while i < n - 1:
        if toks[i][1] == "extern" and toks[i + 1][1] == '"C"':
            if i + 2 < n and toks[i + 2][1] == "{":
                j = _match(toks, i + 2, "{", "}")
                yield from _items(toks, i + 3, j)
                i = j + 1
                continue
            # one declaration: up to its `;` or through its body
            j = i + 2
            while j < n and toks[j][1] not in (";", "{"):
                if toks[j][1] == "(":
                    j = _match(toks, j)
                j += 1
            if j < n and toks[j][1] == "{":
                k = _match(toks, j, "{", "}")
                yield toks[i + 2:j], True
                i = k + 1
            else:
                yield toks[i + 2:j], False
                i = j + 1
            continue
        i += 1


def _drop_decorations(toks):
    out, i = [], 0
    while i < len(toks):
        t = toks[i]
        if t[1] in _DROP_WITH_ARGS and i + 1 < len(toks) and toks[i + 1][1] == "(":
            i = _match(toks, i + 1) + 1
            continue
        if t[1] == "[" and i + 1 < len(toks) and toks[i + 1][1] == "[":  # [[nodiscard]]
            i = _match(toks, i, "[", "]") + 1
            continue
        if t[1] not in _DROP:
            out.append(t)
        i += 1
    return out


def _join(words: Iterable[str]) -> str:
    s = " ".join(words)
    s = re.sub(r"\s*\*\s*", " *", s).replace("* *", "**")
    s = re.sub(r"\s*(&&?)\s*", r" \1", s)
    s = re.sub(r"\s*(::|<)\s*", r"\1", s)
    s = re.sub(r"\s+>", ">", s)
    s = re.sub(r"\s*([\[\](),])\s*", r"\1", s).replace(",", ", ")
    return re.sub(r"\s+", " ", s).strip()


class _Types:
    def __init__(self, typedefs: set[str], structs: set[str]):
        self.typedefs = typedefs | set(_CDEF_PREAMBLE)
        self.structs = structs
        self.opaque: set[str] = set()

    def check(self, words: list[str], what: str, named: bool = True) -> str | None:
        """None when `words` (a parameter, its name optional, or a return type) is plain C."""
        text = " ".join(words)
        if "&" in words or "&&" in words:
            return f"{what} `{_join(words)}` is a C++ reference"
        if "<" in words or "template" in words or "typename" in words:
            return f"{what} `{_join(words)}` is a C++ template type"
        if "::" in words:
            return f"{what} `{_join(words)}` names a C++ namespace or class member"
        if "..." in words:
            return f"{what} is variadic (...)"
        pointer = "*" in words or "[" in words
        ids = [w for w in words if re.match(r"[A-Za-z_]\w*$", w) and w not in _QUALIFIERS]
        tag = None
        for k, w in enumerate(ids):
            if w in ("struct", "union", "enum"):
                tag = ids[k + 1] if k + 1 < len(ids) else None
                break
        for w in ids:
            if _VECTOR.match(w):
                if w == "dim3":
                    return (f"{what} `{text}` uses dim3, a C++ struct: use a `const cudalab_launch *` first "
                            f"parameter (the launcher convention) or plain unsigned ints")
                kind = f"a pointer to the CUDA vector type {w}" if pointer else f"the CUDA vector type {w} by value"
                return (f"{what} `{_join(words)}` passes {kind}: cffi cannot express it; pass a pointer to "
                        f"its scalar type and reinterpret_cast inside")
            if w in _HALF:
                return f"{what} `{_join(words)}` uses {w}: pass uint16_t/unsigned short bits instead"
            if w in ("auto", "class", "decltype", "operator"):
                return f"{what} `{_join(words)}` uses C++ `{w}`"
        if tag is not None:
            if tag not in self.structs:
                if not pointer:
                    return (f"{what} passes `{ids[0]} {tag}` by value, but it is not declared inside "
                            f"extern \"C\"")
                self.opaque.add(f"{ids[0]} {tag}")
            return None
        unknown = [w for w in ids if w not in _C_TYPE_WORDS and w not in self.typedefs]
        # The last identifier may be the parameter's name (it follows a type word).
        if named and unknown and unknown[-1] == ids[-1] and len(ids) > 1:
            unknown = unknown[:-1]
        if unknown:
            return (f"{what} `{_join(words)}` uses the unknown type {unknown[0]!r} (cffi knows plain C types, "
                    f"and structs/typedefs declared inside extern \"C\")")
        if not any(w in _C_TYPE_WORDS or w in self.typedefs for w in ids) and ids:
            return f"{what} `{_join(words)}` has no type"
        return None


def _split_params(toks):
    params, cur, depth = [], [], 0
    for t in toks:
        if t[1] in "([{":
            depth += 1
        elif t[1] in ")]}":
            depth -= 1
        if t[1] == "," and depth == 0:
            params.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur:
        params.append(cur)
    return params


def extract_cdef(source: str, *, strict: bool = True, line_offset: int = 0) -> Extracted:
    """Read the extern "C" functions of a CUDA C source into a cffi cdef (the lectures' `get_sig`,
    done with a tokenizer). With strict=True, unsupported types raise UnsupportedSignature naming
    every such function; with strict=False they are left out and listed in `.problems`."""
    text, macros = _strip_directives(_strip_comments(source))
    toks = _expand(_tokens(text), macros)
    line_of = functools.partial(_line_of, text, offset=line_offset)

    items = list(_extern_c_items(toks))
    typedef_texts, typedefs, structs = [], set(), set()
    funcs_raw = []
    for item, _is_def in items:
        host = any(t[1] == "__host__" for t in item)
        item = _drop_decorations(item)
        if not item:
            continue
        words = [t[1] for t in item]
        if words[0] == "typedef" or (words[0] in ("struct", "union", "enum") and "{" in words):
            typedef_texts.append(_join(words) + ";")
            if words[0] == "typedef":
                fnptr = [words[k + 2] for k in range(len(words) - 2) if words[k:k + 2] == ["(", "*"]]
                names = [w for w in words if re.match(r"[A-Za-z_]\w*$", w)]
                typedefs.add(fnptr[0] if fnptr else names[-1])
            for k, w in enumerate(words[:-1]):
                if w in ("struct", "union", "enum") and re.match(r"[A-Za-z_]\w*$", words[k + 1]):
                    structs.add(words[k + 1])
            continue
        if "(" not in words:
            continue  # a variable
        funcs_raw.append((item, host))

    types = _Types(typedefs, structs)
    functions: list[Signature] = []
    kernels: dict[str, int] = {}
    problems: dict[str, str] = {}
    seen: set[str] = set()
    for item, host in funcs_raw:
        words = [t[1] for t in item]
        # name ( params ): the first `(` preceded by an identifier that is not a decoration
        k = next((k for k in range(1, len(words)) if words[k] == "(" and re.match(r"[A-Za-z_]\w*$", words[k - 1])),
                 None)
        if k is None:
            continue
        name, line = words[k - 1], line_of(item[0][2])
        close = _match(item, k)
        ret = [w for w in words[:k - 1]]
        if "__global__" in ret or ("__device__" in ret and not host):
            kernels[name] = line
            continue
        if "static" in ret or "constexpr" in ret:
            continue  # not exported
        ret = [w for w in ret if w not in ("__device__",)]
        if name in seen:
            continue
        seen.add(name)
        if "template" in ret or "<" in ret:
            problems[name] = f"line {line}: is a C++ template"
            continue
        why = types.check(ret, "the return type", named=False) if ret else "has no return type"
        params_toks = _split_params(item[k + 1:close])
        params = []
        for pi, p in enumerate(params_toks):
            pw = [t[1] for t in p]
            if "=" in pw:  # a C++ default argument: cffi has none, so the caller passes every argument
                pw = pw[:pw.index("=")]
            if pw == ["void"] and len(params_toks) == 1:
                break
            why = why or types.check(pw, f"parameter {pi + 1}")
            params.append(_join(pw))
        if why:
            problems[name] = f"line {line}: {why}"
            continue
        ret_text = _join(ret)
        decl = f"{ret_text} {name}({', '.join(params) if params else 'void'});"
        first = re.sub(r"\b(const|struct)\b", "", params[0]).replace(" ", "") if params else ""
        launcher = bool(re.match(r"cudalab_launch\*[A-Za-z_]\w*$|cudalab_launch\*$", first))
        functions.append(Signature(name, decl, line, params, launcher))

    # Every other __global__ kernel too, so that asking for one explains the launcher convention.
    for i, t in enumerate(toks):
        if t[1] == "__global__":
            rest = _drop_decorations(toks[i + 1:i + 40])
            k = next((k for k in range(1, len(rest)) if rest[k][1] == "(" and rest[k - 1][0] == "id"), None)
            if k is not None:
                kernels.setdefault(rest[k - 1][1], line_of(rest[k - 1][2]))

    if strict and problems:
        raise UnsupportedSignature(problems)
    needed = list(_CDEF_PREAMBLE.values())
    parts = needed + [f"{o};" for o in sorted(types.opaque)] + typedef_texts + [f.decl for f in functions]
    cdef = "\n".join(parts)
    # cffi is the final judge; a cdef it rejects is reported the same way.
    try:
        cffi.FFI().cdef(cdef)
    except Exception as e:  # cffi raises CDefError, FFIError or pycparser's ParseError
        bad = {}
        for f in functions:
            try:
                cffi.FFI().cdef("\n".join(needed + [f"{o};" for o in sorted(types.opaque)] + typedef_texts
                                          + [f.decl]))
            except Exception as e2:
                bad[f.name] = f"line {f.line}: cffi cannot read `{f.decl}`: {e2}"
        if not bad:
            bad["<declarations>"] = f"cffi cannot read the declarations inside extern \"C\": {e}"
        if strict:
            raise UnsupportedSignature(bad) from None
        problems.update(bad)
        functions = [f for f in functions if f.name not in bad]
        cdef = "\n".join(needed + [f"{o};" for o in sorted(types.opaque)] + [f.decl for f in functions])
    return Extracted(cdef, functions, kernels, problems)


def _line_of(text: str, pos: int, offset: int = 0) -> int:
    return text.count("\n", 0, pos) + 1 + offset


def _header_cdef(header: str | os.PathLike) -> Extracted:
    """A user-given header (plain C declarations): cffi reads it as it is, after the common
    preamble for the cudalab names it uses but does not define."""
    text = Path(header).read_text() if isinstance(header, os.PathLike) else str(header)
    body = library.header_to_cdef(text)
    pre = [v for k, v in _CDEF_PREAMBLE.items()
           if re.search(rf"\b{k}\b", body) and not re.search(rf"typedef[^;]*\b{k}\s*;", body)]
    # Names and launchers, read with the same parser as sources: wrap it as one extern "C" block.
    info = extract_cdef('extern "C" {\n' + body + "\n}", strict=False)
    cdef = "\n".join(pre + [body])
    try:
        cffi.FFI().cdef(cdef)
    except Exception as e:
        raise UnsupportedSignature({"<header>": f"cffi cannot read header=: {e}"}) from None
    return Extracted(cdef, info.functions, info.kernels, {})


# =================================================================================================
# Compiling and caching
# =================================================================================================

def cache_dir() -> Path:
    """$CUDALAB_CACHE, else $XDG_CACHE_HOME/cudalab/inline, else ~/.cache/cudalab/inline."""
    env = os.environ.get("CUDALAB_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "cudalab" / "inline"


_ARCH = re.compile(r"^(?:sm_|compute_)?(\d{2,3}[a-z]?)$")


def _normalize_arch(arch) -> str:
    s = str(arch).strip().lower()
    if re.match(r"^\d+\.\d+$", s):
        s = s.replace(".", "")
    m = _ARCH.match(s)
    if not m:
        raise ValueError(f"arch {arch!r} is not a compute capability: use e.g. 90, '9.0', 'sm_90' or 'sm_90a'")
    return m.group(1)


@functools.lru_cache(maxsize=1)
def default_arch() -> str:
    """The Makefile's default: $ARCH when it names a compute capability, else the visible GPU's
    (nvidia-smi), else 90 (SASS for sm_90 plus compute_90 PTX)."""
    env = os.environ.get("ARCH", "")
    if env:
        with contextlib.suppress(ValueError):
            return _normalize_arch(env)
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        first = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
        if first:
            return _normalize_arch(first)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        pass
    return "90"


def _nvcc() -> toolchain.Tool:
    nvcc = toolchain.find("nvcc")
    if not nvcc.found:
        raise BuildError("nvcc not found: put it on PATH, set CUDA_HOME, or `pip install -e '.[toolkit]'`")
    return nvcc


def _base_flags(arch: str) -> list[str]:
    return ["-O3", "-lineinfo", "-std=c++17", "-gencode", f"arch=compute_{arch},code=[sm_{arch},compute_{arch}]",
            f"-I{COMMON_DIR}", "-Xcompiler", "-fPIC,-Wall,-Wextra", "-Xptxas", "-v"]


def _common_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(COMMON_DIR.glob("*")):
        if p.is_file():
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _key(**parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary file in the same folder and rename it into place (os.replace is
    atomic on one filesystem), so a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _run_nvcc(cmd: list[str], out: Path) -> tuple[int, str]:
    """Run nvcc with `-o <temporary file>` and rename the result into `out` on success."""
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        p = subprocess.run(cmd + ["-o", tmp], capture_output=True, text=True, timeout=600, errors="replace")
        log = p.stdout + p.stderr
        if p.returncode == 0:
            os.chmod(tmp, 0o755)
            os.replace(tmp, out)
        return p.returncode, log
    except subprocess.TimeoutExpired:
        return 124, "nvcc timed out after 600 s"
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


class InlineBuildError(BuildError):
    """nvcc failed on an inline source. `diagnostics` carry the user's file name and line numbers;
    str() quotes each offending line. IPython shows only this text, not a Python traceback."""

    def __init__(self, message: str, diagnostics: list, log: str, quoted: str):
        super().__init__(message, diagnostics, log)
        self.args = (quoted,)

    def _render_traceback_(self):
        return f"BuildError: {self.args[0]}".splitlines()


def _build_error(log: str, src_path: Path, display: str, source: str, line_offset: int,
                 what: str) -> InlineBuildError:
    log = log.replace(str(src_path), display)
    src_lines = source.splitlines()
    diags = []
    for d in _build.parse_diagnostics(log):
        if d.file in (display, src_path.name) or d.file.endswith(src_path.name):
            d = dataclasses.replace(d, file=display, line=d.line + line_offset)
        diags.append(d)
    errors = [d for d in diags if "error" in d.severity]
    shown = errors or diags
    head = f"nvcc could not compile {what}"
    if errors:
        head += f" ({len(errors)} error{'s' if len(errors) != 1 else ''})"
    lines = [head + ":"]
    for d in shown[:25]:
        lines.append(str(d))
        k = d.line - line_offset
        if d.file == display and 1 <= k <= len(src_lines):
            lines.append(f"  {d.line:4d} | {src_lines[k - 1].rstrip()}")
    if len(shown) > 25:
        lines.append(f"... and {len(shown) - 25} more")
    if not shown:
        tail = [x for x in log.strip().splitlines() if not x.startswith("ptxas info") and
                not re.match(r"^\s+\d+ bytes stack frame", x)]
        lines += tail[-15:]
    return InlineBuildError(head, diags, log, "\n".join(lines))


def _warnings(log: str, src_path: Path, display: str, line_offset: int) -> list:
    out = []
    for d in _build.parse_diagnostics(log.replace(str(src_path), display)):
        if d.severity == "warning":
            if d.file == display:
                d = dataclasses.replace(d, line=d.line + line_offset)
            out.append(d)
    return out


@dataclasses.dataclass
class _Compiled:
    path: Path
    source_path: Path
    log: str
    cache_hit: bool
    seconds: float
    arch: str
    key: str
    warnings: list


def _say(verbose: bool, msg: str) -> None:
    if verbose:
        print(f"harness.inline: {msg}", file=sys.stderr, flush=True)


def _common_object(arch: str, nvcc: toolchain.Tool, folder: Path, verbose: bool) -> Path:
    """cuda/common/cudalab.cu (the error-name entry points every cudalab library exports), compiled
    once per arch and nvcc into the cache."""
    key = _key(kind="common", arch=arch, nvcc=[nvcc.path, nvcc.version], common=_common_hash(),
               flags=_base_flags(arch), v=FORMAT_VERSION)
    obj = folder / f"cudalab-common-{arch}-{key[:16]}.o"
    if not obj.exists():
        _say(verbose, f"compiling {COMMON_DIR / 'cudalab.cu'} for sm_{arch} -> {obj}")
        rc, log = _run_nvcc([nvcc.path, *_base_flags(arch), "-c", str(COMMON_DIR / "cudalab.cu")], obj)
        if rc != 0:
            raise BuildError(f"could not compile cuda/common/cudalab.cu:\n{log[-2000:]}",
                             _build.parse_diagnostics(log), log)
    return obj


def _compile(source: str, *, kind: str, name: str | None, arch, flags, verbose: bool, display: str,
             line_offset: int = 0) -> _Compiled:
    if not isinstance(source, str):
        raise TypeError(f"source must be a str of CUDA C, got {type(source).__name__}")
    if isinstance(flags, str):
        raise TypeError("flags must be a list of separate nvcc arguments, e.g. ['-use_fast_math']")
    flags = [str(f) for f in flags]
    nvcc = _nvcc()
    arch = _normalize_arch(arch) if arch is not None else default_arch()
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    prelude_key = hashlib.sha256(PRELUDE.encode()).hexdigest()[:12]
    key = _key(kind=kind, source=source, flags=flags, arch=arch, nvcc=[nvcc.path, nvcc.version],
               base=_base_flags(arch), prelude=PRELUDE if kind == "lib" else "", common=_common_hash(),
               v=FORMAT_VERSION)
    stem = f"{re.sub(r'[^A-Za-z0-9_]', '_', name or 'inline')[:40]}-{key[:16]}"
    src_path = folder / f"{stem}.cu"
    out = folder / (f"{stem}.so" if kind == "lib" else stem)
    log_path = folder / f"{stem}.log"
    if out.exists():
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        _say(verbose, f"{name or 'inline'}: cache hit, nothing compiled ({out})")
        return _Compiled(out, src_path, log, True, 0.0, arch, key,
                         _warnings(log, src_path, display, line_offset))

    _write_atomic(src_path, source.encode())
    cmd = [nvcc.path, *_base_flags(arch)]
    if kind == "lib":
        prelude = folder / f"cudalab-inline-prelude-{prelude_key}.h"
        if not prelude.exists():
            _write_atomic(prelude, PRELUDE.encode())
        common = _common_object(arch, nvcc, folder, verbose)
        cmd += ["-shared", "-include", str(prelude), str(src_path), str(common)]
    else:
        cmd += [str(src_path)]
    cmd += flags + toolchain.link_flags()
    _say(verbose, f"{name or 'inline'}: compiling for sm_{arch} with nvcc {nvcc.version}: {' '.join(cmd)}")
    t0 = time.perf_counter()
    rc, log = _run_nvcc(cmd, out)
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise _build_error(log, src_path, display, source, line_offset,
                           f"{display if name is None else name}")
    _write_atomic(log_path, log.encode())
    _say(verbose, f"{name or 'inline'}: compiled in {seconds:.2f} s -> {out}")
    return _Compiled(out, src_path, log, False, seconds, arch, key, _warnings(log, src_path, display, line_offset))


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
    raise TypeError(f"stream must be a harness.cudart.Stream, a cudaStream_t or None, got {type(stream).__name__}")


class InlineModule:
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

    def __getattr__(self, fname: str):
        if fname.startswith("_"):
            raise AttributeError(fname)
        w = self._wrapped.get(fname)
        if w is not None:
            return w
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
        w = self._make_call(sig)
        self._wrapped[fname] = w
        return w

    def _make_call(self, sig: Signature):
        checked = getattr(self.library, sig.name)  # harness.library's marshalling and status check
        ftype = self.ffi.typeof(self.library.raw(sig.name))
        params = ftype.args
        fname = sig.name
        ffi = self.ffi

        def prepare(args, skip_first: bool):
            # harness.library marshals and checks every argument (dtype, contiguity, const, strings,
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
         verbose: bool = False, _display: str | None = None, _line_offset: int = 0) -> InlineModule:
    """Compile a CUDA C string into a shared library (cached) and return its extern "C" functions.

    name:    a label for the cache file and messages (default "inline").
    arch:    compute capability (90, "9.0", "sm_90", "sm_90a"); default the Makefile's.
    flags:   extra nvcc arguments, a list (e.g. ["-use_fast_math"] or ["-lcublas"]).
    header:  plain C declarations (a str, or a pathlib.Path to read) to use as the cffi cdef instead
             of the declarations read from the source.
    verbose: say on stderr whether it compiled or came from the cache.

    Raises UnsupportedSignature (a TypeError) before compiling when an extern "C" function cannot
    be expressed in cffi, and InlineBuildError (a BuildError) when nvcc fails.
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
            print(f"harness.inline: {w}", file=sys.stderr)
    _check_symbols(compiled.path, extracted, label, header is not None)
    return InlineModule(label, compiled, extracted, source)


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


@dataclasses.dataclass
class Program:
    """A whole CUDA program (with main) compiled from a string; `path` is the executable."""
    path: Path
    source_path: Path
    cache_hit: bool
    compile_seconds: float
    arch: str
    log: str
    warnings: list

    def resource_usage(self):
        return _build.parse_ptxas(self.log)


def compile_program(source: str, *, name: str | None = None, arch=None, flags=(), verbose: bool = False,
                    _display: str | None = None, _line_offset: int = 0) -> Program:
    """Compile a whole program (one with main) into a cached executable, with the same flags,
    cache and error mapping as `load`. The %%cuda magic runs what this returns."""
    c = _compile(source, kind="program", name=name, arch=arch, flags=flags, verbose=verbose,
                 display=_display or "<inline>", line_offset=_line_offset)
    return Program(c.path, c.source_path, c.cache_hit, c.seconds, c.arch, c.log, c.warnings)


# =================================================================================================
# Device memory
# =================================================================================================

# DeviceArray, to_device and empty live in harness.cudart (device memory is cudart's business);
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
