"""Run make, and read what the compilers said: nvcc/gcc diagnostics and ptxas resource usage."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.base import files, procs
from harness.base.errors import BuildError, NotBuilt
from harness.base.paths import BUILD, CUDA_DIR, ROOT
from harness.compile import toolchain


def programs(root: Path | None = None) -> list[str]:
    """Every cuda/<prog>/ that holds <prog>.cu, in name order (what the Makefile discovers)."""
    cuda = (root / "cuda") if root is not None else CUDA_DIR
    return sorted(d.name for d in cuda.iterdir() if d.is_dir() and (d / f"{d.name}.cu").exists())


# The fault build (`make FAULTS=1 ...`): the product compiled with -DCUDALAB_FAULTS, which adds the
# deliberately wrong answers tests use to show a checker rejects one. It has outputs of its own under
# build/faults/ (the same layout as build/), is never part of `invoke build`, and only tests ask for it.
FAULTS_BUILD = BUILD / "faults"


def lib_path(prog: str, faults: bool = False) -> Path:
    return (FAULTS_BUILD if faults else BUILD) / "lib" / f"lib{prog}.so"


def bin_path(prog: str, faults: bool = False) -> Path:
    return (FAULTS_BUILD if faults else BUILD) / "bin" / prog


def is_fault_target(target: str) -> bool:
    """Whether a make target (a path relative to the root) is an output of the fault build."""
    return target.startswith("build/faults/")


# --- what the build wrote: each library and executable against its record -------------------------
# The Makefile renames each linked file into place only after writing build/sums/<its path>: the
# file's SHA-256 and size. A file is trusted only when it matches that record: a truncated or
# overwritten library would otherwise crash Python in dlopen (SIGBUS) with no message, and make,
# which trusts a file by its date, would call it up to date.

def record_path(output: Path, root: Path | None = None) -> Path:
    root = root or ROOT
    output = Path(output)
    rel = output.relative_to(root) if output.is_absolute() else output
    return root / "build" / "sums" / rel


def _read_record(record: Path) -> tuple[str, int] | None:
    try:
        digest, size = record.read_text().split()
        return digest, int(size)
    except (OSError, ValueError):
        return None



# Files already checked in this process, by identity (inode, size, mtime, ctime of the file and its record):
# a test session runs the same executable hundreds of times and hashes it once.
_verified: set[tuple] = set()
_verified_lock = threading.Lock()


def _identity(path: Path, record: Path) -> tuple | None:
    try:
        a, b = path.stat(), record.stat()
    except OSError:
        return None
    # ctime too: writing a file and putting its old mtime back (as `touch -r` or a copy with -p does)
    # still moves its ctime, which no one can set.
    return (str(path), a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns, a.st_ctime_ns, b.st_ino, b.st_mtime_ns, b.st_ctime_ns)


def stale_reason(output: Path, root: Path | None = None) -> str | None:
    """None when `output` is the file its build wrote; else what is wrong with it, in a few words
    ("missing", "not the file its build wrote: ..."). Hashes the file once per process while it is unchanged."""
    output = Path(output)
    if not output.is_absolute():
        output = (root or ROOT) / output
    if not output.exists():
        return "missing"
    try:
        record = record_path(output, root)
    except ValueError:
        return f"not verified: it is outside {root or ROOT}, where the build keeps its records"
    why = None
    for _ in range(3):  # a build renaming the file and its record in turn is seen between the two at most briefly
        ident = _identity(output, record)
        if ident is not None and ident in _verified:
            return None
        if not output.exists():
            return "missing"
        rec = _read_record(record)
        if rec is None:
            why = f"not verified: its build record {record.relative_to(root or ROOT)} is missing or unreadable"
        else:
            size = output.stat().st_size
            if size != rec[1]:
                why = f"not the file its build wrote ({size} bytes, the build wrote {rec[1]}: truncated or replaced)"
            elif files.sha256(output) != rec[0]:
                why = "not the file its build wrote (its SHA-256 differs from the build's record: changed since)"
            else:
                if ident is not None and _identity(output, record) == ident:
                    with _verified_lock:
                        _verified.add(ident)
                return None
        if _identity(output, record) == ident:
            return why
    return why


def owner(name: str) -> str:
    """The program that builds the executable `name`: itself, or for a CPU twin (square_cpu, built from
    cuda/square/square_cpu.c) the program whose folder holds it. `invoke build --programs` takes only that."""
    if (CUDA_DIR / name / f"{name}.cu").exists():
        return name
    base = name.removesuffix("_cpu")
    if base != name and (CUDA_DIR / base / f"{name}.c").exists():
        return base
    return name


def verified(output: Path, prog: str) -> Path:
    """`output` when it is the file its build wrote, else NotBuilt saying what is wrong and how to build it
    (the command names the program that builds it: square for build/bin/square_cpu)."""
    why = stale_reason(output)
    if why is not None:
        raise NotBuilt(output, owner(prog), None if why == "missing" else why)
    return Path(output)


def require(prog: str, kind: str = "lib", faults: bool = False) -> Path:
    """The one check that a program is built: build/lib/lib<prog>.so (kind "lib") or build/bin/<prog>
    ("exe"), verified against the build's record (size and SHA-256), else NotBuilt. faults=True: the
    same file of the fault build, build/faults/lib/lib<prog>.so or build/faults/bin/<prog>."""
    if kind not in ("lib", "exe"):
        raise ValueError(f"kind must be 'lib' or 'exe', not {kind!r}")
    if faults:
        return verified(lib_path(prog, True) if kind == "lib" else bin_path(prog, True), prog)
    return verified(lib_path(prog) if kind == "lib" else bin_path(prog), prog)


def stale_outputs(targets_: list[str], root: Path | None = None) -> list[str]:
    """The libraries and executables among `targets_` that exist but do not match their records (make
    sees only times, so it would take a truncated or changed one for built)."""
    root = root or ROOT
    return [t for t in targets_ if t.startswith(("build/lib/", "build/bin/", "build/faults/lib/", "build/faults/bin/"))
            and (root / t).exists() and stale_reason(root / t, root) is not None]


def invalidate_stale(targets_: list[str], root: Path | None = None) -> list[str]:
    """Remove each library or executable among `targets_` that exists but does not match its record,
    so that the make that follows relinks it. Returns the ones removed."""
    root = root or ROOT
    removed = stale_outputs(targets_, root)
    for t in removed:
        (root / t).unlink()
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:  # a zombie (exited, not yet reaped) is not running
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


_TMP_NAME = re.compile(r"\.tmp(\d+)$")


def sweep_temporaries(root: Path | None = None) -> list[Path]:
    """Delete the temporary files of build steps whose shell is gone (a make killed mid-step): the
    Makefile names each `<output>.tmp<PID of its recipe shell>`; and build/.tmp/<PID>, the compilers'
    temporary folder of a build whose process is gone."""
    removed = []
    build_dir = (root or ROOT) / "build"
    if not build_dir.is_dir():
        return removed
    tmp_root = build_dir / ".tmp"
    if tmp_root.is_dir():
        for d in tmp_root.iterdir():
            if d.name.isdigit() and not _running(int(d.name)):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
    for dirpath, _dirs, names in os.walk(build_dir):
        for name in names:
            m = _TMP_NAME.search(name)
            if m is None or _running(int(m.group(1))):  # a step still running (another make in this tree)
                continue
            path = Path(dirpath) / name
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


def targets_of(progs: list[str] | None, root: Path | None = None) -> list[str] | None:
    """The make targets of these programs; None (everything) for an empty selection."""
    if not progs:
        return None
    return [t for p in progs for t in targets(p, root)]


def targets(prog: str, root: Path | None = None) -> list[str]:
    t = [f"build/lib/lib{prog}.so", f"build/bin/{prog}", f"build/ptxas/{prog}.txt"]
    if (((root / "cuda") if root is not None else CUDA_DIR) / prog / f"{prog}_cpu.c").exists():
        t.append(f"build/bin/{prog}_cpu")
    return t


# The `file` of a diagnostic that is a tool's own line, with no source file (nvcc fatal, the linker, a
# recipe's shell, make's own checks).
_TOOL_LINES = ("<nvcc>", "<link>", "<ptxas>", "<shell>", "<make>", "<tool>")


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    column: int | None
    severity: str
    message: str

    def __str__(self) -> str:
        if self.file in _TOOL_LINES:  # a tool's line without a file: shown as the tool wrote it
            return self.message
        where = self.file + (f":{self.line}" if self.line else "") + (f":{self.column}" if self.column else "")
        return f"{where}: {self.severity}: {self.message}"

    def source_line(self, root: Path | None = None) -> str | None:
        """The line the diagnostic points at, from the file as it is now (None when unreadable)."""
        if self.line <= 0:
            return None
        path = Path(self.file)
        if not path.is_absolute():
            path = (root or ROOT) / path
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            return None
        return lines[self.line - 1].rstrip() if self.line <= len(lines) else None

    def quoted(self, root: Path | None = None) -> str:
        """`file:line: error: message` and, below it, the source line it points at."""
        src = self.source_line(root)
        return str(self) + (f"\n  {self.line:5d} | {src.strip()}" if src else "")


# nvcc front end:  cuda/x/x.cu(12): error: identifier "foo" is undefined
_NVCC = re.compile(r"^(?P<file>[^\s:()][^:()]*)\((?P<line>\d+)\): (?P<sev>error|warning)(?: #\w+-\w)?: (?P<msg>.*)$")
# gcc/g++ (host code, our warnings-as-errors):  cuda/x/x.cu:29:8: error: ...
_GCC = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>(?:fatal )?error|warning): (?P<msg>.*)$")
# A file-level message with no line (the Makefile's "cuda/x/main.cu: error: missing: ...").
_FILE = re.compile(r"^(?P<file>cuda/[^\s:]+): (?P<sev>error): (?P<msg>.*)$")
# Lines without file:line that still say why a step failed: ptxas, nvlink, the linker (`ld:`,
# `/usr/bin/ld:`, collect2), nvcc's own `nvcc fatal` (an unknown option or architecture), the shell and
# coreutils in a recipe (a read-only or full build/), and make's own `*** ... Stop.` (the Makefile's checks).
_OTHER = re.compile(r"^(?:ptxas (?:error|fatal)\s*:|nvlink (?:error|fatal)|nvcc (?:fatal|error)\s*:"
                    r"|.*undefined reference to|(?:\S*/)?ld(?:\.\w+)?: |collect2: |(?:/bin/)?(?:ba|da)?sh: \d+: "
                    r"|(?:mkdir|mv|cat|rm|ln|printf|stat|sha256sum): |.*\b(?:Permission denied|No space left on device"
                    r"|Read-only file system)\b|(?:Makefile|\S+\.mk):\d+: \*\*\* )")
# Any other tool's error with no file:line of a source: `<where>: [fatal] error: <message>`, as gcc's
# `<command-line>: fatal error: cuda_runtime.h: No such file or directory` (an nvcc that cannot find its
# own headers). A `|` before it marks a quoted source line (gcc's `  12 | ...`), not a diagnostic.
_TOOL_ERROR = re.compile(r"^[^|\s][^|]*?: (?:fatal )?error\s*: \S")
# Lines of make's own that only echo a failure already shown above them.
_MAKE_ECHO = re.compile(r"^make(?:\[\d+\])?: \*\*\* (?:\[|Waiting)|^make(?:\[\d+\])?: Target .* not remade")


def parse_diagnostics(text: str) -> list[Diagnostic]:
    """nvcc's and gcc's file:line diagnostics, in order, without duplicates."""
    seen, out = set(), []
    for raw in text.splitlines():
        line = raw.strip()
        m = _NVCC.match(line)
        col = None
        if not m:
            m = _GCC.match(line)
            col = int(m.group("col")) if m and m.group("col") else None
        if not m and (f := _FILE.match(line)):
            d = Diagnostic(f.group("file"), 0, None, f.group("sev"), f.group("msg").strip())
        elif m:
            d = Diagnostic(m.group("file"), int(m.group("line")), col, m.group("sev"), m.group("msg").strip())
        elif _OTHER.match(line) and not _MAKE_ECHO.match(line):
            where = ("<ptxas>" if line.startswith("ptxas") else "<nvcc>" if line.startswith("nvcc")
                     else "<make>" if re.match(r"(?:Makefile|\S+\.mk):\d+:", line)
                     else "<link>" if re.search(r"\bld\b|collect2|nvlink|undefined reference", line) else "<shell>")
            d = Diagnostic(where, 0, None, "error", re.sub(r"\s+:", ":", line, count=1))
        elif _TOOL_ERROR.match(line) and not _MAKE_ECHO.match(line):
            d = Diagnostic("<tool>", 0, None, "error", line)
        else:
            continue
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


_ARCH_WORD = re.compile(r"^(?:sm_|compute_)?(\d+[af]?)$")
# What a flag variable may not hold: it is spliced into the compilers' command lines the shell runs.
# The Makefile refuses the same characters in the same variables (its `What reaches a shell`), for a
# plain `make`; this is the same rule, checked before make runs so that `invoke build` says it in one line.
_SHELL_META = re.compile(r"[;&|<>`'\"\\()$\n]")
# The variables make takes from the environment that reach a command line as flags: EXTRA_NVCCFLAGS,
# and each program's <prog>_NVCCFLAGS, <prog>_LDLIBS and <prog>_GENCODE (the ones its build.mk sets).
PROGRAM_FLAG_VARS = ("NVCCFLAGS", "LDLIBS", "GENCODE")
# Commands and folders make takes from the environment: quoted where they run, but make itself would
# expand a `$` in them.
_PATH_VARS = ("NVCC", "CC", "PYTHON", "CUDA_HOME", "NCCL_HOME")


def flag_variables(root: Path | None = None) -> list[str]:
    """The names of the flag variables a user can set for make: EXTRA_NVCCFLAGS and each program's own."""
    cuda = (root / "cuda") if root is not None else CUDA_DIR
    progs = programs(root) if cuda.is_dir() else []  # a Makefile of its own, with no programs (tests)
    return ["EXTRA_NVCCFLAGS"] + [f"{p}_{v}" for p in progs for v in PROGRAM_FLAG_VARS]


