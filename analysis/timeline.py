"""Block timelines: when, and on which SM, each block of one matmul launch ran.

Input: the CSV that `build/bin/matmul --timeline FILE` writes from a build with the block recorder
(`make EXTRA_NVCCFLAGS=-DCUDALAB_TIMELINE`; sgemm_ladder.cuh's LadderSpan), one row per block with
columns variant, m, n, k, block, sm, role (whole, head, rest, slice), tile, start_us, loop_end_us,
end_us (µs from the launch's first block start, thread 0's clock reads). Out: `summary()`, the numbers
that say where a launch's time went, and a figure with one row per SM. Nothing here launches anything.

Why: 11_splitk_tail's tail cut is a schedule (which SM runs which piece, when), and a kernel's time
alone cannot say whether the schedule ran as its model draws it. This picture can.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from harness.measuring import results_csv  # noqa: E402

REQUIRED = ("variant", "m", "n", "k", "block", "sm", "role", "start_us", "loop_end_us", "end_us")
ROLES = ("whole", "head", "rest", "slice")
COLOURS = {"whole": "#4c72b0", "head": "#dd8452", "rest": "#55a868", "slice": "#8172b3"}


def read_checked(path) -> pd.DataFrame:
    """A --timeline CSV, or ValueError (FileNotFoundError) saying in one line what the file is not."""
    df = results_csv.read_checked(path, REQUIRED, "block timeline CSV", "`matmul --timeline`")
    bad = sorted(set(df["role"]) - set(ROLES))
    if bad:
        raise ValueError(f"{path}: unknown role(s) {', '.join(map(str, bad))} (expected {', '.join(ROLES)})")
    if len(df) == 0:
        raise ValueError(f"{path} has no blocks")
    if ((df["end_us"] < df["loop_end_us"]) | (df["loop_end_us"] < df["start_us"])).any():
        raise ValueError(f"{path}: a block ends before it starts (start_us <= loop_end_us <= end_us must hold)")
    return df


def summary(df: pd.DataFrame) -> dict:
    """Where the launch's time went, over the SMs that ran a block:
    makespan_us      first start to last end;
    busy_fraction    the blocks' summed time / (SMs × makespan): 1 means no SM ever waited;
    ideal_us         the summed time spread evenly over the SMs (the makespan of a perfect balance);
    tail_idle_us     the mean over SMs of makespan − that SM's last end (what the end of the grid wastes);
    per role: blocks, mean mainloop time and mean time after it (epilogue, and a rest's wait)."""
    span = df["end_us"] - df["start_us"]
    sms = df["sm"].nunique()
    makespan = float(df["end_us"].max() - df["start_us"].min())
    last_end = df.groupby("sm")["end_us"].max()
    out = {
        "blocks": int(len(df)),
        "sms": int(sms),
        "makespan_us": makespan,
        "busy_fraction": float(span.sum() / (sms * makespan)) if makespan > 0 else float("nan"),
        "ideal_us": float(span.sum() / sms),
        "tail_idle_us": float((df["end_us"].max() - last_end).mean()),
        "roles": {},
    }
    for role, g in df.groupby("role"):
        out["roles"][role] = {
            "blocks": int(len(g)),
            "mainloop_us": float((g["loop_end_us"] - g["start_us"]).mean()),
            "after_us": float((g["end_us"] - g["loop_end_us"]).mean()),
            "first_start_us": float(g["start_us"].min()),
            "last_end_us": float(g["end_us"].max()),
        }
    return out


def plot(df: pd.DataFrame, outdir: Path, stem: str | None = None) -> Path:
    """One row per SM (sorted by SM id), one bar per block: its main loop in the role's colour, the
    time after it (epilogue; a rest's wait and add) lighter. Returns the PNG's path."""
    s = summary(df)
    row = {sm: i for i, sm in enumerate(sorted(df["sm"].unique()))}
    fig, ax = plt.subplots(figsize=(12, max(4.0, 0.045 * len(row) + 1.5)))
    for role, g in df.groupby("role"):
        y = g["sm"].map(row).to_numpy()
        c = COLOURS[role]
        ax.barh(y, (g["loop_end_us"] - g["start_us"]).to_numpy(), left=g["start_us"].to_numpy(), height=0.8,
                color=c, label=f"{role} ({len(g)})", linewidth=0)
        ax.barh(y, (g["end_us"] - g["loop_end_us"]).to_numpy(), left=g["loop_end_us"].to_numpy(), height=0.8,
                color=c, alpha=0.35, linewidth=0)
    ax.axvline(s["ideal_us"], color="black", linestyle="--", linewidth=1,
               label=f"perfect balance {s['ideal_us']:.0f} µs")
    first = df.iloc[0]
    ax.set_title(f"{first['variant']} at {first['m']}x{first['n']}x{first['k']}: {s['blocks']} blocks on "
                 f"{s['sms']} SMs, {s['makespan_us']:.0f} µs, SMs busy {100 * s['busy_fraction']:.1f}% "
                 f"(light: after the main loop)")
    ax.set_xlabel("µs from the first block's start")
    ax.set_ylabel("SM (by id)")
    ax.set_ylim(-1, len(row))
    ax.invert_yaxis()
    ax.legend(loc="lower left", fontsize=8, framealpha=0.9)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"{stem or 'timeline-' + str(first['variant'])}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
