"""The bench table's arithmetic (rounds, ratios and their spread: harness.measuring.bench.plan_rounds and
assemble), the repeat table, its CSV round trip,
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
from harness import programs
from harness.base import paths
from harness.base.errors import NotBuilt
from harness.compile import build
from harness.measuring import bench, results_csv, timing

FIX = Path(__file__).parent.parent / "fixtures"


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
    args = dict(program="p", variant="01_v", size="2^20", setup="harness.programs.square:bench_setup",
                unit="GB/s", amount=8e9, ceiling="memcpy", target=0.9)
    args.update(kw)
    return bench.BenchCase(**args)


def _t(ms, clock=None, work=None):
    cond = {} if clock is None else {"sm_clock_mean_mhz": clock, "sm_clock_min_mhz": clock, "sm_clock_max_mhz": clock,
                                     "power_mean_w": 500.0, "power_max_w": 600.0, "temp_max_c": 60.0,
                                     "clock_reasons": "sw_power_cap"}
    return timing.Timing(ms, ms * 0.99, ms * 1.01, samples=100, noise=0.01, conditions=cond, work=work)


def test_plan_interleaves_each_case_between_two_ceiling_measurements():
    cases = [_case(variant="a"), _case(variant="b"), _case(variant="c", ceiling="fp32", unit="TFLOP/s")]
    resolved = {"memcpy": bench.TimedCeiling("memcpy", "GB/s", 2e9, "harness.measuring.bench:memcpy_setup", {"nbytes": 1 << 30}),
                "fp32": bench.Ceiling("fp32", 60.0, "TFLOP/s")}
    cases[0].kwargs = {"variant": "a", "n": 64}
    items, layout = bench.plan_rounds(cases, resolved, rounds=2, warmup_s=0.1)
    assert [it.key for it in items] == [
        "ceil:memcpy:r0:0", "case:0:r0", "ceil:memcpy:r0:1", "case:1:r0", "ceil:memcpy:r0:2",
        "ceil:memcpy:r1:0", "case:0:r1", "ceil:memcpy:r1:1", "case:1:r1", "ceil:memcpy:r1:2",
        "case:2:r0", "case:2:r1"]  # a number-only ceiling (fp32) is not timed
    assert layout[1] == [("case:1:r0", "ceil:memcpy:r0:1", "ceil:memcpy:r0:2"),
                         ("case:1:r1", "ceil:memcpy:r1:1", "ceil:memcpy:r1:2")]
    assert layout[2] == [("case:2:r0", None, None), ("case:2:r1", None, None)]
    # The long warm-up only where a setup is new; later rounds find the GPU busy already.
    warm = {it.key: it.warmup_s for it in items}
    assert warm["ceil:memcpy:r0:0"] == warm["case:0:r0"] == warm["case:2:r0"] == 0.1
    assert warm["ceil:memcpy:r0:1"] == warm["case:0:r1"] == warm["ceil:memcpy:r1:0"] == bench.SETTLED_WARMUP_S
    # Each case names its own setup: the timing child imports only that program module.
    assert items[1].target == "harness.programs.square:bench_setup" and items[1].kwargs == {"variant": "a", "n": 64}
    with pytest.raises(ValueError, match="rounds"):
        bench.plan_rounds(cases, resolved, rounds=0, warmup_s=0.1)


def test_assemble_takes_each_rounds_ratio_against_the_ceilings_around_it():
    """8e9 bytes a launch: 2 ms = 4000 GB/s. The ceiling (2e9 bytes) drifts from 4000 to 5000 GB/s
    during a round; each case's ratio uses the mean of the two measurements around it."""
    cases = [_case(variant="a", target=0.75), _case(variant="b")]
    ceil = bench.TimedCeiling("memcpy", "GB/s", 2e9, "t:f", {}, "DtoD", same_as=("p", "b", "2^20"))
    resolved = {"memcpy": ceil}
    items, layout = bench.plan_rounds(cases, resolved, rounds=3, warmup_s=0.1)
    ms_of_gbs = lambda gbs: 2e9 / (gbs * 1e9) * 1e3  # noqa: E731
    tim = {}
    for r, case_ms in enumerate((2.0, 2.0, 2.5)):
        tim[f"ceil:memcpy:r{r}:0"] = _t(ms_of_gbs(4000), clock=1980)
        tim[f"ceil:memcpy:r{r}:1"] = _t(ms_of_gbs(6000), clock=1980)
        tim[f"ceil:memcpy:r{r}:2"] = _t(ms_of_gbs(5000), clock=1980)
        tim[f"case:0:r{r}"] = _t(case_ms, clock=1700 if r == 2 else 1980)
        tim[f"case:1:r{r}"] = _t(8e9 / 5500e9 * 1e3, clock=1980)
    df, measured = bench.assemble(cases, resolved, layout, tim, "nvbench test")
    a, b = df.iloc[0], df.iloc[1]
    # case a: 4000/5000, 4000/5000, 3200/5000 -> median 0.8, p25 0.72, p75 0.8
    assert a["ratio"] == pytest.approx(0.8) and a["ratio_p25"] == pytest.approx(0.72)
    assert a["ratio_p75"] == pytest.approx(0.8) and a["rounds"] == 3
    assert a["value"] == pytest.approx(4000.0) and a["ceiling_value"] == pytest.approx(5000.0)
    assert bool(a["meets_target"]) is True and a["engine"] == "nvbench test"
    assert b["ratio"] == pytest.approx(1.0) and b["ratio_p25"] == pytest.approx(1.0)  # 5500 / mean(6000, 5000)
    # The GPU's conditions: case a's third round ran at 1700 MHz, under 90% of the 1980 seen.
    assert a["sm_clock_min_mhz"] == 1700 and bool(a["throttled"]) and not bool(b["throttled"])
    assert a["clock_reasons"] == "sw_power_cap" and a["samples"] == 300
    # The ceiling's own figure: the median of every measurement around a case, with its spread.
    c = measured["memcpy"]
    assert c.value == pytest.approx(5000.0) and c.p25 == pytest.approx(4000.0) and c.p75 == pytest.approx(6000.0)
    assert c.measurements == 9  # three a round, each counted once though it stands beside two cases
    cons = bench.consistency(df, resolved, measured)
    assert cons.iloc[0]["row"] == "p b 2^20" and cons.iloc[0]["diff_pct"] == pytest.approx(10.0)
    lines = bench.throttle_warnings(df)
    assert len(lines) == 1 and "p a 2^20" in lines[0]


