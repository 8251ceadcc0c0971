"""The transpose's access pattern: which thread reads and writes which element, naive against tiled,
and which shared-memory bank each lane of a warp hits when it reads a column of the tile.

    plot(data, outdir) -> [transpose_access.png]

`data` is what harness.programs.transpose.viz_data returns: "rows", "cols", "tile", "block", "naive" and
"tiled" (each a dict of in_ty, in_tx (rows x cols) and out_ty, out_tx (cols x rows): the threadIdx.y and
.x of the thread of `block` that read / wrote the element, -1 for another block's), "banks_02" and
"banks_03" (the bank of each lane's read), "names" (the three variants drawn) and "computed_on".
Colour is threadIdx.y (one row of threads, a warp when the tile is 32 wide), the number threadIdx.x (the
lane): a run of one colour along a row is one coalesced access, down a column one access per lane.
Nothing here launches anything.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

OTHER = (0.92, 0.92, 0.92)  # cells another block moves


def _map_axes(ax, ty: np.ndarray, tx: np.ndarray, tile: int, title: str) -> None:
    h, w = ty.shape
    colours = plt.get_cmap("tab10").colors
    cmap = ListedColormap([OTHER] + [colours[i % len(colours)] for i in range(tile)])
    ax.imshow(ty + 1, cmap=cmap, vmin=0, vmax=tile, interpolation="nearest")
    for r in range(h):
        for c in range(w):
            if ty[r, c] >= 0:
                ax.text(c, r, str(tx[r, c]), ha="center", va="center", fontsize=6, color="white")
    # The tile grid: each square is one block's tile.
    for k in range(0, w + 1, tile):
        ax.axvline(k - 0.5, color="black", lw=0.8)
    for k in range(0, h + 1, tile):
        ax.axhline(k - 0.5, color="black", lw=0.8)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlim(-0.5, w - 0.5)
    ax.set_ylim(h - 0.5, -0.5)
    ax.set_title(title, fontsize=9)


def _bank_axes(ax, banks: np.ndarray, label: str) -> None:
    n = len(banks)
    ax.imshow(banks[None, :], cmap="hsv", vmin=0, vmax=32, aspect="auto", interpolation="nearest")
    for lane, b in enumerate(banks):
        ax.text(lane, 0, str(b), ha="center", va="center", fontsize=7)
    distinct = len(set(int(b) for b in banks))
    ways = n // distinct if distinct else 0
    ax.set_yticks([])
    ax.set_xticks(range(0, n, 4))
    ax.set_xlabel("lane (threadIdx.x) of warp 0", fontsize=8)
    banks_said = "1 bank" if distinct == 1 else f"{distinct} banks"
    ax.set_title(f"{label}: {banks_said} for {n} lanes" + (f", a {ways}-way conflict" if ways > 1 else
                                                            ", no conflict"), fontsize=9)


def figure(data):
    rows, cols, tile = int(data["rows"]), int(data["cols"]), int(data["tile"])
    bx, by = data.get("block", (0, 0))
    naive_name, tiled_name, padded_name = data.get("names", ("01_naive", "02_shared_tile", "03_padded"))
    fig = plt.figure(figsize=(11, 11.5))
    grid = fig.add_gridspec(4, 2, height_ratios=[max(rows, cols), max(rows, cols), 1.4, 1.4], hspace=0.45)
    blk = f"block ({bx}, {by})"
    for r, (key, name) in enumerate((("naive", naive_name), ("tiled", tiled_name))):
        m = data[key]
        how_in = "a row of threads reads a row: coalesced"
        how_out = ("a row of threads writes down a COLUMN: strided" if key == "naive"
                   else "a row of threads writes a row: coalesced")
        _map_axes(fig.add_subplot(grid[r, 0]), np.asarray(m["in_ty"]), np.asarray(m["in_tx"]), tile,
                  f"{name}: reads of in ({rows}x{cols}) by {blk}\n{how_in}")
        _map_axes(fig.add_subplot(grid[r, 1]), np.asarray(m["out_ty"]), np.asarray(m["out_tx"]), tile,
                  f"{name}: writes of out ({cols}x{rows}) by {blk}\n{how_out}")
    _bank_axes(fig.add_subplot(grid[2, :]), np.asarray(data["banks_02"]),
               f"{tiled_name}, tile[32][32]: the banks of warp 0's read of a tile column")
    _bank_axes(fig.add_subplot(grid[3, :]), np.asarray(data["banks_03"]),
               f"{padded_name}, tile[32][33]: the same read, rows padded by one float")
    title = (f"transpose: who moves what ({tile}x{tile} tiles; colour = threadIdx.y, number = threadIdx.x; "
             f"grey = other blocks)")
    if data.get("computed_on"):
        title += "\n" + str(data["computed_on"])
    fig.suptitle(title, fontsize=10)
    return fig


def plot(data, outdir) -> list[Path]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    fig = figure(data)
    path = outdir / "transpose_access.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return [path]
