"""gemm_tc: BF16 GEMM on the tensor cores (FP32 accumulation), a ladder from WMMA to Hopper's wgmma + TMA.

    C (m, n) float32 = A (m, k) bf16 @ B.T, with B given as (n, k) bf16

Layout ("TN"): both operands are K-contiguous, as nn.Linear stores its weight; `matmul(a, b)` takes a
(k, n) B instead and transposes it with a copy. The cuBLAS baselines run the same layout.

Variants (the C table, read through gemm_tc_variant_count/_name):
  01_wmma      nvcuda::wmma, one warp per 16x16 output fragment: the first tensor-core kernel
  02_mma_sync  mma.sync m16n8k16 + ldmatrix, warp tiling, 128-byte-swizzled shared memory,
               a 4-stage cp.async pipeline (sm_80 and newer)
  03_wgmma     sm_90a: TMA into 128B-swizzled shared memory, mbarrier pipeline, producer/consumer
               warpgroups issuing wgmma (elsewhere: "needs sm_90a", and its tests skip with that reason)
  04_wgmma_persistent  03's kernel on a persistent grid (one block per SM walking the tiles): the
               next tile's loads start during this tile's epilogue (issue 20's first rung)
  05_wgmma_cluster  04 with clusters of two CTAs on vertically adjacent tiles: each fetches half of
               the shared B tile and multicasts it to both (TMA multicast), a third fewer L2 bytes
  cublas_bf16  cublasGemmEx, bf16 in, FP32 compute: the ceiling of the bench
  cublas_tf32  cublasGemmEx on float32 copies of the same values with TF32 tensor cores (for reference)

dtypes: the API takes `ml_dtypes.bfloat16` arrays. float32 is never rounded silently: a float32
array is refused with TypeError; round it yourself with `to_bf16(x)` (round-to-nearest-even).

Ragged shapes: 01 and 02 take any m, n, k >= 0 (02 with k % 8 != 0 takes a slower element-wise
load path); 03, 04 and 05 take any m, n, and a k that is not a multiple of 8 (TMA needs 16-byte row
strides) through zero-padded copies of A and B made on the stream before the launch. A refused shape
(01's grid limit on m) raises ValueError naming the limit, before anything is launched.

Tolerance: the reference is the float64 product of the same bf16 values, so the products are exact
and only the FP32 accumulation differs: random-sign rounding grows like sqrt(k) * 2^-24 (4e-6 at
k = 4096). TOL = 1e-4 for every k the tests and bench use (k <= 8192), room for the tensor cores'
own accumulation order while a kernel that drops one 64-wide K tile misses by more than 0.1 at
k <= 4096 (tests/test_gemm_tc.py shows the checker rejecting exactly that).
"""

from __future__ import annotations

import contextlib
import math

import ml_dtypes
import numpy as np

from .. import library
from .. import results as _results

BF16 = np.dtype(ml_dtypes.bfloat16)
KERNELS = ("01_wmma", "02_mma_sync", "03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster")
PROFILE_VARIANTS = KERNELS + ("cublas_bf16",)
TOL = 1e-4
INT_MAX = 2**31 - 1
K_TILE = 64  # the K depth of one pipeline stage in 02 and 03

# Dense BF16 tensor-core FLOP per clock per SM, by compute capability (FP32 accumulation):
#   8.0 (A100): 4 tensor cores x 256 FMA/clk = 2048 FLOP/clk (312 TFLOP/s = 108 SMs x 2048 x 1410 MHz)
#   9.0 (H100/H200): 4 tensor cores x 512 FMA/clk = 4096 FLOP/clk (the H100 SXM whitepaper's
#   989.4 TFLOP/s = 132 SMs x 4096 x 1830 MHz)
BF16_FLOP_PER_CLK_PER_SM = {(8, 0): 2048, (9, 0): 4096}


# --- the library ---------------------------------------------------------------------------------

def _lib():
    return library.load("gemm_tc")


def _str(lib, p) -> str | None:
    return None if p == lib.ffi.NULL else lib.ffi.string(p).decode()


def variants() -> list[str]:
    """The variant names, from the library's one table."""
    from . import variants_from_library

    return variants_from_library("gemm_tc")


def have_cublas() -> bool:
    return bool(_lib().gemm_tc_have_cublas())


