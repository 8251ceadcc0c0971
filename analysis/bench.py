"""Bench results as pictures: bars of ratio-to-ceiling, one axis per ceiling (each target a dashed tick), and
a roofline (arithmetic intensity against achieved FLOP/s, under the memory and compute roofs that
were measured in the same run).

Input: a CSV written by harness.measuring.results_csv.write (read through its one reader; cases, then `program=ceiling` rows), or the
DataFrames themselves: `plot((cases, ceilings), outdir)`. A CSV measured in interleaved rounds has
`ratio_p25`/`ratio_p75` (the spread of the per-round ratios): each bar then carries it as an error bar.
An older CSV without them plots as before. Nothing here launches anything.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from harness.base.paths import BUILD_BENCH  # noqa: E402
from harness.measuring import results_csv  # noqa: E402


def resolve_csv(csv=None) -> Path:
    """The CSV the user named (checked to be a bench CSV), else the newest one; one-line errors."""
    if csv:
        results_csv.read_checked(csv)
        return Path(csv)
    path = results_csv.latest()
    if path is None:
        raise FileNotFoundError(f"no bench CSV in {BUILD_BENCH}: run `invoke bench` first, or give --csv")
    return path


def load(data) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cases, ceilings) from a CSV path, a (cases, ceilings) pair, or one DataFrame that may hold
    `program=ceiling` rows."""
    if isinstance(data, (str, Path)):
        data = results_csv.read_checked(data, required=("program",))
    if isinstance(data, tuple):
        cases, ceil = data
        ceil = _ceiling_frame(ceil)
    else:
        is_ceil = data["program"] == "ceiling"
        cases, ceil = data[~is_ceil], data[is_ceil]
    return cases.reset_index(drop=True), ceil.reset_index(drop=True)


def _ceiling_frame(ceil) -> pd.DataFrame:
    """Ceilings as rows of (variant=name, value, unit), from a DataFrame or harness.measuring.bench's dict."""
    if isinstance(ceil, dict):
        return pd.DataFrame([{"program": "ceiling", "variant": c.name, "value": c.value, "unit": c.unit,
                              "size": c.detail} for c in ceil.values()])
    if ceil is None:
        return pd.DataFrame(columns=["program", "variant", "value", "unit", "size"])
    return ceil


def rung(variant) -> int | None:
    """A ladder variant's rung number: the leading digits of its name ("09_tuned" -> 9), else None."""
    digits = ""
    for ch in str(variant):
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else None


def current_targets(cases: pd.DataFrame) -> pd.DataFrame:
    """A copy of `cases` with only the targets still in force. Within one program, size and ceiling,
    a later rung that has its own target replaces the targets of the earlier ones (09_tuned's 0.9 of
    cuBLAS was the goal until 11_splitk_tail's 1.0 took over): those rows keep their ratio but lose
    their target and meets_target. Rows of the same rung (02_tiled at tiles 16 and 32) keep theirs."""
    df = cases.copy()
    if "target" not in df or df.empty:
        return df
    df["target"] = pd.to_numeric(df["target"], errors="coerce")
    keys = [c for c in ("program", "size", "ceiling") if c in df]
    rungs = df["variant"].map(rung)
    has = df["target"].notna() & rungs.notna()
    top = rungs.where(has).groupby([df[k].astype(str) for k in keys]).transform("max")
    replaced = has & (rungs < top)
    df.loc[replaced, "target"] = np.nan
    if "meets_target" in df:
        df["meets_target"] = df["meets_target"].astype(object)
        df.loc[replaced, "meets_target"] = None
    return df


# --- ratio bars ------------------------------------------------------------------------------------

SPREAD = ("ratio_p25", "ratio_p75")  # the per-round ratios' 25th-75th percentiles (absent in older CSVs)


def ratio_table(cases: pd.DataFrame) -> pd.DataFrame:
    """family (the ceiling the ratio is taken to), label (program, variant, size), ratio, target:
    the numbers behind the bars, with ratio_p25, ratio_p75 and rounds when the run measured them.
    A ratio to cuBLAS and a ratio to a naive kernel never share an axis."""
    df = cases.copy()
    df["family"] = df["ceiling"].astype(str) if "ceiling" in df else df["program"].astype(str)
    size = df["size"].astype(str).where(df["size"].notna(), "")
    df["label"] = df["program"].astype(str) + " " + df["variant"].astype(str) + np.where(size != "", " " + size, "")
    for c in ("ratio", *SPREAD):
        if c in df:
            df[c] = pd.to_numeric(df[c], errors="coerce")
    cols = ["family", "label", "program", "variant", "size", "ratio", *SPREAD, "rounds", "target", "value", "unit",
            "ceiling"]
    return df[[c for c in cols if c in df.columns]].reset_index(drop=True)


