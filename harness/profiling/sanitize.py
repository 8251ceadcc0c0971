"""compute-sanitizer over every program's executable, at small sizes, through every variant.

    compute-sanitizer --tool memcheck|racecheck|initcheck|synccheck --error-exitcode 86 build/bin/<prog> ...

Each (program, run, tool) is one subprocess; its log is kept under build/sanitize/<prog>/. The summary
is program x tool -> "clean" or "N errors" (or why the run did not count as clean).

Which runs a program gets is the caller's: a list of Case (program, label, argv). tasks.py builds
them from the registry (harness.programs.sanitize_cases reads the program's sanitize_args, or
VARIANTS + profile_args), so this layer never needs to know a program.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.base import paths
from harness.base.errors import ProgramError
from harness.calling import runner
from harness.compile import toolchain

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
ERROR_EXITCODE = 86
SANITIZE_DIR = paths.BUILD / "sanitize"
DEFAULT_TIMEOUT = 300.0


@dataclass(frozen=True)
class Case:
    program: str
    label: str
    argv: tuple[str, ...]
    faults: bool = False  # run the fault build's executable (build/faults/bin/<program>): tests only


@dataclass
class Outcome:
    program: str
    label: str
    tool: str
    argv: list[str]
    returncode: int
    errors: int  # what the sanitizer reported (0 when clean)
    status: str  # clean | errors | program failed | unsupported | timed out
    detail: str = ""
    log: Path | None = None

    @property
    def clean(self) -> bool:
        return self.status == "clean"


def tools_for(tool: str) -> list[str]:
    if tool in ("all", "", None):
        return list(TOOLS)
    names = [t.strip() for t in tool.split(",") if t.strip()]
    bad = [t for t in names if t not in TOOLS]
    if bad:
        raise ValueError(f"unknown sanitizer tool(s) {bad}; choose from {', '.join(TOOLS)} or all")
    return names


_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?\s*$", re.M)  # not "... errors were not printed"
_RACE = re.compile(r"RACECHECK SUMMARY:.*?\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)")


def count_errors(text: str) -> int | None:
    """Errors the sanitizer reported: its `ERROR SUMMARY: N errors` line (racecheck's own summary
    as a second source). None when neither line is there (the tool did not finish)."""
    ms = _SUMMARY.findall(text)
    if ms:
        return int(ms[-1])
    mr = _RACE.findall(text)
    if mr:
        return int(mr[-1][0])
    return None


def classify(text: str, returncode: int) -> tuple[str, int, str]:
    """(status, errors, detail) from a sanitizer run's output and exit status."""
    n = count_errors(text)
    if re.search(r"[Dd]evice not supported|is not supported on this", text):
        return "unsupported", 0, "compute-sanitizer does not support this device"
    if n:
        race = [ln.strip().lstrip("=").strip() for ln in text.splitlines() if "RACECHECK SUMMARY" in ln]
        if race:
            return "errors", n, race[-1]
        first = next((ln.strip().lstrip("=").strip() for ln in text.splitlines()
                      if re.match(r"=+\s+(Invalid|Uninitialized|Race|Barrier|Error|.*hazard)", ln)), "")
        return "errors", n, first
    if returncode == ERROR_EXITCODE:
        return "errors", 1, "the sanitizer exited with its error exit code"
    if n is None:
        return "program failed", 0, f"no sanitizer summary (status {returncode})"
    if returncode != 0:
        return "program failed", 0, f"the program exited with status {returncode}"
    return "clean", 0, ""


# memcheck sees an access only where it lands outside every live allocation: a read a little way past the
# end of one buffer lands in the next one the allocator placed after it (a second tile read in full where
# the array ends in the first, 288 bytes on), and passes. Padding of its own after each allocation
# turns such reads into reports.
MEMCHECK_PADDING = 1 << 16


def command(tool: str, exe: Path, argv: list[str], sanitizer: str) -> list[str]:
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", str(ERROR_EXITCODE), "--print-limit", "50"]
    if tool == "racecheck":
        cmd += ["--racecheck-report", "all"]
    if tool == "memcheck":
        cmd += ["--padding", str(MEMCHECK_PADDING)]
    return cmd + [str(exe), *argv]


# Each run goes through harness/calling/runner.py's run_command (a group of its own, a deadline, bounded
# output); tests hand in a stand-in.
Runner = Callable[..., runner.Result]
_run = runner.run_command


