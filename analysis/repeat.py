"""Repeatability: how far each row's ratio moved between the runs of `invoke bench --repeat N`.

Input: the long CSV that `--repeat` writes (repeat-<gpu>-<date>.csv), one row per (case, run), with
columns program, variant, size, unit, ceiling, run (1..N), ratio, ratio_p25, ratio_p75 (the spread of
that run's per-round ratios), goal (the row is held to the ±3% repeatability goal), device, date; or
that DataFrame itself. Out: `summary()`, one row per case with its spread between runs, and a figure
that shows every run's ratio against the row's median. Nothing here launches anything.

The goal is on the spread between runs, max/min - 1, in percent: a row is within when it is at most the
tolerance (3%). A missing or non-positive ratio in any run leaves the spread undefined, and the row is
not within.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

TOLERANCE_PCT = 3.0
KEY = ["program", "variant", "size"]
REQUIRED = ("program", "variant", "size", "run", "ratio")
SUMMARY_COLUMNS = ["program", "variant", "size", "unit", "ceiling", "goal", "runs", "ratio_median", "ratio_min",
                   "ratio_max", "spread_pct", "within"]

BLUE = "#4c72b0"  # held to the goal, within it
RED = "#d62728"  # held to the goal, outside it
GREY = "#9a9a9a"  # not held to the goal
CLIP = 0.25  # points further than this (as a fraction) from their row's median are drawn at the axis' edge


def read_checked(path) -> pd.DataFrame:
    """A --repeat CSV, or ValueError (FileNotFoundError) saying in one line what the file is not."""
    from .bench import read_checked as read_csv_checked

    return read_csv_checked(path, REQUIRED, "repeat CSV", "`invoke bench --repeat`")


def _bools(col: pd.Series) -> pd.Series:
    """True/False from bools, 0/1 or the strings a CSV round trip leaves ("True", "false"); else False."""
    def one(v):
        if isinstance(v, str):
            return v.strip().lower() in ("true", "1", "yes")
        return bool(v) if pd.notna(v) else False
    return col.map(one).astype(bool)


def _frame(long: pd.DataFrame) -> pd.DataFrame:
    """The long table with its numbers as numbers, the key as text and goal as bool (True when absent:
    a row nobody excused is held to the goal)."""
    missing = [c for c in REQUIRED if c not in long.columns]
    if missing:
        raise ValueError(f"not a repeat table: no column(s) {', '.join(missing)}")
    df = long.copy()
    for c in KEY:
        df[c] = df[c].astype(str).where(df[c].notna(), "")
    for c in ("ratio", "ratio_p25", "ratio_p75", "run"):
        df[c] = pd.to_numeric(df[c], errors="coerce") if c in df else np.nan
    df["goal"] = _bools(df["goal"]) if "goal" in df else True
    df["throttled"] = _bools(df["throttled"]) if "throttled" in df else False
    for c in ("unit", "ceiling"):
        if c not in df:
            df[c] = ""
    return df.reset_index(drop=True)


def _spread_pct(ratios: np.ndarray) -> float:
    if not len(ratios) or not np.all(np.isfinite(ratios)) or np.any(ratios <= 0):
        return float("nan")
    return float(100.0 * (ratios.max() / ratios.min() - 1.0))


def _within(spread: float, tolerance_pct: float) -> bool:
    # 1.03 / 1.00 - 1 is 3.0000000000000027% in floating point: a row exactly at the tolerance is within.
    return bool(np.isfinite(spread) and (spread <= tolerance_pct or np.isclose(spread, tolerance_pct, rtol=0,
                                                                                 atol=1e-9)))


def summary(long: pd.DataFrame, tolerance_pct: float = TOLERANCE_PCT) -> pd.DataFrame:
    """One row per (program, variant, size), in the order the cases first appear in `long`: unit,
    ceiling, goal, runs (rows of the case), the median, min and max of its ratios over the runs (NaN
    ratios left out), spread_pct = 100 * (max / min - 1) (NaN when any run's ratio is missing or not
    positive) and within (spread_pct <= tolerance_pct; False when NaN). The tolerance is kept in
    `.attrs["tolerance_pct"]` for figure()."""
    df = _frame(long)
    rows = []
    for key, g in df.groupby(KEY, sort=False):
        r = g["ratio"].to_numpy(dtype=float)
        fin = r[np.isfinite(r)]
        spread = _spread_pct(r)
        rows.append(dict(zip(KEY, key), unit=g["unit"].iloc[0], ceiling=g["ceiling"].iloc[0],
                         goal=bool(g["goal"].any()), runs=int(len(g)),
                         ratio_median=float(np.median(fin)) if len(fin) else np.nan,
                         ratio_min=float(fin.min()) if len(fin) else np.nan,
                         ratio_max=float(fin.max()) if len(fin) else np.nan,
                         spread_pct=spread, within=_within(spread, tolerance_pct)))
    out = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    out["goal"] = out["goal"].astype(bool)
    out["within"] = out["within"].astype(bool)
    out["runs"] = out["runs"].astype(int)
    out.attrs["tolerance_pct"] = float(tolerance_pct)
    return out


def row_colour(goal: bool, within: bool) -> str:
    """Grey: not held to the goal; red: held to it and outside it; blue: held to it and within."""
    return GREY if not goal else (BLUE if within else RED)


def points(long: pd.DataFrame, summ: pd.DataFrame) -> pd.DataFrame:
    """The numbers behind the figure: per (case, run), its row (the summary's index), x = ratio / the
    row's median, x_p25 and x_p75 the same for the run's p25-p75, and the row's colour."""
    df = _frame(long)
    idx = {tuple(k): i for i, k in enumerate(summ[KEY].astype(str).itertuples(index=False, name=None))}
    df["row"] = np.array([idx.get(k, -1) for k in df[KEY].itertuples(index=False, name=None)], dtype=int)
    df = df[df["row"] >= 0].copy()
    med = summ["ratio_median"].to_numpy(dtype=float)[df["row"].to_numpy()]
    med = np.where(med > 0, med, np.nan)
    for src, dst in (("ratio", "x"), ("ratio_p25", "x_p25"), ("ratio_p75", "x_p75")):
        df[dst] = df[src].to_numpy(dtype=float) / med
    colours = [row_colour(g, w) for g, w in zip(summ["goal"], summ["within"])]
    df["colour"] = [colours[i] for i in df["row"]]
    return df.reset_index(drop=True)


def figure(long: pd.DataFrame, summary: pd.DataFrame | None = None, title: str = "",
           tolerance_pct: float | None = None) -> plt.Figure:
    """One panel per program, a row per case ("program variant size"); in each row one point per run
    (the first run at the top of the row) at its ratio over the row's median of runs, with that run's p25-p75
    as a horizontal bar, and a shaded band of ±tolerance around 1. Rows held to the goal are blue
    when within it and red when not; rows not held to it are grey. Right of each row: its spread
    (max/min - 1) and how many runs. A point more than 25% off its median is drawn as a triangle at
    the edge with its value written beside it, so one wild run does not flatten the rest."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    summ = summary if summary is not None else _summary(long, tolerance_pct or TOLERANCE_PCT)
    tol = float(tolerance_pct if tolerance_pct is not None else summ.attrs.get("tolerance_pct", TOLERANCE_PCT))
    summ = summ.reset_index(drop=True)  # rows are numbered by position (a filtered summary keeps its labels)
    pts = points(long, summ)
    n_runs = int(pts["run"].max()) if len(pts) and pts["run"].notna().any() else 1
    programs = list(dict.fromkeys(summ["program"])) or ["(no cases)"]
    counts = [max(int((summ["program"] == p).sum()), 1) for p in programs]
    sns.set_theme(style="whitegrid")
    height = 0.3 * sum(counts) + 0.55 * len(programs) + 1.6
    fig, axes = plt.subplots(len(programs), 1, figsize=(11, height), squeeze=False, sharex=True,
                             layout="constrained", gridspec_kw={"height_ratios": [c + 0.8 for c in counts]})
    reach = np.concatenate([pts[c].to_numpy(dtype=float) for c in ("x", "x_p25", "x_p75")]) if len(pts) else []
    reach = np.abs(np.asarray(reach, dtype=float) - 1.0)
    reach = reach[np.isfinite(reach)]
    half = min(CLIP, max(2.0 * tol / 100.0, float(reach.max()) * 1.1 if len(reach) else 0.0))
    lo_x, hi_x = 1.0 - half, 1.0 + half
    # Runs sit one above the other inside their row, the first run on top, so their bars never overlap.
    step = min(0.6 / max(n_runs - 1, 1), 0.2)

    for ax, prog in zip(axes[:, 0], programs):
        rows = summ.index[summ["program"] == prog].tolist()
        local = {r: i for i, r in enumerate(rows)}
        ax.axvspan(1.0 - tol / 100.0, 1.0 + tol / 100.0, color="#2ca02c", alpha=0.12, lw=0, zorder=0)
        ax.axvline(1.0, color="black", lw=0.8, zorder=1)
        p = pts[pts["row"].isin(rows)].copy()
        p["y"] = [local[r] + (run - (n_runs + 1) / 2.0) * step if np.isfinite(run) else local[r]
                  for r, run in zip(p["row"], p["run"])]
        shown = p[np.isfinite(p["x"]) & (p["x"] >= lo_x) & (p["x"] <= hi_x)]
        for colour, g in shown.groupby("colour", sort=False):
            bars = g[np.isfinite(g["x_p25"]) & np.isfinite(g["x_p75"])]
            if len(bars):
                ax.errorbar(bars["x"], bars["y"], xerr=[np.clip(bars["x"] - bars["x_p25"], 0, None),
                                                        np.clip(bars["x_p75"] - bars["x"], 0, None)],
                            fmt="none", ecolor=colour, elinewidth=1.0, capsize=1.5, alpha=0.8, zorder=2)
            ax.scatter(g["x"], g["y"], s=16, zorder=3, edgecolors=colour, linewidths=1.0, label="_runs",
                       facecolors=[("none" if t else colour) for t in g["throttled"]])
        for _, r in p[np.isfinite(p["x"]) & ((p["x"] < lo_x) | (p["x"] > hi_x))].iterrows():
            left = r["x"] < lo_x
            edge = lo_x + 0.02 * half if left else hi_x - 0.02 * half
            ax.scatter([edge], [r["y"]], marker="<" if left else ">", s=30, color=r["colour"], zorder=3,
                       label="_off the axis")
            ax.text(edge + (0.04 if left else -0.04) * half, r["y"], f"{r['x']:.2f}", fontsize=6.5, va="center",
                    ha="left" if left else "right", color=r["colour"])
        right = blended_transform_factory(ax.transAxes, ax.transData)
        labels = []
        for i, row in enumerate(rows):
            s = summ.loc[row]
            colour = row_colour(bool(s["goal"]), bool(s["within"]))
            labels.append((f"{s['program']} {s['variant']} {s['size']}".strip(), colour))
            spread = f"{s['spread_pct']:.1f}%" if np.isfinite(s["spread_pct"]) else "a run has no positive ratio"
            ax.text(1.01, i, f"{spread}  ({int(s['runs'])} runs)", va="center", fontsize=7.5, color=colour,
                    transform=right)
            if not np.isfinite(s["ratio_median"]) or s["ratio_median"] <= 0:
                ax.text(1.0, i, "no ratio measured", va="center", ha="center", fontsize=7, color=colour)
        ax.set_yticks(range(len(rows)), [t for t, _ in labels], fontsize=8)
        for tick, (_, colour) in zip(ax.get_yticklabels(), labels):
            tick.set_color(colour if colour != BLUE else "black")
        ax.set_ylim(max(len(rows), 1) - 0.5, -0.5)
        ax.set_xlim(lo_x, hi_x)
        ax.set_title(prog, loc="left", fontsize=10)
        ax.grid(axis="y", visible=False)
    axes[-1, 0].set_xlabel("ratio / median of runs (each row's runs over that row's median)")
    handles = [Line2D([], [], ls="", marker="o", color=BLUE, label=f"held to the goal, within {tol:g}%"),
               Line2D([], [], ls="", marker="o", color=RED, label=f"held to the goal, spread over {tol:g}%"),
               Line2D([], [], ls="", marker="o", color=GREY, label="not held to the goal"),
               Patch(color="#2ca02c", alpha=0.25, label=f"±{tol:g}% of the row's median")]
    if len(pts) and pts["throttled"].any():
        handles.append(Line2D([], [], ls="", marker="o", mfc="none", color="black", label="run throttled"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    n_in = int((summ["goal"] & summ["within"]).sum())
    n_goal = int(summ["goal"].sum())
    fig.suptitle((title or "bench --repeat: each row's ratio in every run")
                 + f"\n{n_runs} runs; spread = max/min - 1 of a row's ratios; {n_in} of {n_goal} rows held to the "
                   f"±{tol:g}% goal are within it; bars: each run's p25-p75 over its rounds", fontsize=10)
    return fig


_summary = summary  # figure() takes a `summary` argument that hides the function


def plot(path_or_frame, outdir: Path, prefix: str = "repeat", tolerance_pct: float = TOLERANCE_PCT) -> list[Path]:
    """Write <prefix>.png and <prefix>.svg of figure() into outdir; returns their paths. Input: a
    --repeat CSV's path (checked: one-line ValueError when it is not one) or its DataFrame."""
    long = read_checked(path_or_frame) if isinstance(path_or_frame, (str, Path)) else path_or_frame
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    device = str(long["device"].dropna().iloc[0]) if "device" in long and long["device"].notna().any() else ""
    date = str(long["date"].dropna().iloc[0]) if "date" in long and long["date"].notna().any() else ""
    where = ", ".join(x for x in (device, date) if x)
    fig = figure(long, summary(long, tolerance_pct),
                 title="bench --repeat: each row's ratio in every run" + (f" ({where})" if where else ""))
    paths = []
    for ext in ("png", "svg"):
        p = outdir / f"{prefix}.{ext}"
        fig.savefig(p, dpi=110, bbox_inches="tight")
        paths.append(p)
    plt.close(fig)
    return paths
