"""The bench's regression gate (`invoke bench --compare [BASE] [NEW]`): two bench CSVs of one GPU, case by
case, SAME, FASTER or SLOWER. Only ratios are compared (each case over the ceiling timed beside it in its
own run: ARCHITECTURE.md, Measuring), never times or rates, which move with the clock between runs.

The rule. A run gives each case the median of its per-round ratios and their p25-p75 spread. The
decision interval of a case in a run is that spread, widened where it is narrower than the lab's
resolution between runs to median x (1 +- FLOOR), FLOOR being half of bench.REPEAT_TOLERANCE_PCT (the 3%
within which two runs of the same code agree, NOTES-bench.md). A ratio is a rate over a ceiling, so
higher is better:

    SLOWER   NEW's interval lies wholly below BASE's (new_hi < base_lo)
    FASTER   NEW's interval lies wholly above BASE's (new_lo > base_hi)
    SAME     the intervals overlap

so a noisy case (attention at S=16384, whose p25-p75 spans 4-8% against a power-capped ceiling) must
move past its own spread, and a steady one (a copy kernel at 0.05%) past the resolution between runs.
The floor is what makes the gate hold on unchanged code: in the two back-to-back runs of each committed
--repeat CSV (bench/results/h100/history/repeat-*.csv, 102 case pairs) the bare p25-p75 intervals miss
each other for 40 pairs, because two or three rounds see the noise inside one run and not the drift
between runs (a clock-derived ceiling moving 0.7%); with the floor none does.

A case (program, variant, size) in only one of the CSVs is listed as such; one with no ratio in a run
(not measured) is listed as no ratio; one measured against another ceiling in each run is not compared.
None of these is SLOWER. Two CSVs from different GPUs are refused: their ratios do not compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.base import paths
from harness.measuring import results_csv
from harness.measuring.bench import REPEAT_TOLERANCE_PCT

FLOOR = REPEAT_TOLERANCE_PCT / 200.0  # half-width of the narrowest decision interval, as a fraction
KEY = ["program", "variant", "size"]
SAME, FASTER, SLOWER = "SAME", "FASTER", "SLOWER"
ONLY_BASE, ONLY_NEW = "only in BASE", "only in NEW"
NO_RATIO, OTHER_CEILING = "no ratio", "other ceiling"
COLUMNS = KEY + ["ceiling", "unit", "base", "base_p25", "base_p75", "new", "new_p25", "new_p75",
                 "base_lo", "base_hi", "new_lo", "new_hi", "change_pct", "verdict"]


class DifferentGPUs(ValueError):
    """The two CSVs ran on different GPU models: their ratios do not compare."""


@dataclass
class Run:
    path: Path
    cases: pd.DataFrame
    meta: dict

    @property
    def programs(self) -> list[str]:
        return list(dict.fromkeys(self.cases["program"].astype(str)))


def load(path) -> Run:
    """A bench CSV through the lab's one reader, or a one-line ValueError / FileNotFoundError."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a bench CSV")
    cases, meta, _ = results_csv.read(path)
    missing = [c for c in ("ratio", "device") if c not in cases.columns]
    if missing:
        raise ValueError(f"{path} is not a bench CSV written by `invoke bench`: no column(s) {', '.join(missing)}")
    for c in KEY:
        cases[c] = cases[c].astype(str)
    dup = cases[cases.duplicated(KEY, keep=False)]
    if len(dup):
        r = dup.iloc[0]
        raise ValueError(f"{path} holds case {r['program']} {r['variant']} {r['size']} twice: not one run's CSV")
    return Run(path, cases.reset_index(drop=True), meta)


def interval(median: float, p25: float, p75: float, floor: float = FLOOR) -> tuple[float, float]:
    """The decision interval: p25..p75 (the median alone where a CSV has no spread), widened to at
    least median x (1 +- floor)."""
    lo = np.nanmin([p25, median * (1.0 - floor)])
    hi = np.nanmax([p75, median * (1.0 + floor)])
    return float(lo), float(hi)


def verdict(base_lo: float, base_hi: float, new_lo: float, new_hi: float) -> str:
    if new_hi < base_lo:
        return SLOWER
    if new_lo > base_hi:
        return FASTER
    return SAME


