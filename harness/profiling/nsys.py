"""Nsight Systems: where its report importer's library comes from, and reading `nsys stats`.

    nsys profile --trace=cuda,nvtx ... build/bin/<prog> argv       (harness.profiling.profile runs it)
    nsys stats --report cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum --format csv
read by header name (the chatter lines before each header are skipped), or, when stats gives no
kernel summary, from the exported SQLite file. nsys converts its trace with QdstrmImporter, which
links libdw.so.1: `nsys_env()` finds one (or unpacks the project's .debs) and says what is missing.
"""

from __future__ import annotations

import csv
import glob
import io
import os
import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from harness.base import paths
from harness.calling import runner

NSYS_REPORTS = ("cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum")
KERNEL_COLUMNS = ["kernel", "time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns"]


# --- libdw for nsys's importer ---------------------------------------------------------------------

LIBDW = "libdw.so.1"


DW_DIR = paths.BUILD / "tools" / "dw"  # where unpack_libdw (and .ci/gpu) unpack the .debs
_DW_LIBS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")
SYSTEM_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/usr/local/lib")


def user_dw_dir() -> Path:
    """The user's own place for an unpacked libdw: $XDG_CACHE_HOME/cudalab/dw (~/.cache/cudalab/dw)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "cudalab" / "dw"


def libdw_dirs() -> list[Path]:
    """Where libdw.so.1 is looked for: LD_LIBRARY_PATH (the loader searches it anyway), the system
    folders, and the unpacked .debs under the project's build/tools/dw or the user's
    ~/.cache/cudalab/dw. Never a shared folder such as /tmp, where anyone could put a library that nsys
    would then load."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += list(SYSTEM_DIRS)
    for root in (DW_DIR, user_dw_dir()):
        dirs += [str(root / sub) for sub in _DW_LIBS]
    return [Path(d) for d in dict.fromkeys(dirs)]


def unsafe_reason(lib_dir: Path, root: Path | None = None) -> str:
    """Why a library in `lib_dir` must not be put first on nsys's LD_LIBRARY_PATH, or "": the folder
    (and each one from `root` down to it) and libdw.so.1 itself must belong to you or to root and be
    writable by nobody else."""
    chain = [lib_dir]
    if root is not None:
        p = lib_dir
        while p != root and root in p.parents:
            p = p.parent
            chain.append(p)
    for p in [*chain, lib_dir / LIBDW]:
        try:
            st = p.stat()
        except OSError as e:
            return f"{p}: {e.strerror or e}"
        if st.st_uid not in (os.geteuid(), 0):
            return f"{p} belongs to another user (uid {st.st_uid})"
        if st.st_mode & 0o022:
            return f"{p} can be written by other users (mode {st.st_mode & 0o777:o})"
    return ""


def find_libdw() -> Path | None:
    for d in libdw_dirs():
        if (d / LIBDW).exists():
            return d
    return None


def unpack_libdw(debs_dir: Path | None = None, dest: Path | None = None) -> Path | None:
    """Unpack libdw1 and libelf1 .debs (.offline/debs/) with dpkg -x into build/tools/dw (made 0755
    whatever the umask); return the folder holding libdw.so.1, or None when there is nothing to unpack
    or no dpkg."""
    debs_dir = debs_dir or (paths.ROOT / ".offline" / "debs")
    dest = dest or DW_DIR
    debs = sorted(glob.glob(str(debs_dir / "*.deb")))
    dpkg = shutil.which("dpkg") or shutil.which("dpkg-deb")
    if not debs or not dpkg:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o755)
    for deb in debs:
        # A .deb that does not unpack simply leaves no libdw behind: the check below says so.
        runner.run_command([dpkg, "-x", deb, str(dest)], timeout=120)
    for sub in _DW_LIBS:
        if (dest / sub / LIBDW).exists():
            return dest / sub
    return None


def nsys_env() -> tuple[dict[str, str], str]:
    """The environment to run nsys in (libdw's folder prepended to LD_LIBRARY_PATH), and a note:
    "" when libdw was found, else what is missing, or why the one found is not used."""
    env = dict(os.environ)
    parts = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    d = find_libdw() or unpack_libdw()
    if d is None:
        return env, (f"importer library {LIBDW} missing (nsys converts its trace with QdstrmImporter, which "
                     f"links it): `apt install libdw1`, or unpack the libdw1 and libelf1 .debs with "
                     f"`dpkg -x` into {DW_DIR} (or a folder of your own on LD_LIBRARY_PATH)")
    if str(d) in parts:  # the user's own setting: the loader already searches it, nothing to add
        return env, ""
    root = next((r for r in (DW_DIR, user_dw_dir()) if r in d.parents), None)
    why = unsafe_reason(d, root)
    if why:
        return env, f"{LIBDW} found in {d} is not used: {why} (`chmod go-w` it, or unpack the .debs again)"
    env["LD_LIBRARY_PATH"] = ":".join([str(d)] + parts)
    return env, ""