def run_case(case: Case, tool: str, sanitizer: str | None = None, timeout: float = DEFAULT_TIMEOUT,
             logdir: Path | None = None, run: Runner = _run) -> Outcome:
    sanitizer = sanitizer or find_sanitizer()
    # The build's own file, checked against its record (else NotBuilt).
    exe = runner.executable(case.program, faults=case.faults)
    cmd = command(tool, exe, list(case.argv), sanitizer)
    logdir = logdir or SANITIZE_DIR / case.program
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / f"{tool}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', case.label)}.txt"
    try:
        p = run(cmd, timeout=timeout)
        text = (p.stdout or "") + (p.stderr or "")
        status, n, detail = classify(text, p.returncode)
        rc = p.returncode
    except ProgramError as e:  # run_command raises it only for a timeout
        text = (e.stdout or "") + (e.stderr_tail or "")
        status, n, detail, rc = "timed out", 0, f"no result within {timeout:.0f} s", -1
    log.write_text("$ " + " ".join(cmd) + "\n" + text)
    return Outcome(case.program, case.label, tool, cmd, rc, n, status, detail, log)


def find_sanitizer() -> str:
    """compute-sanitizer's path, or ToolMissing naming the fix."""
    return toolchain.require("compute-sanitizer").path


def sanitize(cases: list[Case], tools: list[str] | None = None, jobs: int | None = None,
             timeout: float = DEFAULT_TIMEOUT, run: Runner = _run,
             on_done: Callable[[Outcome], None] | None = None, on_total: Callable[[int], None] | None = None,
             ) -> list[Outcome]:
    """Run every (case, tool). Runs go in parallel (`jobs`, default 4): the sanitizers serialise
    their own kernels, so several processes share the GPU well."""
    tools = tools or list(TOOLS)
    sanitizer = find_sanitizer()
    work = [(c, t) for c in cases for t in tools]
    if on_total:
        on_total(len(work))

    def one(item):
        c, t = item
        o = run_case(c, t, sanitizer, timeout, run=run)
        if on_done:
            on_done(o)
        return o

    with ThreadPoolExecutor(max_workers=max(1, jobs or min(4, os.cpu_count() or 1))) as ex:
        return list(ex.map(one, work))


def frame(outcomes: list[Outcome]) -> pd.DataFrame:
    """One row per run: program, case, tool, status, errors, returncode, detail, log."""
    return pd.DataFrame([{"program": o.program, "case": o.label, "tool": o.tool, "status": o.status,
                          "errors": o.errors, "returncode": o.returncode, "detail": o.detail,
                          "log": str(o.log) if o.log else ""} for o in outcomes],
                        columns=["program", "case", "tool", "status", "errors", "returncode", "detail", "log"])


def _cell(group: pd.DataFrame) -> str:
    if (group["status"] == "clean").all():
        return "clean"
    n = int(group["errors"].sum())
    parts = []
    if n:
        parts.append(f"{n} error{'s' if n != 1 else ''}")
    for status in ("program failed", "unsupported", "timed out"):
        k = int((group["status"] == status).sum())
        if k:
            parts.append(f"{status}" + (f" x{k}" if k > 1 else ""))
    return ", ".join(parts)


def summary(outcomes: list[Outcome] | pd.DataFrame) -> pd.DataFrame:
    """program x tool -> "clean", or the number of errors (summed over the program's runs)."""
    df = outcomes if isinstance(outcomes, pd.DataFrame) else frame(outcomes)
    if df.empty:
        return pd.DataFrame()
    tools = [t for t in TOOLS if t in set(df["tool"])] + sorted(set(df["tool"]) - set(TOOLS))
    progs = list(dict.fromkeys(df["program"]))
    table = pd.DataFrame("not run", index=pd.Index(progs, name="program"), columns=tools)
    for (prog, tool), g in df.groupby(["program", "tool"], sort=False):
        table.loc[prog, tool] = _cell(g)
    return table


def all_clean(outcomes: list[Outcome] | pd.DataFrame) -> bool:
    df = outcomes if isinstance(outcomes, pd.DataFrame) else frame(outcomes)
    return bool(len(df)) and bool((df["status"] == "clean").all())


def write_summary(outcomes: list[Outcome] | pd.DataFrame, folder: Path | None = None) -> Path:
    """build/sanitize/summary.csv (program x tool) and runs.csv (one row per run), for the report."""
    folder = folder or SANITIZE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    df = outcomes if isinstance(outcomes, pd.DataFrame) else frame(outcomes)
    df.to_csv(folder / "runs.csv", index=False)
    path = folder / "summary.csv"
    summary(df).reset_index().to_csv(path, index=False)
    return path