def _num(row, col: str) -> float:
    v = pd.to_numeric(row.get(col, np.nan), errors="coerce") if row is not None else np.nan
    return float(v) if pd.notna(v) else float("nan")


def check_same_gpu(base: Run, new: Run) -> None:
    a, b = base.meta.get("device", ""), new.meta.get("device", "")
    if a != b:
        raise DifferentGPUs(f"{base.path.name} ran on {a or 'an unnamed GPU'}, {new.path.name} on "
                            f"{b or 'an unnamed GPU'}: ratios from different GPUs do not compare; "
                            f"compare two runs of one GPU")


def compare(base: pd.DataFrame, new: pd.DataFrame, floor: float = FLOOR) -> pd.DataFrame:
    """One row per case of either table (BASE's order, then NEW's own), COLUMNS: both runs' median
    ratio and p25/p75, the decision intervals, NEW's change in percent and the verdict."""
    b = {tuple(str(r[k]) for k in KEY): r for _, r in base.iterrows()}
    n = {tuple(str(r[k]) for k in KEY): r for _, r in new.iterrows()}
    rows = []
    for key in list(b) + [k for k in n if k not in b]:
        rb, rn = b.get(key), n.get(key)
        row = dict(zip(KEY, key))
        either = rb if rb is not None else rn
        row["ceiling"] = str(either.get("ceiling", ""))
        row["unit"] = str(either.get("unit", ""))
        for side, r in (("base", rb), ("new", rn)):
            m, p25, p75 = _num(r, "ratio"), _num(r, "ratio_p25"), _num(r, "ratio_p75")
            row[side], row[f"{side}_p25"], row[f"{side}_p75"] = m, p25, p75
            row[f"{side}_lo"], row[f"{side}_hi"] = interval(m, p25, p75, floor) if np.isfinite(m) else (np.nan,
                                                                                                       np.nan)
        ok = np.isfinite(row["base"]) and np.isfinite(row["new"]) and row["base"] > 0
        row["change_pct"] = 100.0 * (row["new"] / row["base"] - 1.0) if ok else np.nan
        if rn is None:
            row["verdict"] = ONLY_BASE
        elif rb is None:
            row["verdict"] = ONLY_NEW
        elif str(rb.get("ceiling", "")) != str(rn.get("ceiling", "")):
            row["verdict"] = OTHER_CEILING
        elif not ok or not np.isfinite(row["new"]):
            row["verdict"] = NO_RATIO
        else:
            row["verdict"] = verdict(row["base_lo"], row["base_hi"], row["new_lo"], row["new_hi"])
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def only(run: Run, programs: list[str] | None) -> pd.DataFrame:
    """The run's cases of `programs` (all when None)."""
    if not programs:
        return run.cases
    return run.cases[run.cases["program"].isin(programs)].reset_index(drop=True)


def runs(base: Run, new: Run, programs: list[str] | None = None, floor: float = FLOOR) -> pd.DataFrame:
    """compare() of two loaded runs of one GPU (DifferentGPUs otherwise), limited to `programs`."""
    check_same_gpu(base, new)
    return compare(only(base, programs), only(new, programs), floor)


def counts(table: pd.DataFrame) -> dict[str, int]:
    return {v: int(n) for v, n in table["verdict"].value_counts().items()}


def summary(table: pd.DataFrame) -> str:
    """One line: how many cases are SLOWER (naming them), and what the others are."""
    c = counts(table)
    compared = sum(c.get(v, 0) for v in (SAME, FASTER, SLOWER))
    rest = ", ".join(f"{c[v]} {v}" for v in (SAME, FASTER, ONLY_BASE, ONLY_NEW, NO_RATIO, OTHER_CEILING)
                     if c.get(v))
    slow = table[table["verdict"] == SLOWER]
    if len(slow):
        names = "; ".join(f"{r.program} {r.variant} {r.size} {r.change_pct:+.1f}%" for r in slow.itertuples())
        return f"{len(slow)} of {compared} compared cases SLOWER ({names}); {rest}" if rest else \
            f"{len(slow)} of {compared} compared cases SLOWER ({names})"
    return f"no case SLOWER: {rest}" if rest else "no case to compare"


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """The table as the task prints it: medians, spreads as p25-p75 text, the change, the verdict."""
    def spread(p25, p75):
        return "" if not (np.isfinite(p25) and np.isfinite(p75)) else f"{p25:.4g}-{p75:.4g}"

    out = table[KEY].copy()
    out["base"] = table["base"]
    out["base p25-p75"] = [spread(a, b) for a, b in zip(table["base_p25"], table["base_p75"])]
    out["new"] = table["new"]
    out["new p25-p75"] = [spread(a, b) for a, b in zip(table["new_p25"], table["new_p75"])]
    out["change"] = [f"{c:+.1f}%" if np.isfinite(c) else "" for c in table["change_pct"]]
    out["verdict"] = table["verdict"]
    return out


