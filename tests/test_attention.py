"""attention: reference, twin, validation and checker on the CPU; naive and flash on the GPU.

Tolerance: ||out - ref|| / ||ref|| <= 1e-4 against the float64 reference (attention.TOLERANCE has
the arithmetic): float32 dot products of length D, exp() of the scores and sums over up to S=4097
keys give 1e-6..1e-5 on unit-scale random inputs; one skipped or doubled key tile costs 1e-2 or
more, so 1e-4 separates right from wrong with room on both sides.
"""

from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest

from conftest import poison
from harness import build, cudart
from harness.programs import attention as att


def _inputs(rng, shape):
    return tuple(rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(3))


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


def _exe():
    path = build.bin_path("attention")
    if not path.exists():
        pytest.skip(f"{path} not built (run `invoke build`)")
    return path


@pytest.mark.parametrize("argv", [[], ["1", "1", "4"], ["1", "0", "4", "32"], ["--variant", "x", "1", "1", "4", "32"],
                                  ["--variant", "02_flash", "1", "1", "4", "48"], ["300", "300", "4", "32"]])
def test_executable_rejects_bad_argv(argv):
    p = subprocess.run([str(_exe()), *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "error:" in p.stderr


# --- GPU ----------------------------------------------------------------------------------------

# (B, H) per S: B·H up to 64 where the float64 reference stays cheap, fewer heads at long S.
BH_FOR_S = {1: (4, 16), 7: (2, 32), 64: (8, 8), 100: (2, 3), 1000: (1, 4), 4097: (1, 1)}


@pytest.mark.gpu
@pytest.mark.parametrize("variant", att.VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [32, 64, 128])
@pytest.mark.parametrize("S", [1, 7, 64, 100, 1000, 4097])
def test_attention_matches_reference(variant, causal, D, S):
    B, H = BH_FOR_S[S]
    seeds = (0, 1, 2) if S <= 100 else (S,)
    for seed in seeds:
        q, k, v = _inputs(np.random.default_rng(seed), (B, H, S, D))
        out = poison(q.shape, np.float32)
        att.attention(q, k, v, causal, variant=variant, out=out)
        err = att.rel_error(out, att.reference(q, k, v, causal))
        assert err <= att.TOLERANCE, f"seed {seed}: rel err {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", att.VARIANTS)
def test_other_scale_and_naive_odd_d(variant, rng):
    q, k, v = _inputs(rng, (1, 2, 33, 32))
    out = att.attention(q, k, v, variant=variant, scale=0.5)
    assert att.check(out, att.reference(q, k, v, scale=0.5))
    if variant == "01_naive":
        q, k, v = _inputs(rng, (1, 2, 33, 5))
        assert att.check(att.attention(q, k, v, True, variant=variant), att.reference(q, k, v, True))


@pytest.mark.gpu
@pytest.mark.parametrize("S, causal", [(100, False), (4097, False), (200, True)])
def test_checker_catches_flash_that_skips_last_tile(S, causal):
    q, k, v = _inputs(np.random.default_rng(3), (1, 2, S, 64))
    ref = att.reference(q, k, v, causal)
    good = att.attention(q, k, v, causal, variant="02_flash")
    assert att.check(good, ref)
    bad = att.attention(q, k, v, causal, variant="flash_skip_last_tile")
    assert not att.check(bad, ref), f"skipping the last key tile went unnoticed (err {att.rel_error(bad, ref):.1e})"


@pytest.mark.gpu
def test_device_form_with_workspace(rng):
    shape = (2, 2, 130, 64)
    q, k, v = _inputs(rng, shape)
    ref = att.reference(q, k, v)
    for variant in att.VARIANTS:
        bufs = [cudart.DeviceBuffer.from_array(a) for a in (q, k, v)]
        o = cudart.DeviceBuffer(q.nbytes)
        o.fill_bytes(0xFF)  # NaN pattern
        n = att.workspace_bytes(variant, *shape)
        assert (n > 0) == (variant == "01_naive")
        ws = cudart.DeviceBuffer(n) if n else None
        with cudart.Stream() as s:
            att.forward_device(variant, shape, False, *bufs, o, ws, stream=s.handle)
            s.synchronize()
        got = o.to_host(np.empty(shape, np.float32))
        assert att.check(got, ref), variant
        for b in bufs + [o] + ([ws] if ws else []):
            b.close()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", att.VARIANTS)
@pytest.mark.parametrize("causal", [[], ["--causal"]])
def test_executable_checks_itself(variant, causal):
    p = subprocess.run([str(_exe()), "--variant", variant, *causal, "2", "3", "257", "64"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "check=pass" in p.stdout
