"""attention: reference, twin, validation and checkers on the CPU; every variant on the GPU.

Tolerances by dtype, ||out - ref|| / ||ref|| against the float64 reference (attention.TOLERANCES
has the arithmetic): float32 1e-4 (dot products of length D, exp() of the scores and sums over up to
S=4097 keys give 1e-6..1e-5 on unit-scale random inputs; one skipped or doubled key tile costs 1e-2
or more), and 1e-5 for the 3xTF32 variant (the FP32 bar: what FP32 attention reaches); bfloat16 1e-2 against the
reference of the bf16-rounded inputs (the bf16 rounding of the output and of the softmax weights
gives ~1.5e-3; a skipped key tile or a missing causal mask costs 5e-2 or more).
"""

from __future__ import annotations

import functools
import math
import subprocess

import numpy as np
import pytest

from conftest import built_names, ensure_built, poison, refuse_loads_after_the_table
from fault_build import use_fault_library
from harness.base.errors import CudaError
from harness.calling import cudart, runner
from harness.compile import build
from harness.programs import attention as att

bf16 = att.bfloat16
FP32_VARIANTS = built_names(lambda: [v for v in att.VARIANTS if not att.is_bf16(v)], "attention")
BF16_RUNGS = ("03_flash_bf16", "05_flash_wgmma")


def _skip_unless_runs(variant):
    """Skip, with the library's reason, a variant this build or GPU cannot run (05 off sm_90a)."""
    why = att.unsupported_reason(variant)
    if why:
        pytest.skip(f"{variant}: {why}")


def _inputs(rng, shape, dtype=np.float32):
    return tuple(rng.uniform(-1, 1, shape).astype(dtype) for _ in range(3))


def _nan(shape, dtype):
    """A poisoned output: NaN in every element (for bfloat16 too, where conftest.poison's 0xAB
    bytes would be a finite number)."""
    return np.full(shape, np.nan, dtype=dtype)


