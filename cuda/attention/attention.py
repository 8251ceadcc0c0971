"""attention: softmax(scale * Q Kᵀ) V, the Stringer course's section 4, in CUDA C.

Q, K, V and the output are B x H x S x D, C-contiguous. Variants (the C library's one table,
`attention_variant_count` / `attention_variant_name`, read by library.read_table; VARIANTS is it):
    "01_naive"         float32. S = scale·Q·Kᵀ and O = P·V with the matmul program's kernels, a
                       row-wise stable softmax kernel between them; the B·H·S·S score matrix sits
                       in device memory.
    "02_flash"         float32. One fused kernel on the CUDA cores: tiles of Q, K and V in shared
                       memory, an online softmax; the scores never reach device memory. D in
                       {32, 64, 128}.
    "03_flash_bf16"    ml_dtypes.bfloat16 in and out, FP32 accumulation and softmax statistics:
                       FlashAttention-2 on the tensor cores (mma.sync m16n8k16). D in {64, 128}.
    "04_flash_3xtf32"  float32 on the tensor cores: every product as three TF32 products
                       (hi·hi + hi·lo + lo·hi), FP32 accuracy. D in {64, 128}.
    "05_flash_wgmma"   sm_90a (Hopper) only, bf16 as 03: FlashAttention-3's design. TMA loads into a
                       shared-memory ring guarded by mbarriers, wgmma from shared memory (Q·Kᵀ) and
                       with P from registers (P·V), a producer warpgroup and two consumer
                       warpgroups taking turns at the tensor cores (ping-pong), the softmax of one
                       key tile overlapping the P·V of the one before. Elsewhere
                       `unsupported_reason` says why, and nothing is launched.
    "06_flash_bwd"     the backward rungs: each names a training pair. As a forward variant it runs
    "07_flash_bwd_bf16" the forward it differentiates (02_flash; 03_flash_bf16 for 07, 08 and 09),
    "08_flash_bwd_wgmma" which also saves the log-sum-exp (attention(..., lse=)); backward() runs its
    "09_flash_bwd_ws"  backward: 06 the recurrence in FP32 on the CUDA cores (dK and dV in one pass
                       over the query tiles, dQ in a second pass over the key tiles), 07
                       FlashAttention-2's backward in bf16 on mma.sync (dK, dV in registers, dQ by
                       FP32 atomics), 08 the same pass on Hopper's wgmma and TMA (sm_90a only, as 05;
                       elsewhere `unsupported_reason` says why), 09 08's pass warp-specialised: a
                       producer warpgroup loads by TMA and adds dQ by TMA reduce, two consumer
                       warpgroups of 64 keys compute (sm_90a only). BACKWARD_VARIANTS lists them (tagged
                       "backward" by attention_variant_tags).
"naive" and "flash" are accepted for the first two, and any other name the loaded library knows
(attention_variant_is_bf16 >= 0): the tests' fault build (cuda/common/faults.cuh) knows deliberately
wrong variants, which the product library does not.
The tensor-core variants need scale > 0. Tuning-only: the library's config table (attention_config_name):
TUNING_VARIANTS, 03_flash_bf16 with its warps per block, query rows per warp, keys per tile and pipeline
stages fixed; `invoke tune attention` picks one per head size and GPU (runs_as); WGMMA_CONFIGS are
05_flash_wgmma's (key tile, stages, schedule).
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING

import numpy as np

from harness.base import sim
from harness.calling import cudart, library, results
from harness.calling.results import relative_error
from harness.programs import attention_exercises as _ex
from harness.programs.record import Exercise, Program, Tour

if TYPE_CHECKING:  # the CPU paths return DataFrames; pandas is imported where they run
    import pandas as pd

try:  # bfloat16 numpy arrays; harness/calling/library.py maps cudalab_bf16 * parameters to this dtype
    from ml_dtypes import bfloat16
except ImportError:  # pragma: no cover - ml_dtypes is a dependency; only the bf16 variant needs it
    bfloat16 = None

PROGRAM = "attention"
ALIASES = {"naive": "01_naive", "flash": "02_flash"}
# The tuned variants and the prefix of their choices in the library's config table. 03_flash_bf16's
# ("flash_bf16_..."): (warps, stages) fixed; with 32-key tiles ("k32": fewer registers, more warps per
# SM); with 32 query rows per warp ("m2": each K and V fragment read from shared memory feeds two
# MMAs); and both (room in the registers for 32 rows of O at D=128). 05_flash_wgmma's
# ("flash_wgmma_..."): schedule (plain; pp = the two consumer warpgroups ping-pong at the tensor
# cores; ip = softmax of tile j overlapping P·V of tile j-1 inside a warpgroup; ppip = both), keys per
# tile (k128, k64) and pipeline stages (s2, s3): ATTN_WGMMA_CONFIGS in attention_kernels.cuh.
# `invoke tune attention` searches both (runs_as below).
_CHOICE_PREFIX = {"03_flash_bf16": "flash_bf16_", "05_flash_wgmma": "flash_wgmma_"}


def _bf16() -> tuple[str, ...]:
    """The table's bf16 variants, as its tags say (every tuning choice is bf16 too): read once per process,
    so that size checks after the first read need no load."""
    return library.tagged(PROGRAM, "bf16")


def backward_variants() -> tuple[str, ...]:
    """The backward rungs of the library's variant table, in its order."""
    return library.tagged(PROGRAM, "backward")


def tuned() -> dict[str, tuple[str, ...]]:
    """Each tuned variant's choices, from the library's config table (03_flash_bf16's, then 05's)."""
    cs = library.read_table(PROGRAM, "config")
    return {v: tuple(c for c in cs if c.startswith(p)) for v, p in _CHOICE_PREFIX.items()}


def __getattr__(name: str):
    # The names are the library's tables (cuda/attention/attention.cu), read when first asked for:
    # VARIANTS the variant table; TUNING_VARIANTS and WGMMA_CONFIGS the config table, split by variant.
    if name == "VARIANTS":
        return library.read_table(PROGRAM)
    if name == "TUNED":
        return tuned()
    if name == "TUNING_VARIANTS":
        return tuned()["03_flash_bf16"]
    if name == "WGMMA_CONFIGS":
        return tuned()["05_flash_wgmma"]
    if name == "BF16_VARIANTS":
        return _bf16() + library.read_table(PROGRAM, "config")
    if name == "BACKWARD_VARIANTS":
        return backward_variants()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


FLASH_D = (32, 64, 128)  # 02_flash
TC_D = (64, 128)         # the tensor-core variants
MAX_BH = cudart.MAX_GRID_YZ  # B*H blocks on the grid's y (flash) or z (naive) axis
MAX_S = 92680  # ATTN_MAX_S in cuda/shared/attention/attention_limits.h: S*S score indexes stay in int
# ||out - ref|| / ||ref|| each dtype must meet against the float64 reference of the same inputs
# (for bf16: of the bf16-rounded inputs, which is what the kernel sees).
# float32, why 1e-4 and not the 1e-5 of elementwise kernels: each output is a softmax-weighted mean
# of S values of V, after a D-term dot product for each score. The dot products round with relative
# error ~ sqrt(D)·2^-24 (~7e-7 at D=128) times |q||k|, which exp() turns into a relative error of
# the weights of about |score|·that; the weights' normalising sum and the P·V sum add ~sqrt(S)·2^-24
# (~4e-6 at S=4097, with random-walk rounding). Together that sits at 1e-6 to 1e-5 for unit-scale
# inputs; 1e-4 keeps a margin of 10x over the worst case seen, while a kernel that drops or
# duplicates one key tile, or reads a wrong row, is off by 1e-2 or more (test_attention.py shows it).
# 3xTF32 keeps ~21 bits of each product (2^-21 ~ 5e-7 relative), so 04_flash_3xtf32 is held to the
# FP32 bar too: TOLERANCE_FP32_STRICT.
# bfloat16: the output is rounded to bf16 (8 bits: relative error up to 2^-9, RMS ~1.1e-3), and so
# are the softmax weights before P·V (another ~1e-3, averaged over the keys); accumulation and the
# softmax statistics are FP32 and add nothing visible. ~1.5e-3 expected; 1e-2 leaves a margin of
# ~6x, while one missing key tile or an unmasked diagonal costs 5e-2 or more at the sizes tested.
TOLERANCE = 1e-4
TOLERANCE_FP32_STRICT = 1e-5
TOLERANCE_BF16 = 1e-2
TOLERANCES = {"float32": TOLERANCE, "bfloat16": TOLERANCE_BF16}


