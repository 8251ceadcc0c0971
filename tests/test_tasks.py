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