def _bf16_model(q, k, v, causal=False, skip_last=False, mask=True, br=128, bc=64):
    """numpy model of 03_flash_bf16's rounding: FP32-exact scores of the bf16 inputs, softmax weights
    rounded to bf16 before P·V (the normaliser summed unrounded), the output rounded to bf16.
    Sabotage as the test-only variants do it: skip_last leaves out the last key tile each block of
    `br` query rows visits (under the causal mask: the tile on its diagonal); mask=False forgets the
    causal mask inside the tiles the block visits."""
    q64, k64, v64 = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    S, D = q64.shape[-2:]
    s = q64 @ np.swapaxes(k64, -1, -2) / math.sqrt(D)
    i, j = np.arange(S)[:, None], np.arange(S)[None, :]
    kv_end = np.minimum(S, (i // br + 1) * br) if causal else np.full_like(i, S)
    visited = j < (-(-kv_end // bc) - (1 if skip_last else 0)) * bc  # the tiles each row's block visits
    keep = visited & ((j <= i) if causal and mask else True)
    s = np.where(keep, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    lsum = p.sum(-1, keepdims=True)
    pr = p.astype(bf16).astype(np.float64)
    return ((pr @ v64) / lsum).astype(bf16)


# --- CPU ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_reference_matches_direct_loops(causal, rng):
    B, H, S, D = 1, 2, 5, 3
    q, k, v = _inputs(rng, (B, H, S, D))
    ref = att.reference(q, k, v, causal)
    want = np.zeros((B, H, S, D))
    for b in range(B):
        for h in range(H):
            for i in range(S):
                keys = range(i + 1) if causal else range(S)
                s = [sum(float(q[b, h, i, d]) * float(k[b, h, j, d]) for d in range(D)) / math.sqrt(D) for j in keys]
                w = [math.exp(t) for t in s]
                for d in range(D):
                    want[b, h, i, d] = sum(wj * float(v[b, h, j, d]) for wj, j in zip(w, keys)) / sum(w)
    np.testing.assert_allclose(ref, want, rtol=1e-12, atol=1e-12)


def test_reference_causal_first_row_is_v0(rng):
    q, k, v = _inputs(rng, (2, 3, 9, 4))
    ref = att.reference(q, k, v, causal=True)
    np.testing.assert_allclose(ref[:, :, 0], v[:, :, 0], rtol=1e-7)


def test_reference_is_stable_for_large_scores(rng):
    q, k, v = _inputs(rng, (1, 1, 6, 4))
    ref = att.reference(q * 1000, k * 1000, v)
    assert np.all(np.isfinite(ref))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("S, D, br, bc", [(1, 4, 4, 4), (7, 3, 4, 4), (13, 5, 4, 3), (9, 8, 2, 5)])
def test_twin_matches_reference(S, D, br, bc, causal, rng):
    q, k, v = _inputs(rng, (2, 1, S, D))
    assert att.rel_error(att.twin(q, k, v, causal, br=br, bc=bc), att.reference(q, k, v, causal)) < 1e-12


def test_checker_rejects_wrong_answers(rng):
    q, k, v = _inputs(rng, (1, 2, 100, 32))
    ref = att.reference(q, k, v)
    assert att.check(ref.astype(np.float32), ref)
    # A flash kernel that forgot the last tile of keys, modelled in numpy.
    skipped = att.reference(q, k[:, :, :64], v[:, :, :64])
    assert not att.check(skipped, ref)
    nan = ref.copy()
    nan[0, 0, 3, 1] = np.nan
    assert not att.check(nan, ref)
    assert not att.check(ref * (1 + 2e-4), ref)


@pytest.mark.parametrize("bad, exc", [
    (dict(q=np.zeros((1, 1, 4, 32), np.float64)), TypeError),
    (dict(q=np.zeros((1, 4, 32), np.float32)), ValueError),
    (dict(k=np.zeros((1, 1, 5, 32), np.float32)), ValueError),
    (dict(v=np.zeros((1, 1, 32, 4), np.float32).transpose(0, 1, 3, 2)), ValueError),
    (dict(q=[[[[1.0]]]]), TypeError),
])
def test_bad_arrays(bad, exc):
    args = dict(q=np.ones((1, 1, 4, 32), np.float32), k=np.ones((1, 1, 4, 32), np.float32),
                v=np.ones((1, 1, 4, 32), np.float32))
    args.update(bad)
    with pytest.raises(exc):
        att.attention(args["q"], args["k"], args["v"])


def test_bad_variant_dims_and_scale():
    x = np.ones((1, 1, 4, 48), np.float32)
    with pytest.raises(ValueError, match="D in"):
        att.attention(x, x, x, variant="02_flash")
    with pytest.raises(ValueError, match="01_naive, 02_flash"):
        att.attention(x, x, x, variant="03_nope")
    with pytest.raises(ValueError):
        att.attention(np.ones((1, 1, 0, 32), np.float32), np.ones((1, 1, 0, 32), np.float32),
                      np.ones((1, 1, 0, 32), np.float32))
    with pytest.raises(ValueError, match="B\\*H"):
        big = np.ones((256, 257, 1, 32), np.float32)
        att.attention(big, big, big)
    y = np.ones((1, 1, 4, 32), np.float32)
    with pytest.raises(TypeError):
        att.attention(y, y, y, scale=float("nan"))
    with pytest.raises(TypeError):
        att.attention(y, y, y, out=np.zeros((1, 1, 4, 32), np.float64))
    assert att.canonical_variant("flash") == "02_flash" and att.canonical_variant("naive") == "01_naive"


def test_flops_formula():
    assert att.flops(4, 16, 4096, 64) == 4 * 64 * 4096 ** 2 * 64
    assert att.flops(1, 1, 4, 2, causal=True) == 4 * 10 * 2  # 4+3+2+1 pairs


# Recorded on an NVIDIA H100 80GB HBM3 (build/bin/attention's first recorded run).
RECORDED_H100 = """\
result program=attention variant=03_flash_bf16 dtype=bf16 b=1 h=3 s=300 d=128 causal=0 ms=0.0158 tflops=8.763 rel_err=2.285e-03 check=pass
result program=attention variant=04_flash_3xtf32 dtype=f32 b=1 h=3 s=300 d=128 causal=1 ms=0.0474 tflops=1.464 rel_err=1.897e-07 check=pass
"""


def test_parse_recorded_output():
    df = att.parse_output(RECORDED_H100)
    assert list(df["variant"]) == ["03_flash_bf16", "04_flash_3xtf32"]
    assert list(df["dtype"]) == ["bf16", "f32"] and (df["check"] == "pass").all()
    assert df["rel_err"].iloc[0] <= att.TOLERANCE_BF16 and df["rel_err"].iloc[1] <= att.TOLERANCE_FP32_STRICT


def test_profile_and_sanitize_hooks():
    assert att.profile_args("03_flash_bf16")[:2] == ["--variant", "03_flash_bf16"]
    cases = att.sanitize_args()
    assert {a[1] for a in cases.values() if a[0] == "--variant"} == set(att.VARIANTS)
    assert any("--causal" in a and a[-1] == "128" for a in cases.values())
    # Every tuning choice is sanitized too, at both head sizes: the tuner may pick any of them.
    assert {(a[1], a[-1]) for a in cases.values() if a[0] == "--config"} == \
        {(c, d) for c in att.TUNING_VARIANTS + att.WGMMA_CONFIGS for d in ("64", "128")}


def test_variant_table_matches_library():
    ensure_built("attention")
    lib = att.library.load("attention")
    assert att.VARIANTS == tuple(lib.ffi.string(lib.attention_variant_name(i)).decode()
                                 for i in range(lib.attention_variant_count()))
    configs = tuple(lib.ffi.string(lib.attention_config_name(i)).decode() for i in range(lib.attention_config_count()))
    # The config table split by variant covers it, in its order, with none left over.
    assert configs == att.TUNING_VARIANTS + att.WGMMA_CONFIGS and att.TUNING_VARIANTS and att.WGMMA_CONFIGS
    assert set(att.TUNING_VARIANTS + att.WGMMA_CONFIGS) <= set(att.BF16_VARIANTS)
    lib = att.library.load("attention")
    for variant, choices in att.TUNED.items():
        for c in choices:
            assert att.config_variant(c) == variant
            assert lib.ffi.string(lib.attention_config_variant(c)).decode() == variant
    assert lib.attention_config_variant(b"05_flash_wgmma") == lib.ffi.NULL


def test_wgmma_refused_with_the_reason_off_sm90a():
    """Where 05_flash_wgmma cannot run (CI: no GPU; an Ampere GPU; a build without sm_90a), the
    library names why and attention() raises that before any launch; the executable exits 2 with it."""
    ensure_built("attention")
    why = att.unsupported_reason("05_flash_wgmma")
    if why is None:
        pytest.skip("this GPU runs 05_flash_wgmma")
    assert why.startswith("needs sm_90a")
    assert att.unsupported_reason(att.WGMMA_CONFIGS[0]) == why
    # 03 needs sm_80 only: it runs off sm_90a unless the GPU or build is older (a T4, a compute_75 build).
    why03 = att.unsupported_reason("03_flash_bf16")
    assert why03 is None or why03.startswith("needs sm_80"), why03
    x = np.ones((1, 1, 8, 64), bf16)
    with pytest.raises(ValueError, match="cannot run here: needs sm_90a"):
        att.attention(x, x, x, variant="05_flash_wgmma")
    assert att.default_bf16_variant() == "03_flash_bf16"
    _exe()
    res = runner.run("attention", "--variant", "05_flash_wgmma", "1", "1", "8", "64", check=False)
    assert res.returncode == 2 and "needs sm_90a" in res.stderr, res.stderr


def test_config_names_its_variant():
    assert att.config_variant("flash_wgmma_pp_k128s2") == "05_flash_wgmma"
    assert att.config_variant("flash_bf16_w4s2") == "03_flash_bf16"
    with pytest.raises(ValueError, match="unknown tuning choice"):
        att.config_variant("flash_wgmma_nosuch")
    assert att.target("05_flash_wgmma", 128, 4096) == 0.90 and att.target("05_flash_wgmma", 64, 4096) == 0.85
    assert att.target("05_flash_wgmma", 128, 16384) == 0.75 and att.target("03_flash_bf16", 64, 4096) == 0.5


def test_bf16_validation():
    x = np.ones((1, 1, 4, 64), bf16)
    with pytest.raises(TypeError):  # a float32 variant given bf16 arrays
        att.attention(x, x, x, variant="02_flash")
    with pytest.raises(TypeError):  # and the other way round
        y = np.ones((1, 1, 4, 64), np.float32)
        att.attention(y, y, y, variant="03_flash_bf16")
    with pytest.raises(ValueError, match="D in"):
        z = np.ones((1, 1, 4, 32), bf16)
        att.attention(z, z, z)
    with pytest.raises(ValueError, match="scale > 0"):
        att.attention(x, x, x, scale=-0.1)
    # 0 too: the masked keys' -inf times a zero scale would be NaN in the tensor-core kernels.
    for variant, dt in (("03_flash_bf16", bf16), ("04_flash_3xtf32", np.float32)):
        w = np.ones((1, 1, 4, 64), dt)
        with pytest.raises(ValueError, match="needs scale > 0, got 0.0"):
            att.attention(w, w, w, causal=True, variant=variant, scale=0.0)
    with pytest.raises(TypeError):
        att.attention(x, x, x, out=np.zeros((1, 1, 4, 64), np.float32))
    assert att.validate(x, x, x)[3] == att.default_bf16_variant()  # the default follows the dtype (and GPU)
    assert att.default_bf16_variant() in ("03_flash_bf16", "05_flash_wgmma")
    assert att.is_bf16("03_flash_bf16") and att.is_bf16("flash_bf16_w4s2") and not att.is_bf16("04_flash_3xtf32")


class _ReachedTheFallback(Exception):
    pass


def test_bf16_fallback_checks_the_bf16_rules_before_falling_back(monkeypatch):
    """Where no bf16 kernel runs (sm_75), bf16 inputs fall back to 02_flash in float32, but only after
    the checks the bf16 default applies (head size, scale > 0, out's dtype): 02_flash takes more."""
    monkeypatch.setattr(att, "_bf16_fallback_reason",
                        lambda q, v: "needs sm_80: this GPU is sm_75" if v is None and q.dtype == bf16 else None)
    monkeypatch.setattr(att, "default_bf16_variant", lambda: "03_flash_bf16")

    def reached(variant):
        assert variant == att.BF16_FALLBACK
        raise _ReachedTheFallback

    monkeypatch.setattr(att, "unsupported_reason", reached)
    x = np.ones((1, 1, 4, 64), bf16)
    with pytest.raises(ValueError, match="D in"):
        z = np.ones((1, 1, 4, 32), bf16)
        att.attention(z, z, z)
    with pytest.raises(ValueError, match="scale > 0"):
        att.attention(x, x, x, scale=-0.1)
    with pytest.raises(TypeError):
        att.attention(x, x, x, out=np.zeros((1, 1, 4, 64), np.float32))
    with pytest.raises(_ReachedTheFallback):  # and valid inputs do reach the float32 fallback
        att.attention(x, x, x, out=np.zeros((1, 1, 4, 64), bf16))


def test_reference_of_bf16_inputs_is_the_float64_of_the_rounded_values(rng):
    q, k, v = _inputs(rng, (1, 2, 9, 64), bf16)
    ref = att.reference(q, k, v, True)
    want = att.reference(*(a.astype(np.float64) for a in (q, k, v)), True)
    np.testing.assert_array_equal(ref, want)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("S", [7, 129, 1000])
def test_bf16_tolerance_against_a_model_of_the_kernel(S, causal, rng):
    """The bf16 tolerance passes a numpy model of the kernel's own rounding with room to spare, and
    rejects the two sabotaged kernels (modelled the same way)."""
    q, k, v = _inputs(rng, (1, 2, S, 64), bf16)
    ref = att.reference(q, k, v, causal)
    err = att.rel_error(_bf16_model(q, k, v, causal), ref)
    assert err < att.TOLERANCE_BF16 / 3, err
    if S > 64:
        with np.errstate(invalid="ignore"):  # a row left with no key at all is NaN, as in the kernel
            assert not att.check(_bf16_model(q, k, v, causal, skip_last=True), ref, att.TOLERANCE_BF16)
    if causal and S > 1:
        assert not att.check(_bf16_model(q, k, v, causal, mask=False), ref, att.TOLERANCE_BF16)


def test_bench_cases_honour_quick():
    quick, full = att.bench_cases(quick=True), att.bench_cases(quick=False)
    assert all(c.quick for c in quick) and len(quick) < len(full)
    assert not any("S16384" in c.size for c in quick)
    assert {c.size for c in full if c.variant == "03_flash_bf16"} >= {
        "B4xH16xS4096xD64", "B4xH16xS4096xD128", "B4xH16xS4096xD128-causal", "B4xH16xS1024xD64",
        "B4xH16xS16384xD128"}
    names = set(att.ceilings())
    assert {c.ceiling for c in full} <= names
    assert {c.target for c in full if c.variant == "03_flash_bf16"} == {0.5}


def _exe():
    return ensure_built("attention", "exe")


@pytest.mark.parametrize("argv", [[], ["1", "1", "4"], ["1", "0", "4", "32"], ["--variant", "x", "1", "1", "4", "32"],
                                  ["--variant", "02_flash", "1", "1", "4", "48"], ["300", "300", "4", "32"],
                                  ["--variant", "03_flash_bf16", "1", "1", "4", "32"],
                                  ["--variant", "04_flash_3xtf32", "1", "1", "4", "32"]])
def test_executable_rejects_bad_argv(argv):
    p = subprocess.run([str(_exe()), *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "error:" in p.stderr


# --- GPU ----------------------------------------------------------------------------------------

# (B, H) per S: B·H up to 64 where the float64 reference stays cheap, fewer heads at long S.
BH_FOR_S = {1: (4, 16), 7: (2, 32), 64: (8, 8), 100: (2, 3), 1000: (1, 4), 4097: (1, 1)}


@pytest.mark.gpu
@pytest.mark.parametrize("variant", FP32_VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [32, 64, 128])
@pytest.mark.parametrize("S", [1, 7, 64, 100, 1000, 4097])
def test_attention_matches_reference(variant, causal, D, S):
    _skip_unless_runs(variant)  # 04 needs sm_80
    ds = att.head_sizes(variant)
    if ds is not None and D not in ds:
        pytest.skip(f"{variant} takes D in {ds}")
    B, H = BH_FOR_S[S]
    seeds = (0, 1, 2) if S <= 100 else (S,)
    tol = att.TOLERANCE_FP32_STRICT if variant == "04_flash_3xtf32" else att.TOLERANCE
    for seed in seeds:
        q, k, v, ref = _fp32_case(seed, (B, H, S, D), causal)
        out = poison(q.shape, np.float32)
        att.attention(q, k, v, causal, variant=variant, out=out)
        err = att.rel_error(out, ref)
        assert err <= tol, f"seed {seed}: rel err {err:.2e}"


@functools.lru_cache(maxsize=8)  # pytest varies the variant fastest: consecutive tests share a case
def _fp32_case(seed: int, shape: tuple, causal: bool):
    """Inputs and float64 reference, shared by the FP32 variants (the reference at S=4097 costs more
    than the kernels): read-only, so no test can change what the next one checks against."""
    q, k, v = _inputs(np.random.default_rng(seed), shape)
    ref = att.reference(q, k, v, causal)
    for x in (q, k, v, ref):
        x.setflags(write=False)
    return q, k, v, ref


# bf16: ragged S, odd B·H, small enough to keep the suite fast.
BH_BF16 = {1: (3, 5), 7: (1, 3), 129: (3, 1), 1000: (1, 3), 2049: (1, 1)}


# 05_flash_wgmma's edges besides: one row short of, at, and one past its 128-row block and key tile.
BH_WGMMA = {**BH_BF16, 127: (1, 2), 128: (2, 1), 257: (1, 2)}


@pytest.mark.gpu
@pytest.mark.parametrize("variant", BF16_RUNGS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("S", sorted(BH_WGMMA))
def test_flash_bf16_matches_reference(variant, causal, D, S):
    if variant == "03_flash_bf16" and S not in BH_BF16:
        pytest.skip("03's shapes are BH_BF16")
    _skip_unless_runs(variant)
    B, H = BH_WGMMA[S]
    for seed in ((0, 1) if S <= 129 else (S,)):
        q, k, v = _inputs(np.random.default_rng(seed), (B, H, S, D), bf16)
        out = _nan(q.shape, bf16)
        att.attention(q, k, v, causal, variant=variant, out=out)
        err = att.rel_error(out, att.reference(q, k, v, causal))
        assert err <= att.TOLERANCE_BF16, f"seed {seed}: rel err {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("config", built_names(lambda: att.TUNING_VARIANTS + att.WGMMA_CONFIGS, "attention"))
def test_every_tuning_choice_matches_reference(config, D, causal):
    """`invoke tune attention` may make any of these what 03_flash_bf16 or 05_flash_wgmma runs: each
    must be right at ragged S (1 row; a partial 32-, 64- and 128-key tile; several tiles, 16 and 32
    rows a warp; both ping-pong partners with an odd and an even number of tiles) and odd B·H."""
    _skip_unless_runs(config)
    for S, (B, H) in ((1, (3, 1)), (130, (1, 3)), (1000, (1, 1))):
        q, k, v = _inputs(np.random.default_rng(S + D), (B, H, S, D), bf16)
        out = _nan(q.shape, bf16)
        att.attention(q, k, v, causal, variant=config, out=out)
        err = att.rel_error(out, att.reference(q, k, v, causal))
        assert err <= att.TOLERANCE_BF16, f"S={S}: rel err {err:.2e}"


@pytest.mark.gpu
def test_gpu_executable_runs_a_tuning_choice():
    _skip_unless_runs(att.TUNING_VARIANTS[-1])
    df = att.run("--config", att.TUNING_VARIANTS[-1], "--causal", "--reps", "2", "1", "3", "130", "128")
    assert df["variant"].iloc[0] == "03_flash_bf16" and df["config"].iloc[0] == att.TUNING_VARIANTS[-1]
    assert (df["check"] == "pass").all()


@pytest.mark.gpu
@pytest.mark.parametrize("config", built_names(lambda: [c for c in att.WGMMA_CONFIGS if c.endswith("_k128s2")], "attention"))
def test_gpu_executable_runs_a_wgmma_schedule(config):
    _skip_unless_runs(config)
    df = att.run("--config", config, "--causal", "--reps", "2", "1", "3", "300", "128")
    assert df["variant"].iloc[0] == "05_flash_wgmma" and df["config"].iloc[0] == config
    assert (df["check"] == "pass").all()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", BF16_RUNGS)
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_bf16_error_is_within_twice_torchs(variant, D, causal):
    """The second accuracy bar, a fair one for bf16: on the same bf16 inputs, our error against the float64
    reference is at most twice torch's own bf16 SDPA error (where torch and a CUDA device exist)."""
    _skip_unless_runs(variant)
    torch = pytest.importorskip("torch", reason="torch is not installed: the comparison with its SDPA needs it")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    import torch.nn.functional as F

    q, k, v = _inputs(np.random.default_rng(D + causal), (2, 3, 1000, D), bf16)
    ref = att.reference(q, k, v, causal)
    ours = att.attention(q, k, v, causal, variant=variant, out=_nan(q.shape, bf16))
    tq, tk, tv = (torch.from_numpy(a.astype(np.float32)).cuda().to(torch.bfloat16) for a in (q, k, v))
    theirs = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).float().cpu().numpy()
    e_ours, e_torch = att.rel_error(ours, ref), att.rel_error(theirs, ref)
    assert 0 < e_torch < att.TOLERANCE_BF16  # torch's answer is a bf16 answer, not an exact one
    assert e_ours <= 2 * e_torch, f"{variant}: {e_ours:.2e} against torch's {e_torch:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["03_flash_bf16", "04_flash_3xtf32", "05_flash_wgmma"])
@pytest.mark.parametrize("causal", [False, True])
def test_tensor_core_flash_large_logits_stay_finite(variant, causal):
    _skip_unless_runs(variant)
    # Scores around 1e3: |q|, |k| up to 40 at D=64 give q·k/8 with a spread of ~500.
    dt = bf16 if att.is_bf16(variant) else np.float32
    rng = np.random.default_rng(7)
    q, k, v = (rng.uniform(-1, 1, (1, 3, 200, 64)) * c for c in (40, 40, 1))
    q, k, v = (a.astype(dt) for a in (q, k, v))
    ref = att.reference(q, k, v, causal)
    assert np.abs(att.reference(q, k, np.ones_like(v), causal) - 1).max() < 1e-9  # a softmax, still
    out = att.attention(q, k, v, causal, variant=variant)
    assert np.isfinite(out.astype(np.float64)).all()
    assert att.rel_error(out, ref) <= att.tolerance(variant)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["01_naive", "02_flash", "03_flash_bf16", "04_flash_3xtf32"])
def test_other_scale_and_naive_odd_d(variant, rng):
    _skip_unless_runs(variant)
    dt = att.dtype_of(variant)
    q, k, v = _inputs(rng, (1, 2, 33, 64), dt)
    out = att.attention(q, k, v, variant=variant, scale=0.5)
    assert att.check(out, att.reference(q, k, v, scale=0.5), att.tolerance(variant))
    if variant == "01_naive":
        q, k, v = _inputs(rng, (1, 2, 33, 5))
        assert att.check(att.attention(q, k, v, True, variant=variant), att.reference(q, k, v, True))


@pytest.mark.gpu
@pytest.mark.parametrize("S, causal", [(100, False), (4097, False), (200, True)])
def test_checker_catches_flash_that_skips_last_tile(S, causal, monkeypatch):
    use_fault_library(monkeypatch, "attention")  # the fault build: flash_skip_last_tile exists only there
    q, k, v = _inputs(np.random.default_rng(3), (1, 2, S, 64))
    ref = att.reference(q, k, v, causal)
    good = att.attention(q, k, v, causal, variant="02_flash")
    assert att.check(good, ref)
    bad = att.attention(q, k, v, causal, variant="flash_skip_last_tile")
    assert not att.check(bad, ref), f"skipping the last key tile went unnoticed (err {att.rel_error(bad, ref):.1e})"


@pytest.mark.gpu
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("bad, S, causal", [("flash_bf16_skip_last_tile", 129, False),
                                            ("flash_bf16_skip_last_tile", 1000, True),
                                            ("flash_bf16_no_causal_mask", 200, True),
                                            ("flash_bf16_no_causal_mask", 1000, True)])
def test_bf16_checker_catches_sabotaged_kernels(bad, S, causal, D, monkeypatch):
    use_fault_library(monkeypatch, "attention")  # the fault build: the sabotaged variants exist only there
    _skip_unless_runs(bad)
    q, k, v = _inputs(np.random.default_rng(5), (1, 3, S, D), bf16)
    ref = att.reference(q, k, v, causal)
    good = att.attention(q, k, v, causal, variant="03_flash_bf16")
    assert att.check(good, ref, att.TOLERANCE_BF16)
    wrong = att.attention(q, k, v, causal, variant=bad)
    err = att.rel_error(wrong, ref)
    assert not att.check(wrong, ref, att.TOLERANCE_BF16), f"{bad} went unnoticed (err {err:.1e})"


@pytest.mark.gpu
def test_device_form_with_workspace(rng):
    shape = (2, 2, 130, 64)
    for variant in att.VARIANTS:
        dt = att.dtype_of(variant)
        q, k, v = _inputs(rng, shape, dt)
        ref = att.reference(q, k, v)
        bufs = [cudart.DeviceBuffer.from_array(a) for a in (q, k, v)]
        o = cudart.DeviceBuffer(q.nbytes)
        o.fill_bytes(0xFF)  # NaN pattern (float32 and bf16)
        n = 0 if att.is_bf16(variant) else att.workspace_bytes(variant, *shape)
        assert (n > 0) == (variant == "01_naive")
        ws = cudart.DeviceBuffer(n) if n else None
        if att.unsupported_reason(variant):
            # What this build has no code for on this GPU (05 off sm_90a; 03 and 04 below sm_80): the device
            # form does no Python checks, so the library itself refuses, before any launch, and writes nothing.
            with pytest.raises(CudaError, match="cudaErrorNotSupported"):
                att.forward_device(variant, shape, False, *bufs, o, ws)
            assert np.isnan(o.to_host(np.empty(shape, dt)).astype(np.float32)).all(), variant
            for b in bufs + [o] + ([ws] if ws else []):
                b.close()
            continue
        with cudart.Stream() as s:
            att.forward_device(variant, shape, False, *bufs, o, ws, stream=s.handle)
            s.synchronize()
        got = o.to_host(np.empty(shape, dt))
        assert att.check(got, ref, att.tolerance(variant)), variant
        if variant in ("03_flash_bf16", "04_flash_3xtf32"):
            # The device form does no Python checks: the library itself refuses a scale of 0.
            with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
                att.forward_device(variant, shape, True, *bufs, o, ws, scale=0.0)
        for b in bufs + [o] + ([ws] if ws else []):
            b.close()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: att.VARIANTS, "attention"))
@pytest.mark.parametrize("causal", [[], ["--causal"]])
def test_executable_checks_itself(variant, causal):
    _skip_unless_runs(variant)
    p = subprocess.run([str(_exe()), "--variant", variant, *causal, "2", "3", "257", "64"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "check=pass" in p.stdout


@pytest.mark.gpu
def test_gpu_executable_seed_0_checks_itself():
    p = subprocess.run([str(_exe()), "--seed", "0", "--reps", "1", "2", "2", "67", "64"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "result program=attention" in p.stdout and "check=pass" in p.stdout


def test_max_seq_matches_the_header():
    # The Python check and the C one must refuse the same S: read the header's number.
    import re

    text = (build.CUDA_DIR / "shared" / "attention" / "attention_limits.h").read_text()
    assert int(re.search(r"#define ATTN_MAX_S (\d+)", text).group(1)) == att.MAX_S


def test_too_long_sequence_says_at_most():
    q = np.ones((1, 1, att.MAX_S + 1, 1), np.float32)  # shape check only: refused before any launch
    with pytest.raises(ValueError, match=f"at most {att.MAX_S}"):
        att.attention(q, q, q, variant="01_naive")


def test_executable_config_error_lists_every_tuning_choice():
    """A bad --config names the valid ones: the library's table, which TUNING_VARIANTS spells out."""
    res = runner.run("attention", "--config", "nosuch", "1", "1", "8", "64", check=False)
    assert res.returncode == 2 and all(c in res.stderr for c in att.TUNING_VARIANTS), res.stderr


@pytest.mark.parametrize("shape,rule", [
    ((1, 1, -5, 64), "must be positive"),
    ((1, 0, 8, 64), "must be positive"),
    ((65536, 1, 8, 64), r"B\*H must be at most 65535"),
    ((1, 1, att.MAX_S + 1, 64), f"S must be at most {att.MAX_S}"),
    ((1, 1, 8, 48), r"needs D in \(32, 64, 128\)"),
    ((1, 1, 8.0, 64), "must be integers"),
    ((1, 1, 8), r"shape must be \(B, H, S, D\)"),
])
def test_forward_device_refuses_bad_sizes_before_any_launch(monkeypatch, shape, rule):
    """The device-pointer entry checks the same rules as attention() (they reached C and came back as
    cudaErrorInvalidValue); past the variant table the library is never loaded."""
    refuse_loads_after_the_table(monkeypatch, "attention")
    with pytest.raises(ValueError, match=rule):
        att.forward_device("02_flash", shape, False, None, None, None, None)
    if len(shape) == 4 and "integers" not in rule:
        with pytest.raises(ValueError, match=rule.split(" \\(")[0] if "needs D" in rule else rule):
            att.workspace_bytes("02_flash", *shape)


def test_check_sizes_passes_good_sizes_through():
    assert att.check_sizes(np.int64(2), 3, att.MAX_S, 64, variant="02_flash") == (2, 3, att.MAX_S, 64)
    assert att.check_sizes(1, att.MAX_BH, 1, 48) == (1, att.MAX_BH, 1, 48)  # no variant: any D
    with pytest.raises(ValueError, match="integers"):
        att.check_sizes(True, 1, 1, 1)


# --- where no bf16 kernel runs (sm_75: a T4, or a build for compute_75) ---------------------------

def test_bf16_fallback_is_chosen_only_for_unnamed_bf16_inputs_where_03_cannot_run(monkeypatch):
    """The choice is the library's (what the build holds and what the GPU is): stand in for a T4."""
    reasons = {"03_flash_bf16": "needs sm_80: this GPU is sm_75", "05_flash_wgmma": "needs sm_90a: ..."}
    monkeypatch.setattr(att, "unsupported_reason", lambda v: reasons.get(v))
    q = np.zeros((1, 1, 4, 64), bf16)
    assert att._bf16_fallback_reason(q, None) == "needs sm_80: this GPU is sm_75"
    assert att._bf16_fallback_reason(q, "03_flash_bf16") is None  # a named variant is refused, not replaced
    assert att._bf16_fallback_reason(q.astype(np.float32), None) is None
    reasons["03_flash_bf16"] = None  # an sm_80 GPU and build: 03 runs, nothing falls back
    assert att._bf16_fallback_reason(q, None) is None


@pytest.mark.gpu
def test_bf16_default_runs_here_or_falls_back_to_float32_once(capfd):
    q, k, v = _inputs(np.random.default_rng(11), (1, 2, 67, 64), bf16)
    ref = att.reference(q, k, v)
    falls_back = att.default_bf16_variant() == "03_flash_bf16" and att.unsupported_reason("03_flash_bf16") is not None
    att._fallback_said = False
    for _ in range(2):
        out = att.attention(q, k, v)
        assert out.dtype == bf16 and att.check(out, ref, att.TOLERANCE_BF16)
    err = capfd.readouterr().err
    assert err.count("no bf16 kernel runs here") == (1 if falls_back else 0), err
