"""gemm_tc: bf16 dtype handling, the reference and checker, the mma fragment twin, and every rung on
the GPU against a float64 product of the same bf16 values (ragged shapes, several seeds)."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

from conftest import built_names, ensure_built, write_json
from fault_build import dropped_k_tiles, use_fault_library
from harness.base.errors import CudalabError, NotBuilt
from harness.calling import library, runner
from harness.measuring import tune
from harness.programs import gemm_tc as gt

# (m, n, k): 1x1x1, primes, 2^k +- 1, non-multiples of every tile (16, 32, 64, 128), k not a
# multiple of 8 (02's element-wise path; 03's and 04's padded copy), one shape of several full tiles, and one of
# more 128x256 tiles (8 x 17 = 136) than an H100 or H200 has SMs (132), so some of 04's persistent
# blocks take a second, ragged tile.
SHAPES = [(1, 1, 1), (2, 3, 5), (7, 13, 11), (16, 16, 16), (17, 33, 31), (65, 129, 64), (127, 255, 72),
          (129, 7, 136), (200, 136, 72), (1, 257, 1000), (300, 1, 24), (256, 384, 512), (1000, 4097, 72)]


def bf16(rng, *shape):
    return gt.to_bf16(rng.uniform(-1, 1, shape))


@functools.cache
def _lib_state() -> tuple[bool, str]:
    ensure_built("gemm_tc")
    try:
        list(library.read_table("gemm_tc"))
        return True, ""
    except Exception as e:
        return False, f"cannot load libgemm_tc.so: {e}"


def skip_unless_runnable(variant: str) -> None:
    ok, why = _lib_state()
    if not ok:
        pytest.skip(why)
    reason = gt.unsupported_reason(variant)
    if reason:
        pytest.skip(f"{variant}: {reason}")


# --- CPU: dtypes, reference, checker, twin ----------------------------------------------------------

def test_to_bf16_rounds_to_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, 3e38], dtype=np.float32)
    y = gt.to_bf16(x)
    assert y.dtype == np.dtype(ml_dtypes.bfloat16) and y.flags.c_contiguous
    # 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even mantissa wins (1.0); 1 + 3*2^-8 rounds up to 1 + 2^-6.
    np.testing.assert_array_equal(y.astype(np.float32), np.array([1.0, 1.0, 1.0 + 2**-6, -2.5,
                                                                  np.float32(3e38).astype(ml_dtypes.bfloat16)],
                                                                 dtype=np.float32))


def test_float32_is_refused_not_rounded(rng):
    a = rng.uniform(-1, 1, (4, 8)).astype(np.float32)
    with pytest.raises(TypeError, match="to_bf16"):
        gt._check_operands(a, gt.to_bf16(a))


def test_shape_and_contiguity_checks(rng):
    a, b = bf16(rng, 4, 8), bf16(rng, 5, 7)
    with pytest.raises(ValueError, match="do not match"):
        gt._check_operands(a, b)
    with pytest.raises(ValueError, match="C-contiguous"):
        gt._check_operands(bf16(rng, 8, 4).T, bf16(rng, 5, 8).T.copy().T)


def test_reference_is_float64_of_bf16_values(rng):
    a, b = bf16(rng, 5, 9), bf16(rng, 3, 9)
    ref = gt.reference(a, b)
    assert ref.dtype == np.float64
    np.testing.assert_array_equal(ref, a.astype(np.float64) @ b.astype(np.float64).T)


def test_tolerance_is_by_k():
    assert gt.tolerance(16) == gt.TOL
    assert gt.tolerance(2**30) > gt.TOL  # grows like sqrt(k) once that exceeds the floor


def test_checker_rejects_a_dropped_k_tile_on_the_cpu(rng):
    # What 02/03 would produce if they forgot their last 64-wide K tile at k = 256.
    a, b = bf16(rng, 64, 256), bf16(rng, 48, 256)
    ref = gt.reference(a, b)
    good = ref.astype(np.float32)
    dropped = gt.reference(a[:, :192], b[:, :192]).astype(np.float32)
    assert gt.check(good, ref, 256)[0]
    ok, e = gt.check(dropped, ref, 256)
    assert not ok and e > 0.1
    nan = good.copy()
    nan[3, 4] = np.nan
    assert not gt.check(nan, ref, 256)[0]


def test_mma_fragments_partition_each_operand():
    for key, shape, per_lane in (("a", (16, 16), 8), ("b", (16, 8), 4), ("c", (16, 8), 4)):
        seen = [rc for lane in range(32) for rc in gt.mma_fragments(lane)[key]]
        assert len(seen) == 32 * per_lane == shape[0] * shape[1]
        assert sorted(seen) == [(r, c) for r in range(shape[0]) for c in range(shape[1])]


def test_mma_twin_matches_numpy(rng):
    a, b = rng.standard_normal((16, 16)), rng.standard_normal((16, 8))
    np.testing.assert_allclose(gt.mma_m16n8k16_twin(a, b), a @ b, rtol=1e-12)


def test_header_declares_bf16_pointers():
    cdef = library.header_to_cdef((library._build.CUDA_DIR / "gemm_tc" / "gemm_tc.h").read_text())
    p = library.declared_pointees(cdef)
    assert p["gemm_tc_host"][4:7] == ["cudalab_bf16", "cudalab_bf16", None]
    assert "gemm_tc_host" in library.status_functions(cdef)
    assert "gemm_tc_variant_count" not in library.status_functions(cdef)


def test_library_variant_table_and_rules():
    ok, why = _lib_state()
    if not ok:
        pytest.skip(why)
    assert list(library.read_table("gemm_tc")) == ["01_wmma", "02_mma_sync", "03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster",
                             "06_wgmma_tuned", "07_wgmma_pingpong", "08_wgmma_tma_store", "cublas_bf16",
                             "cublas_tf32"]
    assert gt.requirement("02_mma_sync", 7, 9, 13) is None
    # k not a multiple of 8 takes 03/04's padded-copy path instead of a refusal: any k a user has runs.
    assert gt.requirement("03_wgmma", 128, 128, 100) is None
    assert gt.requirement("04_wgmma_persistent", 128, 128, 4095) is None
    assert gt.requirement("03_wgmma", 100, 37, 64) is None
    assert gt.requirement("07_wgmma_pingpong", 1, 4097, 33) is None
    # 01's row blocks sit on the grid's y axis (65535 of 32 rows); 02 numbers its tiles on x.
    assert gt.requirement("01_wmma", 65535 * 32, 8, 16) is None
    assert "at most 2097120" in gt.requirement("01_wmma", 65535 * 32 + 1, 8, 16)
    assert gt.requirement("02_mma_sync", 65535 * 32 + 1, 8, 16) is None


def test_loader_refuses_uint16_for_a_bf16_parameter(rng):
    ok, why = _lib_state()
    if not ok:
        pytest.skip(why)
    a = bf16(rng, 4, 8)
    out = np.empty((4, 4), np.float32)
    with pytest.raises(TypeError, match="bfloat16"):
        gt._lib().gemm_tc_host("01_wmma", 4, 4, 8, a.view(np.uint16), a[:4], out)


def test_bad_variant_is_refused_before_launch(rng):
    ok, why = _lib_state()
    if not ok:
        pytest.skip(why)
    with pytest.raises(ValueError, match="unknown gemm_tc variant"):
        gt.gemm(bf16(rng, 4, 8), bf16(rng, 4, 8), "04_magic")


def test_executable_rejects_bad_argv():
    # Argument errors are found before any CUDA call, so this runs without a GPU too.
    ensure_built("gemm_tc", "exe")
    for argv in (["--variant", "nope", "8", "8", "8"], ["8", "8"], ["0", "8", "8"], ["--bogus", "8", "8", "8"],
                 ["8", "8", "x"]):
        r = runner.run("gemm_tc", *argv, check=False)
        assert r.returncode == 2, (argv, r.stderr)


# --- GPU ----------------------------------------------------------------------------------------

def test_the_kinds_of_variant_are_the_tables_tags():
    """The kinds the module asks of the library (gemm_tc_variant_tags), as the rungs are written."""
    ensure_built("gemm_tc")
    assert gt.KERNELS == ("01_wmma", "02_mma_sync", "03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster",
                          gt.TUNED, gt.PINGPONG, gt.TMA_STORE)
    assert gt.WGMMA == gt.KERNELS[2:]
    assert gt.PROFILE_VARIANTS == (*gt.KERNELS, "cublas_bf16")
    assert library.tagged("gemm_tc", "cublas") == ("cublas_bf16", "cublas_tf32")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: gt.VARIANTS, "gemm_tc"))
@pytest.mark.parametrize("mnk", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_gemm_matches_reference(variant, mnk, rng):
    skip_unless_runnable(variant)
    m, n, k = mnk
    a, b = bf16(rng, m, k), bf16(rng, n, k)
    rule = gt.requirement(variant, m, n, k)
    if rule:
        with pytest.raises(ValueError, match="multiple of"):
            gt.gemm(a, b, variant)
        return
    out = gt.gemm(a, b, variant)
    ok, e = gt.check(out, gt.reference(a, b), k)
    assert ok, f"{variant} {mnk}: relative error {e:.3e} > {gt.tolerance(k):.1e}"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: gt.KERNELS, "gemm_tc"))
def test_gemm_larger_tiles(variant, rng):
    skip_unless_runnable(variant)
    a, b = bf16(rng, 1000, 1024), bf16(rng, 520, 1024)
    ok, e = gt.check(gt.gemm(a, b, variant), gt.reference(a, b), 1024)
    assert ok, e


@pytest.mark.gpu
def test_matmul_takes_k_by_n(rng):
    skip_unless_runnable("02_mma_sync")
    a, b = bf16(rng, 33, 40), bf16(rng, 40, 17)
    ok, e = gt.check(gt.matmul(a, b), np.asarray(a, np.float64) @ np.asarray(b, np.float64), 40)
    assert ok, e


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["02_mma_sync", "03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster",
                                     "07_wgmma_pingpong", "08_wgmma_tma_store"])
def test_checker_rejects_kernel_that_drops_last_k_tile(variant, rng, monkeypatch):
    skip_unless_runnable(variant)
    lib = use_fault_library(monkeypatch, "gemm_tc")  # gt runs the fault build for the rest of the test
    a, b = bf16(rng, 256, 256), bf16(rng, 256, 256)
    ref = gt.reference(a, b)
    assert gt.check(gt.gemm(a, b, variant), ref, 256)[0]
    with dropped_k_tiles(lib, 1):
        ok, e = gt.check(gt.gemm(a, b, variant), ref, 256)
    assert not ok and e > 0.1, e
    assert gt.check(gt.gemm(a, b, variant), ref, 256)[0]  # the fault is off again


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster", "07_wgmma_pingpong",
                                     "08_wgmma_tma_store"])
@pytest.mark.parametrize("mnk", [(128, 128, 100), (300, 4097, 1001), (33, 65, 7)], ids=lambda t: "x".join(map(str, t)))
def test_wgmma_takes_ragged_k_through_a_padded_copy(variant, mnk, rng):
    """k % 8 != 0: A and B are copied into zero-padded buffers (TMA needs 16-byte row strides). The
    checker sees the whole product, so a padding that leaked non-zeros, or a dropped column, fails."""
    skip_unless_runnable(variant)
    m, n, k = mnk
    a, b = bf16(rng, m, k), bf16(rng, n, k)
    ok, e = gt.check(gt.gemm(a, b, variant), gt.reference(a, b), k)
    assert ok, f"{variant} {mnk}: relative error {e:.3e}"


# 07's tile counts (128 x 128 tiles; one block per SM, at most one per tile; an H100 or H200 has 132
# SMs, an H100 PCIe 114): the two consumers take the block's tiles alternately and hand the tensor
# cores over through named barriers, whose arrivals must balance however many tiles a block holds.
PINGPONG_SHAPES = [
    (1, 1, 1),           # 1 tile, 1 block: consumer 1 has no tile (its opening arrival only)
    (300, 260, 200),     # 3 x 3 = 9 tiles, fewer than the SMs: one per block; k ends in a partial step
    (1000, 2100, 1000),  # 8 x 17 = 136: a few blocks hold two (both consumers), the ring wraps mid-tile
    (2049, 2049, 136),   # 17 x 17 = 289, more than twice the SMs: blocks of 3 tiles (consumer 0 has one more) and 2
    (4097, 1000, 33),    # 33 x 8 = 264: k through the padded copy, one K step per tile
    (7, 4097, 4097),     # 1 x 33 = 33 tiles, 65 K steps each (the padded copy, k = 4097)
    (1000, 4097, 72),    # 8 x 33 = 264 = 2 x 132: every H100 block two tiles, both rasters' groups ragged
]


def check_every_config(rung: str, m: int, n: int, k: int) -> None:
    """Every configuration of `rung` (its default among them) exact on one m x n x k product: each ring
    depth, raster and schedule moves which block holds which tiles, not how many rows they cover."""
    skip_unless_runnable(rung)
    rng = np.random.default_rng(m * 7 + n * 13 + k)
    a, b = bf16(rng, m, k), bf16(rng, n, k)
    ref = gt.reference(a, b)
    for config in (c for c in library.read_table("gemm_tc", "config") if c.startswith(rung + "-")):
        ok, e = gt.check(gt.gemm(a, b, config=config), ref, k)
        assert ok, f"{config} {m}x{n}x{k}: relative error {e:.3e}"


@pytest.mark.gpu
@pytest.mark.parametrize("mnk", PINGPONG_SHAPES, ids=lambda t: "x".join(map(str, t)))
def test_pingpong_tile_counts(mnk):
    check_every_config("07_wgmma_pingpong", *mnk)


# 08's TMA-store epilogue (128 x 256 tiles, boxes of 64 rows x 32 columns per consumer warpgroup; the
# balanced grid: the fewest blocks that keep ceil(tiles / SMs) rounds). Each shape aims at one edge.
TMA_STORE_SHAPES = [
    (1, 4, 8),            # one row: consumer 1 has no rows, consumer 0 one partial box
    (130, 260, 64),       # 2 x 2 tiles: the second row tile's consumer 1 is wholly past m; a 4-column last box
    (1000, 1000, 136),    # last box 8 columns wide, a last tile whose consumer 1 has 40 rows
    (4097, 1000, 72),     # 33 x 4 = 132 tiles: one per block on an H100 (no second round)
    (2049, 4104, 136),    # 17 x 17 = 289: 3 rounds on 132 SMs -> 97 blocks; boxes reused across tiles
    (1000, 4100, 1001),   # k through the padded copy, with the TMA stores
    (33, 7, 1000),        # n % 4 != 0: 04's direct stores instead (TMA needs 16-byte row pitches)
    (7, 4097, 33),        # the same fallback with many tiles along n
]


@pytest.mark.gpu
@pytest.mark.parametrize("mnk", TMA_STORE_SHAPES, ids=lambda t: "x".join(map(str, t)))
def test_tma_store_edges(mnk):
    check_every_config("08_wgmma_tma_store", *mnk)


@pytest.mark.gpu
def test_wgmma_skip_reason_off_sm90a():
    ok, why = _lib_state()
    if not ok:
        pytest.skip(why)
    reason = gt.unsupported_reason("03_wgmma")
    if reason is None:
        pytest.skip("this GPU runs 03_wgmma")
    assert "needs sm_90a" in reason
    with pytest.raises(ValueError, match="needs sm_90a"):
        gt.check_runnable("03_wgmma", 128, 128, 64)


@pytest.mark.gpu
def test_empty_and_k_zero(rng):
    skip_unless_runnable("02_mma_sync")
    assert gt.gemm(bf16(rng, 0, 8), bf16(rng, 4, 8)).shape == (0, 4)
    z = gt.gemm(gt.to_bf16(np.zeros((3, 0))), gt.to_bf16(np.zeros((5, 0))))
    np.testing.assert_array_equal(z, np.zeros((3, 5), np.float32))


@pytest.mark.gpu
def test_executable_all_variants():
    ensure_built("gemm_tc", "exe")
    df = gt.run("--variant", "all", "--reps", "2", "257", "129", "136")
    assert set(df["check"]) == {"pass"}
    # Every variant the library says runs here (and takes this shape) ran and checked; the ones it
    # refuses on this GPU or build (01 and 02 below sm_80, the wgmma rungs off sm_90a) printed a skip.
    runs = {v for v in gt.VARIANTS
            if gt.unsupported_reason(v) is None and gt.requirement(v, 257, 129, 136) is None}
    assert runs and set(df["variant"]) == runs


def test_errors_are_typed():
    assert issubclass(NotBuilt, CudalabError) and issubclass(NotBuilt, FileNotFoundError)


def test_bench_cases_and_ceilings(monkeypatch):
    # As on an H100 with cuBLAS: every rung against cuBLAS BF16 of the same size, targets at 4096^3 only.
    names = ("01_wmma", "02_mma_sync", "03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster", "06_wgmma_tuned",
             "07_wgmma_pingpong", "08_wgmma_tma_store", "cublas_bf16", "cublas_tf32")
    real = library.read_table
    monkeypatch.setattr(library, "read_table",
                        lambda prog, kind="variant": names if (prog, kind) == ("gemm_tc", "variant") else real(prog, kind))
    monkeypatch.setattr(gt, "unsupported_reason", lambda v: None)
    monkeypatch.setattr(gt, "requirement", lambda v, m, n, k: None)
    monkeypatch.setattr(gt, "have_cublas", lambda: True)
    cases = gt.bench_cases(quick=False)
    vs_cublas = {(c.variant, c.size): c for c in cases if c.ceiling.startswith("cublas_bf16_")}
    assert set(vs_cublas) == {(v, f"{s}^3") for v in gt.KERNELS for s in gt.BENCH_SIZES}
    assert vs_cublas[("03_wgmma", "4096^3")].target == 0.90
    assert vs_cublas[("02_mma_sync", "4096^3")].target == 0.50
    assert vs_cublas[("03_wgmma", "8192^3")].target is None
    assert vs_cublas[("04_wgmma_persistent", "4096^3")].target == 1.05  # the goal: ahead of cuBLAS where the tuned rungs are
    assert vs_cublas[("06_wgmma_tuned", "4096^3")].target == 1.05
    assert vs_cublas[("07_wgmma_pingpong", "4096^3")].target == 1.05
    assert vs_cublas[("08_wgmma_tma_store", "4096^3")].target == 1.05
    assert all(c.ceiling == f"cublas_bf16_{c.size[:-2]}" for c in vs_cublas.values())
    peak = [c for c in cases if c.ceiling == "bf16_peak"]
    assert len(peak) == 10 * len(gt.BENCH_SIZES)
    assert {c.ceiling for c in cases} <= set(gt.ceilings())
    assert all(c.flops == 2.0 * int(c.size[:-2]) ** 3 for c in cases)
    assert {c.size for c in gt.bench_cases(quick=True)} == {"2048^3"}


# --- the wgmma configurations and `invoke tune gemm_tc` --------------------------------------------
# CPU: the library's table, the names, the defaults and the cache run anywhere the library is built;
# the tuner's selection runs with a fake timing session. GPU: every configuration on ragged shapes.

def _need_lib():
    ok, why = _lib_state()
    if not ok:
        pytest.skip(why)


# The ring depths each kernel is compiled for: 03's body 48 KiB stages, 07's 32 KiB ones.
STAGES = {"per_tile": (3, 4), "persistent": (3, 4), "cluster2": (3, 4), "pingpong": (4, 6),
          "persistent_tma_store": (4,), "cluster2_tma_store": (4,)}


def test_config_table_names_parse_and_cover_the_search():
    _need_lib()
    cs = library.read_table("gemm_tc", "config")
    assert len(cs) == len(set(cs)) == 60
    parts = [gt.config_parts(c) for c in cs]
    assert {p["rung"] for p in parts} == set(gt.TUNE_KINDS)
    assert {(p["schedule"], p["bm"], p["bn"], p["bk"]) for p in parts} == {
        ("per_tile", 128, 256, 64), ("persistent", 128, 256, 64), ("cluster2", 128, 256, 64),
        ("pingpong", 128, 128, 64), ("persistent_tma_store", 128, 256, 64), ("cluster2_tma_store", 128, 256, 64)}
    # Every (schedule, stages, order, group) once: the search is the full product.
    assert {(p["schedule"], p["stages"], p["order"], p["group"]) for p in parts} == {
        (s, st, o, g) for s in STAGES for st in STAGES[s] for o in "mn" for g in (4, 8, 16)}
    # The 36 configurations of 03-05 kept their indices (caches and tests name some by index).
    assert all(gt.config_parts(c)["schedule"] != "pingpong" for c in cs[:36])
    assert all(library.table_index("gemm_tc", "config", c) == i for i, c in enumerate(cs))
    assert all(gt._lib().gemm_tc_config_index(c.encode()) == i for i, c in enumerate(cs))
    assert gt._lib().gemm_tc_config_index(b"04_wgmma_persistent-128x256x64-s5-gm8") == -1
    with pytest.raises(ValueError, match="unknown gemm_tc configuration"):
        library.table_index("gemm_tc", "config", "nope")
    with pytest.raises(ValueError, match="not a gemm_tc configuration name"):
        gt.config_parts("04_wgmma_persistent-128x256x64-s4")
    with pytest.raises(ValueError, match="not a gemm_tc configuration name"):  # only 08 has a cluster twin
        gt.config_parts("04_wgmma_persistent-128x256x64-c2-s4-gm8")
    assert gt.config_parts("08_wgmma_tma_store-128x256x64-c2-s4-gn16")["schedule"] == "cluster2_tma_store"


def test_rungs_run_their_defaults():
    """03, 04 and 05 keep what they ran before the tuner came: 4 stages, groups of 8 tiles down M;
    07 runs its 6-stage ring in the same raster."""
    _need_lib()
    lib = gt._lib()
    for v in ("03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster"):
        assert library.read_table("gemm_tc", "config")[lib.gemm_tc_variant_config(v.encode())] == f"{v}-128x256x64-s4-gm8"
    assert library.read_table("gemm_tc", "config")[lib.gemm_tc_variant_config(b"07_wgmma_pingpong")] == "07_wgmma_pingpong-128x128x64-s6-gm8"
    for v in ("01_wmma", "02_mma_sync", "cublas_bf16", "nope"):
        assert lib.gemm_tc_variant_config(v.encode()) == -1


def test_tuned_rung_default_and_set_in_a_fresh_process():
    """The compiled default of 06 (04's), and gemm_tc_set_tuned, in a fresh process: in this one an
    earlier test may have applied this GPU's cached winner."""
    import subprocess
    import sys

    from harness.compile import build

    ensure_built("gemm_tc")
    code = ("from harness.calling import library; lib = library.load('gemm_tc'); "
            "configs = library.read_table('gemm_tc', 'config'); print(configs[lib.gemm_tc_tuned_config()]); "
            "lib.gemm_tc_set_tuned(7); print(configs[lib.gemm_tc_variant_config(b'06_wgmma_tuned')]); "
            "import harness.base.errors as e\n"
            "try:\n    lib.gemm_tc_set_tuned(lib.gemm_tc_config_count())\nexcept e.CudaError as x:\n"
            "    print('refused', x.code)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=build.ROOT)
    assert r.returncode == 0, r.stderr
    first, second, third = r.stdout.strip().splitlines()
    assert first == "04_wgmma_persistent-128x256x64-s4-gm8"
    assert second == library.read_table("gemm_tc", "config")[7]
    assert third == "refused 1"  # cudaErrorInvalidValue: an index past the table


DEVICE = "NVIDIA H100 80GB HBM3"


def test_tuned_choice_reads_the_cache(results_dir):
    _need_lib()
    path = results_dir / "h100" / "gemm_tc-tune.json"
    winner, why = gt.tuned_choice(DEVICE)
    assert winner is None and "invoke tune gemm_tc" in why
    cfg = library.read_table("gemm_tc", "config")[20]
    write_json(path, device=DEVICE, winner=cfg)
    assert gt.tuned_choice(DEVICE) == (cfg, f"tuned on this device ({path})")
    # Another device's file, a name this build lacks, or a broken file: the compiled default.
    write_json(path, device="NVIDIA H100 PCIe", winner=cfg)
    winner, why = gt.tuned_choice(DEVICE)
    assert winner is None and "H100 PCIe" in why
    write_json(path, device=DEVICE, winner="04_wgmma_persistent-128x256x64-s9-gm8")
    winner, why = gt.tuned_choice(DEVICE)
    assert winner is None and "does not have" in why
    path.write_text("{not json")
    assert gt.tuned_choice(DEVICE)[0] is None


def test_apply_tuned_points_06_at_the_cached_winner(results_dir, monkeypatch):
    _need_lib()
    from harness.calling import cudart

    lib = gt._lib()
    before = lib.gemm_tc_tuned_config() if lib.gemm_tc_tuned_is_set() else -1
    cfg = library.read_table("gemm_tc", "config")[31]
    write_json(results_dir / "h100" / "gemm_tc-tune.json", device=DEVICE, winner=cfg)
    monkeypatch.setattr(cudart, "device_name", lambda i=0: DEVICE)
    lib.gemm_tc_set_tuned(-1)  # nothing chosen yet, as in a fresh process
    try:
        assert gt.apply_tuned() == cfg
        assert gt.variant_config("06_wgmma_tuned") == cfg and gt.runs_as("06_wgmma_tuned") == cfg
        assert gt.runs_as("04_wgmma_persistent") == "04_wgmma_persistent-128x256x64-s4-gm8"
        assert gt.runs_as("02_mma_sync") == "02_mma_sync"
    finally:
        lib.gemm_tc_set_tuned(before)


def test_tune_front_door():
    from harness import programs

    assert "gemm_tc" in programs.tunables()
    assert programs.tuner("gemm_tc") is gt.tune


class _FakeTiming:
    def __init__(self, ms):
        self.median_ms, self.iqr_ms = ms, 0.001

    def rate(self, amount):
        return amount / (self.median_ms * 1e-3)


def test_tuner_checks_first_and_picks_the_fastest_correct(results_dir, monkeypatch):
    """The selection with a fake timing session: a wrong configuration (here also the fastest) and a
    refused one are listed, never timed nor chosen; the winner is the fastest correct one and is cached."""
    import json

    from harness.calling import cudart
    from harness.measuring import bench, timing

    _need_lib()
    cs = [c for c in library.read_table("gemm_tc", "config") if c.startswith("04_")]
    wrong, refused, best = cs[0], cs[1], cs[5]
    checks = {wrong: "wrong answer (1000x4097x200: relative error 1.2e-01)", refused: "refused: no room"}
    monkeypatch.setattr(gt, "_tune_check", lambda c: checks.get(c))
    monkeypatch.setattr(cudart, "device_name", lambda i=0: DEVICE)
    monkeypatch.setattr(bench, "metadata", lambda: {"driver": "x", "nvcc": "13.0", "date": "today"})
    timed = []

    def fake_run_plan(items, options=None, on_progress=None):
        timed.extend(it.key for it in items)
        for i, it in enumerate(items):
            assert it.target == "harness.programs.gemm_tc:config_setup" and it.kwargs == {"config": it.key, "size": 64}
            if on_progress:
                on_progress(i, it.key)
        return {it.key: _FakeTiming(0.5 if it.key == best else 1.0 + 0.01 * i) for i, it in enumerate(items)}

    monkeypatch.setattr(timing, "run_plan", fake_run_plan)
    seen = []
    df, path = gt.tune(size=64, save=True, on_progress=seen.append, kinds=("04_wgmma_persistent",))
    assert list(df["config"]) == cs and timed == [c for c in cs if c not in checks] == seen
    assert df.loc[df["config"] == wrong, "status"].iloc[0].startswith("wrong answer")
    assert df.loc[df["config"] == refused, "status"].iloc[0].startswith("refused")
    assert df["winner"].sum() == 1 and df.loc[df["winner"], "config"].iloc[0] == best
    assert df.loc[df["config"] == best, "tflops"].iloc[0] == pytest.approx(2 * 64**3 / 0.5e-3 / 1e12)
    data = json.loads(path.read_text())
    assert path == results_dir / "h100" / "gemm_tc-tune.json"
    assert data["winner"] == best and data["device"] == DEVICE and data["size"] == "64^3"
    assert len(data["table"]) == len(cs)
    assert gt.tuned_choice(DEVICE)[0] == best
    # Nothing correct: an error naming each reason, nothing timed.
    monkeypatch.setattr(gt, "_tune_check", lambda c: "refused: needs sm_90a: no usable GPU")
    timed.clear()
    with pytest.raises(RuntimeError, match="needs sm_90a"):
        gt.tune(size=64, save=False, kinds=("04_wgmma_persistent",))
    assert timed == []


@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize("order", ["m", "n"])
@pytest.mark.parametrize("group", [4, 8, 16])
def test_raster_twin_covers_every_tile_once(group, order, cluster):
    """corner()'s arithmetic (its Python twin): every tile exactly once, for ragged grids too, and the
    default raster (8 down M) is 02's: consecutive units walk down a group of 8 tile rows first."""
    for tiles_m, tiles_n in ((32, 16), (8, 17), (1, 1), (3, 2), (17, 5), (33, 1)):
        got = gt.raster_twin(tiles_m, tiles_n, group, order, cluster)
        real = [t for t in got if t[0] < tiles_m]
        assert sorted(real) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)]
        assert len(got) - len(real) == (tiles_m % cluster and tiles_n)  # the idle halves of ragged clusters
    assert gt.raster_twin(32, 16, 8, "m")[:9] == [(i, 0) for i in range(8)] + [(0, 1)]
    assert gt.raster_twin(32, 16, 4, "n")[:5] == [(0, j) for j in range(4)] + [(1, 0)]


