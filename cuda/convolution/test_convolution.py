"""convolution: the float64 reference (a cross-correlation, pinned with an asymmetric filter), the
Python twins (01-06) against it, the checker failing wrong answers, argument errors before any launch,
the library's table; on a GPU, every variant of the library and the executable against numpy on random
inputs of ragged sizes with poisoned outputs, and 07/08's 16-byte and 4-byte paths (widths of whole
float4s or not, pointers on the 16-byte grid or off it)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from conftest import ensure_built
from harness.calling.results import relative_error
from harness.measuring import bench
from harness.programs import convolution as prog

TOL = prog.TOL  # float32 sums of <= 81 products against float64: see convolution.py's docstring

# 07's tile is 2048 outputs: 2048 is one whole tile, 4099 = 2 x 2048 + 3 and 6147 = 3 x 2048 + 3 are
# whole tiles and a last one of 3 outputs (a partial float4). 08's tile is 128 wide and 64 tall, and
# its 16-byte path needs w % 4 == 0: (1, 4), (64, 32), (67, 132), (128, 256) and (129, 260) take it,
# with partial tiles across, down, both or neither.
SIZES_1D = [1, 2, 255, 256, 1023, 1024, 1025, 2048, 4099, 6147, (1 << 20) + 3]
SHAPES_2D = [(1, 1), (1, 4), (1, 77), (64, 32), (65, 33), (67, 45), (67, 132), (128, 256), (129, 260), (1000, 1001)]
VEC_1D, VEC_2D = "07_vec_1d", "08_vec_2d"


def _loop_2d(x, f):
    """The 2-D formula written out element by element: the reference's shifted sums checked against it."""
    h, w = x.shape
    r = (f.shape[0] - 1) // 2
    out = np.zeros((h, w))
    for y in range(h):
        for c in range(w):
            for fy in range(2 * r + 1):
                for fx in range(2 * r + 1):
                    yy, cc = y - r + fy, c - r + fx
                    if 0 <= yy < h and 0 <= cc < w:
                        out[y, c] += float(f[fy, fx]) * float(x[yy, cc])
    return out


# --- the reference --------------------------------------------------------------------------------

@pytest.mark.parametrize("n,r", [(17, 8), (40, 3), (1000, 8), (9, 0)])
def test_the_reference_is_a_correlation_not_a_convolution(n, r):
    x, f = prog.random_problem((n,), r, n)
    ref = prog.reference(x, f)
    # np.convolve flips its second argument: with f reversed it is PMPP's sum, with f as it is not.
    assert np.allclose(ref, np.convolve(x.astype(np.float64), f[::-1].astype(np.float64), "same"), rtol=0, atol=1e-12)
    if r > 0:
        assert not np.allclose(ref, np.convolve(x.astype(np.float64), f.astype(np.float64), "same"), atol=1e-3)


@pytest.mark.parametrize("h,w,r", [(1, 1, 4), (7, 11, 2), (12, 5, 4), (6, 6, 0)])
def test_the_2d_reference_is_the_formula_with_zero_padding(h, w, r):
    x, f = prog.random_problem((h, w), r, h * w)
    assert np.allclose(prog.reference(x, f), _loop_2d(x, f), rtol=0, atol=1e-12)
    if r > 0 and h * w > 1:  # an asymmetric filter: the flipped one (a true convolution) is another answer
        assert not np.allclose(prog.reference(x, f[::-1, ::-1]), _loop_2d(x, f), atol=1e-3)


def test_an_impulse_comes_out_as_the_filter_reversed():
    x = np.zeros(21, dtype=np.float32)
    x[10] = 1.0
    f = np.arange(1, 8, dtype=np.float32)  # r = 3, strictly increasing
    ref = prog.reference(x, f)
    # out[i] = sum_j f[j] x[i - 3 + j]: the impulse at 10 meets tap j at i = 13 - j, so out[7..13] = f reversed
    # (a true convolution, np.convolve, would give f itself: the impulse response of a correlation is reversed).
    assert np.array_equal(ref[7:14], f[::-1].astype(np.float64))