def _known(v: str) -> bool:
    """Whether the loaded library knows the name (a variant, a tuning choice, or a variant only the
    fault build has); a string that is no C string is unknown."""
    return isinstance(v, str) and "\0" not in v and library.load(PROGRAM).attention_variant_is_bf16(v) >= 0


def canonical_variant(variant: str, allow_test: bool = True) -> str:
    """The variant's name in the library's table (an alias resolved); ValueError naming the valid
    ones otherwise. allow_test=False takes the table's variants only (no tuning choice, nothing else
    the library knows)."""
    v = ALIASES.get(variant, variant)
    variants = library.read_table(PROGRAM)
    if v not in variants and not (allow_test and _known(v)):
        raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(variants)} "
                         f"(or {', '.join(ALIASES)})")
    return v


def config_variant(config: str) -> str:
    """The variant a tuning choice configures: 03_flash_bf16 or 05_flash_wgmma (ValueError otherwise)."""
    choices = tuned()
    for variant, cs in choices.items():
        if config in cs:
            return variant
    raise ValueError(f"unknown tuning choice {config!r}; valid: {', '.join(c for cs in choices.values() for c in cs)}")


def unsupported_reason(variant: str) -> str | None:
    """None when `variant` (or a tuning choice) runs on this build and GPU, else why not: 05_flash_wgmma
    and its choices need sm_90a ("needs sm_90a: ..."). Asks the library; nothing is launched."""
    v = canonical_variant(variant)
    lib = library.load("attention")
    why = lib.attention_unsupported_reason(v)
    return None if why == lib.ffi.NULL else lib.ffi.string(why).decode()


def default_bf16_variant() -> str:
    """The bf16 variant that runs when none is named: 05_flash_wgmma where it can run (Hopper, sm_90a
    build), else 03_flash_bf16 (which needs sm_80: attention() falls back to float32 where it cannot run)."""
    try:
        return "05_flash_wgmma" if unsupported_reason("05_flash_wgmma") is None else "03_flash_bf16"
    except Exception:  # library not built or no GPU: the validation that follows still runs on the CPU
        return "03_flash_bf16"


# bfloat16 inputs with no variant named, where no bf16 kernel runs (a T4, a build for sm_75): 02_flash on
# float32 copies, the output rounded to bfloat16, said once per process.
BF16_FALLBACK = "02_flash"
_fallback_said = False


def _bf16_fallback_reason(q, variant) -> str | None:
    """Why bfloat16 `q` with no variant named cannot run a bf16 kernel here (then attention() runs
    BF16_FALLBACK), else None. Asks the library; nothing is launched."""
    if variant is not None or bfloat16 is None or getattr(q, "dtype", None) != bfloat16:
        return None
    try:
        return unsupported_reason("03_flash_bf16") if default_bf16_variant() == "03_flash_bf16" else None
    except Exception:  # library not built or no GPU: the call below says so
        return None


def is_bf16(variant: str) -> bool:
    """Whether the variant takes ml_dtypes.bfloat16 arrays (else float32)."""
    v = canonical_variant(variant)
    if v in _bf16() or v in library.read_table(PROGRAM, "config"):
        return True
    if v in library.read_table(PROGRAM):
        return False
    return library.load(PROGRAM).attention_variant_is_bf16(v) == 1  # a name only the loaded library knows


def is_backward(variant: str) -> bool:
    """Whether the variant is a backward rung (backward() takes it), asked of the library."""
    return library.load(PROGRAM).attention_variant_is_backward(canonical_variant(variant)) == 1


def dtype_of(variant: str):
    return bfloat16 if is_bf16(variant) else np.float32


def head_sizes(variant: str) -> tuple[int, ...] | None:
    """The head sizes D the variant takes (None: any)."""
    v = canonical_variant(variant)
    if v == "01_naive":
        return None
    # 02_flash's kernel (and any other float32 one on the CUDA cores) takes FLASH_D; 04 and bf16 ones TC_D.
    return TC_D if v == "04_flash_3xtf32" or is_bf16(v) else FLASH_D


def check_sizes(B, H, S, D, variant: str | None = None, names: str = "B x H x S x D") -> tuple[int, int, int, int]:
    """The size rules of every attention launch (the C side's attn_check_args), checked before one:
    positive integers, B*H blocks on one grid axis, S at most MAX_S, D one the variant takes.
    Returns (B, H, S, D) as ints; ValueError naming the rule otherwise. transformer_block checks its
    attention through here too (`names` says how its sizes map onto these)."""
    dims = (B, H, S, D)
    if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) for x in dims):
        raise ValueError(f"{names} must be integers, got {dims}")
    B, H, S, D = (int(x) for x in dims)
    if min(B, H, S, D) <= 0:
        raise ValueError(f"every dimension of {names} must be positive, got {(B, H, S, D)}")
    if B * H > MAX_BH:
        raise ValueError(f"B*H must be at most {MAX_BH} (the blocks of one grid axis), got {B}*{H} = {B * H}")
    if S > MAX_S:
        raise ValueError(f"S must be at most {MAX_S} (S*S score indexes stay in int), got {S}")
    if variant is not None:
        ds = head_sizes(variant)
        if ds is not None and D not in ds:
            raise ValueError(f"{variant} needs D in {ds}, got D={D}; use 01_naive for other head sizes")
    return B, H, S, D


def validate(q, k, v, variant: str | None = None, scale=None):
    """Check the inputs before any launch; returns (q, k, v, variant, scale, (B, H, S, D)).
    variant None: default_bf16_variant() for bfloat16 inputs, 02_flash otherwise."""
    if variant is None:
        bf = bfloat16 is not None and getattr(q, "dtype", None) == bfloat16
        variant = default_bf16_variant() if bf else "02_flash"
    variant = canonical_variant(variant)
    if is_bf16(variant) and bfloat16 is None:
        raise TypeError(f"{variant} needs ml_dtypes (pip install ml_dtypes) for its bfloat16 arrays")
    dt = dtype_of(variant)
    q = library.check_array(q, "q", dt, ndim=4)
    k = library.check_array(k, "k", dt, ndim=4, shape=q.shape)
    v = library.check_array(v, "v", dt, ndim=4, shape=q.shape)
    B, H, S, D = check_sizes(*q.shape, variant=variant)
    ds = head_sizes(variant)
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)) \
            or not math.isfinite(float(scale)):
        raise TypeError(f"scale must be a finite number, got {scale!r}")
    if ds == TC_D and scale <= 0:
        # The kernels keep the running max in raw score units and scale it after (a negative scale
        # would flip it), and mask with -inf (which a scale of 0 would turn into NaN).
        raise ValueError(f"{variant} needs scale > 0, got {scale}")
    return q, k, v, variant, float(scale), (B, H, S, D)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False, scale=None,
              variant: str | None = None, out: np.ndarray | None = None, lse: np.ndarray | None = None) -> np.ndarray:
    """O = softmax(scale·QKᵀ [+ causal mask])·V on the GPU; scale defaults to 1/sqrt(D).
    float32 arrays for 01/02/04, ml_dtypes.bfloat16 for 03_flash_bf16 and 05_flash_wgmma (the default
    variant follows q's dtype: 02_flash, or default_bf16_variant()). Written into `out` when given (q's
    dtype and shape, C-contiguous). A variant that cannot run here raises ValueError with the reason,
    before any launch. bfloat16 inputs with no variant named, where no bf16 kernel runs (sm_75), run
    BF16_FALLBACK on float32 copies and come back as bfloat16; a note on stderr says so once.
    `lse`: a float32 B x H x S array that receives the log-sum-exp of each query row's scores, what
    backward() needs; only the variants that save it take one (02_flash, 03_flash_bf16 and its tuning
    choices, the backward rungs), others raise ValueError before any launch."""
    global _fallback_said
    why = None if lse is not None else _bf16_fallback_reason(q, variant)
    if why:
        # The inputs are checked against the bf16 default's rules first (head size, scale > 0, out's
        # dtype), as on a GPU that runs it: the fallback takes more than the kernel would, and the same
        # call must not pass on a T4 and fail on an A100.
        q, k, v, _variant, scale, _shape = validate(q, k, v, None, scale)
        if out is not None:
            out = library.check_array(out, "out", bfloat16, shape=q.shape)
        if not _fallback_said:
            _fallback_said = True
            print(f"note: bfloat16 attention: no bf16 kernel runs here ({why}); running {BF16_FALLBACK} in "
                  "float32 and rounding the output to bfloat16", file=sys.stderr)
        wide = [np.asarray(a).astype(np.float32) for a in (q, k, v)]
        got = attention(*wide, causal=causal, scale=scale, variant=BF16_FALLBACK)
        if out is None:
            return got.astype(bfloat16)
        out[...] = got
        return out
    q, k, v, variant, scale, (B, H, S, D) = validate(q, k, v, variant, scale)
    if lse is not None:
        _check_saves_lse(variant)
        lse = library.check_array(lse, "lse", np.float32, shape=(B, H, S))
    why = unsupported_reason(variant)
    if why:
        raise ValueError(f"variant {variant!r} cannot run here: {why}")
    if out is None:
        out = np.empty_like(q)
    else:
        out = library.check_array(out, "out", q.dtype, shape=q.shape)
    lib = library.load("attention")
    fn = lib.attention_forward_bf16 if is_bf16(variant) else lib.attention_forward
    fn(runs_as(variant, D), B, H, S, D, int(bool(causal)), scale, q, k, v, out, lse)
    return out