# --- the default pair: the two newest runs of the programs asked for ----------------------------------

def _candidates(folder: Path) -> list[Path]:
    return sorted(folder.glob("bench-*.csv")) if folder.is_dir() else []


def _runs_in(files: list[Path], programs: list[str] | None, device: str | None, skip: set[Path],
             before=None) -> list[Run]:
    """The readable bench CSVs among `files` that hold every program asked for (and ran on `device`,
    not after the date `before`, when given), newest first by the date inside. An unreadable file is
    passed over: the default pair is what can be compared."""
    found = []
    for p in files:
        if p.resolve() in skip:
            continue
        try:
            run = load(p)
        except (ValueError, OSError):
            continue
        if programs and not set(programs) <= set(run.programs):
            continue
        if device is not None and run.meta.get("device", "") != device:
            continue
        date = pd.to_datetime(run.meta.get("date", ""), errors="coerce")
        if pd.isna(date) or (before is not None and date > before):
            continue
        found.append((date, p.name, run))
    return [r for _, _, r in sorted(found, key=lambda t: (t[0], t[1]), reverse=True)]


def _newest(programs, device, skip, folders, before=None) -> Run | None:
    for folder_list in folders:
        got = _runs_in([p for f in folder_list for p in _candidates(f)], programs, device, skip, before)
        if got:
            return got[0]
    return None


def _folders(device: str | None) -> list[list[Path]]:
    """Where the default pair is looked for, in order: this machine's runs (build/bench/), then the
    committed runs of the GPU (bench/results/<gpu>/ and its history/)."""
    out = [[paths.BUILD_BENCH]]
    if device:
        res = paths.RESULTS_DIR / paths.gpu_folder(device)
        out.append([res, res / "history"])
    return out


def pick(given: list[str], programs: list[str] | None = None) -> tuple[Run, Run]:
    """(BASE, NEW) from the paths given (none, BASE, or BASE and NEW). Left out, NEW is the newest run
    in build/bench/ that holds every program asked for (any run when none is asked) of BASE's GPU, and
    BASE the newest run before it of the same GPU that holds every program asked for (every program of
    NEW when none is asked): in build/bench/, else among the committed runs of that GPU in
    bench/results/<gpu>/ and its history/. FileNotFoundError in one line when there is no such pair."""
    if len(given) > 2:
        raise ValueError(f"--compare takes at most two CSVs (BASE and NEW), got {len(given)}")
    loaded = [load(p) for p in given]
    what = f" with {', '.join(programs)}" if programs else ""
    if len(loaded) == 2:
        return loaded[0], loaded[1]
    if len(loaded) == 1:
        base = loaded[0]
        new = _newest(programs, base.meta.get("device", ""), {base.path.resolve()}, [[paths.BUILD_BENCH]])
        if new is None:
            raise FileNotFoundError(f"no bench CSV in {paths.BUILD_BENCH} to compare with {base.path}{what}: "
                                    f"run `invoke bench` first, or name NEW")
        return base, new
    new = _newest(programs, None, set(), [[paths.BUILD_BENCH]])
    if new is None:
        raise FileNotFoundError(f"no bench CSV{what} in {paths.BUILD_BENCH}: run `invoke bench` first, "
                                f"or name BASE and NEW")
    device = new.meta.get("device", "")
    base = _newest(programs or new.programs, device, {new.path.resolve()}, _folders(device),
                   before=pd.to_datetime(new.meta.get("date", ""), errors="coerce"))
    if base is None:
        raise FileNotFoundError(f"only one bench CSV{what} of {device or 'this GPU'} ({new.path}): run "
                                f"`invoke bench` again after the change, or name BASE")
    return base, new
