"""pytest's short summary gives skips one line per reason (conftest.py), while -ra still lists
every failure."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import pythonpath, skip_reasons
from harness.compile import build

SAMPLE = '''
import pytest

@pytest.mark.skip(reason="needs a GPU: a long reason")
def test_a(): pass

@pytest.mark.skip(reason="needs a GPU: a long reason")
def test_b(): pass

@pytest.mark.parametrize("i", range(3))
def test_c(i):
    pytest.skip("needs a GPU: a long reason")

def test_d():
    pytest.skip("needs nvdisasm")

def test_e():
    assert 1 == 2
'''


def test_skips_fold_to_one_line_per_reason_and_failures_stay(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    tests = build.ROOT / "tests"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-ra", "-p", "no:cacheprovider",
                        "-o", "addopts=", str(tmp_path / "test_sample.py")], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": pythonpath(tests, build.ROOT)})
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("SKIPPED")]
    assert lines == ["SKIPPED 5 tests: needs a GPU: a long reason", "SKIPPED 1 test: needs nvdisasm"], out
    assert "FAILED" in out and "test_e" in out.split("short test summary info")[1]
    assert "1 failed, 6 skipped" in out


def test_skip_reasons_counts():
    class Rep:
        def __init__(self, reason):
            self.longrepr = ("f.py", 1, f"Skipped: {reason}")

    got = skip_reasons([Rep("x"), Rep("y"), Rep("x")])
    assert got == [(2, "x"), (1, "y")]


TIMED = '''
import time

import pytest

@pytest.mark.parametrize("i", range(3))
def test_t(i):
    time.sleep(0.05 * i)

def test_f():
    assert 1 == 2
'''


def test_each_tests_time_is_written_once_as_it_finishes_under_workers(tmp_path):
    """CUDALAB_TEST_TIMES: a line per phase of each test, from the controller alone (not each worker too),
    so that a run stopped at its deadline still says where its time went."""
    pytest.importorskip("xdist")
    (tmp_path / "test_timed.py").write_text(TIMED)
    times = tmp_path / "times.csv"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-q", "-p", "no:cacheprovider", "-n", "2",
                        "-o", "addopts=", str(tmp_path / "test_timed.py")], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": pythonpath(build.ROOT / "tests", build.ROOT),
                            "CUDALAB_TEST_TIMES": str(times)})
    assert r.returncode == 1, r.stdout + r.stderr
    calls = [ln.split(",", 5) for ln in times.read_text().splitlines() if ",call," in ln]
    assert sorted(c[5].split("::")[1] for c in calls) == ["test_f", "test_t[0]", "test_t[1]", "test_t[2]"]
    assert {c[5].split("::")[1]: c[2] for c in calls}["test_f"] == "failed"
    assert float({c[5].split("::")[1]: c[0] for c in calls}["test_t[2]"]) >= 0.09
    # When each finished (seconds since the epoch) and on which worker: a timeline of the run.
    assert all(abs(float(c[3]) - time.time()) < 300 for c in calls), calls
    assert {c[4] for c in calls} <= {"gw0", "gw1"} and len({c[4] for c in calls}) >= 1, calls
