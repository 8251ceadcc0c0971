"""The all-reduce latency picture and the collectives page's table, from latency sweeps.

    read_sweep(path) -> DataFrame          one CSV of collectives.latency_sweep(_processes), checked
    plot(frames, out) -> out               one panel pair per world size
    page_table(frames, sizes) -> str       the markdown table on cuda/collectives/README.md

A sweep times every variant at every size on every rank; the picture and the table use rank 0 (the
other ranks are within a few tenths of a microsecond below 1 MiB, NOTES-collectives.md). Each variant
is drawn by its graph-replayed time where it has one (how training replays its all-reduce) and by its
eager time where it does not (the ring). `auto_allreduce` is drawn as bands of the variant it picked,
with a line at each size where the pick changes: the crossovers. Nothing here launches anything.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.base import files  # noqa: E402

COLUMNS = ("variant", "chosen", "bytes", "world", "rank", "eager_us", "graph_us")
NCCL = "nccl_allreduce"
AUTO = "auto_allreduce"
TARGET_US = 6.0  # the small-message goal: at most this at 32 KiB and below
COLORS = {"06_oneshot_ll": "tab:green", "04_oneshot_signal": "tab:olive", "05_twoshot_allreduce": "tab:purple",
          "02_ring_allreduce": "tab:blue", NCCL: "black", "03_oneshot_allreduce": "tab:gray"}


def read_sweep(path) -> pd.DataFrame:
    """One sweep CSV, refused in one line when it is not one (missing columns, no rank 0, no NCCL rows)."""
    path = Path(path)
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a latency sweep CSV ({e})") from None
    missing = [c for c in COLUMNS if c not in df]
    if missing:
        raise ValueError(f"{path}: not a latency sweep CSV (no column {', '.join(missing)})")
    if not (df["rank"] == 0).any():
        raise ValueError(f"{path}: no rows of rank 0")
    if not (df["variant"] == NCCL).any():
        raise ValueError(f"{path}: no {NCCL} rows to compare against")
    if df["world"].nunique() != 1:
        raise ValueError(f"{path}: one world size a sweep, found {sorted(df['world'].unique())}")
    return df


def figure_name(first_csv) -> str:
    """collectives_latency_w2-DATE.csv -> collectives_latency-DATE.png: one figure for the world sizes."""
    return re.sub(r"_w\d+(?=-|$)", "", Path(first_csv).stem) + ".png"


def _rank0(df: pd.DataFrame) -> pd.DataFrame:
    r = df[df["rank"] == 0].copy()
    # The time a variant is drawn and compared by: graph-replayed where it has that path, else eager.
    r["us"] = r["graph_us"].where(r["graph_us"].notna(), r["eager_us"])
    return r


def _label(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def crossovers(df: pd.DataFrame) -> list[tuple[int, str, str]]:
    """(size, before, after) at each size where auto_allreduce's pick changes, in size order."""
    a = _rank0(df)
    a = a[a["variant"] == AUTO].sort_values("bytes")
    out, prev = [], None
    for nbytes, chosen in zip(a["bytes"], a["chosen"]):
        if prev is not None and chosen != prev:
            out.append((int(nbytes), prev, chosen))
        prev = chosen
    return out


def bands(df: pd.DataFrame) -> list[tuple[float, float, str]]:
    """(from, to, pick) spans of auto_allreduce's picks along the size axis: each boundary halfway (on the
    log axis) between the last size of one pick and the first of the next."""
    a = _rank0(df)
    a = a[a["variant"] == AUTO].sort_values("bytes")
    sizes, picks = list(a["bytes"]), list(a["chosen"])
    if not sizes:
        return []
    out, start = [], sizes[0] / 1.3
    for i in range(1, len(sizes)):
        if picks[i] != picks[i - 1]:
            edge = float(np.sqrt(sizes[i - 1] * sizes[i]))
            out.append((start, edge, picks[i - 1]))
            start = edge
    out.append((start, sizes[-1] * 1.3, picks[-1]))
    return out


def auto_ratio(df: pd.DataFrame) -> pd.Series:
    """NCCL's time over auto_allreduce's at each size (graph-replayed where each has it): above 1, faster."""
    r = _rank0(df)
    nccl = r[r["variant"] == NCCL].set_index("bytes")["us"]
    auto = r[r["variant"] == AUTO].set_index("bytes")["us"]
    return (nccl / auto).dropna()


