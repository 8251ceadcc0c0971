"""Benchmarks: every program's bench cases, timed by harness.timing, each reported as a ratio to a
ceiling measured in the same run (DESIGN.md, Benchmarks).

A program module offers `bench_cases(quick: bool) -> list[BenchCase]`. A case's `setup()` allocates
and fills device buffers and returns a Prepared whose `launch(stream)` enqueues one run of the
kernel through the device-pointer entry point. Ceilings are looked up by name; programs may add
their own with `register_ceiling` (matmul adds cuBLAS SGEMM, attention adds torch SDPA).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import build as _build
from . import timing

UNIT_SCALE = {"GB/s": 1e9, "TFLOP/s": 1e12, "Giter/s": 1e9, "Ginst/s": 1e9}
RESULTS_DIR = _build.ROOT / "bench" / "results"
BUILD_BENCH = _build.BUILD / "bench"


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
    reps: int = 20


@dataclass
class Ceiling:
    name: str
    value: float  # in `unit`
    unit: str
    detail: str = ""
    timing: timing.Timing | None = field(default=None, repr=False)


_EXTRA_CEILINGS: dict[str, Callable[[bool], Ceiling | None]] = {}


def register_ceiling(name: str, fn: Callable[[bool], Ceiling | None]) -> None:
    _EXTRA_CEILINGS[name] = fn


def measure_memcpy(quick: bool = False) -> Ceiling:
    """cudaMemcpy device-to-device bandwidth, counting bytes read plus bytes written."""
    from . import cudart

    nbytes = (256 if quick else 1024) << 20
    src, dst = cudart.DeviceBuffer(nbytes), cudart.DeviceBuffer(nbytes)
    try:
        src.fill_bytes(0x5A)
        t = timing.time_launch(lambda s: cudart.memcpy_dtod(dst.ptr, src.ptr, nbytes, s), reps=20 if quick else 50)
    finally:
        src.close()
        dst.close()
    return Ceiling("memcpy", t.rate(2 * nbytes) / 1e9, "GB/s", f"cudaMemcpy DtoD of {nbytes >> 20} MiB", t)


def device_peaks() -> dict:
    """device_info's derived peaks for device 0 (fp32_tflops, fp32_inst_per_s, ...)."""
    from .programs import device_info

    return device_info.query(0)


def measure_fp32(quick: bool = False) -> Ceiling:
    d = device_peaks()
    return Ceiling("fp32", d["fp32_tflops"], "TFLOP/s", "SMs x FP32 lanes x 2 x clock (device_info)")


def measure_fp32_inst(quick: bool = False) -> Ceiling:
    d = device_peaks()
    return Ceiling("fp32_inst", d["fp32_inst_per_s"] / 1e9, "Ginst/s", "SMs x FP32 lanes x clock (device_info)")


def ceilings(progs: list[str] | None = None) -> dict[str, Callable[[bool], Ceiling | None]]:
    """The built-in ceilings, then each program's `ceilings()` hook (harness/programs/__init__.py),
    then any still registered the old way."""
    from . import programs as registry

    base = {"memcpy": measure_memcpy, "fp32": measure_fp32, "fp32_inst": measure_fp32_inst}
    return {**base, **registry.ceilings(progs), **_EXTRA_CEILINGS}


def program_modules(names: list[str] | None = None) -> dict:
    """prog -> module with bench cases; an unknown name raises ValueError."""
    from . import programs as registry

    return registry.bench_programs(names)


def collect(names: list[str] | None = None, quick: bool = False) -> list[BenchCase]:
    cases = []
    for mod in program_modules(names).values():
        cases += [c for c in mod.bench_cases(quick) if c.quick or not quick]
    return cases


def row(case: BenchCase, t: timing.Timing, work: float, ceil: Ceiling | None) -> dict:
    """One result row: the figure in the case's unit and its ratio to the ceiling (same run)."""
    value = t.rate(work) / UNIT_SCALE[case.unit]
    cval = None
    if ceil is not None:
        cval = ceil.value / case.ceiling_divisor
    ratio = value / cval if cval else np.nan
    return {
        "program": case.program, "variant": case.variant, "size": case.size,
        "median_ms": t.median_ms, "p25_ms": t.p25_ms, "p75_ms": t.p75_ms, "iqr_ms": t.iqr_ms,
        "value": value, "unit": case.unit,
        "ceiling": case.ceiling, "ceiling_value": cval if cval is not None else np.nan,
        "ratio": ratio, "target": case.target if case.target is not None else np.nan,
        "meets_target": (bool(ratio >= case.target) if case.target is not None and np.isfinite(ratio) else None),
        "bytes": case.bytes, "flops": case.flops, "note": case.note,
    }


def measure_ceilings(names: list[str], progs: list[str] | None = None, quick: bool = False,
                     on_progress: Callable[[str], None] | None = None) -> dict[str, Ceiling]:
    """Measure each named ceiling once (those not available here are left out)."""
    available = ceilings(progs)
    measured: dict[str, Ceiling] = {}
    for name in names:
        if on_progress:
            on_progress(f"ceiling {name}")
        fn = available.get(name)
        c = fn(quick) if fn else None
        if c is not None:
            measured[name] = c
    return measured


