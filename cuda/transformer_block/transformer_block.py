"""transformer_block: the Stringer course's SimpleTransformer (section 4) in CUDA C.

    Q, K, V = x·Wqᵀ + bq, x·Wkᵀ + bk, x·Wvᵀ + bv        (three nn.Linear(E, E))
    A       = multi-head attention, H heads of D = E/H, scale 1/sqrt(D), naive or flash
    out     = LayerNorm(A + x)·gamma + beta             (eps 1e-5, biased variance)

x is B x S x E float32. The course's defaults are B=32, E=256 and S=100 or 1000; this program
uses H=4 heads of D=64 by default, because the flash kernel takes D in {32, 64, 128} and the
course's single head of 256 does not fit it (H=1 works with 01_naive).
Variants (the library's table): "01_naive", "02_flash" (float32 on the CUDA cores) and
"03_flash_bf16" and "05_flash_wgmma" (the block on the tensor cores: x and the weights rounded to
bf16, the projection on gemm_tc's 02_mma_sync, bf16 flash attention, FP32 LayerNorm; D in {64, 128};
05 on sm_90a only). dtype="bf16" picks the fastest of the two that runs here (bf16_variant()).
The executable build/bin/transformer_block makes its own weights from a seed and checks sampled
rows against a double-precision CPU implementation; this module checks whole outputs against
`reference` (numpy, float64).

Training: `backward(x, params, dout, ...)` runs one forward that keeps its activations and the
backward, and returns the output and the gradients (`Grads`) of L with dL/d(out) = dout;
`train_step(..., lr=...)` also applies SGD to the parameters in place. The attention trains as a
pair of the attention program (`train_attention(variant)`): the float32 block with 06_flash_bwd
(forward 02_flash, which saves the log-sum-exp), 03_flash_bf16 with 07_flash_bwd_bf16 and
05_flash_wgmma with 09_flash_bwd_ws (both bf16 rungs differentiate 03_flash_bf16's forward).
`reference_backward` is the float64 numpy backward the tests check against.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from harness import programs as _programs
from harness.calling import library, results
from harness.programs.record import Program, Tour

LN_EPS = 1e-5
PROGRAM = "transformer_block"
_F32 = np.finfo(np.float32)


# VARIANTS is the library's one table (cuda/transformer_block/transformer_block.cu), read when first asked for: never typed here.
# PROFILE_VARIANTS: every variant, profiled as separate runs and drawn side by side: naive against
# flash is the course's point, and the bf16 tensor-core block beside the float32 ones.
__getattr__ = library.table_attributes(__name__, PROGRAM, PROFILE_VARIANTS=lambda: library.read_table(PROGRAM))

# ||out - ref|| / ||ref|| against the float64 reference of the float32 inputs. float32: 1e-4, as for
# attention (its error dominates: the projections are float32 sums of E=256 terms, ~1e-6, and
# LayerNorm divides by a standard deviation of order 1). bf16: x and W rounded to bf16 give Q, K, V
# ~3e-3 relative errors, the attention output is rounded to bf16 (~1e-3) and is added to the exact x
# before LayerNorm; ~3e-3 expected, 2e-2 allowed (the executable's check uses the same numbers).
TOLERANCES = {"01_naive": 1e-4, "02_flash": 1e-4, "03_flash_bf16": 2e-2, "05_flash_wgmma": 2e-2}
DEFAULTS = {"batch": 32, "embed": 256, "heads": 4, "seqs": (100, 1000)}

# The gradients' ||g - ref|| / ||ref|| against reference_backward (float64), each gradient alone.
# float32: the attention backward's own 1e-4 (cuda/attention: P recomputed from the saved lse, sums
# of S terms) dominates; LayerNorm's backward subtracts two means from g and multiplies by rstd
# (order 1 here), and dW, db sum B·S float32 terms in tiles (~1e-6 each). bf16: Q, K, V, O and dA
# are rounded to bf16 (~4e-3 each), 07's dQ, dK, dV carry attention's 3e-2 backward tolerance, and
# dQKV, xᵀ and Wᵀ are rounded again for the tensor-core products: 5e-2 allowed.
GRAD_TOLERANCES = {"f32": 1e-4, "bf16": 5e-2}


@dataclass
class Params:
    w_qkv: np.ndarray  # 3E x E: Wq; Wk; Wv (each out x in, as nn.Linear.weight)
    b_qkv: np.ndarray  # 3E
    gamma: np.ndarray  # E
    beta: np.ndarray  # E

    @property
    def embed(self) -> int:
        return self.gamma.shape[0]


def make_params(embed: int, seed: int = 0) -> Params:
    """nn.Linear-style weights, uniform(-1/sqrt(E), 1/sqrt(E)); gamma = 1 + 0.1u, beta = 0.1u."""
    rng = np.random.default_rng(seed)
    s = 1.0 / math.sqrt(embed)
    return Params(
        w_qkv=rng.uniform(-s, s, (3 * embed, embed)).astype(np.float32),
        b_qkv=rng.uniform(-s, s, 3 * embed).astype(np.float32),
        gamma=(1 + 0.1 * rng.uniform(-1, 1, embed)).astype(np.float32),
        beta=(0.1 * rng.uniform(-1, 1, embed)).astype(np.float32),
    )


@dataclass
class Grads:
    dx: np.ndarray      # B x S x E
    dw_qkv: np.ndarray  # 3E x E
    db_qkv: np.ndarray  # 3E
    dgamma: np.ndarray  # E
    dbeta: np.ndarray   # E

    NAMES = ("dx", "dw_qkv", "db_qkv", "dgamma", "dbeta")

    def items(self):
        return [(n, getattr(self, n)) for n in self.NAMES]


def validate(x, params: Params, heads: int, variant: str):
    variant = _programs.module("attention").canonical_variant(variant, allow_test=False)
    if variant not in library.read_table(PROGRAM):  # attention's variants that this block does not run
        library.table_index(PROGRAM, "variant", variant)
    x = library.check_array(x, "x", np.float32, ndim=3)
    B, S, E = x.shape
    if min(x.shape) <= 0:
        raise ValueError(f"x must have positive B, S, E, got {x.shape}")
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads <= 0:
        raise ValueError(f"heads must be a positive integer, got {heads!r}")
    if E % heads:
        raise ValueError(f"E={E} is not a multiple of heads={heads}")
    ds = _programs.module("attention").head_sizes(variant)
    if ds is not None and E // heads not in ds:
        raise ValueError(f"{variant} needs a head size E/heads in {ds}, got {E // heads}")
    # The block's attention runs on B x heads x S x E/heads: its limits are attention's, checked by its rules.
    _programs.module("attention").check_sizes(B, heads, S, E // heads, names="B x heads x S x E/heads")
    w = library.check_array(params.w_qkv, "w_qkv", np.float32, shape=(3 * E, E))
    b = library.check_array(params.b_qkv, "b_qkv", np.float32, shape=(3 * E,))
    g = library.check_array(params.gamma, "gamma", np.float32, shape=(E,))
    be = library.check_array(params.beta, "beta", np.float32, shape=(E,))
    return x, Params(w, b, g, be), int(heads), variant


def forward(x: np.ndarray, params: Params, heads: int = 4, variant: str = "02_flash",
            causal: bool = False, dtype: str | None = None) -> np.ndarray:
    """The block on the GPU (host-pointer entry point); returns B x S x E float32.
    dtype="bf16" is the tensor-core block (bf16_variant()); "f32" keeps `variant`. A variant that
    cannot run here (05_flash_wgmma off sm_90a) raises ValueError with the reason before any launch."""
    if dtype == "bf16" and bf16_variant() is None:
        # The bf16 block's rules (its head sizes) first, as on a GPU that runs it; then the fallback.
        validate(x, params, heads, BF16_RULES)
    variant = _variant_for(variant, dtype)
    x, p, heads, variant = validate(x, params, heads, variant)
    why = unsupported_reason(variant)
    if why:
        raise ValueError(f"variant {variant!r} cannot run here: {why}")
    B, S, E = x.shape
    out = np.empty_like(x)
    lib = library.load("transformer_block")
    lib.transformer_block_forward(lib.ffi.new("char[]", variant.encode()), B, S, E, heads, int(bool(causal)), x,
                                  p.w_qkv, p.b_qkv, p.gamma, p.beta, out)
    return out


def train_attention(variant: str) -> str:
    """The attention program's training pair the block trains with for `variant` (06_flash_bwd for
    the float32 variants, 07_flash_bwd_bf16 for 03_flash_bf16, 09_flash_bwd_ws for 05_flash_wgmma):
    the library's answer."""
    v = _programs.module("attention").canonical_variant(variant, allow_test=False)
    lib = library.load("transformer_block")
    r = lib.transformer_block_train_attention(lib.ffi.new("char[]", v.encode()))
    if r == lib.ffi.NULL:
        library.table_index(PROGRAM, "variant", v)  # the one-line "unknown variant" error
    return lib.ffi.string(r).decode()


def train_step(x: np.ndarray, params: Params, dout: np.ndarray, heads: int = 4, variant: str = "02_flash",
               causal: bool = False, lr: float = 0.0, dtype: str | None = None) -> tuple[np.ndarray, Grads]:
    """One training step on the GPU: the forward (keeping its activations), the backward of
    L with dL/d(out) = dout, and with lr > 0 SGD on params' arrays in place (p -= lr·grad, after every
    gradient is computed from the parameters as given). Returns (out, Grads). Every argument is
    checked before any launch; the outputs start as NaN, so an element the library left unwritten shows."""
    if dtype == "bf16" and bf16_variant() is None:
        validate(x, params, heads, BF16_RULES)
    variant = _variant_for(variant, dtype)
    x, p, heads, variant = validate(x, params, heads, variant)
    B, S, E = x.shape
    ds = _programs.module("attention").head_sizes(train_attention(variant))
    if ds is not None and E // heads not in ds:
        raise ValueError(f"{variant} trains with {train_attention(variant)}, which needs a head size E/heads in "
                         f"{ds}, got {E // heads}")
    dout = library.check_array(dout, "dout", np.float32, shape=x.shape)
    if isinstance(lr, bool) or not isinstance(lr, (int, float, np.floating)) or not math.isfinite(lr) or lr < 0:
        raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
    # The library takes lr as a float32: past its largest it would arrive as inf, below its smallest
    # positive as 0 (no update while the caller asked for one).
    with np.errstate(over="ignore", under="ignore"):
        lr32 = np.float32(lr)
    if not np.isfinite(lr32) or (lr > 0 and lr32 == 0):
        raise ValueError(f"lr must be 0 or a positive float32 ({_F32.smallest_subnormal:g} to {_F32.max:g}), "
                         f"got {lr!r}")
    if lr > 0:
        for name, a in (("w_qkv", p.w_qkv), ("b_qkv", p.b_qkv), ("gamma", p.gamma), ("beta", p.beta)):
            if not a.flags.writeable:
                raise ValueError(f"train_step with lr > 0 updates {name} in place: it must be writable")
    why = unsupported_reason(variant)
    if why:
        raise ValueError(f"variant {variant!r} cannot run here: {why}")
    out = np.full_like(x, np.nan)
    g = Grads(*(np.full(shape, np.nan, np.float32) for shape in (x.shape, (3 * E, E), (3 * E,), (E,), (E,))))
    lib = library.load("transformer_block")
    name = lib.ffi.new("char[]", variant.encode())
    if lr > 0:
        lib.transformer_block_train_step(name, B, S, E, heads, int(bool(causal)), float(lr), x, p.w_qkv, p.b_qkv,
                                         p.gamma, p.beta, dout, out, g.dx, g.dw_qkv, g.db_qkv, g.dgamma, g.dbeta)
    else:
        # The entry point whose parameters are const: read-only arrays pass (train_step's are written).
        lib.transformer_block_backward(name, B, S, E, heads, int(bool(causal)), x, p.w_qkv, p.b_qkv, p.gamma,
                                       p.beta, dout, out, g.dx, g.dw_qkv, g.db_qkv, g.dgamma, g.dbeta)
    return out, g


def backward(x: np.ndarray, params: Params, dout: np.ndarray, heads: int = 4, variant: str = "02_flash",
             causal: bool = False, dtype: str | None = None) -> tuple[np.ndarray, Grads]:
    """The block's forward and backward on the GPU (train_step without the update): (out, Grads)."""
    return train_step(x, params, dout, heads, variant, causal, 0.0, dtype)


def reference(x, params: Params, heads: int = 4, causal: bool = False) -> np.ndarray:
    """numpy float64, vectorised: the definition above."""
    x64 = np.asarray(x, dtype=np.float64)
    B, S, E = x64.shape
    D = E // heads
    w = params.w_qkv.astype(np.float64)
    b = params.b_qkv.astype(np.float64)
    qkv = x64 @ w.T + b  # B x S x 3E

    def heads_of(t):  # B x S x E -> B x H x S x D
        return t.reshape(B, S, heads, D).transpose(0, 2, 1, 3)

    q, k, v = (heads_of(qkv[..., i * E:(i + 1) * E]) for i in range(3))
    a = _programs.module("attention").reference(q, k, v, causal=causal, scale=1.0 / math.sqrt(D))
    y = a.transpose(0, 2, 1, 3).reshape(B, S, E) + x64
    mean = y.mean(axis=-1, keepdims=True)
    var = ((y - mean) ** 2).mean(axis=-1, keepdims=True)
    return (y - mean) / np.sqrt(var + LN_EPS) * params.gamma.astype(np.float64) + params.beta.astype(np.float64)


