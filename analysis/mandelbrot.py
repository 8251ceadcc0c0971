"""The Mandelbrot picture of the Stringer course (section 3.1).

    plot(data, outdir) -> [mandelbrot.png]

`data` is what harness.programs.mandelbrot.viz_data returns: a dict with "counts" (H x W uint32
escape counts), "region" (x0, x1, y0, y1), "max_iters" and "variant". imshow with the 'hot' colour
map, the region as the extent and a colour bar, as in the course. Row 0 of the counts is y0, so
the image is drawn with origin="lower" (the course's default region is symmetric about the real
axis, which hides the difference; any other region does not). Nothing here launches anything.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def _unpack(data) -> tuple[np.ndarray, tuple, int, str]:
    counts = np.asarray(data["counts"])
    if counts.ndim != 2:
        raise ValueError(f"counts must be 2-D (height x width), got shape {counts.shape}")
    region = tuple(float(v) for v in data["region"])
    if len(region) != 4:
        raise ValueError(f"region must be (x0, x1, y0, y1), got {region}")
    max_iters = int(data.get("max_iters", counts.max() if counts.size else 0))
    return counts, region, max_iters, str(data.get("variant", ""))


def figure(data):
    """The matplotlib Figure (and its image artist), for callers that want to look inside."""
    counts, (x0, x1, y0, y1), max_iters, variant = _unpack(data)
    h, w = counts.shape
    fig, ax = plt.subplots(figsize=(7.5, 6.2 * max(0.35, min(2.5, (y1 - y0) / (x1 - x0)))))
    # The colour scale is the whole range of possible counts (1..max_iters), so that one image's colours
    # mean the same as another's and a flat image (1x1, or max_iters=1) still has a sensible bar.
    lo = min(1, int(counts.min())) if counts.size else 0
    hi = max(max_iters, int(counts.max()) if counts.size else 0, lo + 1)
    im = ax.imshow(counts, cmap="hot", extent=(x0, x1, y0, y1), origin="lower", interpolation="nearest",
                   vmin=lo, vmax=hi, aspect="auto" if abs((y1 - y0) / (x1 - x0) - h / w) > 0.05 else "equal")
    cb = fig.colorbar(im, ax=ax, label="iterations before |z| > 2")
    cb.locator = MaxNLocator(integer=True, min_n_ticks=1)
    cb.update_ticks()
    ax.set_xlabel("Re(c)")
    ax.set_ylabel("Im(c)")
    title = f"Mandelbrot set, {w}x{h}, max_iters={max_iters}" + (f" ({variant})" if variant else "")
    if isinstance(data, dict) and data.get("computed_on"):  # a CPU picture says so on its face
        title += "\n" + str(data["computed_on"])
    ax.set_title(title, fontsize=10 if "\n" in title else None)
    fig.tight_layout()
    return fig, im


def plot(data, outdir) -> list[Path]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    fig, _ = figure(data)
    path = outdir / "mandelbrot.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