def test_assemble_static_and_missing_ceilings_and_run_time_work():
    cases = [_case(unit="TFLOP/s", amount=2e12, ceiling="fp32"),
             _case(unit="Giter/s", amount=0.0, ceiling="fp32_inst", ceiling_divisor=4.0),
             _case(ceiling="gone")]
    resolved = {"fp32": bench.Ceiling("fp32", 50.0, "TFLOP/s"), "fp32_inst": bench.Ceiling("fp32_inst", 4000.0, "Ginst/s"),
                "gone": None}
    _, layout = bench.plan_rounds(cases, resolved, rounds=1, warmup_s=0.1)
    tim = {"case:0:r0": _t(1.0), "case:1:r0": _t(1.0, work=1e9), "case:2:r0": _t(1.0)}
    df, measured = bench.assemble(cases, resolved, layout, tim)
    assert df.iloc[0]["value"] == pytest.approx(2000.0) and df.iloc[0]["ratio"] == pytest.approx(40.0)
    # Mandelbrot-style: the work is known only at run time; an instruction ceiling divided by 4.
    assert df.iloc[1]["value"] == pytest.approx(1000.0) and df.iloc[1]["ceiling_value"] == 1000.0
    assert df.iloc[1]["ratio"] == pytest.approx(1.0)
    assert np.isnan(df.iloc[2]["ratio"]) and df.iloc[2]["meets_target"] is None
    assert set(measured) == {"fp32", "fp32_inst"}
    # A case whose measurement is missing keeps its row, with NaNs.
    df, _ = bench.assemble(cases[:1], resolved, layout, {})
    assert np.isnan(df.iloc[0]["value"]) and np.isnan(df.iloc[0]["ratio"])
    # ... and not_measured writes why into that row's note (the CSV keeps it) and names the round by its
    # case, not by the plan's key; the measured rows' notes are left alone.
    df, _ = bench.assemble(cases, resolved, layout, {k: v for k, v in tim.items() if k != "case:2:r0"})
    before = df["note"].tolist()
    why = {"case:2:r0": "NVBench kept no sample (it drops those taken under 50% of the default SM clock)"}
    named = bench.not_measured(df, layout, why, {"case:2:r0": "prog v3 size (round 1/1)"})
    assert named == {"prog v3 size (round 1/1)": why["case:2:r0"]}
    assert df.iloc[2]["note"].endswith("not measured: " + why["case:2:r0"])
    assert df["note"].tolist()[:2] == before[:2]