# --- the twins ------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,r", [(1, 8), (2, 1), (31, 3), (128, 8), (129, 5), (300, 0), (777, 8)])
@pytest.mark.parametrize("threads,outs", [(32, 4), (8, 8), (16, 2)])
def test_the_1d_twins_match_numpy(n, r, threads, outs):
    x, f = prog.random_problem((n,), r, n + r)
    ref = prog.reference(x, f)
    for v in prog.twins_of(1):
        ok, err = prog.check(prog.twin(x, f, v, threads=threads, outs=outs), ref)
        assert ok, (v, n, r, err)


@pytest.mark.parametrize("h,w,r", [(1, 1, 4), (1, 19, 2), (17, 1, 1), (16, 8, 2), (23, 37, 4), (40, 9, 0)])
@pytest.mark.parametrize("block,rows", [((8, 2), 4), ((4, 4), 2), ((8, 1), 8)])
def test_the_2d_twins_match_numpy(h, w, r, block, rows):
    x, f = prog.random_problem((h, w), r, h * w + r)
    ref = prog.reference(x, f)
    for v in prog.twins_of(2):
        ok, err = prog.check(prog.twin(x, f, v, block=block, rows=rows), ref)
        assert ok, (v, h, w, r, err)


def test_the_tiled_twins_read_each_input_once_and_the_halos_twice():
    n, r, threads, outs = 300, 5, 16, 4
    x, f = prog.random_problem((n,), r, 3)
    loads = np.zeros(n, dtype=np.int64)
    prog.twin(x, f, prog.twins_of(1)[-1], threads=threads, outs=outs, loads=loads)
    span = threads * outs
    expect = np.ones(n, dtype=np.int64)
    for edge in range(span, n, span):  # each block boundary: r inputs on either side are someone's halo
        expect[edge - r:edge + r] += 1
    assert np.array_equal(loads, expect)

    h, w, r, block, rows = 37, 29, 2, (8, 2), 4
    x, f = prog.random_problem((h, w), r, 4)
    loads2 = np.zeros((h, w), dtype=np.int64)
    prog.twin(x, f, prog.twins_of(2)[-1], block=block, rows=rows, loads=loads2)
    assert np.array_equal(loads2, prog.tile_loads(h, w, r, block[1] * rows, block[0]))
    assert loads2.max() == 4 and loads2.min() == 1  # corners shared by four tiles


def test_the_on_cpu_table_passes_for_every_twin():
    df, how = prog.on_cpu([])
    assert set(df["variant"]) == set(prog.TWINS) and (df["check"] == "pass").all(), df
    with pytest.raises(ValueError, match="takes no arguments"):
        prog.on_cpu(["100"])


def test_the_twins_are_the_books_rungs_and_the_vec_rungs_have_none():
    ensure_built(prog.PROGRAM)
    names = list(prog.VARIANTS)
    assert [v for v in names if v in prog.TWINS] == list(prog.TWINS)  # every twin a variant, in table order
    assert set(names) - set(prog.TWINS) == {VEC_1D, VEC_2D}
    assert [prog.twins_of(1)[-1], prog.twins_of(2)[-1]] == ["03_tiled_1d", "06_tiled_2d"]  # the tiled twins
    x, f = prog.random_problem((50,), 1, 0)
    for v in (VEC_1D, VEC_2D):
        with pytest.raises(ValueError, match=f"no Python twin for '{v}'"):
            prog.twin(x, f, v)
    with pytest.raises(ValueError, match="unknown convolution variant 'nope'"):
        prog.twin(x, f, "nope")


# --- the checker ----------------------------------------------------------------------------------

def test_the_checker_fails_a_wrong_answer():
    x, f = prog.random_problem((500,), 8, 11)
    ref = prog.reference(x, f)
    good = prog.twin(x, f, prog.twins_of(1)[-1])
    assert prog.check(good, ref)[0]
    off = good.copy()
    off[137] += 0.05  # one output off by a few percent of a typical output
    assert not prog.check(off, ref)[0]
    assert not prog.check(good, prog.reference(x, f[::-1]))[0]  # the flipped filter: a true convolution
    shifted = np.roll(good, 1)
    assert not prog.check(shifted, ref)[0]
    unwritten = good.copy()
    unwritten[-1] = np.nan
    assert prog.check(unwritten, ref) == (False, float("inf"))
    assert not prog.check(good[:-1], ref)[0]