def test_pick_winner_ignores_failed_rows():
    import pandas as pd

    df = pd.DataFrame([{"config": "a", "status": "ok", "tflops": 600.0},
                       {"config": "b", "status": "wrong answer", "tflops": float("nan")},
                       {"config": "c", "status": "ok", "tflops": 700.0}])
    assert tune.pick_winner(df, "gemm_tc") == "c"
    with pytest.raises(RuntimeError, match="no gemm_tc configuration was timed"):
        tune.pick_winner(df[df["config"] == "b"], "gemm_tc")


def test_sanitize_args_cover_every_kernel_instantiation():
    _need_lib()
    runs = gt.sanitize_args()
    cfgs = [argv[argv.index("--config") + 1] for argv in runs.values() if "--config" in argv]
    got = {(p["schedule"], p["stages"], p["order"]) for p in map(gt.config_parts, cfgs)}
    assert got == {(sc, s, o) for sc in STAGES for s in STAGES[sc] for o in "mn"}
    assert "06_wgmma_tuned" in runs
    # 07 beside its configurations: a ragged k, and blocks whose two consumers both hold tiles.
    assert {"07_wgmma_pingpong-k_unaligned", "07_wgmma_pingpong-both_consumers"} <= set(runs)
    # 08 beside its configurations: ragged boxes, buffers reused across tiles, and the n % 4 fallback.
    assert {"08_wgmma_tma_store-ragged", "08_wgmma_tma_store-many_tiles", "08_wgmma_tma_store-n_unaligned"} <= set(runs)


