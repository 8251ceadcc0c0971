"""Benchmarks: every program's bench cases, each reported as a ratio to a ceiling timed in the same
run, in interleaved rounds (ARCHITECTURE.md, Measuring; README, "How a ratio is measured").

A program module offers `bench_cases(quick: bool) -> list[BenchCase]`. A case names its setup as a
`"package.module:function"` target with JSON keyword arguments (the timing child imports only that
module); the function allocates and fills device buffers and returns a Prepared whose `launch(stream)`
enqueues one run of the kernel through the device-pointer entry point. Ceilings are looked up by name: memcpy (BUILT_IN here),
then the programs' `ceilings()` hooks, which the tasks hand in with the cases. A ceiling is either a number known without timing (a peak
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
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.base import files, paths
from harness.base.errors import CudalabError, NotBuilt
from harness.calling import cudart
from harness.compile import build as _build
from harness.compile import toolchain
from harness.measuring import conditions, timing
from harness.measuring import gpus as hg

UNIT_SCALE = {"GB/s": 1e9, "TFLOP/s": 1e12, "Giter/s": 1e9, "Ginst/s": 1e9}
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
    setup: str  # "package.module:function" returning a Prepared, called with `kwargs` in the timing child
    unit: str  # GB/s, TFLOP/s or Giter/s
    amount: float  # bytes (read + written), FLOPs or iterations per launch, in the unit's base
    ceiling: str  # a key of ceilings()
    target: float | None = None  # the ratio this case is held to, written before it was met
    quick: bool = False  # part of `invoke bench --quick`
    bytes: float = 0.0  # for the roofline
    flops: float = 0.0
    ceiling_divisor: float = 1.0  # e.g. instructions per iteration for an instruction ceiling
    note: str = ""
    kwargs: dict = field(default_factory=dict)  # JSON values: they cross into the timing child


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


MEMCPY_BYTES, QUICK_MEMCPY_BYTES = 1 << 30, 256 << 20


def memcpy_setup(nbytes: int) -> Prepared:
    """cudaMemcpyAsync device-to-device of `nbytes` from a filled buffer (harness.measuring.timing target)."""
    src, dst = cudart.DeviceBuffer(nbytes), cudart.DeviceBuffer(nbytes)
    src.fill_bytes(0x5A)

    def close():
        src.close()
        dst.close()

    return Prepared(lambda s: cudart.memcpy_dtod(dst.ptr, src.ptr, nbytes, s), close)


def measure_memcpy(quick: bool = False) -> TimedCeiling:
    """cudaMemcpy device-to-device bandwidth, counting bytes read plus bytes written."""
    return _copy_ceiling("memcpy", QUICK_MEMCPY_BYTES if quick else MEMCPY_BYTES)


def _copy_ceiling(name: str, nbytes: int) -> TimedCeiling:
    """cudaMemcpy DtoD of `nbytes`, counting bytes read plus bytes written, under the ceiling's `name`."""
    return TimedCeiling(name, "GB/s", 2.0 * nbytes, "harness.measuring.bench:memcpy_setup", {"nbytes": nbytes},
                        f"cudaMemcpy DtoD of {nbytes / (1 << 20):g} MiB")


def memcpy_of(nbytes: int) -> str:
    """The name of a built-in ceiling for cases that read `nbytes` once and write them once: cudaMemcpy
    DtoD of those bytes, `memcpy@<N>MiB` (or `memcpy@<N>B`), timed in the same run as the cases naming it.
    A copy's rate depends on its size (on an H200 a 64 MiB copy ran 13% below the 1 GiB one that plain
    `memcpy` times: its ramp and tail weigh more), so a kernel is held to the copy of its own bytes."""
    if nbytes <= 0:
        raise ValueError(f"memcpy_of: {nbytes} bytes")
    return f"memcpy@{nbytes >> 20}MiB" if nbytes % (1 << 20) == 0 else f"memcpy@{nbytes}B"


def _memcpy_sized(name: str):
    m = re.fullmatch(r"memcpy@(\d+)(MiB|B)", name)
    if m is None or int(m.group(1)) <= 0:
        return None
    nbytes = int(m.group(1)) << (20 if m.group(2) == "MiB" else 0)
    return lambda quick=False: _copy_ceiling(name, nbytes)


def check_built(libraries) -> None:
    """One line, before anything is timed, when a library the run needs is missing (`libraries`: the
    programs whose cases and ceilings the run times, as the tasks collected them)."""
    missing = [p for p in dict.fromkeys(libraries) if not _build.lib_path(p).exists()]
    if missing:
        raise NotBuilt([_build.lib_path(p) for p in missing], missing)


def share(cases: list[BenchCase], index: int, count: int) -> list[BenchCase]:
    """The cases of every count-th ceiling group, starting at `index` (groups in order of appearance):
    one GPU's share under `invoke bench --gpus`, so a case and its ceiling share a GPU and a session."""
    groups = list(dict.fromkeys(c.ceiling for c in cases))
    mine = set(groups[index::count])
    return [c for c in cases if c.ceiling in mine]


