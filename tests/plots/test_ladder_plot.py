"""The ladder figure from known bench rows: which rows are rungs, the ratios, the peak, the files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import ladder
from harness.base import paths
from harness.measuring import results_csv


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test draws several figures; close them so the run does not pile up open figures."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


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

    csv = paths.RESULTS_DIR / "h100" / "history" / "bench-h100-80gb-hbm3-20261123T134326.csv"
    frame, _, _ = results_csv.read(csv)
    g = ladder.ladder_table(frame, "gemm_tc")
    assert set(g["size"]) == {"2048^3", "4096^3", "8192^3"}
    assert list(g[g["size"] == "4096^3"]["variant"]) == ["01_wmma", "02_mma_sync", "03_wgmma"]
    assert g["ratio"].between(0.01, 2.0).all()
    m = ladder.ladder_table(frame, "matmul")
    assert set(m["size"]) == {"2048^3", "4096^3", "8192^3", "5120x256x5120"}
    drawn = ladder.plot(csv, tmp_path)
    # the same run timed attention's forward rungs against SDPA: its ladder comes out too, and no
    # backward one (that run had no backward rows)
    assert sorted(p.name for p in drawn) == ["ladder_attention.png", "ladder_gemm_tc.png", "ladder_matmul.png"]


def _whiskers(ax):
    """(x, y_from, y_to) of every vertical error bar drawn on ax."""
    from matplotlib.container import ErrorbarContainer

    out = [(seg[0][0], seg[0][1], seg[1][1]) for c in ax.containers if isinstance(c, ErrorbarContainer)
           for lc in c.lines[2] for seg in lc.get_segments()]
    return np.array(sorted(out)).reshape(-1, 3)


def with_spread():
    """rows() measured in rounds: each rung's ratio with its p25-p75; one rung without (NaN)."""
    cases, ceil = rows()
    cases["ratio_p25"] = cases["ratio"] * 0.98
    cases["ratio_p75"] = cases["ratio"] * 1.05
    cases.loc[1, ["ratio_p25", "ratio_p75"]] = np.nan  # 07_warptile 4096^3: no spread
    return cases, ceil


def test_ladder_table_carries_the_ratio_spread_scaled_to_the_bar():
    cases, _ = with_spread()
    cases.loc[2, "ratio"] = 0.78  # the CSV's median of per-round ratios, not value / ceiling_value (0.8)
    cases.loc[2, ["ratio_p25", "ratio_p75"]] = [0.76, 0.82]
    t = ladder.ladder_table(cases, "matmul")
    np.testing.assert_allclose(t["ratio"], [0.1, 0.6, 0.78, 0.75])  # the CSV's own ratio where it has one
    np.testing.assert_allclose(t["ratio_p25"], [0.098, np.nan, 0.76, 0.735])
    # The whisker's ends: TFLOP/s x p/ratio, so the whisker is the ratio's relative spread around the bar.
    np.testing.assert_allclose(t["tflops_p25"], [4.9, np.nan, 40.0 * 0.76 / 0.78, 29.4])
    np.testing.assert_allclose(t["tflops_p75"], [5.25, np.nan, 40.0 * 0.82 / 0.78, 31.5])


def test_figure_draws_each_rungs_spread_as_a_whisker():
    cases, _ = with_spread()
    fig = ladder.ladder_figure(ladder.ladder_table(cases, "matmul"), "matmul", 67.0)
    big, small = fig.axes
    # 01_naive at x=0 and 08_pipelined at x=2; 07_warptile (x=1) has no spread, so no whisker.
    np.testing.assert_allclose(_whiskers(big), [(0, 4.9, 5.25), (2, 39.2, 42.0)])
    np.testing.assert_allclose(_whiskers(small), [(0, 29.4, 31.5)])
    assert [p.get_height() for p in big.patches] == [5.0, 30.0, 40.0]  # the bars are as before
    labels = {t.get_text(): t.get_position()[1] for t in big.texts}
    assert labels == pytest.approx({"0.10": 5.25, "0.60": 30.0, "0.80": 42.0})  # each ratio label above its whisker
    assert "whiskers: its p25-p75 over the rounds" in fig.get_suptitle()