# --- parsing nsys stats ----------------------------------------------------------------------------

_NSYS_CANON = {
    "Time (%)": "time_pct", "Time(%)": "time_pct",
    "Total Time (ns)": "total_ns", "Total Time": "total_ns",
    "Instances": "count", "Num Calls": "count", "Count": "count", "Calls": "count",
    "Avg (ns)": "avg_ns", "Average": "avg_ns", "Avg": "avg_ns",
    "Med (ns)": "med_ns", "Median": "med_ns", "Med": "med_ns",
    "Min (ns)": "min_ns", "Minimum": "min_ns", "Min": "min_ns",
    "Max (ns)": "max_ns", "Maximum": "max_ns", "Max": "max_ns",
    "StdDev (ns)": "std_ns", "StdDev": "std_ns",
    "Name": "name", "Operation": "name",
    "Total (MB)": "total_mb",
}
_HEADER_KEYS = ("Time (%)", "Time(%)", "Total Time (ns)")
_REPORT_NAME = re.compile(r"\[(?:[^\]]*/)?(\w+?)(?:\.py)?\]\s*\.\.\.|\((\w+_sum)\)\s*:?\s*$")


def _csv_fields(line: str) -> list[str] | None:
    try:
        rows = list(csv.reader([line]))
    except csv.Error:
        return None
    return rows[0] if rows else None


def _identify_nsys(columns: list[str]) -> str | None:
    cols = set(columns)
    if "Operation" in cols:
        return "cuda_gpu_mem_size_sum" if "Total (MB)" in cols else "cuda_gpu_mem_time_sum"
    if "Num Calls" in cols or "Calls" in cols:
        return "cuda_api_sum"
    if "Instances" in cols:
        return "cuda_gpu_kern_sum"
    return None


def _to_number(v):
    if isinstance(v, str):
        s = v.strip().replace(",", "")
        if re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", s):
            return float(s)
    return v


def parse_nsys_stats(text: str) -> dict[str, pd.DataFrame]:
    """Split `nsys stats --format csv` output (one or several reports, with the "Processing ...",
    "Generating SQLite ..." and "SKIPPED" chatter around them) into one DataFrame per report.

    Columns are read by header name and renamed: time_pct, total_ns, count, avg_ns, med_ns,
    min_ns, max_ns, std_ns, name. A report nsys skipped (no data of that kind) comes back as an
    empty DataFrame with those columns."""
    out: dict[str, pd.DataFrame] = {}
    current: str | None = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        m = _REPORT_NAME.search(line)
        if m and not line.startswith('"'):
            current = m.group(1) or m.group(2)
            if "SKIPPED" in line or "does not contain" in line:
                out[current] = _empty_nsys()
            i += 1
            continue
        if ("SKIPPED" in line or "does not contain" in line) and current:
            out[current] = _empty_nsys()
            i += 1
            continue
        fields = _csv_fields(line) if line else None
        if fields and any(k in fields for k in _HEADER_KEYS):
            block = [line]
            i += 1
            while i < len(lines) and lines[i].strip():
                f = _csv_fields(lines[i].strip())
                if f is None or len(f) != len(fields):
                    break
                block.append(lines[i].strip())
                i += 1
            name = _identify_nsys(fields) if current is None else current
            if name is None:
                name = f"report{len(out)}"
            out[name] = _nsys_frame(block)
            current = None
            continue
        i += 1
    return out


def _empty_nsys() -> pd.DataFrame:
    return pd.DataFrame(columns=["time_pct", "total_ns", "count", "avg_ns", "med_ns", "min_ns", "max_ns",
                                 "std_ns", "name"])


def _nsys_frame(block: list[str]) -> pd.DataFrame:
    df = pd.read_csv(io.StringIO("\n".join(block)), dtype=str, keep_default_na=False)
    df = df.rename(columns={c: _NSYS_CANON.get(c.strip(), c.strip()) for c in df.columns})
    for c in df.columns:
        if c != "name":
            df[c] = pd.to_numeric(df[c].map(_to_number), errors="coerce")
    return df


