"""The repeatability table and figure (analysis/repeat.py) from known `invoke bench --repeat` rows: the
spread arithmetic and its edges, the row order, where each run's point is drawn, the colours, the files."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgba
from matplotlib.container import ErrorbarContainer

from analysis import repeat


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test draws several figures; close them so the run does not pile up open figures."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def long_rows():
    """Three runs of five cases, written run after run as --repeat writes them. square is seen first, so
    a sorted groupby would put matmul first. Per case (ratios over the first, second and third run):
      square 01_naive 2^24     1.00 1.03 1.01   spread exactly 3%: within
      square 03_vec 2^24       0.50 0.52 0.50   4%: outside (held to the goal: red)
      matmul 09_tuned 4096^3   0.90 nan  0.91   a run has no ratio: no spread, not within (red)
      matmul 01_naive 1024^3   0.10 0.20 0.10   100%, but not held to the goal (grey)
      square 02_zero 2^24      0.0  0.8  0.8    a zero ratio: no spread
    """
    cases = [("square", "01_naive", "2^24", "GB/s", "memcpy", True, [1.00, 1.03, 1.01]),
             ("square", "03_vec", "2^24", "GB/s", "memcpy", True, [0.50, 0.52, 0.50]),
             ("matmul", "09_tuned", "4096^3", "TFLOP/s", "cublas", True, [0.90, np.nan, 0.91]),
             ("matmul", "01_naive", "1024^3", "TFLOP/s", "cublas", False, [0.10, 0.20, 0.10]),
             ("square", "02_zero", "2^24", "GB/s", "memcpy", True, [0.0, 0.8, 0.8])]
    rows = []
    for run in (1, 2, 3):
        for program, variant, size, unit, ceiling, goal, ratios in cases:
            r = ratios[run - 1]
            rows.append(dict(program=program, variant=variant, size=size, unit=unit, ceiling=ceiling, run=run,
                             ratio=r, ratio_p25=r * 0.99, ratio_p75=r * 1.02, goal=goal,
                             device="NVIDIA H100 80GB HBM3", date="2026-11-24T10:00:00"))
    return pd.DataFrame(rows)


def test_summary_arithmetic_and_edges():
    s = repeat.summary(long_rows())
    assert list(s.columns) == ["program", "variant", "size", "unit", "ceiling", "goal", "runs", "ratio_median",
                               "ratio_min", "ratio_max", "spread_pct", "within"]
    by = s.set_index(["program", "variant"])
    first = s.iloc[0]
    assert (first["program"], first["variant"], first["unit"], first["ceiling"]) == ("square", "01_naive", "GB/s",
                                                                                      "memcpy")
    assert first["runs"] == 3 and first["ratio_median"] == pytest.approx(1.01)
    assert (first["ratio_min"], first["ratio_max"]) == (1.00, 1.03)
    assert first["spread_pct"] == pytest.approx(3.0) and bool(first["within"])  # exactly 3% is within
    vec = by.loc[("square", "03_vec")]
    assert vec["spread_pct"] == pytest.approx(4.0) and not vec["within"]
    tuned = by.loc[("matmul", "09_tuned")]  # a missing ratio: the others still give median/min/max, the spread is undefined
    assert math.isnan(tuned["spread_pct"]) and not tuned["within"] and tuned["runs"] == 3
    assert tuned["ratio_median"] == pytest.approx(0.905) and (tuned["ratio_min"], tuned["ratio_max"]) == (0.90, 0.91)
    zero = by.loc[("square", "02_zero")]  # a zero ratio would make the spread infinite: undefined instead
    assert math.isnan(zero["spread_pct"]) and not zero["within"] and zero["ratio_min"] == 0.0
    naive = by.loc[("matmul", "01_naive")]
    assert naive["spread_pct"] == pytest.approx(100.0) and not naive["within"] and not naive["goal"]
    assert s["goal"].dtype == bool and s["within"].dtype == bool and s["runs"].dtype.kind == "i"


def test_summary_tolerance_edges():
    def one(ratios, **kw):
        long = pd.DataFrame({"program": "p", "variant": "v", "size": "1", "unit": "GB/s", "ceiling": "memcpy",
                             "run": range(1, len(ratios) + 1), "ratio": ratios, "goal": True})
        return repeat.summary(long, **kw).iloc[0]

    assert one([1.0, 1.03])["within"]  # 3.0000000000000027% in floating point: still exactly at the goal
    assert not one([1.0, 1.0300001])["within"]
    assert one([2.0, 2.06, 2.02])["within"]
    assert not one([1.0, 1.03], tolerance_pct=2.0)["within"]
    assert one([1.0, 1.05], tolerance_pct=5.0)["within"]
    assert not one([-1.0, -1.01])["within"] and math.isnan(one([-1.0, -1.01])["spread_pct"])
    only = one([0.7])
    assert only["spread_pct"] == 0.0 and only["within"] and only["runs"] == 1


def test_summary_keeps_the_order_cases_first_appear_in():
    s = repeat.summary(long_rows())
    assert list(zip(s["program"], s["variant"])) == [("square", "01_naive"), ("square", "03_vec"),
                                                     ("matmul", "09_tuned"), ("matmul", "01_naive"),
                                                     ("square", "02_zero")]
    # Shuffled rows: the order follows the first appearance, not the sort order.
    long = long_rows().iloc[::-1]
    assert list(repeat.summary(long)["variant"]) == ["02_zero", "01_naive", "09_tuned", "03_vec", "01_naive"]


def test_summary_from_the_csv_round_trip(tmp_path):
    path = tmp_path / "repeat-h100-80gb-hbm3-20261124T100000.csv"
    long_rows().to_csv(path, index=False)
    s = repeat.summary(repeat.read_checked(path))
    assert s["spread_pct"].iloc[:2].tolist() == pytest.approx([3.0, 4.0])
    assert s["goal"].tolist() == [True, True, True, False, True] and s["within"].tolist()[:2] == [True, False]
    bench_csv = tmp_path / "bench.csv"
    long_rows().drop(columns=["run"]).to_csv(bench_csv, index=False)
    with pytest.raises(ValueError, match="no column.s. run"):
        repeat.read_checked(bench_csv)


def _points(ax, label="_runs"):
    """(row, x, edge colour) of every run's point drawn on ax (label "_off the axis": the triangles at
    the edge for runs too far off), rows by their y position."""
    out = []
    for coll in ax.collections:
        if coll.get_label() == label:
            edges = coll.get_edgecolors()
            for i, (x, y) in enumerate(coll.get_offsets()):
                out.append((int(round(y)), float(x), tuple(edges[i % len(edges)])))
    return out


def _panel(fig, program):
    return next(ax for ax in fig.axes if ax.get_title(loc="left") == program)


def test_figure_points_are_ratio_over_the_rows_median():
    long = long_rows()
    fig = repeat.figure(long)
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["square", "matmul"]  # one panel per program
    sq = _panel(fig, "square")
    assert [t.get_text() for t in sq.get_yticklabels()] == ["square 01_naive 2^24", "square 03_vec 2^24",
                                                            "square 02_zero 2^24"]
    assert sq.get_xlabel() == "" and fig.axes[-1].get_xlabel().startswith("ratio / median of runs")
    got = sorted((row, round(x, 12)) for row, x, _ in _points(sq))
    expect = sorted([(0, round(r / 1.01, 12)) for r in (1.00, 1.03, 1.01)]
                    + [(1, round(r / 0.50, 12)) for r in (0.50, 0.52, 0.50)]
                    + [(2, 1.0), (2, 1.0)])  # 02_zero: 0.8 / 0.8 twice; its 0.0 run is off the axis (below)
    assert got == expect
    mm = _panel(fig, "matmul")
    got = sorted((row, round(x, 12)) for row, x, _ in _points(mm))
    # 09_tuned: its NaN run is not drawn. 01_naive: 0.1, 0.2, 0.1 over a median of 0.1 -> 1, 2, 1.
    assert got == [(0, round(0.90 / 0.905, 12)), (0, round(0.91 / 0.905, 12)), (1, 1.0), (1, 1.0)]
    # The run at 2x its median (and 02_zero's 0.0 run) would flatten every other row: each is a triangle
    # at the edge of the axis, with its value written beside it.
    lo, hi = sq.get_xlim()
    assert hi - 1 == pytest.approx(1 - lo) and hi - 1 == pytest.approx(repeat.CLIP)
    (row, x, _), = _points(mm, "_off the axis")
    assert row == 1 and lo < x <= hi and x > 1.2 and "2.00" in [t.get_text() for t in mm.texts]
    (row, x, _), = _points(sq, "_off the axis")
    assert row == 2 and lo <= x < 0.8 and "0.00" in [t.get_text() for t in sq.texts]
    # Without a wild run the axis stays at twice the tolerance, so the band is wide enough to read.
    calm = long_rows()
    calm = calm[(calm["variant"] == "09_tuned") | ((calm["program"] == "square") & (calm["variant"] == "01_naive"))]
    assert repeat.figure(calm).axes[0].get_xlim() == pytest.approx((0.94, 1.06))


def test_figure_draws_each_runs_spread_and_the_band():
    long = long_rows()
    fig = repeat.figure(long)
    sq = _panel(fig, "square")
    segs = sorted((round(s[0][1]), s[0][0], s[1][0]) for c in sq.containers if isinstance(c, ErrorbarContainer)
                  for lc in c.lines[2] for s in lc.get_segments())
    first = [s for s in segs if s[0] == 0]  # square 01_naive: p25 = 0.99 r, p75 = 1.02 r, over the median 1.01
    np.testing.assert_allclose([s[1:] for s in first], sorted([(0.99 * r / 1.01, 1.02 * r / 1.01)
                                                               for r in (1.00, 1.03, 1.01)]))
    band = sq.patches[0]
    xs = band.get_patch_transform().transform(band.get_path().vertices)[:, 0]
    assert (xs.min(), xs.max()) == pytest.approx((0.97, 1.03))
    band = repeat.figure(long, tolerance_pct=5.0).axes[0].patches[0]
    xs = band.get_patch_transform().transform(band.get_path().vertices)[:, 0]
    assert (xs.min(), xs.max()) == pytest.approx((0.95, 1.05))
    # Without the p25/p75 columns (or with NaN in them): points, no bars, no error.
    old = long.drop(columns=["ratio_p25", "ratio_p75"])
    fig = repeat.figure(old)
    assert not any(isinstance(c, ErrorbarContainer) for ax in fig.axes for c in ax.containers)
    assert len(_points(_panel(fig, "square"))) == 8


def test_figure_colours_a_failing_goal_row_red_and_an_excused_row_grey():
    fig = repeat.figure(long_rows())
    red, grey, blue = to_rgba(repeat.RED), to_rgba(repeat.GREY), to_rgba(repeat.BLUE)
    assert red[0] > 0.7 and red[1] < 0.3 and red[2] < 0.3  # RED is red
    sq, mm = _panel(fig, "square"), _panel(fig, "matmul")
    colours = {}
    for ax, names in ((sq, ["01_naive", "03_vec", "02_zero"]), (mm, ["09_tuned", "01_naive"])):
        for row, _, edge in _points(ax):
            colours.setdefault((ax.get_title(loc="left"), names[row]), set()).add(edge)
    assert colours[("square", "01_naive")] == {blue}  # within 3%
    assert colours[("square", "03_vec")] == {red}  # 4%, held to the goal
    assert colours[("matmul", "09_tuned")] == {red}  # a run without a ratio fails the goal
    assert colours[("matmul", "01_naive")] == {grey}  # 100%, but not held to the goal
    ticks = {t.get_text(): to_rgba(t.get_color()) for t in sq.get_yticklabels()}
    assert ticks["square 03_vec 2^24"] == red and ticks["square 01_naive 2^24"] != red
    spread_texts = [t.get_text() for t in sq.texts]
    assert "3.0%  (3 runs)" in spread_texts and "4.0%  (3 runs)" in spread_texts
    assert "1 of 4 rows held to the ±3% goal are within it" in fig.get_suptitle()


def test_figure_of_a_hundred_rows_grows_tall():
    long = pd.DataFrame([dict(program=f"p{i % 4}", variant=f"v{i}", size="2^24", unit="GB/s", ceiling="memcpy",
                              run=run, ratio=1.0 + 0.01 * run, goal=True) for run in (1, 2) for i in range(100)])
    fig = repeat.figure(long)
    assert len(fig.axes) == 4 and sum(len(ax.get_yticks()) for ax in fig.axes) == 100
    assert fig.get_figheight() > 25 and repeat.figure(long.iloc[:8]).get_figheight() < 8


def test_plot_writes_png_and_svg(tmp_path):
    path = tmp_path / "repeat-h100-80gb-hbm3-20261124T100000.csv"
    long_rows().to_csv(path, index=False)
    paths = repeat.plot(path, tmp_path / "plots")
    assert paths == [tmp_path / "plots" / "repeat.png", tmp_path / "plots" / "repeat.svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[0].stat().st_size > 20_000
    svg = paths[1].read_text()
    assert "<svg" in svg and "square 03_vec 2^24" in svg and "NVIDIA H100 80GB HBM3" in svg
    from_frame = repeat.plot(long_rows(), tmp_path / "f")
    assert [p.name for p in from_frame] == ["repeat.png", "repeat.svg"] and all(p.exists() for p in from_frame)
    # A looser tolerance reaches the figure: 03_vec's 4% is then within, and the title says so.
    repeat.plot(long_rows(), tmp_path / "t5", tolerance_pct=5.0)
    assert "2 of 4 rows held to the ±5% goal" in (tmp_path / "t5" / "repeat.svg").read_text()


def test_empty_and_filtered_inputs():
    empty = long_rows().iloc[:0]
    s = repeat.summary(empty)
    assert len(s) == 0 and list(s.columns) == list(repeat.summary(long_rows()).columns)
    assert len(repeat.figure(empty).axes) == 1
    # A summary filtered to one program keeps its row labels (2, 3); the figure still pairs rows by position.
    long = long_rows()
    s = repeat.summary(long)
    mm = s[s["program"] == "matmul"]
    assert mm.index.tolist() == [2, 3]
    fig = repeat.figure(long[long["program"] == "matmul"], mm)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["matmul 09_tuned 4096^3", "matmul 01_naive 1024^3"]
    assert sorted(r for r, _, _ in _points(fig.axes[0])) == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="no column.s. ratio"):
        repeat.summary(long.drop(columns=["ratio"]))