def test_ladders_without_spread_draw_no_whiskers(tmp_path):
    cases, ceil = rows()
    fig = ladder.ladder_figure(ladder.ladder_table(cases, "matmul"), "matmul", 67.0)
    assert all(len(_whiskers(ax)) == 0 for ax in fig.axes)
    assert "whiskers" not in fig.get_suptitle()
    cases["ratio_p25"], cases["ratio_p75"] = np.nan, np.nan
    fig = ladder.ladder_figure(ladder.ladder_table(cases, "matmul"), "matmul", 67.0)
    assert all(len(_whiskers(ax)) == 0 for ax in fig.axes)
    # A table made by hand with only the old five columns still draws.
    old = ladder.ladder_table(cases, "matmul")[["size", "variant", "tflops", "ceiling_tflops", "ratio"]]
    assert [p.get_height() for p in ladder.ladder_figure(old, "matmul").axes[0].patches] == [5.0, 30.0, 40.0]


def test_recorded_h100_ladders_have_no_whiskers():
    """The committed H100 CSV predates the rounds (no ratio_p25/p75): bars and labels as before, no whisker."""

    frame, _, _ = results_csv.read(paths.RESULTS_DIR / "h100" / "history" / "bench-h100-80gb-hbm3-20261123T134326.csv")
    assert "ratio_p25" not in frame
    for program in ("matmul", "gemm_tc"):
        t = ladder.ladder_table(frame, program)
        np.testing.assert_allclose(t["ratio"], t["tflops"] / t["ceiling_tflops"])
        fig = ladder.ladder_figure(t, program)
        assert all(len(_whiskers(ax)) == 0 for ax in fig.axes)
        assert sum(len(ax.patches) for ax in fig.axes) == len(t)


def test_attention_has_a_forward_and_a_backward_ladder_and_each_row_climbs_one():
    """One program, two ladders: a row's ceiling says which (SDPA's forward or its backward), FP32 rows
    (measured against FP32 SDPA) are on neither, and a backward figure is drawn beside the forward."""
    def r(variant, size, value, ceiling, cval):
        return {"program": "attention", "variant": variant, "size": size, "value": value, "unit": "TFLOP/s",
                "ceiling": ceiling, "ceiling_value": cval, "ratio": value / cval, "device": "NVIDIA H200"}

    cases = pd.DataFrame([
        r("03_flash_bf16", "B4xH16xS4096xD128", 320.0, "sdpa_bf16_d128_s4096", 560.0),
        r("05_flash_wgmma", "B4xH16xS4096xD128", 540.0, "sdpa_bf16_d128_s4096", 560.0),
        r("02_flash", "B4xH16xS4096xD128", 30.0, "sdpa_d128", 40.0),  # FP32: on neither ladder
        r("07_flash_bwd_bf16", "B4xH16xS4096xD128-bwd", 126.0, "sdpa_bwd_bf16_d128_s4096", 568.0),
        r("08_flash_bwd_wgmma", "B4xH16xS4096xD128-bwd", 257.0, "sdpa_bwd_bf16_d128_s4096", 568.0),
        r("08_flash_bwd_wgmma", "B4xH16xS4096xD128-causal-bwd", 246.0, "sdpa_bwd_bf16_d128_s4096_causal", 490.0),
        r("06_flash_bwd", "B4xH16xS4096xD128-bwd", 7.0, "sdpa_bwd_f32_d128_s4096", 37.0),  # FP32
    ])
    fwd = ladder.ladder_table(cases, "attention")
    bwd = ladder.ladder_table(cases, "attention_backward")
    assert fwd["variant"].tolist() == ["03_flash_bf16", "05_flash_wgmma"]
    assert bwd["variant"].tolist() == ["07_flash_bwd_bf16", "08_flash_bwd_wgmma", "08_flash_bwd_wgmma"]
    np.testing.assert_allclose(bwd["ratio"], [126 / 568, 257 / 568, 246 / 490])
    # a forward ceiling never makes a backward rung, nor the other way round
    assert not ladder._is_library_ceiling("sdpa_bf16_d128_s4096", "attention_backward")
    assert not ladder._is_library_ceiling("sdpa_bwd_bf16_d128_s4096", "attention")
    assert ladder.peak(pd.DataFrame([{"variant": "bf16_peak", "value": 989.0}]), "attention_backward") is None
    fig = ladder.ladder_figure(bwd, "attention_backward")
    assert [ax.get_title() for ax in fig.axes] == ["B4xH16xS4096xD128-bwd", "B4xH16xS4096xD128-causal-bwd"]
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["torch SDPA backward BF16 568.0 TFLOP/s (same run)"]