def test_the_checker_fails_a_wrong_edge():
    x, f = prog.random_problem((20, 30), 4, 12)
    ref = prog.reference(x, f)
    wrapped = np.zeros_like(ref)  # periodic instead of zero padding: only the borders differ
    r = 4
    for fy in range(2 * r + 1):
        for fx in range(2 * r + 1):
            wrapped += f[fy, fx] * np.roll(x.astype(np.float64), (r - fy, r - fx), axis=(0, 1))
    assert not prog.check(wrapped, ref)[0]


# --- the library's table and the argument checks --------------------------------------------------

def test_the_variant_table_comes_from_the_library():
    ensure_built(prog.PROGRAM)
    names = prog.VARIANTS
    assert [v[:2] for v in names] == [f"{i:02d}" for i in range(1, len(names) + 1)]  # numbered in order
    dims = [prog.variant_dims(v) for v in names]
    # The book's rungs 1-D then 2-D, the vec rungs after them: each name ends with its dimension.
    assert all(v.endswith(f"_{d}d") for v, d in zip(names, dims)) and set(dims) == {1, 2}
    assert (prog.variants_of(1)[-1], prog.variants_of(2)[-1]) == (VEC_1D, VEC_2D)  # the best rungs
    assert (prog.max_radius(1), prog.max_radius(2)) == (8, 4)
    assert prog.tiling(1)[1] == 1 and all(t > 0 for t in prog.tiling(1) + prog.tiling(2))
    assert prog.lib().convolution_variant_name(len(names)) == prog.lib().ffi.NULL
    assert prog.lib().convolution_variant_dims(-1) == 0 and prog.lib().convolution_tiling(3, 0) == -1


def test_bad_arguments_are_refused_before_any_launch():
    # Without a GPU a launch would raise CudaError; ValueError/TypeError say the check came first.
    ensure_built(prog.PROGRAM)
    x1, f1 = prog.random_problem((10,), 2, 0)
    x2, f2 = prog.random_problem((6, 7), 1, 0)
    with pytest.raises(ValueError, match="unknown convolution variant 'nope'"):
        prog.convolve_1d(x1, f1, "nope")
    with pytest.raises(ValueError, match="is a 2-D variant"):
        prog.convolve_1d(x1, f1, prog.variants_of(2)[0])
    with pytest.raises(ValueError, match="is a 1-D variant"):
        prog.convolve_2d(x2, f2, prog.variants_of(1)[0])
    with pytest.raises(ValueError, match="radius must be 0..8"):
        prog.convolve_1d(x1, np.ones(19, np.float32))
    with pytest.raises(ValueError, match="radius must be 0..4"):
        prog.convolve_2d(x2, np.ones((11, 11), np.float32))
    with pytest.raises(ValueError, match=r"2r\+1 taps a side \(an odd number\)"):
        prog.convolve_1d(x1, np.ones(4, np.float32))
    with pytest.raises(ValueError, match="must be square"):
        prog.convolve_2d(x2, np.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match="finite"):
        prog.convolve_1d(x1, np.array([1, np.inf, 1], np.float32))
    with pytest.raises(TypeError, match="float32"):
        prog.convolve_1d(x1.astype(np.float64), f1)
    with pytest.raises(TypeError, match="float32"):
        prog.convolve_1d(x1, f1.astype(np.float64))
    with pytest.raises(ValueError, match="1-D"):
        prog.convolve_1d(x2, f1)
    with pytest.raises(ValueError, match="C-contiguous"):
        prog.convolve_2d(np.asfortranarray(np.ones((4, 5), np.float32)), f2)
    with pytest.raises(ValueError, match="n must be >= 0"):
        prog.convolve_dev(prog.variants_of(1)[0], 0, 0, 2, 0, n=-1)
    with pytest.raises(ValueError, match="n must be at most"):
        prog.convolve_dev(prog.variants_of(1)[0], 0, 0, 2, 0, n=prog.lib().convolution_max_n() + 1)
    with pytest.raises(ValueError, match="h must be at most"):
        prog.convolve_dev(prog.variants_of(2)[0], 0, 0, 1, 0, h=prog.lib().convolution_max_height() + 1, w=1)
    with pytest.raises(ValueError, match="radius must be 0..4"):
        prog.convolve_dev(prog.variants_of(2)[0], 0, 0, 5, 0, h=1, w=1)
    with pytest.raises(TypeError, match="radius must be an integer"):
        prog.convolve_dev(prog.variants_of(1)[0], 0, 0, 2.0, 0, n=1)
    with pytest.raises(ValueError, match="1-D or 2-D"):
        prog.convolve(np.ones((2, 2, 2), np.float32), f1)


