"""C declarations -> cffi: the one reader of `extern "C"` declarations.

Program headers (cuda/<prog>/<prog>.h, loaded by harness.calling.library) and inline sources (harness.calling.inline)
are read by the same tokenizer: comments and preprocessor lines out, object-like #defines expanded,
then every declaration with C linkage (inside `extern "C" { }`, after `extern "C"`, or a whole
header wrapped as one such block). From each function it keeps the return type and the parameters
as written, which is where the loader learns what cffi forgets once it has parsed a cdef:

    status_functions(cdef)   which returns are a CUDA status (`cudalab_status`, `cudaError_t`)
    const_params(cdef)       which pointer parameters point to const data (read-only arrays are fine)
    declared_pointees(cdef)  typedef'd element types with a dtype of their own (`cudalab_bf16 *`)
    param_names(cdef)        parameter names, for messages (`max_iters` rather than `argument 5`)

`extract_cdef(source)` additionally checks that every type is one cffi can express and builds the
cdef of an inline source; `header_cdef(header)` takes a user's header= as it is.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Iterable
from pathlib import Path

import cffi

from harness.base.errors import CudalabError


def header_to_cdef(text: str, faults: bool = False) -> str:
    """Turn a plain C header into something cffi's cdef accepts: drop preprocessor lines and the
    `extern "C" {` ... `}` wrapper that sits inside `#ifdef __cplusplus` blocks. What a header declares
    inside `#ifdef CUDALAB_FAULTS` exists only in the tests' fault build (cuda/common/faults.cuh): it is
    kept with faults=True (and that block's #else part dropped), else left out like the wrapper."""
    out: list[str] = []
    blocks: list[list] = []  # per open conditional: [kind ("cpp", "faults" or None), in its #else part]
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            d = s[1:].strip()
            if d.startswith(("if", "ifdef", "ifndef")):
                kind = ("cpp" if re.match(r"ifdef\s+__cplusplus|if\s+defined\(__cplusplus\)", d) else
                        "faults" if re.match(r"ifdef\s+CUDALAB_FAULTS\b|if\s+defined\(CUDALAB_FAULTS\)", d) else None)
                blocks.append([kind, False])
            elif d.startswith(("else", "elif")) and blocks:
                blocks[-1][1] = True
            elif d.startswith("endif") and blocks:
                blocks.pop()
            continue
        if any(kind == "cpp" or (kind == "faults" and in_else == faults) for kind, in_else in blocks):
            continue
        out.append(line)
    return "\n".join(out)


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


def header_cdef(header: str | os.PathLike) -> Extracted:
    """A user-given header (plain C declarations): cffi reads it as it is, after the common
    preamble for the cudalab names it uses but does not define."""
    text = Path(header).read_text() if isinstance(header, os.PathLike) else str(header)
    body = header_to_cdef(text)
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
# What the loader needs from a header: return types and parameters as written
# =================================================================================================

@dataclasses.dataclass(frozen=True)
class Decl:
    """One function declaration, decorations dropped: its return type and each parameter as written."""
    name: str
    ret: str
    params: tuple[str, ...]


def declarations(text: str) -> list[Decl]:
    """Every function declared with C linkage in `text` (a header, a cdef, or a source). Text with no
    `extern "C"` at all (a cdef, or a header's body) is read as one extern "C" block."""
    src = text if re.search(r'extern\s+"C"', text) else 'extern "C" {\n' + text + "\n}"
    body, macros = _strip_directives(_strip_comments(src))
    toks = _expand(_tokens(body), macros)
    out, seen = [], set()
    for item, _is_def in _extern_c_items(toks):
        item = _drop_decorations(item)
        words = [t[1] for t in item]
        if not words or words[0] == "typedef" or "(" not in words:
            continue
        k = next((k for k in range(1, len(words)) if words[k] == "(" and re.match(r"[A-Za-z_]\w*$", words[k - 1])),
                 None)
        if k is None or words[k - 1] in seen:
            continue
        seen.add(words[k - 1])
        ret = [w for w in words[:k - 1] if w not in ("static", "__global__", "__device__", "constexpr")]
        params = []
        for p in _split_params(item[k + 1:_match(item, k)]):
            pw = [t[1] for t in p]
            if "=" in pw:
                pw = pw[:pw.index("=")]
            params.append(_join(pw))
        if params == ["void"]:
            params = []
        out.append(Decl(words[k - 1], _join(ret), tuple(params)))
    return out


_PARAM_TYPE_WORDS = _C_TYPE_WORDS | _QUALIFIERS | {"struct", "union", "enum"} | set(_CDEF_PREAMBLE)


def param_parts(param: str) -> tuple[list[str], str | None, bool]:
    """(the type's words before any `*`, the parameter's name or None, whether it is a pointer)."""
    pointer = "*" in param or "[" in param
    head = param.split("[")[0]
    ids = re.findall(r"[A-Za-z_]\w*", head)
    name = None
    if len(ids) >= 2 and not head.rstrip().endswith("*") and ids[-1] not in _PARAM_TYPE_WORDS:
        name = ids[-1]
    type_words = re.findall(r"[A-Za-z_]\w*", head.split("*")[0]) if pointer else ids
    if name is not None and not pointer and type_words and type_words[-1] == name:
        type_words = type_words[:-1]
    return type_words, name, pointer


def status_functions(cdef: str) -> set[str]:
    """The functions whose return value is a CUDA status: declared `cudalab_status` or `cudaError_t`.
    In a header that never names `cudalab_status` (one written before it existed), every `int`
    return is a status too; anywhere else a plain `int` is a value (a count, a flag)."""
    decls = declarations(cdef)
    legacy = not any(d.ret == "cudalab_status" or "cudalab_status" in d.params for d in decls) and \
        not re.search(r"\bcudalab_status\b", re.sub(r"typedef\s+int\s+cudalab_status\s*;", " ", _strip_comments(cdef)))
    return {d.name for d in decls if d.ret in ("cudalab_status", "cudaError_t") or (legacy and d.ret == "int")}


def const_params(cdef: str) -> dict[str, list[bool]]:
    """For each function, whether each pointer parameter points to const data (cffi forgets `const`)."""
    out = {}
    for d in declarations(cdef):
        out[d.name] = [param_parts(p)[2] and "const" in param_parts(p)[0] for p in d.params]
    return out


def param_names(cdef: str) -> dict[str, list[str | None]]:
    """For each function, its parameters' names as written (None where a parameter has none)."""
    return {d.name: [param_parts(p)[1] for p in d.params] for d in declarations(cdef)}


def declared_pointees(cdef: str, names: Iterable[str]) -> dict[str, list[str | None]]:
    """For each function, the pointee type each pointer parameter is written with when that name is
    one of `names` (typedefs cffi resolves away, such as `cudalab_bf16`), else None."""
    names = set(names)
    out = {}
    for d in declarations(cdef):
        row = []
        for p in d.params:
            words, _, pointer = param_parts(p)
            words = [w for w in words if w not in _QUALIFIERS]
            row.append(words[-1] if pointer and words and words[-1] in names else None)
        out[d.name] = row
    return out

