"""The convolution picture: what a filter does to an impulse, and what a tiled kernel reads.

    plot(data, outdir) -> [convolution.png] (convolution_sim.png when drawn from the simulator)

`data` is harness.programs.convolution.viz_data's dict: the input `x` (three impulses and a bar), the
filter `f` of radius `r`, the output `out` of the tiled 2-D variant, `loads` (how many blocks read each
input pixel), the output `tile` (height, width), `variant`, `simulated`, `check`, `computed_on`.
Four panels: the input; the filter, with its centre; the output, where each impulse comes back as the
filter turned half a turn (the sum is a cross-correlation, as PMPP's: a true convolution would give the
filter itself); the reads per pixel, with the
output tiles outlined: 1 inside a tile, 2 in a halo two tiles share, 4 at the corners. Nothing here
launches anything.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402


def plot(data: dict, outdir: Path) -> list[Path]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    x, f, out, loads = data["x"], data["f"], data["out"], data["loads"]
    r, (th, tw) = int(data["r"]), data["tile"]
    h, w = x.shape
    fig, axes = plt.subplots(1, 4, figsize=(16, 5.2), gridspec_kw={"width_ratios": [0.8, 1, 1, 0.9]})

    ax = axes[0]
    ax.imshow(out, cmap="gray_r", interpolation="nearest")
    ax.set_title(f"output {h}x{w} ({data['variant']}, check={data['check']}):\nthree impulses and a bar, filtered",
                 fontsize=9)

    def numbers(ax, m, title, box):
        ax.imshow(m, cmap="viridis", interpolation="nearest")
        for (i, j), v in np.ndenumerate(m):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="w" if v < m.max() * 0.6 else "k")
        ax.add_patch(Rectangle((box - 0.5, box - 0.5), 1, 1, fill=False, ec="red", lw=2))
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])

    numbers(axes[1], f, f"the filter {2 * r + 1}x{2 * r + 1}, heavier to the lower right\n(its centre in red)", r)
    y, c = np.argwhere(x == 1.0)[0]
    zoom = out[y - 2 * r:y + 2 * r + 1, c - 2 * r:c + 2 * r + 1]
    turned = np.allclose(zoom[r:3 * r + 1, r:3 * r + 1], f[::-1, ::-1], rtol=1e-5, atol=1e-6)
    numbers(axes[2], zoom, f"the output around the impulse at (y={y}, x={c}) (red):\n"
            + ("the filter turned half a turn, heavier to the upper left:\nout is a correlation, "
               "not a convolution" if turned else "NOT the turned filter"), 2 * r)

    ax = axes[3]
    top = max(int(loads.max()), 1)
    cmap = ListedColormap(["#f7f7f7", "#9ecae1", "#3182bd", "#de2d26", "#67000d"][:top + 1])
    im = ax.imshow(loads, cmap=cmap, vmin=-0.5, vmax=top + 0.5, interpolation="nearest")
    for row0 in range(0, h, th):
        for col0 in range(0, w, tw):
            ax.add_patch(Rectangle((col0 - 0.5, row0 - 0.5), min(tw, w - col0), min(th, h - row0), fill=False,
                                   ec="k", lw=1))
    cb = fig.colorbar(im, ax=ax, ticks=range(top + 1), fraction=0.05)
    cb.set_label("blocks that read the pixel")
    ax.set_title(f"reads per input pixel: {th}x{tw} output tiles\n(outlined) each read with a halo of {r}",
                 fontsize=9)

    for ax in axes[[0, 3]]:
        ax.set_xlabel("x")
        ax.set_ylabel("y")
    where = "simulated" if data.get("simulated") else "on the GPU"
    fig.suptitle(f"2-D convolution with zero padding, {data['variant']} ({where}): "
                 "out[y, x] = sum f[fy, fx] in[y - r + fy, x - r + fx]")
    fig.tight_layout()
    path = outdir / ("convolution_sim.png" if data.get("simulated") else "convolution.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