def test_the_bench_cases_hold_the_best_rungs_to_their_goal():
    ensure_built(prog.PROGRAM)
    cases = prog.bench_cases()
    assert {c.kwargs["variant"] for c in cases} == set(prog.VARIANTS)
    goals = {(c.variant, c.size): c.target for c in cases if c.target is not None}
    assert goals == {(prog.variants_of(1)[-1], f"2^26 r{prog.R_1D}"): 0.9,
                     (prog.variants_of(2)[-1], f"8192^2 r{prog.R_2D}"): 0.9}
    # The 9x9 case's FP32 row follows the best 2-D rung too.
    assert [c.variant for c in cases if c.ceiling == "fp32"] == [f"{prog.variants_of(2)[-1]}-vs-fp32"]
    keys = [(c.variant, c.size) for c in cases]
    assert len(keys) == len(set(keys))  # one row per variant, size and ceiling
    for c in cases:
        json.dumps(c.kwargs)  # they cross into the timing child
        dims = prog.variant_dims(c.kwargs["variant"])
        elems = c.kwargs["n"] if dims == 1 else c.kwargs["h"] * c.kwargs["w"]
        assert c.bytes == 8.0 * elems and c.ceiling in (bench.memcpy_of(4 * elems), "fp32")
    assert all(c.quick for c in prog.bench_cases(quick=True))


def test_every_variant_is_profiled_and_sanitized():
    ensure_built(prog.PROGRAM)
    runs = prog.sanitize_args()
    for v in prog.VARIANTS:
        assert sum(1 for a in runs.values() if a[1] == v) == 3
        assert prog.profile_args(v)[:2] == ["--variant", v]
    # 08 is sanitized on a width of whole float4s (its 16-byte path) and on an odd one (its 4-byte path),
    # and profiled on its 16-byte path.
    widths = {int(a[-1]) % 4 for a in runs.values() if a[1] == VEC_2D}
    assert widths == {0, 1}
    assert int(prog.profile_args(VEC_2D)[-1]) % 4 == 0


@pytest.mark.parametrize("args,says", [
    (["0"], "N must be a positive integer"), (["x"], "N must be an integer"),
    (["--variant", "nope"], "unknown variant 'nope'"), (["--radius", "9"], "--radius must be at most 8"),
    (["--radius", "-1"], "--radius must be at least 0"), (["--variant", "06_tiled_2d", "--radius", "5"], "at most 4"),
    (["5", "6"], "a 1-D variant takes one size N"), (["--variant", "04_naive_2d", "0", "5"], "H must be a positive"),
    (["--bogus"], "unknown option --bogus"), (["--reps", "0"], "--reps must be a positive integer")])
def test_the_executable_refuses_bad_argv_in_one_line(args, says):
    exe = ensure_built(prog.PROGRAM, "exe")
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and r.stdout == "", r


def test_the_picture_draws_from_the_simulator(tmp_path):
    ensure_built(prog.PROGRAM)
    from analysis import convolution as draw

    data = prog.viz_data(simulate=True)
    assert data["check"] == "pass" and data["simulated"]
    th, tw = data["tile"]
    assert np.array_equal(data["loads"], prog.tile_loads(*data["x"].shape, data["r"], th, tw))
    paths = draw.plot(data, tmp_path)
    assert paths and all(p.is_file() and p.stat().st_size > 10_000 for p in paths)


# --- on a GPU -------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES_1D)
@pytest.mark.parametrize("seed", [0, 1])
def test_the_1d_library_matches_numpy(n, seed):
    for r in (0, 3, prog.max_radius(1)):
        x, f = prog.random_problem((n,), r, seed)
        ref = prog.reference(x, f)
        for v in prog.variants_of(1):
            assert relative_error(prog.convolve_1d(x, f, v), ref) <= TOL, (v, n, r)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES_2D)
