"""The histogram picture: why the three kernels differ, from counts made on the CPU.

    plot(data, outdir) -> [histogram_contention.png]

`data` is what harness.programs.histogram.viz_data returns: {"n", "counts": {input: 256 counts},
"contention": DataFrame (variant, input, per_byte, lanes_serialised, ...)}. Three panels:
1. the 256 counts of the uniform and the skewed input (log scale: the hot bin towers);
2. lanes of one warp instruction that wait on each other in the busiest place (counter or bank);
3. atomics that reach global memory, per byte (log scale).
Nothing here launches anything.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

COLORS = {"uniform": "#4c72b0", "skewed": "#dd8452"}


def plot(data, outdir) -> list[Path]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    n, counts, table = int(data["n"]), data["counts"], data["contention"]
    inputs = list(counts)
    variants = list(dict.fromkeys(table["variant"]))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1.5, 1, 1]})

    ax = axes[0]
    for kind in inputs:
        c = np.asarray(counts[kind], dtype=np.float64)
        ax.step(np.arange(c.size), np.maximum(c, 0.5), where="mid", color=COLORS.get(kind), label=kind, lw=1)
    ax.set_yscale("log")
    ax.set_xlim(-1, 256)
    ax.set_xlabel("byte value (bin)")
    ax.set_ylabel("count (log)")
    ax.set_title(f"The counts of {n:,} bytes")
    ax.legend()

    width = 0.8 / max(len(inputs), 1)
    x = np.arange(len(variants))
    for panel, col, title, log in ((axes[1], "lanes_serialised", "Lanes serialised per warp instruction\n"
                                    "(01: on one global counter; 02, 03: on one shared bank)", False),
                                   (axes[2], "per_byte", "Atomics reaching global memory, per byte\n"
                                    "(03 on a grid of 132 x 4 blocks)", True)):
        for j, kind in enumerate(inputs):
            sub = table[table["input"] == kind].set_index("variant").reindex(variants)
            vals = sub[col].to_numpy(dtype=np.float64)
            bars = panel.bar(x + (j - (len(inputs) - 1) / 2) * width, vals, width, color=COLORS.get(kind), label=kind)
            panel.bar_label(bars, labels=[f"{v:.3g}" for v in vals], fontsize=8, padding=1)
        panel.set_xticks(x, variants, fontsize=8)
        panel.set_title(title, fontsize=10)
        if log:
            panel.set_yscale("log")
        panel.margins(y=0.15)
        panel.legend(fontsize=8)
    fig.suptitle(f"histogram: contention and global atomics, {data.get('computed_on', '')}", fontsize=10)
    fig.tight_layout()
    path = outdir / "histogram_contention.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]
