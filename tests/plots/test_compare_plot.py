"""The regression gate's figure (analysis/compare.py): the numbers it draws, SLOWER in red, and the PNG
written whole under the folder asked for."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import compare as acompare
from harness.measuring import compare as hc


def _table() -> pd.DataFrame:
    base = pd.DataFrame({"program": ["square"] * 3 + ["grayscale"], "variant": ["01", "02", "03", "01"],
                         "size": ["2^24"] * 3 + ["4096x4096"], "ceiling": ["memcpy"] * 4, "unit": ["GB/s"] * 4,
                         "ratio": [0.8, 0.9, 1.0, 0.5], "ratio_p25": [0.79, 0.89, 0.99, 0.49],
                         "ratio_p75": [0.81, 0.91, 1.01, 0.51]})
    new = base.iloc[:3].copy()
    new.loc[0, ["ratio", "ratio_p25", "ratio_p75"]] = [0.6, 0.59, 0.61]  # 01: SLOWER
    new.loc[1, ["ratio", "ratio_p25", "ratio_p75"]] = [1.2, 1.19, 1.21]  # 02: FASTER
    return hc.compare(base, new)


def test_points_are_over_bases_median():
    pts = acompare.points(_table())
    assert list(pts["verdict"]) == [hc.SLOWER, hc.FASTER, hc.SAME, hc.ONLY_BASE]
    assert pts["x_base"].tolist() == pytest.approx([1.0] * 4)
    assert pts["x_new"].iloc[:3].tolist() == pytest.approx([0.75, 1.2 / 0.9, 1.0])
    assert pts.loc[0, "x_new_hi"] < pts.loc[0, "x_base_lo"]  # what SLOWER means, drawn
    assert np.isnan(pts.loc[3, "x_new"])
    assert list(pts["colour"]) == [acompare.COLOURS[hc.SLOWER], acompare.COLOURS[hc.FASTER],
                                   acompare.COLOURS[hc.SAME], acompare.UNCOMPARED]


def test_the_figure_marks_the_slower_row_red(tmp_path):
    fig = acompare.figure(_table(), "t")
    square = next(ax for ax in fig.axes if ax.get_title(loc="left") == "square")
    ticks = {t.get_text(): t.get_color() for t in square.get_yticklabels()}
    assert ticks["01 2^24"] == acompare.COLOURS[hc.SLOWER] and ticks["03 2^24"] == "black"
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "SLOWER -25.0%" in texts and "only in BASE" in texts
    assert "1 SLOWER, 1 FASTER, 1 SAME" in fig._suptitle.get_text()


def test_plot_writes_one_png_whole(tmp_path):
    out = acompare.plot(_table(), tmp_path / "plots")
    assert out == tmp_path / "plots" / "compare.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["compare.png"]  # no temporary left
