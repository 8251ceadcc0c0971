"""matmul: the twins, the checker, argument validation, and every variant on the GPU against float64 numpy."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import built_names, ensure_built, poison
from harness.calling import cudart, library, runner
from harness.programs import matmul as mm

LIMITS = {"max_threads_per_block": 1024, "smem_per_block": 48 * 1024}  # an H100's, for CPU-only checks

# (m, k, n): 1x1x1, primes, 2^k +- 1, non-multiples of 16 and 32, tall and skinny, wide and short.
SHAPES = [(1, 1, 1), (2, 3, 5), (7, 13, 11), (16, 16, 16), (17, 31, 33), (31, 17, 63), (32, 32, 32), (33, 65, 47),
          (97, 101, 103), (127, 129, 255), (1000, 3, 2), (2, 1000, 3), (3, 5, 1000), (1, 257, 1), (513, 1, 257)]
# (variant, tile): 02 at both compiled widths, 03 at widths that divide nothing in SHAPES too.
CONFIGS = [("01_naive", 16), ("02_tiled", 16), ("02_tiled", 32), ("03_tiled_dynamic", 16),
           ("03_tiled_dynamic", 32), ("03_tiled_dynamic", 8), ("03_tiled_dynamic", 7), ("03_tiled_dynamic", 1)]
CONFIG_IDS = [f"{v}-t{t}" for v, t in CONFIGS]


def rand(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def cublas_available() -> tuple[bool, str]:
    ensure_built("matmul")
    try:
        return (True, "") if mm.have_cublas() else (False, "libmatmul.so was built without cuBLAS "
                                                          "(not found beside nvcc; see `invoke doctor`)")
    except Exception as e:  # built, yet it does not load here (no driver, say)
        return False, f"cannot load libmatmul.so: {e}"


# --- twins, reference, checker (CPU) --------------------------------------------------------------

@pytest.mark.parametrize("mkn", [(1, 1, 1), (5, 7, 3), (17, 13, 19), (4, 9, 16)])
def test_matmul_bk_twin(mkn, rng):
    m, k, n = mkn
    a, b = rand(rng, m, k), rand(rng, k, n)
    ok, e = mm.check(mm.matmul_2d(a, b), mm.reference(a, b))
    assert ok, e


@pytest.mark.parametrize("tw", [1, 3, 4, 8])
@pytest.mark.parametrize("mkn", [(1, 1, 1), (5, 7, 3), (9, 10, 11)])
def test_tiled_twin_shares_tiles(mkn, tw, rng):
    m, k, n = mkn
    a, b = rand(rng, m, k), rand(rng, k, n)
    ok, e = mm.check(mm.matmul_tiled_sim(a, b, tw), mm.reference(a, b))
    assert ok, e


def test_tiled_twin_needs_its_barrier():
    # Without the first barrier, thread (0, 0) reads tile cells other threads have not loaded yet.
    rng = np.random.default_rng(3)
    a, b = rand(rng, 8, 8), rand(rng, 8, 8)
    out = mm.matmul_tiled_sim(a, b, 4, sync=False)
    assert not mm.check(out, mm.reference(a, b))[0]
    assert np.isnan(out).any()


def test_reference_is_float64(rng):
    a, b = rand(rng, 4, 5), rand(rng, 5, 3)
    ref = mm.reference(a, b)
    assert ref.dtype == np.float64
    np.testing.assert_allclose(ref, a.astype(np.float64) @ b.astype(np.float64), rtol=0, atol=0)


def test_checker_fails_on_wrong_answers(rng):
    a, b = rand(rng, 64, 64), rand(rng, 64, 64)
    ref = mm.reference(a, b)
    assert mm.check((a @ b).astype(np.float32), ref)[0]
    assert not mm.check(a @ b.T, ref)[0]  # a transposed B
    nan = (a @ b).copy()
    nan[5, 7] = np.nan  # one unwritten (poisoned) element
    assert not mm.check(nan, ref)[0]
    off = (a @ b).copy()
    off[0, 0] += 1e-2 * np.linalg.norm(ref)  # a single wrong element is enough
    assert not mm.check(off, ref)[0]
    assert not mm.check(ref[:, :-1], ref)[0]


def test_lecture_shapes():
    assert mm.LECTURE_SHAPES == {"mnist_5": (5, 784, 10), "mnist_50000": (50000, 784, 10),
                                 "lecture5": (5120, 256, 5120)}


# --- arguments (CPU, before any launch) ------------------------------------------------------------

def test_shape_mismatch_names_both_shapes():
    a, b = np.ones((3, 4), np.float32), np.ones((5, 6), np.float32)
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5, 6\)"):
        mm.matmul(a, b)
    with pytest.raises(ValueError, match=r"\(2, 3, 4\).*\(2, 6, 5\)"):
        mm.matmul_batched(np.ones((2, 3, 4), np.float32), np.ones((2, 6, 5), np.float32), trans_b=True)
    with pytest.raises(ValueError, match="batch"):
        mm.matmul_batched(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 5), np.float32))


def test_dtype_ndim_contiguity():
    a = np.ones((4, 4), np.float32)
    with pytest.raises(TypeError, match="float32"):
        mm.matmul(a.astype(np.float64), a)
    with pytest.raises(TypeError, match="float32"):
        mm.matmul(a, a.astype(np.int32))
    with pytest.raises(ValueError, match="2-D"):
        mm.matmul(np.ones(4, np.float32), a)
    with pytest.raises(ValueError, match="contiguous"):
        mm.matmul(a, np.ones((8, 4), np.float32)[::2])
    with pytest.raises(ValueError, match="contiguous"):
        mm.matmul(np.asfortranarray(np.ones((4, 3), np.float32)), np.ones((3, 4), np.float32))
    with pytest.raises(TypeError, match="numpy array"):
        mm.matmul([[1.0]], a)


def test_unknown_variant_lists_valid_ones():
    a = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="01_naive, 02_tiled, 03_tiled_dynamic, 04_blocktile_1d.*09_tuned, 10_regtile, 11_splitk_tail, cublas"):
        mm.matmul(a, a, variant="04_magic")
    with pytest.raises(ValueError, match="valid"):
        mm.matmul_device("nope", 16, 1, 1, 1, None, None, None)


def test_tile_checks():
    with pytest.raises(ValueError, match="16, 32"):
        mm.check_tile("02_tiled", 8, limits=LIMITS)
    with pytest.raises(ValueError, match="positive"):
        mm.check_tile("03_tiled_dynamic", 0, limits=LIMITS)
    with pytest.raises(ValueError, match="1089 threads per block.*1024"):
        mm.check_tile("03_tiled_dynamic", 33, limits=LIMITS)
    with pytest.raises(ValueError, match="8192 bytes of shared memory.*4096"):
        mm.check_tile("03_tiled_dynamic", 32, limits={"max_threads_per_block": 1024, "smem_per_block": 4096})
    mm.check_tile("03_tiled_dynamic", 7, limits=LIMITS)
    mm.check_tile("02_tiled", 32, limits=LIMITS)
    mm.check_tile("01_naive", 12345, limits=LIMITS)  # the naive kernel ignores the tile


def test_smem_bytes():
    assert mm.smem_bytes("03_tiled_dynamic", 16) == 2 * 16 * 16 * 4
    assert mm.smem_bytes("03_tiled_dynamic", 32, trans_b=True) == (32 * 32 + 32 * 33) * 4
    assert mm.smem_bytes("01_naive", 16) == 0


def test_empty_output_needs_no_gpu():
    for a_shape, b_shape in (((0, 5), (5, 3)), ((4, 5), (5, 0)), ((0, 0), (0, 0))):
        out = mm.matmul(np.ones(a_shape, np.float32), np.ones(b_shape, np.float32))
        assert out.shape == (a_shape[0], b_shape[1]) and out.dtype == np.float32


def test_header_exports():
    lib = library.load("matmul")
    for name in ("matmul_have_cublas", "matmul_check", "matmul_host", "matmul_host_batched", "matmul_device",
                 "matmul_variant_count", "matmul_variant_name", "matmul_config_count", "matmul_config_name",
                 "matmul_config_index", "matmul_variant_config", "matmul_config_info", "matmul_config_check",
                 "matmul_config_host", "matmul_config_device", "matmul_set_tuned", "matmul_tuned_config"):
        assert callable(lib.raw(name))


def test_cublas_absent_is_a_clear_error():
    ok, _ = cublas_available()
    if ok:
        pytest.skip("cuBLAS is built in here; this checks the message when it is not")
    with pytest.raises(ValueError, match="without cuBLAS"):
        mm.check_tile("cublas", 0)


# --- executable, fixtures and bench cases (CPU) -----------------------------------------------------

def test_parse_recorded_output():
    text = (Path(__file__).parent / "fixtures" / "matmul_h200.txt").read_text()
    df = mm.parse_output(text)
    assert {"01_naive", "02_tiled", "03_tiled_dynamic"} <= set(df["variant"])
    assert (df["check"] == "pass").all()
    assert (df["relerr"] <= mm.TOL).all() and (df["tflops"] > 0).all()
    with pytest.raises(ValueError):
        mm.parse_output("")


def test_bench_cases_describe_the_goals():
    cases = {(c.variant, c.size): c for c in mm.bench_cases(quick=False)}
    c = cases[("01_naive", "4096^3")]
    assert c.ceiling == "cublas" and c.amount == 2.0 * 4096**3
    for t in (16, 32):
        c = cases[(f"02_tiled-t{t}-vs-naive", "4096^3")]
        assert c.ceiling == "matmul_01_naive" and c.target == 1.5
    # The ladder: every rung at every size, each against cuBLAS measured at that same size.
    for label, m, n, k in mm.LADDER_SIZES:
        for v in mm.LADDER:
            c = cases[(v, label)]
            assert c.ceiling == mm.cublas_ceiling_name(label) and c.amount == 2.0 * m * n * k
            assert c.bytes == 4.0 * (m * k + k * n + m * n)
    assert cases[("09_tuned", "4096^3")].target == 0.9
    # The ladder's goals sit on its last rung, the one a reader compares with cuBLAS.
    assert mm.LADDER[-1] == mm.LAST_RUNG
    assert {label: cases[(mm.LAST_RUNG, label)].target for label, *_ in mm.LADDER_SIZES} == {
        "2048^3": 0.95, "4096^3": 1.0, "8192^3": 1.0, "5120x256x5120": None}
    assert cases[("08_pipelined", "5120x256x5120")].ceiling == "cublas@5120x256x5120"
    from harness import programs

    assert {"cublas", "cublas@2048^3", "cublas@8192^3", "cublas@5120x256x5120", "matmul_01_naive"} <= set(
        programs.ceilings(["matmul"]))


def test_quick_bench_is_only_the_best_rungs_at_4096():
    quick = [c for c in mm.bench_cases(quick=True) if c.quick]
    assert quick and all(c.size == "4096^3" for c in quick)
    assert {c.variant for c in quick} - {"cublas"} == set(mm.QUICK_RUNGS)


def test_variant_table_comes_from_the_library():
    names = library.read_table("matmul")
    assert names[:3] == mm.CLASSIC and names[3:3 + len(mm.LADDER)] == mm.LADDER and names[-1] == "cublas"
    assert mm.VARIANTS == names
    lib = library.load("matmul")
    assert lib.matmul_variant_count() == len(names)
    assert lib.raw("matmul_variant_name")(len(names)) == lib.ffi.NULL
    # Every rung runs a configuration of the table; the classic ones do not.
    for v in mm.LADDER:
        if v != mm.TUNED:
            assert mm.variant_config(v).startswith(v + "-")
    assert lib.matmul_variant_config("02_tiled") == -1 and lib.matmul_config_index("nope") == -1


def test_config_limits_are_named():
    info = {"threads": 256, "dynamic_smem": 270336, "static_smem": 0, "registers": 128,
            "max_threads_for_registers": 512, "smem_limit": 232448, "local_bytes": 0}
    assert "270336 bytes of shared memory" in mm.config_problem(info) and "232448" in mm.config_problem(info)
    regs = dict(info, dynamic_smem=0, threads=1024, max_threads_for_registers=512)
    assert "128 registers per thread allow at most 512" in mm.config_problem(regs)
    assert mm.config_problem(dict(info, dynamic_smem=1024)) is None
    with pytest.raises(ValueError, match="unknown matmul configuration"):
        library.table_index("matmul", "config", "08_pipelined-1x1x1")


def test_last_rungs_and_their_tuning_configurations():
    """10 and 11 follow 09 in the table, each runs a configuration of its own kind, and the tuner times them."""
    assert mm.LADDER[-3:] == ("09_tuned", "10_regtile", "11_splitk_tail")
    cfgs = library.read_table("matmul", "config")
    for kind in ("10_regtile", "11_splitk_tail"):
        assert kind in mm.TUNE_KINDS
        assert sum(c.startswith(kind + "-") for c in cfgs) >= 2
    assert mm.variant_config("10_regtile") == "10_regtile-128x256x16-w64x64-t16x8-s3"
    assert mm.variant_config("11_splitk_tail") == "11_splitk_tail-128x256x32-w64x64-t16x8-s3-cf"


def test_tail_split_rule_decides_as_measured():
    """11's rule (no GPU needed: pure arithmetic in the library). On 132 SMs with 128x256x32 tiles: the
    116-tile tail of 4096^3 is cut in two uneven pieces, heads of 116 k-tiles on 116 SMs and rests of 12
    shared by the 16 others (a 9-way equal split measured 3% slower; 115/13 left rests over at the
    heads' end: NOTES-matmul); 8192^3's 68 split 5 ways;
    the lecture shape's 40 tiles 3 ways; the bench's 5120x5120x256 (tail 8, 8 k-tiles) 2 ways, the most
    its k allows (k-tiles / 4). No tail, or too few k-tiles, is no split; a tail of at most half the
    slots never takes the uneven cut (equal halves are within its 0.02 margin)."""
    assert mm.tail_plan(116, 132, 128) == (2, 116)
    assert mm.tail_plan(68, 132, 256) == (5, 0)
    assert mm.tail_plan(40, 132, 160) == (3, 0)
    assert mm.tail_plan(8, 132, 8) == (2, 0)
    assert mm.tail_plan(0, 132, 128) == (1, 0) and mm.tail_plan(8, 132, 7) == (1, 0)
    assert mm.tail_plan(116, 132, 37) == (2, 34)  # SPLIT_SHAPES' 3965 x 1160 x 2044
    for tail in range(1, 67):
        assert mm.tail_plan(tail, 132, 128)[1] == 0, tail


def test_tail_plan_uneven_pieces_balance():
    """Whenever the rule cuts two uneven pieces, its modelled time beats every equal split and whole tiles,
    by more than its 0.02 margin."""
    c, c_piece, lag = 0.03, 0.01, 0.04  # matmul.cu's kSliceCost, kPieceCost and kRestLag
    for slots in (66, 132, 264):
        for tail in range(1, slots):
            for ktiles in (8, 37, 128, 256):
                splits, kb = mm.tail_plan(tail, slots, ktiles)
                if kb == 0:
                    continue
                assert splits == 2 and 0 < kb < ktiles
                q = -(-tail // (slots - tail))
                t = max(kb / ktiles + c_piece, lag + q * ((ktiles - kb) / ktiles + c_piece))
                assert t < -(-tail // slots) - 0.02
                smax = max(1, min(16, ktiles // 4))
                assert all(t < -(-tail * s // slots) * (1 / s + c) - 0.02 for s in range(2, smax + 1))


def test_regtile_configurations_are_tuner_candidates():
    """10's k-depth, stages, 8x16 and the conflict-free-copy ("-cf") variants are compiled
    into the table under unique names; test_gpu_every_config_is_exact checks each on ragged shapes."""
    cfgs = library.read_table("matmul", "config")
    assert len(set(cfgs)) == len(cfgs)
    for name in ("10_regtile-128x256x8-w64x64-t16x8-s4", "10_regtile-128x256x32-w64x64-t16x8-s3",
                 "10_regtile-128x256x16-w64x64-t8x16-s3", "10_regtile-256x128x8-w64x64-t16x8-s3",
                 "10_regtile-128x256x16-w64x64-t16x8-s3-cf", "10_regtile-128x256x32-w64x64-t16x8-s3-cf"):
        assert name in cfgs, name
    assert sum(c.startswith("10_regtile-") and c.endswith("-cf") for c in cfgs) == 5


def test_ladder_refuses_transposed_b():
    with pytest.raises(ValueError, match="trans_b"):
        mm.check_tile("07_warptile", 0, trans_b=True)


def test_sanitize_covers_both_paths_of_every_rung():
    runs = mm.sanitize_args()
    for v in mm.LADDER:
        assert runs[v][-1] == "47"  # k % 4 != 0: the 4-byte path
        m, n, k = map(int, runs[f"{v}-vec"][-3:])
        assert n % 4 == 0 and k % 4 == 0 and m % 128 and n % 128  # 16-byte path, ragged tiles
    # 11's uneven tail cut: 29 x 8 = 232 tiles of 128x256 leave a 100-tile tail on 132 SMs, 8 k-tiles.
    m, n, k = map(int, runs["11_splitk_tail-uneven"][-3:])
    tiles = -(-m // 128) * -(-n // 256)
    assert tiles == 232 and m % 128 and n % 4 and mm.tail_plan(tiles % 132, 132, -(-k // 32))[1] > 0


# --- the GPU ------------------------------------------------------------------------------------------

@functools.cache
def operands(seed: int, m: int, k: int, n: int):
    rng = np.random.default_rng(seed)
    a, b = rand(rng, m, k), rand(rng, k, n)
    return a, b, mm.reference(a, b)


def assert_close(out, ref, what):
    ok, e = mm.check(out, ref)
    assert ok, f"{what}: ||out-ref||/||ref|| = {e:.3e} > {mm.TOL}"


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("mkn", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gpu_variants(config, mkn, seed):
    variant, tile = config
    a, b, ref = operands(seed, *mkn)
    assert_close(mm.matmul(a, b, variant, tile), ref, f"{variant} t{tile} {mkn}")


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS[:6], ids=CONFIG_IDS[:6])
@pytest.mark.parametrize("name", list(mm.LECTURE_SHAPES))
def test_gpu_lecture_shapes(config, name):
    variant, tile = config
    m, k, n = mm.LECTURE_SHAPES[name]
    a, b, ref = operands(0, m, k, n)
    assert_close(mm.matmul(a, b, variant, tile), ref, f"{variant} t{tile} {name}")


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_gpu_device_form_poisoned(config, rng):
    """Device pointers with C poisoned (NaN) and a NaN guard band after it: every element written, none past."""
    from harness.calling import cudart

    variant, tile = config
    m, k, n = 37, 45, 53
    a, b = rand(rng, m, k), rand(rng, k, n)
    out = poison((m * n + 256,), np.float32)
    with cudart.DeviceBuffer.from_array(a) as da, cudart.DeviceBuffer.from_array(b) as db, \
            cudart.DeviceBuffer.from_array(out) as dc:
        mm.matmul_device(variant, tile, m, n, k, da.ptr, db.ptr, dc.ptr)
        cudart.synchronize()
        dc.to_host(out)
    assert_close(out[:m * n].reshape(m, n), mm.reference(a, b), f"{variant} t{tile}")
    assert np.isnan(out[m * n:]).all(), "wrote past the end of C"


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS[:6], ids=CONFIG_IDS[:6])
def test_gpu_k_zero_gives_zeros(config):
    variant, tile = config
    out = mm.matmul(np.ones((19, 0), np.float32), np.ones((0, 23), np.float32), variant, tile)
    assert out.shape == (19, 23)
    np.testing.assert_array_equal(out, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("trans_b", [False, True], ids=["B", "Bt"])
def test_gpu_batched_alpha_transposed(config, trans_b, rng):
    """The shared header's general form, as attention uses it: batched, scaled, B or B^T."""
    variant, tile = config
    batch, m, k, n = 5, 33, 19, 41
    a = rand(rng, batch, m, k)
    b = rand(rng, batch, n, k) if trans_b else rand(rng, batch, k, n)
    alpha = 0.125
    out = mm.matmul_batched(a, b, variant, tile, trans_b=trans_b, alpha=alpha)
    bb = np.swapaxes(b, 1, 2) if trans_b else b
    ref = alpha * np.einsum("zmk,zkn->zmn", a.astype(np.float64), bb.astype(np.float64))
    assert_close(out, ref, f"{variant} t{tile} trans_b={trans_b}")


@pytest.mark.gpu
def test_gpu_large_case():
    a, b, ref = operands(7, 1025, 1537, 769)
    for variant, tile in CONFIGS[:6]:
        assert_close(mm.matmul(a, b, variant, tile), ref, f"{variant} t{tile} large")


@pytest.mark.gpu
def test_gpu_checker_catches_transposed_b():
    # A kernel that read B transposed would produce a @ b.T: run exactly that through the GPU and
    # show the checker refuses it.
    a, b, ref = operands(4, 64, 64, 64)
    wrong = mm.matmul(a, np.ascontiguousarray(b.T))
    assert not mm.check(wrong, ref)[0]


@pytest.mark.gpu
def test_gpu_tile_device_limits():
    from harness.calling import cudart

    max_threads = cudart.attribute("max_threads_per_block")
    too_big = int(np.sqrt(max_threads)) + 1
    a = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="threads per block"):
        mm.matmul(a, a, "03_tiled_dynamic", too_big)
    # The C side refuses it too, with cudaErrorInvalidConfiguration, if Python's check is bypassed.
    lib = library.load("matmul")
    assert lib.raw("matmul_check")(lib.ffi.new("char[]", b"03_tiled_dynamic"), too_big, 0) == 9