def check_make_environment(env=None, root: Path | None = None) -> None:
    """Raise BuildError (one line) when a variable of the environment that make reads would reach a shell
    unquoted: a flag variable holding a shell character, a command or folder holding `$` or a newline."""
    env = os.environ if env is None else env
    for name in flag_variables(root):
        value = env.get(name, "")
        if _SHELL_META.search(value):
            raise BuildError(f"{name}={value!r} (from the environment): only compiler flags, without the "
                             "shell's special characters ; & | < > ` ' \" \\ ( ) $ or a newline")
    for name in _PATH_VARS:
        value = env.get(name, "")
        if "$" in value or "\n" in value:
            raise BuildError(f"{name}={value!r} (from the environment): a path, which may not hold `$` or a newline")


def parse_arch(value: str, nvcc: str | None = None, source: str = "--arch") -> str:
    """`--arch` (or ARCH) as the Makefile takes it: one compute capability or a comma list of them
    ("90", "sm_80", "75,80,90"), each one that this nvcc compiles for. Raise BuildError with one line
    otherwise, before anything reaches make or a shell."""
    words = [w.strip() for w in str(value).split(",")]
    nvcc = nvcc or toolchain.find("nvcc").path
    known = toolchain.gpu_archs(nvcc) if nvcc else None
    out = []
    for w in words:
        m = _ARCH_WORD.match(w)
        if m and (known is None or m.group(1) in known):
            if m.group(1) not in out:
                out.append(m.group(1))
            continue
        hint = " (write 9.0 as 90)" if re.fullmatch(r"\d+\.\d+", w) else ""
        what = f"a compute capability that this nvcc builds for ({', '.join(known)})" if known else \
            "a compute capability such as 90"
        raise BuildError(f"{source}: {w!r} is not {what}{hint}; a comma list (75,80,90) builds one binary for several")
    return ",".join(out)


