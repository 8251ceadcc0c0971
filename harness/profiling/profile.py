"""Profile a program's executable with nsys or ncu, and read their CSV into DataFrames.

    nsys   `nsys profile` + `nsys stats --report cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum
           --format csv`, read by header name (the chatter lines before each header are skipped).
    ncu    `--csv --page raw --print-units base` with a short metric list (DEFAULT_METRICS) or the
           caller's; clock control off by default, so the card is measured as it is.
    nvprof removed in CUDA 13 and never supported compute capability >= 7.5: asking for it gives
           that sentence and the nsys command to use instead (NvprofUnavailable), never "command not found".
    auto   the first tool that actually produces a report. When none does, one line per tool says
           why, and the harness's own event timing (harness.measuring.timing over the program's bench cases)
           still gives a table.

Which runs to profile is the caller's: a list of (variant, argv) for build/bin/<prog>, one profiled
run each (tasks.py asks the registry, harness.programs.profile_runs, which reads the program's module).

The kernel table has one row per kernel: kernel, time_pct (share of the run's GPU kernel time),
total_ns, instances, avg_ns, med_ns, min_ns, max_ns (+ variant, + ncu's metrics).

What is particular to each tool -- its command lines, its output formats, libdw for nsys, the counter
permission and metric list for ncu -- lives in harness/profiling/nsys.py and harness/profiling/ncu.py; this module runs
them, diagnoses failures, falls back, and saves the kernel table.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.base import paths
from harness.base.errors import CudalabError, NoGPUError, ProgramError
from harness.calling import runner
from harness.compile import toolchain
from harness.profiling.ncu import (  # noqa: F401  (re-exported: the tool's facts live in harness/profiling/ncu.py)
    DEFAULT_METRICS,
    DURATION_METRIC,
    PERM_FIX,
    counter_access,
    import_command,
    metric_map,
    ncu_kernel_table,
    parse_ncu_raw,
)
from harness.profiling.ncu import profile_command as ncu_command
from harness.profiling.nsys import (  # noqa: F401  (re-exported: the tool's facts live in harness/profiling/nsys.py)
    KERNEL_COLUMNS,
    LIBDW,
    NSYS_REPORTS,
    find_libdw,
    libdw_dirs,
    nsys_env,
    nsys_kernel_table,
    parse_nsys_stats,
    short_name,
    stats_command,
    summary_from_sqlite,
    unpack_libdw,
)
from harness.profiling.nsys import profile_command as nsys_command

PROFILES = paths.BUILD / "profiles"
TOOLS = ("nsys", "ncu")
AUTO_ORDER = ("nsys", "ncu")
DEFAULT_TIMEOUT = 300.0

# --- errors ----------------------------------------------------------------------------------------

class ToolFailure(CudalabError):
    """A profiler did not produce a report. `reason` is one line a user can act on."""

    def __init__(self, tool: str, reason: str, log: str = ""):
        self.tool = tool
        self.reason = reason
        self.log = log
        super().__init__(f"{tool}: {reason}")


class NvprofUnavailable(CudalabError):
    """Asked for nvprof; the message says why it cannot run and what to use instead."""


class NoReport(CudalabError):
    """auto: no profiler produced a report and the event-timing fallback could not run either."""

    def __init__(self, failures: list[ToolFailure], why: str):
        self.failures = failures
        lines = [f"  {f.tool}: {f.reason}" for f in failures] + [f"  event timing: {why}"]
        super().__init__("no profiler produced a report:\n" + "\n".join(lines))


# --- nvprof ----------------------------------------------------------------------------------------

def nvprof_message(prog: str | None = None, args: list[str] | None = None) -> str:
    """What to say when asked for nvprof (none in CUDA 13 for cc >= 7.5: say so, offer `nsys nvprof`)."""
    exe = f"build/bin/{prog}" if prog else "build/bin/<prog>"
    cmdline = " ".join([exe] + list(args or []))
    msg = ("nvprof is not available: CUDA 13 removed it, and it never supported GPUs of compute capability "
           ">= 7.5 (Turing, Ampere, Hopper and later).")
    nsys = toolchain.find("nsys")
    if nsys.found:
        msg += (f" Use nsys instead: `invoke profile {prog or '<prog>'} --tool nsys`, or nvprof's own "
                f"command line through nsys: `{nsys.path} nvprof {cmdline}`.")
    else:
        msg += (f" Use Nsight Systems instead: `invoke profile {prog or '<prog>'} --tool nsys` (or "
                f"`nsys nvprof {cmdline}`) once nsys is installed (Nsight Systems, or set $NSYS); "
                "`invoke doctor` shows what was found.")
    return msg


# --- what to run -----------------------------------------------------------------------------------
# The runs come from the caller as [(variant, argv)]: the registry (harness.programs.profile_runs)
# turns a program's module and the user's --variant / arguments into them, so this layer never
# needs to know a program.

Run = tuple[str | None, list[str]]


def _slug(s: str | None) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s) if s else ""


# --- diagnosing failures ---------------------------------------------------------------------------

def diagnose(tool: str, output: str, returncode: int | None = None) -> str:
    """One line saying why a profiler run gave no report, from what it printed."""
    t = output or ""
    if "ERR_NVGPUCTRPERM" in t:
        return PERM_FIX
    if LIBDW in t or ("QdstrmImporter" in t and "error while loading shared libraries" in t) \
            or "skipping importation of the QDSTRM" in t or "Importer error status" in t:
        return (f"importer library {LIBDW} missing: nsys wrote a .qdstrm but could not convert it "
                "(`apt install libdw1`, or unpack the libdw1/libelf1 .debs and add them to LD_LIBRARY_PATH)")
    if "LibraryNotLoaded" in t:
        return "the profiler could not load its library on this machine (\"Failed to initialize the profiler: LibraryNotLoaded\")"
    if "No kernels were profiled" in t:
        return "no kernels were profiled (the program launched none, or failed before its first launch)"
    if "does not contain CUDA kernel data" in t:
        return "the trace holds no CUDA kernel data (the program launched no kernel)"
    if re.search(r"[Dd]evice not supported|not supported on this (device|GPU)", t):
        return "the profiler does not support this device"
    errs = [ln.strip() for ln in t.splitlines() if "ERROR" in ln or "Error" in ln or "error" in ln]
    if errs:
        return errs[-1][:300]
    if returncode:
        return f"exited with status {returncode}"
    return "produced no report"


# --- running the tools -----------------------------------------------------------------------------

@dataclass
class ProfileResult:
    prog: str
    tool: str  # nsys, ncu or "event timing"
    kernels: pd.DataFrame
    reports: dict[str, pd.DataFrame] = field(default_factory=dict)  # nsys's three, per variant prefix
    files: list[Path] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    failures: list[ToolFailure] = field(default_factory=list)  # auto: the tools tried before this one
    note: str = ""


# How a tool's command line runs: harness/calling/runner.py's run_command (its own process group, a deadline,
# bounded output, a timeout as ProgramError(timed_out=True)); tests hand in a stand-in.
Runner = Callable[..., runner.Result]
_run = runner.run_command


def _exe(prog: str) -> Path:
    return runner.executable(prog)  # the build's own file, checked against its record (else NotBuilt)


def run_nsys(prog: str, argv: list[str], outdir: Path, tag: str = "", timeout: float = DEFAULT_TIMEOUT,
             run: Runner = _run) -> tuple[pd.DataFrame, dict[str, pd.DataFrame], list[Path], list[list[str]]]:
    """nsys profile + nsys stats on build/bin/<prog> argv. Raises ToolFailure with the reason."""
    nsys = toolchain.find("nsys")
    if not nsys.found:
        raise ToolFailure("nsys", "not found (PATH, $NSYS, $CUDA_HOME/bin, /opt/nvidia/nsight-systems*, and the nsys "
                                  "inside Nsight Compute installs were searched)")
    env, missing = nsys_env()
    outdir.mkdir(parents=True, exist_ok=True)
    base = outdir / f"nsys{('_' + tag) if tag else ''}"
    for old in outdir.glob(base.name + ".*"):
        if old.suffix in (".nsys-rep", ".qdstrm", ".sqlite", ".qdrep"):
            old.unlink()
    cmd1 = nsys_command(nsys.path, base, _exe(prog), argv)
    try:
        p = run(cmd1, env=env, timeout=timeout)
    except ProgramError:  # run_command raises it only for a timeout
        raise ToolFailure("nsys", f"timed out after {timeout:.0f} s") from None
    log = (p.stdout or "") + (p.stderr or "")
    rep = next((base.with_suffix(s) for s in (".nsys-rep", ".qdrep") if base.with_suffix(s).exists()), None)
    if rep is None:
        reason = diagnose("nsys", log, p.returncode)
        if missing and (base.with_suffix(".qdstrm").exists() or "libdw" in log or "Importer" in log):
            reason = missing
        raise ToolFailure("nsys", reason, log)
    cmd2 = stats_command(nsys.path, rep)
    try:
        s = run(cmd2, env=env, timeout=timeout)
    except ProgramError:
        raise ToolFailure("nsys", f"nsys stats timed out after {timeout:.0f} s") from None
    text = (s.stdout or "")
    (outdir / f"{base.name}_stats.txt").write_text(text + ("\n# stderr\n" + s.stderr if s.stderr else ""))
    reports = parse_nsys_stats(text)
    files = [rep, outdir / f"{base.name}_stats.txt"]
    sqlite_path = base.with_suffix(".sqlite")
    if "cuda_gpu_kern_sum" not in reports and sqlite_path.exists():
        reports = summary_from_sqlite(sqlite_path)
    if "cuda_gpu_kern_sum" not in reports:
        raise ToolFailure("nsys", "nsys stats gave no cuda_gpu_kern_sum report: "
                          + diagnose("nsys", text + (s.stderr or ""), s.returncode), text + (s.stderr or ""))
    for name, df in reports.items():
        path = outdir / f"{base.name}_{name}.csv"
        df.to_csv(path, index=False)
        files.append(path)
    kernels = nsys_kernel_table(reports)
    if kernels.empty:
        raise ToolFailure("nsys", diagnose("nsys", text + log) if "does not contain" in text + log
                          else "the trace holds no CUDA kernels", text)
    if p.returncode != 0:
        raise ToolFailure("nsys", f"the program exited with status {p.returncode} under nsys:\n{_tail(log)}", log)
    return kernels, reports, files, [cmd1, cmd2]


def run_ncu(prog: str, argv: list[str], outdir: Path, tag: str = "", metrics: dict[str, str] | None = None,
            clock_control: bool = False, launch_count: int = 200, timeout: float = DEFAULT_TIMEOUT,
            run: Runner = _run) -> tuple[pd.DataFrame, dict[str, pd.DataFrame], list[Path], list[list[str]]]:
    """ncu on build/bin/<prog> argv, exported to .ncu-rep, then printed as raw CSV in base units."""
    ncu = toolchain.find("ncu")
    if not ncu.found:
        raise ToolFailure("ncu", "not found (PATH, $NCU, $CUDA_HOME/bin and /opt/nvidia/nsight-compute were searched)")
    metrics = metrics or dict(DEFAULT_METRICS)
    outdir.mkdir(parents=True, exist_ok=True)
    base = outdir / f"ncu{('_' + tag) if tag else ''}"
    rep = base.with_suffix(".ncu-rep")
    if rep.exists():
        rep.unlink()
    cmd1 = ncu_command(ncu.path, base, _exe(prog), argv, metrics, clock_control, launch_count)
    try:
        p = run(cmd1, timeout=timeout)
    except ProgramError:  # run_command raises it only for a timeout
        raise ToolFailure("ncu", f"timed out after {timeout:.0f} s (try fewer launches: smaller program arguments)") from None
    log = (p.stdout or "") + (p.stderr or "")
    (outdir / f"{base.name}_log.txt").write_text(log)
    if not rep.exists() or "ERR_NVGPUCTRPERM" in log or "No kernels were profiled" in log:
        raise ToolFailure("ncu", diagnose("ncu", log, p.returncode), log)
    cmd2 = import_command(ncu.path, rep)
    try:
        s = run(cmd2, timeout=timeout)
    except ProgramError:
        raise ToolFailure("ncu", f"ncu --import timed out after {timeout:.0f} s") from None
    raw_path = outdir / f"{base.name}_raw.csv"
    raw_path.write_text(s.stdout or "")
    try:
        raw, units = parse_ncu_raw(s.stdout or "")
    except ValueError as e:
        raise ToolFailure("ncu", f"{e}: {diagnose('ncu', (s.stdout or '') + (s.stderr or ''), s.returncode)}",
                          (s.stdout or "") + (s.stderr or "")) from None
    kernels = ncu_kernel_table(raw, units, metrics)
    if kernels.empty:
        raise ToolFailure("ncu", "no kernels were profiled", log)
    if p.returncode != 0:
        raise ToolFailure("ncu", f"the program exited with status {p.returncode} under ncu:\n{_tail(log)}", log)
    return kernels, {"ncu_raw": raw}, [rep, raw_path, outdir / f"{base.name}_log.txt"], [cmd1, cmd2]


def _tail(text: str, n: int = 8) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def _with_variant(df: pd.DataFrame, variant: str | None) -> pd.DataFrame:
    df = df.copy()
    df.insert(0, "variant", variant or "default")
    return df


def _check_tool(tool: str, prog: str, runs: list[Run]) -> None:
    if tool == "nvprof":
        raise NvprofUnavailable(nvprof_message(prog, list(runs[0][1]) if len(runs) == 1 else None))
    if tool not in TOOLS and tool != "auto":
        raise ValueError(f"unknown profiler {tool!r}; choose auto, nsys, ncu (or nvprof, to hear why not)")


def profile_with(tool: str, prog: str, runs: list[Run], metrics: dict[str, str] | None = None,
                 clock_control: bool = False, outdir: Path | None = None, timeout: float = DEFAULT_TIMEOUT,
                 run: Runner = _run) -> ProfileResult:
    """Profile each (variant, argv) run with one tool; the kernel tables are stacked with a variant column."""
    _check_tool(tool, prog, runs)
    if tool == "auto":
        raise ValueError("profile_with takes one tool (nsys or ncu); profile() tries them in turn")
    if not runs:
        raise ValueError(f"no runs of {prog} to profile")
    outdir = outdir or PROFILES / prog
    tables, reports, files, cmds = [], {}, [], []
    for v, argv in runs:
        argv = [str(a) for a in argv]
        if tool == "nsys":
            k, r, f, c = run_nsys(prog, argv, outdir, _slug(v), timeout=timeout, run=run)
        else:
            k, r, f, c = run_ncu(prog, argv, outdir, _slug(v), metrics=metrics, clock_control=clock_control,
                                 timeout=timeout, run=run)
        tables.append(_with_variant(k, v))
        for name, df in r.items():
            reports[f"{v}:{name}" if v else name] = df
        files += f
        cmds += c
    kernels = pd.concat(tables, ignore_index=True)
    res = ProfileResult(prog, tool, kernels, reports, files, cmds)
    save_kernels(res, outdir)
    return res


def save_kernels(res: ProfileResult, outdir: Path) -> Path:
    """build/profiles/<prog>/kernels.csv: the latest kernel table, with the tool that made it."""
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / "kernels.csv"
    res.kernels.assign(tool=res.tool, program=res.prog).to_csv(path, index=False)
    res.files.append(path)
    return path


# --- the fallback: the harness's own event timing --------------------------------------------------

def event_timing(prog: str, bench_cases: Callable[[bool], list] | None, variants: list[str | None] | None = None,
                 quick: bool = True) -> pd.DataFrame:
    """Time the program's bench cases (`bench_cases(quick)`, handed down by the caller from the
    program's module) with harness.measuring.timing (NVBench cold measurements, L2 flushed): one
    row per case, in the kernel table's columns (instances = NVBench's samples). Needs bench cases,
    a GPU and cuda-bench."""
    from harness.measuring import timing

    if bench_cases is None:
        raise CudalabError(f"{prog} has no bench cases to time (harness/programs/{prog}.py: bench_cases)")
    wanted = {v for v in (variants or []) if v}
    cases = [c for c in bench_cases(quick) if (c.quick or not quick) and (not wanted or c.variant in wanted)]
    if not cases:
        cases = [c for c in bench_cases(quick) if not wanted or c.variant in wanted]
    if not cases:
        raise CudalabError(f"{prog} has no bench cases for {sorted(wanted)}")
    from harness.measuring import bench

    items = [bench.case_item(c, f"case:{i}") for i, c in enumerate(cases)]
    got = timing.run_plan(items)
    rows = []
    for i, case in enumerate(cases):
        t = got[f"case:{i}"]
        rows.append({"variant": case.variant, "kernel": f"{prog} {case.variant} {case.size}",
                     "total_ns": t.median_ms * 1e6 * t.samples, "instances": t.samples, "avg_ns": t.median_ms * 1e6,
                     "med_ns": t.median_ms * 1e6, "min_ns": np.nan, "max_ns": np.nan})  # NVBench keeps quartiles, not extremes
    df = pd.DataFrame(rows)
    df["time_pct"] = 100.0 * df["total_ns"] / df.groupby("variant")["total_ns"].transform("sum")
    return df[["variant"] + KERNEL_COLUMNS]


def profile(prog: str, runs: list[Run], tool: str = "auto", metrics: str | list[str] | None = None,
            clock_control: bool = False, outdir: Path | None = None, timeout: float = DEFAULT_TIMEOUT,
            run: Runner = _run, fallback: Callable[..., pd.DataFrame] | None = None,
            bench_cases: Callable[[bool], list] | None = None) -> ProfileResult:
    """Profile build/bin/<prog>, one run per (variant, argv) in `runs` (the caller resolved the
    program and its arguments). tool: auto | nsys | ncu | nvprof (which raises NvprofUnavailable).
    A named tool that fails raises ToolFailure. auto tries AUTO_ORDER in turn; when none gives a
    report it falls back to `fallback(prog, variants)` -- by default event timing of `bench_cases` --
    and the result's `failures` say why each tool failed."""
    _check_tool(tool, prog, runs)
    variants = [v for v, _ in runs]
    mm = metric_map(metrics)
    outdir = outdir or PROFILES / prog
    if tool != "auto":
        return profile_with(tool, prog, runs, mm, clock_control, outdir, timeout, run)
    failures: list[ToolFailure] = []
    for t in AUTO_ORDER:
        try:
            res = profile_with(t, prog, runs, mm, clock_control, outdir, timeout, run)
            res.failures = failures
            return res
        except ToolFailure as e:
            failures.append(e)
    fb = fallback or (lambda p, vs: event_timing(p, bench_cases, vs))
    try:
        kernels = fb(prog, variants)
    except NoGPUError:
        raise  # no device: the profilers' failures above follow from it, so the one line says that
    except (CudalabError, FileNotFoundError) as e:
        raise NoReport(failures, str(e)) from None
    res = ProfileResult(prog, "event timing", kernels, failures=failures,
                        note="no profiler produced a report; these are harness.measuring.timing's NVBench cold times of the "
                             "program's bench cases (one row per case, L2 flushed before each sample)")
    save_kernels(res, outdir)
    return res


