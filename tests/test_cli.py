"""The executables' argv handling (cuda/common/cli.cuh), on any machine: everything here happens
before the first CUDA call, or is the no-GPU path itself."""

from __future__ import annotations

import subprocess

import pytest

from conftest import GPU_OK
from harness import build

MINE = ["hello", "device_info", "square", "grid_stride", "grayscale", "mandelbrot", "attention", "transformer_block",
        "matmul", "gemm_tc"]


def _run(prog, *args):
    path = build.bin_path(prog)
    if not path.exists():
        pytest.skip(f"{path} is not built")
    return subprocess.run([str(path), *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("prog", MINE)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_usage_and_exits_0(prog, flag):
    r = _run(prog, flag)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage:") and r.stderr == ""


@pytest.mark.parametrize("prog,args,match", [
    ("hello", ["cpu", "extra"], "unexpected argument 'extra'"),
    ("hello", ["loop", "4"], "both or neither"),
    ("hello", ["nosuch"], "unknown choice 'nosuch'"),
    ("device_info", ["0", "1"], "unexpected argument '1'"),
    ("device_info", ["x"], "DEVICE must be an integer"),
    ("device_info", ["-1"], "DEVICE must be at least 0"),
    ("device_info", ["99999999999"], "DEVICE must be at most 2147483647"),
    ("square", ["10", "32", "7"], "unexpected argument '7'"),
    ("square", ["--print"], "--print needs a value"),
    ("grid_stride", ["10", "2"], "give both or neither"),
    ("grid_stride", ["10", "2", "3", "4"], "unexpected argument '4'"),
    ("grid_stride", ["2000000"], "N must be at most 1048576"),
    ("grayscale", ["8", "8", "8"], "unexpected argument '8'"),
    ("grayscale", ["8", "8", "--variant"], "--variant needs a value"),
    ("grayscale", ["8", "99999999999"], "W must be at most 2147483647"),
    ("grayscale", ["--frobnicate", "8", "8"], "unknown option --frobnicate"),
    ("mandelbrot", ["10", "10", "2199023255552"], "MAX_ITERS must be at most 2147483647"),
    ("mandelbrot", ["10", "10", "0"], "MAX_ITERS must be a positive integer"),
    ("mandelbrot", ["10", "10", "10", "10"], "unexpected argument '10'"),
    ("mandelbrot", ["10", "10", "10", "--region", "0", "1"], "--region needs four numbers"),
    ("mandelbrot", ["999999", "10", "10"], "WIDTH must be at most 524280"),
])
def test_bad_argv_is_one_sentence_and_status_2(prog, args, match):
    r = _run(prog, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert match in r.stderr, r.stderr
    assert "usage" in r.stderr or "must" in r.stderr


@pytest.mark.skipif(GPU_OK, reason="checks the no-GPU path; this machine has a GPU")
@pytest.mark.parametrize("prog,args", [("device_info", []), ("square", ["10"]), ("mandelbrot", ["8", "8", "8"]),
                                       ("attention", ["--seed", "0", "1", "1", "8", "64"]),
                                       ("transformer_block", ["--seed", "0", "--seq", "8"]),
                                       ("matmul", ["8", "8", "8"]), ("gemm_tc", ["16", "16", "16"])])
def test_without_a_gpu_the_executables_point_at_invoke_doctor(prog, args):
    r = _run(prog, *args)
    assert r.returncode == 1
    assert "invoke doctor" in r.stderr


@pytest.mark.parametrize("prog", ["square", "grayscale", "mandelbrot"])
def test_the_python_variant_names_are_the_c_table(prog):
    """One table per program, in the .cu; the module's VARIANTS must be the same names in order."""
    from harness import programs

    if not build.lib_path(prog).exists():
        pytest.skip(f"lib{prog}.so is not built")
    assert programs.variants_from_library(prog) == programs.variants(prog)