def nsys_kernel_table(reports: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """cuda_gpu_kern_sum as the kernel table (share of GPU kernel time, instances, times in ns)."""
    k = reports.get("cuda_gpu_kern_sum")
    if k is None or k.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    df = k.rename(columns={"name": "kernel", "count": "instances"})
    for c in KERNEL_COLUMNS:
        if c not in df:
            df[c] = np.nan
    df["instances"] = df["instances"].astype("int64")
    return df[KERNEL_COLUMNS].sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def summary_from_sqlite(path: Path) -> dict[str, pd.DataFrame]:
    """The three reports computed straight from an nsys SQLite export: the fallback when the
    `nsys stats` report scripts are missing from a trimmed nsys (Nsight Compute's copy, say)."""
    con = sqlite3.connect(str(path))
    try:
        tables = _tables(con)

        def q(sql: str) -> pd.DataFrame:
            return pd.read_sql_query(sql, con)

        out = {}
        # report -> (activity table, the StringIds column naming each row)
        for report, table, name_col in (("cuda_gpu_kern_sum", "CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"),
                                        ("cuda_api_sum", "CUPTI_ACTIVITY_KIND_RUNTIME", "nameId")):
            if table in tables:
                d = q(f"SELECT s.value AS name, a.end - a.start AS dur FROM {table} a "
                      f"JOIN StringIds s ON s.id = a.{name_col}")
                out[report] = _summarize_durations(d)
            else:
                out[report] = _empty_nsys()
        parts = []
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
            kinds = ("LEFT JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind"
                     if "ENUM_CUDA_MEMCPY_OPER" in tables else "")
            label = "'[CUDA memcpy ' || COALESCE(e.label, m.copyKind) || ']'" if kinds else "'[CUDA memcpy]'"
            parts.append(q(f"SELECT {label} AS name, m.end - m.start AS dur FROM CUPTI_ACTIVITY_KIND_MEMCPY m {kinds}"))
        if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
            parts.append(q("SELECT '[CUDA memset]' AS name, end - start AS dur FROM CUPTI_ACTIVITY_KIND_MEMSET"))
        parts = [p for p in parts if not p.empty]
        out["cuda_gpu_mem_time_sum"] = _summarize_durations(pd.concat(parts)) if parts else _empty_nsys()
        return out
    finally:
        con.close()


TRACE_COLUMNS = ["name", "start_us", "end_us", "device", "stream", "ranges", "outer_id"]
PEER_COPY = "[CUDA memcpy Peer-to-Peer]"  # a copy engine's copy between two GPUs, as nsys's summaries name it
NVTX_RANGE_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange in nsys's ENUM_NSYS_EVENT_TYPE


def kernel_trace(path: Path) -> pd.DataFrame:
    """Every kernel of an nsys SQLite export, and every copy between two GPUs (named PEER_COPY: the copy
    engines' share of a collective, which no kernel shows), in start order: name, start_us and end_us (µs
    from the first one's start), device, stream, and the NVTX ranges its launch was enqueued in ("ranges",
    outermost first, joined by "/"; "" outside any) with "outer_id", the number of the outermost
    range instance (-1 outside any). A kernel belongs to a range when the runtime call that launched
    it (same correlation id) started inside the range on the same thread: kernels run later than
    they are enqueued, so their own times say nothing about ranges. ValueError (one line) when the
    file is no nsys export or holds no kernels."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (nsys stats --force-export writes the .sqlite beside the report)")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        try:
            tables = _tables(con)
        except sqlite3.DatabaseError as e:
            raise ValueError(f"{path} is no SQLite file ({e})") from None
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables or "StringIds" not in tables:
            raise ValueError(f"{path} holds no CUDA kernels (no CUPTI_ACTIVITY_KIND_KERNEL table: was it traced "
                             "with --trace=cuda?)")
        k = pd.read_sql_query(
            "SELECT s.value AS name, k.start, k.end, k.deviceId AS device, k.streamId AS stream, k.correlationId "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start", con)
        if k.empty:
            raise ValueError(f"{path} holds no CUDA kernels")
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables and {"srcDeviceId", "dstDeviceId"} <= _columns(
                con, "CUPTI_ACTIVITY_KIND_MEMCPY"):
            peer = pd.read_sql_query(
                "SELECT ? AS name, start, end, deviceId AS device, streamId AS stream, correlationId "
                "FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE srcDeviceId != dstDeviceId", con, params=(PEER_COPY,))
            if len(peer):
                k = pd.concat([k, peer], ignore_index=True).sort_values("start", kind="stable").reset_index(drop=True)
        launches = pd.DataFrame(columns=["correlationId", "api_start", "tid"])
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            launches = pd.read_sql_query("SELECT correlationId, start AS api_start, globalTid AS tid "
                                         "FROM CUPTI_ACTIVITY_KIND_RUNTIME", con)
        ranges = pd.DataFrame(columns=["start", "end", "tid", "text"])
        if "NVTX_EVENTS" in tables:
            cols = _columns(con, "NVTX_EVENTS")
            text = ("COALESCE(n.text, s.value)" if "textId" in cols else "n.text") if "text" in cols else "s.value"
            join = "LEFT JOIN StringIds s ON s.id = n.textId" if "textId" in cols else ""
            types = ",".join(map(str, NVTX_RANGE_TYPES))
            ranges = pd.read_sql_query(
                f"SELECT n.start, n.end, n.globalTid AS tid, {text} AS text FROM NVTX_EVENTS n {join} "
                f"WHERE n.eventType IN ({types}) AND n.end > n.start ORDER BY n.start", con)
    finally:
        con.close()
    k = k.merge(launches.drop_duplicates("correlationId"), on="correlationId", how="left")
    names = [""] * len(k)
    outer = [-1] * len(k)
    if len(ranges):
        rs, re_, rt = ranges["start"].to_numpy(), ranges["end"].to_numpy(), ranges["tid"].to_numpy()
        rtext = ranges["text"].fillna("").astype(str).to_numpy()
        for i, (t0, tid) in enumerate(zip(k["api_start"].to_numpy(), k["tid"].to_numpy())):
            if pd.isna(t0):
                continue
            inside = np.flatnonzero((rs <= t0) & (t0 <= re_) & (rt == tid))  # already outermost first (start order)
            if len(inside):
                names[i] = "/".join(rtext[inside])
                outer[i] = int(inside[0])
    t0 = k["start"].min()
    return pd.DataFrame({"name": k["name"], "start_us": (k["start"] - t0) / 1e3, "end_us": (k["end"] - t0) / 1e3,
                         "device": k["device"], "stream": k["stream"], "ranges": names, "outer_id": outer})[TRACE_COLUMNS]


def _summarize_durations(d: pd.DataFrame) -> pd.DataFrame:
    if d.empty:
        return _empty_nsys()
    g = d.groupby("name")["dur"]
    df = pd.DataFrame({"total_ns": g.sum(), "count": g.count(), "avg_ns": g.mean(), "med_ns": g.median(),
                       "min_ns": g.min(), "max_ns": g.max(), "std_ns": g.std().fillna(0.0)}).reset_index()
    df["time_pct"] = 100.0 * df["total_ns"] / df["total_ns"].sum()
    df = df.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)
    return df[["time_pct", "total_ns", "count", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns", "name"]]


def profile_command(nsys: str, base: Path, exe: Path, argv: list[str]) -> list[str]:
    """`nsys profile`: CUDA API and kernels only (no CPU sampling), the report at <base>.nsys-rep."""
    return [nsys, "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
            "--output", str(base), str(exe), *argv]


def stats_command(nsys: str, report: Path) -> list[str]:
    """`nsys stats`: the three summaries as CSV on stdout."""
    return [nsys, "stats", "--report", ",".join(NSYS_REPORTS), "--format", "csv", "--output", "-",
            "--force-export=true", str(report)]


# --- kernel names ----------------------------------------------------------------------------------

def _strip_args(s: str) -> str:
    """Drop a trailing argument list "(...)", matching parentheses from the end (template
    arguments such as "<(int)16>" hold parentheses of their own)."""
    s = s.rstrip()
    if not s.endswith(")"):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(s[i], 0)
        if depth == 0:
            return s[:i].rstrip()
    return s


def short_name(name: str, width: int = 48) -> str:
    """A kernel's name without its return type and argument list, template arguments kept but
    without their casts ("void mm<(int)16, (bool)1>(int, ...)" -> "mm<16, 1>"), cut to `width`."""
    s = _strip_args(str(name))
    s = re.sub(r"^(void|__global__)\s+", "", s).strip()
    s = re.sub(r"\((?:unsigned |signed |long |short )*\w+\)(?=[-\w])", "", s)  # (int)16 -> 16
    return s if len(s) <= width else s[: width - 1] + "\u2026"
