"""Kernel time shares from a profile (harness.profiling.profile's kernel table) as a seaborn bar chart.

One run: one bar per kernel, its share of the run's GPU kernel time. Several variants (for
transformer_block, naive against flash): the shares side by side, one panel per variant, and a
panel of each variant's total GPU time stacked by kernel, so the faster variant is visibly shorter.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from harness.profiling.nsys import short_name  # noqa: E402  (the kernel-name shortener lives beside the nsys reader)

MAX_KERNELS = 12  # per panel; the rest are summed into "other kernels"


def shares(kernels: pd.DataFrame, top: int = MAX_KERNELS) -> pd.DataFrame:
    """variant, kernel (short name), share_pct, total_ms: the numbers behind the bars. Shares are
    recomputed from total_ns within each variant, so they add up to 100 per variant; kernels past
    the `top` largest are summed into "other kernels"."""
    df = kernels.copy()
    if "variant" not in df:
        df["variant"] = "default"
    df["variant"] = df["variant"].fillna("default").astype(str)
    rows = []
    for v, g in df.groupby("variant", sort=False):
        g = g.assign(kernel=g["kernel"].map(short_name)).groupby("kernel", sort=False)["total_ns"].sum()
        g = g.sort_values(ascending=False, kind="stable")
        total = float(g.sum())
        if len(g) > top:
            g = pd.concat([g.iloc[:top], pd.Series({"other kernels": g.iloc[top:].sum()})])
        for k, t in g.items():
            rows.append({"variant": v, "kernel": k, "share_pct": 100.0 * t / total if total else 0.0,
                         "total_ms": t / 1e6})
    return pd.DataFrame(rows, columns=["variant", "kernel", "share_pct", "total_ms"])


def figure(kernels: pd.DataFrame, title: str = "") -> plt.Figure:
    data = shares(kernels)
    variants = list(dict.fromkeys(data["variant"]))
    sns.set_theme(style="whitegrid")
    if len(variants) <= 1:
        n = max(len(data), 1)
        fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * n))
        sns.barplot(data=data, y="kernel", x="share_pct", ax=ax, color=sns.color_palette()[0], orient="h")
        for p, (_, r) in zip(ax.patches, data.iterrows()):
            ax.text(p.get_width() + 0.5, p.get_y() + p.get_height() / 2, f"{r.share_pct:.1f}%  ({r.total_ms:.3g} ms)",
                    va="center", fontsize=8)
        ax.set_xlim(0, 115)
        ax.set_xlabel("share of GPU kernel time (%)")
        ax.set_ylabel("")
        ax.set_title(title or "kernel time shares")
        fig.tight_layout()
        return fig
    n = max(data.groupby("variant").size().max(), 1)
    fig, axes = plt.subplots(1, len(variants) + 1, figsize=(5 * len(variants) + 4, 1.6 + 0.45 * n),
                             gridspec_kw={"width_ratios": [3] * len(variants) + [2]})
    palette = dict(zip(variants, sns.color_palette(n_colors=len(variants))))
    for ax, v in zip(axes, variants):
        d = data[data["variant"] == v]
        sns.barplot(data=d, y="kernel", x="share_pct", ax=ax, color=palette[v], orient="h")
        for p, (_, r) in zip(ax.patches, d.iterrows()):
            ax.text(p.get_width() + 0.5, p.get_y() + p.get_height() / 2, f"{r.share_pct:.1f}%", va="center",
                    fontsize=8)
        ax.set_xlim(0, 115)
        ax.set_title(f"{v}: {d['total_ms'].sum():.3g} ms of GPU time")
        ax.set_xlabel("share of GPU kernel time (%)")
        ax.set_ylabel("")
    ax = axes[-1]
    totals = data.pivot_table(index="variant", columns="kernel", values="total_ms", aggfunc="sum", sort=False)
    totals = totals.reindex(variants).fillna(0.0)
    left = pd.Series(0.0, index=totals.index)
    colors = sns.color_palette("tab20", n_colors=max(len(totals.columns), 1))
    for color, k in zip(colors, totals.columns):
        ax.barh(list(totals.index), totals[k], left=left, color=color, label=k)
        left += totals[k]
    for i, v in enumerate(totals.index):
        ax.text(left[v] + 0.02 * float(left.max()), i, f"{left[v]:.3g} ms", va="center", fontsize=9)
    ax.set_xlim(0, float(left.max()) * 1.3 if len(left) and left.max() > 0 else 1)
    ax.set_xlabel("GPU kernel time (ms)")
    ax.set_title("total, stacked by kernel")
    ax.invert_yaxis()
    if len(totals.columns) <= 14:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), title="kernel", title_fontsize=8)
    fig.suptitle(title or "kernel time shares, " + " vs ".join(variants))
    fig.tight_layout()
    return fig


def plot(kernels: pd.DataFrame, outdir: Path, name: str = "kernel_shares", title: str = "") -> list[Path]:
    """Draw the chart into outdir/<name>.png; returns the paths written."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    fig = figure(kernels, title)
    path = outdir / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return [path]
