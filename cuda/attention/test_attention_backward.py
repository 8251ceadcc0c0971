"""attention's backward: the float64 reference on the CPU (finite differences, an independent
formulation), argument checks before any launch; the backward rungs on the GPU against torch's
autograd in float64 (the numpy reference where torch is missing).

Tolerances by dtype, ||grad - ref|| / ||ref|| for each of dQ, dK and dV
(attention.BACKWARD_TOLERANCES has the arithmetic): float32 1e-4, the forward's bar (the same dot
products, exp() and sums of up to S terms); bfloat16 3e-2 against the gradients of the bf16-rounded
inputs (P and dS are rounded to bf16 before their products, the gradients on the way out, and Di
inherits the bf16 O's rounding: ~3-6e-3). Dropping the Di term of dS costs ~0.1 on these inputs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import built_names, ensure_built
from fault_build import use_fault_library
from harness.calling import runner
from harness.programs import attention as att

bf16 = att.bfloat16


def _arrays(rng, shape, dtype=np.float32, n=4):
    return tuple(rng.uniform(-1, 1, shape).astype(dtype) for _ in range(n))


def _loss(q, k, v, do, causal):
    """The scalar whose gradients the backward computes: Σ O ∘ dO."""
    return float(np.sum(att.reference(q, k, v, causal) * do))


# --- CPU ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("S, D", [(1, 3), (4, 2), (5, 3)])
def test_reference_backward_matches_finite_differences(S, D, causal, rng):
    """Central differences of Σ O ∘ dO in float64, element by element (error O(h²) ~ 1e-10)."""
    q, k, v, do = (a.astype(np.float64) for a in _arrays(rng, (1, 2, S, D)))
    grads = att.reference_backward(q, k, v, do, causal)
    h = 1e-5
    for which, g in enumerate(grads):
        x = [q, k, v][which]
        fd = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            xp, xm = x.copy(), x.copy()
            xp[idx] += h
            xm[idx] -= h
            args_p = [q, k, v]
            args_m = [q, k, v]
            args_p[which], args_m[which] = xp, xm
            fd[idx] = (_loss(*args_p, do, causal) - _loss(*args_m, do, causal)) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8, err_msg="dQ dK dV"[3 * which:3 * which + 2])


@pytest.mark.parametrize("causal", [False, True])
def test_reference_backward_matches_the_softmax_jacobian(causal, rng):
    """An independent formulation: per query row, dS = J·dP with J = diag(p) − p·pᵀ the softmax's
    Jacobian written out as a matrix (no Di), dQ, dK by explicit loops over the scores."""
    B, H, S, D = 1, 2, 6, 4
    q, k, v, do = (a.astype(np.float64) for a in _arrays(rng, (B, H, S, D)))
    scale = 0.7
    dq, dk, dv = att.reference_backward(q, k, v, do, causal, scale=scale)
    for b in range(B):
        for hh in range(H):
            wq, wk, wv = np.zeros((S, D)), np.zeros((S, D)), np.zeros((S, D))
            for i in range(S):
                keys = np.arange(i + 1 if causal else S)
                s = np.array([scale * q[b, hh, i] @ k[b, hh, j] for j in keys])
                p = np.exp(s - s.max())
                p /= p.sum()
                jac = np.diag(p) - np.outer(p, p)
                dp = np.array([do[b, hh, i] @ v[b, hh, j] for j in keys])
                ds = jac @ dp
                for n, j in enumerate(keys):
                    wv[j] += p[n] * do[b, hh, i]
                    wq[i] += scale * ds[n] * k[b, hh, j]
                    wk[j] += scale * ds[n] * q[b, hh, i]
            np.testing.assert_allclose(dq[b, hh], wq, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(dk[b, hh], wk, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(dv[b, hh], wv, rtol=1e-10, atol=1e-12)


def _no_di(q, k, v, do, causal):
    """The fault build's wrong backward, in numpy: dS = P ∘ dP (the Di term dropped)."""
    q64, k64, v64, do64 = (np.asarray(a, np.float64) for a in (q, k, v, do))
    S, D = q64.shape[-2:]
    s = q64 @ np.swapaxes(k64, -1, -2) / math.sqrt(D)
    if causal:
        s = np.where(np.triu(np.ones((S, S), bool), 1), -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ds = p * (do64 @ np.swapaxes(v64, -1, -2))
    return ds @ k64 / math.sqrt(D), np.swapaxes(ds, -1, -2) @ q64 / math.sqrt(D)


@pytest.mark.parametrize("causal", [False, True])
def test_checker_rejects_a_backward_without_di(causal, rng):
    """Dropping Di costs ~0.1 at these inputs (unit-range uniform: the scores are small, P near
    uniform, and Di, the dP row's P-weighted mean, small beside dP's spread): over 3x the bf16
    tolerance, 1000x the float32 one."""
    q, k, v, do = _arrays(rng, (1, 2, 100, 64))
    dq, dk, _ = att.reference_backward(q, k, v, do, causal)
    wq, wk = _no_di(q, k, v, do, causal)
    for got, ref in ((wq, dq), (wk, dk)):
        assert att.rel_error(got, ref) > 3 * att.BACKWARD_TOLERANCE_BF16


def test_backward_variants_come_from_the_table():
    ensure_built("attention")
    n = len(att.BACKWARD_VARIANTS)
    assert set(att.BACKWARD_VARIANTS) <= set(att.VARIANTS) and n == 4
    assert [att.is_bf16(v) for v in att.BACKWARD_VARIANTS] == [False, True, True, True]
    lib = att.library.load("attention")
    assert all(att.is_bf16(v) == (lib.attention_variant_is_bf16(v) == 1) for v in att.VARIANTS)
    # Numbered after the forward rungs.
    assert list(att.VARIANTS[-n:]) == list(att.BACKWARD_VARIANTS)
    assert not any(att.is_backward(v) for v in att.VARIANTS[:-n])


def _good(shape=(1, 2, 8, 64), dtype=np.float32):
    x = np.zeros(shape, dtype)
    return dict(q=x, k=x, v=x, o=x, do=x, lse=np.zeros(shape[:3], np.float32))


@pytest.mark.parametrize("change, exc, match", [
    (dict(variant="02_flash"), ValueError, "no backward rung"),
    (dict(variant="nosuch"), ValueError, "unknown variant"),
    (dict(lse=np.zeros((1, 2, 9), np.float32)), ValueError, "lse must have shape"),
    (dict(lse=np.zeros((1, 2, 8), np.float64)), TypeError, "lse must be float32"),
    (dict(o=np.zeros((1, 2, 8, 32), np.float32)), ValueError, "o must have shape"),
    (dict(do=np.zeros((1, 2, 8, 64), np.float64)), TypeError, "do must be float32"),
    (dict(scale=-1.0), ValueError, "scale > 0"),
    (dict(variant="07_flash_bwd_bf16"), TypeError, "must be bfloat16"),
    (dict(out=(np.zeros((1, 2, 8, 64), np.float32),)), TypeError, "out must be a tuple"),
])
def test_backward_refuses_bad_arguments_before_any_launch(change, exc, match, monkeypatch):
    ensure_built("attention")
    lib = att.library.load("attention")

    def launched(*a):
        raise AssertionError("launched")

    monkeypatch.setattr(att.library, "load", lambda *a, **k: _Guard(lib, launched))
    args = {**_good(), **change}
    with pytest.raises(exc, match=match):
        att.backward(**args)


class _Guard:
    """The library with its backward entry points replaced by a tripwire."""

    def __init__(self, lib, trip):
        self._lib, self._trip = lib, trip

    def __getattr__(self, name):
        if name.startswith("attention_backward") and "workspace" not in name:
            return self._trip
        return getattr(self._lib, name)


def test_forward_refuses_lse_where_it_is_not_saved():
    ensure_built("attention")
    x = np.zeros((1, 1, 8, 64), np.float32)
    with pytest.raises(ValueError, match="does not save the log-sum-exp"):
        att.attention(x, x, x, variant="04_flash_3xtf32", lse=np.zeros((1, 1, 8), np.float32))
    with pytest.raises(ValueError, match="lse must have shape"):
        att.attention(x, x, x, variant="02_flash", lse=np.zeros((1, 1, 7), np.float32))


def test_backward_bench_cases_and_ceilings():
    full = [c for c in att.bench_cases(quick=False) if att.is_backward(c.variant)]
    assert {c.variant for c in full} == {v for v in att.BACKWARD_VARIANTS if att.unsupported_reason(v) is None}
    # Each bf16 rung at the same shapes (07 and 08 side by side when both run).
    shapes = {v: {(c.size, c.ceiling) for c in full if c.variant == v} for v in {c.variant for c in full}}
    bf = [v for v in shapes if att.is_bf16(v)]
    assert bf and all(shapes[v] == shapes[bf[0]] for v in bf)
    assert {c.ceiling for c in full} <= set(att.ceilings())
    assert all(c.amount == att.backward_flops(4, 16, int(c.size.split("xS")[1].split("x")[0]),
                                              int(c.size.split("xD")[1].split("-")[0]), "causal" in c.size)
               for c in full)
    assert att.backward_flops(1, 1, 4, 2, causal=True) == 2.5 * att.flops(1, 1, 4, 2, causal=True)


def test_sanitize_covers_the_backward_rungs():
    cases = att.sanitize_args()
    for v in att.BACKWARD_VARIANTS:
        runs = [a for a in cases.values() if a[:2] == ["--variant", v]]
        assert any("--causal" in a for a in runs) and any(a[-1] == "128" for a in runs), v


@pytest.mark.parametrize("variant", ["08_flash_bwd_wgmma", "09_flash_bwd_ws"])
def test_wgmma_backward_refused_with_the_reason_off_sm90a(variant):
    """Where an sm_90a backward rung cannot run (no GPU, not Hopper, a build without sm_90a) the
    library says why, backward() raises it before any launch, and the executable exits 2 with it."""
    ensure_built("attention")
    wg = [v for v in att.BACKWARD_VARIANTS if att.is_bf16(v) and v != "07_flash_bwd_bf16"]
    assert wg == ["08_flash_bwd_wgmma", "09_flash_bwd_ws"]
    why = att.unsupported_reason(variant)
    if why is None:
        pytest.skip(f"this GPU runs {variant}")
    assert why.startswith("needs sm_90a") and why == att.unsupported_reason("05_flash_wgmma")
    assert att.head_sizes(variant) == att.TC_D
    with pytest.raises(ValueError, match="cannot run here: needs sm_90a"):
        att.backward(**_good(dtype=bf16), variant=variant)
    ensure_built("attention", "exe")
    res = runner.run("attention", "--variant", variant, "1", "1", "8", "64", check=False)
    assert res.returncode == 2 and "needs sm_90a" in res.stderr, res.stderr


@pytest.mark.parametrize("variant", ["08_flash_bwd_wgmma", "09_flash_bwd_ws"])
def test_wgmma_backward_refuses_a_head_size_before_any_launch(monkeypatch, variant):
    """08 and 09 take D = 64 or 128 only (their tiles are 64-column TMA boxes): D = 32 is refused in Python."""
    ensure_built("attention")
    lib = att.library.load("attention")

    def launched(*a):
        raise AssertionError("launched")

    monkeypatch.setattr(att.library, "load", lambda *a, **k: _Guard(lib, launched))
    with pytest.raises(ValueError, match="D"):
        att.backward(**_good((1, 2, 8, 32), bf16), variant=variant)


# --- GPU ----------------------------------------------------------------------------------------

def _skip_unless_runs(variant):
    why = att.unsupported_reason(variant)
    if why:
        pytest.skip(f"{variant}: {why}")


def _torch_grads(q, k, v, do, causal):
    """(dQ, dK, dV) by torch's autograd in float64 on the CPU (the math backend), or by the numpy
    reference where torch is not installed."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return att.reference_backward(q, k, v, do, causal)
    t = [torch.tensor(np.asarray(a, np.float64), requires_grad=i < 3) for i, a in enumerate((q, k, v, do))]
    out = F.scaled_dot_product_attention(t[0], t[1], t[2], is_causal=causal)
    return tuple(g.numpy() for g in torch.autograd.grad(out, t[:3], t[3]))


# (B, H) per S, tile edges for every rung: 1 row; one past 32 and 64 (a ragged second tile); one
# short of two 64-row tiles; one past 128 (09's block of keys); long, ragged.
BH_FOR_S = {1: (3, 2), 33: (2, 3), 65: (2, 2), 127: (1, 3), 129: (1, 2), 1000: (1, 2), 1537: (1, 1)}


def _run_backward(variant, shape, causal, seed):
    """Forward (with lse) and backward of `variant` on random inputs of `shape`, into NaN-poisoned
    outputs; returns the inputs (as the kernel saw them) and the three gradients."""
    dt = att.dtype_of(variant)
    q, k, v, do = _arrays(np.random.default_rng(seed), shape, dt)
    B, H, S, _ = shape
    lse = np.full((B, H, S), np.nan, np.float32)
    o = att.attention(q, k, v, causal, variant=variant, out=np.full(shape, np.nan, dt), lse=lse)
    assert np.isfinite(lse).all()
    out = tuple(np.full(shape, np.nan, dt) for _ in range(3))
    att.backward(q, k, v, o, do, lse, causal, variant=variant, out=out)
    return (q, k, v, do), out


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: att.BACKWARD_VARIANTS, "attention"))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [32, 64, 128])
@pytest.mark.parametrize("S", sorted(BH_FOR_S))
def test_backward_matches_autograd(variant, causal, D, S):
    _skip_unless_runs(variant)
    if D not in att.head_sizes(variant):
        pytest.skip(f"{variant} takes D in {att.head_sizes(variant)}")
    B, H = BH_FOR_S[S]
    tol = att.BACKWARD_TOLERANCES["bfloat16" if att.is_bf16(variant) else "float32"]
    for seed in ((0, 1) if S <= 127 else (S,)):
        ins, got = _run_backward(variant, (B, H, S, D), causal, seed)
        want = _torch_grads(*ins, causal)
        for name, g, w in zip(("dQ", "dK", "dV"), got, want):
            if S == 1 and name != "dV":
                # One key: P = 1 and Di = dO·O = dP, so dS = 0 and dQ = dK = 0 exactly; the kernel's
                # are dP − Di rounded (~1e-7 of dV's size in float32): relative to dV's norm then.
                err = np.linalg.norm(np.asarray(g, np.float64) - w) / np.linalg.norm(want[2])
            else:
                err = att.rel_error(g, w)
            assert err <= tol, f"seed {seed}: {name} rel err {err:.2e}"


def _directional_errors(forward, ins, grads, causal, directions=6, seed=0):
    """For random directions u of q, k and v (one at a time): |(L(x + hu) - L(x - hu)) - <g, 2hu>| over
    |<g, 2hu>|, with L = sum(O * dO) and O = forward(q, k, v, causal). The perturbation is taken as the
    float32 inputs actually hold it, so input rounding does not count against the gradient."""
    rng = np.random.default_rng(seed)
    q, k, v, do = ins
    errs = []
    for which in range(3):
        for _ in range(directions):
            x = [q, k, v][which]
            u = rng.choice(np.array([-1.0, 1.0]), x.shape) * rng.uniform(0.5, 1.0, x.shape)
            xp, xm = (x + 1e-2 * u).astype(x.dtype), (x - 1e-2 * u).astype(x.dtype)
            loss = []
            for xs in (xp, xm):
                args = [q, k, v]
                args[which] = xs
                o = forward(*args, causal)
                loss.append(float(np.sum(np.asarray(o, np.float64) * np.asarray(do, np.float64))))
            want = float(np.sum(np.asarray(grads[which], np.float64) * (np.asarray(xp, np.float64) - xm)))
            errs.append(abs((loss[0] - loss[1]) - want) / abs(want))
    return np.array(errs)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("S", [5, 33, 70])  # S = 1 has dQ = dK = 0 exactly: no direction to compare along
def test_fp32_backward_matches_finite_differences_of_its_own_forward(S, causal):
    """The FP32 rung's gradients against central differences of the lab's FP32 forward on the GPU,
    along random directions: no reference implementation in between. And the same comparison rejects a
    gradient that is a little wrong (one row of dK dropped), so it can fail."""
    variant = "06_flash_bwd"
    _skip_unless_runs(variant)
    D = min(d for d in att.head_sizes(variant))
    ins, got = _run_backward(variant, (1, 2, S, D), causal, seed=S)
    def forward(q, k, v, causal):
        return att.attention(q, k, v, causal, variant=variant, out=np.full(q.shape, np.nan, q.dtype))

    errs = _directional_errors(forward, ins, got, causal)
    assert errs.max() < FD_TOLERANCE, errs
    assert _directional_errors(forward, ins, _one_key_dropped(got), causal).max() > FD_WRONG


FD_TOLERANCE, FD_WRONG = 2e-3, 2e-2


def _one_key_dropped(grads):
    """The gradients with key 0's dK row zeroed: every query attends key 0, causal or not."""
    dk = np.array(grads[1])
    dk[:, :, 0, :] = 0.0
    return grads[0], dk, grads[2]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("S", [5, 33])
def test_the_finite_difference_check_passes_exact_gradients_and_fails_a_dropped_key(S, causal):
    """The GPU test's comparison on the CPU: a float32 forward (the float64 reference, rounded) with the
    exact gradients passes under FD_TOLERANCE, and the same gradients with one key's dK dropped fail
    above FD_WRONG, so the tolerance sits between float32 noise and a real mistake."""
    ins = _arrays(np.random.default_rng(S), (1, 2, S, 32), np.float32)

    def forward(q, k, v, causal):
        return att.reference(q, k, v, causal).astype(np.float32)

    exact = att.reference_backward(*(np.asarray(a, np.float64) for a in ins), causal)
    assert _directional_errors(forward, ins, exact, causal).max() < FD_TOLERANCE
    assert _directional_errors(forward, ins, _one_key_dropped(exact), causal).max() > FD_WRONG


@pytest.mark.gpu
def test_saved_lse_is_the_log_sum_exp():
    for variant in att.BACKWARD_VARIANTS:
        _skip_unless_runs(variant)
        dt = att.dtype_of(variant)
        for causal in (False, True):
            q, k, v = _arrays(np.random.default_rng(5), (2, 1, 130, 64), dt, n=3)
            lse = np.full((2, 1, 130), np.nan, np.float32)
            att.attention(q, k, v, causal, variant=variant, lse=lse)
            s = np.asarray(q, np.float64) @ np.swapaxes(np.asarray(k, np.float64), -1, -2) / 8.0
            if causal:
                s = np.where(np.triu(np.ones((130, 130), bool), 1), -np.inf, s)
            m = s.max(-1)
            want = m + np.log(np.exp(s - m[..., None]).sum(-1))
            np.testing.assert_allclose(lse, want, rtol=0, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("bad", ["flash_bwd_no_di", "flash_bwd_bf16_no_di"])
@pytest.mark.parametrize("causal", [False, True])
def test_checker_catches_the_backward_without_di(bad, causal, monkeypatch):
    """The fault build's rungs drop Di from dS: the same comparison as above fails on dQ and dK."""
    use_fault_library(monkeypatch, "attention")
    _skip_unless_runs(bad)
    ins, got = _run_backward(bad, (1, 2, 200, 64), causal, 3)
    want = _torch_grads(*ins, causal)
    tol = att.BACKWARD_TOLERANCES["bfloat16" if att.is_bf16(bad) else "float32"]
    assert att.rel_error(got[2], want[2]) <= tol  # dV does not involve Di
    for g, w in zip(got[:2], want[:2]):
        assert att.rel_error(g, w) > tol, f"{bad} went unnoticed"


@pytest.mark.gpu
def test_an_unwritten_gradient_fails_the_check():
    """One element left as the NaN poison (what a kernel that skipped it would leave) fails."""
    variant = att.BACKWARD_VARIANTS[0]
    ins, got = _run_backward(variant, (1, 1, 65, 64), False, 2)
    want = _torch_grads(*ins, False)
    assert att.rel_error(got[1], want[1]) <= att.BACKWARD_TOLERANCE
    got[1][0, 0, 64, 3] = np.nan
    assert not att.rel_error(got[1], want[1]) <= att.BACKWARD_TOLERANCE


@pytest.mark.gpu
def test_device_form_refuses_a_forward_variant_and_a_bad_scale():
    from harness.base.errors import CudaError
    from harness.calling import cudart

    shape = (1, 1, 8, 64)
    bufs = [cudart.DeviceBuffer(int(np.prod(shape)) * 4) for _ in range(8)]
    lse = cudart.DeviceBuffer(8 * 4)
    ws = cudart.DeviceBuffer(att.backward_workspace_bytes("06_flash_bwd", *shape))
    lib = att.library.load("attention")
    with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
        lib.attention_backward_device("02_flash", *shape, 0, 0.125, *bufs[:5], lse, *bufs[5:], ws, None)
    with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
        att.backward_device("06_flash_bwd", shape, False, *bufs[:5], lse, *bufs[5:], ws, scale=0.0)
    for b in bufs + [lse, ws]:
        b.close()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: att.BACKWARD_VARIANTS, "attention"))
@pytest.mark.parametrize("D", ["64", "128"])
def test_executable_checks_the_backward(variant, D):
    _skip_unless_runs(variant)
    df = att.run("--variant", variant, "--causal", "--reps", "2", "2", "3", "300", D)
    assert df["direction"].iloc[0] == "backward" and (df["check"] == "pass").all()
