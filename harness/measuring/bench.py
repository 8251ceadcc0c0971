"""Benchmarks: every program's bench cases, each reported as a ratio to a ceiling timed in the same
run, in interleaved rounds (ARCHITECTURE.md, Measuring; README, "How a ratio is measured").

A program module offers `bench_cases(quick: bool) -> list[BenchCase]`. A case's `setup()` allocates
and fills device buffers and returns a Prepared whose `launch(stream)` enqueues one run of the
kernel through the device-pointer entry point. Ceilings are looked up by name (the built-in ones here,
then each program's `ceilings()` hook). A ceiling is either a number known without timing (a peak
derived from the clock) or a TimedCeiling: a library call timed beside its cases.

How a ratio is measured. harness.measuring.timing times every measurement with NVBench (cold: L2 flushed, the
launch queued behind a blocking kernel, a time-based warm-up, stopping on noise). The cases that share
a ceiling form a group, measured in `rounds` rounds: C, case1, C, case2, C, ..., caseN, C. Each case's
ratio in a round is its rate over the mean of the two ceiling measurements around it, so a clock
change between the start and the end of a run moves both sides of the ratio together. A row reports
the median of its per-round ratios with their 25th-75th percentile spread, and the GPU's conditions
(harness.measuring.conditions: SM clock, power, temperature through NVML) while it ran.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.base.errors import CudalabError, NotBuilt
from harness.compile import build as _build
from harness.measuring import timing

UNIT_SCALE = {"GB/s": 1e9, "TFLOP/s": 1e12, "Giter/s": 1e9, "Ginst/s": 1e9}
RESULTS_DIR = _build.ROOT / "bench" / "results"
BUILD_BENCH = _build.BUILD / "bench"
ROUNDS, QUICK_ROUNDS = 3, 2
REPEAT_TOLERANCE_PCT = 3.0  # rows held to the goal agree within this between runs, or ratios do not compare
THROTTLE_FRACTION = 0.9  # a case whose SM clock fell under this fraction of the run's highest is flagged


@dataclass
class Prepared:
    launch: Callable[[object], None]
    close: Callable[[], None] = lambda: None
    work: float | None = None  # overrides BenchCase.amount when only the run knows it (Mandelbrot)
    note: str = ""  # added to the case's note: what only the run knows (e.g. the tuned choice it ran)


@dataclass
class BenchCase:
    program: str
    variant: str
    size: str
    setup: Callable[[], Prepared]
    unit: str  # GB/s, TFLOP/s or Giter/s
    amount: float  # bytes (read + written), FLOPs or iterations per launch, in the unit's base
    ceiling: str  # a key of ceilings()
    target: float | None = None  # the ratio the issue that set it asks for
    quick: bool = False  # part of `invoke bench --quick`
    bytes: float = 0.0  # for the roofline
    flops: float = 0.0
    ceiling_divisor: float = 1.0  # e.g. instructions per iteration for an instruction ceiling
    note: str = ""


@dataclass
class TimedCeiling:
    """A ceiling that is itself a timed call: `target(**kwargs)` (harness.measuring.timing's import path) builds
    its Prepared in the timing session. `amount` is the work of one launch in the unit's base."""

    name: str
    unit: str
    amount: float
    target: str
    kwargs: dict = field(default_factory=dict)
    detail: str = ""
    same_as: tuple | None = None  # (program, variant, size) of a case row that runs the same call
    extras: tuple = ()  # (label, target, kwargs): other calls timed once and named in the detail


@dataclass
class Ceiling:
    name: str
    value: float  # in `unit`
    unit: str
    detail: str = ""
    timing: timing.Timing | None = field(default=None, repr=False)
    p25: float = float("nan")  # spread of the value over its measurements in the run
    p75: float = float("nan")
    measurements: int = 0


_EXTRA_CEILINGS: dict[str, Callable[[bool], Ceiling | TimedCeiling | None]] = {}


def register_ceiling(name: str, fn: Callable[[bool], Ceiling | TimedCeiling | None]) -> None:
    _EXTRA_CEILINGS[name] = fn


MEMCPY_BYTES, QUICK_MEMCPY_BYTES = 1 << 30, 256 << 20


def memcpy_setup(nbytes: int) -> Prepared:
    """cudaMemcpyAsync device-to-device of `nbytes` from a filled buffer (harness.measuring.timing target)."""
    from harness.calling import cudart

    src, dst = cudart.DeviceBuffer(nbytes), cudart.DeviceBuffer(nbytes)
    src.fill_bytes(0x5A)

    def close():
        src.close()
        dst.close()

    return Prepared(lambda s: cudart.memcpy_dtod(dst.ptr, src.ptr, nbytes, s), close)


def measure_memcpy(quick: bool = False) -> TimedCeiling:
    """cudaMemcpy device-to-device bandwidth, counting bytes read plus bytes written."""
    nbytes = QUICK_MEMCPY_BYTES if quick else MEMCPY_BYTES
    return TimedCeiling("memcpy", "GB/s", 2.0 * nbytes, "harness.measuring.bench:memcpy_setup", {"nbytes": nbytes},
                        f"cudaMemcpy DtoD of {nbytes >> 20} MiB")


def device_peaks() -> dict:
    """device_info's derived peaks for device 0 (fp32_tflops, fp32_inst_per_s, ...)."""
    from harness.programs import device_info

    return device_info.query(0)


def measure_fp32(quick: bool = False) -> Ceiling:
    d = device_peaks()
    return Ceiling("fp32", d["fp32_tflops"], "TFLOP/s", "SMs x FP32 lanes x 2 x clock (device_info)")


def measure_fp32_inst(quick: bool = False) -> Ceiling:
    d = device_peaks()
    return Ceiling("fp32_inst", d["fp32_inst_per_s"] / 1e9, "Ginst/s", "SMs x FP32 lanes x clock (device_info)")


def ceilings(progs: list[str] | None = None) -> dict[str, Callable[[bool], Ceiling | TimedCeiling | None]]:
    """The built-in ceilings, then each program's `ceilings()` hook (harness/programs/__init__.py),
    then any still registered the old way."""
    from harness import programs as registry

    base = {"memcpy": measure_memcpy, "fp32": measure_fp32, "fp32_inst": measure_fp32_inst}
    return {**base, **registry.ceilings(progs), **_EXTRA_CEILINGS}


def program_modules(names: list[str] | None = None) -> dict:
    """prog -> module with bench cases; an unknown name raises ValueError."""
    from harness import programs as registry

    return registry.bench_programs(names)


def check_built(names: list[str] | None = None) -> None:
    """One line, before anything is timed, when a library the run needs is missing: the selected programs'
    and device_info's (the peak ceilings read the SM count and clocks from it)."""
    needed = dict.fromkeys([*program_modules(names), "device_info"])
    missing = [p for p in needed if not _build.lib_path(p).exists()]
    if missing:
        raise NotBuilt([_build.lib_path(p) for p in missing], missing)


def collect(names: list[str] | None = None, quick: bool = False) -> list[BenchCase]:
    cases = []
    for mod in program_modules(names).values():
        cases += [c for c in mod.bench_cases(quick) if c.quick or not quick]
    return cases


@functools.cache
def _cases_of(program: str, quick: bool) -> dict:
    return {(c.variant, c.size): c for c in program_modules([program])[program].bench_cases(quick)}


def case_setup(program: str, variant: str, size: str, quick: bool = False) -> Prepared:
    """harness.measuring.timing's target for a bench case: the same case, found again in the timing session."""
    case = _cases_of(program, bool(quick)).get((variant, size))
    if case is None:
        raise LookupError(f"no bench case {program} {variant} {size} (quick={quick})")
    return case.setup()


def case_item(case: BenchCase, quick: bool, key: str, warmup_s: float | None = None) -> timing.Item:
    return timing.Item(key, "harness.measuring.bench:case_setup",
                       {"program": case.program, "variant": case.variant, "size": case.size, "quick": bool(quick)},
                       warmup_s)


# --- the plan: groups of cases around their ceiling, in rounds -------------------------------------------

SETTLED_WARMUP_S = 0.01  # a setup already warmed in an earlier round: the GPU has been busy since


def plan_rounds(cases: list[BenchCase], resolved: dict, rounds: int, quick: bool,
                warmup_s: float) -> tuple[list[timing.Item], dict]:
    """The Items of a run, in order, and where each case's measurements are:
    layout[i] = [(case key, ceiling key before, ceiling key after) per round] (ceiling keys None when
    the ceiling is not timed), and layout['extras'][name] = [(label, key)]."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault(c.ceiling, []).append(i)
    items: list[timing.Item] = []
    layout: dict = {i: [] for i in range(len(cases))}
    layout["extras"] = {}
    seen: set[str] = set()

    def warm(ident: str) -> float:
        if ident in seen:
            return SETTLED_WARMUP_S
        seen.add(ident)
        return warmup_s

    for name, members in groups.items():
        ceil = resolved.get(name)
        timed = isinstance(ceil, TimedCeiling)
        for r in range(rounds):
            prev = None
            if timed:
                prev = f"ceil:{name}:r{r}:0"
                items.append(timing.Item(prev, ceil.target, ceil.kwargs, warm("ceil:" + name)))
            for j, i in enumerate(members):
                key = f"case:{i}:r{r}"
                items.append(case_item(cases[i], quick, key, warm(f"case:{i}")))
                after = None
                if timed:
                    after = f"ceil:{name}:r{r}:{j + 1}"
                    items.append(timing.Item(after, ceil.target, ceil.kwargs, SETTLED_WARMUP_S))
                layout[i].append((key, prev, after))
                prev = after
        if timed:
            for label, target, kwargs in ceil.extras:
                key = f"extra:{name}:{label}"
                items.append(timing.Item(key, target, kwargs, warm(key)))
                layout["extras"].setdefault(name, []).append((label, key))
    return items, layout


def spread(values) -> tuple[float, float, float]:
    """(median, p25, p75) of the finite values; NaNs when there are none."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    p25, med, p75 = np.percentile(v, [25, 50, 75])
    return float(med), float(p25), float(p75)


def _rate(t: timing.Timing | None, amount: float, unit: str) -> float:
    if t is None or not t.median_ms > 0:
        return float("nan")
    return t.rate(amount) / UNIT_SCALE[unit]


def _conditions(ts: list[timing.Timing]) -> dict:
    """The GPU's conditions over a row's measurements (harness.measuring.conditions' keys, pooled)."""
    cs = [t.conditions for t in ts if t is not None and t.conditions]

    def pool(key, how):
        vals = [float(c[key]) for c in cs if c.get(key) is not None and np.isfinite(float(c[key]))]
        return float(how(vals)) if vals else float("nan")

    reasons = sorted({r for c in cs for r in str(c.get("clock_reasons") or "").split(",") if r})
    return {"sm_clock_mean_mhz": pool("sm_clock_mean_mhz", np.mean), "sm_clock_min_mhz": pool("sm_clock_min_mhz", min),
            "sm_clock_max_mhz": pool("sm_clock_max_mhz", max), "power_mean_w": pool("power_mean_w", np.mean),
            "power_max_w": pool("power_max_w", max), "temp_max_c": pool("temp_max_c", max),
            "clock_reasons": ",".join(reasons)}


def assemble(cases: list[BenchCase], resolved: dict, layout: dict, timings: dict[str, timing.Timing],
             engine: str = "") -> tuple[pd.DataFrame, dict[str, Ceiling]]:
    """Rows and ceilings from a session's timings (pure arithmetic: CPU-tested with made-up Timings)."""
    rows = []
    ceil_keys: dict[str, dict[str, timing.Timing]] = {}
    for i, case in enumerate(cases):
        ceil = resolved.get(case.ceiling)
        per_round, ts = [], []
        for key, before, after in layout[i]:
            t = timings.get(key)
            ts.append(t)
            work = t.work if t is not None and t.work is not None else case.amount
            value = _rate(t, work, case.unit)
            if isinstance(ceil, TimedCeiling):
                around = [_rate(timings.get(k), ceil.amount, ceil.unit) for k in (before, after)]
                for k in (before, after):  # each measurement once, though it stands beside two cases
                    if timings.get(k) is not None:
                        ceil_keys.setdefault(ceil.name, {})[k] = timings[k]
                around = [a for a in around if np.isfinite(a)]
                cval = float(np.mean(around)) if around else float("nan")
            elif isinstance(ceil, Ceiling):
                cval = ceil.value
            else:
                cval = float("nan")
            cval = cval / case.ceiling_divisor
            per_round.append((value, cval, value / cval if cval and np.isfinite(cval) else float("nan")))
        value, _, _ = spread(v for v, _, _ in per_round)
        cval, _, _ = spread(c for _, c, _ in per_round)
        ratio, r25, r75 = spread(r for _, _, r in per_round)
        med_ms, _, _ = spread(t.median_ms for t in ts if t is not None)
        p25_ms, _, _ = spread(t.p25_ms for t in ts if t is not None)
        p75_ms, _, _ = spread(t.p75_ms for t in ts if t is not None)
        noise, _, _ = spread(t.noise for t in ts if t is not None)
        notes = [case.note] + sorted({t.note for t in ts if t is not None and t.note})
        rows.append({
            "program": case.program, "variant": case.variant, "size": case.size,
            "median_ms": med_ms, "p25_ms": p25_ms, "p75_ms": p75_ms, "iqr_ms": p75_ms - p25_ms,
            "value": value, "unit": case.unit, "ceiling": case.ceiling, "ceiling_value": cval,
            "ratio": ratio, "ratio_p25": r25, "ratio_p75": r75,
            "rounds": sum(1 for t in ts if t is not None),  # rounds that produced a measurement
            "target": case.target if case.target is not None else np.nan,
            "meets_target": (bool(ratio >= case.target) if case.target is not None and np.isfinite(ratio) else None),
            "bytes": case.bytes, "flops": case.flops, "note": "; ".join(n for n in notes if n),
            "noise": noise, "samples": sum(t.samples for t in ts if t is not None),
            "timed_out": any(t.timed_out for t in ts if t is not None),
            "nvbench_clock_mhz": spread(t.sm_clock_mhz for t in ts if t is not None)[0],
            **_conditions(ts), "engine": engine,
        })
    df = pd.DataFrame(rows)
    highest = float(np.nanmax(df["sm_clock_max_mhz"])) if len(df) and df["sm_clock_max_mhz"].notna().any() else float("nan")
    if len(df):
        df["throttled"] = [bool(np.isfinite(highest) and np.isfinite(m) and m < THROTTLE_FRACTION * highest)
                           for m in df["sm_clock_min_mhz"]]
    measured: dict[str, Ceiling] = {}
    for name, ceil in resolved.items():
        if isinstance(ceil, Ceiling):
            measured[name] = ceil
        elif isinstance(ceil, TimedCeiling):
            ts = list(ceil_keys.get(name, {}).values())
            v, p25, p75 = spread(_rate(t, ceil.amount, ceil.unit) for t in ts)
            detail = ceil.detail
            for label, key in layout.get("extras", {}).get(name, []):
                r = _rate(timings.get(key), ceil.amount, ceil.unit)
                detail += f"; {label} {r:.4g} {ceil.unit}" if np.isfinite(r) else f"; {label} n/a"
            if np.isfinite(v):
                t = timing.Timing(*spread(t.median_ms for t in ts)) if ts else None
                measured[name] = Ceiling(name, v, ceil.unit, detail, t, p25, p75, len(ts))
    if len(df):
        df.attrs.update({f"ceiling_{c.name}": c.value for c in measured.values()})
    return df, measured


def not_measured(df: pd.DataFrame, layout: dict, errors: dict[str, str], labels: dict[str, str]) -> dict[str, str]:
    """Rounds that got no measurement: each row's note gains why (so the CSV keeps the reason), and the
    returned {label: why} names the case and round ("gemm_tc 07_wgmma_pingpong 8192^3 (round 1/3)")
    instead of the plan's key, for the printed "not measured" lines. Row i is case i (assemble's order)."""
    for i in range(len(df)):
        whys = sorted({errors[key] for key, _, _ in layout.get(i, []) if key in errors})
        if whys:
            note = df.at[i, "note"]
            df.at[i, "note"] = "; ".join(n for n in [note if isinstance(note, str) else "",
                                                      "not measured: " + " / ".join(whys)] if n)
    return {labels.get(k, k): why for k, why in errors.items()}


def consistency(df: pd.DataFrame, resolved: dict, measured: dict[str, Ceiling]) -> pd.DataFrame:
    """Each library call timed both as a ceiling and as a case row: the two figures and how far apart
    they are (within 3% in one CSV, or the engine disagrees with itself)."""
    rows = []
    for name, ceil in resolved.items():
        if not isinstance(ceil, TimedCeiling) or not ceil.same_as or name not in measured:
            continue
        prog, variant, size = ceil.same_as
        hit = df[(df["program"] == prog) & (df["variant"] == variant) & (df["size"] == size)] if len(df) else df
        if not len(hit):
            continue
        a, b = measured[name].value, float(hit["value"].iloc[0])
        rows.append({"ceiling": name, "row": f"{prog} {variant} {size}", "ceiling_value": a, "row_value": b,
                     "unit": ceil.unit, "diff_pct": 100.0 * abs(a - b) / min(a, b) if min(a, b) > 0 else np.nan})
    return pd.DataFrame(rows, columns=["ceiling", "row", "ceiling_value", "row_value", "unit", "diff_pct"])


def resolve_ceilings(names: list[str], progs: list[str] | None, quick: bool) -> dict:
    """name -> Ceiling (a number), TimedCeiling (to be timed in the rounds) or None (not available here)."""
    available = ceilings(progs)
    out = {}
    for name in names:
        fn = available.get(name)
        out[name] = fn(quick) if fn else None
    return out


def run(names: list[str] | None = None, quick: bool = False, on_progress: Callable[[str], None] | None = None,
        on_total: Callable[[int], None] | None = None, rounds: int | None = None,
        cases: list[BenchCase] | None = None) -> tuple[pd.DataFrame, dict[str, Ceiling]]:
    """Time every case against its ceiling in interleaved rounds, in one NVBench session.
    Returns (table, ceilings); the table's attrs['consistency'] holds the ceiling-vs-row check."""
    if cases is None:
        check_built(names)
    # The same check as every timing session's, before collecting and resolving the ceilings (some
    # of which touch the device): without a GPU nothing here can be measured.
    timing.require_gpu()
    if cases is None:
        cases = collect(names, quick)
    if not cases:
        raise CudalabError("no bench cases to run" + (f" for {', '.join(names)}" if names else ""))
    engine = f"nvbench {timing.require_engine()}"
    rounds = rounds or (QUICK_ROUNDS if quick else ROUNDS)
    needed = list(dict.fromkeys(c.ceiling for c in cases))
    resolved = resolve_ceilings(needed, sorted({c.program for c in cases}), quick)
    opts = timing.QUICK if quick else timing.Options()
    items, layout = plan_rounds(cases, resolved, rounds, quick, opts.warmup_s)
    if on_total:
        on_total(len(items))
    labels = {}
    for i, c in enumerate(cases):
        for r, (key, _, _) in enumerate(layout[i]):
            labels[key] = f"{c.program} {c.variant} {c.size} (round {r + 1}/{rounds})"

    def progress(_, key):
        if on_progress:
            on_progress(labels.get(key, key.split(":")[0] + " " + key.split(":")[1]))

    errors: dict[str, str] = {}
    timings = timing.run_plan(items, opts, on_progress=progress, errors=errors)
    df, measured = assemble(cases, resolved, layout, timings, engine)
    df.attrs["errors"] = not_measured(df, layout, errors, labels)
    df.attrs["consistency"] = consistency(df, resolved, measured)
    return df, measured


def throttle_warnings(df: pd.DataFrame) -> list[str]:
    """One line per row that ran throttled (SM clock under 90% of the run's highest)."""
    from harness.measuring import conditions

    if not len(df) or "throttled" not in df:
        return []
    highest = float(np.nanmax(df["sm_clock_max_mhz"])) if df["sm_clock_max_mhz"].notna().any() else float("nan")
    return [conditions.warning_line(f"{r['program']} {r['variant']} {r['size']}", r.to_dict(), highest)
            for _, r in df[df["throttled"].astype(bool)].iterrows()]


# --- --repeat: the same suite N times, and how far each row's ratio moved ------------------------------------

_POW = re.compile(r"^2\^(\d+)$")
_CUBE = re.compile(r"^(\d+)\^3$")
_SEQ = re.compile(r"S(\d+)")
_HW = re.compile(r"^(\d+)x(\d+)$")


def repeat_goal(program: str, size: str, unit: str) -> bool:
    """Is the row held to the repeatability goal (±3% between runs)? Compute rows at 2048^3 or
    more (GEMMs) or S >= 4096 (attention); memory rows at 2^24 elements or more."""
    size = str(size)
    if unit == "TFLOP/s":
        m = _CUBE.match(size)
        if m:
            return int(m.group(1)) >= 2048
        m = _SEQ.search(size)
        return bool(m) and program == "attention" and int(m.group(1)) >= 4096
    if unit == "GB/s":
        m = _POW.match(size)
        if m:
            return int(m.group(1)) >= 24
        m = _HW.match(size)
        return bool(m) and int(m.group(1)) * int(m.group(2)) >= 1 << 24
    return False


def repeat_frame(frames: list[pd.DataFrame], meta: dict) -> pd.DataFrame:
    """The long table of a --repeat run: one row per (case, run)."""
    rows = []
    for run_no, df in enumerate(frames, 1):
        for _, r in df.iterrows():
            rows.append({"program": r["program"], "variant": r["variant"], "size": r["size"], "unit": r["unit"],
                         "ceiling": r["ceiling"], "run": run_no, "ratio": r["ratio"],
                         "ratio_p25": r.get("ratio_p25", np.nan), "ratio_p75": r.get("ratio_p75", np.nan),
                         "value": r["value"], "goal": repeat_goal(r["program"], r["size"], r["unit"]),
                         "throttled": bool(r.get("throttled", False))})
    out = pd.DataFrame(rows)
    for k in ("device", "driver", "nvcc", "date"):
        out[k] = meta.get(k, "")
    return out


def run_on_gpus(names: list[str] | None, quick: bool, gpus: list[str], timeout: float | None = None) -> list[Path]:
    """One worker process per GPU (harness/measuring/bench_worker.py), side by side, each pinned to its GPU with
    $CUDA_VISIBLE_DEVICES and given every n-th ceiling group, so a case and its ceiling share a GPU
    and a session. Each writes its own CSV; returns their paths."""
    import os
    import subprocess
    import sys
    import tempfile

    from harness.measuring import gpus as hg

    check_built(names)  # one line here, not one traceback per worker
    timing.require_engine()
    out = Path(tempfile.mkdtemp(prefix="gpus-", dir=_ensure(BUILD_BENCH)))
    procs = []
    for i, gpu in enumerate(gpus):
        env = hg.worker_env(gpus)
        env["CUDA_VISIBLE_DEVICES"] = gpu
        env["PYTHONPATH"] = os.pathsep.join([str(_build.ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        cmd = [sys.executable, "-m", "harness.measuring.bench_worker", str(i), str(len(gpus)), str(out), ",".join(names or [])]
        procs.append((gpu, subprocess.Popen(cmd + (["--quick"] if quick else []), cwd=_build.ROOT, env=env)))
    failed = []
    for gpu, p in procs:
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "timed out"
        if rc != 0:
            failed.append(f"GPU {gpu}: {rc}")
    paths = sorted(out.glob("*.csv"))
    if failed:
        raise CudalabError(f"bench workers failed ({'; '.join(failed)}); CSVs written: "
                           f"{', '.join(p.name for p in paths) or 'none'}")
    return [_keep(p) for p in paths]


def _ensure(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    return d


def _keep(p: Path) -> Path:
    """Move a worker's CSV from its temporary folder to build/bench/ (its name says which GPU), never
    over another run's CSV of the same name."""
    from harness.base import files

    dest = files.create(BUILD_BENCH / p.name, lambda tmp: Path(tmp).write_bytes(p.read_bytes()))
    p.unlink()
    return dest


# The columns `invoke bench` prints, in order (the CSV holds more).
SHOWN = ["program", "variant", "size", "median_ms", "value", "unit", "ceiling", "ratio", "ratio_p25", "ratio_p75",
         "target"]


def read_result(path: Path) -> tuple[pd.DataFrame, dict, list[str]]:
    """(cases, metadata, one line per ceiling) from a CSV written by write_csv. A file that is not a
    whole bench CSV (torn, NUL-filled, a line cut short) raises ValueError in one line naming it
    (analysis.bench.read_checked, the one reader)."""
    from analysis.bench import read_checked

    df = read_checked(path, required=("program", "variant", "size"))
    cases = df[df["program"] != "ceiling"].reset_index(drop=True)
    ceil = df[df["program"] == "ceiling"]
    meta = {k: (str(df[k].iloc[0]) if k in df and len(df) and pd.notna(df[k].iloc[0]) else "")
            for k in ("device", "driver", "runtime", "nvcc", "date", "gpu")}
    lines = [f"ceiling {r['variant']}: {r['value']:.4g} {r['unit']} ({r['size']})" for _, r in ceil.iterrows()]
    return cases, meta, lines


def metadata() -> dict:
    import os

    from harness.calling import cudart
    from harness.compile import toolchain
    from harness.measuring import gpus

    s = cudart.summary()
    meta = {"device": s.name, "driver": s.driver, "runtime": s.runtime,
            "nvcc": toolchain.find("nvcc").version or "unknown",
            "date": _dt.datetime.now().isoformat(timespec="seconds")}
    if os.environ.get(gpus.ENV):  # a worker of `--gpus`: which physical GPU this CSV is from
        meta["gpu"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return meta


def gpu_slug(name: str) -> str:
    s = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-") or "unknown-gpu"


def with_metadata(df: pd.DataFrame, meta: dict) -> pd.DataFrame:
    out = df.copy()
    for k, v in meta.items():
        out[k] = v
    return out


def write_csv(df: pd.DataFrame, meta: dict, ceilings_: dict[str, Ceiling], dest: Path | None = None,
              folder: Path | None = None) -> Path:
    """build/bench/bench-<gpu>[-gpu<N>]-<date>.csv (or `folder`/the same name): the cases, then one row
    per ceiling, each row with the metadata (device, driver, runtime, nvcc, date and, under --gpus, the
    GPU number). Written whole (harness.base.files): a run never writes over another's CSV, even in the same
    second (the second gets -2 on its name); an explicit `dest` is replaced whole. Returns the path."""
    from harness.base import files

    stamp = meta["date"].replace(":", "").replace("-", "")
    which = f"-gpu{meta['gpu']}" if meta.get("gpu") else ""
    table = with_metadata(df, meta)
    ceil_rows = pd.DataFrame([{"program": "ceiling", "variant": c.name, "size": c.detail, "value": c.value,
                               "value_p25": c.p25, "value_p75": c.p75, "rounds": c.measurements,
                               "unit": c.unit, "median_ms": c.timing.median_ms if c.timing else np.nan,
                               "iqr_ms": c.timing.iqr_ms if c.timing else np.nan} for c in ceilings_.values()])
    whole = pd.concat([table, with_metadata(ceil_rows, meta)], ignore_index=True)

    def write(tmp):
        whole.to_csv(tmp, index=False)

    if dest is not None:
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        return files.replace(dest, write)
    folder = _ensure(Path(folder) if folder is not None else BUILD_BENCH)
    files.clean_stale(folder)
    return files.create(folder / f"bench-{gpu_slug(meta['device'])}{which}-{stamp}.csv", write)


def gpu_folder(device: str) -> str:
    """The folder under bench/results/ for a device: its model, the first word with a digit in it
    ("NVIDIA H100 80GB HBM3" -> "h100"), so that the reference runs, notes and tuning results of one
    GPU model sit together whatever its memory variant."""
    name = re.sub(r"^nvidia\s+", "", device.strip(), flags=re.I)
    for tok in name.split():
        if re.search(r"\d", tok):
            return re.sub(r"[^a-z0-9]+", "-", tok.lower()).strip("-")
    return gpu_slug(device)


def save(path: Path, device: str) -> Path:
    """Copy a bench CSV to bench/results/<gpu_folder>/ where reference runs are committed (whole: a
    copy of the same run replaces its earlier copy)."""
    from harness.base import files

    dest_dir = RESULTS_DIR / gpu_folder(device)
    dest_dir.mkdir(parents=True, exist_ok=True)
    return files.replace(dest_dir / Path(path).name, Path(path).read_bytes())
