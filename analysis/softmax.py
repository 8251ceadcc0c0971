"""The online softmax picture (`invoke viz softmax`): what 04_online's threads hold as they walk a row.

    plot(data, outdir) -> [softmax_online.png]

`data` is harness.programs.softmax.viz_data's dict: the row `x`, the twin's `trace` (a DataFrame with
thread, column, x, max, sum after each element of the first pass), the output `p`, the float64
reference `ref`, `threads` and `simulated`. Nothing here launches anything.

1. The scores, coloured by the thread that reads them (columns t, t + T, t + 2T, ...), and each thread's
   running max as a step line: it only ever rises.
2. Each thread's running sum d = sum of exp(x - max) on a log axis: it grows by one term per element and
   drops, marked with a cross, when a new max rescales it by exp(max_old - max_new).
3. The softmax the merge of those partial (max, sum) pairs gives, against the float64 reference.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot(data: dict, outdir: Path) -> list[Path]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    x, trace, p, ref = np.asarray(data["x"]), data["trace"], np.asarray(data["p"]), np.asarray(data["ref"])
    threads = int(data["threads"])
    colours = plt.get_cmap("tab10")
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True, constrained_layout=True)
    ax_x, ax_d, ax_p = axes

    for t in range(threads):
        tr = trace[trace["thread"] == t].sort_values("column")
        col = colours(t % 10)
        ax_x.scatter(tr["column"], tr["x"], color=col, s=18, label=f"thread {t}")
        ax_x.step(tr["column"], tr["max"], where="post", color=col, lw=1.2)
        ax_d.plot(tr["column"], tr["sum"], "-o", color=col, ms=3, lw=1)
        new_max = tr["max"].diff().fillna(1.0).to_numpy() > 0
        rescaled = new_max & (np.arange(len(tr)) > 0)
        ax_d.scatter(tr["column"][rescaled], tr["sum"][rescaled], marker="x", color=col, s=60, zorder=3)
    ax_x.set_ylabel("score x")
    ax_x.set_title(f"each of {threads} threads reads every {threads}th score; its running max (steps) only rises")
    ax_x.legend(ncol=threads, fontsize=8, loc="upper left")
    ax_d.set_yscale("log")
    ax_d.set_ylabel("running sum of exp(x - max)")
    ax_d.set_title("the running sum: one term more per score; a cross: a new max rescaled it by exp(max_old - max_new)")

    cols = np.arange(len(x))
    ax_p.bar(cols, p, color="0.6", label="04_online" + (" (simulated)" if data.get("simulated") else " (GPU)"))
    ax_p.plot(cols, ref, "k.", ms=5, label="numpy, float64")
    ax_p.set_ylabel("softmax")
    ax_p.set_xlabel("column")
    err = float(np.linalg.norm(p.astype(np.float64) - ref) / np.linalg.norm(ref))
    ax_p.set_title(f"after the merge of the {threads} (max, sum) pairs and the write pass: relative error {err:.1e}")
    ax_p.legend(fontsize=8, loc="upper left")
    fig.suptitle("online softmax (04_online): max and sum in one pass", fontsize=12)
    path = outdir / "softmax_online.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
