"""The grid-stride pictures (the Stringer course's two figures, corrected, plus a third).

    plot(data, outdir) -> [scatter.png, heatmap.png, strip.png]

`data` is harness.programs.grid_stride.GridStrideData (frame, n, blocks, threads, simulated,
device), or a DataFrame with those keys in its attrs. Nothing here launches anything.

1. scatter: Element Index against Thread ID, coloured by Block ID.
2. heatmap: how many elements each (Block ID, Thread in Block) processed. The course pivoted with
   the default aggregation (the mean of the element indexes) while labelling the colour bar a
   count; this one counts.
3. strip: the array as cells coloured by the thread that handled each one, one row per
   grid-stride round (round r holds elements r*S .. r*S+S-1, S = blocks*threads): every column
   is one thread, so the stride is visible at a glance.
The stride -- the most common difference between a thread's consecutive elements -- is written in
the strip figure's title and must equal blocks * threads.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def _unpack(data):
    """(frame, n, blocks, threads, label) from GridStrideData or an attrs-carrying DataFrame."""
    if isinstance(data, pd.DataFrame):
        a = data.attrs
        df, n, blocks, threads = data, a["n"], a["blocks"], a["threads"]
        simulated, device = bool(a.get("simulated", False)), a.get("device")
    else:
        df, n, blocks, threads = data.frame, data.n, data.blocks, data.threads
        simulated, device = data.simulated, data.device
    label = "(simulated)" if simulated else (f"on {device}" if device else "on the GPU")
    return df, int(n), int(blocks), int(threads), label


def counts(df: pd.DataFrame, blocks: int, threads: int) -> pd.DataFrame:
    """Elements processed per (Block ID, Thread in Block): rows blocks, columns threads, with
    zeros for threads that got no element (n < blocks*threads)."""
    c = df.groupby(["Block ID", "Thread in Block"]).size().unstack(fill_value=0)
    c = c.reindex(index=range(blocks), columns=range(threads), fill_value=0).astype(np.int64)
    c.index.name, c.columns.name = "Block ID", "Thread in Block"
    return c


def stride(df: pd.DataFrame) -> int | None:
    """The most common gap between consecutive elements of the same thread; None when no thread
    handled two elements (n <= blocks*threads: there is no second round to measure)."""
    d = df.sort_values(["Thread ID", "Element Index"]).groupby("Thread ID")["Element Index"].diff().dropna()
    if d.empty:
        return None
    return int(d.astype(np.int64).mode().min())


def strip(df: pd.DataFrame, n: int, blocks: int, threads: int) -> pd.DataFrame:
    """rounds x (blocks*threads): the Thread ID that handled element r*S + c, -1 past the end."""
    s = blocks * threads
    rounds = -(-n // s)
    m = np.full(rounds * s, -1, dtype=np.int64)
    m[df["Element Index"].to_numpy()] = df["Thread ID"].to_numpy()
    out = pd.DataFrame(m.reshape(rounds, s))
    out.index.name, out.columns.name = "round", "position in round"
    return out


def _label_step(count: int) -> int:
    """Label every k-th row or column so that at most ~32 labels show (k a power of two)."""
    k = 1
    while count / k > 32:
        k *= 2
    return k


def _title(what: str, n: int, blocks: int, threads: int, label: str) -> str:
    return f"{what}\nN={n}, {blocks} blocks x {threads} threads {label}"


def plot(data, outdir) -> list[Path]:
    """Write the three PNGs to outdir and return their paths."""
    df, n, blocks, threads, label = _unpack(data)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    tag = f"gridstride_n{n}_b{blocks}_t{threads}" + ("_sim" if "simulated" in label else "")
    paths = []
    sns.set_theme(style="whitegrid")

    # 1. scatter
    s = blocks * threads
    fig, ax = plt.subplots(figsize=(10, 6))
    palette = sns.color_palette("tab10" if blocks <= 10 else "husl", blocks)
    size = 60 if n <= 64 else (14 if n <= 2000 else 4)
    sns.scatterplot(data=df, x="Thread ID", y="Element Index", hue="Block ID", palette=palette,
                    hue_order=list(range(blocks)), s=size, linewidth=0, ax=ax, legend=blocks <= 20)
    ax.set_title(_title("Which thread processed which element", n, blocks, threads, label))
    # Whole numbers on both axes, and room around a lone point (N=1 or one thread).
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_xlim(-0.5 - 0.02 * s, s - 0.5 + 0.02 * s)
    ax.set_ylim(-0.5 - 0.02 * n, n - 0.5 + 0.02 * n)
    if blocks <= 20:
        ax.legend(title="Block ID", bbox_to_anchor=(1.01, 1), loc="upper left", fontsize=8,
                  markerscale=max(1.0, 30 / size) ** 0.5)
    else:  # too many blocks for a legend: a colour bar of Block ID
        cmap = matplotlib.colors.ListedColormap(palette)
        sm = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(-0.5, blocks - 0.5), cmap=cmap)
        cb = fig.colorbar(sm, ax=ax, pad=0.01, label="Block ID")
        cb.locator = MaxNLocator(integer=True, min_n_ticks=1)
        cb.update_ticks()
    fig.tight_layout()
    paths.append(_save(fig, outdir / f"{tag}_scatter.png"))

    # 2. heatmap of counts
    c = counts(df, blocks, threads)
    fig, ax = plt.subplots(figsize=(max(6, min(16, 0.35 * threads + 2)), max(3.5, min(10, 0.3 * blocks + 2))))
    annot = threads <= 64 and blocks <= 32
    lo, hi = int(c.to_numpy().min()), int(c.to_numpy().max())
    if hi - lo <= 12:
        # One colour per count over the range present: the values are a few integers, and a
        # continuous bar from 0 would suggest fractions and hide a difference of one (26 vs 27).
        cmap = matplotlib.colors.ListedColormap(sns.color_palette("viridis", hi - lo + 1))
        scale = dict(vmin=lo - 0.5, vmax=hi + 0.5, cbar_kws={"label": "elements processed (count)",
                                                              "ticks": range(lo, hi + 1)})
    else:
        cmap = "viridis"
        scale = dict(vmin=lo, vmax=hi, cbar_kws={"label": "elements processed (count)"})
    # At most ~32 labels an axis (every 2nd, 4th, ... thread or block beyond that), never rotated.
    sns.heatmap(c, annot=annot, fmt="d", cmap=cmap, ax=ax, annot_kws={"fontsize": 7},
                xticklabels=_label_step(threads), yticklabels=_label_step(blocks), **scale)
    ax.tick_params(axis="x", labelrotation=0)
    ax.tick_params(axis="y", labelrotation=0)
    ax.set_title(_title("Elements processed per thread (count)", n, blocks, threads, label))
    fig.tight_layout()
    paths.append(_save(fig, outdir / f"{tag}_heatmap.png"))

    # 3. strip: one row per grid-stride round
    st = strip(df, n, blocks, threads)
    m = np.ma.masked_less(st.to_numpy(), 0)
    rounds = m.shape[0]
    fig, ax = plt.subplots(figsize=(min(16, max(9, s / 16)), min(12, max(4.5, 0.4 * rounds + 3))))
    ax.grid(False)
    cmap = matplotlib.colormaps["turbo"].with_extremes(bad="white")  # white: past the end of the array
    im = ax.imshow(m, aspect="auto", cmap=cmap, vmin=0, vmax=max(s - 1, 1), interpolation="nearest",
                   extent=(-0.5, s - 0.5, rounds - 0.5, -0.5))
    for b in range(1, blocks):
        ax.axvline(b * threads - 0.5, color="black", lw=0.6)
    ax.set_xlabel(f"position within the round (element index mod {s}); black lines separate blocks")
    ax.set_ylabel("round (element index // stride)")
    ax.set_yticks(range(rounds) if rounds <= 30 else np.linspace(0, rounds - 1, 10).astype(int))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    if blocks > 32:  # block lines closer than a few pixels would grey the whole strip
        for line in ax.get_lines():
            line.set_linewidth(0.3)
    cb = fig.colorbar(im, ax=ax, label="Thread ID", pad=0.01)
    cb.locator = MaxNLocator(integer=True, min_n_ticks=1)
    cb.update_ticks()
    ax.set_title(_title(f"The array, {s} cells per grid-stride round, coloured by the thread that handled each "
                        f"cell: every column is one thread\n{stride_note(df, n, blocks, threads)}", n, blocks, threads,
                        label), fontsize=10)
    fig.tight_layout()
    paths.append(_save(fig, outdir / f"{tag}_strip.png"))

    return paths


def stride_note(df: pd.DataFrame, n: int, blocks: int, threads: int) -> str:
    """What the trace says about the stride, for the strip figure's title."""
    s, st_val = blocks * threads, stride(df)
    if st_val is None:
        return f"no thread took a second element (N={n} <= blocks x threads = {s})"
    return f"measured stride {st_val} " + ("= blocks x threads" if st_val == s else f"!= blocks x threads = {s}")


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
