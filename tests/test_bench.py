"""The bench table's arithmetic (harness.timing.summarize, harness.bench.row), its CSV round trip,
and the numbers behind `invoke plot bench`'s ratio bars and roofline. On a GPU: `invoke bench
--quick` runs and writes its CSV."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import bench as abench
from harness import bench, build, timing

FIX = Path(__file__).parent / "fixtures"


def test_summarize_median_and_iqr():
    t = timing.summarize([4.0, 1.0, 3.0, 2.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])
    assert t.median_ms == pytest.approx(5.5)
    assert t.p25_ms == pytest.approx(3.25) and t.p75_ms == pytest.approx(7.75)  # numpy's linear percentiles
    assert t.iqr_ms == pytest.approx(4.5)
    assert t.rate(1e6) == pytest.approx(1e6 / 5.5e-3)
    with pytest.raises(ValueError):
        timing.summarize([])
    with pytest.raises(ValueError):
        timing.summarize([1.0, float("nan")])


def _case(**kw):
    args = dict(program="p", variant="01_v", size="2^20", setup=lambda: None, unit="GB/s", amount=8e9,
                ceiling="memcpy", target=0.9)
    args.update(kw)
    return bench.BenchCase(**args)


def test_row_ratio_to_the_ceiling():
    t = timing.summarize([2.0] * 10)  # 8e9 bytes in 2 ms = 4000 GB/s
    ceil = bench.Ceiling("memcpy", 5000.0, "GB/s")
    r = bench.row(_case(), t, 8e9, ceil)
    assert r["value"] == pytest.approx(4000.0)
    assert r["ratio"] == pytest.approx(0.8) and r["ceiling_value"] == 5000.0
    assert r["target"] == 0.9 and r["meets_target"] is False
    assert r["median_ms"] == 2.0 and r["iqr_ms"] == 0.0
    r = bench.row(_case(target=0.75), t, 8e9, ceil)
    assert r["meets_target"] is True


def test_row_units_divisor_and_missing_ceiling():
    t = timing.summarize([1.0] * 10)
    r = bench.row(_case(unit="TFLOP/s", amount=2e12, ceiling="fp32"), t, 2e12, bench.Ceiling("fp32", 50.0, "TFLOP/s"))
    assert r["value"] == pytest.approx(2000.0)  # 2e12 FLOP in 1 ms = 2000 TFLOP/s
    assert r["ratio"] == pytest.approx(40.0)
    # An instruction ceiling shared by work items that each cost 4 instructions.
    r = bench.row(_case(unit="Giter/s", ceiling="fp32_inst", ceiling_divisor=4.0), t, 1e9,
                  bench.Ceiling("fp32_inst", 4000.0, "Ginst/s"))
    assert r["value"] == pytest.approx(1000.0) and r["ceiling_value"] == 1000.0 and r["ratio"] == pytest.approx(1.0)
    r = bench.row(_case(), t, 8e9, None)
    assert np.isnan(r["ratio"]) and r["meets_target"] is None


def _table():
    rows = [
        # program, variant, size, median_ms, bytes, flops, unit, value, ceiling, ratio, target
        ("square", "01_naive", "2^24", 0.05, 1.34e8, 1.68e7, "GB/s", 2684.0, "memcpy", 0.80, np.nan),
        ("square", "03_vectorized", "2^24", 0.045, 1.34e8, 1.68e7, "GB/s", 2982.0, "memcpy", 0.89, 0.95),
        ("matmul", "02_tiled", "1024^3", 0.5, 1.26e7, 2.15e9, "TFLOP/s", 4.29, "cublas", 0.25, 0.5),
        ("grayscale", "03_vectorized", "4096x4096", 0.03, 6.7e7, 0.0, "GB/s", 2236.0, "memcpy", 0.67, 0.9),
    ]
    cols = ["program", "variant", "size", "median_ms", "bytes", "flops", "unit", "value", "ceiling", "ratio", "target"]
    cases = pd.DataFrame(rows, columns=cols)
    cases["iqr_ms"] = 0.001
    ceil = pd.DataFrame([{"program": "ceiling", "variant": "memcpy", "value": 3350.0, "unit": "GB/s",
                          "size": "cudaMemcpy DtoD of 256 MiB"},
                         {"program": "ceiling", "variant": "cublas", "value": 17.2, "unit": "TFLOP/s", "size": "SGEMM"}])
    return cases, ceil


def test_ratio_bars_show_the_ratios_and_targets():
    cases, ceil = _table()
    rt = abench.ratio_table(cases)
    assert rt["family"].tolist() == ["memcpy", "memcpy", "cublas", "memcpy"]  # one axis per ceiling
    assert rt["label"].tolist()[0] == "square 01_naive 2^24"
    fig = abench.ratio_figure(cases, ceilings=ceil)
    assert len(fig.axes) == 2
    mem, cub = fig.axes
    assert mem.get_title(loc="left") == "ratio to memcpy (3350 GB/s)"
    assert [p.get_width() for p in mem.patches] == pytest.approx([0.80, 0.89, 0.67])
    targets = [ln.get_xdata()[0] for ln in mem.get_lines() if ln.get_color() == "crimson"]
    assert targets == [0.95, 0.9]  # a dashed tick across each bar that has a target
    assert [p.get_width() for p in cub.patches] == pytest.approx([0.25])
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"meets its target", "misses its target", "no target"} <= labels


def test_roofline_points_and_roofs():
    cases, ceil = _table()
    pts = abench.roofline_table(cases)
    assert pts["program"].tolist() == ["square", "square", "matmul"]  # grayscale counts no FLOPs
    m = pts[pts["program"] == "matmul"].iloc[0]
    assert m["intensity"] == pytest.approx(2.15e9 / 1.26e7)
    assert m["gflops"] == pytest.approx(2.15e9 / 0.5e-3 / 1e9)
    rf = abench.roofs(ceil)
    assert rf == {"memory": [("memcpy", 3350.0)], "compute": [("cublas", 17200.0)]}
    fig = abench.roofline_figure(cases, ceil)
    ax = fig.axes[0]
    mem = next(ln for ln in ax.get_lines() if "memory roof" in ln.get_label())
    x, y = mem.get_xdata(), mem.get_ydata()
    assert np.allclose(y, 3350.0 * x)  # bandwidth x intensity, and it stops at the compute roof
    assert x.max() == pytest.approx(17200.0 / 3350.0) and y.max() == pytest.approx(17200.0)
    comp = next(ln for ln in ax.get_lines() if "compute roof" in ln.get_label())
    assert np.allclose(comp.get_ydata(), 17200.0)
    assert "grayscale" in " ".join(t.get_text() for t in ax.texts)  # said to be off the roofline


def test_csv_round_trip_and_plot(tmp_path):
    cases, _ = _table()
    meta = {"device": "NVIDIA H200", "driver": "13.0", "runtime": "13.0", "nvcc": "13.0.88", "date": "2026-11-21T20:00:00"}
    t = timing.summarize([0.1] * 10)
    ceils = {"memcpy": bench.Ceiling("memcpy", 3350.0, "GB/s", "DtoD", t),
             "cublas": bench.Ceiling("cublas", 17.2, "TFLOP/s", "SGEMM")}
    path = bench.write_csv(cases, meta, ceils, dest=tmp_path / "b.csv")
    c2, k2 = abench.load(path)
    assert len(c2) == 4 and len(k2) == 2 and (c2["device"] == "NVIDIA H200").all()
    assert c2["ratio"].tolist() == pytest.approx(cases["ratio"].tolist())
    paths = abench.plot(path, tmp_path / "plots")
    assert [p.name for p in paths] == ["bench_ratios.png", "bench_roofline.png"]
    assert all(p.stat().st_size > 5000 for p in paths)
    assert abench.latest_csv(tmp_path) == path
    r = subprocess.run([sys.executable, "-m", "invoke", "plot", "bench", "--csv", str(path), "--outdir",
                        str(tmp_path / "p2")], cwd=build.ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "p2" / "bench_roofline.png").exists()


def test_plots_of_a_recorded_quick_bench(tmp_path):
    """`invoke bench --quick` as it ran on an H200 (tests/fixtures/bench_quick_h200_20261121.csv)."""
    path = FIX / "bench_quick_h200_20261121.csv"
    cases, ceil = abench.load(path)
    assert len(cases) == 21 and (cases["device"] == "NVIDIA H200").all()
    rt = abench.ratio_table(cases)
    assert rt["ratio"].tolist() == pytest.approx(cases["ratio"].tolist())
    # The ratio is the figure over the ceiling from the same run, row by row.
    by_name = dict(zip(ceil["variant"], ceil["value"], strict=True))
    sq = cases[(cases["program"] == "square") & (cases["variant"] == "03_vectorized")].iloc[0]
    assert sq["ratio"] == pytest.approx(sq["value"] / by_name["memcpy"])
    assert sq["value"] == pytest.approx(sq["bytes"] / (sq["median_ms"] * 1e-3) / 1e9)
    pts = abench.roofline_table(cases)
    assert set(pts["program"]) == {"attention", "matmul", "square"}  # grayscale and mandelbrot count no FLOPs
    rf = abench.roofs(ceil, set(cases["program"]))
    assert [n for n, _ in rf["memory"]] == ["memcpy"]
    assert "matmul_01_naive" not in [n for n, _ in rf["compute"]]  # a baseline kernel, not a roof
    assert max(v for _, v in rf["compute"]) == pytest.approx(by_name["fp32"] * 1e3)
    fig = abench.ratio_figure(cases, ceilings=ceil)
    titles = [ax.get_title(loc="left").split(" (")[0] for ax in fig.axes]
    assert titles == ["ratio to " + c for c in dict.fromkeys(cases["ceiling"])]
    mem = fig.axes[titles.index("ratio to memcpy")]
    assert [p.get_width() for p in mem.patches] == pytest.approx(
        cases.loc[cases["ceiling"] == "memcpy", "ratio"].tolist())
    assert len(abench.plot(path, tmp_path)) == 2


# End to end (minutes on a GPU): `invoke test --marker slow`, not the default run.
@pytest.mark.slow
@pytest.mark.gpu
def test_invoke_bench_quick_runs():
    before = set(bench.BUILD_BENCH.glob("*.csv")) if bench.BUILD_BENCH.exists() else set()
    r = subprocess.run([sys.executable, "-m", "invoke", "bench", "--quick"], cwd=build.ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    new = set(bench.BUILD_BENCH.glob("*.csv")) - before
    assert len(new) == 1
    cases, ceil = abench.load(new.pop())
    assert len(cases) > 0 and len(ceil) > 0 and np.isfinite(cases["ratio"]).any()