def make_command(targets_: list[str] | None = None, jobs: int | None = None, arch: str | None = None,
                 dry_run: bool = False, root: Path | None = None, keep_going: bool = False) -> list[str]:
    nvcc = toolchain.require("nvcc")
    # make reads ARCH and the flag variables from the environment too: check those here as well.
    if arch:
        arch = parse_arch(arch, nvcc.path)
    elif os.environ.get("ARCH"):
        arch = parse_arch(os.environ["ARCH"], nvcc.path, "ARCH (from the environment)")
    check_make_environment(root=root)
    # --output-sync=line: each recipe line's output is written whole when the line ends. Without it, parallel
    # jobs interleave inside a line (a tool that writes "mkdir: " and its message in two writes can have
    # another job's "  LINK ..." between them), and the error line the build reports comes out torn.
    cmd = ["make", "-C", str(root or ROOT), f"-j{jobs or os.cpu_count() or 2}", "--no-print-directory",
           "--output-sync=line", f"NVCC={nvcc.path}"]
    # The target names the build: outputs under build/faults/ are made by the fault build (FAULTS=1),
    # which has rules for nothing else, so one make builds one or the other.
    faults = [is_fault_target(t) for t in targets_ or []]
    if any(faults) and not all(faults):
        raise BuildError("the fault build's outputs (build/faults/...) and the product's are built by separate makes")
    if faults and all(faults):
        cmd.append("FAULTS=1")
    home = toolchain.cuda_home()
    if home:
        cmd.append(f"CUDA_HOME={home}")
    if arch:
        cmd.append(f"ARCH={arch}")
    if dry_run:
        cmd.append("-n")
    if keep_going:
        cmd.append("-k")
    return cmd + list(targets_ or [])


