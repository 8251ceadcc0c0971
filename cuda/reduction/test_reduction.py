"""reduction: the numpy reference, the Python twin and, on a GPU, the library and the executable against
them, on random inputs of ragged sizes with poisoned outputs; argv refused before any CUDA call."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from conftest import ensure_built
from harness import programs
from harness.calling.results import relative_error
from harness.programs import reduction as prog

# float32: a * x + y rounds at most twice (the GPU may fuse it into one FMA); the terms are O(1).
TOL = 1e-6
SIZES = [1, 2, 31, 255, 256, 257, 4099, 1 << 20]


def _inputs(n, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)


@pytest.mark.parametrize("n", [1, 31, 97, 300])
@pytest.mark.parametrize("blocks,threads", [(1, 32), (3, 32), (4, 64)])
def test_the_twin_matches_numpy_for_any_grid(n, blocks, threads):
    x, y = _inputs(n, n)
    assert relative_error(prog.twin(x, y, 3.0, blocks, threads), prog.reference(x, y, 3.0)) <= TOL


def test_the_checker_fails_a_wrong_answer():
    x, y = _inputs(100, 1)
    good = prog.twin(x, y)
    assert relative_error(good, prog.reference(x, y)) <= TOL
    off = good.copy()
    off[37] += 1e-3
    assert relative_error(off, prog.reference(x, y)) > TOL
    unwritten = good.copy()
    unwritten[99] = np.nan
    assert relative_error(unwritten, prog.reference(x, y)) == float("inf")


def test_bad_arguments_are_refused_before_any_launch():
    x, y = _inputs(8, 0)
    with pytest.raises(TypeError, match="a must be a number"):
        prog.run_f32(x, y, a="2")
    with pytest.raises(ValueError, match="a must be finite"):
        prog.run_f32(x, y, a=float("nan"))
    with pytest.raises(ValueError):
        prog.run_f32(x, y[:7])
    with pytest.raises(TypeError):
        prog.run_f32(x.astype(np.float64), y)


@pytest.mark.parametrize("args,says", [(["0"], "N must be a positive integer"), (["x"], "N must be an integer"),
                                       (["--variant", "nope"], "unknown variant 'nope'"), (["--a", "inf"], "--a"),
                                       (["--bogus"], "unknown option --bogus")])
def test_the_executable_refuses_bad_argv_in_one_line(args, says):
    exe = ensure_built(prog.PROGRAM, "exe")
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and r.stdout == "", r


@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("seed", [0, 1])
def test_the_library_matches_numpy(n, seed):
    x, y = _inputs(n, seed)
    a = float(np.random.default_rng(seed).uniform(-4, 4))
    for v in programs.variants(prog.PROGRAM):
        assert relative_error(prog.run_f32(x, y, a, v), prog.reference(x, y, a)) <= TOL, (v, n)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 4099, 1000003])
def test_the_executable_checks_itself(n):
    for v in programs.variants(prog.PROGRAM):
        df = prog.run(str(n), "--variant", v, "--seed", "7", "--reps", "1")
        assert list(df["check"]) == ["pass"] and int(df["n"].iloc[0]) == n
