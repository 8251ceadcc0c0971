"""A kernel trace drawn as a timeline: which kernels ran when, grouped by the NVTX range (phase) their
launch was enqueued in, and each phase's share of the GPU's time.

Input: the SQLite file nsys exports beside a report (`invoke profile <prog> --tool nsys` leaves it in
build/profiles/<prog>/), read by harness.profiling.nsys.kernel_trace. A program that marks its
phases with NVTX ranges (transformer_block's training step: train_step / forward, backward, sgd)
gets one row per phase; one without ranges gets one row per stream. Copies between GPUs (the copy
engines' part of a collective) are drawn as bars too, and counted with the kernels' time.
Nothing here launches anything.

Why: a kernel-shares table says how long each kernel took in total; the order and the gaps between
phases (a launch-bound stretch, a phase that waits on another) only show on a time axis.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from harness.base import files  # noqa: E402
from harness.profiling import nsys  # noqa: E402

LABEL_SHARE = 0.07  # kernels longer than this share of the window get their name on the bar


def short_name(name: str, width: int = 24) -> str:
    """A kernel's name without its return type, template arguments and parameter list, cut to `width`."""
    base = name.split("(")[0].split("<")[0].strip().split(" ")[-1]
    return base if len(base) <= width else base[: width - 1] + "…"


def read(path) -> pd.DataFrame:
    """The kernel trace of an nsys SQLite export (ValueError or FileNotFoundError, one line, if not)."""
    return nsys.kernel_trace(Path(path))


BY = ("phase", "stream")


def step_window(trace: pd.DataFrame, outer: str | None = None, by: str = "phase") -> pd.DataFrame:
    """The kernels of the last instance of the outermost NVTX range named `outer` (default: the
    outermost range of the first kernel launched inside any range), with a "phase" column: the
    innermost range below `outer`, or `outer` itself for kernels directly in it. Without ranges,
    every kernel, its phase "stream <id>". A "lane" column says which row draws it: its phase
    (by="phase"), or its GPU and stream (by="stream": where work on two streams overlaps, as a
    tensor-parallel block's GEMMs and all-reduce do). Times restart at the window's first kernel."""
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}, got {by!r}")
    ranged = trace[trace["outer_id"] >= 0]
    if ranged.empty:
        if outer:
            raise ValueError(f"the trace has no NVTX ranges, so none named {outer!r}")
        w = trace.copy()
        w["phase"] = "stream " + w["stream"].astype(str)
    else:
        tops = ranged["ranges"].str.split("/").str[0]
        name = outer or tops.iloc[0]
        mine = ranged[tops == name]
        if mine.empty:
            raise ValueError(f"no kernel ran inside an NVTX range named {name!r}; ranges seen: "
                             f"{', '.join(sorted(set(tops)))}")
        w = mine[mine["outer_id"] == mine["outer_id"].max()].copy()
        w["phase"] = w["ranges"].str.split("/").str[-1]
    w["lane"] = w["phase"] if by == "phase" else ("GPU " + w["device"].astype(str) + " stream "
                                                  + w["stream"].astype(str))
    t0 = w["start_us"].min()
    w["start_us"] -= t0
    w["end_us"] -= t0
    return w.reset_index(drop=True)


def busy_us(w: pd.DataFrame) -> float:
    """GPU time covered by at least one kernel of `w` (overlapping kernels counted once)."""
    total, end = 0.0, -np.inf
    for s, e in sorted(zip(w["start_us"], w["end_us"])):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def phase_shares(w: pd.DataFrame) -> pd.DataFrame:
    """Per phase, in order of first appearance: kernels, kernel time (µs), its share of all kernel
    time in the window (%), and the phase's span from its first kernel's start to its last's end."""
    order = list(dict.fromkeys(w["phase"]))
    g = w.assign(dur=w["end_us"] - w["start_us"]).groupby("phase", sort=False)
    out = pd.DataFrame({"kernels": g.size(), "kernel_us": g["dur"].sum(),
                        "span_us": g["end_us"].max() - g["start_us"].min()}).reindex(order)
    out["kernel_pct"] = 100.0 * out["kernel_us"] / out["kernel_us"].sum()
    return out.reset_index().rename(columns={"index": "phase"})[["phase", "kernels", "kernel_us", "kernel_pct",
                                                                  "span_us"]]


def figure(w: pd.DataFrame, title: str = "") -> plt.Figure:
    """One row per lane (phase, or GPU and stream), a bar per kernel on a µs axis, coloured by phase;
    the legend gives each phase's share. `w` is step_window's frame."""
    shares = phase_shares(w)
    phases = list(shares["phase"])
    colour = dict(zip(phases, sns.color_palette(n_colors=len(phases))))
    lanes = list(dict.fromkeys(w.sort_values(["start_us"])["lane"]))
    span = float(w["end_us"].max())
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.55 * len(lanes)))
    for row, lane in enumerate(lanes):
        k = w[w["lane"] == lane]
        ax.broken_barh(list(zip(k["start_us"], k["end_us"] - k["start_us"])), (row - 0.38, 0.76),
                       facecolors=[colour[p] for p in k["phase"]], edgecolor="white", linewidth=0.3)
        for r in k[k["end_us"] - k["start_us"] > LABEL_SHARE * span].itertuples():  # long kernels named
            ax.text((r.start_us + r.end_us) / 2, row, short_name(r.name), ha="center", va="center", fontsize=7,
                    color="white", clip_on=True)
    copies = w[w["name"] == nsys.PEER_COPY].groupby("phase").size()
    for r in shares.itertuples():
        c = int(copies.get(r.phase, 0))
        what = f"{r.kernels - c} kernels" + (f" and {c} copies" if c else "")
        ax.bar(0, 0, color=colour[r.phase], label=f"{r.phase}: {r.kernel_us / 1e3:.3f} ms in {what}, "
                                                  f"{r.kernel_pct:.1f}%")
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlim(0, span * 1.01)
    ax.set_xlabel("µs from the first kernel's start")
    idle = 100.0 * (1 - busy_us(w) / span) if span > 0 else 0.0
    ax.set_title(title or f"{len(w)} kernels, {span / 1e3:.3f} ms; no kernel running {idle:.1f}% of it")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(lanes) < 3 else -0.22), ncol=min(3, len(phases)),
              fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def plot(w: pd.DataFrame, out: Path, title: str = "") -> Path:
    """Draw `figure(w)` to the PNG `out`, whole or not at all."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig = figure(w, title)
    try:
        return files.replace(out, lambda tmp: fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight"))
    finally:
        plt.close(fig)


def page_table(w: pd.DataFrame) -> str:
    """The phase shares as the Markdown table a program's page shows (a test holds the page to it)."""
    rows = ["| phase | kernels | kernel time (ms) | share of kernel time |", "| --- | --- | --- | --- |"]
    for r in phase_shares(w).itertuples():
        rows.append(f"| {r.phase} | {r.kernels} | {r.kernel_us / 1e3:.3f} | {r.kernel_pct:.1f}% |")
    return "\n".join(rows)
