"""The ladder figure from known bench rows: which rows are rungs, the ratios, the peak, the files."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import ladder


def rows():
    def r(program, variant, size, value, ceiling, cval):
        return {"program": program, "variant": variant, "size": size, "value": value, "unit": "TFLOP/s",
                "ceiling": ceiling, "ceiling_value": cval, "ratio": value / cval, "device": "NVIDIA H100"}

    cases = pd.DataFrame([
        r("matmul", "01_naive", "4096^3", 5.0, "cublas", 50.0),
        r("matmul", "07_warptile", "4096^3", 30.0, "cublas", 50.0),
        r("matmul", "08_pipelined", "4096^3", 40.0, "cublas", 50.0),
        r("matmul", "08_pipelined", "2048^3", 30.0, "cublas@2048^3", 40.0),
        r("matmul", "02_tiled-t16-vs-naive", "4096^3", 8.0, "matmul_01_naive", 5.0),  # not a rung
        r("matmul", "cublas", "4096^3", 50.0, "fp32", 67.0),  # not a rung
        r("gemm_tc", "01_wmma", "4096^3", 300.0, "cublas_bf16", 600.0),
    ])
    ceil = pd.DataFrame([{"program": "ceiling", "variant": "fp32", "value": 67.0, "unit": "TFLOP/s"},
                         {"program": "ceiling", "variant": "bf16_peak", "value": 989.0, "unit": "TFLOP/s"}])
    return cases, ceil


def test_ladder_table_keeps_only_rungs_against_the_library():
    cases, _ = rows()
    t = ladder.ladder_table(cases, "matmul")
    assert t["variant"].tolist() == ["01_naive", "07_warptile", "08_pipelined", "08_pipelined"]
    assert t["size"].tolist() == ["4096^3", "4096^3", "4096^3", "2048^3"]
    np.testing.assert_allclose(t["ratio"], [0.1, 0.6, 0.8, 0.75])
    g = ladder.ladder_table(cases, "gemm_tc")
    assert g["variant"].tolist() == ["01_wmma"] and g["ratio"].iloc[0] == 0.5


def test_peaks_from_the_same_run():
    _, ceil = rows()
    assert ladder.peak(ceil, "matmul") == 67.0 and ladder.peak(ceil, "gemm_tc") == 989.0
    assert ladder.peak(ceil[ceil["variant"] != "fp32"], "matmul") is None


def test_plot_writes_one_figure_per_program(tmp_path):
    paths = ladder.plot(rows(), tmp_path)
    assert [p.name for p in paths] == ["ladder_matmul.png", "ladder_gemm_tc.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)
    cases, ceil = rows()
    only_matmul = ladder.plot((cases[cases["program"] == "matmul"], ceil), tmp_path / "m")
    assert [p.name for p in only_matmul] == ["ladder_matmul.png"]


def test_figure_draws_the_ceiling_and_peak_lines():
    cases, _ = rows()
    fig = ladder.ladder_figure(ladder.ladder_table(cases, "matmul"), "matmul", 67.0)
    assert [ax.get_title() for ax in fig.axes] == ["4096^3", "2048^3"]
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["cuBLAS SGEMM 50.0 TFLOP/s (same run)", "FP32 peak 67.0 TFLOP/s"]
    assert [p.get_height() for p in fig.axes[0].patches] == [5.0, 30.0, 40.0]


def test_both_ladders_from_the_recorded_h100_bench(tmp_path):
    """The real CSV of `invoke bench --save` on the H100: gemm_tc names its ceilings cublas_bf16_<edge>,
    matmul cublas@<size>; both ladders must come out (the gemm_tc figure was once silently missing)."""
    from harness import bench

    csv = bench.RESULTS_DIR / "h100" / "bench-h100-80gb-hbm3-20261123T134326.csv"
    frame, _, _ = bench.read_result(csv)
    g = ladder.ladder_table(frame, "gemm_tc")
    assert set(g["size"]) == {"2048^3", "4096^3", "8192^3"}
    assert list(g[g["size"] == "4096^3"]["variant"]) == ["01_wmma", "02_mma_sync", "03_wgmma"]
    assert g["ratio"].between(0.01, 2.0).all()
    m = ladder.ladder_table(frame, "matmul")
    assert set(m["size"]) == {"2048^3", "4096^3", "8192^3", "5120x256x5120"}
    paths = ladder.plot(csv, tmp_path)
    assert sorted(p.name for p in paths) == ["ladder_gemm_tc.png", "ladder_matmul.png"]