def kernels_csv(prog: str) -> Path:
    return PROFILES / prog / "kernels.csv"


def load_kernels(prog: str) -> pd.DataFrame:
    p = kernels_csv(prog)
    if not p.exists():
        raise FileNotFoundError(f"{p} is missing: run `invoke profile {prog}` first")
    return pd.read_csv(p)


_HEADS = {"time_pct": "Time (%)", "total_ns": "Total (ns)", "instances": "Inst", "avg_ns": "Avg (ns)",
          "min_ns": "Min (ns)", "max_ns": "Max (ns)", "dram_bytes": "DRAM (B)",
          "achieved_occupancy_pct": "Occupancy (%)", "sm_throughput_pct": "SM (%)",
          "memory_throughput_pct": "Memory (%)"}
_NOT_METRICS = {"variant", "kernel", "time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns",
                "tool", "program"}


def kernel_tables(df: pd.DataFrame, title: str) -> list[tuple[str, pd.DataFrame]]:
    """The kernel table the way nsys's cuda_gpu_kern_sum lists it (times in ns, as text), and for
    ncu a second table of its metrics per kernel, so that neither is squeezed; each a (title, frame)
    for harness.base.console. Kernel names are shortened (templates and parameter lists dropped)."""
    multi = "variant" in df and df["variant"].nunique() > 1
    times = [c for c in ("total_ns", "instances", "avg_ns", "min_ns", "max_ns") if c in df]
    metrics = [c for c in df.columns if c not in _NOT_METRICS]

    def num(v, big=True):
        if v is None or v != v:
            return ""
        return f"{v:,.0f}" if big or abs(v) >= 1000 else f"{v:.3g}"

    lead = {"Variant": df["variant"].astype(str)} if multi else {}
    names = df["kernel"].map(lambda k: short_name(k, 60))
    t = pd.DataFrame({**lead, "Time (%)": df["time_pct"].map(lambda v: f"{v:.1f}"),
                      **{_HEADS[c]: df[c].map(num) for c in times}, "Name": names})
    out = [(title, t)]
    if metrics:
        m = pd.DataFrame({**lead, **{_HEADS.get(c, c): df[c].map(lambda v: num(v, False) if isinstance(v, float)
                                                                  else str(v)) for c in metrics}, "Name": names})
        out.append(("ncu metrics (mean over each kernel's launches)", m))
    return out
