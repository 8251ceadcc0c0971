"""What the figures and the report refuse to read: a CSV that is not a regular file or is too big to be
one the lab wrote (checked before a byte is read), and a ratio no measurement gives (inf, nan, text
or negative), named by row and column. No GPU needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis import bench as abench
from analysis import report
from harness.base.paths import ROOT
from harness.measuring import bench, results_csv, timing

META = {"device": "NVIDIA H999", "driver": "13.0", "runtime": "13.0", "nvcc": "13.0.88", "date": "2026-11-21T20:00:00"}


def _bench_csv(path: Path, ratio: float = 0.89) -> Path:
    cases = pd.DataFrame([{"program": "square", "variant": v, "size": "2^24", "median_ms": 0.045, "value": 2982.0,
                           "unit": "GB/s", "ceiling": "memcpy", "ceiling_value": 3350.0, "ratio": ratio,
                           "bytes": 1.34e8, "flops": 1.68e7, "note": ""} for v in ("01_naive", "03_vectorized")])
    ceil = {"memcpy": bench.Ceiling("memcpy", 3350.0, "GB/s", "DtoD", timing.summarize([0.16] * 10))}
    return results_csv.write(cases, META, ceil, dest=path)


def _with_ratio(path: Path, text: str) -> Path:
    """The second case's ratio replaced by `text`, as a hand edit or another tool would leave it."""
    lines = path.read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[2].rstrip("\n").split(",")
    cells[header.index("ratio")] = text
    lines[2] = ",".join(cells) + "\n"
    path.write_text("".join(lines))
    return path


def _plot_bench(csv, tmp_path):
    return subprocess.run([sys.executable, "-m", "invoke", "plot", "bench", "--csv", str(csv), "--outdir",
                           str(tmp_path / "plots")], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_device_a_pipe_or_a_folder_is_refused_before_reading(tmp_path):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)  # opening it for reading must not wait for a writer
    for path in (Path("/dev/zero"), fifo, tmp_path):
        with pytest.raises(ValueError, match="not a regular file") as e:
            results_csv.read_checked(path)
        assert str(path) in str(e.value) and "\n" not in str(e.value)
    assert results_csv.date_of(fifo) is None and results_csv.latest(tmp_path) is None


def test_a_file_over_the_limit_is_refused_naming_the_limit(tmp_path):
    big = tmp_path / "big.csv"
    with open(big, "wb") as f:  # sparse: nothing written, the size is what is checked
        f.truncate(results_csv.MAX_CSV_BYTES + 1)
    with pytest.raises(ValueError, match=f"larger than {results_csv.MAX_CSV_BYTES // 2**20} MiB"):
        results_csv.read_checked(big)
    with pytest.raises(ValueError, match="MiB"):
        results_csv.whole_file(big)


def test_invoke_plot_bench_refuses_dev_zero_in_one_line(tmp_path):
    r = _plot_bench("/dev/zero", tmp_path)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "/dev/zero" in r.stderr
    assert "not a regular file" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("text", ["inf", "nan", "abc", "-3.5", "-inf"])
def test_a_ratio_that_no_measurement_gives_is_named_by_row_and_column(tmp_path, text):
    path = _with_ratio(_bench_csv(tmp_path / "b.csv"), text)
    with pytest.raises(ValueError) as e:
        abench.load(path)
    msg = str(e.value)
    assert str(path) in msg and "row 2" in msg and "column ratio" in msg and repr(text) in msg
    assert "03_vectorized" in msg and "\n" not in msg


def test_an_empty_ratio_of_a_case_not_timed_is_kept(tmp_path):
    path = _with_ratio(_bench_csv(tmp_path / "b.csv"), "")
    cases, _ = abench.load(path)
    assert cases["ratio"].isna().tolist() == [False, True]


def test_invoke_plot_bench_and_report_name_an_inf_ratio(tmp_path):
    build = tmp_path / "build"
    path = _with_ratio(_bench_csv(build / "bench" / "bench-h999-1.csv"), "inf")
    r = _plot_bench(path, tmp_path)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "row 2" in r.stderr and "column ratio" in r.stderr and "'inf'" in r.stderr
    assert not (tmp_path / "plots").exists() or not list((tmp_path / "plots").glob("*.png"))
    md, _ = report.write(build / "report", facts={"gpu": False}, build=build, root=tmp_path)
    bench_part = md.read_text().split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    assert "row 2" in bench_part and "column ratio" in bench_part and "'inf'" in bench_part