def test_executable_refuses_a_bad_config():
    # Argument errors are found before any CUDA call, so this runs without a GPU too.
    ensure_built("gemm_tc", "exe")
    r = runner.run("gemm_tc", "--config", "nope", "8", "8", "8", check=False)
    assert r.returncode == 2 and "unknown --config 'nope'" in r.stderr and "04_wgmma_persistent-128x256x64-s4-gm8" in r.stderr
    r = runner.run("gemm_tc", "--config", library.read_table("gemm_tc", "config")[0] if _lib_state()[0] else "03_wgmma-128x256x64-s4-gm4",
                   "--variant", "02_mma_sync", "8", "8", "8", check=False)
    assert r.returncode == 2 and "does not apply to 02_mma_sync" in r.stderr


# (m, n, k) for every configuration: small, ragged against the 128 x 256 x 64 tile. 1000 x 4097 is
# 8 x 17 = 136 tiles, more than an H100's 132 SMs (persistent blocks walk a second tile; 68 units of two
# for the clusters), with groups of 16 wider than its 8 tile rows; 33 x 7 x 1000 wraps the ring; k = 33
# and 4097 take the padded copy.
CONFIG_SHAPES = [(1000, 4097, 33), (33, 7, 1000), (7, 1, 4097)]


@pytest.mark.gpu
@pytest.mark.parametrize("config", built_names(lambda: library.read_table("gemm_tc", "config"), "gemm_tc"))
def test_every_config_matches_reference(config):
    skip_unless_runnable("03_wgmma")
    rng = np.random.default_rng(sum(map(ord, config)))
    for m, n, k in CONFIG_SHAPES:
        a, b = bf16(rng, m, k), bf16(rng, n, k)
        ok, e = gt.check(gt.gemm(a, b, config=config), gt.reference(a, b), k)
        assert ok, f"{config} {m}x{n}x{k}: relative error {e:.3e}"


