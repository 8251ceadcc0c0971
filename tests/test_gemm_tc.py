"""gemm_tc: bf16 dtype handling, the reference and checker, the mma fragment twin, and every rung on
the GPU against a float64 product of the same bf16 values (ragged shapes, several seeds)."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

from harness import library, runner
from harness.errors import CudalabError
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
    try:
        gt.variants()
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
    assert gt.variants() == ["01_wmma", "02_mma_sync", "03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster",
                             "cublas_bf16", "cublas_tf32"]
    assert gt.requirement("02_mma_sync", 7, 9, 13) is None
    # k not a multiple of 8 takes 03/04's padded-copy path instead of a refusal (issue 20).
    assert gt.requirement("03_wgmma", 128, 128, 100) is None
    assert gt.requirement("04_wgmma_persistent", 128, 128, 4095) is None
    assert gt.requirement("03_wgmma", 100, 37, 64) is None
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
    if not runner_exists():
        pytest.skip("build/bin/gemm_tc not built")
    for argv in (["--variant", "nope", "8", "8", "8"], ["8", "8"], ["0", "8", "8"], ["--bogus", "8", "8", "8"],
                 ["8", "8", "x"]):
        r = runner.run("gemm_tc", *argv, check=False)
        assert r.returncode == 2, (argv, r.stderr)


# --- GPU ----------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(gt.KERNELS) + ["cublas_bf16", "cublas_tf32"])
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
@pytest.mark.parametrize("variant", gt.KERNELS)
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
@pytest.mark.parametrize("variant", ["02_mma_sync", "03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster"])
def test_checker_rejects_kernel_that_drops_last_k_tile(variant, rng):
    skip_unless_runnable(variant)
    a, b = bf16(rng, 256, 256), bf16(rng, 256, 256)
    ref = gt.reference(a, b)
    assert gt.check(gt.gemm(a, b, variant), ref, 256)[0]
    with gt.dropped_k_tiles(1):
        ok, e = gt.check(gt.gemm(a, b, variant), ref, 256)
    assert not ok and e > 0.1, e
    assert gt.check(gt.gemm(a, b, variant), ref, 256)[0]  # the fault is off again


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster"])
@pytest.mark.parametrize("mnk", [(128, 128, 100), (300, 4097, 1001), (33, 65, 7)], ids=lambda t: "x".join(map(str, t)))
def test_wgmma_takes_ragged_k_through_a_padded_copy(variant, mnk, rng):
    """k % 8 != 0: A and B are copied into zero-padded buffers (TMA needs 16-byte row strides). The
    checker sees the whole product, so a padding that leaked non-zeros, or a dropped column, fails."""
    skip_unless_runnable(variant)
    m, n, k = mnk
    a, b = bf16(rng, m, k), bf16(rng, n, k)
    ok, e = gt.check(gt.gemm(a, b, variant), gt.reference(a, b), k)
    assert ok, f"{variant} {mnk}: relative error {e:.3e}"


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
    if not runner_exists():
        pytest.skip("build/bin/gemm_tc not built")
    df = gt.run("--variant", "all", "--reps", "2", "257", "129", "136")
    assert set(df["check"]) == {"pass"}
    assert {"01_wmma", "02_mma_sync", "cublas_bf16"} <= set(df["variant"])


def runner_exists() -> bool:
    from harness import build

    return (build.ROOT / "build" / "bin" / "gemm_tc").exists()


def test_errors_are_typed():
    assert issubclass(library.LibraryNotBuilt, CudalabError)


def test_bench_cases_and_ceilings(monkeypatch):
    # As on an H100 with cuBLAS: every rung against cuBLAS BF16 of the same size, targets at 4096^3 only.
    monkeypatch.setattr(gt, "variants", lambda: ["01_wmma", "02_mma_sync", "03_wgmma", "04_wgmma_persistent",
                                                 "05_wgmma_cluster", "cublas_bf16", "cublas_tf32"])
    monkeypatch.setattr(gt, "unsupported_reason", lambda v: None)
    monkeypatch.setattr(gt, "requirement", lambda v, m, n, k: None)
    monkeypatch.setattr(gt, "have_cublas", lambda: True)
    cases = gt.bench_cases(quick=False)
    vs_cublas = {(c.variant, c.size): c for c in cases if c.ceiling.startswith("cublas_bf16_")}
    assert set(vs_cublas) == {(v, f"{s}^3") for v in gt.KERNELS for s in gt.BENCH_SIZES}
    assert vs_cublas[("03_wgmma", "4096^3")].target == 0.90
    assert vs_cublas[("02_mma_sync", "4096^3")].target == 0.50
    assert vs_cublas[("03_wgmma", "8192^3")].target is None
    assert vs_cublas[("04_wgmma_persistent", "4096^3")].target == 1.05  # issue 20
    assert all(c.ceiling == f"cublas_bf16_{c.size[:-2]}" for c in vs_cublas.values())
    peak = [c for c in cases if c.ceiling == "bf16_peak"]
    assert len(peak) == 7 * len(gt.BENCH_SIZES)
    assert {c.ceiling for c in cases} <= set(gt.ceilings())
    assert all(c.flops == 2.0 * int(c.size[:-2]) ** 3 for c in cases)
    assert {c.size for c in gt.bench_cases(quick=True)} == {"2048^3"}