def spread_bars(d: pd.DataFrame) -> pd.DataFrame:
    """The rows of a ratio table whose ratio and p25-p75 spread are all finite: (position, ratio, p25,
    p75), position being the row's index. Empty when the table has no spread columns (an older CSV)."""
    cols = ["position", "ratio", *SPREAD]
    if not set(SPREAD) <= set(d.columns) or not len(d):
        return pd.DataFrame(columns=cols)
    vals = d[["ratio", *SPREAD]].apply(pd.to_numeric, errors="coerce")
    ok = np.isfinite(vals.to_numpy(dtype=float)).all(axis=1)
    out = vals[ok].copy()
    out.insert(0, "position", np.flatnonzero(ok))
    return out.reset_index(drop=True)


def draw_spread(ax, pos, mid, lo, hi, horizontal: bool = True, **kw):
    """Error bars from lo to hi around mid at the given positions; None when there is nothing to draw.
    Whiskers that would point the wrong way (a percentile on the wrong side of the median) are drawn to
    the median, not refused."""
    mid = np.asarray(mid, dtype=float)
    if not mid.size:
        return None
    err = [np.clip(mid - np.asarray(lo, dtype=float), 0, None), np.clip(np.asarray(hi, dtype=float) - mid, 0, None)]
    style = dict(fmt="none", ecolor="black", elinewidth=1.1, capsize=3, zorder=3)
    style.update(kw)
    if horizontal:
        return ax.errorbar(mid, pos, xerr=err, **style)
    return ax.errorbar(pos, mid, yerr=err, **style)


def _ceiling_text(name: str, ceilings: pd.DataFrame | None) -> str:
    if ceilings is None or not len(ceilings):
        return name
    hit = ceilings[ceilings["variant"].astype(str) == name]
    if not len(hit):
        return f"{name} (not measured in this run)"
    r = hit.iloc[0]
    return f"{name} ({float(r['value']):.4g} {r['unit']})"


