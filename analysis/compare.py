"""The regression gate's figure (`invoke bench --compare`): BASE against NEW, case by case.

Input: the table of harness.measuring.compare.compare() (one row per case: both runs' median ratio with
its p25/p75, the decision intervals, the verdict). Each case is a row, one panel per program; both runs
are drawn over BASE's median ratio, so every row is on one scale whatever its ceiling: BASE near 1 and
NEW at new/base, each with its p25-p75 as a bar and its decision interval (the spread widened to the
lab's resolution between runs) as a pale band. SLOWER rows are red, FASTER green, SAME grey; a case in
one CSV only, or with no ratio, is named on its row instead. Nothing here launches anything.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from harness.base import files  # noqa: E402
from harness.measuring import compare as hc  # noqa: E402

BASE_COLOUR = "#4c72b0"
COLOURS = {hc.SLOWER: "#d62728", hc.FASTER: "#2ca02c", hc.SAME: "#555555"}
UNCOMPARED = "#9a9a9a"


def colour(verdict: str) -> str:
    """Red for SLOWER, green for FASTER, dark grey for SAME, light grey for a case not compared."""
    return COLOURS.get(verdict, UNCOMPARED)


def points(table: pd.DataFrame) -> pd.DataFrame:
    """The numbers behind the figure: every ratio column of the table over BASE's median (NaN where
    BASE has none)."""
    df = table.reset_index(drop=True).copy()
    scale = pd.to_numeric(df["base"], errors="coerce").to_numpy(dtype=float)
    scale = np.where(scale > 0, scale, np.nan)
    for side in ("base", "new"):
        for suffix in ("", "_p25", "_p75", "_lo", "_hi"):
            df[f"x_{side}{suffix}"] = pd.to_numeric(df[side + suffix], errors="coerce").to_numpy(dtype=float) / scale
    df["colour"] = [colour(v) for v in df["verdict"]]
    return df


def _draw(ax, y: float, x: float, lo: float, hi: float, p25: float, p75: float, c: str, marker: str):
    if np.isfinite(lo) and np.isfinite(hi):
        ax.plot([lo, hi], [y, y], color=c, lw=6, alpha=0.18, solid_capstyle="butt", zorder=1)
    if np.isfinite(p25) and np.isfinite(p75):
        ax.plot([p25, p75], [y, y], color=c, lw=1.4, zorder=2)
    if np.isfinite(x):
        ax.scatter([x], [y], color=c, marker=marker, s=26, zorder=3)


def figure(table: pd.DataFrame, title: str = "") -> plt.Figure:
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    pts = points(table)
    programs = list(dict.fromkeys(pts["program"])) or ["(no cases)"]
    counts = [max(int((pts["program"] == p).sum()), 1) for p in programs]
    sns.set_theme(style="whitegrid")
    fig, axes = plt.subplots(len(programs), 1, figsize=(11, 0.42 * sum(counts) + 0.6 * len(programs) + 1.6),
                             squeeze=False, sharex=True, layout="constrained",
                             gridspec_kw={"height_ratios": [c + 0.8 for c in counts]})
    reach = pts[[c for c in pts.columns if c.startswith("x_")]].to_numpy(dtype=float).ravel()
    reach = reach[np.isfinite(reach)]
    lo_x = min(float(reach.min()) if len(reach) else 1.0, 1.0 - 2 * hc.FLOOR)
    hi_x = max(float(reach.max()) if len(reach) else 1.0, 1.0 + 2 * hc.FLOOR)
    pad = 0.08 * (hi_x - lo_x)
    for ax, prog in zip(axes[:, 0], programs):
        rows = pts[pts["program"] == prog]
        ax.axvline(1.0, color="black", lw=0.7, zorder=0)
        right = blended_transform_factory(ax.transAxes, ax.transData)
        labels = []
        for i, (_, r) in enumerate(rows.iterrows()):
            c = r["colour"]
            _draw(ax, i - 0.17, r["x_base"], r["x_base_lo"], r["x_base_hi"], r["x_base_p25"], r["x_base_p75"],
                  BASE_COLOUR, "o")
            _draw(ax, i + 0.17, r["x_new"], r["x_new_lo"], r["x_new_hi"], r["x_new_p25"], r["x_new_p75"], c, "D")
            change = f" {r['change_pct']:+.1f}%" if np.isfinite(r["change_pct"]) else ""
            ax.text(1.01, i, f"{r['verdict']}{change}", va="center", fontsize=8, color=c, transform=right,
                    fontweight="bold" if r["verdict"] == hc.SLOWER else "normal")
            if r["verdict"] in (hc.ONLY_BASE, hc.ONLY_NEW, hc.NO_RATIO, hc.OTHER_CEILING):
                ax.text(0.01, i, r["verdict"], va="center", ha="left", fontsize=7.5, color=c,
                        transform=right)
            labels.append((f"{r['variant']} {r['size']}", c))
        ax.set_yticks(range(len(rows)), [t for t, _ in labels], fontsize=8)
        for tick, (_, c) in zip(ax.get_yticklabels(), labels):
            tick.set_color(c if c in (COLOURS[hc.SLOWER], COLOURS[hc.FASTER]) else "black")
        ax.set_ylim(max(len(rows), 1) - 0.5, -0.5)
        ax.set_xlim(lo_x - pad, hi_x + pad)
        ax.set_title(prog, loc="left", fontsize=10)
        ax.grid(axis="y", visible=False)
    axes[-1, 0].set_xlabel("ratio to the ceiling timed in the same run, over BASE's median ratio")
    handles = [Line2D([], [], ls="", marker="o", color=BASE_COLOUR, label="BASE"),
               Line2D([], [], ls="", marker="D", color=COLOURS[hc.SAME], label="NEW, SAME"),
               Line2D([], [], ls="", marker="D", color=COLOURS[hc.FASTER], label="NEW, FASTER"),
               Line2D([], [], ls="", marker="D", color=COLOURS[hc.SLOWER], label="NEW, SLOWER"),
               Line2D([], [], color="black", lw=1.4, label="p25-p75 over the rounds"),
               Line2D([], [], color="black", lw=6, alpha=0.18, label=f"decision interval (at least ±{100 * hc.FLOOR:g}%)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    n = hc.counts(table) if len(table) else {}
    fig.suptitle((title or "bench --compare: BASE against NEW")
                 + f"\n{n.get(hc.SLOWER, 0)} SLOWER, {n.get(hc.FASTER, 0)} FASTER, {n.get(hc.SAME, 0)} SAME; "
                   "SLOWER: NEW's decision interval wholly below BASE's", fontsize=10)
    return fig


def plot(table: pd.DataFrame, outdir: Path, prefix: str = "compare", title: str = "") -> Path:
    """Write <prefix>.png of figure() into outdir, whole (a temporary name, then renamed); its path."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    fig = figure(table, title)
    try:
        return files.replace(outdir / f"{prefix}.png", lambda tmp: fig.savefig(tmp, format="png", dpi=110,
                                                                                bbox_inches="tight"))
    finally:
        plt.close(fig)
