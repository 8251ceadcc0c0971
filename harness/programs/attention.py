"""attention: softmax(scale * Q Kᵀ) V in float32, the Stringer course's section 4, in CUDA C.

Q, K, V and the output are B x H x S x D, float32, C-contiguous. Variants:
    "01_naive"  S = scale·Q·Kᵀ and O = P·V with the matmul program's kernels, a row-wise stable
                softmax kernel between them; the B·H·S·S score matrix sits in device memory.
    "02_flash"  one fused kernel: tiles of Q, K and V in shared memory, an online softmax; the
                scores never reach device memory. D must be 32, 64 or 128.
"naive" and "flash" are accepted as the same two names. "flash_skip_last_tile" is a test-only,
deliberately wrong 02_flash (it ignores the last tile of keys) that the checker must reject.
"""

from __future__ import annotations

import math

import numpy as np

from .. import library, sim

VARIANTS = ("01_naive", "02_flash")
ALIASES = {"naive": "01_naive", "flash": "02_flash"}
TEST_VARIANTS = ("flash_skip_last_tile",)
FLASH_D = (32, 64, 128)
MAX_BH = 65535
# ||out - ref|| / ||ref|| a float32 attention must meet against the float64 reference.
# Why 1e-4 and not the 1e-5 of elementwise kernels: each output is a softmax-weighted mean of S
# values of V, after a D-term dot product for each score. The dot products round with relative
# error ~ sqrt(D)·2^-24 (~7e-7 at D=128) times |q||k|, which exp() turns into a relative error of
# the weights of about |score|·that; the weights' normalising sum and the P·V sum add ~sqrt(S)·2^-24
# (~4e-6 at S=4097, with random-walk rounding). Together that sits at 1e-6 to 1e-5 for unit-scale
# inputs; 1e-4 keeps a margin of 10x over the worst case seen, while a kernel that drops or
# duplicates one key tile, or reads a wrong row, is off by 1e-2 or more (test_attention.py shows it).
TOLERANCE = 1e-4


def _cstr(lib, s: str):
    """A C string for a `const char *` parameter (the marshaller takes cffi data, not str)."""
    return lib.ffi.new("char[]", s.encode())


def canonical_variant(variant: str, allow_test: bool = True) -> str:
    v = ALIASES.get(variant, variant)
    valid = VARIANTS + (TEST_VARIANTS if allow_test else ())
    if v not in valid:
        raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)} "
                         f"(or {', '.join(ALIASES)})")
    return v


def validate(q, k, v, variant: str = "02_flash", scale=None):
    """Check the inputs before any launch; returns (q, k, v, variant, scale, (B, H, S, D))."""
    variant = canonical_variant(variant)
    q = library.check_array(q, "q", np.float32, ndim=4)
    k = library.check_array(k, "k", np.float32, ndim=4, shape=q.shape)
    v = library.check_array(v, "v", np.float32, ndim=4, shape=q.shape)
    B, H, S, D = q.shape
    if min(q.shape) <= 0:
        raise ValueError(f"every dimension of B x H x S x D must be positive, got {q.shape}")
    if B * H > MAX_BH:
        raise ValueError(f"B*H must be at most {MAX_BH}, got {B * H}")
    if variant != "01_naive" and D not in FLASH_D:
        raise ValueError(f"{variant} needs D in {FLASH_D}, got D={D}; use 01_naive for other head sizes")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)) \
            or not math.isfinite(float(scale)):
        raise TypeError(f"scale must be a finite number, got {scale!r}")
    return q, k, v, variant, float(scale), (B, H, S, D)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False, scale=None,
              variant: str = "02_flash", out: np.ndarray | None = None) -> np.ndarray:
    """O = softmax(scale·QKᵀ [+ causal mask])·V on the GPU; scale defaults to 1/sqrt(D).
    Written into `out` when given (float32, C-contiguous, the shape of q)."""
    q, k, v, variant, scale, (B, H, S, D) = validate(q, k, v, variant, scale)
    if out is None:
        out = np.empty_like(q)
    else:
        out = library.check_array(out, "out", np.float32, shape=q.shape)
    lib = library.load("attention")
    lib.attention_forward(_cstr(lib, variant), B, H, S, D, int(bool(causal)), scale, q, k, v, out)
    return out


def workspace_bytes(variant: str, B: int, H: int, S: int, D: int) -> int:
    lib = library.load("attention")
    n = lib.attention_workspace_bytes(_cstr(lib, canonical_variant(variant)), B, H, S, D)
    if n < 0:
        raise ValueError(f"invalid sizes for {variant}: B={B} H={H} S={S} D={D}")
    return int(n)


def forward_device(variant: str, shape, causal: bool, q, k, v, o, workspace=None, scale=None, stream=None) -> None:
    """Enqueue one forward on device buffers (DeviceBuffer or pointers) on `stream`; for timing."""
    variant = canonical_variant(variant)
    B, H, S, D = (int(x) for x in shape)
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    lib = library.load("attention")
    lib.attention_forward_device(_cstr(lib, variant), B, H, S, D, int(bool(causal)), scale, q, k, v, o, workspace,
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


def rel_error(out, ref) -> float:
    """||out - ref|| / ||ref|| (Frobenius, in float64); NaN anywhere gives NaN."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"shapes differ: {out.shape} vs {ref.shape}")
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / den) if den else float(np.linalg.norm(out))


def check(out, ref, tol: float = TOLERANCE) -> bool:
    """The checker the tests use: rel_error <= tol (False for NaN)."""
    e = rel_error(out, ref)
    return bool(e <= tol)


# --- Python twin (harness.sim): the flash kernel's online softmax, one thread per query row ------

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
        m_new = max(m, s.max())
        alpha = math.exp(m - m_new) if m != -np.inf else 0.0
        p = np.exp(s - m_new)
        lsum = alpha * lsum + p.sum()
        o = alpha * o + p @ vs
        m = m_new
    if i < S:
        out[bh, i] = o / lsum


def twin(q, k, v, causal: bool = False, scale=None, br: int = 4, bc: int = 4) -> np.ndarray:
    """Run flash_bk through harness.sim.launch (float64, tiny shapes only)."""
    B, H, S, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    q3, k3, v3 = (np.asarray(a, dtype=np.float64).reshape(B * H, S, D) for a in (q, k, v))
    out = np.full((B * H, S, D), np.nan)
    sim.launch(flash_bk, sim.dim3(-(-S // br), B * H), sim.dim3(br), q3, k3, v3, out, S, D, scale, bool(causal),
               br, bc, shared={"k": ((bc, D), np.float64), "v": ((bc, D), np.float64)})
    return out.reshape(B, H, S, D)


# --- bench ------------------------------------------------------------------------------------

BENCH_B, BENCH_H, BENCH_S = 4, 16, 4096  # B·H = 64


def flops(B: int, H: int, S: int, D: int) -> float:
    """4·B·H·S²·D: two products of 2·S²·D each per (b, h)."""
    return 4.0 * B * H * S * S * D


def _torch_sdpa(D: int, quick: bool):
    """torch's scaled_dot_product_attention in float32 at the bench size, timed by harness.timing.
    allow_tf32 is switched off (matmul and cuDNN). For float32 inputs torch dispatches to its
    memory-efficient kernel (flash and cuDNN attention don't take float32); the math backend
    (cuBLAS SGEMMs + softmax, true FP32 with TF32 off) is timed too and named in the detail."""
    try:
        import torch
        import torch.nn.functional as F
    except Exception:  # torch missing or broken: no ceiling, ratios stay NaN
        return None
    if not torch.cuda.is_available():
        return None
    from .. import bench, cudart, timing

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    B, H, S = BENCH_B, BENCH_H, BENCH_S
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.rand(B, H, S, D, device="cuda", dtype=torch.float32, generator=g) * 2 - 1 for _ in range(3))

    def timed(backend=None):
        def launch(stream):
            ext = torch.cuda.ExternalStream(int(cudart.ffi.cast("uintptr_t", stream)))
            with torch.cuda.stream(ext):
                if backend is None:
                    F.scaled_dot_product_attention(q, k, v)
                else:
                    from torch.nn.attention import sdpa_kernel
                    with sdpa_kernel(backend):
                        F.scaled_dot_product_attention(q, k, v)
        return timing.time_launch(launch, reps=10 if quick else 20)

    t_default = timed()
    detail = f"torch {torch.__version__} SDPA, default backend, float32, allow_tf32=False, B*H={B * H} S={S} D={D}"
    try:
        from torch.nn.attention import SDPBackend
        t_math = timed(SDPBackend.MATH)
        detail += f"; math backend {t_math.rate(flops(B, H, S, D)) / 1e12:.1f} TFLOP/s"
        with torch.no_grad():  # accuracy of the default backend against float64, on 2 heads
            ref = F.scaled_dot_product_attention(q[:1, :2].double(), k[:1, :2].double(), v[:1, :2].double())
            got = F.scaled_dot_product_attention(q[:1, :2], k[:1, :2], v[:1, :2]).double()
            err = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))
        detail += f"; default backend rel err vs float64 {err:.1e}"
    except Exception as e:  # older torch: only the default backend
        detail += f"; (math backend not timed: {type(e).__name__})"
    torch.cuda.synchronize()
    return bench.Ceiling(f"sdpa_d{D}", t_default.rate(flops(B, H, S, D)) / 1e12, "TFLOP/s", detail, t_default)


def _sdpa_ceiling(D: int, quick: bool):
    """The registered ceiling: a torch failure leaves the ratio NaN (and says why) instead of
    aborting the whole bench run."""
    import sys

    try:
        return _torch_sdpa(D, quick)
    except Exception as e:
        print(f"attention: torch SDPA ceiling (D={D}) not measured: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def _register_ceilings() -> None:
    from .. import bench

    for d in (64, 128):
        bench.register_ceiling(f"sdpa_d{d}", lambda quick, d=d: _sdpa_ceiling(d, quick))


_register_ceilings()


def _bench_case(variant: str, D: int, S: int, quick: bool):
    from .. import bench, cudart

    B, H = BENCH_B, BENCH_H
    shape = (B, H, S, D)

    def setup():
        rng = np.random.default_rng(0)
        bufs = [cudart.DeviceBuffer.from_array(rng.uniform(-1, 1, shape).astype(np.float32)) for _ in range(3)]
        o = cudart.DeviceBuffer(int(np.prod(shape)) * 4)
        ws_n = workspace_bytes(variant, *shape)
        ws = cudart.DeviceBuffer(ws_n) if ws_n else None

        def launch(stream):
            forward_device(variant, shape, False, bufs[0], bufs[1], bufs[2], o, ws, None, stream)

        def close():
            for b in bufs + [o] + ([ws] if ws else []):
                b.close()

        return bench.Prepared(launch=launch, close=close)

    f = flops(B, H, S, D)
    return bench.BenchCase(
        program="attention", variant=variant, size=f"B{B}xH{H}xS{S}xD{D}", setup=setup, unit="TFLOP/s", amount=f,
        ceiling=f"sdpa_d{D}", target=0.5 if variant == "02_flash" else None, quick=quick, flops=f,
        bytes=4.0 * 4 * B * H * S * D, reps=10,
        note="non-causal; ratio to torch SDPA float32 (same run); issue 5 also asks flash >= 2x naive")


def bench_cases(quick: bool = False):
    cases = []
    for D in (64, 128):
        for variant in VARIANTS:
            cases.append(_bench_case(variant, D, BENCH_S, quick=True))
    return cases


# --- hooks for `invoke profile` and `invoke sanitize` (small, ragged sizes; see harness/profile.py) ---
def profile_args(variant: str | None = None) -> list[str]:
    return ["--variant", variant or VARIANTS[-1], "--reps", "1", "2", "2", "67", "64"]
