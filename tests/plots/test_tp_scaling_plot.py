"""The tensor-parallel block's scaling table and picture (analysis/tp_scaling.py), drawn from
collectives.tp_scaling's CSVs without a GPU."""

import re
import subprocess
import sys

import pandas as pd
import pytest

from analysis import tp_scaling
from harness.base import paths

COMMITTED = paths.ROOT / "bench" / "results" / "h200" / "collectives_tp_scaling_w2-20261128T1530.csv"
PAGE = paths.ROOT / "cuda" / "collectives" / "README.md"


def _runs(times: dict[tuple[int, str, str], list[float]]) -> pd.DataFrame:
    rows = []
    for (world, variant, ar), ms in times.items():
        for k, t in enumerate(ms):
            rows.append({"repeat": k, "order": len(rows), "world": world, "variant": variant, "allreduce": ar,
                         "chunks": 8, "ms": t, "tflops": 1.0, "gemm": "wgmma", "gemm_sms": 0, "comm_blocks": 32,
                         "tokens": 8192, "hidden": 8192, "ffn": 32768})
    return pd.DataFrame(rows)


TIMES = {(1, "tp_mlp", "02_ring_allreduce"): [13.0, 12.0, 14.0],
         (2, "tp_mlp", "02_ring_allreduce"): [7.0, 7.2, 6.8],
         (2, "tp_mlp_overlap", "copy_engine"): [6.5, 6.0, 6.25]}


def test_speedups_are_the_one_gpu_median_over_each_forms_median(tmp_path):
    s = tp_scaling.summary(_runs(TIMES)).set_index(["world", "form"])
    assert s.loc[(1, "plain, ring"), "speedup"] == pytest.approx(1.0)
    assert s.loc[(2, "plain, ring"), "speedup"] == pytest.approx(13.0 / 7.0)
    ce = s.loc[(2, "overlapped, copy_engine")]
    assert (ce["ms"], ce["ms_min"], ce["ms_max"], ce["runs"]) == (6.25, 6.0, 6.5, 3)
    assert ce["speedup_min"] == pytest.approx(13.0 / 6.5) and ce["speedup_max"] == pytest.approx(13.0 / 6.0)
    table = tp_scaling.page_table(_runs(TIMES))
    assert "| 2 | overlapped, copy_engine | 6.25 (6.00-6.50), 3 runs | 2.08× (2.00-2.17) |" in table
    assert "| 1 | plain, ring | 13.00 (12.00-14.00), 3 runs | 1 |" in table
    # the table follows the times: a slower one-GPU median moves every speedup
    slower = _runs({**TIMES, (1, "tp_mlp", "02_ring_allreduce"): [14.0, 14.0, 14.0]})
    assert "2.24×" in tp_scaling.page_table(slower) and tp_scaling.page_table(slower) != table
    out = tp_scaling.plot(_runs(TIMES), tmp_path / "s.png")
    assert out.exists() and out.stat().st_size > 10_000


@pytest.mark.parametrize("change, why", [
    (lambda d: d.drop(columns=["allreduce"]), "no column allreduce"),
    (lambda d: d[d["world"] > 1], "no one-GPU runs"),
    (lambda d: d[d["world"] == 1], "no runs on several GPUs"),
    (lambda d: d.assign(ms=-d["ms"]), "not positive"),
])
def test_a_file_that_is_not_a_scaling_run_is_refused_in_one_line(tmp_path, change, why):
    p = tmp_path / "s.csv"
    change(_runs(TIMES)).to_csv(p, index=False)
    with pytest.raises(ValueError, match=why):
        tp_scaling.read(p)


def test_invoke_plot_scaling_draws_and_a_mistyped_file_is_one_line(tmp_path):
    p = tmp_path / "collectives_tp_scaling-x.csv"
    _runs(TIMES).to_csv(p, index=False)
    ok = subprocess.run([sys.executable, "-m", "invoke", "plot", "scaling", "--csv", str(p), "--outdir", str(tmp_path)],
                        cwd=paths.ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "collectives_tp_scaling-x.png").exists() and "| 2 | plain, ring |" in ok.stdout
    for args, msg in ((["--csv", str(tmp_path / "nope.csv")], r"plot scaling: .*not a scaling CSV"),
                      ([], r"plot scaling: name the CSV with --csv")):
        bad = subprocess.run([sys.executable, "-m", "invoke", "plot", "scaling", *args], cwd=paths.ROOT,
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode != 0 and "Traceback" not in bad.stderr
        assert re.search(msg, bad.stderr + bad.stdout), bad.stderr


def test_the_collectives_page_table_is_the_one_the_committed_scaling_run_gives():
    df = tp_scaling.read(COMMITTED)
    assert tp_scaling.page_table(df) in PAGE.read_text(), "regenerate it with `invoke plot scaling --csv ...`"
    # the table says what the CSV says: change one run and it no longer matches
    df.loc[(df["world"] == 2) & (df["allreduce"] == "copy_engine"), "ms"] *= 1.1
    assert tp_scaling.page_table(df) not in PAGE.read_text()
    assert COMMITTED.with_suffix(".png").name in PAGE.read_text()