@dataclass(frozen=True)
class NvccFlags:
    """What the Makefile compiles with, as `make print-nvcc` resolves it: ARCH (the visible GPU's
    compute capability, $ARCH, or 90), its -gencode words, and the whole shared flag list in NVCCFLAGS's
    order with the include folders made absolute (a compile from a string runs from any folder)."""
    arch: str
    gencode: tuple[str, ...]
    flags: tuple[str, ...]


def nvcc_flags(arch: str | None = None, root: Path | None = None) -> NvccFlags:
    """The Makefile's nvcc flags for `arch` (None: the Makefile's own choice), the one source of the
    target architecture and of the flags for the build and the string compiler alike. Asked of make once
    per arch, root and the environment's ARCH/PTX_ONLY in a process; BuildError in one line when make refuses."""
    return _nvcc_flags(arch, str(root or ROOT), os.environ.get("ARCH", ""), os.environ.get("PTX_ONLY", ""))


@functools.cache
def _nvcc_flags(arch: str | None, root: str, _env_arch: str, _env_ptx: str) -> NvccFlags:
    cmd = make_command(["print-nvcc"], jobs=1, arch=arch, root=Path(root))
    cmd.insert(1, "-s")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"`make print-nvcc` could not run: {e}") from None
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        raise BuildError(f"`make print-nvcc` failed: {lines[-1] if lines else f'status {out.returncode}'}",
                         parse_diagnostics(out.stderr), out.stderr)
    values = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    try:
        words = values["NVCCFLAGS"].split()
        result = NvccFlags(values["ARCH"], tuple(values["GENCODE"].split()),
                           tuple(f"-I{Path(root) / w[2:]}" if w.startswith("-I") and not Path(w[2:]).is_absolute()
                                 else w for w in words))
    except KeyError as e:
        raise BuildError(f"`make print-nvcc` printed no {e.args[0]}= line: {out.stdout.strip()[:200]!r}") from None
    return result