@pytest.mark.gpu
@pytest.mark.parametrize("mkn", [(1, 1, 1), (17, 31, 33), (127, 129, 255), (5, 784, 10)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gpu_cublas(mkn, rng):
    ok, why = cublas_available()
    if not ok:
        pytest.skip(why)
    m, k, n = mkn
    a, b = rand(rng, m, k), rand(rng, k, n)
    assert_close(mm.matmul(a, b, "cublas"), mm.reference(a, b), f"cublas {mkn}")


@pytest.mark.gpu
def test_gpu_cublas_batched_transposed_and_k_zero(rng):
    ok, why = cublas_available()
    if not ok:
        pytest.skip(why)
    a, b = rand(rng, 3, 20, 30), rand(rng, 3, 40, 30)
    out = mm.matmul_batched(a, b, "cublas", trans_b=True, alpha=0.5)
    ref = 0.5 * np.einsum("zmk,znk->zmn", a.astype(np.float64), b.astype(np.float64))
    assert_close(out, ref, "cublas batched trans_b")
    z = mm.matmul(np.ones((6, 0), np.float32), np.ones((0, 7), np.float32), "cublas")
    np.testing.assert_array_equal(z, 0)


@pytest.mark.gpu
def test_gpu_executable_checks_itself():
    df = mm.run("--variant", "all", "--tile", "32", "129", "257", "65")
    assert {"01_naive", "02_tiled", "03_tiled_dynamic"} <= set(df["variant"])
    assert (df["check"] == "pass").all()


# --- the ladder on the GPU ----------------------------------------------------------------------------

# (m, k, n): ragged sizes that miss every tile edge (1, 7, 33, 1000, 4097), aligned-but-ragged shapes (the 16-byte
# paths with partial tiles), and k = 4 (one chunk).
# The rungs, read from the built library's table (a placeholder that skips before any build).
LADDER = built_names(lambda: mm.LADDER, "matmul")
LADDER_SHAPES = [(1, 1, 1), (7, 7, 7), (33, 33, 33), (1, 4097, 1), (4097, 7, 33), (33, 1000, 7), (7, 33, 4097),
                 (129, 36, 68), (260, 512, 132), (1000, 4, 1000), (64, 64, 64), (127, 129, 255),
                 (1000, 1000, 1000), (4097, 33, 7), (1000, 4097, 33)]


def fitting_configs():
    try:
        return [c for c in library.read_table("matmul", "config") if mm.config_problem(mm.config_info(c)) is None]
    except Exception:
        return []


@pytest.mark.gpu
@pytest.mark.parametrize("variant", LADDER)
@pytest.mark.parametrize("mkn", LADDER_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("seed", [0, 1])
def test_gpu_ladder(variant, mkn, seed):
    a, b, ref = operands(seed, *mkn)
    assert_close(mm.matmul(a, b, variant), ref, f"{variant} {mkn}")


# 11_splitk_tail's paths together (m, k, n), on its 128x256 tiles (one block per SM: an H100 holds 132):
# whole tiles and k-split tail tiles side by side, with ragged edges and k not a multiple of the tile
# depth (4097 x 2049: 33 x 9 = 297 tiles, the 33 past two waves split 4 ways); a tail of more than half
# a wave, cut in two uneven pieces (3965 x 2044: 31 x 8 = 248 tiles, 116 in the tail, heads of 34 of 37
# k-tiles, on the 16-byte path; 4001 x 4095: 32 x 16 = 512 tiles, the 4096^3 tail on the scalar path),
# grids that are all tail (1000 x 1000: 32 tiles; 7 x 4097), and shapes of exactly one wave (4097 x 1000:
# 132 tiles).
SPLIT_SHAPES = [(4097, 300, 1000), (4097, 1001, 2049), (4096, 256, 1028), (1000, 4097, 1000), (7, 4097, 4097),
                (3965, 1160, 2044), (4001, 2050, 4095)]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["10_regtile", "11_splitk_tail"])
@pytest.mark.parametrize("mkn", SPLIT_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gpu_split_tail_shapes(variant, mkn):
    a, b, ref = operands(5, *mkn)
    assert_close(mm.matmul(a, b, variant), ref, f"{variant} {mkn}")


@pytest.mark.gpu
@pytest.mark.parametrize("mkn", [(4097, 64, 1001), (3965, 1160, 2044)], ids=lambda s: "x".join(map(str, s)))
def test_gpu_split_tail_writes_only_c(rng, mkn):
    """11 zeroes the rows of C that its equal slices cover before adding into them (4097 x 64 x 1001), or
    hands each uneven tail tile from its head to its rest through a flag (3965 x 1160 x 2044): device
    pointers with a NaN guard band after C show it writes every element of C and nothing past it. A second
    launch on the same buffers gives the same bits (the flags were left lowered, and head + rest is summed
    in one order)."""
    from harness.calling import cudart

    m, k, n = mkn
    a, b = rand(rng, m, k), rand(rng, k, n)
    out = poison((m * n + 256,), np.float32)
    with cudart.DeviceBuffer.from_array(a) as da, cudart.DeviceBuffer.from_array(b) as db, \
            cudart.DeviceBuffer.from_array(out) as dc:
        mm.matmul_device("11_splitk_tail", 0, m, n, k, da.ptr, db.ptr, dc.ptr)
        cudart.synchronize()
        dc.to_host(out)
        dc.fill_bytes(0xFF)  # NaN everywhere: what the second launch must overwrite
        again = np.empty_like(out)
        mm.matmul_device("11_splitk_tail", 0, m, n, k, da.ptr, db.ptr, dc.ptr)
        cudart.synchronize()
        dc.to_host(again)
    assert_close(out[:m * n].reshape(m, n), mm.reference(a, b), "11_splitk_tail device form")
    assert np.isnan(out[m * n:]).all(), "wrote past the end of C"
    assert np.array_equal(out[:m * n], again[:m * n]), "a second launch gave other bits"


@pytest.mark.gpu
def test_gpu_every_config_is_exact():
    """The tuner may pick any configuration: each one that fits is checked on ragged shapes, both paths."""
    cfgs = fitting_configs()
    assert cfgs
    for mkn in [(33, 7, 65), (129, 36, 68), (300, 1000, 260)]:
        a, b, ref = operands(3, *mkn)
        for cfg in cfgs:
            assert_close(mm.matmul(a, b, config=cfg), ref, f"{cfg} {mkn}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", LADDER)
def test_gpu_ladder_lecture_shape_and_k_zero(variant):
    m, k, n = mm.LECTURE_SHAPES["lecture5"]
    a, b, ref = operands(0, m, k, n)
    assert_close(mm.matmul(a, b, variant), ref, f"{variant} lecture5")
    out = mm.matmul(np.ones((19, 0), np.float32), np.ones((0, 23), np.float32), variant)
    np.testing.assert_array_equal(out, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", LADDER)
@pytest.mark.parametrize("offset", [(1, 0, 0), (0, 1, 0), (0, 0, 1), (0, 0, 0)], ids=["A+4B", "B+4B", "C+4B", "aligned"])
def test_gpu_ladder_unaligned_pointers(variant, offset, rng):
    """Sizes that are multiples of 4 but base pointers 4 bytes off a 16-byte boundary: the kernels must
    take their 4-byte path (a float4 access there would fault), write every element and nothing past C."""
    from harness.calling import cudart

    m, k, n = 68, 36, 132
    a, b = rand(rng, m, k), rand(rng, k, n)
    oa, ob, oc = offset
    ha = np.concatenate([np.zeros(oa, np.float32), a.ravel()])
    hb = np.concatenate([np.zeros(ob, np.float32), b.ravel()])
    hc = poison((oc + m * n + 64,), np.float32)
    lib = library.load("matmul")
    ffi = lib.ffi

    def at(buf, off):
        return ffi.cast("float *", buf.ptr) + off

    with cudart.DeviceBuffer.from_array(ha) as da, cudart.DeviceBuffer.from_array(hb) as db, \
            cudart.DeviceBuffer.from_array(hc) as dc:
        mm.matmul_device(variant, 0, m, n, k, at(da, oa), at(db, ob), at(dc, oc))
        cudart.synchronize()
        dc.to_host(hc)
    assert_close(hc[oc:oc + m * n].reshape(m, n), mm.reference(a, b), f"{variant} offsets {offset}")
    assert np.isnan(hc[:oc]).all() and np.isnan(hc[oc + m * n:]).all(), "wrote outside C"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", LADDER)
def test_gpu_ladder_batched_alpha(variant, rng):
    batch, m, k, n = 3, 65, 40, 36
    a, b = rand(rng, batch, m, k), rand(rng, batch, k, n)
    out = mm.matmul_batched(a, b, variant, 0, alpha=0.25)
    ref = 0.25 * np.einsum("zmk,zkn->zmn", a.astype(np.float64), b.astype(np.float64))
    assert_close(out, ref, f"{variant} batched")


@pytest.mark.gpu
def test_gpu_oversized_config_is_refused_with_its_limit():
    name = "08_pipelined-128x128x64-w64x32-s4"
    info = mm.config_info(name)
    assert info["dynamic_smem"] == 4 * (64 * 132 + 64 * 128) * 4
    if info["dynamic_smem"] <= info["smem_limit"]:
        pytest.skip(f"this device gives a block {info['smem_limit']} bytes of shared memory: the config fits")
    a = np.ones((8, 8), np.float32)
    with pytest.raises(ValueError, match=r"266240 bytes of shared memory.*at most \d+"):
        mm.matmul(a, a, config=name)
    lib = library.load("matmul")
    assert lib.raw("matmul_config_check")(library.table_index("matmul", "config", name)) == 9  # cudaErrorInvalidConfiguration
    res = runner.run("matmul", "--config", name, "8", "8", "8", check=False)
    assert res.returncode == 2 and "shared memory" in res.stderr and "at most" in res.stderr


@pytest.mark.gpu
def test_gpu_executable_ladder_table():
    df = mm.run("--variant", "all", "--tile", "32", "129", "68", "36")
    assert set(mm.LADDER) <= set(df["variant"])
    assert (df["check"] == "pass").all()
    assert df.loc[df["variant"] == "07_warptile", "config"].iloc[0] == "07_warptile-128x128x8-w64x32"


@pytest.mark.gpu
def test_gpu_executable_refuses_what_cannot_fit():
    """Sizes whose A, B and C cannot fit are refused with the need and the limit, status 2,
    no bad_alloc. The size comes from the device in hand: a fixed 100000^3 (3 x 40 GB) fits an H200's
    141 GB, and then the executable set out to fill and multiply it instead of refusing."""
    _, total = cudart.mem_info()
    # A square side whose three float32 matrices (4 * 3 * side^2 bytes) need 1.5 x the device's total
    # memory, so more than it has free whatever else holds memory now.
    side = math.isqrt(int(1.5 * total) // 12) + 1
    assert 4 * 3 * side**2 > 1.5 * total
    # Inside the executable's own limits, so that memory is what it refuses: each size a positive int
    # (cudalab_parse_positive) and M within 02_tiled's grid (matmul_max_m; check_rows raises past it).
    assert side <= 2**31 - 1
    mm.check_rows(side, "02_tiled", 16)
    # The refusal comes before any allocation or fill: seconds. A timeout here is the bug coming back.
    res = runner.run("matmul", side, side, side, check=False, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "GiB of device memory" in res.stderr and "at most" in res.stderr
    assert f"needs {12 * side**2 / 2**30:.2f} GiB" in res.stderr  # the need it names is this size's
    assert "bad_alloc" not in res.stderr


def test_more_rows_than_the_grid_holds_is_refused_before_any_launch():
    """The grid's y axis holds 65535 blocks: 01_naive takes at most 65535 x 16 rows. A taller A is a
    ValueError naming the limit, raised before the GPU is touched (this runs without one)."""
    assert mm.check_rows(65535 * 16, "01_naive") is None
    a = np.random.default_rng(1).uniform(-1, 1, (65535 * 16 + 1, 1)).astype(np.float32)
    b = np.random.default_rng(2).uniform(-1, 1, (1, 3)).astype(np.float32)
    with pytest.raises(ValueError, match=r"m must be at most 1048560 for 01_naive .*65535 blocks of 16 rows"):
        mm.matmul(a, b, variant="01_naive")
    with pytest.raises(ValueError, match=r"at most 2097120 for 02_tiled"):
        mm.check_rows(2097121, "02_tiled", 32)
    big = library.read_table("matmul", "config")[0]
    rows = int(big.split("-")[1].split("x")[0])  # the configuration's block rows, from its name
    with pytest.raises(ValueError, match=rf"at most {65535 * rows} for {big}"):
        mm.check_rows(65535 * rows + 1, config=big)
    mm.check_rows(2**31 - 1, "cublas")  # cuBLAS has no such limit


@pytest.mark.gpu
def test_gpu_executable_too_many_rows_is_a_usage_error():
    res = runner.run("matmul", "--variant", "01_naive", "1048561", "3", "5", check=False)
    assert res.returncode == 2 and "M at most 1048560" in res.stderr, res.stderr
    # --variant all skips the variants whose grid cannot hold M and runs the others.
    res = runner.run("matmul", "--variant", "all", "1048561", "3", "5", check=False)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr
    assert 'skip program=matmul variant=01_naive reason="M at most 1048560"' in res.stdout
    assert "variant=08_pipelined" in res.stdout and "check=pass" in res.stdout


def test_invoke_run_matmul_checks_the_variant_name_before_saying_a_gpu_is_needed():
    """Without a GPU `--variant` is refused, but a name the C table does not hold is said as such first
    (it used to get "needs a GPU" whatever the name)."""
    import os
    import subprocess
    import sys

    from harness.base.paths import ROOT

    ensure_built("matmul")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-m", "invoke", "run", "matmul", "--variant", "99_nosuch"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "unknown variant '99_nosuch'" in r.stderr and "02_tiled" in r.stderr and "needs a GPU" not in r.stderr


def test_a_variant_check_without_a_built_library_says_how_to_build(monkeypatch):
    from invoke import Exit

    from harness import programs as registry
    from harness.base.errors import NotBuilt
    from harness.user import cli

    def not_built(prog, *a, **k):  # what the loader raises when build/lib/lib<prog>.so is missing
        raise NotBuilt(Path("build/lib") / f"lib{prog}.so", prog)

    # The registry's own reference to the loader's table reader: the one the task's check goes through.
    monkeypatch.setattr(registry.library, "read_table", not_built)
    with pytest.raises(Exit) as e:
        cli.refuse_variant_without_gpu("matmul", "02_tiled")
    assert "invoke build --programs matmul" in str(e.value.message) and "needs a GPU" not in str(e.value.message)
