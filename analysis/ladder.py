"""The ladder figure: TFLOP/s per rung as bars, one panel per size, with the library ceiling (cuBLAS)
and the device's peak from the same bench run drawn as lines -- SGEMM_CUDA's benchmark plot, but
with same-run ceilings.

One figure per ladder that has rows in the CSV:
  matmul              (FP32 SGEMM): ceiling rows named cublas / cublas@<size>, peak ceiling `fp32`
  gemm_tc             (BF16 tensor cores): ceiling rows cublas_bf16 / cublas_bf16@<size>, peak `bf16_peak`
  attention           (BF16 forward): ceiling rows sdpa_bf16_d<D>_s<S>[_causal] (torch's SDPA)
  attention_backward  (BF16 backward): ceiling rows sdpa_bwd_bf16_d<D>_s<S>[_causal] (SDPA's backward)
A ladder row is a TFLOP/s case of the ladder's program whose ceiling is the ladder's library ceiling;
rows measured against anything else (a baseline kernel, the peak itself, another ladder's ceiling) are
not its rungs. The two attention ladders are one program's: the ceiling says which a row climbs. Input: a bench CSV
(harness.measuring.results_csv.write) or (cases, ceilings) DataFrames. Nothing here launches anything.

A CSV measured in interleaved rounds gives each row its ratio's 25th-75th percentile spread
(ratio_p25, ratio_p75): each bar then carries it as a whisker, scaled to the bar (TFLOP/s x p25/ratio
to TFLOP/s x p75/ratio), so the whisker's length relative to the bar is the ratio's relative spread.
An older CSV without those columns draws bars without whiskers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from . import bench as abench  # noqa: E402


@dataclass(frozen=True)
class Ladder:
    program: str  # whose bench rows
    ceiling: str  # a regular expression the library ceiling's name matches in full
    label: str  # the ceiling's name on the figure
    peak: str  # the peak ceiling's row name ("" where the run has none)
    peak_label: str


def _sized(base: str) -> str:
    """`base`, `base@<size>` (matmul: cublas@2048^3) or `base_<edge>` (gemm_tc: cublas_bf16_4096)."""
    return re.escape(base) + r"(@.+|_\d+)?"


LADDERS = {
    "matmul": Ladder("matmul", _sized("cublas"), "cuBLAS SGEMM", "fp32", "FP32 peak"),
    "gemm_tc": Ladder("gemm_tc", _sized("cublas_bf16"), "cuBLAS BF16", "bf16_peak", "BF16 tensor-core peak"),
    "attention": Ladder("attention", r"sdpa_bf16_d\d+_s\d+(_causal)?", "torch SDPA BF16", "", ""),
    "attention_backward": Ladder("attention", r"sdpa_bwd_bf16_d\d+_s\d+(_causal)?", "torch SDPA backward BF16",
                                 "", ""),
}


def _is_library_ceiling(name: str, ladder: str) -> bool:
    """Whether a row measured against ceiling `name` is a rung of `ladder`."""
    return re.fullmatch(LADDERS[ladder].ceiling, name) is not None


def ladder_table(cases: pd.DataFrame, program: str) -> pd.DataFrame:
    """size, variant, tflops, ceiling_tflops, ratio: the numbers behind one ladder's bars, in the
    order the rungs appear in the CSV (the order the bench ran them). ratio is the CSV's own (the
    median of the per-round ratios) where it has one, else tflops / ceiling_tflops. ratio_p25,
    ratio_p75 (NaN where not measured) and tflops_p25, tflops_p75 (the whisker's ends: the ratio's
    spread scaled to the bar) come with them."""
    cols = ["size", "variant", "tflops", "ceiling_tflops", "ratio", "ratio_p25", "ratio_p75", "tflops_p25",
            "tflops_p75"]
    if cases is None or cases.empty or not {"program", "unit", "ceiling", "value", "size"} <= set(cases):
        return pd.DataFrame(columns=cols)
    df = cases[(cases["program"] == LADDERS[program].program) & (cases["unit"] == "TFLOP/s")].copy()
    df = df.loc[df["ceiling"].astype(str).map(lambda c: _is_library_ceiling(c, program)).astype(bool)]
    if df.empty:
        return pd.DataFrame(columns=cols)
    cval = df["ceiling_value"] if "ceiling_value" in df else pd.Series(np.nan, index=df.index)
    out = pd.DataFrame({"size": df["size"].astype(str), "variant": df["variant"].astype(str),
                        "tflops": pd.to_numeric(df["value"], errors="coerce"),
                        "ceiling_tflops": pd.to_numeric(cval, errors="coerce")})
    computed = out["tflops"] / out["ceiling_tflops"]
    own = pd.to_numeric(df["ratio"], errors="coerce") if "ratio" in df else pd.Series(np.nan, index=df.index)
    out["ratio"] = own.where(np.isfinite(own), computed)
    for q in ("p25", "p75"):
        col = f"ratio_{q}"
        out[col] = pd.to_numeric(df[col], errors="coerce") if col in df else np.nan
        # The whisker scales with the bar: the ratio's spread relative to its median, applied to the TFLOP/s.
        out[f"tflops_{q}"] = out["tflops"] * out[col] / out["ratio"]
    return out[cols].reset_index(drop=True)


def peak(ceilings: pd.DataFrame, program: str) -> float | None:
    """The program's peak ceiling (TFLOP/s) from the run's ceiling rows, or None when not measured."""
    name = LADDERS[program].peak
    if not name or ceilings is None or ceilings.empty:
        return None
    rows = ceilings[ceilings["variant"].astype(str) == name]
    if rows.empty:
        return None
    v = float(pd.to_numeric(rows["value"], errors="coerce").iloc[0])
    return v if np.isfinite(v) and v > 0 else None


def ladder_figure(table: pd.DataFrame, program: str, peak_tflops: float | None = None,
                  title: str = "") -> plt.Figure:
    """Bars of TFLOP/s per rung, one panel per size; the library ceiling and the peak as lines."""
    clabel, plabel = LADDERS[program].label, LADDERS[program].peak_label
    sizes = list(dict.fromkeys(table["size"]))
    for c in ("ratio_p25", "ratio_p75", "tflops_p25", "tflops_p75"):  # a table built by hand may lack them
        if c not in table:
            table = table.assign(**{c: np.nan})
    whiskers = False
    fig, axes = plt.subplots(1, max(len(sizes), 1), figsize=(max(8.0, 4.2 * len(sizes) + 1), 6.0), squeeze=False,
                             sharey=True)
    for ax, size in zip(axes[0], sizes):
        t = table[table["size"] == size]
        x = np.arange(len(t))
        ax.bar(x, t["tflops"], color="#4c72b0")
        ok = np.isfinite(t[["tflops", "tflops_p25", "tflops_p75"]].to_numpy(dtype=float)).all(axis=1)
        if ok.any():
            abench.draw_spread(ax, x[ok], t["tflops"][ok], t["tflops_p25"][ok], t["tflops_p75"][ok], horizontal=False,
                               capsize=2.5)
            whiskers = True
        for xi, (v, r, top) in enumerate(zip(t["tflops"], t["ratio"], t["tflops_p75"])):
            if np.isfinite(v):  # the label sits above the whisker, where there is one
                ax.text(xi, max(v, top) if np.isfinite(top) else v, f"{r:.2f}" if np.isfinite(r) else "",
                        ha="center", va="bottom", fontsize=7)
        ceil = t["ceiling_tflops"].dropna()
        if len(ceil):
            ax.axhline(float(ceil.iloc[0]), color="black", ls="--", lw=1.2,
                       label=f"{clabel} {float(ceil.iloc[0]):.1f} TFLOP/s (same run)")
        if peak_tflops:
            ax.axhline(peak_tflops, color="firebrick", ls=":", lw=1.2, label=f"{plabel} {peak_tflops:.1f} TFLOP/s")
        ax.set_xticks(x)
        ax.set_xticklabels(t["variant"], rotation=60, ha="right", fontsize=8)
        ax.set_title(size)
        ax.legend(fontsize=7, loc="upper left")
    axes[0][0].set_ylabel("TFLOP/s (the case's FLOPs / median time)")
    if not peak_tflops:
        fig.text(0.01, 0.01, "no peak ceiling in this run", fontsize=8)
    fig.suptitle((title or f"{program}: the ladder, TFLOP/s per rung")
                 + f"\nbar labels: fraction of {clabel} at the same size, same run"
                 + ("; whiskers: its p25-p75 over the rounds" if whiskers else ""), fontsize=10)
    fig.tight_layout()
    return fig


def plot(data, outdir: Path, prefix: str = "ladder") -> list[Path]:
    """Write <prefix>_<program>.png for every program with ladder rows in the bench data."""
    cases, ceil = abench.load(data)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    device = ""
    if "device" in cases and len(cases):
        device = str(cases["device"].dropna().iloc[0]) if cases["device"].notna().any() else ""
    paths = []
    for program in LADDERS:
        table = ladder_table(cases, program)
        if table.empty:
            continue
        title = f"{program}: the ladder, TFLOP/s per rung" + (f" ({device})" if device else "")
        fig = ladder_figure(table, program, peak(ceil, program), title)
        path = outdir / f"{prefix}_{program}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths
