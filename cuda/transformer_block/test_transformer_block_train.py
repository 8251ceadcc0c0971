"""transformer_block's training step: the float64 numpy backward against finite differences and
torch's autograd (CPU), argument checks before any launch, the executable's --train argv and its
result line; on the GPU, every gradient of both paths against the reference on ragged shapes, the
SGD update, and outputs poisoned with NaN beforehand (train_step allocates them so)."""

from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest

from conftest import built_names, ensure_built
from harness.programs import attention as att
from harness.programs import transformer_block as tb


def _case(B, S, E, seed):
    rng = np.random.default_rng(seed)
    p = tb.make_params(E, seed=seed)
    x = rng.uniform(-1, 1, (B, S, E)).astype(np.float32)
    dout = rng.uniform(-1, 1, (B, S, E)).astype(np.float32)
    return x, p, dout


def _loss(x, p, dout, heads, causal):
    return float(np.sum(tb.reference(x, p, heads, causal) * dout))


def _numeric_grad(f, a: np.ndarray, h: float = 1e-4) -> np.ndarray:
    """Central differences of f with respect to every element of a (float64 copy, restored after)."""
    g = np.zeros(a.shape)
    flat, gf = a.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        keep = flat[i]
        flat[i] = keep + h
        up = f()
        flat[i] = keep - h
        down = f()
        flat[i] = keep
        gf[i] = (up - down) / (2 * h)
    return g


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B, S, E, H", [(1, 1, 4, 1), (2, 3, 8, 2), (1, 5, 6, 3)])
def test_reference_backward_matches_finite_differences(B, S, E, H, causal, rng):
    """The numpy backward is the derivative of the numpy forward: central differences of
    L = Σ out·dout in float64 agree to 1e-6 relative (h = 1e-4: truncation ~h² = 1e-8 times the
    third derivative, rounding ~1e-16/h = 1e-12; at h = 1e-3 a head of D = 2 reached 1.2e-6)."""
    x, p, dout = _case(B, S, E, int(rng.integers(1 << 30)))
    x64 = x.astype(np.float64)
    p64 = tb.Params(*(a.astype(np.float64) for a in (p.w_qkv, p.b_qkv, p.gamma, p.beta)))
    _, g = tb.reference_backward(x64, p64, dout, H, causal)
    f = lambda: _loss(x64, p64, dout, H, causal)  # noqa: E731 -- reads the arrays as they are perturbed
    want = {"dx": x64, "dw_qkv": p64.w_qkv, "db_qkv": p64.b_qkv, "dgamma": p64.gamma, "dbeta": p64.beta}
    for name, arr in want.items():
        num = _numeric_grad(f, arr)
        assert att.rel_error(getattr(g, name), num) <= 1e-6, name


def test_finite_difference_check_can_fail():
    """The check above tells a wrong backward apart: the causal block's dx and dW against the
    differences of the non-causal one."""
    x, p, dout = _case(2, 3, 8, 7)
    x64 = x.astype(np.float64)
    _, wrong = tb.reference_backward(x64, p, dout, 2, causal=True)
    num = _numeric_grad(lambda: _loss(x64, p, dout, 2, False), x64)
    assert att.rel_error(wrong.dx, num) > 1e-3


@pytest.mark.parametrize("causal", [False, True])
def test_reference_backward_matches_torch_autograd(causal):
    """The same gradients by torch's autograd in float64 (on the CPU), where torch is installed."""
    torch = pytest.importorskip("torch", reason="torch is not installed: the autograd comparison needs it")
    x, p, dout = _case(2, 9, 16, 3)
    out, g = tb.reference_backward(x, p, dout, 4, causal)
    tout, tg = _torch_backward(torch, x, p, dout, 4, causal)
    assert att.rel_error(out, tout) <= 1e-12
    for name, a in g.items():
        assert att.rel_error(a, tg[name]) <= 1e-10, name


def _torch_backward(torch, x, p, dout, heads, causal):
    """(out, {name: gradient}) of the block written with torch ops in float64, by autograd."""
    import torch.nn.functional as F

    t = {n: torch.tensor(np.asarray(a, np.float64), requires_grad=True)
         for n, a in (("x", x), ("w", p.w_qkv), ("b", p.b_qkv), ("g", p.gamma), ("be", p.beta))}
    B, S, E = x.shape
    D = E // heads
    qkv = t["x"] @ t["w"].T + t["b"]
    q, k, v = (qkv[..., i * E:(i + 1) * E].reshape(B, S, heads, D).transpose(1, 2) for i in range(3))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=1 / math.sqrt(D))
    y = a.transpose(1, 2).reshape(B, S, E) + t["x"]
    out = F.layer_norm(y, (E,), t["g"], t["be"], eps=tb.LN_EPS)
    grads = torch.autograd.grad(out, [t[n] for n in ("x", "w", "b", "g", "be")],
                                torch.tensor(np.asarray(dout, np.float64)))
    return out.detach().numpy(), dict(zip(tb.Grads.NAMES, (gr.numpy() for gr in grads)))


def test_train_validation():
    p = tb.make_params(64, 0)
    x = np.zeros((2, 3, 64), np.float32)
    with pytest.raises(ValueError, match="dout must have shape"):
        tb.backward(x, p, np.zeros((2, 3, 32), np.float32), heads=2)
    with pytest.raises(TypeError):
        tb.backward(x, p, np.zeros((2, 3, 64), np.float64), heads=2)
    with pytest.raises(ValueError, match="lr must be"):
        tb.train_step(x, p, x, heads=2, lr=-1.0)
    with pytest.raises(ValueError, match="lr must be"):
        tb.train_step(x, p, x, heads=2, lr=float("nan"))
    # 01_naive runs any head size forward, but trains with 06_flash_bwd: D = 8 is refused.
    with pytest.raises(ValueError, match="06_flash_bwd, which needs a head size"):
        tb.backward(x, p, x, heads=8, variant="01_naive")
    frozen = tb.make_params(64, 0)
    frozen.gamma.flags.writeable = False
    with pytest.raises(ValueError, match="gamma in place"):
        tb.train_step(x, frozen, x, heads=2, lr=0.1)


def test_train_lr_must_be_a_float32():
    """The library takes lr as a float32: 1e39 would arrive as inf (refused in C, not as this
    ValueError), 1e-50 as 0 (a step that silently updates nothing)."""
    p = tb.make_params(64, 0)
    x = np.zeros((2, 3, 64), np.float32)
    for lr in (1e39, 1e-50):
        with pytest.raises(ValueError, match="lr must be 0 or a positive float32"):
            tb.train_step(x, p, x, heads=2, lr=lr)


def test_backward_takes_read_only_params():
    """lr = 0 writes no parameter, so backward() goes through the entry point whose parameters are
    const: read-only arrays reach the library (which then runs, or says there is no GPU here)."""
    from harness.base.errors import NoGPUError

    ensure_built("transformer_block")
    x, p, dout = _case(2, 3, 64, 1)
    for a in (p.w_qkv, p.b_qkv, p.gamma, p.beta):
        a.flags.writeable = False
    try:
        out, _ = tb.backward(x, p, dout, heads=1)
    except NoGPUError:
        return
    assert np.isfinite(out).all()


def _fake_device_pointer(lib, address):
    """A device address that nothing may dereference: the calls below must refuse before any launch."""
    return lib.ffi.cast("void *", address)


def test_device_entry_points_refuse_before_any_launch():
    """The device-pointer forms check every pointer, and the workspace's 16-byte alignment, before the
    forward's first launch: a NULL dout (read only by the backward) or a misaligned workspace came back
    as whatever the first launch said (here: no GPU; on a GPU: a half-done step or a lost context)."""
    from harness.base.errors import CudaError

    ensure_built("transformer_block")
    lib = tb.library.load("transformer_block")
    B, S, E, H = 2, 3, 64, 2
    ptrs = [_fake_device_pointer(lib, 0x10000 * (i + 1)) for i in range(13)]
    x, w, b, g, be, dout, out, dx, dw, db, dg, dbe, ws = ptrs
    step = lib.transformer_block_train_step_device
    with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
        step("02_flash", B, S, E, H, 0, 0.1, x, w, b, g, be, None, out, dx, dw, db, dg, dbe, ws, None)
    with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
        step("02_flash", B, S, E, H, 0, 0.1, x, w, b, g, be, dout, out, dx, dw, db, dg, None, ws, None)
    odd = _fake_device_pointer(lib, 0x10008)
    for variant in ("02_flash", "03_flash_bf16"):
        with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
            step(variant, B, S, E, 1, 0, 0.1, x, w, b, g, be, dout, out, dx, dw, db, dg, dbe, odd, None)
        with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
            lib.transformer_block_train_forward_device(variant, B, S, E, 1, 0, x, w, b, g, be, out, odd, None)
        with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
            lib.transformer_block_backward_device(variant, B, S, E, 1, 0, x, w, g, dout, dx, dw, db, dg, dbe, odd,
                                                  None)


def test_train_attention_pairs():
    ensure_built("transformer_block")
    assert tb.train_attention("01_naive") == tb.train_attention("02_flash") == "06_flash_bwd"
    assert tb.train_attention("03_flash_bf16") == "07_flash_bwd_bf16"
    assert tb.train_attention("05_flash_wgmma") == "09_flash_bwd_ws"  # Hopper's forward, Hopper's backward
    with pytest.raises(ValueError, match="unknown"):
        tb.train_attention("04_flash_3xtf32")


def _exe():
    return ensure_built("transformer_block", "exe")


@pytest.mark.parametrize("argv", [["--lr", "0.1"], ["--train", "--lr", "-1"], ["--train", "--lr", "x"],
                                  ["--train", "--lr", "1e39"], ["--train", "--lr", "1e-50"],
                                  ["--train", "--variant", "naive", "--embed", "64", "--heads", "8"],
                                  ["--train", "--dtype", "bf16", "--heads", "8"]])
def test_executable_rejects_bad_train_argv(argv):
    p = subprocess.run([str(_exe()), *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_executable_train_names_the_size_it_refuses():
    """--train with B·H past the grid is refused for B·H, not blamed on the head size (which fits)."""
    p = subprocess.run([str(_exe()), "--train", "--batch", "70000", "--heads", "1", "--embed", "64"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--batch times --heads" in p.stderr, p.stderr


def test_parse_train_line():
    text = ("result program=transformer_block variant=02_flash dtype=f32 batch=2 seq=33 embed=128 heads=2 causal=0 "
            "ms=0.1 rel_err=1e-7 check=pass\n"
            "result program=transformer_block mode=train variant=02_flash attention=06_flash_bwd dtype=f32 batch=2 "
            "seq=33 embed=128 heads=2 causal=0 lr=0.001 ms=0.5 fwd_ms=0.1 bwd_ms=0.3 sgd_ms=0.1 fwd_pct=20.0 "
            "bwd_pct=60.0 sgd_pct=20.0 rel_err=1e-7 dbeta_err=1e-8 check=pass\n")
    df = tb.parse_output(text)
    assert list(df["mode"]) == ["forward", "train"]
    row = df.iloc[1]
    assert row["attention"] == "06_flash_bwd" and row["bwd_pct"] == 60.0
    assert tb.parse_output(text.splitlines()[0])["mode"].tolist() == ["forward"]


def test_sanitize_and_profile_cover_the_training_step():
    ensure_built("transformer_block")
    cases = tb.sanitize_args()
    assert "--train" in cases["train_f32"] and "--train" in cases["train_bf16"]
    split = cases["train_bf16_split_k"]  # N = B·S = 1200 tokens: the dW product splits K
    assert int(split[split.index("--batch") + 1]) * int(split[split.index("--seq") + 1]) >= 1024
    assert tb.TRAIN_PROFILE_ARGS[0] == "--train"


# --- GPU ----------------------------------------------------------------------------------------

# The last two have enough tokens for the bf16 dW product to split K across blocks (gemm_tc's
# split_k_count: 2 ways at N = 1200, E = 64; 5 at N = 3000, E = 128, the last split shorter and the
# last K tile ragged) on any GPU of 12 SMs or more.
SHAPES = [(2, 1, 64, 2), (2, 7, 64, 1), (1, 33, 128, 2), (3, 100, 256, 4), (2, 65, 256, 2), (1, 333, 128, 1),
          (4, 300, 64, 1), (2, 1500, 128, 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", built_names(lambda: tb.VARIANTS, "transformer_block"))
@pytest.mark.parametrize("B, S, E, H", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_match_reference(variant, B, S, E, H, causal):
    """Every gradient, each on its own, against the float64 backward (S = 1, primes and S past the
    attention tiles of 32 and 64; H = 1 and several heads)."""
    why = tb.unsupported_reason(variant)
    if why:
        pytest.skip(f"{variant}: {why}")
    ds = att.head_sizes(tb.train_attention(variant))
    if ds is not None and E // H not in ds:
        pytest.skip(f"{variant} trains with D in {ds}")
    x, p, dout = _case(B, S, E, S + E)
    out, g = tb.backward(x, p, dout, H, variant, causal)
    ref_out, ref = tb.reference_backward(x, p, dout, H, causal)
    dtype = "bf16" if att.is_bf16(variant) else "f32"
    assert att.rel_error(out, ref_out) <= tb.TOLERANCES[variant]
    for name, a in g.items():
        assert att.rel_error(a, getattr(ref, name)) <= tb.GRAD_TOLERANCES[dtype], name


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["02_flash", "03_flash_bf16"])
def test_gradients_match_torch_autograd(variant):
    """The GPU's gradients against torch's autograd in float64 (the numpy reference is checked
    against it on the CPU too), where torch is installed."""
    torch = pytest.importorskip("torch", reason="torch is not installed: the autograd comparison needs it")
    why = tb.unsupported_reason(variant)
    if why:
        pytest.skip(f"{variant}: {why}")
    x, p, dout = _case(2, 77, 128, 5)
    _, g = tb.backward(x, p, dout, 2, variant, causal=True)
    _, want = _torch_backward(torch, x, p, dout, 2, True)
    tol = tb.GRAD_TOLERANCES["bf16" if att.is_bf16(variant) else "f32"]
    for name, a in g.items():
        assert att.rel_error(a, want[name]) <= tol, name


@pytest.mark.gpu
def test_sgd_updates_in_place():
    x, p, dout = _case(2, 40, 128, 11)
    before = tb.Params(*(a.copy() for a in (p.w_qkv, p.b_qkv, p.gamma, p.beta)))
    _, g = tb.train_step(x, p, dout, 2, "02_flash", lr=0.05)
    _, ref = tb.reference_backward(x, before, dout, 2)
    for got, old, grad in ((p.w_qkv, before.w_qkv, ref.dw_qkv), (p.b_qkv, before.b_qkv, ref.db_qkv),
                           (p.gamma, before.gamma, ref.dgamma), (p.beta, before.beta, ref.dbeta)):
        assert att.rel_error(got - old, -0.05 * grad) <= tb.GRAD_TOLERANCES["f32"]
    # lr = 0 (backward) leaves the parameters alone.
    keep = p.w_qkv.copy()
    tb.backward(x, p, dout, 2, "02_flash")
    assert np.array_equal(keep, p.w_qkv)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["02_flash", "03_flash_bf16"])
def test_gradient_check_can_fail(variant):
    """The tolerances reject a gradient that misses one token of 66: dW and db against a reference
    whose last token's dout is zero."""
    why = tb.unsupported_reason(variant)
    if why:
        pytest.skip(f"{variant}: {why}")
    x, p, dout = _case(2, 33, 128, 9)
    _, g = tb.backward(x, p, dout, 2, variant)
    short = dout.copy()
    short[-1, -1] = 0
    _, ref = tb.reference_backward(x, p, short, 2)
    tol = tb.GRAD_TOLERANCES["bf16" if att.is_bf16(variant) else "f32"]
    assert att.rel_error(g.dw_qkv, ref.dw_qkv) > tol
    assert att.rel_error(g.db_qkv, ref.db_qkv) > tol


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_executable_train_checks_itself(dtype):
    argv = ["--train", "--batch", "2", "--seq", "33", "--seq", "100", "--embed", "128", "--heads", "2", "--reps", "2"]
    if dtype == "bf16":
        argv += ["--dtype", "bf16"]
    p = subprocess.run([str(_exe()), *argv], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    df = tb.parse_output(p.stdout)
    assert list(df["seq"]) == [33, 100] and (df["check"] == "pass").all() and set(df["mode"]) == {"train"}
    assert ((df["fwd_pct"] + df["bwd_pct"] + df["sgd_pct"] - 100).abs() < 0.5).all()
    assert (df["ms"] > 0).all() and (df["bwd_ms"] > 0).all()