def run_case(case: BenchCase, ceiling: Ceiling | None, quick: bool = False) -> dict:
    """Set the case up (allocation, inputs, marshalling), time only its launches, tear it down."""
    prep = case.setup()
    try:
        t = timing.time_launch(prep.launch, reps=case.reps if not quick else max(timing.MIN_REPS, case.reps // 2))
    finally:
        prep.close()
    work = prep.work if prep.work is not None else case.amount
    r = row(case, t, work, ceiling)
    if prep.note:
        r["note"] = f"{r['note']}; {prep.note}" if r["note"] else prep.note
    return r


def run(names: list[str] | None = None, quick: bool = False, on_progress: Callable[[str], None] | None = None,
        on_total: Callable[[int], None] | None = None) -> tuple[pd.DataFrame, dict[str, Ceiling]]:
    """Measure the needed ceilings, then every case. Returns (table, ceilings)."""
    cases = collect(names, quick)
    needed = sorted({c.ceiling for c in cases})
    if on_total:
        on_total(len(needed) + len(cases))
    measured = measure_ceilings(needed, sorted({c.program for c in cases}), quick, on_progress)
    rows = []
    for case in cases:
        if on_progress:
            on_progress(f"{case.program} {case.variant} {case.size}")
        rows.append(run_case(case, measured.get(case.ceiling), quick))
    df = pd.DataFrame(rows)
    for c in measured.values():
        df.attrs[f"ceiling_{c.name}"] = c.value
    return df, measured


def run_on_gpus(names: list[str] | None, quick: bool, gpus: list[str], timeout: float | None = None) -> list[Path]:
    """Spread the cases over one pytest-xdist worker per GPU (harness/bench_worker.py). Each worker
    measures its own ceilings on its own GPU and writes its own CSV; returns their paths."""
    import os
    import subprocess
    import sys
    import tempfile

    from . import gpus as hg

    if names:
        program_modules(names)  # unknown names: ValueError here, not in every worker
    out = Path(tempfile.mkdtemp(prefix="gpus-", dir=_ensure(BUILD_BENCH)))
    env = hg.worker_env(gpus)
    env.update({"CUDALAB_BENCH_PROGRAMS": ",".join(names or []), "CUDALAB_BENCH_QUICK": "1" if quick else "",
                "CUDALAB_BENCH_OUT": str(out), "PYTHONPATH": os.pathsep.join(
                    [str(_build.ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])})
    cmd = [sys.executable, "-m", "pytest", str(Path(__file__).with_name("bench_worker.py")), "-n", str(len(gpus)),
           "-p", "no:cacheprovider", "-q", "--tb=line", "-o", "addopts=", "--dist", "load"]
    r = subprocess.run(cmd, cwd=_build.ROOT, env=env, timeout=timeout)
    paths = sorted(out.glob("*.csv"))
    if r.returncode != 0:
        raise RuntimeError(f"the bench workers failed (pytest status {r.returncode}); "
                           f"CSVs written: {', '.join(p.name for p in paths) or 'none'}")
    return [_keep(p) for p in paths]


def _ensure(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    return d


def _keep(p: Path) -> Path:
    """Move a worker's CSV from its temporary folder to build/bench/ (its name says which GPU)."""
    dest = BUILD_BENCH / p.name
    p.replace(dest)
    return dest


# The columns `invoke bench` prints, in order (the CSV holds more).
SHOWN = ["program", "variant", "size", "median_ms", "iqr_ms", "value", "unit", "ceiling", "ratio", "target"]


def read_result(path: Path) -> tuple[pd.DataFrame, dict, list[str]]:
    """(cases, metadata, one line per ceiling) from a CSV written by write_csv."""
    df = pd.read_csv(path)
    cases = df[df["program"] != "ceiling"].reset_index(drop=True)
    ceil = df[df["program"] == "ceiling"]
    meta = {k: (str(df[k].iloc[0]) if k in df and len(df) and pd.notna(df[k].iloc[0]) else "")
            for k in ("device", "driver", "runtime", "nvcc", "date", "gpu")}
    lines = [f"ceiling {r['variant']}: {r['value']:.4g} {r['unit']} ({r['size']})" for _, r in ceil.iterrows()]
    return cases, meta, lines


def metadata() -> dict:
    import os

    from . import cudart, gpus, toolchain

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


def write_csv(df: pd.DataFrame, meta: dict, ceilings_: dict[str, Ceiling], dest: Path | None = None) -> Path:
    """build/bench/bench-<gpu>[-gpu<N>]-<date>.csv: the cases, then one row per ceiling, each row
    with the metadata (device, driver, runtime, nvcc, date and, under --gpus, the GPU number)."""
    BUILD_BENCH.mkdir(parents=True, exist_ok=True)
    stamp = meta["date"].replace(":", "").replace("-", "")
    which = f"-gpu{meta['gpu']}" if meta.get("gpu") else ""
    dest = dest or BUILD_BENCH / f"bench-{gpu_slug(meta['device'])}{which}-{stamp}.csv"
    table = with_metadata(df, meta)
    ceil_rows = pd.DataFrame([{"program": "ceiling", "variant": c.name, "size": c.detail, "value": c.value,
                               "unit": c.unit, "median_ms": c.timing.median_ms if c.timing else np.nan,
                               "iqr_ms": c.timing.iqr_ms if c.timing else np.nan} for c in ceilings_.values()])
    pd.concat([table, with_metadata(ceil_rows, meta)], ignore_index=True).to_csv(dest, index=False)
    return dest


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
    """Copy a bench CSV to bench/results/<gpu_folder>/ where reference runs are committed."""
    dest_dir = RESULTS_DIR / gpu_folder(device)
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / Path(path).name
    dest.write_bytes(Path(path).read_bytes())
    return dest