def test_repeat_goal_rows():
    assert bench.repeat_goal("gemm_tc", "2048^3", "TFLOP/s") and not bench.repeat_goal("matmul", "1024^3", "TFLOP/s")
    assert not bench.repeat_goal("matmul", "5120x256x5120", "TFLOP/s")
    assert bench.repeat_goal("attention", "B4xH16xS4096xD64-causal", "TFLOP/s")
    assert not bench.repeat_goal("attention", "B4xH16xS1024xD64", "TFLOP/s")
    assert bench.repeat_goal("square", "2^24", "GB/s") and not bench.repeat_goal("square", "2^20", "GB/s")
    assert bench.repeat_goal("grayscale", "4096x4096", "GB/s") and not bench.repeat_goal("grayscale", "1000x1000", "GB/s")
    assert not bench.repeat_goal("mandelbrot", "8192x8192x256", "Giter/s")


def test_repeat_frame_is_one_row_per_case_and_run():
    one = pd.DataFrame([{"program": "gemm_tc", "variant": "03_wgmma", "size": "4096^3", "unit": "TFLOP/s",
                         "ceiling": "cublas_bf16_4096", "ratio": 0.92, "ratio_p25": 0.91, "ratio_p75": 0.93,
                         "value": 690.0, "throttled": False}])
    two = one.assign(ratio=0.94)
    long = bench.repeat_frame([one, two], {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-24T10:00:00"})
    assert long["run"].tolist() == [1, 2] and long["ratio"].tolist() == [0.92, 0.94]
    assert long["goal"].tolist() == [True, True] and set(long["device"]) == {"NVIDIA H100 80GB HBM3"}


def test_an_unbuilt_program_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "BUILD", tmp_path)
    with pytest.raises(NotBuilt, match=r"libsquare.so, .*libdevice_info.so are missing: run "
                       r"`invoke build --programs square,device_info` \(or `invoke build` for every program\)$"):
        bench.check_built(["square", "device_info"])
    # The message names only what is missing, and the one command that builds it.
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libdevice_info.so").write_bytes(b"")
    with pytest.raises(NotBuilt, match=r"libsquare.so is missing: run `invoke build --programs square` "):
        bench.check_built(["square", "device_info"])


def test_the_libraries_a_bench_needs_are_its_programs_and_its_ceilings_owners():
    """The registry names them for check_built: a copy-like case needs only its own library (memcpy is
    the bench's own ceiling), an instruction-bound one device_info's too (its fp32 peaks), a GEMM matmul's
    (cuBLAS); the measuring layer itself names no program."""
    assert programs.bench_libraries([_case(program="square")]) == ["square"]
    assert programs.bench_libraries([_case(program="mandelbrot", ceiling="fp32_inst")]) == ["mandelbrot", "device_info"]
    assert programs.bench_libraries([_case(program="gemm_tc", ceiling="fp32"), _case(program="attention",
                                     ceiling="cublas")]) == ["gemm_tc", "attention", "device_info", "matmul"]
    assert {"fp32", "fp32_inst"} <= set(programs.ceilings(["device_info"])) and "memcpy" in bench.BUILT_IN


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


@pytest.fixture
def close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _spread_segments(ax):
    """(y, x_from, x_to) of every horizontal error bar drawn on ax."""
    from matplotlib.container import ErrorbarContainer

    out = []
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer):
            for lc in c.lines[2]:
                out += [(seg[0][1], seg[0][0], seg[1][0]) for seg in lc.get_segments()]
    return sorted(out)


