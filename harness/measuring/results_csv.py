"""Bench result files: the one writer and the one reader of `invoke bench`'s CSVs (the cases, then one
`program=ceiling` row per ceiling, every row with the run's metadata) and of the --repeat CSV, and
the checked CSV reader that the figures (analysis/) use for every CSV the lab writes. Every write is
whole (harness.base.files: a temporary name in the same folder, then os.replace)."""

from __future__ import annotations

import csv
import io
import math
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd

from harness.base import files, paths

REQUIRED = ("program", "variant", "size", "ratio", "unit", "date")
# The largest CSV any writer of the lab makes is well under a megabyte (a --repeat run of every case a
# few times over); a file past this is not one of them, and reading it whole could exhaust the memory.
MAX_CSV_BYTES = 64 * 2**20
RATIO_COLUMNS = ("ratio", "ratio_p25", "ratio_p75")


def read_bytes(path, what: str = "bench CSV") -> bytes:
    """The bytes of a CSV the lab wrote, checked before reading: a regular file (not a device such as
    /dev/zero, a pipe or a folder) of at most MAX_CSV_BYTES. FileNotFoundError or ValueError, one line
    naming the file and the limit, otherwise. Every reader of a CSV here starts from this."""
    path = Path(path)
    try:  # O_NONBLOCK: opening a named pipe must not wait for a writer; the kind is checked next
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} does not exist") from None
    except OSError as e:
        raise ValueError(f"{path} cannot be read ({e.strerror or type(e).__name__})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, pipe or socket"
            raise ValueError(f"{path} is not a {what}: it is {kind}, not a regular file")
        too_big = (f"{path} is not a {what}: it is larger than {MAX_CSV_BYTES // 2**20} MiB, the most a CSV "
                   f"of the lab may be")
        if st.st_size > MAX_CSV_BYTES:
            raise ValueError(too_big)
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_CSV_BYTES + 1)  # a file still growing is bounded too
    finally:
        os.close(fd)
    if len(data) > MAX_CSV_BYTES:
        raise ValueError(too_big)
    return data


def read_checked(path, required=REQUIRED, what: str = "bench CSV", writer: str = "`invoke bench`") -> pd.DataFrame:
    """A CSV written by `writer` (a bench CSV unless told), or ValueError (FileNotFoundError) saying in
    one line what the file is not: not a regular file of at most MAX_CSV_BYTES (read_bytes), not a
    CSV, one without the columns, one that is not whole (whole_file), or one with a ratio that cannot
    be one (check_ratios)."""
    path = Path(path)
    data = read_bytes(path, what)
    _no_nul(path, data, what)
    try:
        df = pd.read_csv(io.BytesIO(data))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a {what} (it does not read as CSV: {str(e).splitlines()[0]})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"{path} is not a {what} written by {writer}: no column(s) {', '.join(missing)}")
    _whole_lines(path, data, what)
    check_ratios(path, data)
    return df


def check_ratios(path, data: bytes) -> None:
    """ValueError, one line naming the file, the row and the column, for a ratio that no measurement
    gives: text (abc), inf, nan or a negative number. A ratio is a rate over its ceiling's, so a finite
    number, not negative (zero, a run that did no work, the repeat figure draws as such); an empty cell
    is a case that was not timed (its row says why), left as it is.
    pandas would read "inf" and "nan" as numbers, and the figures would draw them as "no ceiling"."""
    header = pd.read_csv(io.BytesIO(data), nrows=0).columns
    cols = [c for c in RATIO_COLUMNS if c in header]
    if not cols:
        return
    raw = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    for col in cols:
        for i, text in enumerate(raw[col]):
            if text.strip() == "":
                continue
            try:
                v = float(text)
            except ValueError:
                v = math.nan
            if not (math.isfinite(v) and v >= 0):
                where = ", ".join(f"{k} {raw[k].iloc[i]}" for k in ("program", "variant") if k in raw)
                raise ValueError(f"{path}: row {i + 1} ({where or f'line {i + 2}'}), column {col}: {text!r} is "
                                 f"not a ratio (a finite number, not negative; empty for a case not timed)")


def _no_nul(path: Path, data: bytes, what: str) -> None:
    nul = data.find(b"\0")
    if nul >= 0:
        count = data.count(b"\0")
        raise ValueError(f"{path} is not a whole {what}: {count} NUL byte(s) from offset {nul} "
                         f"(a torn write); run it again")


