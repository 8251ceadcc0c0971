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
               next tile's loads start during this tile's epilogue
  05_wgmma_cluster  04 with clusters of two CTAs on vertically adjacent tiles: each fetches half of
               the shared B tile and multicasts it to both (TMA multicast), a third fewer L2 bytes
  06_wgmma_tuned  the wgmma configuration `invoke tune gemm_tc` found fastest on this GPU (cached in
               bench/results/<gpu>/gemm_tc-tune.json), else 04's
  07_wgmma_pingpong  sm_90a, CUTLASS's "ping-pong" schedule: persistent, each of the two consumer
               warpgroups owns whole 128x128 tiles (alternate tiles of the block's walk), and they take
               turns on the tensor cores (named barriers), so one stores its tile while the other's
               mainloop runs
  08_wgmma_tma_store  04 with the epilogue through shared memory: registers -> swizzled boxes ->
               TMA store, drained while the next tile's mainloop runs, on a balanced persistent grid
               (the fewest blocks that keep the same number of rounds); n % 4 != 0 (TMA's 16-byte row
               pitch) takes 04's direct stores
  cublas_bf16  cublasGemmEx, bf16 in, FP32 compute: the ceiling of the bench
  cublas_tf32  cublasGemmEx on float32 copies of the same values with TF32 tensor cores (for reference)

dtypes: the API takes `ml_dtypes.bfloat16` arrays. float32 is never rounded silently: a float32
array is refused with TypeError; round it yourself with `to_bf16(x)` (round-to-nearest-even).

Tuning: 03-08 each run one entry of the library's configuration table (`library.read_table("gemm_tc", "config")`):
a wgmma kernel with the schedule (03 per tile, 04 persistent, 05 clusters of two: 03's body with
128x256x64 tiles and 3 or 4 stages; 07 ping-pong: 128x128x64 tiles, 4 or 6 stages; 08: 04 with the
TMA-store epilogue, 4 stages, persistent or in clusters of two: "-c2" after the tile), the mbarrier
ring's depth and the tile raster (groups of 4, 8 or 16 tiles down M or along N) fixed, e.g.
"04_wgmma_persistent-128x256x64-s4-gm8" (04's default), "07_wgmma_pingpong-128x128x64-s6-gm8" (07's). `gemm(..., config=NAME)` runs
any entry; `tune()` checks each against the reference on ragged shapes, times them at size^3 and
caches the fastest per GPU, which 06_wgmma_tuned then runs (`variant_config`, `apply_tuned`).

Ragged shapes: 01 and 02 take any m, n, k >= 0 (02 with k % 8 != 0 takes a slower element-wise
load path); 03-08 take any m, n, and a k that is not a multiple of 8 (TMA needs 16-byte row
strides) through zero-padded copies of A and B made on the stream before the launch. A refused shape
(01's grid limit on m) raises ValueError naming the limit, before anything is launched.

Tolerance: the reference is the float64 product of the same bf16 values, so the products are exact
and only the FP32 accumulation differs: random-sign rounding grows like sqrt(k) * 2^-24 (4e-6 at
k = 4096). TOL = 1e-4 for every k the tests and bench use (k <= 8192), room for the tensor cores'
own accumulation order while a kernel that drops one 64-wide K tile misses by more than 0.1 at
k <= 4096 (cuda/gemm_tc/test_gemm_tc.py shows the checker rejecting exactly that).
"""

from __future__ import annotations

import functools
import math
import re

import ml_dtypes
import numpy as np

from harness.calling import library
from harness.calling import results as _results
from harness.programs.record import Program, Tour

BF16 = np.dtype(ml_dtypes.bfloat16)
TUNED = "06_wgmma_tuned"
PINGPONG = "07_wgmma_pingpong"
TMA_STORE = "08_wgmma_tma_store"
# KERNELS (the lab's own rungs, 01-08) and WGMMA (the sm_90a ones, one configuration each: 03's kernel
# body for 03-06 and 08, or 07's ping-pong kernel) are kinds the library's table tags (gemm_tc_variant_tags),
# read when first asked for, like VARIANTS; PROFILE_VARIANTS: every rung beside cuBLAS's bf16 GEMM.
TOL = 1e-4
INT_MAX = 2**31 - 1
K_TILE = 64  # the K depth of one pipeline stage in 02 and 03

# Dense BF16 tensor-core FLOP per clock per SM, by compute capability (FP32 accumulation):
#   8.0 (A100): 4 tensor cores x 256 FMA/clk = 2048 FLOP/clk (312 TFLOP/s = 108 SMs x 2048 x 1410 MHz)
#   9.0 (H100/H200): 4 tensor cores x 512 FMA/clk = 4096 FLOP/clk (the H100 SXM whitepaper's
#   989.4 TFLOP/s = 132 SMs x 4096 x 1830 MHz)
BF16_FLOP_PER_CLK_PER_SM = {(8, 0): 2048, (9, 0): 4096}


# --- the library ---------------------------------------------------------------------------------

PROGRAM = "gemm_tc"


# VARIANTS is the library's one table (cuda/gemm_tc), read when first asked for: never typed here.
__getattr__ = library.table_attributes(__name__, PROGRAM, KERNELS=lambda: library.tagged(PROGRAM, "kernel"),
                                       WGMMA=lambda: library.tagged(PROGRAM, "wgmma"),
                                       PROFILE_VARIANTS=lambda: _profile_variants())


def _profile_variants() -> tuple[str, ...]:
    return (*library.tagged(PROGRAM, "kernel"), "cublas_bf16")


def _lib():
    return library.load("gemm_tc")


def _str(lib, p) -> str | None:
    return None if p == lib.ffi.NULL else lib.ffi.string(p).decode()




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
    library.table_index(PROGRAM, "variant", variant)


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


def gemm(a: np.ndarray, b: np.ndarray, variant: str = "02_mma_sync", config: str | None = None) -> np.ndarray:
    """a (m, k) @ b.T with b (n, k), both ml_dtypes.bfloat16 and C-contiguous (else TypeError /
    ValueError); returns a new (m, n) float32 array. Every check happens before any launch.
    `config` runs one wgmma configuration by name (the library's config table) instead of a variant; 06_wgmma_tuned
    runs this GPU's cached winner (apply_tuned)."""
    a, b = _check_operands(a, b)
    (m, k), n = a.shape, b.shape[0]
    if config is not None:
        ci = library.table_index(PROGRAM, "config", config)
        why = unsupported_reason("03_wgmma")
        if why:
            raise ValueError(f"configuration {config!r} cannot run here: {why}")
    else:
        check_runnable(variant, m, n, k)
    out = np.empty((m, n), dtype=np.float32)
    if out.size == 0:
        return out
    if config is not None:
        _lib().gemm_tc_config_host(ci, m, n, k, a, b, out)
        return out
    if variant == TUNED:
        apply_tuned()
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
        if variant == TUNED:
            apply_tuned()
        lib.gemm_tc_device(variant, int(m), int(n), int(k), a_ptr, b_ptr, c_ptr, stream)


def config_device(config: str, m: int, n: int, k: int, a_ptr, b_ptr, c_ptr, stream=None) -> None:
    """One wgmma configuration on device pointers, enqueued on `stream` (the tuner's launch)."""
    if min(m, n, k) < 0:
        raise ValueError(f"sizes must be >= 0, got m={m} n={n} k={k}")
    _lib().gemm_tc_config_device(library.table_index(PROGRAM, "config", config), int(m), int(n), int(k), a_ptr, b_ptr, c_ptr, stream)


# --- the wgmma configurations (the tuner's search space) ----------------------------------------





_CONFIG_RE = re.compile(r"^(?P<rung>0[34578]_wgmma[a-z_]*)-(?P<bm>\d+)x(?P<bn>\d+)x(?P<bk>\d+)(?:-c(?P<cluster>2))?"
                        r"-s(?P<stages>\d+)"
                        r"-g(?P<order>[mn])(?P<group>\d+)$")
SCHEDULES = {"03_wgmma": "per_tile", "04_wgmma_persistent": "persistent", "05_wgmma_cluster": "cluster2",
             PINGPONG: "pingpong", TMA_STORE: "persistent_tma_store"}
# Rungs whose configurations may also run in clusters of two ("-c2" after the tile), and that schedule.
CLUSTER_SCHEDULES = {TMA_STORE: "cluster2_tma_store"}


def config_parts(name: str) -> dict:
    """A configuration's name read back into its choices: rung, schedule, tile (bm, bn, bk), stages,
    raster order ("m": groups down M, "n": along N) and group (tiles per group). ValueError otherwise."""
    m = _CONFIG_RE.match(name)
    if m is None or m["rung"] not in SCHEDULES or (m["cluster"] and m["rung"] not in CLUSTER_SCHEDULES):
        raise ValueError(f"not a gemm_tc configuration name: {name!r} "
                         "(expected <rung>-<bm>x<bn>x<bk>[-c2]-s<stages>-g<m|n><group>)")
    d = m.groupdict()
    schedule = CLUSTER_SCHEDULES[d["rung"]] if d["cluster"] else SCHEDULES[d["rung"]]
    return {"rung": d["rung"], "schedule": schedule, "bm": int(d["bm"]), "bn": int(d["bn"]),
            "bk": int(d["bk"]), "stages": int(d["stages"]), "order": d["order"], "group": int(d["group"])}


def variant_config(variant: str) -> str | None:
    """The configuration a wgmma variant runs (06_wgmma_tuned: this GPU's tuned one), None for the others."""
    _check_variant(variant)
    if variant == TUNED:
        apply_tuned()
    i = _lib().gemm_tc_variant_config(variant)
    return library.read_table(PROGRAM, "config")[i] if i >= 0 else None


def runs_as(variant: str) -> str:
    """What the library runs for `variant`: its configuration's name for 03-08, else the variant itself."""
    return variant_config(variant) or variant


def tuned_choice(device: str | None = None) -> tuple[str | None, str]:
    """(configuration, why) for 06_wgmma_tuned on `device`: the cached winner when `invoke tune gemm_tc`
    ran on this exact device and names a configuration this build has, else (None, why 04's default runs)."""
    from harness.measuring import tune as htune

    return htune.cached_winner(PROGRAM, device, functools.partial(library.read_table, PROGRAM, "config"))


def apply_tuned() -> str:
    """Point 06_wgmma_tuned at this GPU's cached winner unless already chosen in this process (the library
    holds the choice); returns the configuration it runs."""
    from harness.measuring import tune as htune

    return htune.apply_tuned(PROGRAM, tuned_choice)


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


# --- Python twin: the wgmma kernels' tile raster (corner() in k03_wgmma) ----------------------------

def raster_twin(tiles_m: int, tiles_n: int, group: int, order: str, cluster: int = 1) -> list[tuple[int, int]]:
    """The tile (row, column) each CTA computes, in unit order, as k03_wgmma's corner() hands them out:
    units of `cluster` vertically adjacent tiles, in groups of `group` tiles down M (order "m"; group /
    cluster units) or along N ("n"). A tile row past tiles_m is the cluster's idle half (zeros by TMA)."""
    units_m = -(-tiles_m // cluster)
    n_major = order == "n"
    per = group if n_major else max(1, group // cluster)
    along, across = (tiles_n, units_m) if n_major else (units_m, tiles_n)
    out = []
    for unit in range(units_m * tiles_n):
        g, in_group = divmod(unit, per * across)
        first = g * per
        width = min(along - first, per)
        a, b = first + in_group % width, in_group // width
        um, tn = (b, a) if n_major else (a, b)
        out += [(um * cluster + rank, tn) for rank in range(cluster)]
    return out


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
    out = {v: ["--variant", v, "--reps", "1", "200", "136", "72"] for v in _profile_variants()}
    out["02_mma_sync-k_unaligned"] = ["--variant", "02_mma_sync", "--reps", "1", "67", "33", "131"]
    out["04_wgmma_persistent-k_unaligned"] = ["--variant", "04_wgmma_persistent", "--reps", "1", "67", "33", "131"]
    # 05 with an odd number of 128-row tiles: the cluster's second CTA reads a tile wholly past m.
    out["05_wgmma_cluster-odd_tiles"] = ["--variant", "05_wgmma_cluster", "--reps", "1", "300", "260", "64"]
    # 07: ragged k through the padded copy (one tile: consumer 1 has none, only its opening arrival);
    # 17 x 17 = 289 tiles, more than twice the SMs, so blocks hold 2 or 3 tiles (both consumers
    # work, and with 3 consumer 0 has one tile more) while the ring wraps mid-tile (k = 136: 3 steps).
    out["07_wgmma_pingpong-k_unaligned"] = ["--variant", PINGPONG, "--reps", "1", "67", "33", "131"]
    out["07_wgmma_pingpong-both_consumers"] = ["--variant", PINGPONG, "--reps", "1", "2049", "2049", "136"]
    # 08: the TMA stores' ragged edges (n = 1000: a last box of 8 columns; m = 1000: a tile whose second
    # warpgroup has 40 rows), more tiles than SMs (the balanced grid, buffers reused across tiles), and
    # n % 4 != 0 (04's direct stores instead).
    out["08_wgmma_tma_store-ragged"] = ["--variant", TMA_STORE, "--reps", "1", "1000", "1000", "200"]
    out["08_wgmma_tma_store-many_tiles"] = ["--variant", TMA_STORE, "--reps", "1", "2049", "4104", "136"]
    out["08_wgmma_tma_store-n_unaligned"] = ["--variant", TMA_STORE, "--reps", "1", "67", "33", "131"]
    # The tuner may pick any configuration (06_wgmma_tuned runs it): every kernel instantiation
    # (schedule x stages) in both raster orders, groups of 16 (wider than this shape's 3 x 2 tiles, so
    # the last group is the ragged one). The group size is only index arithmetic in the tile walk;
    # cuda/gemm_tc/test_gemm_tc.py checks every configuration's answer.
    for c in configs_by_name():
        p = config_parts(c)
        if p["group"] == 16:
            out[f"06_wgmma_tuned-{c}"] = ["--config", c, "--reps", "1", "300", "260", "200"]
    return out


def configs_by_name() -> tuple[str, ...]:
    """The configuration names when the library loads, else () (sanitize_args is also asked on machines without a build)."""
    try:
        return library.read_table(PROGRAM, "config")
    except Exception:
        return ()


# --- benchmarks ---------------------------------------------------------------------------------

BENCH_SIZES = (2048, 4096, 8192)
# The targets: 02's and 03's below; 04-08's are 1.05 at 4096^3 and 8192^3, 1.0 at 2048^3 (only the
# 4096^3 one is a target column here).
TARGETS_4096 = {TUNED: 1.05, PINGPONG: 1.05, TMA_STORE: 1.05, "05_wgmma_cluster": 1.05, "04_wgmma_persistent": 1.05,
                "03_wgmma": 0.90, "02_mma_sync": 0.50}


def _bench_buffers(size: int, tf32: bool):
    from harness.calling import cudart

    rng = np.random.default_rng(0)
    a = to_bf16(rng.uniform(-1, 1, (size, size)))
    b = to_bf16(rng.uniform(-1, 1, (size, size)))
    if tf32:
        a, b = a.astype(np.float32), b.astype(np.float32)
    bufs = (cudart.DeviceBuffer.from_array(a), cudart.DeviceBuffer.from_array(b), cudart.DeviceBuffer(4 * size * size))
    return bufs


def variant_setup(variant: str, size: int):
    """harness.measuring.timing's target: random bf16 operands (float32 copies for cublas_tf32) and one launch of
    `variant` at size^3."""
    from harness.measuring import bench

    bufs = _bench_buffers(size, variant == "cublas_tf32")
    a, b, c = bufs

    def close():
        for buf in bufs:
            buf.close()

    # 06 runs this GPU's tuned configuration (set once here, not inside the timed launch); the note says which.
    note = f"ran {apply_tuned()}" if variant == TUNED else ""
    return bench.Prepared(lambda s: gemm_device(variant, size, size, size, a.ptr, b.ptr, c.ptr, s), close, note=note)


@functools.lru_cache(maxsize=1)
def _shared_buffers(size: int):
    """One set of operands per size for a tuning session (kept until the session's process exits)."""
    return _bench_buffers(size, False)


def config_setup(config: str, size: int):
    """harness.measuring.timing's target for `invoke tune gemm_tc`: one wgmma configuration at size^3, marshalled
    once (Library.prepare), so the timed launch is the C call alone."""
    from harness.measuring import bench

    a, b, c = _shared_buffers(size)
    launch = _lib().prepare("gemm_tc_config_device", library.table_index(PROGRAM, "config", config), size, size, size, a.ptr, b.ptr, c.ptr,
                            library.STREAM)
    return bench.Prepared(launch)


def _cublas_ceiling(size: int):
    def measure(quick: bool = False):
        from harness.measuring import bench

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
    from harness.calling import cudart

    d = {k: cudart.attribute(k, device) for k in ("cc_major", "cc_minor", "sm_count", "clock_khz")}
    per_sm = BF16_FLOP_PER_CLK_PER_SM.get((d["cc_major"], d["cc_minor"]))
    if per_sm is None:
        return None
    tf = d["sm_count"] * per_sm * d["clock_khz"] * 1e3 / 1e12
    return tf, f"{d['sm_count']} SMs x {per_sm} FLOP/clk/SM x {d['clock_khz'] / 1e3:.0f} MHz (reported clock)"


def _bf16_peak(quick: bool = False):
    from harness.measuring import bench

    p = bf16_peak_tflops()
    return None if p is None else bench.Ceiling("bf16_peak", p[0], "TFLOP/s", p[1])


def ceilings() -> dict:
    """cuBLAS BF16 at each bench size (measured in the same run) and the dense BF16 peak."""
    out = {f"cublas_bf16_{s}": _cublas_ceiling(s) for s in BENCH_SIZES}
    out["bf16_peak"] = _bf16_peak
    return out


def bench_cases(quick: bool = False):
    """2048^3, 4096^3, 8192^3 (2048^3 with --quick): every rung against cuBLAS BF16 timed in the same
    run (targets at 4096^3: 04-08 >= 1.05, 03 >= 0.90, 02 >= 0.50), and every variant as a fraction of the
    BF16 peak."""
    from harness.measuring import bench

    try:
        runnable = [v for v in library.read_table(PROGRAM) if unsupported_reason(v) is None]
        kernels = library.tagged(PROGRAM, "kernel")
    except Exception:  # library not built: no cases
        return []
    sizes = BENCH_SIZES[:1] if quick else BENCH_SIZES
    cases = []
    SETUP = "harness.programs.gemm_tc:variant_setup"
    for size in sizes:
        flops = 2.0 * size**3

        nbytes = 2.0 * 2 * size * size + 4.0 * size * size  # read A and B (bf16), write C (float32)
        for v in runnable:
            if v != "cublas_tf32" and requirement(v, size, size, size):
                continue
            if v in kernels and have_cublas():
                target = TARGETS_4096.get(v) if size == 4096 else None
                cases.append(bench.BenchCase("gemm_tc", v, f"{size}^3", SETUP, "TFLOP/s", flops,
                                             f"cublas_bf16_{size}", target=target, quick=True, bytes=nbytes,
                                             flops=flops, note="fraction of cuBLAS BF16 (same run)",
                                             kwargs={"variant": v, "size": size}))
            cases.append(bench.BenchCase("gemm_tc", f"{v}-peak", f"{size}^3", SETUP, "TFLOP/s", flops,
                                         "bf16_peak", quick=True, bytes=nbytes, flops=flops,
                                         note="fraction of the dense BF16 peak", kwargs={"variant": v, "size": size}))
    return cases


# --- tuning: which configuration 06_wgmma_tuned runs on this GPU ------------------------------------
# `invoke tune gemm_tc` (harness/measuring/tune.py) checks every configuration against the float64 reference on
# TUNE_CHECK_SHAPES, times the correct ones at size^3 in one NVBench session (harness.measuring.timing, cold:
# L2 flushed) and caches the fastest in bench/results/<gpu>/gemm_tc-tune.json; 06_wgmma_tuned then
# runs it (apply_tuned; the executable through --config, which `invoke run gemm_tc` passes).

TUNE_KINDS = ("03_wgmma", "04_wgmma_persistent", "05_wgmma_cluster", PINGPONG, TMA_STORE)  # every schedule
# Ragged against every tile and raster: 1000 x 4097 is 8 x 17 = 136 tiles (more than an H100's 132
# SMs, so persistent blocks walk a second tile, and 68 two-tile units for 05's clusters; 8 x 33 = 264
# of 07's 128 x 128 tiles, two per block: both of its consumers work), the last row and column of
# tiles partial, a group of 16 wider than the 8 tile rows, and k = 200 ends in a partial K tile;
# 33 x 7 x 1000: one tile, the ring wrapping 16 times; k = 4097: the padded copy. Those three have
# n % 4 != 0, where 08 falls back to direct stores; 1000 x 1000 x 136 runs 08's TMA stores over ragged
# edges (a last box of 8 columns, a last tile whose second warpgroup has 40 rows).
TUNE_CHECK_SHAPES = ((1000, 4097, 200), (33, 7, 1000), (7, 1, 4097), (1000, 1000, 136))


@functools.cache
def _tune_check_cases():
    rng = np.random.default_rng(20)
    cases = []
    for m, n, k in TUNE_CHECK_SHAPES:
        a, b = to_bf16(rng.uniform(-1, 1, (m, k))), to_bf16(rng.uniform(-1, 1, (n, k)))
        cases.append((a, b, reference(a, b)))
    return tuple(cases)


def _tune_check(config: str) -> str | None:
    """Why `config` must not be chosen ("refused: ..." where it cannot run here, "wrong answer ..."),
    or None: the search never times, let alone picks, a fast kernel that is wrong."""
    why = unsupported_reason("03_wgmma")
    if why:
        return f"refused: {why}"
    for a, b, ref in _tune_check_cases():
        (m, k), n = a.shape, b.shape[0]
        ok, e = check(gemm(a, b, config=config), ref, k)
        if not ok:
            return f"wrong answer ({m}x{n}x{k}: relative error {e:.2e})"
    return None


def tune(size: int = 4096, save: bool = True, on_progress=None, options=None, kinds=TUNE_KINDS):
    """Check, then time, every wgmma configuration of `kinds` (schedule, stages, raster) at size^3 with
    harness.measuring.timing; cache the fastest for this GPU, which 06_wgmma_tuned then runs.

    A configuration that gives a wrong answer on TUNE_CHECK_SHAPES, or that this GPU or build cannot
    run, is listed with the reason and never timed. `options` (harness.measuring.timing.Options) sets NVBench's
    knobs; the default is the bench's. Returns (table, path): one row per configuration (tflops, ms,
    iqr_ms, status, winner) and the JSON written (None when save=False): the device, the winner, the table.
    """
    from harness.base.errors import ContextLostError, CudaError
    from harness.calling import cudart
    from harness.measuring import timing
    from harness.measuring import tune as htune

    device = cudart.device_name(0)
    rows, items = [], []
    for name in library.read_table(PROGRAM, "config"):
        if not name.startswith(tuple(kinds)):
            continue
        try:
            why = _tune_check(name)
        except ContextLostError:
            raise
        except CudaError as e:  # e.g. no room for a cluster of two on this GPU: not a candidate here
            why = f"refused: {e}"
        if why:
            rows.append({"config": name, "status": why, "ms": np.nan, "iqr_ms": np.nan, "tflops": np.nan})
            continue
        rows.append({"config": name, "status": "ok"})
        items.append(timing.Item(name, "harness.programs.gemm_tc:config_setup", {"config": name, "size": size}))
    if not items:
        raise RuntimeError("no gemm_tc configuration could run correctly on this device: "
                           + "; ".join(f"{r['config']}: {r['status']}" for r in rows))
    # One NVBench session for every choice (harness.measuring.timing), each a cold measurement stopped on noise.
    return htune.time_and_pick("gemm_tc", device, rows, items, size, options, on_progress, save)


# --- `invoke run gemm_tc -- ...` ------------------------------------------------------------------
def cli(args: list[str], variant: str | None = None, **_) -> int:
    """tasks.run's hook: build/bin/gemm_tc with the tuned configuration passed as --config when the run
    includes 06_wgmma_tuned (the executable cannot read the JSON cache itself). Returns the exit status."""
    from harness.measuring import tune as htune

    return htune.run_with_tuned("gemm_tc", args, variant, TUNED, tuned_choice, "04's default configuration")


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name='gemm_tc',
    summary="the tensor cores: wmma, mma.sync, then Hopper's wgmma and TMA",
    follows='beyond the courses',
    order=100,
    readme_picture='[ladder](bench/results/h100/ladder_gemm_tc-20261124T211953.png)',
    variants=True,
    profile_variants=_profile_variants,
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    unsupported_reason=unsupported_reason,
    bench_cases=bench_cases,
    ceilings=ceilings,
    tune=tune,
    run=run,
    parse_output=parse_output,
    reference=reference,
    cli=cli,
    cli_options=('variant',),
    tour=Tour('the tensor-core ladder: each BF16 rung as a fraction of cuBLAS', drawn=('plots/ladder_gemm_tc*.png',), committed=('bench/results/h100/ladder_gemm_tc-20261124T211953.png',)),
)