def test_ratio_bars_carry_the_per_round_spread(close_figures):
    cases, ceil = _table()
    cases["ratio_p25"] = [0.78, 0.88, 0.24, np.nan]  # grayscale: no spread measured
    cases["ratio_p75"] = [0.83, 0.90, 0.27, 0.70]
    cases["rounds"] = 5
    rt = abench.ratio_table(cases)
    assert rt["ratio_p25"].tolist()[:3] == [0.78, 0.88, 0.24] and rt["rounds"].tolist() == [5] * 4
    sp = abench.spread_bars(rt[rt["family"] == "memcpy"].reset_index(drop=True))
    assert sp["position"].tolist() == [0, 1]  # the grayscale row (position 2) has no p25
    fig = abench.ratio_figure(cases, ceilings=ceil)
    mem, cub = fig.axes
    # One bar per row from p25 to p75, at the row's own bar; none for the row without a p25.
    np.testing.assert_allclose(_spread_segments(mem), [(0, 0.78, 0.83), (1, 0.88, 0.90)])
    np.testing.assert_allclose(_spread_segments(cub), [(0, 0.24, 0.27)])
    assert [p.get_width() for p in mem.patches] == pytest.approx([0.80, 0.89, 0.67])  # the bars are unchanged
    texts = [t.get_text() for t in mem.texts]
    assert "0.80  (2684 GB/s)  p25-p75 0.780-0.830" in texts
    assert "0.67  (2236 GB/s)" in texts
    assert "p25-p75 of the per-round ratios" in {t.get_text() for t in fig.legends[0].get_texts()}
    # A p75 beyond every ratio still fits on the axis.
    cases.loc[0, "ratio_p75"] = 2.5
    assert abench.ratio_figure(cases, ceilings=ceil).axes[0].get_xlim()[1] >= 2.5


def test_ratio_bars_without_spread_columns_or_with_nan_spreads(close_figures):
    cases, ceil = _table()
    fig = abench.ratio_figure(cases, ceilings=ceil)
    assert all(_spread_segments(ax) == [] for ax in fig.axes)
    assert "p25-p75 of the per-round ratios" not in {t.get_text() for t in fig.legends[0].get_texts()}
    cases["ratio_p25"], cases["ratio_p75"] = np.nan, np.nan
    fig = abench.ratio_figure(cases, ceilings=ceil)
    assert all(_spread_segments(ax) == [] for ax in fig.axes)
    assert [p.get_width() for p in fig.axes[0].patches] == pytest.approx([0.80, 0.89, 0.67])


