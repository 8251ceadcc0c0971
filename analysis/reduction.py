"""The reduction picture: `invoke viz reduction` (`--simulate` without a GPU).

    plot(data, outdir) -> [reduction_tree.png] (reduction_tree_sim.png when simulated)

`data` is harness.programs.reduction.viz_data's dict: `inputs` (16 floats), `levels` (02_shared_tree's
shared array at each barrier of one block of 8 threads, from the Python twin), `errors` (a DataFrame of
n, what, rel_error), `simulated`, `device`. Nothing here launches anything.

Left: the tree. The top row is the input; each row below is the shared array after one level, the
threads that added drawn in colour and the lines showing which two cells each added (t and t + stride).
Right: |float32 sum - exact| / exact for n uniform [0, 1) values on log axes: one long chain of
float32 additions drifts away roughly in proportion to n, a tree roughly with log n.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _tree(ax, inputs, levels) -> None:
    rows = [np.asarray(inputs, dtype=np.float64)] + [np.asarray(lv, dtype=np.float64) for lv in levels]
    width = len(rows[0])
    ax.set_xlim(-0.6, width - 0.4)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.axis("off")
    for r, row in enumerate(rows):
        # Row 0 is the input (16 cells); row 1 the 8 pair sums made on load; then each level halves
        # the cells still in play (the others keep stale values nobody reads again: drawn grey).
        live = width if r == 0 else len(row) >> (r - 1)
        for c, val in enumerate(row):
            active = c < live
            ax.add_patch(plt.Rectangle((c - 0.45, r - 0.35), 0.9, 0.7, facecolor="#4c72b0" if active else "#eeeeee",
                                       edgecolor="white"))
            ax.text(c, r, f"{val:g}", ha="center", va="center", fontsize=8, color="white" if active else "#999999")
        if r == 0:
            continue
        stride = width // 2 if r == 1 else live  # the level's stride is the count of threads adding
        for t in range(live):
            for src in (t, t + stride):
                ax.plot([src, t], [r - 1 + 0.35, r - 0.35], color="#888888", lw=0.7)
    labels = ["x (16 inputs)", "load: x[t] + x[t+8]"] + [f"stride {len(rows[1]) >> r}" for r in range(1, len(rows) - 1)]
    for r, lab in enumerate(labels):
        ax.text(-0.8, r, lab, ha="right", va="center", fontsize=8)
    ax.set_title("02_shared_tree in one block of 8 threads:\npartial[t] += partial[t + stride], "
                 "__syncthreads() between levels", fontsize=10)


def _errors(ax, df) -> None:
    for what, g in df.groupby("what", sort=False):
        g = g.sort_values("n")
        y = np.maximum(g["rel_error"].to_numpy(dtype=np.float64), 1e-12)  # exact sums sit on the floor
        model = "model" in what
        ax.plot(g["n"], y, marker="o" if model else ".", lw=2 if model else 1, ls="-" if model else "--", label=what)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.axhline(2.0**-24, color="#999999", lw=0.8, ls=":")
    ax.text(ax.get_xlim()[0], 2.0**-24, " u = 2^-24", va="bottom", fontsize=8, color="#666666")
    ax.set_xlabel("n (uniform [0, 1) float32)")
    ax.set_ylabel("|sum - exact| / exact  (1e-12: exact)")
    ax.set_title("float32 sums drift: one chain vs a tree", fontsize=10)
    ax.legend(fontsize=7)


def plot(data: dict, outdir) -> list[Path]:
    """Write the picture to outdir and return its path."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.25, 1]})
    _tree(left, data["inputs"], data["levels"])
    _errors(right, data["errors"])
    src = "(simulated)" if data.get("simulated") else f"on {data.get('device') or 'the GPU'}"
    fig.suptitle(f"reduction {src}", fontsize=11)
    fig.tight_layout()
    path = outdir / ("reduction_tree_sim.png" if data.get("simulated") else "reduction_tree.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
