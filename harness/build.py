"""Run make, and read what the compilers said: nvcc/gcc diagnostics and ptxas resource usage."""

from __future__ import annotations

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


def programs() -> list[str]:
    """Every cuda/<prog>/ that holds <prog>.cu, in name order (what the Makefile discovers)."""
    return sorted(d.name for d in CUDA_DIR.iterdir() if d.is_dir() and (d / f"{d.name}.cu").exists())


def lib_path(prog: str) -> Path:
    return BUILD / "lib" / f"lib{prog}.so"


def bin_path(prog: str) -> Path:
    return BUILD / "bin" / prog


def targets(prog: str) -> list[str]:
    t = [f"build/lib/lib{prog}.so", f"build/bin/{prog}", f"build/ptxas/{prog}.txt"]
    if (CUDA_DIR / prog / f"{prog}_cpu.c").exists():
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
        col = f":{self.column}" if self.column else ""
        return f"{self.file}:{self.line}{col}: {self.severity}: {self.message}"


# nvcc front end:  cuda/x/x.cu(12): error: identifier "foo" is undefined
_NVCC = re.compile(r"^(?P<file>[^\s:()][^:()]*)\((?P<line>\d+)\): (?P<sev>error|warning)(?: #\w+-\w)?: (?P<msg>.*)$")
# gcc/g++ (host code, our warnings-as-errors):  cuda/x/x.cu:29:8: error: ...
_GCC = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>(?:fatal )?error|warning): (?P<msg>.*)$")
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
        if m:
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
                 dry_run: bool = False, root: Path | None = None) -> list[str]:
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
    return cmd + list(targets_ or [])


_STEP = re.compile(r"^\s*(?:echo\s+[\"']?)?\s*(NVCC|LINK|CC)\s+([^\s\"']+)")


def pending_steps(targets_: list[str] | None = None, arch: str | None = None, root: Path | None = None) -> list[str]:
    """The compile/link steps make would run now, as 'KIND target' (empty when up to date)."""
    out = subprocess.run(make_command(targets_, arch=arch, dry_run=True, root=root), capture_output=True, text=True)
    return [f"{m.group(1)} {m.group(2)}" for line in out.stdout.splitlines() if (m := _STEP.match(line))]


def count_steps(targets_: list[str] | None = None, arch: str | None = None) -> int:
    """How many compile/link steps make would run now (0 when everything is up to date)."""
    return len(pending_steps(targets_, arch))


@dataclass
class BuildResult:
    steps: list[str]
    log: str


def build(targets_: list[str] | None = None, jobs: int | None = None, arch: str | None = None,
          on_step: Callable[[str, str], None] | None = None, root: Path | None = None) -> BuildResult:
    """Run make; call `on_step(kind, target)` as each step starts. Raise BuildError on failure
    with the compilers' file:line diagnostics rather than make's whole output."""
    cmd = make_command(targets_, jobs, arch, root=root)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    steps, lines = [], []
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
        raise FileNotFoundError(f"{path} is missing: run `invoke build` first")
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
