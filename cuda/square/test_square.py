"""square: twins vs numpy, argument checks, the executables' argv and checks, and (GPU) every
variant against numpy on ragged sizes with random data and poisoned outputs."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import fault_build
from conftest import built_names, ensure_built, poison
from harness.base.errors import CudaError, ProgramError
from harness.calling import cudart, library, runner
from harness.compile import build as hb
from harness.compile import toolchain
from harness.programs import square as sq

SIZES = [1, 2, 3, 255, 257, 4099, 2**20 + 3, 2**24 + 1]  # the large case: 64 MiB, ragged (bigger is the bench's)
RTOL = 1e-5  # float32 elementwise (ARCHITECTURE.md, Tests); x*x is one correctly rounded multiply, so 0 is expected


@pytest.fixture(scope="module")
def built():
    """Build libsquare.so, build/bin/square and build/bin/square_cpu (incremental; nvcc only, no GPU)."""
    ensure_built("square")
    return True


@pytest.fixture(scope="module")
def built_faults():
    """Build the fault build's build/faults/bin/square (its --skip-every and --oob; nvcc only, no GPU)."""
    fault_build.build_twin("square", "exe")
    return True


def random_f32(rng, n):
    # Never zeros; a spread of magnitudes, both signs.
    x = rng.standard_normal(n, dtype=np.float32) * np.float32(8)
    x[x == 0] = 1.5
    return x


# --- CPU: references and twins --------------------------------------------------------------------

def test_reference_int32_wraps_like_numpy(rng):
    a = rng.integers(-2**31, 2**31, size=1000, dtype=np.int32)
    a[:4] = [46341, -46341, 2**31 - 1, -2**31]  # the first squares that overflow, and the extremes
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(sq.reference(a), a * a)
    assert sq.reference(np.array([46341], np.int32))[0] == np.int32(46341 * 46341 - 2**32)


def test_reference_float32_is_the_rounded_square(rng):
    x = random_f32(rng, 1000)
    np.testing.assert_array_equal(sq.reference(x), x * x)
    assert sq.reference(x).dtype == np.float32


@pytest.mark.parametrize("variant", built_names(lambda: sq.VARIANTS, "square"))
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 17, 33, 100])
@pytest.mark.parametrize("threads,blocks", [(4, 1), (8, 3), (32, 2)])
def test_twins_match_numpy(variant, n, threads, blocks, rng):
    x = random_f32(rng, n)
    out = sq.twin(x, variant, threads=threads, blocks=blocks)
    np.testing.assert_array_equal(out, sq.reference(x))


@pytest.mark.parametrize("misalign", [0, 1, 2, 3])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 16, 19, 101])
def test_vectorized_twin_head_and_tail(misalign, n, rng):
    """Every alignment the API allows: the scalar head, the float4 body and the tail cover n once."""
    x = random_f32(rng, n)
    out = sq.twin(x, "03_vectorized", threads=4, blocks=2, misalign=misalign)
    np.testing.assert_array_equal(out, sq.reference(x))
    assert sq.vectorized_head(misalign, n) == min((4 - misalign) % 4, n)


@pytest.mark.parametrize("shape", [(1, 1), (1, 17), (17, 1), (15, 17), (16, 16), (33, 31)])
def test_matrix_twin_ragged(shape, rng):
    x = random_f32(rng, shape[0] * shape[1]).reshape(shape)
    np.testing.assert_array_equal(sq.twin(x), sq.reference(x))


def test_int32_twin_wraps(rng):
    a = rng.integers(-2**31, 2**31, size=300, dtype=np.int32)
    np.testing.assert_array_equal(sq.twin(a, threads=32), sq.reference(a))


def test_checker_fails_on_a_wrong_answer(rng):
    x = random_f32(rng, 1000)
    ref = sq.reference(x)
    sq.check_close(ref.copy(), ref)
    wrong = ref.copy()
    wrong[500] *= 1.01
    with pytest.raises(AssertionError):
        sq.check_close(wrong, ref)
    unwritten = ref.copy()
    unwritten[-1] = np.nan  # a poisoned element left behind must fail, not vanish from the norm
    with pytest.raises(AssertionError):
        sq.check_close(unwritten, ref)


