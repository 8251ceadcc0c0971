"""Run make, and read what the compilers said: nvcc/gcc diagnostics and ptxas resource usage."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import toolchain
from .errors import BuildError

ROOT = toolchain.ROOT
CUDA_DIR = ROOT / "cuda"
BUILD = ROOT / "build"


def programs(root: Path | None = None) -> list[str]:
    """Every cuda/<prog>/ that holds <prog>.cu, in name order (what the Makefile discovers)."""
    cuda = (root / "cuda") if root is not None else CUDA_DIR
    return sorted(d.name for d in cuda.iterdir() if d.is_dir() and (d / f"{d.name}.cu").exists())


def lib_path(prog: str) -> Path:
    return BUILD / "lib" / f"lib{prog}.so"


def bin_path(prog: str) -> Path:
    return BUILD / "bin" / prog


def not_built(paths, progs) -> str:
    """The one message for missing build outputs: which, and the command that builds only those programs."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    progs = [progs] if isinstance(progs, str) else list(progs)
    verb = "is" if len(paths) == 1 else "are"
    return (f"{', '.join(map(str, paths))} {verb} missing: run `invoke build -p {','.join(progs)}` "
            "(or `invoke build` for every program)")


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


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    column: int | None
    severity: str
    message: str

    def __str__(self) -> str:
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
# ptxas and the linker have no file:line, but their lines still matter.
_OTHER = re.compile(r"^(?:ptxas (?:error|fatal)\s*:|nvlink error|.*undefined reference to|/usr/bin/ld:.*error)")


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
        elif _OTHER.match(line):
            d = Diagnostic("<link>" if "ptxas" not in line else "<ptxas>", 0, None, "error", line)
        else:
            continue
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def make_command(targets_: list[str] | None = None, jobs: int | None = None, arch: str | None = None,
                 dry_run: bool = False, root: Path | None = None, keep_going: bool = False) -> list[str]:
    nvcc = toolchain.find("nvcc")
    if not nvcc.found:
        raise BuildError("nvcc not found: put it on PATH, set CUDA_HOME, or `pip install -e '.[toolkit]'`")
    cmd = ["make", "-C", str(root or ROOT), f"-j{jobs or os.cpu_count() or 2}", "--no-print-directory",
           f"NVCC={nvcc.path}"]
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


def _lock(root: Path):
    """One make at a time per tree: pytest-xdist workers (`invoke test --jobs N`) and a user's
    `invoke build` in another terminal would otherwise compile the same object at once."""
    return file_lock(root / "build" / ".lock")


@dataclass
class BuildResult:
    steps: list[str]
    log: str


def build(targets_: list[str] | None = None, jobs: int | None = None, arch: str | None = None,
          on_step: Callable[[str, str], None] | None = None, root: Path | None = None,
          keep_going: bool = False) -> BuildResult:
    """Run make; call `on_step(kind, target)` as each step starts. Raise BuildError on failure
    with the compilers' file:line diagnostics rather than make's whole output."""
    cmd = make_command(targets_, jobs, arch, root=root, keep_going=keep_going)
    steps, lines = [], []
    with _lock(root or ROOT):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            m = _STEP.match(line)
            if m:
                steps.append(m.group(2))
                if on_step:
                    on_step(m.group(1), m.group(2))
        rc = proc.wait()
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
    """The program a source file or build target belongs to (None for common files)."""
    m = re.match(r"(?:cuda|build/obj|build/ptxas)/([^/]+)/", path) or re.match(r"build/lib/lib(.+)\.so$", path) \
        or re.match(r"build/bin/([^/]+?)(?:_cpu)?$", path) or re.match(r"build/ptxas/(.+)\.txt$", path)
    if m is None or m.group(1) == "common":
        return None
    return m.group(1)


class ProgramsFailed(BuildError):
    """Some programs did not build (the others did: make ran with -k). `failed` maps each program to
    its diagnostics; `built` names the programs that did build."""

    def __init__(self, failed: dict[str, list], built: list[str], log: str, other: list | None = None,
                 root: Path | None = None):
        self.failed, self.built, self.other = failed, built, list(other or [])
        n = len(failed) + (1 if self.other else 0)
        lines = [f"build failed: {', '.join(failed) or 'common code'} "
                 f"({n} of {len(failed) + len(built)} program(s))"]
        for prog, diags in failed.items():
            errs = [d for d in diags if "error" in d.severity] or diags
            lines.append(f"{prog}:" + ("" if errs else " failed (see the log above for make's output)"))
            lines += ["  " + d.quoted(root).replace("\n", "\n  ") for d in errs[:10]]
            if len(errs) > 10:
                lines.append(f"  ... and {len(errs) - 10} more")
        lines += [d.quoted(root) for d in self.other[:10]]
        lines.append(f"built: {', '.join(built) if built else 'none'}")
        diagnostics = [d for ds in failed.values() for d in ds] + self.other
        super().__init__(lines[0], diagnostics, log)
        self.args = ("\n".join(lines),)


def build_programs(progs: list[str] | None = None, jobs: int | None = None, arch: str | None = None,
                   on_step: Callable[[str, str], None] | None = None, root: Path | None = None) -> BuildResult:
    """Build these programs (default all) with `make -k`, so that one broken program does not stop
    the others. Raise ProgramsFailed naming each broken program with its diagnostics (file:line and
    the quoted source line) and the programs that did build."""
    progs = list(progs or programs(root))
    try:
        return build(targets_of(progs, root), jobs, arch, on_step, root=root, keep_going=True)
    except BuildError as e:
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
        raise FileNotFoundError(not_built(path, prog))
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