def test_ratio_bars_of_the_recorded_h100_bench_have_no_spread(tmp_path, close_figures):
    """bench/results/h100's committed CSV predates the rounds: no ratio_p25/p75, so no error bars,
    and every bar and file as before."""
    path = paths.RESULTS_DIR / "h100" / "history" / "bench-h100-80gb-hbm3-20261123T134326.csv"
    cases, ceil = abench.load(path)
    assert "ratio_p25" not in cases
    fig = abench.ratio_figure(cases, ceilings=ceil)
    assert all(_spread_segments(ax) == [] for ax in fig.axes)
    rt = abench.ratio_table(cases)
    expected = [r for fam in dict.fromkeys(rt["family"]) for r in rt.loc[rt["family"] == fam, "ratio"].fillna(0.0)]
    assert [p.get_width() for ax in fig.axes for p in ax.patches] == pytest.approx(expected)
    assert [p.name for p in abench.plot(path, tmp_path)] == ["bench_ratios.png", "bench_roofline.png"]


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
    path = results_csv.write(cases, meta, ceils, dest=tmp_path / "b.csv")
    c2, k2 = abench.load(path)
    assert len(c2) == 4 and len(k2) == 2 and (c2["device"] == "NVIDIA H200").all()
    assert c2["ratio"].tolist() == pytest.approx(cases["ratio"].tolist())
    paths = abench.plot(path, tmp_path / "plots")
    assert [p.name for p in paths] == ["bench_ratios.png", "bench_roofline.png"]
    assert all(p.stat().st_size > 5000 for p in paths)
    assert results_csv.latest(tmp_path) == path
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
    before = set(paths.BUILD_BENCH.glob("*.csv")) if paths.BUILD_BENCH.exists() else set()
    r = subprocess.run([sys.executable, "-m", "invoke", "bench", "--quick"], cwd=build.ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    new = set(paths.BUILD_BENCH.glob("*.csv")) - before
    assert len(new) == 1
    cases, ceil = abench.load(new.pop())
    assert len(cases) > 0 and len(ceil) > 0 and np.isfinite(cases["ratio"]).any()


@pytest.mark.slow
@pytest.mark.gpu
def test_two_runs_agree_within_5_percent():
    """Repeatability, on a small subset: two back-to-back runs of rows held to the goal
    (a GEMM against cuBLAS at 2048^3, a copy-like kernel against memcpy at 2^24) give ratios within
    5% of each other. (The committed repeat CSV holds the full suite to 3%.)"""
    if timing.engine_version() is None:
        pytest.skip(f"cuda-bench is not installed: {timing.INSTALL_HINT}")
    wanted = {("gemm_tc", "03_wgmma", "2048^3"), ("gemm_tc", "02_mma_sync", "2048^3"),
              ("square", "03_vectorized", "2^24"), ("square", "01_naive", "2^24")}
    cases = [c for c in programs.bench_cases(["gemm_tc", "square"], quick=True)
             if (c.program, c.variant, c.size) in wanted]
    if not any(c.program == "gemm_tc" for c in cases):
        cases = [c for c in cases if c.program == "square"]  # no sm_90a or no cuBLAS: the copy rows alone
    assert cases
    runs = [bench.run(cases, programs.ceilings(), quick=True)[0] for _ in range(2)]
    for (_, a), (_, b) in zip(runs[0].iterrows(), runs[1].iterrows()):
        assert bench.repeat_goal(a["program"], a["size"], a["unit"])
        assert np.isfinite(a["ratio"]) and np.isfinite(b["ratio"]), (a["variant"], a["ratio"], b["ratio"])
        spread = max(a["ratio"], b["ratio"]) / min(a["ratio"], b["ratio"]) - 1
        assert spread <= 0.05, f"{a['program']} {a['variant']} {a['size']}: {a['ratio']:.4f} then {b['ratio']:.4f}"


def test_gpu_workers_share_whole_ceiling_groups():
    """invoke bench --gpus: each worker takes every n-th ceiling group whole, so a case is timed beside
    its own ceiling on its own GPU, and together the workers cover every case once."""
    from harness.user import bench_worker

    cases = [_case(variant=v, ceiling=c) for v, c in
             [("a", "memcpy"), ("b", "memcpy"), ("c", "cublas"), ("d", "fp32"), ("e", "cublas")]]
    shares = [bench.share(cases, i, 2) for i in range(2)]
    assert [c.variant for c in shares[0]] == ["a", "b", "d"] and [c.variant for c in shares[1]] == ["c", "e"]
    assert sorted(c.variant for s in shares for c in s) == ["a", "b", "c", "d", "e"]
    assert bench_worker.main(["0"]) == 2  # usage, before anything is imported or timed


@pytest.mark.long
def test_every_bench_case_names_a_setup_the_timing_child_can_call():
    """Each case carries its own "module:function" and JSON keyword arguments; the child imports only
    that module and calls it with them, so both must resolve and bind here, without a GPU."""
    import inspect
    import json

    seen = 0
    for prog, mod in programs.bench_programs().items():
        for quick in (False, True):
            for c in mod.bench_cases(quick):
                assert c.setup.startswith(f"harness.programs.{prog}:"), c.setup
                inspect.signature(timing.resolve(c.setup)).bind(**c.kwargs)
                assert json.loads(json.dumps(c.kwargs)) == c.kwargs
                seen += 1
    assert seen > 0
    bad = _case(setup="harness.programs.square:bench_setup", kwargs={"variant": "a", "size": 64})
    with pytest.raises(TypeError):  # the check above fails on a keyword the target does not take
        inspect.signature(timing.resolve(bad.setup)).bind(**bad.kwargs)


def test_a_sized_memcpy_ceiling_is_the_copy_of_exactly_those_bytes():
    assert bench.memcpy_of(64 << 20) == "memcpy@64MiB" and bench.memcpy_of(4 * 4097) == "memcpy@16388B"
    for nbytes in (64 << 20, 4 * 4097, 1):
        ceil = bench.built_in(bench.memcpy_of(nbytes))(False)
        assert ceil.name == bench.memcpy_of(nbytes) and ceil.kwargs == {"nbytes": nbytes}
        assert ceil.amount == 2.0 * nbytes and ceil.unit == "GB/s"  # read plus written, as plain memcpy counts
    assert bench.built_in("memcpy")(True).kwargs == {"nbytes": bench.QUICK_MEMCPY_BYTES}
    for wrong in ("memcpy@", "memcpy@0MiB", "memcpy@12KiB", "memcpy@-4B", "memcpy@64MiB ", "nccl@64MiB"):
        assert bench.built_in(wrong) is None, wrong
    with pytest.raises(ValueError):
        bench.memcpy_of(0)
    # a program's own ceiling of that name would win over the built-in one: none declares one
    assert not [n for n in programs.ceilings() if bench.built_in(n) is not None]
