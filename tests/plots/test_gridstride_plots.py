"""analysis/gridstride.py: the DataFrames behind each figure hold the right numbers, and the PNGs
come out (open with Pillow, not blank). No GPU: the data are recorded traces and the simulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from analysis import gridstride as ag
from harness import programs
from harness.programs import grid_stride as gs

FIXTURES = Path(__file__).resolve().parents[2] / "cuda" / "grid_stride" / "fixtures"


def recorded(n: int) -> gs.GridStrideData:
    df = gs.parse_trace((FIXTURES / f"grid_stride_n{n}_b8_t32.txt").read_text())
    return gs.GridStrideData(gs.validate(df, n, 8, 32), n, 8, 32, simulated=False, device=df.attrs["device"])


def expected_counts(n: int, blocks: int, threads: int) -> np.ndarray:
    s = blocks * threads
    t = np.arange(s)
    return np.where(t < n, -(-(n - t) // s), 0).reshape(blocks, threads)


@pytest.mark.parametrize("n,blocks,threads", [(500, 8, 32), (100, 8, 32), (10000, 3, 128), (1, 1, 1), (1000, 7, 13)])
def test_heatmap_counts(n, blocks, threads):
    df = gs.simulate(n, blocks, threads)
    c = ag.counts(df, blocks, threads)
    assert c.shape == (blocks, threads)
    np.testing.assert_array_equal(c.to_numpy(), expected_counts(n, blocks, threads))
    assert c.to_numpy().sum() == n


def test_heatmap_counts_on_the_recorded_trace():
    c = ag.counts(recorded(500).frame, 8, 32)
    # 500 = 256 + 244: threads 0..243 get two elements, 244..255 (block 7, threads 20..31) one.
    assert (c.loc[:6] == 2).all().all()
    assert (c.loc[7, :19] == 2).all() and (c.loc[7, 20:] == 1).all()


def test_counts_not_the_courses_averaged_indexes():
    """The course's pivot_table defaulted to the mean of Element Index; a count is what the bar says."""
    df = recorded(500).frame
    mean = df.pivot_table(index="Block ID", columns="Thread in Block", values="Element Index")
    assert mean.loc[0, 0] == 128.0  # (0 + 256) / 2: an index, not a count
    assert ag.counts(df, 8, 32).loc[0, 0] == 2


@pytest.mark.parametrize("n,blocks,threads", [(500, 8, 32), (10000, 3, 128), (1000, 7, 13), (3, 1, 1)])
def test_stride_is_blocks_times_threads(n, blocks, threads):
    assert ag.stride(gs.simulate(n, blocks, threads)) == blocks * threads


def test_stride_on_the_recorded_trace():
    assert ag.stride(recorded(500).frame) == 256


def test_stride_unobservable_with_one_round():
    assert ag.stride(recorded(100).frame) is None


def test_strip_matrix():
    st = ag.strip(recorded(500).frame, 500, 8, 32)
    assert st.shape == (2, 256)
    np.testing.assert_array_equal(st.loc[0].to_numpy(), np.arange(256))
    np.testing.assert_array_equal(st.loc[1, :243].to_numpy(), np.arange(244))
    assert (st.loc[1, 244:] == -1).all()


def _check_png(p: Path):
    assert p.exists() and p.suffix == ".png"
    with Image.open(p) as im:
        im.load()
        assert im.size[0] > 300 and im.size[1] > 150
        a = np.asarray(im.convert("RGB"), dtype=np.int16)
    assert a.std() > 10  # not blank
    assert len(np.unique(a.reshape(-1, 3), axis=0)) > 20  # more than a background and a frame


def test_plots_from_the_recorded_trace(tmp_path, capsys):
    paths = ag.plot(recorded(500), tmp_path)
    assert [p.name.split("_")[-1] for p in paths] == ["scatter.png", "heatmap.png", "strip.png"]
    for p in paths:
        _check_png(p)
    assert capsys.readouterr().out == ""  # nothing printed: the stride is in the strip's title
    df = recorded(500)
    assert ag.stride_note(df.frame, 500, 8, 32) == "measured stride 256 = blocks x threads"


def test_plots_from_the_simulator_say_so(tmp_path, capsys):
    data = programs.viz_data("gridstride", n=100, blocks=8, threads=32, simulate=True)
    paths = ag.plot(data, tmp_path)
    for p in paths:
        _check_png(p)
        assert "_sim_" in p.name
    assert capsys.readouterr().out == ""
    assert ag.stride_note(data.frame, 100, 8, 32).startswith("no thread took a second element")
    assert ag._unpack(data)[-1] == "(simulated)"
    assert "(simulated)" in ag._title("x", 100, 8, 32, ag._unpack(data)[-1])
    assert "NVIDIA" in ag._unpack(recorded(100))[-1]


def test_plot_accepts_a_dataframe_with_attrs(tmp_path):
    df = gs.validate(gs.simulate(64, 2, 8), 64, 2, 8)
    df.attrs.update(n=64, blocks=2, threads=8, simulated=True)
    assert len(ag.plot(df, tmp_path)) == 3


def test_viz_dispatch_name():
    """`invoke viz gridstride` draws grid_stride's picture: its record names it, analysis/gridstride.py plots it."""
    assert programs.picture("gridstride").data is gs.viz_data and programs.picture_owner("gridstride") == "grid_stride"
    assert "gridstride" in programs.pictures()
    assert isinstance(gs.viz_data(n=10, blocks=1, threads=4, simulate=True).frame, pd.DataFrame)