# --- CPU: argument checks happen before anything is launched --------------------------------------

@pytest.fixture
def no_library(monkeypatch):
    def boom():
        raise AssertionError("the library was reached: arguments must be checked first")

    monkeypatch.setattr(sq, "lib", boom)


@pytest.mark.parametrize("call,exc,match", [
    (lambda: sq.square(np.ones(8, np.float64)), TypeError, "float32"),
    (lambda: sq.square([1.0, 2.0]), TypeError, "numpy array"),
    (lambda: sq.square(np.ones((2, 4), np.float32)), ValueError, "1-D"),
    (lambda: sq.square(np.ones(16, np.float32)[::2]), ValueError, "contiguous"),
    (lambda: sq.square(np.ones(8, np.float32), variant="04_magic"), ValueError,
     "01_naive, 02_grid_stride, 03_vectorized"),
    (lambda: sq.square(np.ones(8, np.float32), out=np.ones(7, np.float32)), ValueError, "shape"),
    (lambda: sq.square(np.ones(8, np.float32), out=np.ones(8, np.int32)), TypeError, "float32"),
    (lambda: (lambda a: sq.square(a, out=a))(np.ones(8, np.float32)), ValueError, "overlap"),
    (lambda: sq.square_int32(np.ones(8, np.int64)), TypeError, "int32"),
    (lambda: sq.square_int32(np.ones(8, np.int32), threads=0), ValueError, "threads"),
    (lambda: sq.square_int32(np.ones(8, np.int32), threads=2048), ValueError, "threads"),
    (lambda: sq.square_matrix(np.ones(8, np.float32)), ValueError, "2-D"),
    (lambda: sq.square_matrix(np.ones((3, 3), np.float32).T[:, :2]), ValueError, "contiguous"),
    (lambda: sq.square_dev("nope", None, None, 1), ValueError, "unknown square variant 'nope'; valid: 01_naive"),
])
def test_bad_arguments_raise_before_launch(built, no_library, call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_empty_arrays_need_no_launch(no_library):
    assert sq.square(np.empty(0, np.float32)).shape == (0,)
    assert sq.square_int32(np.empty(0, np.int32)).shape == (0,)
    assert sq.square_matrix(np.empty((0, 5), np.float32)).shape == (0, 5)


# --- CPU: the built library and the executables' argument handling ---------------------------------

def test_library_agrees_on_variant_names(built):
    assert sq.VARIANTS == ("01_naive", "02_grid_stride", "03_vectorized")  # the C table, read back in order


def test_library_exports_its_header(built):
    """Each entry point is a defined dynamic symbol of libsquare.so, and the loader reads the header's
    return types: statuses raise on non-zero, the variant count is a value."""
    nm = subprocess.run(["nm", "-D", "--defined-only", str(hb.lib_path("square"))], capture_output=True,
                        text=True, check=True).stdout
    exported = {line.split()[-1] for line in nm.splitlines() if line.strip()}
    names = {"square_int32", "square_int32_dev", "square_f32", "square_f32_dev", "square_matrix",
             "square_matrix_dev", "square_variant_count", "square_variant_name"}
    assert names <= exported, sorted(names - exported)
    L = library.load("square")
    assert L.square_variant_count() == len(sq.VARIANTS)  # a value: 3 does not raise CudaError
    assert {"square_int32", "square_f32_dev", "square_matrix"} <= L._status
    assert "square_variant_count" not in L._status


def test_square_cpu_prints_the_table(built):
    r = runner.run("square_cpu", 5, "--print", 5)
    rows = re.findall(r"^\s*(\d+) ->\s+(-?\d+)$", r.stdout, re.M)
    assert [(int(a), int(b)) for a, b in rows] == [(i, i * i) for i in range(1, 6)]
    assert "result program=square_cpu n=5 " in r.stdout and "check=pass" in r.stdout


def test_square_cpu_default_and_wraparound(built):
    r = runner.run("square_cpu")
    assert "n=100000" in r.stdout and "check=pass" in r.stdout  # 100000^2 overflows int32: the check wraps too


@pytest.mark.parametrize("args,match", [(["0"], "positive"), (["-3"], "positive"), (["ten"], "integer"),
                                        (["5", "--print", "0"], "positive")])
def test_square_cpu_bad_argv(built, args, match):
    r = runner.run("square_cpu", *args, check=False)
    assert r.returncode == 2 and match in r.stderr


# These are refused before the program touches the device, so they run without a GPU.
@pytest.mark.parametrize("args,match", [(["0"], "N must be a positive"), (["-5", "32"], "N must be a positive"),
                                        (["100", "0"], "THREADS must be a positive"),
                                        (["100", "x"], "integer"), (["--bogus"], "unknown option"),
                                        (["100", "--print"], "needs a value")])
def test_square_bad_argv(built, args, match):
    r = runner.run("square", *args, check=False)
    assert r.returncode == 2, r.stderr
    assert match in r.stderr


def test_bench_cases_describe_the_work():
    full = sq.bench_cases(quick=False)
    big = {c.variant: c for c in full if c.size == "2^28"}
    assert set(big) == set(sq.VARIANTS)
    for c in full:
        n = 1 << (28 if c.size == "2^28" else 24)
        assert c.amount == 8 * n and c.bytes == 8 * n and c.unit == "GB/s" and c.ceiling == "memcpy"
    assert big["03_vectorized"].target == 0.95
    assert big["01_naive"].target is None
    quick = sq.bench_cases(quick=True)
    assert quick and all(c.quick and c.size == "2^24" for c in quick)


# --- GPU ------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("variant", built_names(lambda: sq.VARIANTS, "square"))
def test_variants_match_numpy(built, variant, n, rng):
    x = random_f32(rng, n)
    out = poison(n, np.float32)
    sq.square(x, variant, out=out)
    sq.check_close(out, sq.reference(x), RTOL)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: sq.VARIANTS, "square"))
