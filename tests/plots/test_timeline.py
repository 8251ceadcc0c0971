"""The block timeline (analysis/timeline.py, `invoke plot timeline`) on a real recording: one launch of
11_splitk_tail at 4096³ on an H100 (NOTES-matmul: the uneven tail cut), written by `matmul --timeline` from a build
with -DCUDALAB_TIMELINE. No GPU needed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis import timeline

FIXTURE = Path(__file__).parent.parent / "fixtures" / "timeline_11_splitk_tail_4096_h100.csv"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def test_the_recording_is_the_schedule_the_grid_order_asks_for():
    """[whole | heads | rests] at 4096³: 512 tiles of 128x256 on 132 SMs, 396 whole (3 rounds), the 116
    tail tiles each a head and a rest; every SM ran 3 whole tiles, then a head or a run of rests."""
    df = timeline.read_checked(FIXTURE)
    assert len(df) == 628 and df["sm"].nunique() == 132
    assert df["role"].value_counts().to_dict() == {"whole": 396, "head": 116, "rest": 116}
    assert sorted(df.loc[df.role == "head", "tile"]) == sorted(df.loc[df.role == "rest", "tile"]) == list(range(396, 512))
    seq = df.sort_values(["sm", "start_us"]).groupby("sm")["role"].apply(tuple)
    assert all(s[:3] == ("whole",) * 3 for s in seq)
    assert all(s[3:] == ("head",) or (len(s) > 3 and set(s[3:]) == {"rest"}) for s in seq)


def test_summary_numbers():
    df = timeline.read_checked(FIXTURE)
    s = timeline.summary(df)
    span = (df.end_us - df.start_us).sum()
    assert s["makespan_us"] == pytest.approx(df.end_us.max() - df.start_us.min())
    assert s["ideal_us"] == pytest.approx(span / 132)
    assert s["busy_fraction"] == pytest.approx(span / (132 * s["makespan_us"]))
    assert 0.95 < s["busy_fraction"] < 1.0 and s["ideal_us"] < s["makespan_us"]
    heads, rests, whole = (s["roles"][r] for r in ("head", "rest", "whole"))
    # 116 of 128 k-tiles against 12: the main loops' times are in that proportion, within 10%
    assert heads["mainloop_us"] / whole["mainloop_us"] == pytest.approx(116 / 128, rel=0.1)
    assert rests["mainloop_us"] / whole["mainloop_us"] == pytest.approx(12 / 128, rel=0.1)
    assert heads["first_start_us"] > whole["first_start_us"]


def test_small_known_table():
    """Two SMs, hand-made: makespan 100, busy (60 + 100 + 30) / 200, tail idle (100 - 90 + 0) / 2."""
    df = pd.DataFrame({"variant": "x", "m": 1, "n": 1, "k": 1, "block": [0, 1, 2], "sm": [0, 1, 0],
                       "role": ["whole", "whole", "rest"], "tile": [0, 1, 0],
                       "start_us": [0.0, 0.0, 60.0], "loop_end_us": [50.0, 95.0, 85.0], "end_us": [60.0, 100.0, 90.0]})
    s = timeline.summary(df)
    assert s["makespan_us"] == 100 and s["sms"] == 2 and s["ideal_us"] == 95
    assert s["busy_fraction"] == pytest.approx(190 / 200) and s["tail_idle_us"] == pytest.approx(5)
    assert s["roles"]["rest"]["after_us"] == 5


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.drop(columns="sm"), "no column"),
    (lambda d: d.assign(role="middle"), "unknown role"),
    (lambda d: d.assign(end_us=d.start_us - 1), "ends before it starts"),
    (lambda d: d.iloc[0:0], "no blocks"),
])
def test_bad_files_are_refused_in_one_line(tmp_path, edit, match):
    p = tmp_path / "t.csv"
    edit(pd.read_csv(FIXTURE)).to_csv(p, index=False)
    with pytest.raises(ValueError, match=match):
        timeline.read_checked(p)
    with pytest.raises(FileNotFoundError):
        timeline.read_checked(tmp_path / "missing.csv")


def test_invoke_plot_timeline_draws_and_says_the_numbers(tmp_path):
    if shutil.which("invoke") is None and subprocess.run([sys.executable, "-m", "invoke", "--version"],
                                                         capture_output=True).returncode != 0:
        pytest.skip("invoke is not installed")
    r = subprocess.run([sys.executable, "-m", "invoke", "plot", "timeline", "--csv", str(FIXTURE), "--outdir",
                        str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    png = tmp_path / f"{FIXTURE.stem}.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "628 blocks on 132 SMs" in r.stdout and "perfect balance" in r.stdout
    for role in ("head", "rest", "whole"):
        assert role in r.stdout
    r = subprocess.run([sys.executable, "-m", "invoke", "plot", "timeline"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode != 0 and "--csv" in r.stderr + r.stdout