@pytest.mark.gpu
def test_checker_rejects_a_config_that_drops_last_k_tile(monkeypatch):
    """The tuner's check would catch a configuration that forgets part of the reduction."""
    skip_unless_runnable("03_wgmma")
    lib = use_fault_library(monkeypatch, "gemm_tc")
    cfg = "05_wgmma_cluster-128x256x64-s3-gn16"
    with dropped_k_tiles(lib, 1):
        assert gt._tune_check(cfg).startswith("wrong answer")
    assert gt._tune_check(cfg) is None


@pytest.mark.gpu
def test_executable_runs_a_config():
    ensure_built("gemm_tc", "exe")
    skip_unless_runnable("03_wgmma")
    cfg = "04_wgmma_persistent-128x256x64-s3-gn4"
    df = gt.run("--config", cfg, "--reps", "2", "300", "260", "200")
    assert list(df["variant"]) == ["06_wgmma_tuned"] and list(df["config"]) == [cfg]
    assert set(df["check"]) == {"pass"}


@pytest.mark.gpu
def test_gpu_tune_small(results_dir):
    """A small real search over 05's choices (checks on the ragged shapes, then NVBench's smoke timing)."""
    import json

    from harness.measuring import timing

    skip_unless_runnable("03_wgmma")
    df, path = gt.tune(size=512, save=True, options=timing.SMOKE, kinds=("05_wgmma_cluster",))
    assert (df["status"] == "ok").all(), df[df["status"] != "ok"][["config", "status"]]
    assert len(df) == 12 and (df["tflops"] > 0).all() and df["winner"].sum() == 1
    data = json.loads(path.read_text())
    try:
        assert gt.apply_tuned() == data["winner"]  # the search handed its winner to the library
        gt._lib().gemm_tc_set_tuned(-1)  # a fresh process's state: the cache is read again
        assert gt.apply_tuned() == data["winner"]
    finally:
        gt._lib().gemm_tc_set_tuned(-1)