def ratio_figure(cases: pd.DataFrame, title: str = "", ceilings: pd.DataFrame | None = None) -> plt.Figure:
    """One axis per ceiling (memcpy, fp32, cuBLAS, ...): a bar per case, coloured by whether it meets its
    target (green), misses it (red) or has none (blue); each target a dashed tick across its own bar;
    a grey line at 1.0, the ceiling itself. The figure and unit of each bar are written in a column to
    the right of the axis, where no bar or line can run into them; a legend explains the colours."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    data = ratio_table(cases)
    families = list(dict.fromkeys(data["family"])) or ["(no cases)"]
    sizes = [max(int((data["family"] == f).sum()), 1) for f in families]
    sns.set_theme(style="whitegrid")
    height = 0.9 * len(families) + 0.34 * sum(sizes) + 1.4
    fig, axes = plt.subplots(len(families), 1, figsize=(11, height), squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": [s + 1.0 for s in sizes]})
    reach = pd.concat([data[c] for c in ("ratio", "ratio_p75") if c in data]) if len(data) else pd.Series(dtype=float)
    finite = reach[np.isfinite(reach)]
    top = max(1.1, float(finite.max()) * 1.08) if len(finite) else 1.1
    any_spread = False
    blue, green, red = sns.color_palette()[0], sns.color_palette()[2], sns.color_palette()[3]
    for ax, fam in zip(axes[:, 0], families, strict=False):
        d = data[data["family"] == fam].reset_index(drop=True)
        colors = [blue if pd.isna(t) or not np.isfinite(r) else (green if r >= t else red)
                  for r, t in zip(d["ratio"], d["target"], strict=False)]
        ax.barh(range(len(d)), d["ratio"].fillna(0.0), color=colors, height=0.7)
        sp = spread_bars(d)
        any_spread |= draw_spread(ax, sp["position"], sp["ratio"], sp["ratio_p25"], sp["ratio_p75"]) is not None
        ax.set_yticks(range(len(d)), d["label"], fontsize=9)
        ax.set_ylim(len(d) - 0.5, -0.5)
        right = blended_transform_factory(ax.transAxes, ax.transData)
        for i, r in d.iterrows():
            if pd.notna(r["target"]):
                ax.plot([r["target"]] * 2, [i - 0.45, i + 0.45], color="crimson", ls="--", lw=1.4)
            text = f"{r['ratio']:.2f}  ({r['value']:.4g} {r['unit']})" if np.isfinite(r["ratio"]) else "no ceiling"
            if np.isfinite(r["ratio"]) and all(np.isfinite(r.get(c, np.nan)) for c in SPREAD):
                text += f"  p25-p75 {r['ratio_p25']:.3f}-{r['ratio_p75']:.3f}"
            ax.text(1.01, i, text, va="center", fontsize=8, transform=right)
        ax.axvline(1.0, color="grey", lw=1.0)
        ax.set_xlim(0, top)
        ax.set_title(f"ratio to {_ceiling_text(fam, ceilings)}", loc="left", fontsize=10)
        ax.set_ylabel("")
    axes[-1, 0].set_xlabel("ratio to the ceiling measured in the same run (1.0 = the ceiling)")
    handles = [Patch(color=green, label="meets its target"), Patch(color=red, label="misses its target"),
               Patch(color=blue, label="no target"),
               Line2D([], [], color="crimson", ls="--", lw=1.4, label="target (the goal set for it)"),
               Line2D([], [], color="grey", lw=1.0, label="the ceiling (1.0)")]
    if any_spread:
        handles.append(Line2D([], [], color="black", lw=1.1, marker="|", markersize=7,
                              label="p25-p75 of the per-round ratios"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(title or "bench: ratio to ceiling")
    return fig


# --- roofline --------------------------------------------------------------------------------------

def roofline_table(cases: pd.DataFrame) -> pd.DataFrame:
    """Cases with both bytes and FLOPs counted: intensity (FLOP/byte) and achieved GFLOP/s."""
    df = cases.copy()
    for c in ("bytes", "flops", "median_ms"):
        df[c] = pd.to_numeric(df.get(c), errors="coerce")
    ok = (df["bytes"] > 0) & (df["flops"] > 0) & (df["median_ms"] > 0)
    d = df[ok].copy()
    d["intensity"] = d["flops"] / d["bytes"]
    d["gflops"] = d["flops"] / (d["median_ms"] * 1e-3) / 1e9
    d["label"] = d["program"].astype(str) + " " + d["variant"].astype(str) + " " + d["size"].astype(str)
    return d[["program", "variant", "size", "label", "intensity", "gflops"]].reset_index(drop=True)


def roofs(ceilings: pd.DataFrame, programs=()) -> dict[str, list[tuple[str, float]]]:
    """{"memory": [(name, GB/s)], "compute": [(name, GFLOP/s)]} from the run's ceiling rows.
    A ceiling named after one of the run's own programs (matmul_01_naive, a baseline kernel) is a
    reference for ratios, not a roof, and is left out."""
    out: dict[str, list[tuple[str, float]]] = {"memory": [], "compute": []}
    for r in ceilings.itertuples():
        v = float(r.value)
        if not np.isfinite(v) or v <= 0 or any(str(r.variant).startswith(f"{p}_") for p in programs):
            continue
        if r.unit == "GB/s":
            out["memory"].append((str(r.variant), v))
        elif r.unit == "TFLOP/s":
            out["compute"].append((str(r.variant), v * 1e3))
    return out


def roofline_figure(cases: pd.DataFrame, ceilings: pd.DataFrame, title: str = "") -> plt.Figure:
    pts = roofline_table(cases)
    rf = roofs(ceilings, set(cases["program"]) if len(cases) else ())
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(9, 6))
    xs = pts["intensity"].tolist() + [0.05, 200.0]
    x = np.logspace(np.log10(max(min(xs) / 3, 1e-3)), np.log10(max(xs) * 3), 200)
    peak = max((v for _, v in rf["compute"]), default=None)
    for name, bw in rf["memory"]:
        # The memory roof ends where it meets the compute roof (the ridge point); past it the roof is flat.
        xm = x if peak is None else np.append(x[x < peak / bw], peak / bw)
        ax.plot(xm, bw * xm, color="black", lw=1.5, label=f"memory roof: {name} {bw:.0f} GB/s")
    for i, (name, gf) in enumerate(sorted(rf["compute"], key=lambda t: -t[1])):
        what = "compute roof" if i == 0 else "reached by"  # the highest is the roof; the others are libraries
        ax.plot(x, np.full_like(x, gf), color="black" if i == 0 else "grey", ls="-" if i == 0 else ":", lw=1.5,
                label=f"{what}: {name} {gf / 1e3:.1f} TFLOP/s")
    if len(pts):
        sns.scatterplot(data=pts, x="intensity", y="gflops", hue="program", style="program", s=70, ax=ax)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of DRAM traffic counted)")
    ax.set_ylabel("achieved GFLOP/s")
    missing = sorted(set(cases["program"]) - set(pts["program"])) if len(cases) else []
    notes = []
    if not rf["memory"]:
        notes.append("no memory ceiling in this run")
    if not rf["compute"]:
        notes.append("no FLOP ceiling in this run")
    if missing:
        notes.append("not on the roofline (no FLOPs or bytes counted): " + ", ".join(missing))
    if notes:
        ax.text(0.01, 0.01, "; ".join(notes), transform=ax.transAxes, fontsize=8, va="bottom")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the plot: no point hidden
    ax.set_title(title or "roofline (roofs measured in the same run)")
    fig.tight_layout()
    return fig


def plot(data, outdir: Path, prefix: str = "bench") -> list[Path]:
    """Write <prefix>_ratios.png and <prefix>_roofline.png into outdir; returns their paths."""
    cases, ceil = load(data)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    device = str(cases["device"].iloc[0]) if "device" in cases and len(cases) else ""
    paths = []
    for name, fig in ((f"{prefix}_ratios.png", ratio_figure(cases, f"bench: ratio to ceiling ({device})" if device else "",
                                                             ceil)),
                      (f"{prefix}_roofline.png", roofline_figure(cases, ceil, f"roofline ({device})" if device else ""))):
        p = outdir / name
        fig.savefig(p, dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(p)
    return paths