_STEP = re.compile(r"^\s*(?:echo\s+[\"']?)?\s*(NVCC|LINK|CC)\s+([^\s\"']+)")


def pending_steps(targets_: list[str] | None = None, arch: str | None = None, root: Path | None = None) -> list[str]:
    """The compile/link steps make would run now, as 'KIND target' (empty when up to date)."""
    out = subprocess.run(make_command(targets_, arch=arch, dry_run=True, root=root), capture_output=True, text=True)
    return [f"{m.group(1)} {m.group(2)}" for line in out.stdout.splitlines() if (m := _STEP.match(line))]


def count_steps(targets_: list[str] | None = None, arch: str | None = None) -> int:
    """How many compile/link steps make would run now (0 when everything is up to date)."""
    return len(pending_steps(targets_, arch))


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive lock on `path` (created if missing) across processes, for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def unwritable(e: OSError, root: Path | None = None) -> BuildError:
    """A build/ that cannot be written (its lock, its compilers' temporary folder, a stale output to
    remove), as one line naming the path and the fix."""
    root = root or ROOT
    where = Path(e.filename) if e.filename else root / "build"
    with contextlib.suppress(ValueError):
        where = where.relative_to(root)
    return BuildError(f"cannot write {where} ({(e.strerror or str(e)).lower()}): build/ must be a folder you can "
                      f"write (`ls -ld {root / 'build'}`; remove it, or `chown -R` it to you, if another user made it)")


