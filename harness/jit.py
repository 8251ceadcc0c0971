"""Compiling CUDA C from a string (harness.inline, the %%cuda magics): the project's nvcc and flags,
a cache keyed by everything that goes into the output, and nvcc's messages mapped back to the
user's lines. See harness/inline.py for the whole story; this module is the compiler half of it.
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
from pathlib import Path

from . import build as _build
from . import toolchain
from .errors import BuildError

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
