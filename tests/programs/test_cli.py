"""The executables' argv handling (cuda/common/cli.cuh), on any machine: everything here happens
before the first CUDA call, or is the no-GPU path itself."""

from __future__ import annotations

import subprocess

import pytest

from conftest import GPU_OK, ensure_built
from harness import programs
from harness.calling import cudart, library
from harness.compile import build

MINE = programs.names()  # every program's executable: the registry's list, never typed here


def _run(prog, *args):
    path = ensure_built(prog, "exe")
    return subprocess.run([str(path), *map(str, args)], capture_output=True, text=True, timeout=60)


# What each --help must say beyond its usage line (the variant table, the options a user looks for),
# and arguments that come before the flag: --help wins wherever it stands.
HELP_SAYS = {"attention": (["1", "2"], ["--seed S", "--config NAME"]),
             "transformer_block": (["--batch", "2"], ["--seed N"]),
             "matmul": (["4"], ["variants: ", "09_tuned"]),
             "gemm_tc": (["8"], ["03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster"])}


@pytest.mark.parametrize("prog", MINE)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_usage_and_exits_0(prog, flag):
    before, says = HELP_SAYS.get(prog, ([], []))
    r = _run(prog, *before, flag)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: {prog}") and r.stderr == ""
    for word in says:
        assert word in r.stdout, (prog, word)


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
    ("grayscale", ["0", "5"], "H must be a positive integer, got 0"),
    ("grayscale", ["-3", "4"], "H must be a positive integer, got -3"),
    ("grayscale", ["4", "x"], "W must be an integer, got 'x'"),
    ("grayscale", ["5"], "H and W are needed"),
    ("grayscale", ["--variant", "nope", "4", "4"], "unknown variant 'nope' (01_1d, 02_2d, 03_vectorized, all)"),
    ("mandelbrot", ["10", "10", "2199023255552"], "MAX_ITERS must be at most 2147483647"),
    ("mandelbrot", ["10", "10", "0"], "MAX_ITERS must be a positive integer"),
    ("mandelbrot", ["10", "10", "10", "10"], "unexpected argument '10'"),
    ("mandelbrot", ["10", "10", "10", "--region", "0", "1"], "--region needs four numbers"),
    ("mandelbrot", ["999999", "10", "10"], "WIDTH must be at most 524280"),
    ("attention", ["1", "1", "4", "32", "5"], "unexpected argument '5'"),
    ("attention", ["--bogus", "1", "1", "4", "32"], "unknown option --bogus"),
    ("attention", ["1", "1", "4", "32", "--seed"], "--seed needs a value"),
    ("attention", ["1", "1", "4", "32", "--variant"], "--variant needs a value"),
    ("attention", ["--reps", "0", "1", "1", "4", "32"], "--reps must be a positive integer"),
    ("attention", ["--seed", "-1", "1", "1", "4", "32"], "--seed must be at least 0"),
    ("attention", ["--seed", "x", "1", "1", "4", "32"], "--seed must be an integer"),
    ("attention", ["1", "1", "4", "99999999999"], "D must be at most 2147483647"),
    ("attention", ["300", "300", "4", "32"], f"B*H must be at most {cudart.MAX_GRID_YZ}"),
    ("attention", ["1", "1", "4"], "B, H, S and D are needed"),
    ("attention", ["--config", "nosuch", "1", "1", "8", "64"], "unknown --config 'nosuch'"),
    ("attention", ["--variant", "02_flash", "--config", "flash_bf16_w4s2", "1", "1", "8", "64"],
     "does not apply to 02_flash"),
    ("transformer_block", ["extra"], "unexpected argument 'extra'"),
    ("transformer_block", ["--seq", "8", "9"], "unexpected argument '9'"),
    ("transformer_block", ["--frobnicate"], "unknown option --frobnicate"),
    ("transformer_block", ["--seq"], "--seq needs a value"),
    ("transformer_block", ["--seq", "8", "--seed"], "--seed needs a value"),
    ("transformer_block", ["--seed", "-1"], "--seed must be at least 0"),
    ("transformer_block", ["--batch", "99999999999"], "--batch must be at most 2147483647"),
    ("transformer_block", ["--batch", "70000", "--embed", "64", "--heads", "1"],
     f"must be at most {cudart.MAX_GRID_YZ}"),
    # The second --seq is refused before the first one runs.
    ("transformer_block", ["--seq", "8", "--seq", "999999"], "--seq must be at most 92680"),
    ("matmul", ["4", "4", "4", "4"], "unexpected argument '4'"),
    ("matmul", ["--frobnicate", "4", "4", "4"], "unknown option --frobnicate"),
    ("matmul", ["4", "4", "4", "--tile"], "--tile needs a value"),
    ("matmul", ["4", "4", "4", "--config"], "--config needs a value"),
    ("matmul", ["4", "4", "99999999999"], "K must be at most 2147483647"),
    ("matmul", ["--tile", "99999999999", "4", "4", "4"], "--tile must be at most 2147483647"),
    ("matmul", ["--tile", "8", "4", "4", "4"], "02_tiled"),
    ("matmul", ["--variant", "all", "--tile", "8", "4", "4", "4"], "02_tiled"),
    ("matmul", ["4", "4"], "M, N and K are needed"),
    ("gemm_tc", ["8", "8", "8", "8"], "unexpected argument '8'"),
    ("gemm_tc", ["--bogus", "8", "8", "8"], "unknown option --bogus"),
    ("gemm_tc", ["8", "8", "8", "--variant"], "--variant needs a value"),
    ("gemm_tc", ["8", "8", "8", "--reps"], "--reps needs a value"),
    ("gemm_tc", ["8", "99999999999", "8"], "N must be at most 2147483647"),
    ("gemm_tc", ["--variant", "nope", "8", "8", "8"], "unknown variant 'nope' (valid: 01_wmma, 02_mma_sync, 03_wgmma"),
    ("gemm_tc", ["8", "8"], "M, N and K are needed"),
    # The default build has no block recorder: the flag says how to get one, before any CUDA call.
    ("matmul", ["--variant", "11_splitk_tail", "--timeline", "t.csv", "8", "8", "8"], "-DCUDALAB_TIMELINE"),
    ("matmul", ["--timeline"], "--timeline needs a value"),
    ("matmul", ["0", "5", "5"], "M must be a positive integer, got 0"),
    ("matmul", ["-3", "4", "4"], "M must be a positive integer, got -3"),
    ("matmul", ["4", "4", "x"], "K must be an integer, got 'x'"),
    ("matmul", ["--variant", "nope", "4", "4", "4"], "unknown variant 'nope' (01_naive, 02_tiled"),
    ("matmul", ["--tile", "0", "4", "4", "4"], "--tile must be a positive integer, got 0"),
    ("matmul", ["--config", "nope", "4", "4", "4"], "unknown configuration 'nope' (04_blocktile_1d"),
])
def test_bad_argv_is_one_sentence_and_status_2(prog, args, match):
    r = _run(prog, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and match in r.stderr, r.stderr
    assert "result" not in r.stdout  # refused before anything ran


# The programs with a variant table and profile arguments (argv that runs one variant); read at collection
# from the records only, never from a library (nothing is built then).
WITH_VARIANTS = [p for p in MINE if programs.record(p).variants and programs.record(p).profile_args is not None]


@pytest.mark.parametrize("prog", WITH_VARIANTS)
def test_an_unknown_variant_is_refused_naming_every_one_of_the_table(prog):
    """Whatever the program, a mistyped variant is one line that lists the names it could have been: the
    library's table, spelled from C (cudalab_name_list), never a list typed into the executable."""
    ensure_built(prog)
    table = library.read_table(prog)
    argv = programs.profile_argv(prog, table[0])
    if "--variant" not in argv:
        pytest.skip(f"{prog}'s executable runs one variant at a time without --variant")
    argv[argv.index("--variant") + 1] = "nope-x"
    r = _run(prog, *argv)
    assert r.returncode == 2 and r.stderr.startswith("error: unknown variant 'nope-x'"), r.stderr
    first = r.stderr.splitlines()[0]
    assert all(v in first for v in table), first


@pytest.mark.skipif(GPU_OK, reason="checks the no-GPU path; this machine has a GPU")
@pytest.mark.parametrize("prog,args", [("device_info", []), ("square", ["10"]), ("mandelbrot", ["8", "8", "8"]),
                                       ("attention", ["--seed", "0", "1", "1", "8", "64"]),
                                       ("transformer_block", ["--seed", "0", "--seq", "8"]),
                                       ("matmul", ["8", "8", "8"]), ("gemm_tc", ["16", "16", "16"])])
def test_without_a_gpu_the_executables_point_at_invoke_doctor(prog, args):
    """The argv (--seed 0 included: a seed like any other) is accepted; the first CUDA call is what fails."""
    r = _run(prog, *args)
    assert r.returncode == 1, r.stderr
    assert "invoke doctor" in r.stderr and "error:" not in r.stderr


@pytest.mark.parametrize("prog", ["square", "grayscale", "mandelbrot"])
def test_the_python_variant_names_are_the_c_table(prog):
    """One table per program, in the .cu, read through library.read_table: the module's VARIANTS and the
    registry's variants() are it, and an unknown name is refused with the table's names."""
    import importlib

    from harness import programs
    from harness.calling import library

    build.build(build.targets(prog))
    lib = library.load(prog)
    names = tuple(lib.ffi.string(getattr(lib, f"{prog}_variant_name")(i)).decode()
                  for i in range(getattr(lib, f"{prog}_variant_count")()))
    assert len(names) >= 2 and lib.raw(f"{prog}_variant_name")(len(names)) == lib.ffi.NULL
    assert importlib.import_module(f"harness.programs.{prog}").VARIANTS == names
    assert programs.variants(prog) == list(names)
    assert library.table_index(prog, "variant", names[-1]) == len(names) - 1
    with pytest.raises(ValueError, match=f"unknown {prog} variant 'nope'; valid: {', '.join(names)}$"):
        library.table_index(prog, "variant", "nope")