def _forward_of(variant: str) -> str:
    """The forward a variant runs: a backward rung's is the one it pairs with (02_flash or 03_flash_bf16),
    read from the library's table by dtype; any other variant is its own."""
    if not is_backward(variant):
        return variant
    return "03_flash_bf16" if is_bf16(variant) else "02_flash"


def _check_saves_lse(variant: str) -> None:
    """ValueError unless the variant's forward saves the log-sum-exp (02_flash, 03_flash_bf16, its choices)."""
    f = _forward_of(variant)
    if f not in ("02_flash", "03_flash_bf16") and f not in tuned()["03_flash_bf16"]:
        raise ValueError(f"{variant} does not save the log-sum-exp; use 02_flash, 03_flash_bf16 or a backward rung "
                         f"({', '.join(backward_variants())})")


def workspace_bytes(variant: str, B: int, H: int, S: int, D: int) -> int:
    variant = canonical_variant(variant)
    B, H, S, D = check_sizes(B, H, S, D, variant=variant)
    lib = library.load("attention")
    n = lib.attention_workspace_bytes(variant, B, H, S, D)
    if n < 0:
        raise ValueError(f"invalid sizes for {variant}: B={B} H={H} S={S} D={D}")
    return int(n)


def forward_device(variant: str, shape, causal: bool, q, k, v, o, workspace=None, scale=None, stream=None,
                   lse=None) -> None:
    """Enqueue one forward on device buffers (DeviceBuffer or pointers) on `stream`; for timing. `lse`:
    B·H·S float32 of device memory for the log-sum-exp (the variants attention() takes one for)."""
    variant = canonical_variant(variant)
    if len(tuple(shape)) != 4:
        raise ValueError(f"shape must be (B, H, S, D), got {tuple(shape)}")
    B, H, S, D = check_sizes(*shape, variant=variant)
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if lse is not None:
        _check_saves_lse(variant)
    lib = library.load("attention")
    variant = runs_as(variant, D)
    if is_bf16(variant):
        lib.attention_forward_bf16_device(variant, B, H, S, D, int(bool(causal)), scale, q, k, v, o, lse, stream)
    else:
        lib.attention_forward_device(variant, B, H, S, D, int(bool(causal)), scale, q, k, v, o, lse, workspace,
                                     stream)


# --- reference and checker --------------------------------------------------------------------

def reference(q, k, v, causal: bool = False, scale=None) -> np.ndarray:
    """softmax(scale·QKᵀ)·V in float64 (max-subtracted), with key j > query i masked when causal."""
    q64, k64, v64 = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    S, D = q64.shape[-2], q64.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    s = np.matmul(q64, np.swapaxes(k64, -1, -2)) * scale
    if causal:
        s = np.where(np.triu(np.ones((S, S), dtype=bool), k=1), -np.inf, s)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return np.matmul(p, v64)


def reference_backward(q, k, v, do, causal: bool = False, scale=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dQ, dK, dV) of O = softmax(scale·QKᵀ [+ causal mask])·V for the upstream gradient `do`, in
    float64, by the recurrence the kernels follow: P from the scores, Di = rowsum(dO ∘ O),
    dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ∘ (dP − Di), dQ = scale·dS·K, dK = scale·dSᵀ·Q."""
    q64, k64, v64, do64 = (np.asarray(a, dtype=np.float64) for a in (q, k, v, do))
    S, D = q64.shape[-2], q64.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    s = np.matmul(q64, np.swapaxes(k64, -1, -2)) * scale
    if causal:
        s = np.where(np.triu(np.ones((S, S), dtype=bool), k=1), -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = np.matmul(p, v64)
    di = np.sum(do64 * o, axis=-1, keepdims=True)
    dv = np.matmul(np.swapaxes(p, -1, -2), do64)
    dp = np.matmul(do64, np.swapaxes(v64, -1, -2))
    ds = p * (dp - di)
    return np.matmul(ds, k64) * scale, np.matmul(np.swapaxes(ds, -1, -2), q64) * scale, dv


def reference_lse(q, k, causal: bool = False, scale=None) -> np.ndarray:
    """The statistic the forward saves for the backward (attention(..., lse=)), in float64: per query
    row, L = ln Σ_j exp(scale·q·k_j) over the keys it sees (natural log, as the kernels store it), so
    that P = exp(scale·QKᵀ − L) with no max and no sum left to recompute. Computed around the row's
    max, so scores beyond exp's range stay finite."""
    q64, k64 = (np.asarray(a, dtype=np.float64) for a in (q, k))
    S, D = q64.shape[-2], q64.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    s = np.matmul(q64, np.swapaxes(k64, -1, -2)) * scale
    if causal:
        s = np.where(np.triu(np.ones((S, S), dtype=bool), k=1), -np.inf, s)
    m = s.max(axis=-1)
    return m + np.log(np.exp(s - m[..., None]).sum(axis=-1))


# ||grad - ref|| / ||ref|| each backward rung must meet, for each of dQ, dK and dV, against the
# float64 gradients of the same inputs (for bf16: of the bf16-rounded q, k, v and dO).
# float32, 1e-4 as the forward: the same dot products and exp() of the scores, and sums over S keys
# (dQ) or S queries (dK, dV) of up to 4097 terms (~sqrt(S)·2^-24 with random-walk rounding); the
# one new step, dP − Di, cancels where dP is near its row mean, but dS is then small and weighs little
# in the norm. Dropping Di altogether costs O(1) (test_attention_backward.py shows it).
# bfloat16: P and dS are rounded to bf16 before their products (2^-9 relative each, ~1e-3 RMS after
# averaging), the gradients are rounded to bf16 on the way out (~1e-3 RMS), and dS = P·(dP − Di)
# inherits the rounding of the bf16 O (through Di) and of the bf16 products' inputs relative to
# |dP − Di|, which is smaller than |dP|: ~3-6e-3 expected; 3e-2 keeps a margin of ~5x, while a
# missing Di term is off by ~0.1 on unit-range uniform inputs (test_attention_backward.py).
BACKWARD_TOLERANCE = 1e-4
BACKWARD_TOLERANCE_BF16 = 3e-2
BACKWARD_TOLERANCES = {"float32": BACKWARD_TOLERANCE, "bfloat16": BACKWARD_TOLERANCE_BF16}


def _backward_variant(variant: str | None, q) -> str:
    """The backward rung to run: the named one (ValueError unless it is a backward rung), or by q's
    dtype, 07_flash_bwd_bf16 for bfloat16 and 06_flash_bwd otherwise."""
    if variant is None:
        bf = bfloat16 is not None and getattr(q, "dtype", None) == bfloat16
        return next(v for v in backward_variants() if is_bf16(v) == bf)
    v = canonical_variant(variant)
    if not is_backward(v):
        raise ValueError(f"{variant!r} is no backward rung; backward variants: {', '.join(backward_variants())}")
    return v


