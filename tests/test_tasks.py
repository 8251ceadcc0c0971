"""The invoke interface: the task map and its failure messages."""

from __future__ import annotations

import subprocess
import sys

from harness import build

ROOT = build.ROOT


def inv(*args, **kw):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=kw.get("timeout", 300))


def test_task_list_is_the_project_map():
    out = inv("--list").stdout
    for name in ("build", "test", "run", "doctor", "clean", "compare", "viz", "bench"):
        assert f"  {name}" in out, name


def test_run_unknown_program_is_a_clear_error():
    r = inv("run", "no_such_program")
    assert r.returncode != 0 and "unknown program" in r.stderr


def test_run_passes_arguments_after_dashdash():
    r = inv("run", "hello", "--", "cpu")
    assert r.returncode == 0 and "Hello World from the CPU!" in r.stdout
    r = inv("run", "hello", "--", "loop", "0", "1")
    assert r.returncode == 2 and "BLOCKS must be a positive integer" in r.stderr


def test_doctor_reports_each_item():
    r = inv("doctor")
    for item in ("nvcc", "gcc", "driver", "GPU", "ncu", "nsys", "compute-sanitizer", "python:numpy"):
        assert item in r.stdout, item
    assert "nvprof" in r.stdout and "nsys" in r.stdout


def test_single_letter_options_take_the_long_spelling(tmp_path):
    # The documented command is `invoke viz gridstride --n 500 ...`; invoke alone only knows `-n`.
    r = inv("viz", "gridstride", "--n", "40", "--blocks", "2", "--threads", "4", "--simulate",
            "--outdir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "stride: 8 = blocks x threads" in r.stdout
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "gridstride_n40_b2_t4_sim_heatmap.png", "gridstride_n40_b2_t4_sim_scatter.png",
        "gridstride_n40_b2_t4_sim_strip.png"]
    r = inv("viz", "gridstride", "--n=30", "--simulate", "--outdir", str(tmp_path))
    assert r.returncode == 0 and (tmp_path / "gridstride_n30_b8_t32_sim_strip.png").exists()


def test_sanitize_takes_program_names_as_words():
    # Bare program names after `sanitize` become its --programs list; the bogus tool is then the
    # only complaint (it is checked before anything runs).
    r = inv("sanitize", "square", "grid_stride", "--tool", "bogus")
    assert r.returncode != 0
    assert "unknown sanitizer tool" in r.stderr and "No idea" not in r.stderr
    r = inv("sanitize", "no_such_program")
    assert r.returncode != 0 and "No idea what 'no_such_program' is" in r.stderr