def plot(frames: list[pd.DataFrame], out) -> Path:
    """Latency (top) and NCCL / auto (bottom) against size, one column per world size."""
    frames = sorted(frames, key=lambda d: int(d["world"].iloc[0]))
    fig, axes = plt.subplots(2, len(frames), figsize=(6.5 * len(frames), 7.5), squeeze=False,
                             gridspec_kw={"height_ratios": [2.2, 1]}, sharex="col")
    for col, df in enumerate(frames):
        r = _rank0(df)
        world = int(df["world"].iloc[0])
        top, bot = axes[0][col], axes[1][col]
        for v, g in r[r["variant"] != AUTO].groupby("variant"):
            g = g.sort_values("bytes")
            how = "graph" if g["graph_us"].notna().all() else "eager"
            top.plot(g["bytes"], g["us"], "o-" if v != NCCL else "s--", ms=3.5, lw=1.4 if v != NCCL else 2,
                     color=COLORS.get(v, None), label=f"{v} ({how})")
        top.axhline(TARGET_US, color="tab:red", lw=0.8, ls=":")
        top.text(r["bytes"].min(), TARGET_US * 1.04, f"{TARGET_US:g} µs goal (≤ 32 KiB)", color="tab:red", fontsize=7)
        lo = r["bytes"].min()
        for x0, x1, name in bands(df):
            for ax in (top, bot):
                ax.axvspan(x0, x1, color=COLORS.get(name, "0.5"), alpha=0.07, lw=0)
            top.text(np.sqrt(x0 * x1), 0.97, f"auto: {name.split('_')[0]}", transform=top.get_xaxis_transform(),
                     ha="center", va="top", fontsize=7, color=COLORS.get(name, "0.3"))
        for x0, _, _ in bands(df)[1:]:
            for ax in (top, bot):
                ax.axvline(x0, color="0.4", lw=0.8, ls="--")
        ratio = auto_ratio(df)
        bot.plot(ratio.index, ratio.values, "o-", color="tab:red", ms=3.5, label="NCCL / auto_allreduce")
        bot.axhline(1.0, color="black", lw=0.8)
        bot.axhline(2.5, color="tab:red", lw=0.8, ls=":")
        bot.text(lo, 2.6, "2.5x goal (≤ 64 KiB)", color="tab:red", fontsize=7)
        for ax in (top, bot):
            ax.set_xscale("log", base=2)
            ticks = sorted(set(r["bytes"]))
            ax.set_xticks(ticks)
            ax.set_xticklabels([_label(t) for t in ticks], rotation=45, fontsize=7)
            ax.grid(alpha=0.3)
        top.set_yscale("log")
        top.set_ylabel("µs per all-reduce (rank 0)")
        top.set_title(f"{world} ranks, one process per GPU, float32")
        top.legend(fontsize=7, loc="lower right")
        bot.set_ylabel("NCCL time / auto's")
        bot.set_xlabel("message size")
    fig.suptitle("All-reduce latency: the lab's rungs beside NCCL, and what auto_allreduce picks")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:  # whole or not at all: a temporary name, then renamed
        return files.replace(out, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    finally:
        plt.close(fig)


PAGE_SIZES = (4 << 10, 32 << 10, 64 << 10, 1 << 20, 16 << 20, 1 << 30)


def page_table(frames: list[pd.DataFrame], sizes=PAGE_SIZES) -> str:
    """The page's table: per world and size, 06's, auto's pick and time, NCCL's, and NCCL / auto."""
    lines = ["| ranks | size | 06_oneshot_ll µs | auto picks | auto µs | NCCL µs | NCCL / auto |",
             "|---|---|---|---|---|---|---|"]
    for df in sorted(frames, key=lambda d: int(d["world"].iloc[0])):
        r = _rank0(df).set_index(["variant", "bytes"])
        world = int(df["world"].iloc[0])
        for nbytes in sizes:
            if (AUTO, nbytes) not in r.index or (NCCL, nbytes) not in r.index:
                continue
            ll = f"{r.loc[('06_oneshot_ll', nbytes), 'us']:.2f}" if ("06_oneshot_ll", nbytes) in r.index else ""
            auto, nccl = r.loc[(AUTO, nbytes)], r.loc[(NCCL, nbytes)]
            lines.append(f"| {world} | {_label(nbytes)} | {ll} | {auto['chosen']} | {auto['us']:.2f} | "
                         f"{nccl['us']:.2f} | {nccl['us'] / auto['us']:.2f}x |")
    return "\n".join(lines)