def reference_backward(x, params: Params, dout, heads: int = 4, causal: bool = False) -> tuple[np.ndarray, Grads]:
    """(out, Grads) in float64 numpy, the chain the kernels follow: LayerNorm's backward (dgamma,
    dbeta, dy), the attention's (attention.reference_backward), the heads merged into dQKV, then the
    projection's dW = dQKVᵀ·x, db = Σ dQKV and dx = dy + dQKV·W."""
    x64 = np.asarray(x, dtype=np.float64)
    do = np.asarray(dout, dtype=np.float64)
    B, S, E = x64.shape
    D = E // heads
    att = _programs.module("attention")
    w = params.w_qkv.astype(np.float64)
    gamma = params.gamma.astype(np.float64)
    qkv = x64 @ w.T + params.b_qkv.astype(np.float64)

    def heads_of(t):  # B x S x E -> B x H x S x D
        return t.reshape(B, S, heads, D).transpose(0, 2, 1, 3)

    def merged(t):  # B x H x S x D -> B x S x E
        return t.transpose(0, 2, 1, 3).reshape(B, S, E)

    q, k, v = (heads_of(qkv[..., i * E:(i + 1) * E]) for i in range(3))
    scale = 1.0 / math.sqrt(D)
    y = merged(att.reference(q, k, v, causal=causal, scale=scale)) + x64
    mean = y.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((y - mean) ** 2).mean(axis=-1, keepdims=True) + LN_EPS)
    xhat = (y - mean) * rstd
    out = xhat * gamma + params.beta.astype(np.float64)
    g = do * gamma
    dy = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    dq, dk, dv = att.reference_backward(q, k, v, heads_of(dy), causal=causal, scale=scale)
    dqkv = np.concatenate([merged(t) for t in (dq, dk, dv)], axis=-1).reshape(B * S, 3 * E)
    grads = Grads(dx=dy + (dqkv @ w).reshape(B, S, E), dw_qkv=dqkv.T @ x64.reshape(B * S, E),
                  db_qkv=dqkv.sum(axis=0), dgamma=(do * xhat).sum(axis=(0, 1)), dbeta=do.sum(axis=(0, 1)))
    return out, grads