@pytest.mark.parametrize("seed", [0, 1])
def test_the_2d_library_matches_numpy(shape, seed):
    for r in (0, 1, prog.max_radius(2)):
        x, f = prog.random_problem(shape, r, seed)
        ref = prog.reference(x, f)
        for v in prog.variants_of(2):
            assert relative_error(prog.convolve_2d(x, f, v), ref) <= TOL, (v, shape, r)


def _on_device(variant, x, f, out_fill=0xFF):
    """The `_dev` path: device buffers, the output poisoned (0xFF bytes: NaN), the filter loaded."""
    from harness.calling import cudart

    r = prog.set_filter(f)
    dx, df = cudart.DeviceBuffer.from_array(x), cudart.DeviceBuffer.from_array(np.ascontiguousarray(f))
    dout = cudart.DeviceBuffer(x.nbytes)
    try:
        dout.fill_bytes(out_fill)
        if x.ndim == 1:
            prog.convolve_dev(variant, dx, df, r, dout, n=x.size)
        else:
            prog.convolve_dev(variant, dx, df, r, dout, h=x.shape[0], w=x.shape[1])
        cudart.synchronize()
        return dout.to_host(np.empty_like(x))
    finally:
        for b in (dx, df, dout):
            b.close()


@pytest.mark.gpu
@pytest.mark.parametrize("fill", [0xFF, 0x7F])  # NaN, and a large finite float (an unwritten output fails either way)
def test_the_device_path_writes_every_output(fill):
    for v in prog.VARIANTS:
        for shape in [(4099,)] if prog.variant_dims(v) == 1 else [(67, 45), (67, 44)]:  # 08: both paths
            r = prog.max_radius(prog.variant_dims(v))
            x, f = prog.random_problem(shape, r, 5)
            assert relative_error(_on_device(v, x, f, fill), prog.reference(x, f)) <= TOL, (v, shape)


@pytest.mark.gpu
def test_each_radius_keeps_its_own_constant_filter():
    for dims in (1, 2):
        shape = (5000,) if dims == 1 else (70, 90)
        x, f_small = prog.random_problem(shape, 1, 7)
        _, f_big = prog.random_problem(shape, prog.max_radius(dims), 8)
        prog.set_filter(f_small)
        prog.set_filter(f_big)  # another slot: f_small is still there for radius 1
        for v in prog.variants_of(dims)[1:]:  # the constant and tiled rungs
            from harness.calling import cudart

            dx, dout = cudart.DeviceBuffer.from_array(x), cudart.DeviceBuffer(x.nbytes)
            try:
                dout.fill_bytes(0xFF)
                prog.convolve_dev(v, dx, None, 1, dout, n=x.size if dims == 1 else 0,
                                  h=shape[0] if dims == 2 else 0, w=shape[-1] if dims == 2 else 0)
                cudart.synchronize()
                got = dout.to_host(np.empty_like(x))
            finally:
                dx.close()
                dout.close()
            assert relative_error(got, prog.reference(x, f_small)) <= TOL, v


@pytest.mark.gpu
def test_the_tiled_1d_rung_refuses_a_misaligned_output():
    from harness.base.errors import CudaError
    from harness.calling import cudart

    x, f = prog.random_problem((1000,), 2, 9)
    prog.set_filter(f)
    dx, dout = cudart.DeviceBuffer.from_array(x), cudart.DeviceBuffer(x.nbytes + 4)
    try:
        with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
            prog.convolve_dev("03_tiled_1d", dx, None, 2, cudart.ffi.cast("char *", dout.ptr) + 4, n=999)
    finally:
        dx.close()
        dout.close()


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 3, 4, 5, 2047, 2048, 2051, 3 * 2048 + 3, 5 * 2048])
def test_the_1d_vec_rung_matches_numpy_at_every_radius(n):
    # cudaMalloc'd buffers: the 16-byte path, with the array ending inside a float4 (n % 4 != 0), inside
    # a tile, or on a tile's edge, and halos of 0, 1 and 2 float4s (r = 0, 1..4, 5..8).
    for r in range(prog.max_radius(1) + 1):
        x, f = prog.random_problem((n,), r, n + r)
        assert relative_error(_on_device(VEC_1D, x, f), prog.reference(x, f)) <= TOL, (n, r)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 4), (1, 5), (3, 8), (64, 128), (65, 132), (67, 44), (67, 45), (129, 260),
                                   (130, 257), (200, 4)])
