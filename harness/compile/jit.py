"""Compiling CUDA C from a string (harness.calling.inline, the %%cuda magics): the project's nvcc and flags,
a cache keyed by everything that goes into the output, and nvcc's messages mapped back to the
user's lines. See harness/calling/inline.py for the whole story; this module is the compiler half of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

from harness.base import files, paths, procs
from harness.base.errors import BuildError, CudalabError
from harness.compile import build as _build
from harness.compile import toolchain

FORMAT_VERSION = 2  # bump when the way a cached file is made changes (2: every entry has a manifest)
ENV_FLAGS = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN")  # nvcc reads these itself
COMMON_DIR = paths.CUDA_DIR / "common"

# Pre-included (nvcc -include) before every inline library source, so the user's line numbers
# stay the user's. It holds the launcher convention and cudalab.h's types (cudalab_status,
# cudalab_bf16); check.cuh stays opt-in because the lectures' own `cdiv` would clash with its overload.
PRELUDE = r"""// harness.calling.inline prelude: pre-included before the user's source (nvcc -include).
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


class InlineCacheError(CudalabError):
    """The inline cache folder cannot be used (not a folder, not writable, another user's, writable by
    others). One line naming the folder, where it came from, and the fix; IPython shows only that."""

    def _render_traceback_(self):
        return f"InlineCacheError: {self.args[0]}".splitlines()


# The fix for a CUDALAB_CACHE that cannot serve: a private folder of the user's own. Never a chmod of the
# folder named: it is often a shared one (/tmp, a project folder) whose mode others rely on.
PRIVATE_FOLDER_FIX = ("set CUDALAB_CACHE to a folder of your own that only you can write (`mkdir -m 700 "
                      "~/cudalab-cache`, then `export CUDALAB_CACHE=~/cudalab-cache`), or unset it to use "
                      "~/.cache/cudalab/inline")


def _cache_problem(folder: Path, why: str) -> InlineCacheError:
    env = os.environ.get("CUDALAB_CACHE")
    where = f"CUDALAB_CACHE={env}" if env else f"the inline cache {folder}"
    if env:
        fix = PRIVATE_FOLDER_FIX
    elif "can write" in why:  # the default folder, the lab's own: making it private again is the fix
        fix = f"`chmod go-w {folder}`, or set CUDALAB_CACHE to a private folder of your own"
    else:
        fix = "fix that folder's owner and mode, or set CUDALAB_CACHE to a private folder of your own"
    return InlineCacheError(f"{where}: {why}; {fix}")


def _make_private(folder: Path) -> None:
    """Create `folder` and any missing parent as 0700 whatever the umask (os.makedirs gives parents
    the umask's mode), so nobody else can put a file in it."""
    missing = []
    p = folder
    while not p.exists() and not p.is_symlink() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            if not d.is_dir():
                raise
            continue
        os.chmod(d, 0o700)