def loop_reference(x, params: Params, heads: int = 4, causal: bool = False) -> np.ndarray:
    """The same block as plain Python loops over every index (tiny sizes only): the check on
    `reference`'s reshapes and transposes."""
    x = np.asarray(x, dtype=np.float64)
    B, S, E = x.shape
    D = E // heads
    w, bias = params.w_qkv.astype(np.float64), params.b_qkv.astype(np.float64)
    out = np.zeros((B, S, E))
    for b in range(B):
        proj = [[[bias[which * E + o] + sum(x[b, s, i] * w[which * E + o, i] for i in range(E)) for o in range(E)]
                 for s in range(S)] for which in range(3)]
        q, k, v = proj
        for s in range(S):
            y = [0.0] * E
            for h in range(heads):
                keys = range(s + 1) if causal else range(S)
                scores = [sum(q[s][h * D + d] * k[j][h * D + d] for d in range(D)) / math.sqrt(D) for j in keys]
                mx = max(scores)
                e = [math.exp(t - mx) for t in scores]
                tot = sum(e)
                for d in range(D):
                    y[h * D + d] = sum(e[n] * v[j][h * D + d] for n, j in enumerate(keys)) / tot
            y = [y[i] + x[b, s, i] for i in range(E)]
            mean = sum(y) / E
            var = sum((t - mean) ** 2 for t in y) / E
            for i in range(E):
                out[b, s, i] = (y[i] - mean) / math.sqrt(var + LN_EPS) * params.gamma[i] + params.beta[i]
    return out


# --- the executable ---------------------------------------------------------------------------

def parse_output(text: str):
    """build/bin/transformer_block's result lines as a DataFrame (numbers converted). A column `mode`
    says which kind each line is: "forward" (the block's forward; its lines carry no mode) or
    "train" (--train: the step's ms and the phases' fwd_/bwd_/sgd_ ms and pct)."""
    df = results.parse_output(text, "transformer_block")
    df["mode"] = df["mode"].fillna("forward") if "mode" in df else "forward"
    return df


# The float32 block that dtype="bf16" runs where no bf16 path does (a T4, a build for sm_75).
BF16_FALLBACK = "02_flash"
# ...after checking the inputs by the rules of the bf16 block it stands in for (03's head sizes).
BF16_RULES = "03_flash_bf16"
_fallback_said = False


def _variant_for(variant: str, dtype: str | None) -> str:
    global _fallback_said
    if dtype not in (None, "f32", "bf16"):
        raise ValueError(f"dtype must be 'f32' or 'bf16', got {dtype!r}")
    if dtype != "bf16":
        return variant
    chosen = bf16_variant()
    if chosen is None:
        if not _fallback_said:  # once per process: a loop over sizes says it once
            _fallback_said = True
            print(f"note: dtype='bf16': no bf16 path runs here ({unsupported_reason('03_flash_bf16')}); "
                  f"running the float32 block ({BF16_FALLBACK})", file=sys.stderr)
        return BF16_FALLBACK
    return chosen


def bf16_variant() -> str | None:
    """The bf16 block's attention here: 05_flash_wgmma on a Hopper GPU with an sm_90a build, else
    03_flash_bf16 where it runs (sm_80 and newer), else None (the library's transformer_block_bf16_variant)."""
    lib = library.load("transformer_block")
    v = lib.transformer_block_bf16_variant()
    return None if v == lib.ffi.NULL else lib.ffi.string(v).decode()