@pytest.mark.parametrize("x_off,out_off", [(1, 1), (2, 2), (3, 3), (0, 1), (1, 3), (2, 0)])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 4099, 2**20 + 3])
def test_device_pointers_at_every_alignment(built, variant, x_off, out_off, n, rng):
    """The device-pointer form at float offsets from a 16-byte boundary: equal offsets take the
    head/body/tail path, different ones the scalar fallback; both must cover exactly n."""
    x = random_f32(rng, n)
    ffi = cudart.ffi
    with cudart.DeviceBuffer(4 * (n + 8)) as dx, cudart.DeviceBuffer(4 * (n + 8)) as dout:
        dout.fill_bytes(0xFF)  # NaN everywhere, including around the slice
        px = ffi.cast("float *", dx.ptr) + x_off
        po = ffi.cast("float *", dout.ptr) + out_off
        cudart.memcpy_htod(px, x)
        sq.square_dev(variant, px, po, n)
        cudart.synchronize()
        got = np.empty(n + 8, np.float32)
        dout.to_host(got)
    sq.check_close(got[out_off:out_off + n], sq.reference(x), RTOL)
    # Nothing outside [out_off, out_off + n) was written.
    assert np.isnan(got[:out_off]).all() and np.isnan(got[out_off + n:]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: sq.VARIANTS, "square"))
@pytest.mark.parametrize("blocks,threads", [(1, 32), (3, 64), (7, 1024)])
def test_explicit_small_grids_stride(built, variant, blocks, threads, rng):
    """A grid much smaller than the array: 02 and 03 must loop (01 ignores blocks by design)."""
    n = 2**20 + 3
    x = random_f32(rng, n)
    with cudart.DeviceBuffer(4 * n) as dx, cudart.DeviceBuffer(4 * n) as dout:
        dout.fill_bytes(0xFF)
        cudart.memcpy_htod(dx.ptr, x)
        sq.square_dev(variant, dx, dout, n, blocks=blocks, threads=threads)
        cudart.synchronize()
        got = dout.to_host(np.empty(n, np.float32))
    sq.check_close(got, sq.reference(x), RTOL)