def backward(q, k, v, o, do, lse, causal: bool = False, variant: str | None = None, scale=None,
             out: tuple | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv) of attention on the GPU: q, k, v the forward's inputs, o and lse its output and
    saved log-sum-exp (attention(..., lse=) with the same variant), do the gradient of the loss with
    respect to o. float32 arrays for 06_flash_bwd, ml_dtypes.bfloat16 for 07_flash_bwd_bf16,
    08_flash_bwd_wgmma and 09_flash_bwd_ws (the default follows q's dtype: 06 or 07); lse float32 B x H x S. Written into `out` = (dq, dk, dv) when given.
    Every argument is checked before any launch (ValueError/TypeError)."""
    variant = _backward_variant(variant, q)
    q, k, v, variant, scale, (B, H, S, D) = validate(q, k, v, variant, scale)
    dt = dtype_of(variant)
    o = library.check_array(o, "o", dt, shape=q.shape)
    do = library.check_array(do, "do", dt, shape=q.shape)
    lse = library.check_array(lse, "lse", np.float32, shape=(B, H, S))
    if not scale > 0:  # both rungs fold the scale into exp2 of the recomputed scores
        raise ValueError(f"{variant} needs scale > 0, got {scale}")
    if out is None:
        out = tuple(np.empty_like(q) for _ in range(3))
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            raise TypeError("out must be a tuple (dq, dk, dv)")
        out = tuple(library.check_array(a, n, dt, shape=q.shape) for a, n in zip(out, ("dq", "dk", "dv")))
    why = unsupported_reason(variant)
    if why:
        raise ValueError(f"variant {variant!r} cannot run here: {why}")
    lib = library.load(PROGRAM)
    fn = lib.attention_backward_bf16 if is_bf16(variant) else lib.attention_backward
    fn(variant, B, H, S, D, int(bool(causal)), scale, q, k, v, o, do, lse, *out)
    return out


def backward_workspace_bytes(variant: str, B: int, H: int, S: int, D: int) -> int:
    """Device workspace bytes the backward rung needs at (B, H, S, D)."""
    variant = _backward_variant(variant, None)
    B, H, S, D = check_sizes(B, H, S, D, variant=variant)
    n = library.load(PROGRAM).attention_backward_workspace_bytes(variant, B, H, S, D)
    if n < 0:
        raise ValueError(f"invalid sizes for {variant}: B={B} H={H} S={S} D={D}")
    return int(n)


def backward_device(variant: str, shape, causal: bool, q, k, v, o, do, lse, dq, dk, dv, workspace, scale=None,
                    stream=None) -> None:
    """Enqueue one backward on device buffers (DeviceBuffer or pointers) on `stream`; for timing.
    `workspace`: backward_workspace_bytes() of device memory."""
    variant = _backward_variant(variant, None)
    if len(tuple(shape)) != 4:
        raise ValueError(f"shape must be (B, H, S, D), got {tuple(shape)}")
    B, H, S, D = check_sizes(*shape, variant=variant)
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    lib = library.load(PROGRAM)
    fn = lib.attention_backward_bf16_device if is_bf16(variant) else lib.attention_backward_device
    fn(variant, B, H, S, D, int(bool(causal)), scale, q, k, v, o, do, lse, dq, dk, dv, workspace, stream)


# One checker for every program (harness.calling.results); the old name stays for the tests' sake.
rel_error = relative_error


def check(out, ref, tol: float = TOLERANCE) -> bool:
    """The checker the tests use: relative_error <= tol (False for NaN or inf anywhere)."""
    return bool(relative_error(out, ref) <= tol)


def tolerance(variant: str) -> float:
    """The tolerance of the variant's dtype (see TOLERANCES)."""
    return TOLERANCE_BF16 if is_bf16(variant) else TOLERANCE


# --- Python twin (harness.base.sim): the flash kernel's online softmax, one thread per query row ------

# EXERCISE flash_softmax: copy
def flash_bk(ctx, q, k, v, out, S, D, scale, causal, br, bc):
    """A block owns `br` query rows (one per thread); key/value tiles of `bc` rows are staged in
    shared memory by the threads together, and each thread folds a tile into its running max m,
    sum lsum and accumulator o: m' = max(m, tile max), alpha = exp(m - m'), l' = alpha·l + Σp,
    o' = alpha·o + Σp·v. Generator: each bare `yield` is a __syncthreads()."""
    bh, qt = ctx.blockIdx.y, ctx.blockIdx.x
    t = ctx.threadIdx.x
    i = qt * br + t
    ks, vs = ctx.shared.k, ctx.shared.v
    m, lsum, o = -np.inf, 0.0, np.zeros(D)
    kv_end = min(S, qt * br + br) if causal else S
    for k0 in range(0, kv_end, bc):
        yield  # the previous tile is fully consumed before it is overwritten
        for r in range(t, bc, br):  # cooperative load, zeros past S
            ks[r] = k[bh, k0 + r] if k0 + r < S else 0.0
            vs[r] = v[bh, k0 + r] if k0 + r < S else 0.0
        yield  # the whole tile is loaded
        if i >= S:
            continue
        s = np.array([np.dot(q[bh, i], ks[c]) * scale for c in range(bc)])
        j = k0 + np.arange(bc)
        s[(j >= S) | ((j > i) if causal else False)] = -np.inf
        # EXERCISE flash_softmax: begin the online softmax: m_new = the larger of the running max m and this tile's max;
        # EXERCISE flash_softmax: todo alpha = exp(m - m_new), the factor that rescales what was summed under the old max
        # EXERCISE flash_softmax: todo (0.0 while m is still -inf); p = exp(s - m_new) for this tile's keys; then the
        # EXERCISE flash_softmax: todo running sum lsum = alpha * lsum + the sum of p, the running output o = alpha * o + p @ vs,
        # EXERCISE flash_softmax: todo and m = m_new.
        m_new = max(m, s.max())
        alpha = math.exp(m - m_new) if m != -np.inf else 0.0
        p = np.exp(s - m_new)
        lsum = alpha * lsum + p.sum()
        o = alpha * o + p @ vs
        m = m_new
        # EXERCISE flash_softmax: end
    if i < S:
        out[bh, i] = o / lsum
# EXERCISE flash_softmax: end copy


def twin(q, k, v, causal: bool = False, scale=None, br: int = 4, bc: int = 4) -> np.ndarray:
    """Run flash_bk through harness.base.sim.launch (float64, tiny shapes only)."""
    B, H, S, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    q3, k3, v3 = (np.asarray(a, dtype=np.float64).reshape(B * H, S, D) for a in (q, k, v))
    out = np.full((B * H, S, D), np.nan)
    sim.launch(flash_bk, sim.dim3(-(-S // br), B * H), sim.dim3(br), q3, k3, v3, out, S, D, scale, bool(causal),
               br, bc, shared={"k": ((bc, D), np.float64), "v": ((bc, D), np.float64)})
    return out.reshape(B, H, S, D)



# --- Python twin (harness.base.sim): the backward's key-block kernel, one thread per key row ---------
# FlashAttention-2's backward (Algorithm 2) for dK and dV, in 06_flash_bwd's shape: a block owns a
# block of keys and walks the query tiles, so its keys' gradients are summed in the block alone (no
# atomics); dQ, a sum over keys, is the other pass's and is not computed here.

BWD_BC, BWD_BR = 4, 8  # the twin's keys per block (threads) and query rows per tile: unequal, so a loop
#                        that mixes the two up shows


def backward_shared(D: int, br: int = BWD_BR) -> dict:
    """The shared memory flash_bwd_kb stages a query tile in: q and dO rows, their L and delta."""
    return {"q": ((br, D), np.float64), "do": ((br, D), np.float64), "lse": ((br,), np.float64),
            "delta": ((br,), np.float64)}


# EXERCISE flash_bwd: copy
def flash_bwd_kb(ctx, q, k, v, do, lse, delta, dk, dv, S, D, scale, causal, bc, br):
    """dK and dV of one block of `bc` keys, one key row per thread (grid: key blocks x BH). Each
    thread keeps its key's rows k_j, v_j and its sums dk_j, dv_j; tiles of `br` query rows (q, dO,
    their saved log-sum-exp L and delta = rowsum(dO * O), the forward's and its preprocessing's) are
    staged in shared memory by the threads together. Per tile, for the thread's key j and each query i
    of the tile: P_ij = exp(scale * q_i . k_j - L_i) (the forward's softmax weight, recomputed: L holds
    its max and its sum), dv_j += sum_i P_ij dO_i (Pᵀ dO), dP_ij = dO_i . v_j,
    dS_ij = P_ij (dP_ij - delta_i), dk_j += scale * sum_i dS_ij q_i (scale dSᵀ Q).
    Generator: each bare `yield` is a __syncthreads()."""
    bh, kb = ctx.blockIdx.y, ctx.blockIdx.x
    t = ctx.threadIdx.x
    j = kb * bc + t
    qs, dos, ls, dl = ctx.shared.q, ctx.shared.do, ctx.shared.lse, ctx.shared.delta
    kj = k[bh, j] if j < S else np.zeros(D)  # the thread's key row stays in its registers
    vj = v[bh, j] if j < S else np.zeros(D)
    dkj, dvj = np.zeros(D), np.zeros(D)
    # Causal: query i sees key j only when i >= j, so the tiles before the one holding query kb*bc add nothing.
    q_first = (kb * bc // br) * br if causal else 0
    for q0 in range(q_first, S, br):
        yield  # the previous tile is fully consumed before it is overwritten
        for r in range(t, br, bc):  # cooperative load; rows past S are zeros, whose q and dO add nothing
            inside = q0 + r < S
            qs[r] = q[bh, q0 + r] if inside else 0.0
            dos[r] = do[bh, q0 + r] if inside else 0.0
            ls[r] = lse[bh, q0 + r] if inside else 0.0
            dl[r] = delta[bh, q0 + r] if inside else 0.0
        yield  # the whole tile is loaded
        if j >= S:
            continue  # a key past S: its thread still reaches every barrier, and computes nothing
        i = q0 + np.arange(br)  # the tile's query rows
        # EXERCISE flash_bwd: begin the tile's part of the recurrence for key j: the scores s = scale * (qs @ kj); -inf where
        # EXERCISE flash_bwd: todo the query i is past S or (causal) the key lies after it, j > i (the diagonal stays); the
        # EXERCISE flash_bwd: todo weights p = exp(s - ls) (ls: each query row's saved log-sum-exp L); dvj += Pᵀ dO for
        # EXERCISE flash_bwd: todo this key, the sum over the tile's queries of p_i * dO_i; dp = dos @ vj;
        # EXERCISE flash_bwd: todo ds = p * (dp - dl) (dl: each row's delta); dkj += scale * the sum of ds_i * q_i.
        s = scale * (qs @ kj)
        s[(i >= S) | ((i < j) if causal else False)] = -np.inf  # masked before exp: exp(-inf - L) is 0
        p = np.exp(s - ls)
        dvj = dvj + p @ dos
        dp = dos @ vj
        ds = p * (dp - dl)
        dkj = dkj + scale * (ds @ qs)
        # EXERCISE flash_bwd: end
    if j < S:
        dk[bh, j] = dkj
        dv[bh, j] = dvj
# EXERCISE flash_bwd: end copy


def twin_backward(q, k, v, o, do, lse, causal: bool = False, scale=None, bc: int = BWD_BC,
                  br: int = BWD_BR) -> tuple[np.ndarray, np.ndarray]:
    """(dK, dV) by flash_bwd_kb through harness.base.sim.launch (float64, tiny shapes only), from the
    forward's output `o` and log-sum-exp `lse` (B x H x S, natural log) as backward() takes them;
    delta = rowsum(dO * O) is computed here first, FlashAttention-2's preprocessing step."""
    B, H, S, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    q3, k3, v3, o3, do3 = (np.asarray(a, dtype=np.float64).reshape(B * H, S, D) for a in (q, k, v, o, do))
    lse2 = np.asarray(lse, dtype=np.float64).reshape(B * H, S)
    delta = np.sum(do3 * o3, axis=-1)
    dk, dv = np.full((B * H, S, D), np.nan), np.full((B * H, S, D), np.nan)
    sim.launch(flash_bwd_kb, sim.dim3(-(-S // bc), B * H), sim.dim3(bc), q3, k3, v3, do3, lse2, delta, dk, dv, S, D,
               scale, bool(causal), bc, br, shared=backward_shared(D, br))
    return dk.reshape(B, H, S, D), dv.reshape(B, H, S, D)


# --- without a GPU ------------------------------------------------------------------------------

def on_cpu(args: list[str]) -> tuple[pd.DataFrame, str]:
    """`invoke run attention` without a GPU: the float64 numpy reference at a small ragged shape,
    and 02_flash's online softmax (the Python twin on harness.base.sim: key tiles in shared memory, a
    running max, a rescaled sum) checked against it, causal and not."""
    import time

    import pandas as pd

    if args:
        raise ValueError(f"on the CPU, attention takes no arguments (a fixed small shape), got: {' '.join(args)}")
    B, H, S, D = 1, 2, 37, 16
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(3))
    rows = []
    for causal in (False, True):
        ref = reference(q, k, v, causal=causal)
        t0 = time.perf_counter()
        out = twin(q, k, v, causal=causal)
        secs = time.perf_counter() - t0
        err = relative_error(out, ref)
        rows.append({"variant": "02_flash (Python twin: online softmax)", "shape": f"{B}x{H}x{S}x{D}",
                     "causal": causal, "rel_error": float(f"{err:.3g}"), "seconds": round(secs, 2),
                     "check": "pass" if check(out, ref, TOLERANCE_FP32_STRICT) else "fail"})
    return pd.DataFrame(rows), (f"softmax(QKᵀ/√D)V by the float64 numpy reference, and the flash kernel's "
                                f"Python twin on harness.base.sim against it (tolerance {TOLERANCE_FP32_STRICT:g})")


# --- bench ------------------------------------------------------------------------------------

BENCH_B, BENCH_H, BENCH_S = 4, 16, 4096  # B·H = 64


def flops(B: int, H: int, S: int, D: int, causal: bool = False) -> float:
    """4·B·H·S²·D: two products of 2·S²·D each per (b, h); causal: only the S(S+1)/2 pairs kept."""
    pairs = S * (S + 1) / 2 if causal else float(S) * S
    return 4.0 * B * H * pairs * D


def backward_flops(B: int, H: int, S: int, D: int, causal: bool = False) -> float:
    """2.5 times the forward's: five S×S×D products (S and dP recomputed, dV, dQ, dK), the count
    FlashAttention's papers use; 06_flash_bwd's second pass does two more, uncounted."""
    return 2.5 * flops(B, H, S, D, causal)


def _ceiling_name(dtype: str, D: int, S: int = BENCH_S, causal: bool = False, backward: bool = False) -> str:
    """sdpa_d64 / sdpa_d128 (float32 at S=4096, the first bench's names) and sdpa_bf16_d{D}_s{S}[_causal];
    the backward's sdpa_bwd_{f32,bf16}_d{D}_s{S}[_causal]."""
    if backward:
        return f"sdpa_bwd_{'f32' if dtype == 'float32' else 'bf16'}_d{D}_s{S}" + ("_causal" if causal else "")
    if dtype == "float32":
        return f"sdpa_d{D}"
    return f"sdpa_bf16_d{D}_s{S}" + ("_causal" if causal else "")


def _torch_inputs(dtype: str, D: int, S: int, n: int) -> list:
    """n random B=4 x H=16 x S x D torch tensors in [-1, 1) on the GPU (seed 0), TF32 off for the
    float32 paths (matmul and cuDNN); RuntimeError when torch sees no GPU."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tdt = torch.float32 if dtype == "float32" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.rand(BENCH_B, BENCH_H, S, D, device="cuda", dtype=tdt, generator=g) * 2 - 1 for _ in range(n)]


def _on_timing_stream(call):
    """A Prepared's launch(stream) for a torch call: `call()` enqueued on the timing session's stream
    (a torch ExternalStream per handle, made once; the current stream for None)."""
    import torch

    streams: dict = {}

    def launch(stream):
        key = 0 if stream is None else int(cudart.ffi.cast("uintptr_t", stream))
        ext = streams.get(key)
        if ext is None:
            ext = streams[key] = torch.cuda.ExternalStream(key) if key else torch.cuda.current_stream()
        with torch.cuda.stream(ext):
            call()

    return launch


def sdpa_setup(dtype: str, D: int, S: int, causal: bool, backend: str | None = None):
    """harness.measuring.timing's target: torch's scaled_dot_product_attention at B=4, H=16 and (S, D, causal) on
    random inputs, enqueued on the timing session's stream. backend None is torch's default choice;
    else a torch.nn.attention.SDPBackend name (FLASH_ATTENTION, CUDNN_ATTENTION, ...). float32 runs
    with allow_tf32 off (matmul and cuDNN): torch then takes its memory-efficient kernel."""
    import torch
    import torch.nn.functional as F

    from harness.measuring import bench

    q, k, v = _torch_inputs(dtype, D, S, 3)
    ctx = None
    if backend is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx = lambda: sdpa_kernel(getattr(SDPBackend, backend))  # noqa: E731

    def call():
        if ctx is None:
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        else:
            with ctx():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    launch = _on_timing_stream(call)
    launch(None)  # a backend that refuses these inputs raises here, before timing
    torch.cuda.synchronize()
    return bench.Prepared(launch, lambda: torch.cuda.synchronize())


def _sdpa_ceiling(dtype: str, D: int, S: int, causal: bool, quick: bool):
    """torch SDPA (default backend), timed beside the cases; the other backends are timed once and
    named in the detail. None when torch is not installed (the ratios stay NaN)."""
    import importlib.util

    from harness.measuring import bench

    if importlib.util.find_spec("torch") is None:
        return None
    kw = {"dtype": dtype, "D": D, "S": S, "causal": causal}
    detail = (f"torch SDPA, default backend, {dtype}, allow_tf32=False, B*H={BENCH_B * BENCH_H} S={S} D={D} "
              f"causal={causal}")
    others = ("MATH",) if dtype == "float32" else ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")
    extras = () if quick else tuple((b.lower(), "harness.programs.attention:sdpa_setup", {**kw, "backend": b})
                                    for b in others)
    return bench.TimedCeiling(_ceiling_name(dtype, D, S, causal), "TFLOP/s", flops(BENCH_B, BENCH_H, S, D, causal),
                              "harness.programs.attention:sdpa_setup", kw, detail, extras=extras)


# (dtype, D, S, causal, quick) of every bench shape; the 16384 ones only without --quick.
_BF16_SHAPES = [(D, S, causal, S != 16384) for D in (64, 128)
                for S, causal in ((4096, False), (4096, True), (1024, False), (16384, False), (16384, True))]


def sdpa_backward_setup(dtype: str, D: int, S: int, causal: bool, backend: str | None = None):
    """harness.measuring.timing's target: the backward of torch's scaled_dot_product_attention at
    B=4, H=16 and (S, D, causal): the forward runs once here, and each launch is one
    torch.autograd.grad of its output (retain_graph), i.e. the backend's backward kernels alone.
    backend as sdpa_setup's (None: torch's default choice; FLASH_ATTENTION, CUDNN_ATTENTION, ...)."""
    import torch
    import torch.nn.functional as F

    from harness.measuring import bench

    q, k, v, do = _torch_inputs(dtype, D, S, 4)
    for t in (q, k, v):
        t.requires_grad_(True)
    if backend is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(getattr(SDPBackend, backend)):  # a backend that refuses these inputs raises here
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    launch = _on_timing_stream(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True))
    launch(None)
    torch.cuda.synchronize()
    return bench.Prepared(launch, lambda: torch.cuda.synchronize())


def _sdpa_backward_ceiling(dtype: str, D: int, S: int, causal: bool, quick: bool):
    """torch SDPA's backward (default backend), timed beside the backward cases; the other backends
    are timed once and named in the detail. None without torch."""
    import importlib.util

    from harness.measuring import bench

    if importlib.util.find_spec("torch") is None:
        return None
    kw = {"dtype": dtype, "D": D, "S": S, "causal": causal}
    detail = (f"torch SDPA backward (autograd.grad of one forward), default backend, {dtype}, allow_tf32=False, "
              f"B*H={BENCH_B * BENCH_H} S={S} D={D} causal={causal}")
    others = () if dtype == "float32" else ("FLASH_ATTENTION", "CUDNN_ATTENTION")
    extras = () if quick else tuple((b.lower(), "harness.programs.attention:sdpa_backward_setup", {**kw, "backend": b})
                                    for b in others)
    return bench.TimedCeiling(_ceiling_name(dtype, D, S, causal, backward=True), "TFLOP/s",
                              backward_flops(BENCH_B, BENCH_H, S, D, causal),
                              "harness.programs.attention:sdpa_backward_setup", kw, detail, extras=extras)


# (D, S, causal, quick) of the backward rungs' bench shapes: 06 in float32 at S=4096 not causal, 07 and
# 08 as the forward's bf16 shapes at S=4096 and 16384 (the latter only without --quick).
_BWD_FP32_SHAPES = [(D, BENCH_S, False, D == 128) for D in (64, 128)]
_BWD_BF16_SHAPES = [(D, S, causal, S != 16384) for D in (64, 128) for S in (4096, 16384) for causal in (False, True)]


def ceilings():
    """The registry's hook: torch SDPA in the same run, for each shape a bench case names."""
    out = {}
    for D, S, causal, _ in _BWD_FP32_SHAPES:
        out[_ceiling_name("float32", D, S, causal, backward=True)] = \
            lambda quick, D=D, S=S, causal=causal: _sdpa_backward_ceiling("float32", D, S, causal, quick)
    for D, S, causal, _ in _BWD_BF16_SHAPES:
        out[_ceiling_name("bfloat16", D, S, causal, backward=True)] = \
            lambda quick, D=D, S=S, causal=causal: _sdpa_backward_ceiling("bfloat16", D, S, causal, quick)
    for D in (64, 128):
        out[_ceiling_name("float32", D)] = lambda quick, D=D: _sdpa_ceiling("float32", D, BENCH_S, False, quick)
    for D, S, causal, _ in _BF16_SHAPES:
        out[_ceiling_name("bfloat16", D, S, causal)] = \
            lambda quick, D=D, S=S, causal=causal: _sdpa_ceiling("bfloat16", D, S, causal, quick)
    return out


# Targets: 03_flash_bf16 >= 0.5 of SDPA BF16; FP32 flash >= 1.0 of SDPA FP32.
TARGETS = {"02_flash": 1.0, "03_flash_bf16": 0.5, "04_flash_3xtf32": 1.0}


def target(variant: str, D: int, S: int) -> float | None:
    """The ratio a bench row must reach. 05_flash_wgmma: 0.90 at D=128 and 0.85 at D=64 for
    S=4096, 0.75 at the other lengths, causal and not."""
    if variant == "05_flash_wgmma":
        return (0.90 if D == 128 else 0.85) if S == 4096 else 0.75
    return TARGETS.get(variant)


def _bench_case(variant: str, D: int, S: int, causal: bool, quick: bool):
    from harness.measuring import bench

    B, H = BENCH_B, BENCH_H
    bf = is_bf16(variant)
    esize = 2 if bf else 4
    f = flops(B, H, S, D, causal)
    dtype = "bfloat16" if bf else "float32"
    return bench.BenchCase(
        program="attention", variant=variant, size=f"B{B}xH{H}xS{S}xD{D}" + ("-causal" if causal else ""),
        setup="harness.programs.attention:variant_setup",
        kwargs={"variant": variant, "D": D, "S": S, "causal": causal}, unit="TFLOP/s", amount=f, ceiling=_ceiling_name(dtype, D, S, causal),
        target=target(variant, D, S), quick=quick, flops=f, bytes=4.0 * B * H * S * D * esize,
        note=f"{'causal' if causal else 'non-causal'}; ratio to torch SDPA {dtype} (default backend, same run)")


def variant_setup(variant: str, D: int, S: int, causal: bool):
    """harness.measuring.timing's target: one attention variant (or tuning choice) at B=4, H=16, (S, D, causal)."""
    from harness.measuring import bench

    B, H = BENCH_B, BENCH_H
    shape = (B, H, S, D)
    bf = is_bf16(variant)
    esize = 2 if bf else 4
    rng = np.random.default_rng(0)
    host = [rng.uniform(-1, 1, shape).astype(dtype_of(variant)) for _ in range(3)]
    bufs = [cudart.DeviceBuffer.from_array(a) for a in host]
    o = cudart.DeviceBuffer(int(np.prod(shape)) * esize)
    ws_n = 0 if bf else workspace_bytes(variant, *shape)
    ws = cudart.DeviceBuffer(ws_n) if ws_n else None
    # Marshal once (Library.prepare): the timed launch is one cffi call and a status check.
    # 03_flash_bf16 runs this GPU's tuned (warps, stages) at D when `invoke tune attention` ran.
    ran = runs_as(variant, D)
    lib = library.load("attention")
    if bf:
        launch = lib.prepare("attention_forward_bf16_device", ran, B, H, S, D, int(causal), 1.0 / math.sqrt(D),
                             *(b.ptr for b in bufs), o.ptr, None, library.STREAM)
    else:
        launch = lib.prepare("attention_forward_device", ran, B, H, S, D, int(causal), 1.0 / math.sqrt(D),
                             *(b.ptr for b in bufs), o.ptr, None, ws.ptr if ws else None, library.STREAM)

    def close():
        for b in bufs + [o] + ([ws] if ws else []):
            b.close()

    return bench.Prepared(launch=launch, close=close, note=f"ran {ran}" if ran != variant else "")


def _backward_case(variant: str, D: int, S: int, causal: bool, quick: bool):
    from harness.measuring import bench

    B, H = BENCH_B, BENCH_H
    bf = is_bf16(variant)
    f = backward_flops(B, H, S, D, causal)
    dtype = "bfloat16" if bf else "float32"
    return bench.BenchCase(
        program="attention", variant=variant, size=f"B{B}xH{H}xS{S}xD{D}" + ("-causal" if causal else "") + "-bwd",
        setup="harness.programs.attention:backward_setup", kwargs={"variant": variant, "D": D, "S": S, "causal": causal},
        unit="TFLOP/s", amount=f, ceiling=_ceiling_name(dtype, D, S, causal, backward=True), target=None, quick=quick,
        flops=f, bytes=(9.0 * B * H * S * D) * (2 if bf else 4),
        note=f"backward; {'causal' if causal else 'non-causal'}; ratio to torch SDPA's backward {dtype} (default "
             "backend, same run); FLOPs 2.5x the forward's")


def backward_setup(variant: str, D: int, S: int, causal: bool):
    """harness.measuring.timing's target: one backward rung's backward at B=4, H=16, (S, D, causal),
    on the O and log-sum-exp of its forward (run once here) and a random dO."""
    from harness.measuring import bench

    B, H = BENCH_B, BENCH_H
    shape = (B, H, S, D)
    dt = dtype_of(variant)
    rng = np.random.default_rng(0)
    bufs = [cudart.DeviceBuffer.from_array(rng.uniform(-1, 1, shape).astype(dt)) for _ in range(4)]  # q k v dO
    esize = np.dtype(dt).itemsize
    n = int(np.prod(shape)) * esize
    o, dq, dk, dv = (cudart.DeviceBuffer(n) for _ in range(4))
    lse = cudart.DeviceBuffer(B * H * S * 4)
    ws = cudart.DeviceBuffer(backward_workspace_bytes(variant, *shape))
    forward_device(variant, shape, causal, *bufs[:3], o, lse=lse)
    cudart.synchronize()
    lib = library.load(PROGRAM)
    fn = "attention_backward_bf16_device" if is_bf16(variant) else "attention_backward_device"
    launch = lib.prepare(fn, variant, B, H, S, D, int(causal), 1.0 / math.sqrt(D), *(b.ptr for b in bufs[:3]), o.ptr,
                         bufs[3].ptr, lse.ptr, dq.ptr, dk.ptr, dv.ptr, ws.ptr, library.STREAM)

    def close():
        for b in bufs + [o, dq, dk, dv, lse, ws]:
            b.close()

    return bench.Prepared(launch=launch, close=close)


def _backward_rungs_here() -> list[str]:
    """The backward rungs the bench times: all but one this build or GPU cannot run (08 off sm_90a;
    with no GPU at all the library says 06 and 07 can)."""
    return [v for v in backward_variants() if unsupported_reason(v) is None]


def bench_cases(quick: bool = False):
    """FP32 variants at S=4096 (D=64, 128); 03_flash_bf16 at S=4096 (causal too) and 1024, and,
    without `quick`, 16384. With quick=True only the quick cases are returned."""
    cases = []
    for D in (64, 128):
        for variant in ("01_naive", "02_flash", "04_flash_3xtf32"):
            cases.append(_bench_case(variant, D, BENCH_S, False, quick=True))
    try:  # 05_flash_wgmma only where it runs (a Hopper GPU and an sm_90a build)
        wgmma = unsupported_reason("05_flash_wgmma") is None
    except Exception:
        wgmma = False
    for D, S, causal, q in _BF16_SHAPES:
        for variant in ("03_flash_bf16",) + (("05_flash_wgmma",) if wgmma else ()):
            cases.append(_bench_case(variant, D, S, causal, quick=q))
    cases += [_backward_case(v, D, S, causal, q) for v in _backward_rungs_here() for D, S, causal, q in
              (_BWD_BF16_SHAPES if is_bf16(v) else _BWD_FP32_SHAPES)]
    return [c for c in cases if c.quick or not quick]


# --- tuning: the choice 03_flash_bf16 and 05_flash_wgmma run at each head size on this GPU ----------
# tuned()[variant] are the variant with its choice fixed. `invoke tune attention` times each at B=4,
# H=16, S=4096, causal and not, per D, and caches per variant the one with the least total time; the
# library calls (attention(), forward_device(), the bench) then run it for that variant. Without a
# cache for this exact device the compiled default runs (FlashBf16Default in flash_bf16.cuh,
# FwDefault in flash_wgmma.cuh), which is also what build/bin/attention runs unless given --config.
# The cache keeps 03's winners under "winners" (the format before 05 existed) and every variant's
# under "winners_by_variant".

_tuned: dict = {}  # per process: {(variant, D): (tuning choice or None, why)}


def tuned_choice(D: int, device: str | None = None, variant: str = "03_flash_bf16") -> tuple[str | None, str]:
    """(tuning choice, why) that `variant` (03_flash_bf16 or 05_flash_wgmma) runs at head size D on
    `device` (None: the compiled default)."""
    from harness.measuring import tune as htune

    if device is None:
        device = cudart.device_name(0)
    data, why = htune.cached("attention", device)
    if data is None:
        return None, why
    by_variant = data.get("winners_by_variant") or {}
    winners = by_variant.get(variant) or (data.get("winners") if variant == "03_flash_bf16" else None) or {}
    winner = winners.get(str(D))
    if winner is None:
        return None, f"{htune.cache_path('attention', device)} has no choice of {variant} for D={D} " \
                     f"(run `invoke tune attention`)"
    if winner not in tuned()[variant]:
        return None, f"{htune.cache_path('attention', device)} names {winner!r} for {variant} at D={D}, not one " \
                     f"of {', '.join(tuned()[variant])}"
    return winner, why


def runs_as(variant: str, D: int) -> str:
    """The variant the library is asked for: 03_flash_bf16 and 05_flash_wgmma become this GPU's tuned
    choice at D (looked up once per process); every other variant is itself."""
    if variant not in _CHOICE_PREFIX:
        return variant
    if (variant, D) not in _tuned:
        _tuned[(variant, D)] = tuned_choice(D, variant=variant)
    return _tuned[(variant, D)][0] or variant


def _tune_check(variant: str, D: int) -> str | None:
    """Why `variant` must not be chosen (a wrong answer on a small ragged problem, causal and not),
    or None: the search never picks a fast kernel that is wrong."""
    rng = np.random.default_rng(D)
    q, k, v = (rng.uniform(-1, 1, (1, 3, 200, D)).astype(bfloat16) for _ in range(3))
    for causal in (False, True):
        out = attention(q, k, v, causal=causal, variant=variant)
        e = relative_error(out, reference(q, k, v, causal))
        if not e <= TOLERANCE_BF16:
            return f"wrong answer ({'causal' if causal else 'non-causal'} relative error {e:.2e})"
    return None


def tune(size: int = BENCH_S, save: bool = True, on_progress=None, options=None):
    """Time every tuning choice of 03_flash_bf16 (warps, rows per warp, key tile, stages) and, where it
    runs, of 05_flash_wgmma (key tile, stages, schedule) at B=4, H=16, S=size for D = 64 and 128,
    causal and not, with harness.measuring.timing; per variant and D the winner has the least total time. Each
    choice is first checked against the float64 reference on a small ragged problem; one that is
    wrong, or that the device refuses, is listed, never chosen.

    `options` (harness.measuring.timing.Options) sets NVBench's knobs; the default is the bench's.
    Returns (table, path): one row per (variant, D, choice) with TFLOP/s both ways and a status, and
    the JSON written (None when save=False): the device, the winners and the whole table."""
    import pandas as pd

    from harness.base.errors import ContextLostError, CudaError
    from harness.measuring import timing
    from harness.measuring import tune as htune

    if not 1 <= size <= MAX_S:
        raise ValueError(f"size is the sequence length S: at least 1 and at most {MAX_S}, got {size}")
    choices = tuned()
    refused = {v: unsupported_reason(v) for v in choices}
    searched = [v for v, why in refused.items() if why is None]
    if not searched:  # a T4 or a compute_75 build: every tuned kernel needs sm_80 or newer
        raise ValueError("attention has nothing to tune here: "
                         + "; ".join(f"{v} {why}" for v, why in refused.items()))
    device = cudart.device_name(0)
    rows, items = [], []
    for variant in searched:
        for D in TC_D:
            for c in choices[variant]:
                r = {"variant": variant, "D": D, "config": c, "status": "ok"}
                try:
                    why = _tune_check(c, D)
                except ContextLostError:
                    raise
                except CudaError as e:  # e.g. more shared memory than this GPU has: not a candidate here
                    why = f"refused: {e}"
                if why:
                    rows.append({**r, "status": why})
                    continue
                rows.append(r)
                for causal in (False, True):
                    items.append(timing.Item(f"{c} D={D}" + (" causal" if causal else ""),
                                             "harness.programs.attention:variant_setup",
                                             {"variant": c, "D": D, "S": size, "causal": causal}))
    # One NVBench session for every choice (harness.measuring.timing): cold measurements stopped on noise.
    got = timing.run_plan(items, options, on_progress=(lambda i, key: on_progress(key)) if on_progress else None)
    for r in rows:
        if r["status"] != "ok":
            continue
        for causal in (False, True):
            t = got[f"{r['config']} D={r['D']}" + (" causal" if causal else "")]
            key = "causal" if causal else "full"
            r[f"tflops_{key}"] = t.rate(flops(BENCH_B, BENCH_H, size, r["D"], causal)) / 1e12
            r[f"ms_{key}"] = t.median_ms
    df = pd.DataFrame(rows)
    for c in ("tflops_full", "tflops_causal", "ms_full", "ms_causal"):
        if c not in df:
            df[c] = np.nan
    df["ms_total"] = df["ms_full"] + df["ms_causal"]
    by_variant: dict = {}
    for (variant, D), g in df[df["status"] == "ok"].groupby(["variant", "D"]):
        by_variant.setdefault(variant, {})[str(D)] = str(g.loc[g["ms_total"].idxmin(), "config"])
    missing = [f"{v} D={D}" for v in searched for D in TC_D if str(D) not in by_variant.get(v, {})]
    if missing:
        raise RuntimeError(f"no choice ran correctly for {', '.join(missing)}: "
                           + "; ".join(f"{r.config} D={r.D}: {r.status}" for r in df.itertuples() if r.status != "ok"))
    df["winner"] = [by_variant.get(v, {}).get(str(d)) == c for v, d, c in zip(df["variant"], df["D"], df["config"])]
    df = df[["variant", "D", "config", "tflops_full", "tflops_causal", "ms_total", "status", "winner"]]
    path = None
    if save:
        path = htune.save("attention", device, {"size": f"B{BENCH_B}xH{BENCH_H}xS{size}",
                                                "winners": by_variant["03_flash_bf16"],
                                                "winners_by_variant": by_variant}, df)
        _tuned.clear()
    return df, path


# --- the executable -------------------------------------------------------------------------

def parse_output(text: str):
    """build/bin/attention's result lines as a DataFrame (numbers converted)."""
    return results.parse_output(text, "attention")


def run(*args, timeout: float = 300):
    """Run build/bin/attention with argv `args` (e.g. "--variant", "03_flash_bf16", 4, 16, 4096, 128)
    and parse its result line; a failed self-check raises ProgramError."""
    return results.run("attention", *args, timeout=timeout)


# --- hooks for `invoke profile` and `invoke sanitize` (small, ragged sizes; see harness/profiling/profile.py) ---
# `invoke profile attention` with no variant: CUDA-core FP32 flash beside the tensor-core BF16 one.
PROFILE_VARIANTS = ("02_flash", "03_flash_bf16")


def profile_args(variant: str | None = None) -> list[str]:
    return ["--variant", variant or "03_flash_bf16", "--reps", "1", "2", "2", "67", "64"]


def sanitize_args() -> dict[str, list[str]]:
    """Every variant at a ragged S (two key tiles, the second partial), B*H = 3; the tensor-core
    variants also causal and at D=128. The sanitizers slow kernels down a hundredfold."""
    out = {}
    for v in library.read_table(PROGRAM):
        out[v] = ["--variant", v, "--reps", "1", "1", "3", "67", "64"]
        out[f"{v}-causal"] = ["--variant", v, "--causal", "--reps", "1", "1", "3", "130", "64"]
        if v in ("03_flash_bf16", "04_flash_3xtf32", "05_flash_wgmma") or is_backward(v):
            out[f"{v}-d128"] = ["--variant", v, "--causal", "--reps", "1", "3", "1", "67", "128"]
    # Each tuning choice of 03 (the tuner may pick any): causal at D=128, S=130 (ragged for 32- and
    # 64-key tiles), and at D=64, where 32 rows a warp keep Q in registers.
    for c in library.read_table(PROGRAM, "config"):
        v = config_variant(c)
        out[f"{v}-{c}-d128"] = ["--config", c, "--causal", "--reps", "1", "1", "3", "130", "128"]
        out[f"{v}-{c}-d64"] = ["--config", c, "--reps", "1", "3", "1", "67", "64"]
    return out


# --- the exercises this program offers (their problems: attention_exercises.py) -----------------------------

EXERCISES = (
    Exercise(
        "flash_softmax", origin="CUDA course, section 4 (flash attention's online softmax)",
        writes="the online-softmax update: the running max, the rescaled sum and output",
        tracks=("python", "cuda"), problem=_ex.FlashSoftmax(), py_entry="flash_bk",
        cu_source="cuda/shared/attention/attention_kernels.cuh", cu_kernels=("attn_flash_fwd",), glue="exercise_flash_softmax.cu",
        cu_includes="#include <cmath>\n",
        hints=("Keep, per query row, the largest score seen so far (m), the sum of exp(score - m) (l) and the sum of "
             "exp(score - m) * v (o).",
             "When a tile brings a larger max m', everything summed so far was scaled by exp(-m); multiply l and o "
             "by alpha = exp(m - m') to bring them to exp(-m').",
             "On the first tile m is -inf: alpha must be 0 there (exp(-inf) is 0; in Python write it out, since "
             "-inf - -inf is NaN). The CUDA kernel's scores are in base 2: exp2f, not expf."),
        block="64 query rows a block, 128 threads (Python: 4 rows, 4-key tiles)",
    ),
    Exercise(
        "flash_bwd", origin="FlashAttention-2 paper, Algorithm 2 (backward)",
        writes="the backward's recurrence for one key block: P recomputed from the saved log-sum-exp, "
               "dV += Pᵀ dO, dS = P * (dP - delta), dK += scale * dSᵀ Q",
        tracks=("python",), problem=_ex.FlashBwd(), py_entry="flash_bwd_kb",
        hints=("Your thread owns key j (k_j and v_j, in kj and vj). For each query i of the tile the forward's weight "
               "is P_ij = exp(scale * q_i . k_j - L_i): L, the saved log-sum-exp (ls), already holds the row's max and "
               "sum, so nothing is normalised again. Mask the scores first: -inf where i >= S or, causal, where j > i "
               "(the diagonal j == i stays), then exp(-inf - L) is 0.",
               "dV_j is row j of Pᵀ dO: the sum over the tile's queries of P_ij * dO_i, p @ dos (key j's column of P "
               "weighs the rows of dO). dP_ij = dO_i . v_j is dos @ vj, and dS_ij = P_ij * (dP_ij - delta_i), with "
               "delta_i = rowsum(dO_i * O_i) loaded with the tile (dl).",
               "dK_j = scale * sum_i dS_ij * q_i, scale * (ds @ qs): the scores were scale * q . k, so the chain rule "
               "brings the scale back. Add into dvj and dkj at every query tile; never restart them inside the loop."),
        block=f"{BWD_BC} key rows a block, one per thread; query tiles of {BWD_BR} rows in shared memory",
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name='attention',
    summary="naive attention, then flash attention's online softmax",
    follows='intro course §4, [GPU MODE lecture 12](https://github.com/gpu-mode/lectures/tree/main/lecture_012)',
    order=80,
    readme_picture='[ratios](bench/results/h100/attention_ratios-20261124T104549.png)',
    variants=True,
    profile_variants=PROFILE_VARIANTS,
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    unsupported_reason=unsupported_reason,
    bench_cases=bench_cases,
    ceilings=ceilings,
    tune=tune,
    run=run,
    parse_output=parse_output,
    reference=reference,
    on_cpu=on_cpu,
    tour=Tour("each attention variant as a ratio to torch's SDPA at the same shape", drawn=('plots/attention_ratios*.png',), committed=('bench/results/h100/attention_ratios-20261124T104549.png',)),
    exercises=EXERCISES,
)