def test_the_2d_vec_rung_matches_numpy_at_every_radius(shape):
    # w % 4 == 0: the 16-byte path, with partial tiles across (w not a multiple of 128) and down (h not a
    # multiple of 64); w % 4 != 0: the 4-byte path on the same tiles.
    for r in range(prog.max_radius(2) + 1):
        x, f = prog.random_problem(shape, r, shape[0] * shape[1] + r)
        assert relative_error(_on_device(VEC_2D, x, f), prog.reference(x, f)) <= TOL, (shape, r)


@pytest.mark.gpu
@pytest.mark.parametrize("variant,shape", [(VEC_1D, (2 * 2048 + 77,)), (VEC_1D, (6,)), (VEC_2D, (67, 132)),
                                           (VEC_2D, (5, 8))])
@pytest.mark.parametrize("shift_x,shift_out", [(0, 0), (4, 0), (0, 8), (12, 4)])
def test_the_vec_rungs_take_pointers_off_the_16_byte_grid(variant, shape, shift_x, shift_out):
    # A view that starts 4, 8 or 12 bytes into an allocation (a slice of a larger array): 07 and 08 take
    # their 4-byte path there (03 refuses such an output). The bytes around the output stay untouched.
    from harness.calling import cudart

    r = prog.max_radius(len(shape))
    x, f = prog.random_problem(shape, r, 13)
    prog.set_filter(f)
    n = x.size
    with cudart.DeviceBuffer(4 * n + 16) as dx, cudart.DeviceBuffer(4 * n + 32) as dout:
        dx.fill_bytes(0x7F)  # large finite floats around x: a read past either end shows in the sums
        dout.fill_bytes(0xAB)
        px = cudart.ffi.cast("char *", dx.ptr) + shift_x
        po = cudart.ffi.cast("char *", dout.ptr) + shift_out
        cudart.memcpy_htod(px, x)
        if len(shape) == 1:
            prog.convolve_dev(variant, px, None, r, po, n=n)
        else:
            prog.convolve_dev(variant, px, None, r, po, h=shape[0], w=shape[1])
        cudart.synchronize()
        whole = np.empty(n + 8, np.float32)
        dout.to_host(whole)
    raw = whole.view(np.uint8)
    got = raw[shift_out:shift_out + 4 * n].view(np.float32).reshape(shape)
    assert relative_error(got, prog.reference(x, f)) <= TOL
    assert (raw[:shift_out] == 0xAB).all() and (raw[shift_out + 4 * n:] == 0xAB).all()


@pytest.mark.gpu
def test_the_checker_fails_the_gpu_answer_against_a_wrong_reference():
    x, f = prog.random_problem((333, 257), 2, 10)
    out = prog.convolve_2d(x, f)
    ref = prog.reference(x, f)
    assert prog.check(out, ref)[0]
    perturbed = ref.copy()
    perturbed[100, 100] += 0.05
    assert not prog.check(out, perturbed)[0]
    assert not prog.check(out, prog.reference(x, f[::-1, ::-1]))[0]


@pytest.mark.gpu
@pytest.mark.parametrize("dims,size", [(1, ["1"]), (1, ["4099"]), (1, ["1000003"]), (2, ["1"]), (2, ["67", "45"]),
                                       (2, ["1023", "2047"]), (2, ["300"])])
def test_the_executable_checks_itself(dims, size):
    for v in prog.variants_of(dims):
        for r in (1, prog.max_radius(dims)):
            df = prog.run(*size, "--variant", v, "--radius", str(r), "--seed", "7", "--reps", "1")
            assert list(df["check"]) == ["pass"] and int(df["r"].iloc[0]) == r, (v, size)


@pytest.mark.gpu
def test_the_picture_from_the_gpu_matches_numpy():
    data = prog.viz_data()
    assert data["check"] == "pass" and not data["simulated"]
