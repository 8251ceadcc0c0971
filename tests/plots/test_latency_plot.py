"""The all-reduce latency picture and the collectives page's table (analysis/latency.py), drawn from
sweep CSVs without a GPU."""

import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from analysis import latency
from harness.base import paths

H100 = paths.ROOT / "bench" / "results" / "h100"
COMMITTED = [H100 / "collectives_latency_w2-20261128.csv", H100 / "collectives_latency_w4-20261128.csv"]
PAGE = paths.ROOT / "cuda" / "collectives" / "README.md"


def _sweep(world: int, picks: dict[int, str], rng) -> pd.DataFrame:
    """A sweep with random times: every variant at every size on every rank, auto picking `picks`."""
    rows = []
    variants = ("nccl_allreduce", "06_oneshot_ll", "04_oneshot_signal", "02_ring_allreduce", "auto_allreduce")
    for rank in range(world):
        for nbytes, pick in picks.items():
            for v in variants:
                eager = float(rng.uniform(5, 500))
                graph = float("nan") if v == "02_ring_allreduce" or (v == "auto_allreduce" and pick.startswith("02")) \
                    else float(rng.uniform(5, 500))
                rows.append({"variant": v, "chosen": pick if v == "auto_allreduce" else v, "bytes": nbytes,
                             "world": world, "rank": rank, "eager_us": eager, "graph_us": graph})
    return pd.DataFrame(rows)


PICKS = {4096: "06_oneshot_ll", 65536: "06_oneshot_ll", 1 << 20: "04_oneshot_signal", 16 << 20: "02_ring_allreduce",
         1 << 30: "nccl_allreduce"}


def test_crossovers_and_bands_follow_autos_picks(tmp_path):
    df = _sweep(4, PICKS, np.random.default_rng(1))
    assert latency.crossovers(df) == [(1 << 20, "06_oneshot_ll", "04_oneshot_signal"),
                                      (16 << 20, "04_oneshot_signal", "02_ring_allreduce"),
                                      (1 << 30, "02_ring_allreduce", "nccl_allreduce")]
    b = latency.bands(df)
    assert [name for _, _, name in b] == ["06_oneshot_ll", "04_oneshot_signal", "02_ring_allreduce", "nccl_allreduce"]
    # each boundary lies strictly between the last size of one pick and the first of the next
    assert 65536 < b[1][0] < 1 << 20 and b[0][1] == b[1][0]
    out = latency.plot([df, _sweep(2, PICKS, np.random.default_rng(2))], tmp_path / "x.png")
    assert out.stat().st_size > 10_000


def test_the_ratio_uses_graph_times_where_both_have_them_and_eager_where_auto_has_none():
    df = _sweep(2, PICKS, np.random.default_rng(3))
    r0 = df[df["rank"] == 0].set_index(["variant", "bytes"])
    ratio = latency.auto_ratio(df)
    n = r0.loc[("nccl_allreduce", 4096), "graph_us"] / r0.loc[("auto_allreduce", 4096), "graph_us"]
    assert ratio[4096] == pytest.approx(n)
    ring = r0.loc[("nccl_allreduce", 16 << 20), "graph_us"] / r0.loc[("auto_allreduce", 16 << 20), "eager_us"]
    assert ratio[16 << 20] == pytest.approx(ring)
    # another rank's numbers never leak in
    other = df.copy()
    other.loc[other["rank"] == 1, ["eager_us", "graph_us"]] = 1e9
    assert latency.auto_ratio(other).equals(ratio)


@pytest.mark.parametrize("change, why", [
    (lambda d: d.drop(columns=["chosen"]), "no column chosen"),
    (lambda d: d[d["rank"] != 0], "no rows of rank 0"),
    (lambda d: d[d["variant"] != "nccl_allreduce"], "no nccl_allreduce rows"),
    (lambda d: d.assign(world=[2, 4] * (len(d) // 2)), "one world size a sweep"),
])
def test_a_file_that_is_not_a_sweep_is_refused_in_one_line(tmp_path, change, why):
    p = tmp_path / "s.csv"
    change(_sweep(2, PICKS, np.random.default_rng(4))).to_csv(p, index=False)
    with pytest.raises(ValueError, match=why):
        latency.read_sweep(p)


def test_the_collectives_page_table_is_the_one_the_committed_sweeps_give():
    frames = [latency.read_sweep(p) for p in COMMITTED]
    want = latency.page_table(frames)
    assert want in PAGE.read_text(), "regenerate the table with `invoke plot latency --csv ...`"
    # and the table says what the CSVs say: change one time and it no longer matches
    frames[0].loc[(frames[0]["variant"] == "nccl_allreduce") & (frames[0]["rank"] == 0), "graph_us"] *= 1.5
    assert latency.page_table(frames) not in PAGE.read_text()
    # the figure the page shows is the one this module names for these CSVs
    assert latency.figure_name(COMMITTED[0]) in PAGE.read_text()


def test_invoke_plot_latency_draws_and_a_mistyped_file_is_one_line(tmp_path):
    csvs = ",".join(str(p) for p in COMMITTED)
    ok = subprocess.run([sys.executable, "-m", "invoke", "plot", "latency", "--csv", csvs, "--outdir", str(tmp_path)],
                        cwd=paths.ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "collectives_latency-20261128.png").exists()
    assert "| 4 | 32 KiB |" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "invoke", "plot", "latency", "--csv", str(tmp_path / "nope.csv")],
                         cwd=paths.ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert re.search(r"plot latency: .*not a latency sweep CSV", bad.stderr + bad.stdout)
