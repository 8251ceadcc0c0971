"""The tuning figure (analysis/tune.py): drawn from a real cached search and from a table with a
refused and a wrong choice; `invoke plot tune` needs no GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from analysis import tune as atune
from harness.base import paths
from harness.compile import build

H100_MATMUL = paths.RESULTS_DIR / "h100" / "matmul-tune.json"


def test_reads_and_draws_the_recorded_h100_matmul_search(tmp_path):
    table, meta = atune.read(H100_MATMUL)
    assert meta["program"] == "matmul" and meta["device"].startswith("NVIDIA H100")
    assert table["winner"].sum() == 1 and table.loc[table["winner"], "config"].iloc[0] == meta["winner"]
    refused = table[table["status"] != "ok"]
    assert len(refused) >= 1 and refused["status"].str.contains("at most").all()
    path = atune.plot(table, "matmul", tmp_path / "t.png")
    assert path.stat().st_size > 10_000


def test_per_head_size_panels_with_a_wrong_choice(tmp_path):
    rng = np.random.default_rng(3)
    rows = [{"D": d, "config": f"c{i}", "tflops_full": rng.uniform(200, 300), "tflops_causal": rng.uniform(150, 250),
             "ms_total": 1.0, "status": "ok", "winner": i == 1} for d in (64, 128) for i in range(4)]
    rows[2].update(tflops_full=np.nan, tflops_causal=np.nan, status="wrong answer (causal relative error 6.0e-02)")
    path = atune.plot(pd.DataFrame(rows), "attention", tmp_path / "a.png")
    assert path.stat().st_size > 10_000


def test_not_a_tuning_result_is_a_clear_error(tmp_path):
    f = tmp_path / "x-tune.json"
    f.write_text(json.dumps({"device": "x"}))
    with pytest.raises(ValueError, match="not a tuning result"):
        atune.read(f)
    f.write_text("{oops")
    with pytest.raises(ValueError, match="not a tuning result"):
        atune.read(f)
    with pytest.raises(ValueError, match="no config and tflops"):
        atune.plot(pd.DataFrame({"config": ["a"]}), "matmul", tmp_path / "n.png")
    assert atune.plot_cached(tmp_path / "empty", tmp_path) == []


def test_invoke_plot_tune_draws_every_cached_search(tmp_path):
    r = subprocess.run([sys.executable, "-m", "invoke", "plot", "tune", "--outdir", str(tmp_path)], cwd=build.ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "tune_matmul_h100.png").exists() and "tune_matmul_h100.png" in r.stdout


def _search(program: str, tflops: float) -> dict:
    return {"program": program, "device": "NVIDIA H999", "size": "64^3", "date": "2026-01-01", "winner": "a",
            "table": [{"config": "a", "status": "ok", "winner": True, "tflops": tflops}]}


def test_a_program_field_that_is_a_path_is_refused_and_writes_nothing_outside(tmp_path):
    """The program's name becomes part of a file name: a name with a slash or dots must be refused when
    the JSON is read, naming the file, before any figure is drawn."""
    results, out = tmp_path / "results", tmp_path / "out" / "plots"
    (results / "h999").mkdir(parents=True)
    evil = results / "h999" / "evil-tune.json"
    evil.write_text(json.dumps(_search("zz/../../../evil", 1.0)))
    with pytest.raises(ValueError, match="program") as e:
        atune.read(evil)
    assert str(evil) in str(e.value) and "\n" not in str(e.value)
    lines = []
    with pytest.raises(ValueError, match="could be drawn"):
        atune.plot_cached(results, out, warn=lines.append)
    assert len(lines) == 1 and str(evil) in lines[0] and "program" in lines[0]
    assert not list(tmp_path.rglob("*.png"))


def test_two_searches_for_one_program_in_one_gpu_folder_do_not_overwrite_one_figure(tmp_path):
    results, out = tmp_path / "results", tmp_path / "out"
    (results / "h999").mkdir(parents=True)
    (results / "h999" / "matmul-tune.json").write_text(json.dumps(_search("matmul", 1.0)))
    (results / "h999" / "old-tune.json").write_text(json.dumps(_search("matmul", 2.0)))
    lines = []
    drawn = atune.plot_cached(results, out, warn=lines.append)
    assert [p.name for p in drawn] == ["tune_matmul_h999.png"]
    assert len(lines) == 1 and "old-tune.json" in lines[0] and "matmul-tune.json" in lines[0]
