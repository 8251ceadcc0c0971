"""Text tables (harness.base.console): readable at 80 columns and when piped, no name cut, no `nan`."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd

from conftest import pythonpath
from harness.base import console
from harness.compile import build

BENCH = pd.DataFrame({
    "program": ["square", "matmul"], "variant": ["03_vectorized", "09_tuned_warptile_double_buffered"],
    "size": ["2^24", "4096^3"], "median_ms": [0.0451, 3.2], "iqr_ms": [0.0004, 0.01], "value": [2982.0, 42.9],
    "unit": ["GB/s", "TFLOP/s"], "ceiling": ["memcpy", "cublas"], "ratio": [0.89, 0.81], "target": [0.95, np.nan]})


def test_a_wide_table_is_stacked_within_80_columns_with_every_name_whole():
    lines = console.table_lines(BENCH, "bench", 80)
    assert max(len(x) for x in lines) <= 80
    text = "\n".join(lines)
    assert "09_tuned_warptile_double_buffered" in text and "03_vectorized" in text
    assert "nan" not in text.lower()
    assert "target 0.95" in text and "ratio 0.81" in text  # name and value are never split apart


def test_a_table_that_fits_is_a_grid_with_empty_cells_for_missing_values():
    lines = console.table_lines(BENCH[["program", "ratio", "target"]], None, 80)
    assert lines[0].split() == ["program", "ratio", "target"]
    assert lines[3].split() == ["matmul", "0.81"]  # NaN target: an empty cell
    assert lines[2].endswith("0.95")  # numbers right-aligned


def test_a_long_text_column_wraps_instead_of_stacking():
    df = pd.DataFrame({"step": ["build", "draw mandelbrot"], "status": ["passed", "failed"],
                       "detail": ["10 programs", "CudaError: " + "word " * 30]})
    lines = console.table_lines(df, "demo", 80)
    assert lines[1].split() == ["step", "status", "detail"] and max(len(x) for x in lines) <= 80
    assert len(lines) > 5 and lines[-1].startswith(" " * 10)  # the detail continues under its column


def test_the_bench_task_table_is_readable_when_piped(tmp_path):
    """`invoke ...` into a pipe: 80 columns (no terminal), plain text."""
    code = ("import pandas as pd; from harness.base import console; "
            "console.print_table(pd.DataFrame({'a_rather_long_program_name': ['x' * 30], 'b': [1.5], "
            "'c': ['y' * 30], 'd': [float('nan')]}), 't')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=build.ROOT,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(build.ROOT)})
    assert r.returncode == 0, r.stderr
    assert max(len(x) for x in r.stdout.splitlines()) <= 80 and "nan" not in r.stdout
    assert "x" * 30 in r.stdout
