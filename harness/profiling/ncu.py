"""Nsight Compute: its metric list, reading `--csv --page raw --print-units base`, and whether this
user may read the GPU's performance counters at all.

    ncu --clock-control none --metrics <list> --export <base> build/bin/<prog> argv   (harness.profiling.profile runs it)
    ncu --import <base>.ncu-rep --csv --page raw --print-units base
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from harness.profiling.nsys import KERNEL_COLUMNS, _csv_fields, _to_number

# ncu metric -> short column name. Duration; DRAM bytes read + written; achieved occupancy (active
# warps over the SM's maximum, while the SM is active); SM and memory throughput in % of peak.
DEFAULT_METRICS = {
    "gpu__time_duration.sum": "duration_ns",
    "dram__bytes.sum": "dram_bytes",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
}
DURATION_METRIC = "gpu__time_duration.sum"

PERM_FIX = ("no permission to the GPU performance counters (ERR_NVGPUCTRPERM): run as root, or set the "
            "driver option NVreg_RestrictProfilingToAdminUsers=0 (e.g. `options nvidia "
            "NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d/nvidia-profiling.conf, then reload "
            "the driver or reboot)")


# --- parsing ncu -----------------------------------------------------------------------------------

_NCU_NAME_COLS = ("Kernel Name", "Demangled Name", "Function Name", "Name")
_TIME_SCALE = {"ns": 1.0, "nsecond": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
               "second": 1e9, "s": 1e9}


def parse_ncu_raw(text: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """`ncu --csv --page raw --print-units base` output -> (one row per profiled launch, units).

    Lines before the header ("==PROF==" chatter, the program's own output) are skipped; the header
    is the first CSV line holding "ID" and a kernel-name column. The units row that follows it is
    returned as {column: unit}. Numbers are converted (thousands separators removed); the kernel
    name column is renamed `kernel`."""
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        if line.startswith("=="):
            continue
        f = _csv_fields(line.strip())
        if f and "ID" in f and any(c in f for c in _NCU_NAME_COLS):
            start = i
            break
    if start is None:
        raise ValueError("no ncu CSV header (a line with \"ID\" and \"Kernel Name\") in the output")
    body = [ln for ln in lines[start:] if ln.strip() and not ln.startswith("==")]
    df = pd.read_csv(io.StringIO("\n".join(body)), dtype=str, keep_default_na=False)
    units: dict[str, str] = {}
    if len(df) and str(df.iloc[0]["ID"]).strip() == "":
        units = {c: str(v) for c, v in df.iloc[0].items() if str(v)}
        df = df.iloc[1:].reset_index(drop=True)
    name_col = next(c for c in _NCU_NAME_COLS if c in df.columns)
    df = df.rename(columns={name_col: "kernel"})
    cols = {}
    for c in df.columns:
        conv = df[c].map(_to_number) if c != "kernel" else df[c]
        if c != "kernel" and len(conv) and all(isinstance(v, float) for v in conv if v not in ("", "n/a")):
            conv = pd.to_numeric(conv, errors="coerce")
        cols[c] = conv
    df = pd.DataFrame(cols)  # built at once: ncu's raw page has hundreds of columns
    if name_col in units:
        units["kernel"] = units.pop(name_col)
    return df, units


def ncu_kernel_table(raw: pd.DataFrame, units: dict[str, str] | None = None,
                     metrics: dict[str, str] | None = None) -> pd.DataFrame:
    """Group ncu's per-launch rows by kernel: the same columns as nsys's table, with each metric's
    mean over the kernel's launches beside them (named by `metrics`, default DEFAULT_METRICS)."""
    units = units or {}
    metrics = metrics if metrics is not None else DEFAULT_METRICS
    if raw.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    if DURATION_METRIC not in raw.columns:
        raise ValueError(f"ncu output has no {DURATION_METRIC} column: it is needed for the time shares")
    scale = _TIME_SCALE.get(units.get(DURATION_METRIC, "nsecond"), 1.0)
    wanted = [m for m in metrics if m in raw.columns and m != DURATION_METRIC
              and pd.api.types.is_numeric_dtype(raw[m])]
    d = raw[["kernel"] + wanted].assign(_dur=raw[DURATION_METRIC].astype(float) * scale)
    g = d.groupby("kernel", sort=False)
    df = pd.DataFrame({"total_ns": g["_dur"].sum(), "instances": g["_dur"].count(), "avg_ns": g["_dur"].mean(),
                       "med_ns": g["_dur"].median(), "min_ns": g["_dur"].min(),
                       "max_ns": g["_dur"].max()}).reset_index()
    total = df["total_ns"].sum()
    df["time_pct"] = 100.0 * df["total_ns"] / total if total > 0 else np.nan
    for m in wanted:
        df[metrics[m]] = g[m].mean().values
    df["instances"] = df["instances"].astype("int64")
    extra = [c for c in df.columns if c not in KERNEL_COLUMNS]
    return df[KERNEL_COLUMNS + extra].sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def metric_map(metrics: str | list[str] | None) -> dict[str, str]:
    """--metrics "a,b" -> {a: a, b: b} with the duration always included (the shares need it)."""
    if not metrics:
        return dict(DEFAULT_METRICS)
    names = [m.strip() for m in (metrics.split(",") if isinstance(metrics, str) else metrics) if m.strip()]
    out = {DURATION_METRIC: DEFAULT_METRICS[DURATION_METRIC]}
    for m in names:
        out[m] = DEFAULT_METRICS.get(m, m)
    return out


def counter_access(params: Path = Path("/proc/driver/nvidia/params")) -> tuple[bool | None, str]:
    """Whether ncu may read the GPU's performance counters: (True/False, why), or (None, why) when
    it cannot be told without running ncu. Root always may; otherwise the driver's
    RmProfilingAdminOnly (set by NVreg_RestrictProfilingToAdminUsers) decides."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return True, "running as root"
    try:
        text = params.read_text()
    except OSError:
        return None, f"{params} is not readable (no NVIDIA driver loaded here?)"
    m = re.search(r"RmProfilingAdminOnly:\s*(\d+)", text)
    if not m:
        return None, "the driver does not say whether profiling is restricted to admins"
    if m.group(1) == "0":
        return True, "the driver lets every user read the counters (RmProfilingAdminOnly: 0)"
    return False, "the driver restricts the counters to admins (RmProfilingAdminOnly: 1): ncu fails with ERR_NVGPUCTRPERM"


def profile_command(ncu: str, base: Path, exe: Path, argv: list[str], metrics: dict[str, str],
                    clock_control: bool = False, launch_count: int = 200) -> list[str]:
    """`ncu`: the metric list on every launch (at most launch_count), exported to <base>.ncu-rep."""
    return [ncu, "--clock-control", "base" if clock_control else "none", "--metrics", ",".join(metrics),
            "--target-processes", "all", "--launch-count", str(launch_count), "--export", str(base),
            "--force-overwrite", str(exe), *argv]


def import_command(ncu: str, report: Path) -> list[str]:
    """`ncu --import`: the report as raw CSV in base units (ns, bytes, %)."""
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]