def _unsafe(st: os.stat_result) -> str:
    """Why a cache folder or entry with this stat must not be trusted, or ""."""
    if st.st_uid != os.geteuid():
        return f"it is owned by another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        return f"other users can write it (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def cache_folder() -> Path:
    """cache_dir(), created 0700 when missing and checked before anything in it is used: a path that is
    not a folder, one you cannot write, or one another user owns or can write (where someone could put
    a library for you to load) raises InlineCacheError in one line. Stale temporary files of compiles
    that were killed are removed."""
    folder = cache_dir()
    try:
        _make_private(folder)
        st = folder.stat()
    except FileExistsError:
        raise _cache_problem(folder, "it is a file, not a folder") from None
    except NotADirectoryError:
        raise _cache_problem(folder, "a part of that path is a file, not a folder") from None
    except PermissionError as e:
        raise _cache_problem(folder, f"cannot create it ({e.strerror.lower()} at {e.filename})") from None
    except OSError as e:
        raise _cache_problem(folder, f"cannot create it ({e.strerror or e})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise _cache_problem(folder, "it is a file, not a folder")
    why = _unsafe(st)
    if why:
        raise _cache_problem(folder, f"refusing to load libraries from it: {why}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _cache_problem(folder, "it is not writable by you")
    files.clean_stale(folder)
    return folder


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
    """The Makefile's ARCH, as `make print-nvcc` resolves it: $ARCH (refused in one line, as the build
    refuses it, when it is not a compute capability), else the visible GPU's, else 90 (SASS for sm_90
    plus compute_90 PTX)."""
    return _build.nvcc_flags().arch


def _nvcc() -> toolchain.Tool:
    return toolchain.require("nvcc")


def _base_flags(arch: str) -> list[str]:
    """The Makefile's own flags for `arch` (harness/compile/build.py nvcc_flags): host warnings are errors
    and cuda/common and cuda/shared are on the include path here as in `invoke build`."""
    return list(_build.nvcc_flags(arch).flags)


def _common_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(COMMON_DIR.glob("*")):
        if p.is_file():
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _key(**parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    """Write whole through a temporary file and os.replace (harness.base.files), readable by the owner only."""
    files.replace(path, data, mode=0o600)


def _run_nvcc(cmd: list[str], out: Path, deps: bool = False) -> tuple[int, str, list[str]]:
    """Run nvcc with `-o <temporary file>` and rename the result into `out` on success. Returns
    (status, nvcc's output, the files it read when `deps`: nvcc -MD's list, sources and headers).

    nvcc and what it starts (cicc, ptxas, the host compiler) run in their own process group with
    TMPDIR pointed at a private folder beside `out`: when the caller is interrupted (Ctrl-C, a
    notebook's stop button) the whole group is stopped at once, and its tmpxft_* files and the
    temporary output go with the folder, instead of cicc running on and megabytes left in /tmp."""
    tmp = files.temporary(out)
    work = files.temporary_dir(out.parent, "nvcc")
    env = {**os.environ, "TMPDIR": str(work)}
    depfile = work / "deps.d"
    extra = ["-MD", "-MF", str(depfile)] if deps else []
    try:
        # A group of its own that dies with this process (procs.start), even when it is killed outright.
        proc = procs.start(cmd + extra + ["-o", str(tmp)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, errors="replace", env=env)
        try:
            with procs.sigterm_as_interrupt():  # a SIGTERM or SIGHUP unwinds like Ctrl-C: the group is stopped below
                stdout, stderr = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            procs.stop_group(proc)
            return 124, "nvcc timed out after 600 s", []
        except BaseException:
            procs.stop_group(proc)
            raise
        read = _parse_depfile(depfile.read_text(errors="replace")) if deps and proc.returncode == 0 else []
        if proc.returncode == 0:
            os.chmod(tmp, 0o700)
            os.replace(tmp, out)
        return proc.returncode, stdout + stderr, read
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
        shutil.rmtree(work, ignore_errors=True)


def _parse_depfile(text: str) -> list[str]:
    """The prerequisites of a make-style dependency file (`out : a.cu \\ /usr/include/x.h ...`)."""
    body = text.replace("\\\n", " ")
    _, _, deps = body.partition(": ")
    words = re.split(r"(?<!\\)\s+", deps.strip())
    return [w.replace("\\ ", " ") for w in words if w]


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
    if any("[-Werror=" in d.message for d in errors):
        lines.append("(host warnings are errors here, as in `invoke build`; flags=['-Xcompiler', '-Wno-error'], "
                     "or --flags \"-Xcompiler -Wno-error\" in a cell, keeps them warnings)")
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
        print(f"harness.calling.inline: {msg}", file=sys.stderr, flush=True)


# --- the cache entries ---------------------------------------------------------------------------------
# An entry is <stem>.so (or the executable, or the common .o), <stem>.log (nvcc's output, which
# resource_usage() reads) and <stem>.manifest.json, written last: the key, the SHA-256 of the output
# and the log, and every file nvcc read (nvcc -MD) with its size, time and SHA-256. An entry is used
# only when the manifest verifies: a truncated or replaced output, a missing log, or an entry another
# user owns or can write is rebuilt (said once on stderr); a header that changed is a plain miss.
# A lock file per entry lets one process build it while another waits, so no manifest ever describes
# another process's output.

MANIFEST = ".manifest.json"
_said: set[str] = set()



def _file_record(path: str) -> list:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, files.sha256(Path(path))]


def _changed(path: str, record) -> bool:
    """Has a file nvcc read changed since the entry was built? Size and time first, the hash when
    they differ (a checkout or a copy touches a file without changing it)."""
    try:
        st = os.stat(path)
    except OSError:
        return True
    size, mtime, digest = record
    if st.st_size == size and st.st_mtime_ns == mtime:
        return False
    return st.st_size != size or files.sha256(Path(path)) != digest


def _verify(out: Path, log_path: Path, key: str) -> tuple[str, str]:
    """("ok" | "miss" | "stale" | "bad", why) for a cache entry."""
    manifest = _manifest_path(out)
    if not manifest.exists():
        return ("bad", "it has no manifest (an interrupted or an old build)") if out.exists() else ("miss", "")
    try:
        m = json.loads(manifest.read_text())
        want_out, want_log, deps = m["out_sha256"], m["log_sha256"], m["deps"]
        if m.get("key") != key or not isinstance(deps, dict):
            return "bad", "its manifest is for another key"
    except (OSError, ValueError, KeyError, TypeError):
        return "bad", "its manifest is unreadable"
    for p in (out, log_path, manifest):
        try:
            why = _unsafe(p.lstat())
        except OSError:
            return "bad", f"{p.name} is missing"
        if why:
            return "bad", f"{p.name}: {why}"
    if files.sha256(out) != want_out:
        return "bad", f"{out.name} is not the file that was built (its SHA-256 differs: truncated or replaced)"
    if files.sha256(log_path) != want_log:
        return "bad", f"{log_path.name} is not the log of that build"
    for path, record in deps.items():
        if _changed(path, record):
            return "stale", f"{path} changed since it was built"
    return "ok", ""


def _manifest_path(out: Path) -> Path:
    return Path(str(out) + MANIFEST)


def _publish_manifest(out: Path, log_path: Path, key: str, deps: list[str]) -> None:
    records = {}
    for d in deps:
        with contextlib.suppress(OSError):
            records[str(Path(d).resolve())] = _file_record(d)
    _write_atomic(_manifest_path(out), json.dumps({"key": key, "v": FORMAT_VERSION, "out_sha256": files.sha256(out),
                                                   "log_sha256": files.sha256(log_path), "deps": records},
                                                  indent=1).encode())


@contextlib.contextmanager
def _entry_lock(out: Path):
    """An exclusive lock on one entry (flock on <out>.lock): one builder at a time; released when the
    process ends however it ends."""
    import fcntl

    fd = os.open(str(out) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _cached_or_build(out: Path, log_path: Path, key: str, what: str, verbose: bool,
                     build) -> tuple[str, bool, float]:
    """(nvcc's log, cache hit, seconds) for the entry at `out`: used when it verifies, else built by
    `build()` -> (log, files nvcc read), which raises on failure."""
    if _verify(out, log_path, key)[0] == "ok":
        _say(verbose, f"{what}: cache hit, nothing compiled ({out})")
        return log_path.read_text(errors="replace"), True, 0.0
    with _entry_lock(out):
        # Checked again under the lock: another process may have built it meanwhile, or be half-way
        # through (which is not damage, so nothing is said before the lock is held).
        state, why = _verify(out, log_path, key)
        if state == "ok":
            _say(verbose, f"{what}: cache hit, nothing compiled ({out})")
            return log_path.read_text(errors="replace"), True, 0.0
        if state == "bad" and str(out) not in _said:
            _said.add(str(out))
            print(f"harness.calling.inline: the cache entry {out} is damaged ({why}); rebuilding it", file=sys.stderr,
                  flush=True)
        elif state == "stale":
            _say(verbose, f"{what}: {why}; recompiling")
        with contextlib.suppress(FileNotFoundError):
            _manifest_path(out).unlink()  # from here until the new manifest, the entry never verifies
        t0 = time.perf_counter()
        log, deps = build()
        seconds = time.perf_counter() - t0
        _write_atomic(log_path, log.encode())
        _publish_manifest(out, log_path, key, deps)
    return log, False, seconds


def _host_compiler(args: list[str]) -> list[str]:
    """The host compiler nvcc will run (-ccbin/--compiler-bindir in `args`, else $NVCC_CCBIN, else g++
    on PATH): its resolved path and `--version`, for the cache key."""
    cc = os.environ.get("NVCC_CCBIN") or "g++"
    for i, a in enumerate(args):
        for opt in ("-ccbin", "--compiler-bindir"):
            if a == opt and i + 1 < len(args):
                cc = args[i + 1]
            elif a.startswith(opt + "="):
                cc = a.split("=", 1)[1]
    return list(_compiler_identity(cc))


@functools.lru_cache(maxsize=8)
def _compiler_identity(cc: str) -> tuple[str, str]:
    path = Path(cc)
    if path.is_dir():
        path = path / "g++"
    found = shutil.which(str(path)) or str(path)
    try:
        real = os.path.realpath(found)
        st = os.stat(real)
        version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30).stdout
        return real, f"{version.strip()} size={st.st_size} mtime={st.st_mtime_ns}"
    except (OSError, subprocess.SubprocessError):
        return found, "not found"


def _environment_key(flags: list[str]) -> dict:
    """What nvcc takes from the environment, which the command line does not show: its extra flags
    and the host compiler (those flags may name one too)."""
    env = {k: os.environ.get(k, "") for k in ENV_FLAGS}
    words = shlex.split(env["NVCC_PREPEND_FLAGS"]) + list(flags) + shlex.split(env["NVCC_APPEND_FLAGS"])
    return {"env": env, "host_compiler": _host_compiler(words), "link": toolchain.link_flags()}


def _common_object(arch: str, nvcc: toolchain.Tool, folder: Path, verbose: bool) -> Path:
    """cuda/common/cudalab.cu (the error-name entry points every cudalab library exports), compiled
    once per arch and nvcc into the cache."""
    key = _key(kind="common", arch=arch, nvcc=[nvcc.path, nvcc.version], common=_common_hash(),
               flags=_base_flags(arch), environment=_environment_key([]), v=FORMAT_VERSION)
    obj = folder / f"cudalab-common-{arch}-{key[:16]}.o"

    def build():
        _say(verbose, f"compiling {COMMON_DIR / 'cudalab.cu'} for sm_{arch} -> {obj}")
        rc, log, deps = _run_nvcc([nvcc.path, *_base_flags(arch), "-c", str(COMMON_DIR / "cudalab.cu")], obj,
                                  deps=True)
        if rc != 0:
            raise BuildError(f"could not compile cuda/common/cudalab.cu:\n{log[-2000:]}",
                             _build.parse_diagnostics(log), log)
        return log, deps

    _cached_or_build(obj, obj.with_suffix(".log"), key, "cudalab common object", verbose, build)
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
    folder = cache_folder()
    prelude_key = hashlib.sha256(PRELUDE.encode()).hexdigest()[:12]
    # Everything that goes into the output: the source, the flags (the command line's and nvcc's
    # environment's), the arch, nvcc, the host compiler, the link flags, the prelude and cuda/common.
    # Headers reached through a user's -I are checked through the manifest (nvcc -MD's list).
    key = _key(kind=kind, source=source, flags=flags, arch=arch, nvcc=[nvcc.path, nvcc.version],
               base=_base_flags(arch), prelude=PRELUDE if kind == "lib" else "", common=_common_hash(),
               environment=_environment_key(flags), v=FORMAT_VERSION)
    stem = f"{re.sub(r'[^A-Za-z0-9_]', '_', name or 'inline')[:40]}-{key[:16]}"
    src_path = folder / f"{stem}.cu"
    out = folder / (f"{stem}.so" if kind == "lib" else stem)
    log_path = folder / f"{stem}.log"
    what = name or "inline"

    def build():
        _write_atomic(src_path, source.encode())
        cmd = [nvcc.path, *_base_flags(arch)]
        if kind == "lib":
            prelude = folder / f"cudalab-inline-prelude-{prelude_key}.h"
            if not prelude.exists() or prelude.read_text(errors="replace") != PRELUDE:
                _write_atomic(prelude, PRELUDE.encode())
            common = _common_object(arch, nvcc, folder, verbose)
            cmd += ["-shared", "-include", str(prelude), str(src_path), str(common)]
        else:
            cmd += [str(src_path)]
        cmd += flags + toolchain.link_flags()
        _say(verbose, f"{what}: compiling for sm_{arch} with nvcc {nvcc.version}: {' '.join(cmd)}")
        rc, log, deps = _run_nvcc(cmd, out, deps=True)
        if rc != 0:
            raise _build_error(log, src_path, display, source, line_offset, f"{display if name is None else name}")
        return log, deps

    log, hit, seconds = _cached_or_build(out, log_path, key, what, verbose, build)
    if not hit:
        _say(verbose, f"{what}: compiled in {seconds:.2f} s -> {out}")
    return _Compiled(out, src_path, log, hit, seconds, arch, key, _warnings(log, src_path, display, line_offset))


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