@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES)
def test_int32_in_place_wraps_like_numpy(built, n, rng):
    a = rng.integers(-2**31, 2**31, size=n, dtype=np.int32)
    a[a == 0] = 7
    ref = sq.reference(a)
    got = sq.square_int32(a)
    assert got is a
    np.testing.assert_array_equal(a, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [1, 32, 100, 1024])
def test_int32_block_sizes(built, threads):
    a = np.arange(1, 5001, dtype=np.int32)
    with np.errstate(over="ignore"):
        expect = a * a
    np.testing.assert_array_equal(sq.square_int32(a, threads=threads), expect)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1), (1, 17), (17, 1), (15, 17), (255, 257), (1000, 1023), (4099, 3)])
def test_square_matrix_ragged(built, shape, rng):
    x = random_f32(rng, shape[0] * shape[1]).reshape(shape)
    out = poison(shape, np.float32)
    sq.square_matrix(x, out=out)
    sq.check_close(out, sq.reference(x), RTOL)


@pytest.mark.gpu
def test_library_refuses_bad_launches(built):
    L = library.load("square")
    with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
        L.square_int32(np.ones(4, np.int32), 4, 4096)  # more threads per block than any device allows
    with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
        L.square_f32(L.ffi.new("char[]", b"04_magic"), np.ones(4, np.float32), np.ones(4, np.float32), 4)


@pytest.mark.gpu
def test_executable_passes_and_prints(built):
    r = runner.run("square", 1000, 128, "--print", 3)
    rows = re.findall(r"^\s*(\d+) ->\s+(-?\d+)$", r.stdout, re.M)
    assert [(int(a), int(b)) for a, b in rows] == [(1, 1), (2, 4), (3, 9)]
    res = re.search(r"^result .*$", r.stdout, re.M).group(0)
    assert "program=square" in res and "n=1000" in res and "blocks=8" in res and res.endswith("check=pass")


@pytest.mark.gpu
def test_executable_overflowing_sizes_pass(built):
    r = runner.run("square", 200003, 1024)  # squares past 46340 wrap; the host check wraps the same way
    assert "check=pass" in r.stdout


@pytest.mark.gpu
def test_executable_rejects_too_many_threads(built):
    r = runner.run("square", 1000, 4096, check=False)
    assert r.returncode == 2 and "THREADS must be at most" in r.stderr


@pytest.mark.gpu
def test_executable_check_can_fail(built_faults):
    """--skip-every (the fault build's) leaves every 7th element alone: the host check must catch it."""
    with pytest.raises(ProgramError) as e:
        runner.run("square", 1000, 256, "--skip-every", 7, faults=True)
    assert e.value.returncode == 1
    assert "check=fail" in e.value.stdout and "mismatches=142" in e.value.stdout
    assert "check failed" in e.value.stderr_tail


@pytest.mark.gpu
def test_planted_oob_is_found_by_compute_sanitizer(built_faults):
    """--oob (the fault build's) writes one element past the managed allocation; memcheck must say so,
    and must stay quiet on a normal run. Runs in subprocesses, like any deliberate memory error."""
    tool = toolchain.find("compute-sanitizer")
    if not tool.found:
        pytest.skip("compute-sanitizer not found")
    exe = str(runner.executable("square", faults=True))
    clean = subprocess.run([tool.path, "--tool", "memcheck", "--error-exitcode", "3", exe, "1000", "256"],
                           capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    bad = subprocess.run([tool.path, "--tool", "memcheck", "--error-exitcode", "3", exe, "1000", "256", "--oob"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 3, bad.stdout + bad.stderr
    assert "Invalid __global__" in bad.stdout + bad.stderr


@pytest.mark.gpu
def test_compare_builds_its_table(built):
    df, text = sq.compare(n=10000, runs=2)
    assert len(df) == 5 and (df["median_ms"] > 0).all()
    assert {"what", "median_ms", "speedup_vs_cpu_process"} <= set(df.columns)
    assert "context" in text and "managed" in text
