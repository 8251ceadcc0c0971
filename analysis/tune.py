"""The tuning figure: what `invoke tune <prog>` measured, one horizontal bar per choice (TFLOP/s), the
winner marked; a choice that was refused or gave a wrong answer gets its reason instead of a bar.

Input: the table a program's `tune` returns (`invoke tune`), or the JSON it caches (bench/results/<gpu>/<prog>-tune.json,
whose "table" is the same rows). Columns used: `config`, `status`, `winner`, every `tflops*` column
(matmul: tflops; attention: tflops_full and tflops_causal, one bar each), and `D` when present (one
panel per head size). Nothing here launches anything.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

_LABELS = {"tflops": "TFLOP/s", "tflops_full": "non-causal", "tflops_causal": "causal"}


def read(path: Path) -> tuple[pd.DataFrame, dict]:
    """(table, the rest of the JSON: program, device, size, winner(s), date ...) of a cached search,
    read by harness.measuring.tune's one reader (fields checked for their types); ValueError in one line naming
    the file otherwise."""
    from harness.measuring import tune as htune

    data = htune.read(path)  # BadTuneFile is a ValueError
    if not isinstance(data.get("table"), list) or "program" not in data:
        raise ValueError(f"{path}: not a tuning result (no program and table)")
    table = pd.DataFrame(data.pop("table"))
    return table, data


def plot(df: pd.DataFrame, prog: str, dest: Path, title: str | None = None) -> Path:
    """Draw the search into `dest` (a .png path); returns it."""
    metrics = [c for c in df.columns if c.startswith("tflops")]
    if not metrics or "config" not in df:
        raise ValueError(f"{prog}: the tuning table has no config and tflops columns")
    df = df.copy()
    if "status" not in df:
        df["status"] = "ok"
    if "winner" not in df:
        df["winner"] = False
    groups = list(df.groupby("D", sort=True)) if "D" in df else [(None, df)]
    rows = max(len(g) for _, g in groups)
    bar_h = 0.8 / len(metrics)
    fig, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups), 1.2 + 0.32 * rows * max(1, len(metrics) * 0.8)),
                             squeeze=False)
    colors = plt.get_cmap("tab10").colors
    for ax, (key, g) in zip(axes[0], groups):
        g = g.reset_index(drop=True)
        y = np.arange(len(g))[::-1]  # the table's order, top to bottom
        top = np.nanmax(g[metrics].to_numpy(dtype=float)) if g["status"].eq("ok").any() else 1.0
        for i, m in enumerate(metrics):
            vals = g[m].to_numpy(dtype=float)
            ax.barh(y + (len(metrics) - 1 - 2 * i) * bar_h / 2, np.nan_to_num(vals), height=bar_h,
                    color=colors[i], label=_LABELS.get(m, m) if len(metrics) > 1 else None)
            for yy, v in zip(y, vals):
                if np.isfinite(v):
                    ax.text(v + top * 0.01, yy + (len(metrics) - 1 - 2 * i) * bar_h / 2, f"{v:.1f}", va="center",
                            fontsize=7)
        for yy, st in zip(y, g["status"]):
            if st != "ok":  # refused or wrong: the reason where the bar would be, wrapped to the panel
                why = textwrap.shorten(str(st), 110, placeholder=" ...")
                ax.text(top * 0.01, yy, "\n".join(textwrap.wrap(why, 55)), va="center", fontsize=6.5,
                        color="firebrick", linespacing=0.9)
        names = [f"{c} \u2605" if w else str(c) for c, w in zip(g["config"], g["winner"].fillna(False))]
        ax.set_yticks(y, names, fontsize=8)
        for lab, w in zip(ax.get_yticklabels(), g["winner"].fillna(False)):
            if w:
                lab.set_fontweight("bold")
        ax.set_xlim(0, top * 1.15)
        ax.set_xlabel("TFLOP/s (higher is better)")
        ax.grid(axis="x", alpha=0.3)
        if key is not None:
            ax.set_title(f"D = {key}")
    fig.suptitle(title or f"invoke tune {prog}: every choice, the winner starred")
    if len(metrics) > 1:  # one legend for all panels, below them, clear of the bars
        fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=len(metrics), fontsize=8)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
    else:
        fig.tight_layout()
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=120)
    plt.close(fig)
    return dest


def plot_cached(results_dir: Path, outdir: Path, warn=None) -> list[Path]:
    """One figure per cached search under results_dir (<gpu>/<prog>-tune.json): tune_<prog>_<gpu>.png.
    A file that cannot be read or drawn is named in one line (`warn`, default stderr) and skipped, so
    one bad file costs only its own figure; so is a second file whose figure would land where an
    earlier one's did (two searches for one program in one GPU folder): the first figure stands, never
    overwritten. ValueError when there were files and none could be drawn."""
    import sys

    if warn is None:
        def warn(line):
            print(line, file=sys.stderr)

    paths, bad, drawn_from = [], [], {}
    for f in sorted(Path(results_dir).glob("*/*-tune.json")):
        try:
            table, meta = read(f)  # "program" is a program's name here, never a path
            gpu = f.parent.name
            dest = Path(outdir) / f"tune_{meta['program']}_{gpu}.png"
            if dest in drawn_from:
                raise ValueError(f"{f}: its figure {dest.name} is drawn from {drawn_from[dest]} already "
                                 f"(two tuning results for {meta['program']} in {f.parent}; keep one)")
            title = (f"invoke tune {meta['program']} on {meta.get('device', gpu)} ({meta.get('size', '')}, "
                     f"{meta.get('date', '')[:10]})")
            paths.append(plot(table, meta["program"], dest, title))
            drawn_from[dest] = f
        except (ValueError, KeyError, TypeError) as e:
            msg = str(e) if str(f) in str(e) else f"{f}: {e}"
            bad.append(msg)
            warn(f"skipped {msg}")
    if bad and not paths:
        raise ValueError(f"no tuning result under {results_dir} could be drawn ({len(bad)} skipped; first: {bad[0]})")
    return paths