def _whole_lines(path: Path, data: bytes, what: str) -> None:
    if data and not data.endswith(b"\n"):  # every writer ends its last line
        raise ValueError(f"{path} is not a whole {what}: its last line is cut short (a torn write); run it again")
    try:
        rows = csv.reader(io.StringIO(data.decode()))
        header = next(rows, None)
        for n, row in enumerate(rows, 2):
            if row and len(row) != len(header):
                raise ValueError(f"{path} is not a whole {what}: line {n} has {len(row)} field(s), the header "
                                 f"{len(header)} (a torn write); run it again")
    except (UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{path} is not a {what} (it does not read as CSV: {str(e).splitlines()[0]})") from None


def whole_file(path: Path, what: str = "bench CSV") -> None:
    """ValueError, in one line naming the file, when a CSV is not whole: NUL bytes (what a torn or
    pre-allocated write leaves), a line with another number of fields than the header (a line cut
    short, or two writers' lines interleaved), or a last line without its newline. pandas would read
    each as valid rows padded with NaN."""
    data = read_bytes(path, what)
    _no_nul(path, data, what)
    _whole_lines(path, data, what)


def date_of(path) -> pd.Timestamp | None:
    """The run's date as written inside the CSV (its `date` column); None when unreadable."""
    try:
        data = read_bytes(path)
        dates = pd.to_datetime(pd.read_csv(io.BytesIO(data), usecols=["date"])["date"], errors="coerce").dropna()
    except (ValueError, OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return None
    return dates.max() if len(dates) else None


def latest(folder: Path | None = None) -> Path | None:
    """The bench CSV in build/bench/ whose run is the newest by the date written inside it (a copied
    or touched file keeps its run's date); None when there is none."""
    folder = Path(folder or paths.BUILD_BENCH)
    dated = [(d, p.name, p) for p in folder.glob("*.csv") if (d := date_of(p)) is not None]
    return max(dated)[2] if dated else None


def read(path: Path) -> tuple[pd.DataFrame, dict, list[str]]:
    """(cases, metadata, one line per ceiling) from a CSV written by `write`. A file that is not a
    whole bench CSV (torn, NUL-filled, a line cut short) raises ValueError in one line naming it."""
    df = read_checked(path, required=("program", "variant", "size"))
    cases = df[df["program"] != "ceiling"].reset_index(drop=True)
    ceil = df[df["program"] == "ceiling"]
    meta = {k: (str(df[k].iloc[0]) if k in df and len(df) and pd.notna(df[k].iloc[0]) else "")
            for k in ("device", "driver", "runtime", "nvcc", "date", "gpu")}
    lines = [f"ceiling {r['variant']}: {r['value']:.4g} {r['unit']} ({r['size']})" for _, r in ceil.iterrows()]
    return cases, meta, lines


def with_metadata(df: pd.DataFrame, meta: dict) -> pd.DataFrame:
    out = df.copy()
    for k, v in meta.items():
        out[k] = v
    return out


def write(df: pd.DataFrame, meta: dict, ceilings_: dict, dest: Path | None = None,
              folder: Path | None = None) -> Path:
    """build/bench/bench-<gpu>[-gpu<N>]-<date>.csv (or `folder`/the same name): the cases, then one row
    per ceiling, each row with the metadata (device, driver, runtime, nvcc, date and, under --gpus, the
    GPU number). Written whole (harness.base.files): a run never writes over another's CSV, even in the same
    second (the second gets -2 on its name); an explicit `dest` is replaced whole. Returns the path."""
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
    folder = Path(folder) if folder is not None else paths.BUILD_BENCH
    folder.mkdir(parents=True, exist_ok=True)
    files.clean_stale(folder)
    return files.create(folder / f"bench-{paths.gpu_slug(meta['device'])}{which}-{stamp}.csv", write)


def write_repeat(long: pd.DataFrame, meta: dict, folder: Path | None = None) -> Path:
    """build/bench/repeat-<gpu>-<date>.csv: the long table of a --repeat run (one row per case and
    run), never over another run's repeat CSV of the same second."""
    folder = Path(folder) if folder is not None else paths.BUILD_BENCH
    folder.mkdir(parents=True, exist_ok=True)
    stamp = meta["date"].replace(":", "").replace("-", "")
    return files.create(folder / f"repeat-{paths.gpu_slug(meta['device'])}-{stamp}.csv",
                        lambda tmp: long.to_csv(tmp, index=False))


def save(path: Path, device: str) -> Path:
    """Copy a bench CSV to bench/results/<gpu_folder>/ where reference runs are committed (whole: a
    copy of the same run replaces its earlier copy)."""
    dest_dir = paths.RESULTS_DIR / paths.gpu_folder(device)
    dest_dir.mkdir(parents=True, exist_ok=True)
    return files.replace(dest_dir / Path(path).name, Path(path).read_bytes())