def case_item(case: BenchCase, key: str, warmup_s: float | None = None) -> timing.Item:
    return timing.Item(key, case.setup, case.kwargs, warmup_s)


# --- the plan: groups of cases around their ceiling, in rounds -------------------------------------------

SETTLED_WARMUP_S = 0.01  # a setup already warmed in an earlier round: the GPU has been busy since


def plan_rounds(cases: list[BenchCase], resolved: dict, rounds: int, warmup_s: float) -> tuple[list[timing.Item], dict]:
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
                items.append(case_item(cases[i], key, warm(f"case:{i}")))
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


BUILT_IN = {"memcpy": measure_memcpy}  # the ceilings no program owns, beside memcpy_of's sized copies


def built_in(name: str):
    """The measuring callable of a ceiling no program owns (`memcpy`, or a sized `memcpy_of` copy), else None."""
    return BUILT_IN.get(name) or _memcpy_sized(name)


def resolve_ceilings(names: list[str], ceilings: dict, quick: bool) -> dict:
    """name -> Ceiling (a number), TimedCeiling (to be timed in the rounds) or None (not available here);
    `ceilings` are the programs' hooks (name -> callable taking quick), beside BUILT_IN."""
    out = {}
    for name in names:
        fn = ceilings.get(name) or built_in(name)
        out[name] = fn(quick) if fn else None
    return out


def run(cases: list[BenchCase], ceilings: dict, quick: bool = False,
        on_progress: Callable[[str], None] | None = None, on_total: Callable[[int], None] | None = None,
        rounds: int | None = None) -> tuple[pd.DataFrame, dict[str, Ceiling]]:
    """Time every case against its ceiling in interleaved rounds, in one NVBench session. The cases
    and the ceilings' hooks (name -> callable taking quick) come from the programs, through the
    tasks. Returns (table, ceilings); the table's attrs['consistency'] holds the ceiling-vs-row check."""
    # The same check as every timing session's, before resolving the ceilings (some of which touch
    # the device): without a GPU nothing here can be measured.
    timing.require_gpu()
    if not cases:
        raise CudalabError("no bench cases to run")
    engine = f"nvbench {timing.require_engine()}"
    rounds = rounds or (QUICK_ROUNDS if quick else ROUNDS)
    needed = list(dict.fromkeys(c.ceiling for c in cases))
    resolved = resolve_ceilings(needed, ceilings, quick)
    opts = timing.QUICK if quick else timing.Options()
    items, layout = plan_rounds(cases, resolved, rounds, opts.warmup_s)
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


def run_on_gpus(worker: str, names: list[str] | None, quick: bool, gpus: list[str],
                timeout: float | None = None) -> list[Path]:
    """One worker process per GPU (`python -m <worker> INDEX COUNT OUTDIR PROGRAMS [--quick]`: the
    tasks name the module, which collects the programs' cases and runs its `share`), side by side,
    each pinned to its GPU with $CUDA_VISIBLE_DEVICES. Each writes its own CSV; returns their paths.
    The caller checks the libraries first (one line here, not one traceback per worker)."""
    timing.require_engine()
    out = Path(tempfile.mkdtemp(prefix="gpus-", dir=_ensure(paths.BUILD_BENCH)))
    procs = []
    for i, gpu in enumerate(gpus):
        env = hg.worker_env(gpus)
        env["CUDA_VISIBLE_DEVICES"] = gpu
        env["PYTHONPATH"] = os.pathsep.join([str(paths.ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        cmd = [sys.executable, "-m", worker, str(i), str(len(gpus)), str(out), ",".join(names or [])]
        procs.append((gpu, subprocess.Popen(cmd + (["--quick"] if quick else []), cwd=paths.ROOT, env=env)))
    failed = []
    for gpu, p in procs:
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "timed out"
        if rc != 0:
            failed.append(f"GPU {gpu}: {rc}")
    written = sorted(out.glob("*.csv"))
    if failed:
        raise CudalabError(f"bench workers failed ({'; '.join(failed)}); CSVs written: "
                           f"{', '.join(p.name for p in written) or 'none'}")
    return [_keep(p) for p in written]


def _ensure(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    return d


def _keep(p: Path) -> Path:
    """Move a worker's CSV from its temporary folder to build/bench/ (its name says which GPU), never
    over another run's CSV of the same name."""
    dest = files.create(paths.BUILD_BENCH / p.name, lambda tmp: Path(tmp).write_bytes(p.read_bytes()))
    p.unlink()
    return dest


# The columns `invoke bench` prints, in order (the CSV holds more).
SHOWN = ["program", "variant", "size", "median_ms", "value", "unit", "ceiling", "ratio", "ratio_p25", "ratio_p75",
         "target"]


def metadata() -> dict:
    s = cudart.summary()
    meta = {"device": s.name, "driver": s.driver, "runtime": s.runtime,
            "nvcc": toolchain.find("nvcc").version or "unknown",
            "date": _dt.datetime.now().isoformat(timespec="seconds")}
    if os.environ.get(hg.ENV):  # a worker of `--gpus`: which physical GPU this CSV is from
        meta["gpu"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return meta


