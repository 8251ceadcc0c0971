"""The bench's regression gate (harness/measuring/compare.py, `invoke bench --compare [BASE] [NEW]`): the
rule on synthetic CSVs made from a committed H100 run with one case's ratios moved, the committed
back-to-back runs that must compare SAME, the default pair, the one-line refusals, and the task's exit
status. On a GPU: the product square against the fault build's slowed 03_vectorized, SLOWER and status 1."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import fault_build
from conftest import ensure_built, pythonpath
from harness.base import paths
from harness.compile import build
from harness.measuring import compare as hc
from harness.measuring import results_csv

ROOT = build.ROOT
H100 = ROOT / "bench" / "results" / "h100"
RUN = H100 / "bench-h100-80gb-hbm3-20261124T091122.csv"  # attention, square, grayscale, mandelbrot
H200_RUN = ROOT / "bench" / "results" / "h200" / "bench-h200-20261124T213201.csv"
REPEATS = sorted((H100 / "history").glob("repeat-*.csv"))
KEY = ("square", "03_vectorized", "2^24")


def _square_run() -> pd.DataFrame:
    """The committed run's square rows and its ceiling rows: a whole bench CSV of three cases at 2^24
    and three at 2^28."""
    df = pd.read_csv(RUN)
    return df[df["program"].isin(["square", "ceiling"])].reset_index(drop=True)


def _write(df: pd.DataFrame, path: Path, date: str | None = None) -> Path:
    df = df.copy()
    if date:
        df["date"] = date
    df.to_csv(path, index=False)
    return path


def _moved(df: pd.DataFrame, key=KEY, factor: float = 1.0, spread: tuple[float, float] | None = None) -> pd.DataFrame:
    """`df` with one case's median ratio times `factor` (its p25/p75 moved with it, or set to
    median x (1 + spread[i]) when given)."""
    df = df.copy()
    at = (df["program"] == key[0]) & (df["variant"] == key[1]) & (df["size"] == key[2])
    assert at.sum() == 1
    m = float(df.loc[at, "ratio"].iloc[0]) * factor
    df.loc[at, "ratio"] = m
    if spread is None:
        df.loc[at, ["ratio_p25", "ratio_p75"]] = df.loc[at, ["ratio_p25", "ratio_p75"]].to_numpy() * factor
    else:
        df.loc[at, "ratio_p25"], df.loc[at, "ratio_p75"] = m * (1 + spread[0]), m * (1 + spread[1])
    return df


def _pair(tmp_path, new: pd.DataFrame, base: pd.DataFrame | None = None) -> tuple[Path, Path]:
    base = _square_run() if base is None else base
    return (_write(base, tmp_path / "base.csv"), _write(new, tmp_path / "new.csv", "2026-11-24T10:00:00"))


def _verdicts(tmp_path, new: pd.DataFrame, base: pd.DataFrame | None = None) -> dict:
    a, b = _pair(tmp_path, new, base)
    table = hc.runs(hc.load(a), hc.load(b))
    return {(r.program, r.variant, r.size): r.verdict for r in table.itertuples()}


def inv(*args, env=None):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


# --- the rule ---------------------------------------------------------------------------------------------

def test_the_same_run_twice_is_same_everywhere(tmp_path):
    v = _verdicts(tmp_path, _square_run())
    assert len(v) == 6 and set(v.values()) == {hc.SAME}


def test_a_case_whose_spread_moved_wholly_below_is_slower_and_only_that_one(tmp_path):
    v = _verdicts(tmp_path, _moved(_square_run(), factor=0.80))
    assert v.pop(KEY) == hc.SLOWER
    assert set(v.values()) == {hc.SAME}


def test_a_case_whose_spread_moved_wholly_above_is_faster(tmp_path):
    v = _verdicts(tmp_path, _moved(_square_run(), factor=1.20))
    assert v[KEY] == hc.FASTER


def test_overlapping_spreads_are_same_even_when_the_median_moved_far(tmp_path):
    """NEW's median 8% lower, but its own p25-p75 (a noisy run) reaches into BASE's: not a finding."""
    v = _verdicts(tmp_path, _moved(_square_run(), factor=0.92, spread=(-0.05, 0.10)))
    assert v[KEY] == hc.SAME
    # The same median with a tight spread is SLOWER: the spread decides, not the size of the change.
    assert _verdicts(tmp_path, _moved(_square_run(), factor=0.92, spread=(-0.001, 0.001)))[KEY] == hc.SLOWER


def test_a_move_inside_the_resolution_between_runs_is_same(tmp_path):
    """Square's p25-p75 spans 0.01-0.05%; a 1% move (what two runs of the same code show) stays SAME,
    because each interval is at least median x (1 +- FLOOR)."""
    assert hc.FLOOR == pytest.approx(0.015)
    v = _verdicts(tmp_path, _moved(_square_run(), factor=0.99))
    assert v[KEY] == hc.SAME
    assert _verdicts(tmp_path, _moved(_square_run(), factor=0.965))[KEY] == hc.SLOWER


def test_the_interval_and_verdict_at_their_edges():
    assert hc.interval(1.0, 0.99, 1.01) == pytest.approx((0.985, 1.015))
    assert hc.interval(1.0, 0.90, 1.2) == pytest.approx((0.90, 1.2))
    assert hc.interval(1.0, float("nan"), float("nan")) == pytest.approx((0.985, 1.015))  # a CSV without spreads
    assert hc.verdict(1.0, 1.1, 0.9, 1.0) == hc.SAME  # touching is overlapping
    assert hc.verdict(1.0, 1.1, 0.9, 0.999) == hc.SLOWER
    assert hc.verdict(1.0, 1.1, 1.1001, 1.2) == hc.FASTER


@pytest.mark.parametrize("path", REPEATS, ids=[p.name for p in REPEATS])
def test_back_to_back_runs_of_the_same_code_compare_same(path):
    """The committed --repeat CSVs hold two runs of unchanged code, each with its rounds' p25-p75. The
    gate must call every case SAME; the bare p25-p75 intervals (no floor) would not."""
    long = pd.read_csv(path)
    one, two = (long[long["run"] == r].drop(columns="run") for r in (1, 2))
    table = hc.compare(one, two)
    assert len(table) == len(one) and set(table["verdict"]) == {hc.SAME}, \
        table[table["verdict"] != hc.SAME][["program", "variant", "size", "change_pct"]]
    assert set(hc.compare(one, two, floor=0.0)["verdict"]) > {hc.SAME}


def test_cases_in_one_csv_only_are_listed_not_dropped(tmp_path):
    base = _square_run()
    new = base[~((base["variant"] == "01_naive") & (base["size"] == "2^28"))].copy()
    extra = new[new["variant"] == "02_grid_stride"].head(1).assign(variant="04_new")
    new = pd.concat([new, extra], ignore_index=True)
    v = _verdicts(tmp_path, new, base)
    assert v[("square", "01_naive", "2^28")] == hc.ONLY_BASE
    assert v[("square", "04_new", "2^24")] == hc.ONLY_NEW
    assert list(v.values()).count(hc.SAME) == 5


def test_no_ratio_and_another_ceiling_are_not_compared(tmp_path):
    new = _square_run()
    new.loc[(new["variant"] == "01_naive") & (new["size"] == "2^24"), ["ratio", "ratio_p25", "ratio_p75"]] = None
    new.loc[(new["variant"] == "02_grid_stride") & (new["size"] == "2^24"), "ceiling"] = "other"
    v = _verdicts(tmp_path, new)
    assert v[("square", "01_naive", "2^24")] == hc.NO_RATIO
    assert v[("square", "02_grid_stride", "2^24")] == hc.OTHER_CEILING


def test_the_summary_names_how_many_are_slower():
    table = pd.DataFrame({"program": ["s", "s", "s"], "variant": ["a", "b", "c"], "size": ["1", "1", "1"],
                          "change_pct": [-20.0, 0.1, float("nan")], "verdict": [hc.SLOWER, hc.SAME, hc.ONLY_NEW]})
    assert hc.summary(table) == "1 of 2 compared cases SLOWER (s a 1 -20.0%); 1 SAME, 1 only in NEW"
    assert hc.summary(table.iloc[1:]) == "no case SLOWER: 1 SAME, 1 only in NEW"


# --- refusals ----------------------------------------------------------------------------------------------

def test_two_gpus_are_refused(tmp_path):
    with pytest.raises(hc.DifferentGPUs, match="ran on NVIDIA H100 80GB HBM3, .* on NVIDIA H200: ratios from "
                                               "different GPUs do not compare"):
        hc.runs(hc.load(RUN), hc.load(H200_RUN))


def test_unreadable_files_are_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        hc.load(tmp_path / "none.csv")
    torn = tmp_path / "torn.csv"
    torn.write_bytes(RUN.read_bytes()[:-7])
    with pytest.raises(ValueError, match="last line is cut short"):
        hc.load(torn)
    other = _write(pd.DataFrame({"program": ["a"], "variant": ["b"], "size": ["c"]}), tmp_path / "other.csv")
    with pytest.raises(ValueError, match="no column"):
        hc.load(other)
    with pytest.raises(ValueError, match="is a folder"):
        hc.load(tmp_path)
    twice = _write(pd.concat([_square_run().head(1)] * 2), tmp_path / "twice.csv")
    with pytest.raises(ValueError, match="twice"):
        hc.load(twice)


# --- the default pair -----------------------------------------------------------------------------------

@pytest.fixture
def folders(tmp_path, monkeypatch):
    local, results = tmp_path / "build" / "bench", tmp_path / "results"
    local.mkdir(parents=True)
    monkeypatch.setattr(paths, "BUILD_BENCH", local)
    monkeypatch.setattr(paths, "RESULTS_DIR", results)
    return local, results


def test_the_default_pair_is_the_two_newest_runs_of_the_programs(folders):
    local, _ = folders
    both = pd.read_csv(RUN)
    _write(both, local / "bench-a.csv", "2026-11-24T08:00:00")
    _write(_square_run(), local / "bench-b.csv", "2026-11-24T09:00:00")
    _write(both, local / "bench-c.csv", "2026-11-24T10:00:00")
    (local / "bench-torn.csv").write_bytes(RUN.read_bytes()[:-7])  # passed over, not fatal
    base, new = hc.pick([])
    assert (base.path.name, new.path.name) == ("bench-a.csv", "bench-c.csv")  # b lacks c's programs
    base, new = hc.pick([], ["square"])
    assert (base.path.name, new.path.name) == ("bench-b.csv", "bench-c.csv")
    base, new = hc.pick([str(local / "bench-a.csv")], ["square"])
    assert (base.path.name, new.path.name) == ("bench-a.csv", "bench-c.csv")
    with pytest.raises(ValueError, match="at most two"):
        hc.pick(["a", "b", "c"])


def test_with_one_local_run_base_is_the_committed_run_of_that_gpu(folders):
    local, results = folders
    _write(_square_run(), local / "bench-new.csv", "2026-11-30T10:00:00")
    with pytest.raises(FileNotFoundError, match="only one bench CSV with square of NVIDIA H100 80GB HBM3"):
        hc.pick([], ["square"])
    (results / "h100" / "history").mkdir(parents=True)
    (results / "h200").mkdir()
    _write(_square_run(), results / "h100" / "history" / "bench-old.csv", "2026-11-20T10:00:00")
    _write(_square_run(), results / "h100" / "bench-ref.csv", "2026-11-24T10:00:00")
    _write(pd.read_csv(H200_RUN), results / "h200" / "bench-h200.csv", "2026-11-29T10:00:00")
    base, new = hc.pick([], ["square"])
    assert (base.path.name, new.path.name) == ("bench-ref.csv", "bench-new.csv")


def test_no_run_at_all_is_one_line(folders):
    with pytest.raises(FileNotFoundError, match="no bench CSV with square in .*: run `invoke bench` first"):
        hc.pick([], ["square"])


# --- the task -----------------------------------------------------------------------------------------------

def test_invoke_bench_compare_exits_1_on_slower_and_0_otherwise(tmp_path):
    a, b = _pair(tmp_path, _moved(_square_run(), factor=0.8))
    r = inv("bench", "--compare", str(a), str(b))
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [
        "bench --compare: 1 of 6 compared cases SLOWER (square 03_vectorized 2^24 -20.0%); 5 SAME"]
    assert "SLOWER" in r.stdout and "compare.png" in r.stdout and "Traceback" not in r.stdout + r.stderr
    same = _write(_moved(_square_run(), factor=1.005), tmp_path / "same.csv")
    r = inv("bench", "--compare", str(a), str(same), "--programs", "square")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "bench --compare: no case SLOWER: 6 SAME"


def test_invoke_bench_compare_refusals_are_one_line_with_status_2(tmp_path):
    torn = tmp_path / "torn.csv"
    torn.write_bytes(RUN.read_bytes()[:-7])
    for args, says in [((str(RUN), str(H200_RUN)), "ratios from different GPUs do not compare"),
                       ((str(tmp_path / "none.csv"), str(RUN)), "none.csv does not exist"),
                       ((str(RUN), str(torn)), "its last line is cut short"),
                       ((str(RUN), str(RUN), "--quick"), "times nothing: leave out --quick")]:
        r = inv("bench", "--compare", *args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and says in lines[0], (args, r.returncode, r.stderr)


# --- on a GPU: the product square against its slowed twin --------------------------------------------------

SLEEP_NS = 2000  # per thread of 03_vectorized: its ratio at 2^24 fell from 0.877 to 0.644 on an H200


@pytest.mark.long
@pytest.mark.serial
@pytest.mark.gpu
def test_gpu_the_gate_fails_on_the_slowed_square(tmp_path, monkeypatch):
    """Two quick bench runs of square at 2^24, the product's and then the fault build's with
    03_vectorized slowed (fault_build.slowed_square_setup): the gate calls that case SLOWER, its two
    unchanged neighbours SAME, and `invoke bench --compare` exits 1 saying so in one line."""
    from harness import programs
    from harness.measuring import bench, timing

    if timing.engine_version() is None:
        pytest.skip(f"cuda-bench is not installed: {timing.INSTALL_HINT}")
    ensure_built("square")
    fault_build.build_twin("square")
    cases = programs.bench_cases(["square"], quick=True)
    assert [c.variant for c in cases] == ["01_naive", "02_grid_stride", "03_vectorized"]
    slowed = [dataclasses.replace(c, setup="fault_build:slowed_square_setup",
                                  kwargs={**c.kwargs, "sleep_ns": SLEEP_NS if c.variant == KEY[1] else 0})
              for c in cases]
    meta = bench.metadata()
    base, base_ceil = bench.run(cases, programs.ceilings(), quick=True)
    monkeypatch.setenv("PYTHONPATH", pythonpath(Path(fault_build.__file__).parent))  # the child finds it
    new, new_ceil = bench.run(slowed, programs.ceilings(), quick=True)
    a = results_csv.write(base, meta, base_ceil, folder=tmp_path)
    b = results_csv.write(new, meta, new_ceil, folder=tmp_path)
    table = hc.runs(hc.load(a), hc.load(b))
    print(hc.shown(table).to_string())
    assert dict(zip(table["variant"], table["verdict"])) == {
        "01_naive": hc.SAME, "02_grid_stride": hc.SAME, "03_vectorized": hc.SLOWER}, table
    r = inv("bench", "--compare", str(a), str(b), env={**__import__("os").environ,
                                                        "PYTHONPATH": pythonpath(ROOT)})
    print(r.stdout, r.stderr)
    assert r.returncode == 1
    assert r.stderr.strip().startswith("bench --compare: 1 of 3 compared cases SLOWER (square 03_vectorized 2^24")
