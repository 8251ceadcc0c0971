"""The scan picture: which element adds into which, step by step, in one tile.

    plot(data, outdir) -> [scan_steps.png]

`data` is harness.programs.scan.viz_data's dict: n, the input x, the scanned out, and per kernel
("kogge_stone", "brent_kung") a DataFrame of its additions (step, src, dst) traced from its Python twin.
Two panels, time running down: each column is one element of the tile, each arrow one addition
out[dst] += out[src] in that step. Kogge-Stone: every element busy at every step, n log n additions.
Brent-Kung: a tree up (the up-sweep) and back down (the down-sweep): about 2n additions, twice the steps.
Nothing here launches anything.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

PANELS = (("kogge_stone", "01 Kogge-Stone"), ("brent_kung", "02 Brent-Kung"))


def _panel(ax, trace, n: int, x, out, title: str, sweep_split: int | None) -> None:
    trace = trace[(trace["dst"] < n) & (trace["src"] < n)]
    steps = int(trace["step"].max()) + 1 if len(trace) else 0
    for i in range(n):  # each element's "wire" down through the steps
        ax.plot([i, i], [0, steps], color="0.85", lw=1, zorder=1)
    if sweep_split is not None and 0 < sweep_split < steps:
        ax.axhspan(sweep_split, steps, color="tab:orange", alpha=0.08, zorder=0)
        ax.text(-0.5, sweep_split - 0.1, "up-sweep", ha="left", va="bottom", fontsize=8, color="tab:blue")
        ax.text(-0.5, sweep_split + 0.1, "down-sweep", ha="left", va="top", fontsize=8, color="tab:orange")
    for s, src, dst in trace[["step", "src", "dst"]].itertuples(index=False):
        ax.annotate("", xy=(dst, s + 1), xytext=(src, s),
                    arrowprops=dict(arrowstyle="-|>", color="tab:blue", lw=0.9, shrinkA=2, shrinkB=2), zorder=2)
        ax.plot(dst, s + 1, "o", color="tab:blue", ms=3, zorder=3)
    for i in range(n):
        ax.text(i, -0.35, str(int(x[i])), ha="center", va="bottom", fontsize=7)
        ax.text(i, steps + 0.35, str(int(out[i])), ha="center", va="top", fontsize=7, color="tab:green")
    ax.set_xlim(-0.7, n - 0.3)
    ax.set_ylim(steps + 0.8, -0.8)
    ax.set_yticks(range(steps + 1))
    ax.set_ylabel("step (barrier) ->")
    ax.set_xlabel("element of the tile")
    ax.set_title(f"{title}: {len(trace)} additions in {steps} steps", fontsize=10)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def plot(data: dict, outdir: Path) -> list[Path]:
    """Draw both kernels' additions for one tile; returns [outdir/scan_steps.png]."""
    n, x, out = int(data["n"]), np.asarray(data["x"]), np.asarray(data["out"])
    width = max(8.0, 0.45 * n)
    fig, axes = plt.subplots(1, 2, figsize=(2 * width * 0.6, 5.2), constrained_layout=True)
    for ax, (key, title) in zip(axes, PANELS):
        trace = data["traces"][key]
        # Brent-Kung's up-sweep has log2(tile) steps; the down-sweep follows.
        split = (int(max(n - 1, 1)).bit_length()) if key == "brent_kung" else None
        _panel(ax, trace, n, x, out, title, split)
    fig.suptitle(f"inclusive scan of one tile of {n} elements (inputs on top, sums at the bottom; "
                 "each arrow adds one element into another)", fontsize=10)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / "scan_steps.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