def unsupported_reason(variant: str) -> str | None:
    """None when the block runs `variant` on this build and GPU, else why not: the bf16 path needs sm_80
    (03, and gemm_tc's 02_mma_sync for the projection), 05_flash_wgmma sm_90a. Nothing is launched."""
    v = _programs.module("attention").canonical_variant(variant, allow_test=False)
    lib = library.load("transformer_block")
    why = lib.transformer_block_unsupported_reason(lib.ffi.new("char[]", v.encode()))
    return None if why == lib.ffi.NULL else lib.ffi.string(why).decode()


def run(variant: str = "02_flash", batch: int | None = None, seqs=(), embed: int | None = None,
        heads: int | None = None, causal: bool = False, seed: int = 0, reps: int = 5, timeout: float = 600,
        dtype: str | None = None, train: bool = False, lr: float | None = None):
    """Run build/bin/transformer_block and parse its result lines (one per sequence length); train=True
    times training steps (--train, with --lr when given) instead of the forward."""
    variant = _variant_for(variant, dtype)
    args = ["--variant", _programs.module("attention").canonical_variant(variant, allow_test=False), "--reps", str(reps)]
    if train:
        args.append("--train")
        if lr is not None:
            args += ["--lr", repr(float(lr))]
    if seed:
        args += ["--seed", str(seed)]
    if batch is not None:
        args += ["--batch", str(batch)]
    if embed is not None:
        args += ["--embed", str(embed)]
    if heads is not None:
        args += ["--heads", str(heads)]
    for s in seqs:
        args += ["--seq", str(s)]
    if causal:
        args.append("--causal")
    return results.run("transformer_block", *args, timeout=timeout)


# --- hooks for `invoke profile` and `invoke sanitize` (see harness/profiling/profile.py) ---
# PROFILE_VARIANTS (every variant) comes from the module's __getattr__ above.


def profile_args(variant: str | None = None) -> list[str]:
    """The course's B=32, E=256 at S=1000. A training step is profiled with the executable's own
    arguments: `invoke profile transformer_block --tool nsys --variant 02_flash -- --train --seq 1000
    --reps 1` (TRAIN_PROFILE_ARGS; --variant 03_flash_bf16 for the bf16 step)."""
    return ["--variant", variant or "02_flash", "--seq", "1000", "--reps", "1"]


# The executable's arguments for profiling one training step (see profile_args): the course's sizes.
TRAIN_PROFILE_ARGS = ("--train", "--seq", "1000", "--reps", "1")


def sanitize_args() -> dict[str, list[str]]:
    """Small and ragged: the sanitizers slow kernels down a hundredfold. Every forward variant, and a
    training step of each dtype (S = 33: a ragged tile for every kernel of the backward)."""
    small = ["--batch", "2", "--seq", "33", "--embed", "128", "--heads", "2", "--reps", "1"]
    cases = {v: ["--variant", v, *small] for v in library.read_table(PROGRAM)}
    cases["train_f32"] = ["--variant", "02_flash", "--train", "--causal", *small]
    cases["train_bf16"] = ["--dtype", "bf16", "--train", *small]
    # Enough tokens (N = 1200) for the bf16 dW product to split K across blocks (two ways).
    cases["train_bf16_split_k"] = ["--dtype", "bf16", "--train", "--batch", "4", "--seq", "300", "--embed", "64",
                                   "--heads", "1", "--reps", "1"]
    return cases


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name='transformer_block',
    summary='kernels put together: QKV, attention, residual, LayerNorm',
    follows='intro course §4',
    order=90,
    uses=("attention",),
    variants=True,
    profile_variants=lambda: library.read_table(PROGRAM),
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    unsupported_reason=unsupported_reason,
    run=run,
    parse_output=parse_output,
    reference=reference,
    tour=Tour('naive against flash attention inside a transformer block: kernel time shares', drawn=('profiles/transformer_block/*.png',)),
)
