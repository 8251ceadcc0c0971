"""The tensor-parallel block's scaling: how much faster several GPUs run it than one, by form.

    read(path) -> DataFrame        one CSV of collectives.tp_scaling, checked
    summary(df) -> DataFrame       per world size and form: the median time, its spread, the speedup
    page_table(df) -> str          the collectives page's table (a test holds the page to it)
    plot(df, out) -> Path          speedup bars, each run a dot, the ideal (one per GPU) dashed

Every speedup is the median one-GPU time of the same CSV over the form's median time: both sides timed
in one sequence on one machine, alternating, so that a drift of the clocks moves both. Nothing here
launches anything.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from harness.base import files  # noqa: E402

NEEDED = ("repeat", "world", "variant", "allreduce", "ms")
FORM_NAMES = {("tp_mlp", "02_ring_allreduce"): "plain, ring", ("tp_mlp", "copy_engine"): "plain, copy_engine",
              ("tp_mlp_overlap", "02_ring_allreduce"): "overlapped, ring",
              ("tp_mlp_overlap", "03_oneshot_allreduce"): "overlapped, one-shot",
              ("tp_mlp_overlap", "copy_engine"): "overlapped, copy_engine"}


def read(path) -> pd.DataFrame:
    """A scaling CSV (collectives.tp_scaling's columns); ValueError in one line if it is not one."""
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a scaling CSV ({e})") from None
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: not a scaling CSV (no column {', '.join(missing)})")
    if not (df["world"] == 1).any():
        raise ValueError(f"{path}: no one-GPU runs, so no speedup can be taken")
    if not (df["world"] > 1).any():
        raise ValueError(f"{path}: no runs on several GPUs")
    if (df["ms"] <= 0).any() or df["ms"].isna().any():
        raise ValueError(f"{path}: a time that is not positive")
    return df


def _form(variant: str, allreduce: str) -> str:
    return FORM_NAMES.get((variant, allreduce), f"{variant}, {allreduce}")


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per world size and form, in the CSV's order: runs, median / fastest / slowest ms, and the
    speedups over the one-GPU median (median, and the range each run gives)."""
    base = float(df.loc[df["world"] == 1, "ms"].median())
    rows = []
    for (world, variant, ar), g in df.groupby(["world", "variant", "allreduce"], sort=False):
        med = float(g["ms"].median())
        rows.append({"world": int(world), "form": _form(variant, ar), "runs": len(g), "ms": med,
                     "ms_min": float(g["ms"].min()), "ms_max": float(g["ms"].max()), "speedup": base / med,
                     "speedup_min": base / float(g["ms"].max()), "speedup_max": base / float(g["ms"].min())})
    return pd.DataFrame(rows)


def page_table(df: pd.DataFrame) -> str:
    """The page's table: per world size and form, the median time, its range and the speedup."""
    lines = ["| GPUs | form | ms (median, range) | speedup vs one GPU |", "|---|---|---|---|"]
    for r in summary(df).itertuples():
        speed = "1" if r.world == 1 else f"{r.speedup:.2f}× ({r.speedup_min:.2f}-{r.speedup_max:.2f})"
        lines.append(f"| {r.world} | {r.form} | {r.ms:.2f} ({r.ms_min:.2f}-{r.ms_max:.2f}), {r.runs} runs | {speed} |")
    return "\n".join(lines)


def figure(df: pd.DataFrame) -> plt.Figure:
    """Speedup over one GPU against GPUs, a bar per form (its median), a dot per run, the ideal dashed."""
    s = summary(df)
    s = s[s["world"] > 1]
    base = float(df.loc[df["world"] == 1, "ms"].median())
    runs = df[df["world"] > 1]
    runs = runs.assign(form=[_form(v, a) for v, a in zip(runs["variant"], runs["allreduce"])], speedup=base / runs["ms"])
    fig, ax = plt.subplots(figsize=(7, 4))
    order = list(dict.fromkeys(s["form"]))
    sns.barplot(data=s, x="world", y="speedup", hue="form", hue_order=order, ax=ax, alpha=0.8)
    sns.stripplot(data=runs, x="world", y="speedup", hue="form", hue_order=order, dodge=True, ax=ax,
                  palette={f: "black" for f in order}, size=3, legend=False)
    for i, w in enumerate(sorted(s["world"].unique())):
        ax.hlines(w, i - 0.45, i + 0.45, colors="grey", linestyles="dashed", linewidth=1)
    ax.set_xlabel("GPUs (one rank each)")
    ax.set_ylabel("speedup over one GPU")
    shape = df.iloc[0]
    extra = f", T={shape['tokens']} H={shape['hidden']} F={shape['ffn']}" if "tokens" in df.columns else ""
    ax.set_title(f"Tensor-parallel MLP block: one GPU {base:.2f} ms{extra}; dashed: one per GPU", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def plot(df: pd.DataFrame, out) -> Path:
    """Draw `figure(df)` to the PNG `out`, whole or not at all."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig = figure(df)
    try:
        return files.replace(out, lambda tmp: fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight"))
    finally:
        plt.close(fig)