def unsupported_reason(variant: str) -> str | None:
    """None when `variant` runs here, else why not ("needs sm_90a: ...", "built without cuBLAS")."""
    lib = _lib()
    return _str(lib, lib.gemm_tc_unsupported_reason(variant))


def requirement(variant: str, m: int, n: int, k: int) -> str | None:
    """None when `variant` takes this shape, else the rule it breaks (names the multiple)."""
    lib = _lib()
    return _str(lib, lib.gemm_tc_requirement(variant, int(m), int(n), int(k)))


def to_bf16(x) -> np.ndarray:
    """x rounded to bfloat16 (round to nearest, ties to even: what ml_dtypes' cast does), as a new
    C-contiguous ml_dtypes.bfloat16 array. The one place float values become bf16."""
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32).astype(BF16))


def _check_variant(variant: str) -> None:
    known = variants()
    if variant not in known:
        raise ValueError(f"unknown gemm_tc variant {variant!r}; valid: {', '.join(known)}")


def _check_operands(a, b) -> tuple[np.ndarray, np.ndarray]:
    for name, x in (("a", a), ("b", b)):
        if isinstance(x, np.ndarray) and x.dtype == np.float32:
            raise TypeError(f"{name} is float32: round it explicitly with gemm_tc.to_bf16({name}) "
                            "(bf16 keeps 8 significant bits; nothing is rounded silently)")
    a = library.check_array(a, "a", BF16, ndim=2)
    b = library.check_array(b, "b", BF16, ndim=2)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"gemm_tc shapes do not match (a is m x k, b is n x k): a is {a.shape}, b is {b.shape}")
    if max(a.shape + b.shape) > INT_MAX:
        raise ValueError(f"dimensions must be below 2^31: a is {a.shape}, b is {b.shape}")
    return a, b


def check_runnable(variant: str, m: int, n: int, k: int) -> None:
    """ValueError unless `variant` runs here on this shape (nothing is launched)."""
    _check_variant(variant)
    why = unsupported_reason(variant)
    if why:
        raise ValueError(f"variant {variant!r} cannot run here: {why}")
    rule = requirement(variant, m, n, k)
    if rule:
        raise ValueError(f"variant {variant!r} refuses m={m} n={n} k={k}: {rule}")


def gemm(a: np.ndarray, b: np.ndarray, variant: str = "02_mma_sync") -> np.ndarray:
    """a (m, k) @ b.T with b (n, k), both ml_dtypes.bfloat16 and C-contiguous (else TypeError /
    ValueError); returns a new (m, n) float32 array. Every check happens before any launch."""
    a, b = _check_operands(a, b)
    (m, k), n = a.shape, b.shape[0]
    check_runnable(variant, m, n, k)
    out = np.empty((m, n), dtype=np.float32)
    if out.size == 0:
        return out
    _lib().gemm_tc_host(variant, m, n, k, a, b, out)
    return out


def matmul(a: np.ndarray, b: np.ndarray, variant: str = "02_mma_sync") -> np.ndarray:
    """a (m, k) @ b (k, n), bf16: b is transposed into a contiguous (n, k) copy first."""
    if not isinstance(b, np.ndarray) or b.ndim != 2:
        raise ValueError(f"b must be a 2-D array, got {getattr(b, 'shape', type(b).__name__)}")
    return gemm(a, np.ascontiguousarray(b.T), variant)


def gemm_device(variant: str, m: int, n: int, k: int, a_ptr, b_ptr, c_ptr, stream=None) -> None:
    """Device pointers, enqueued on `stream` with no sync: for the timing loop. cublas_tf32 takes
    float32 operands (gemm_tc_tf32_device)."""
    lib = _lib()
    if variant == "cublas_tf32":
        lib.gemm_tc_tf32_device(int(m), int(n), int(k), a_ptr, b_ptr, c_ptr, stream)
    else:
        lib.gemm_tc_device(variant, int(m), int(n), int(k), a_ptr, b_ptr, c_ptr, stream)


@contextlib.contextmanager
def dropped_k_tiles(t: int = 1):
    """Test-only: inside the block 02_mma_sync, 03_wgmma and 04 skip their last `t` K tiles."""
    lib = _lib()
    lib.gemm_tc_set_fault_drop_k_tiles(int(t))
    try:
        yield
    finally:
        lib.gemm_tc_set_fault_drop_k_tiles(0)


# --- reference and checker -----------------------------------------------------------------------