@contextlib.contextmanager
def _lock(root: Path):
    """One make at a time per tree: pytest-xdist workers (`invoke test --jobs N`) and a user's
    `invoke build` in another terminal would otherwise compile the same object at once. A build/ where
    the lock cannot be made is a BuildError (one line), not a traceback."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_lock(root / "build" / ".lock"))
        except OSError as e:
            raise unwritable(e, root) from None
        yield


def up_to_date(cmd: list[str], wanted: list[str], root: Path) -> bool:
    """Whether make (`cmd`, from make_command) has nothing to do for the outputs `wanted`, asked without
    the build lock: make's question mode (-q) and each library's and executable's record. Every output is
    published whole (written under a temporary name, then renamed), so one that looks up to date can be
    used while another build holds the lock. Without this, every process's first build of anything (a
    test worker's first call of each program) queued behind whichever build held the lock, however long
    it compiled. Anything else (out of date, or make failing) is False: the locked build that follows
    says why."""
    try:
        if stale_outputs(wanted, root):
            return False
        q = [a for a in cmd if not a.startswith("-j")] + ["-q"]
        return subprocess.run(q, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@dataclass
class BuildResult:
    steps: list[str]
    log: str


# How long make gets, after SIGINT, to stop its compilers and delete what they were writing.
STOP_GRACE_S = 5.0


def _stop(proc: subprocess.Popen) -> None:
    """Stop make and every compiler under it: they run in a process group of their own. SIGINT first
    (make then deletes the targets it was writing), SIGKILL for whatever is still running."""
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None  # a second Ctrl-C must not cut this short
    try:
        procs.stop_group(proc, STOP_GRACE_S, first=signal.SIGINT)
    finally:
        if main:
            signal.signal(signal.SIGINT, old)


def build(targets_: list[str] | None = None, jobs: int | None = None, arch: str | None = None,
          on_step: Callable[[str, str], None] | None = None, root: Path | None = None,
          keep_going: bool = False, on_plan: Callable[[list[str]], None] | None = None) -> BuildResult:
    """Run make; call `on_plan(steps)` with the compile/link steps it is about to run (counted under
    the build lock, so no other build can change them in between) and `on_step(kind, target)` as
    each starts. Raise BuildError on failure with the compilers' diagnostics rather than make's
    whole output. Interrupted (Ctrl-C, SIGTERM), it stops make and its compilers before returning."""
    root_ = root or ROOT
    cmd = make_command(targets_, jobs, arch, root=root, keep_going=keep_going)
    wanted = targets_ if targets_ is not None else targets_of(programs(root), root) or []
    if up_to_date(cmd, wanted, root_):
        # What a killed step left is swept all the same: a dead shell's temporary is nobody's to wait for.
        with contextlib.suppress(OSError):
            sweep_temporaries(root_)
        if on_plan is not None:
            on_plan([])
        return BuildResult([], "")
    steps, lines = [], []
    with _lock(root_):
        # The compilers' own temporaries (nvcc's tmpxft_*) go to a folder of this build's, removed
        # whatever happens, rather than to /tmp where an interrupted compile would leave them.
        tmpdir = root_ / "build" / ".tmp" / str(os.getpid())
        try:
            sweep_temporaries(root_)
            invalidate_stale(wanted, root_)
        except OSError as e:
            raise unwritable(e, root_) from None
        if on_plan is not None:
            on_plan(pending_steps(targets_, arch, root))
        try:
            tmpdir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise unwritable(e, root_) from None
        env = {**os.environ, "TMPDIR": str(tmpdir)}
        # Led by procs' supervisor: make and its compilers die with this process even when it is SIGKILLed.
        proc = procs.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                           errors="replace", env=env, cwd=root_)
        assert proc.stdout is not None
        try:
            with procs.sigterm_as_interrupt():
                for line in proc.stdout:
                    lines.append(line)
                    m = _STEP.match(line)
                    if m:
                        steps.append(m.group(2))
                        if on_step:
                            on_step(m.group(1), m.group(2))
                rc = proc.wait()
        finally:
            if proc.poll() is None:
                _stop(proc)
                sweep_temporaries(root_)
            proc.stdout.close()
            shutil.rmtree(tmpdir, ignore_errors=True)
            with contextlib.suppress(OSError):
                tmpdir.parent.rmdir()  # build/.tmp, once no build uses it
    log = "".join(lines)
    if rc != 0:
        diags = parse_diagnostics(log)
        errors = [d for d in diags if "error" in d.severity] or diags
        if not errors:
            tail = "\n".join(log.strip().splitlines()[-15:])
            raise BuildError(f"make failed (status {rc}):\n{tail}", [], log)
        raise BuildError(f"build failed: {len(errors)} error(s)", errors, log)
    return BuildResult(steps, log)


# make's own line for a failed target: `make: *** [Makefile:117: build/obj/matmul/matmul.o] Error 1`
_FAILED_TARGET = re.compile(r"\*\*\* \[[^\]]*?:\s*(build/[^\]\s]+)\] Error")


def program_of(path: str) -> str | None:
    """The program a source file or build target belongs to (None for cuda/common and cuda/shared files,
    which belong to every program that includes them)."""
    m = re.match(r"(?:cuda|build/obj|build/ptxas)/([^/]+)/", path) or re.match(r"build/lib/lib(.+)\.so$", path) \
        or re.match(r"build/bin/([^/]+?)(?:_cpu)?$", path) or re.match(r"build/ptxas/(.+)\.txt$", path)
    if m is None or m.group(1) in ("common", "shared"):
        return None
    return m.group(1)


class ProgramsFailed(BuildError):
    """Some programs did not build (the others did: make ran with -k). `failed` maps each program to
    its diagnostics; `built` names the programs that did build."""

    def __init__(self, failed: dict[str, list], built: list[str], log: str, other: list | None = None,
                 root: Path | None = None):
        self.failed, self.built, self.other = failed, built, list(other or [])
        lines = [f"build failed: {', '.join(failed)} ({len(failed)} of {len(failed) + len(built)} program(s))"
                 if failed else "build failed: no program built"]
        # An error with no file of a program's (nvcc fatal, the linker, a read-only build/) is usually
        # every program's: it is shown once, first, and the programs it stopped are named on one line.
        if self.other:
            lines += [d.quoted(root) for d in self.other[:3]]
            if len(self.other) > 3:
                lines.append(f"... and {len(self.other) - 3} more")
        bare = [p for p, diags in failed.items() if not diags]
        for prog, diags in failed.items():
            if not diags:
                continue
            errs = [d for d in diags if "error" in d.severity] or diags
            lines.append(f"{prog}:")
            lines += ["  " + d.quoted(root).replace("\n", "\n  ") for d in errs[:10]]
            if len(errs) > 10:
                lines.append(f"  ... and {len(errs) - 10} more")
        if bare:
            lines.append(f"{', '.join(bare)}: failed" + (" with the error above" if self.other else
                                                        " (make gave no error line: run `make` for its whole output)"))
        lines.append(f"built: {', '.join(built) if built else 'none'}")
        diagnostics = [d for ds in failed.values() for d in ds] + self.other
        super().__init__(lines[0], diagnostics, log)
        self.args = ("\n".join(lines),)


def build_programs(progs: list[str] | None = None, jobs: int | None = None, arch: str | None = None,
                   on_step: Callable[[str, str], None] | None = None, root: Path | None = None,
                   on_plan: Callable[[list[str]], None] | None = None) -> BuildResult:
    """Build these programs (default all) with `make -k`, so that one broken program does not stop
    the others. Raise ProgramsFailed naming each broken program with its diagnostics (file:line and
    the quoted source line) and the programs that did build."""
    progs = list(progs or programs(root))
    try:
        return build(targets_of(progs, root), jobs, arch, on_step, root=root, keep_going=True, on_plan=on_plan)
    except BuildError as e:
        if not e.log:  # refused before make ran (a bad --arch, no nvcc): its own one line
            raise
        log = e.log
    diags = parse_diagnostics(log)
    failed: dict[str, list] = {}
    other = []
    for d in diags:
        p = program_of(d.file)
        if p in progs:
            failed.setdefault(p, []).append(d)
        elif "error" in d.severity:
            other.append(d)
    for target in _FAILED_TARGET.findall(log):
        p = program_of(target)
        if p in progs:
            failed.setdefault(p, [])
    if other and not failed:  # common code broke: nothing could build
        raise ProgramsFailed({}, [], log, other, root)
    built = [p for p in progs if p not in failed]
    raise ProgramsFailed({p: failed[p] for p in progs if p in failed}, built, log, other, root)


# ptxas -v, per kernel:
#   ptxas info    : Compiling entry function '_Z4loopv' for 'sm_90'
#   ptxas info    : Function properties for _Z4loopv
#       16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
#   ptxas info    : Used 24 registers, used 0 barriers, 16 bytes cumulative stack size, 360 bytes cmem[0]
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def resource_usage(prog: str) -> pd.DataFrame:
    """Registers, shared memory, stack and spills per kernel, from build/ptxas/<prog>.txt."""
    path = BUILD / "ptxas" / f"{prog}.txt"
    if not path.exists():
        raise NotBuilt(path, prog)
    return parse_ptxas(path.read_text())


def parse_ptxas(text: str) -> pd.DataFrame:
    rows, cur = [], None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            cur = {"kernel": m.group(1), "arch": m.group(2), "registers": None, "smem_bytes": 0,
                   "stack_bytes": 0, "spill_stores": 0, "spill_loads": 0}
            rows.append(cur)
            continue
        if cur is None:
            continue
        if (m := _FRAME.search(line)):
            cur["stack_bytes"], cur["spill_stores"], cur["spill_loads"] = map(int, m.groups())
        if (m := _USED.search(line)):
            cur["registers"] = int(m.group(1))
            if (s := _SMEM.search(line)):
                cur["smem_bytes"] = int(s.group(1))
    return pd.DataFrame(rows, columns=["kernel", "arch", "registers", "smem_bytes", "stack_bytes",
                                       "spill_stores", "spill_loads"])


def clean(root: Path | None = None) -> None:
    """Remove everything under build/, under the build lock (never beneath a running build). Raise
    OSError naming what could not be removed."""
    build_dir = (root or ROOT) / "build"
    if not build_dir.exists():
        return
    with _lock(root or ROOT):
        for entry in build_dir.iterdir():
            if entry.name == ".lock":  # held by this process now; an empty file
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
