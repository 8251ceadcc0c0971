"""transpose: the numpy reference, the exact checker, the Python twins on the simulator, the access and bank
maps they record, the bench's cases and ceilings, argv refused before any CUDA call and, on a GPU, every
variant of the library and the executable against numpy on random inputs of ragged shapes with poisoned
outputs. A transpose computes nothing, so every comparison is exact (bit for bit), with no tolerance."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from conftest import ensure_built, poison, refuse_loads_after_the_table
from harness import programs
from harness.calling import cudart, library
from harness.measuring import bench
from harness.programs import transpose as tp

VARIANT_POSITIONS = [tp.NAIVE, tp.SHARED_TILE, tp.PADDED, tp.COARSENED, tp.WIDE]
# Ragged against the 32-wide tile on either axis or both, a single row and column, whole tiles.
TWIN_SHAPES = [(1, 1), (1, 33), (33, 1), (31, 33), (32, 32), (64, 32), (70, 31), (45, 100)]
GPU_SHAPES = [(1, 1), (1, 37), (37, 1), (32, 32), (31, 33), (33, 65), (64, 96), (130, 4100), (2048, 4094),
              (1000, 1), (4099, 2053),
              (2053, 4099), (4097, 8191)]  # the last: 32 Mi elements (128 MiB a matrix), ragged both ways


@pytest.fixture(scope="module")
def built():
    """libtranspose.so and build/bin/transpose (incremental; nvcc only, no GPU)."""
    ensure_built(tp.PROGRAM)
    ensure_built(tp.PROGRAM, "exe")
    return True


def _matrix(rng, rows, cols):
    # Never zeros, both signs, a spread of magnitudes: a misplaced element is always a different word.
    x = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(8)
    x[x == 0] = 1.5
    return x


# --- CPU: the table, the reference, the checker ---------------------------------------------------

def test_the_variant_table_is_read_from_the_built_library(built):
    names = library.read_table(tp.PROGRAM)
    assert len(names) == len(VARIANT_POSITIONS)  # the Python positions NAIVE..WIDE cover the table
    assert [n[:3] for n in names] == [f"{i + 1:02d}_" for i in range(len(names))]  # numbered in a learner's order
    assert tp.VARIANTS == names and tp.variant_name(tp.WIDE) == names[-1]
    assert tp.lib().transpose_tile() == tp.TILE
    assert tp.lib().transpose_max_rows() == tp.max_rows()


def test_the_reference_is_numpys_transpose(rng):
    x = _matrix(rng, 7, 5)
    ref = tp.reference(x)
    assert ref.shape == (5, 7) and ref.flags.c_contiguous and ref.dtype == np.float32
    assert all(ref[c, r] == x[r, c] for r in range(7) for c in range(5))
    with pytest.raises(ValueError, match="2-D"):
        tp.reference(x.ravel())


def test_the_checker_fails_a_wrong_answer(rng):
    x = _matrix(rng, 33, 40)
    ref = tp.reference(x)
    assert tp.mismatches(ref.copy(), ref) == 0
    one_ulp = ref.copy()
    one_ulp[3, 7] = np.nextafter(one_ulp[3, 7], np.float32(np.inf))
    assert tp.mismatches(one_ulp, ref) == 1
    unwritten = ref.copy()
    unwritten[-1, -1] = np.nan
    assert tp.mismatches(unwritten, ref) == 1
    assert tp.mismatches(np.full_like(ref, np.nan), ref) == ref.size
    signed_zero = np.zeros((2, 2), np.float32)
    assert tp.mismatches(-signed_zero, signed_zero) == 4  # words, not values: -0.0 is not 0.0
    assert tp.mismatches(x.reshape(40, 33), ref) > 0  # the input's words in out's shape: not transposed
    with pytest.raises(ValueError, match="mismatch"):
        tp.mismatches(x, ref)


# --- CPU: the twins on the simulator --------------------------------------------------------------

@pytest.mark.parametrize("pos", VARIANT_POSITIONS)
@pytest.mark.parametrize("shape", TWIN_SHAPES)
def test_the_twin_matches_numpy_at_the_gpus_tile(built, pos, shape):
    x = _matrix(np.random.default_rng(shape[0] * 1000 + shape[1]), *shape)
    assert tp.mismatches(tp.twin(x, tp.variant_name(pos)), tp.reference(x)) == 0


@pytest.mark.parametrize("pos", VARIANT_POSITIONS)
@pytest.mark.parametrize("tile", [4, 8])
def test_the_twin_matches_numpy_at_smaller_tiles(built, pos, tile, rng):
    for shape in [(1, 1), (tile + 1, 2 * tile + 3), (3 * tile, tile), (5, 17)]:
        x = _matrix(rng, *shape)
        assert tp.mismatches(tp.twin(x, tp.variant_name(pos), tile=tile), tp.reference(x)) == 0, shape


def test_the_barrier_is_what_makes_the_tile_work():
    """tiled_k without its barrier: on the simulator a thread then reads tile cells that later threads
    have not written yet (NaN), and the checker catches it."""
    def no_barrier(ctx, x, out, rows, cols):
        g = tp.tiled_k(ctx, x, out, rows, cols)
        next(g, None)  # the loads ...
        next(g, None)  # ... and straight on to the writes: no other thread has run in between

    x = _matrix(np.random.default_rng(0), 8, 8)
    out = np.full(64, np.nan, dtype=np.float32)
    from harness.base import sim

    sim.launch(no_barrier, sim.dim3(2, 2), sim.dim3(4, 4), x.ravel(), out, 8, 8,
               shared={"tile": ((4, 4), np.float32)})
    assert tp.mismatches(out.reshape(8, 8), tp.reference(x)) > 0


@pytest.mark.parametrize("tile", [0, 3, 6, 64, 2.0, True])
def test_the_twin_refuses_a_tile_it_cannot_run(built, tile):
    with pytest.raises((ValueError, TypeError), match="tile"):
        tp.twin(np.ones((4, 4), np.float32), tile=tile)


def test_the_access_maps_show_the_coalescing_lesson(built):
    """01: one row of threads (one threadIdx.y) reads along a row of in but writes down a column of out;
    02: it writes along a row of out. Each element is moved by exactly one thread of the traced block."""
    tile, rows, cols = 8, 12, 20
    naive = tp.access_map(tp.variant_name(tp.NAIVE), rows, cols, tile, block=(1, 0))
    tiled = tp.access_map(tp.variant_name(tp.SHARED_TILE), rows, cols, tile, block=(1, 0))
    for m in (naive, tiled):
        read = np.argwhere(m["in_ty"] == 0)  # (row, col) of in read by threadIdx.y == 0
        assert set(read[:, 0]) == {0} and sorted(read[:, 1]) == list(range(8, 16))
        assert (m["in_ty"] >= 0).sum() == (m["out_ty"] >= 0).sum() == tile * tile
    naive_w, tiled_w = np.argwhere(naive["out_ty"] == 0), np.argwhere(tiled["out_ty"] == 0)
    assert set(naive_w[:, 1]) == {0} and sorted(naive_w[:, 0]) == list(range(8, 16))  # a column of out
    assert set(tiled_w[:, 0]) == {8} and sorted(tiled_w[:, 1]) == list(range(0, 8))  # a row of out
    # the lanes run along the row in both reads, and along the row of the tiled write
    assert list(tiled["out_tx"][8, :8]) == list(range(8)) and list(naive["in_tx"][0, 8:16]) == list(range(8))


def test_the_bank_maps_show_the_conflict_and_the_padding(built):
    banks_02 = tp.bank_map(tp.variant_name(tp.SHARED_TILE))
    assert len(banks_02) == 32 and len(set(banks_02)) == 1  # 32 lanes, one bank: 32-way
    for pos in (tp.PADDED, tp.COARSENED):
        assert sorted(tp.bank_map(tp.variant_name(pos))) == list(range(32))  # one lane a bank
    with pytest.raises(ValueError, match="no shared memory"):
        tp.bank_map(tp.variant_name(tp.NAIVE))


def test_the_picture_is_drawn_from_the_twins(built, tmp_path):
    from analysis import transpose as draw

    data = tp.viz_data(width=11, height=9, simulate=True)
    assert data["block"] == (1, 0) and "computed on the CPU" in data["computed_on"]
    (png,) = draw.plot(data, tmp_path)
    assert png.name == "transpose_access.png" and png.stat().st_size > 10_000
    for bad in (0, 65, 2.5):
        with pytest.raises(ValueError, match="width"):
            tp.viz_data(width=bad)


def test_on_cpu_runs_every_variant_and_passes(built):
    df, how = tp.on_cpu([])
    assert set(df["variant"]) == set(tp.VARIANTS) and list(df["check"].unique()) == ["pass"]
    assert "bit for bit" in how
    df, _ = tp.on_cpu(["5", "70"])
    assert len(df) == len(tp.VARIANTS) and (df["bad"] == 0).all()
    for args in (["5"], ["x", "3"], ["0", "3"], ["300", "3"]):
        with pytest.raises(ValueError):
            tp.on_cpu(args)


# --- CPU: arguments refused before any launch ------------------------------------------------------

def test_bad_arguments_are_refused_before_any_launch(monkeypatch):
    refuse_loads_after_the_table(monkeypatch, tp.PROGRAM)
    x = np.ones((4, 6), np.float32)
    with pytest.raises(ValueError, match="unknown transpose variant 'nope'"):
        tp.transpose(x, "nope")
    with pytest.raises(TypeError, match="variant must be a string"):
        tp.transpose(x, 3)
    with pytest.raises(TypeError, match="float32"):
        tp.transpose(x.astype(np.float64))
    with pytest.raises(TypeError, match="numpy array"):
        tp.transpose([[1.0, 2.0]])
    with pytest.raises(ValueError, match="2-D"):
        tp.transpose(x.ravel())
    with pytest.raises(ValueError, match="C-contiguous"):
        tp.transpose(x.T)
    with pytest.raises(ValueError, match="shape"):
        tp.transpose(x, out=np.empty((4, 6), np.float32))  # out is (cols, rows)
    ro = np.empty((6, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        tp.transpose(x, out=ro)
    square = np.ones((5, 5), np.float32)
    with pytest.raises(ValueError, match="overlap"):
        tp.transpose(square, out=square)
    with pytest.raises(ValueError, match="rows must be at most"):
        tp.transpose(np.empty((tp.max_rows() + 1, 0), np.float32))  # no memory: 0 columns
    with pytest.raises(ValueError, match="rows must be >= 0"):
        tp.transpose_dev(tp.VARIANTS[0], None, None, -1, 4)
    with pytest.raises(ValueError, match="cols must be at most"):
        tp.transpose_dev(tp.VARIANTS[0], None, None, 4, 2**31)
    with pytest.raises(TypeError, match="rows must be an integer"):
        tp.transpose_dev(tp.VARIANTS[0], None, None, 4.0, 4)
    with pytest.raises(ValueError, match="unknown transpose variant"):
        tp.bench_setup("nope", 8, 8)
    with pytest.raises(ValueError, match="cols must be >= 0"):
        tp.bench_setup(tp.VARIANTS[0], 8, -8)


def test_an_empty_matrix_needs_no_launch(monkeypatch):
    refuse_loads_after_the_table(monkeypatch, tp.PROGRAM)
    for shape in ((0, 5), (5, 0), (0, 0)):
        assert tp.transpose(np.empty(shape, np.float32)).shape == shape[::-1]


@pytest.mark.parametrize("args,says", [(["0"], "ROWS must be a positive integer"), (["x"], "ROWS must be an integer"),
                                       (["4", "-1"], "COLS must be a positive integer"),
                                       (["3000000"], "ROWS must be at most 2097120"),
                                       (["70000", "70000"], "ROWS x COLS must be at most"),
                                       (["1", "2", "3"], "unexpected argument '3'"),
                                       (["--variant", "nope"], "unknown variant 'nope'"),
                                       (["--reps", "0"], "--reps must be a positive integer"),
                                       (["--variant"], "--variant needs a value"),
                                       (["--bogus"], "unknown option --bogus")])
def test_the_executable_refuses_bad_argv_before_any_cuda_call(built, args, says):
    exe = ensure_built(tp.PROGRAM, "exe")
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr.splitlines()[0] and r.stdout == "", r


def test_the_executables_help_lists_the_variant_table(built):
    r = subprocess.run([str(ensure_built(tp.PROGRAM, "exe")), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and all(v in r.stdout for v in tp.VARIANTS)


# --- CPU: the bench's cases, ceilings, profile and sanitize runs ------------------------------------

def test_the_bench_holds_the_best_rung_to_memcpy_at_the_headline_size(built):
    cases, quick = tp.bench_cases(False), tp.bench_cases(True)
    ceilings = programs.ceilings()
    assert {c.variant for c in cases} == set(tp.VARIANTS)
    assert {c.size for c in cases} == {"8192x8192", "4096x4096"} and {c.size for c in quick} == {"4096x4096"}
    assert all(c.quick for c in quick)
    targeted = [c for c in cases if c.target is not None]
    assert [(c.variant, c.size, c.target) for c in targeted] == [(tp.variant_name(tp.WIDE), "8192x8192", 0.9)]
    for c in cases:
        r, k = c.kwargs["rows"], c.kwargs["cols"]
        assert c.amount == c.bytes == 2 * 4 * r * k and c.unit == "GB/s"
        module, fn = c.setup.split(":")
        assert module == "harness.programs.transpose" and callable(getattr(tp, fn))
        ceil = bench.built_in(c.ceiling)(False)  # the same bytes, timed in the same run
        assert ceil.amount == c.amount and ceil.kwargs == {"nbytes": 4 * r * k} and ceil.unit == c.unit
        assert c.ceiling == ceil.name and c.ceiling not in ceilings


def test_the_profile_and_sanitize_runs_name_real_variants(built):
    assert tp.profile_variants() == tp.VARIANTS
    for v in tp.VARIANTS:
        assert tp.profile_args(v)[:2] == ["--variant", v]
    assert tp.profile_args(None)[1] == tp.variant_name(tp.WIDE)
    runs = tp.sanitize_args()
    assert {a[1] for a in runs.values()} == set(tp.VARIANTS) | {"all"}


# --- GPU: the library and the executable -----------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=[f"{r}x{c}" for r, c in GPU_SHAPES])
@pytest.mark.parametrize("fill", ["nan", "bytes"])
def test_every_variant_matches_numpy(built, shape, fill, rng):
    x = _matrix(rng, *shape)
    ref = tp.reference(x)
    for v in tp.VARIANTS:
        # A poisoned out: the host entry point takes it down to the device, so an element no thread
        # writes comes back poisoned. 0xAB bytes are a finite float, so a missed element fails even a
        # checker that let NaN through.
        out = poison(ref.shape, np.float32) if fill == "nan" else np.full(ref.size * 4, 0xAB, np.uint8).view(
            np.float32).reshape(ref.shape)
        got = tp.transpose(x, v, out=out)
        assert got is out
        assert tp.mismatches(got, ref) == 0, (v, shape)


@pytest.mark.gpu
@pytest.mark.parametrize("shift_in, shift_out", [(4, 0), (0, 4), (4, 12)])
def test_pointers_off_the_8_byte_grid_transpose_right(built, rng, shift_in, shift_out):
    # 05 moves pairs as float2 only when both pointers sit on the 8-byte grid; a view that starts 4 bytes
    # in (a slice of a larger buffer) takes the one-at-a-time path. Even sizes, so only the pointers differ.
    rows, cols = 130, 258
    x = _matrix(rng, rows, cols)
    for v in tp.VARIANTS:
        with cudart.DeviceBuffer(x.nbytes + 16) as d_in, cudart.DeviceBuffer(x.nbytes + 16) as d_out:
            d_out.fill_bytes(0xAB)
            p_in = cudart.ffi.cast("char *", d_in.ptr) + shift_in
            p_out = cudart.ffi.cast("char *", d_out.ptr) + shift_out
            cudart.memcpy_htod(p_in, x)
            tp.lib().transpose_f32_dev(v, p_in, p_out, rows, cols, None)
            cudart.synchronize()
            whole = np.empty(x.nbytes + 16, np.uint8)
            d_out.to_host(whole)
        got = whole[shift_out:shift_out + x.nbytes].view(np.float32).reshape(cols, rows)
        assert tp.mismatches(got, tp.reference(x)) == 0, v
        assert (whole[:shift_out] == 0xAB).all() and (whole[shift_out + x.nbytes:] == 0xAB).all(), v


@pytest.mark.gpu
def test_the_checker_fails_on_a_wrong_gpu_answer(built, rng):
    x = _matrix(rng, 33, 65)
    for v in tp.VARIANTS:
        got = tp.transpose(x, v)
        perturbed = tp.reference(x)
        perturbed[17, 3] = np.nextafter(perturbed[17, 3], np.float32(0))
        assert tp.mismatches(got, perturbed) == 1, v  # the GPU's answer against a deliberately wrong reference
        assert tp.mismatches(got, x.reshape(65, 33)) > 0, v  # and against the untransposed words


@pytest.mark.gpu
def test_the_device_entry_point_runs_on_a_stream(built, rng):
    rows, cols = 129, 67
    x = _matrix(rng, rows, cols)
    for v in tp.VARIANTS:
        d_in, d_out = cudart.DeviceBuffer.from_array(x), cudart.DeviceBuffer(x.nbytes)
        stream = cudart.Stream()
        try:
            d_out.fill_bytes(0xFF)
            tp.transpose_dev(v, d_in, d_out, rows, cols, stream.handle)
            stream.synchronize()
            got = d_out.to_host(np.empty((cols, rows), np.float32))
        finally:
            stream.close()
            d_in.close()
            d_out.close()
        assert tp.mismatches(got, tp.reference(x)) == 0, v


@pytest.mark.gpu
def test_the_bench_setup_launches(built):
    for v in tp.VARIANTS:
        prepared = tp.bench_setup(v, 100, 37)
        try:
            prepared.launch(None)
            cudart.synchronize()
        finally:
            prepared.close()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1), (67, 35), (4099, 2053)])
def test_the_executable_checks_itself(built, shape):
    df = tp.run(str(shape[0]), str(shape[1]), "--variant", "all", "--seed", "7", "--reps", "1")
    assert list(df["variant"]) == list(tp.VARIANTS) and list(df["check"]) == ["pass"] * len(tp.VARIANTS)
    assert (df["rows"] == shape[0]).all() and (df["cols"] == shape[1]).all() and (df["bad"] == 0).all()