def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b.T in float64 from the bf16 values (b is n x k)."""
    return np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64).T


def tolerance(k: int) -> float:
    """The allowed ||out - ref|| / ||ref|| for a reduction of depth k (see the module docstring)."""
    return max(TOL, 4.0 * math.sqrt(max(k, 1)) * 2.0**-24)


def check(out: np.ndarray, ref: np.ndarray, k: int) -> tuple[bool, float]:
    """(ok, relative error). NaN anywhere (an unwritten, poisoned element) fails."""
    e = _results.relative_error(out, ref)
    return bool(np.isfinite(e) and e <= tolerance(k)), e


# --- Python twin: who holds what in mma.sync m16n8k16 ---------------------------------------------

def mma_fragments(lane: int) -> dict:
    """The (row, col) elements one lane holds in mma.sync.m16n8k16 (tc_ptx.cuh's comment, as data):
    a: 8 elements of A (16x16), b: 4 of B (16x8, indexed (k, n)), c: 4 of C (16x8)."""
    g, t = lane // 4, lane % 4
    a = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
         (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8), (g + 8, 2 * t + 9)]
    b = [(2 * t, g), (2 * t + 1, g), (2 * t + 8, g), (2 * t + 9, g)]
    c = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]
    return {"a": a, "b": b, "c": c}


def mma_m16n8k16_twin(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """D = A (16x16) @ B (16x8) computed the way the warp does: each lane gathers its fragments,
    the "tensor core" sees only the 32 lanes' registers, and each lane writes back its 4 outputs.
    Agrees with a @ b exactly when every element is covered once (the layout is a partition)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    regs_a = np.full((16, 16), np.nan)
    regs_b = np.full((16, 8), np.nan)
    for lane in range(32):
        f = mma_fragments(lane)
        for (r, c) in f["a"]:
            regs_a[r, c] = a[r, c]
        for (r, c) in f["b"]:
            regs_b[r, c] = b[r, c]
    full = regs_a @ regs_b  # NaN would spread if a fragment missed an element
    d = np.full((16, 8), np.nan)
    for lane in range(32):
        for (r, c) in mma_fragments(lane)["c"]:
            d[r, c] = full[r, c]
    return d


# --- the executable -----------------------------------------------------------------------------

def parse_output(text: str):
    """build/bin/gemm_tc's result lines as a DataFrame."""
    return _results.parse_output(text, "gemm_tc")


def run(*args, timeout: float = 300):
    """Run build/bin/gemm_tc with args and parse its result lines (a failed check raises ProgramError)."""
    return _results.run("gemm_tc", *args, timeout=timeout)


def profile_args(variant: str | None = None) -> list[str]:
    """One profiled run: 4096^3, where the tensor pipes are busy long enough to mean something."""
    return ["--variant", variant or "02_mma_sync", "--reps", "1", "4096", "4096", "4096"]


def sanitize_args() -> dict[str, list[str]]:
    """Small ragged runs for compute-sanitizer (every rung; 03 with k % 8 == 0)."""
    out = {v: ["--variant", v, "--reps", "1", "200", "136", "72"] for v in KERNELS + ("cublas_bf16",)}
    out["02_mma_sync-k_unaligned"] = ["--variant", "02_mma_sync", "--reps", "1", "67", "33", "131"]
    out["04_wgmma_persistent-k_unaligned"] = ["--variant", "04_wgmma_persistent", "--reps", "1", "67", "33", "131"]
    # 05 with an odd number of 128-row tiles: the cluster's second CTA reads a tile wholly past m.
    out["05_wgmma_cluster-odd_tiles"] = ["--variant", "05_wgmma_cluster", "--reps", "1", "300", "260", "64"]
    return out


# --- benchmarks ---------------------------------------------------------------------------------

BENCH_SIZES = (2048, 4096, 8192)
# Issue 11's targets for 02 and 03; issue 20's for 04 (1.05 at 4096^3 and 8192^3, 1.0 at 2048^3; only the
# 4096^3 one is a target column here).
TARGETS_4096 = {"05_wgmma_cluster": 1.05, "04_wgmma_persistent": 1.05, "03_wgmma": 0.90, "02_mma_sync": 0.50}


def _bench_buffers(size: int, tf32: bool):
    from .. import cudart

    rng = np.random.default_rng(0)
    a = to_bf16(rng.uniform(-1, 1, (size, size)))
    b = to_bf16(rng.uniform(-1, 1, (size, size)))
    if tf32:
        a, b = a.astype(np.float32), b.astype(np.float32)
    bufs = (cudart.DeviceBuffer.from_array(a), cudart.DeviceBuffer.from_array(b), cudart.DeviceBuffer(4 * size * size))
    return bufs


def variant_setup(variant: str, size: int):
    """harness.timing's target: random bf16 operands (float32 copies for cublas_tf32) and one launch of
    `variant` at size^3."""
    from .. import bench

    bufs = _bench_buffers(size, variant == "cublas_tf32")
    a, b, c = bufs

    def close():
        for buf in bufs:
            buf.close()

    return bench.Prepared(lambda s: gemm_device(variant, size, size, size, a.ptr, b.ptr, c.ptr, s), close)


def _cublas_ceiling(size: int):
    def measure(quick: bool = False):
        from .. import bench

        if not have_cublas():
            return None
        return bench.TimedCeiling(f"cublas_bf16_{size}", "TFLOP/s", 2.0 * size**3, "harness.programs.gemm_tc:variant_setup",
                                  {"variant": "cublas_bf16", "size": size},
                                  f"cuBLAS BF16 GemmEx {size}^3 (TN, FP32 compute)",
                                  same_as=("gemm_tc", "cublas_bf16-peak", f"{size}^3"))
    return measure


def bf16_peak_tflops(device: int = 0) -> tuple[float, str] | None:
    """SMs x dense BF16 FLOP/clk/SM x the device's reported clock (the attributes device_info
    reads, asked of the runtime directly), with how it was computed."""
    from .. import cudart

    d = {k: cudart.attribute(k, device) for k in ("cc_major", "cc_minor", "sm_count", "clock_khz")}
    per_sm = BF16_FLOP_PER_CLK_PER_SM.get((d["cc_major"], d["cc_minor"]))
    if per_sm is None:
        return None
    tf = d["sm_count"] * per_sm * d["clock_khz"] * 1e3 / 1e12
    return tf, f"{d['sm_count']} SMs x {per_sm} FLOP/clk/SM x {d['clock_khz'] / 1e3:.0f} MHz (reported clock)"


def _bf16_peak(quick: bool = False):
    from .. import bench

    p = bf16_peak_tflops()
    return None if p is None else bench.Ceiling("bf16_peak", p[0], "TFLOP/s", p[1])


def ceilings() -> dict:
    """cuBLAS BF16 at each bench size (measured in the same run) and the dense BF16 peak."""
    out = {f"cublas_bf16_{s}": _cublas_ceiling(s) for s in BENCH_SIZES}
    out["bf16_peak"] = _bf16_peak
    return out


def bench_cases(quick: bool = False):
    """2048^3, 4096^3, 8192^3 (2048^3 with --quick): every rung against cuBLAS BF16 timed in the same
    run (targets at 4096^3: 03 >= 0.90, 02 >= 0.50), and every variant as a fraction of the BF16 peak."""
    from .. import bench

    try:
        runnable = [v for v in variants() if unsupported_reason(v) is None]
    except Exception:  # library not built: no cases
        return []
    sizes = BENCH_SIZES[:1] if quick else BENCH_SIZES
    cases = []
    for size in sizes:
        flops = 2.0 * size**3

        def make_setup(variant, size=size):
            return lambda: variant_setup(variant, size)

        nbytes = 2.0 * 2 * size * size + 4.0 * size * size  # read A and B (bf16), write C (float32)
        for v in runnable:
            if v != "cublas_tf32" and requirement(v, size, size, size):
                continue
            if v in KERNELS and have_cublas():
                target = TARGETS_4096.get(v) if size == 4096 else None
                cases.append(bench.BenchCase("gemm_tc", v, f"{size}^3", make_setup(v), "TFLOP/s", flops,
                                             f"cublas_bf16_{size}", target=target, quick=True, bytes=nbytes,
                                             flops=flops, note="fraction of cuBLAS BF16 (same run)"))
            cases.append(bench.BenchCase("gemm_tc", f"{v}-peak", f"{size}^3", make_setup(v), "TFLOP/s", flops,
                                         "bf16_peak", quick=True, bytes=nbytes, flops=flops,
                                         note="fraction of the dense BF16 peak"))
    return cases
