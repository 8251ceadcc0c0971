"""matmul: float32 row-major C = A @ B (GPU MODE lectures 3 and 5), the SGEMM ladder towards cuBLAS,
and a cuBLAS SGEMM baseline.

Variants (the one table is in cuda/matmul/matmul.cu; `library.read_table("matmul")` reads it from the library):
  01_naive          one thread per output, 16x16 blocks (lecture 3's matmul_k); `tile` is ignored
  02_tiled          shared-memory tiles, compile-time width 16 or 32 (lecture 5)
  03_tiled_dynamic  the same with the width chosen at run time, dynamic shared memory 2*tw*tw*4 bytes
  04_blocktile_1d   8 outputs per thread down a column (register blocking in one dimension)
  05_blocktile_2d   an 8x8 block of outputs per thread, outer products from registers
  06_vectorized     16-byte global loads, A transposed in shared memory, LDS.128 for both operands
  07_warptile       warp tiles, conflict-free shared layout (padded A rows)
  08_pipelined      cp.async into 3 shared stages: the next tiles load while this one multiplies
  09_tuned          the ladder configuration `invoke tune matmul` chose for this GPU (else 08's)
  10_regtile        a 16x8 tile per thread, one 256x128 block of 8 warps per SM (cuBLAS's shape); the barrier
                    moves before the last k-step so the next tile's first fragments load under its FFMAs
  11_splitk_tail    10 on a 1-D grid whose last, partial wave of tiles is split along k (atomicAdd into a
                    zeroed C) into as many slices (<= 16) as finish it soonest: the cubes' last wave, the
                    skinny 5120x256x5120 and the small sizes fill every SM (its tile: 09's H100 winner's)
  cublas            cuBLAS SGEMM (plain FP32, no TF32), only when the library was built against cuBLAS
04-11 ignore `tile` and take B as (k, n) only (no trans_b). Each ladder variant runs one entry of the
library's configuration table (`library.read_table("matmul", "config")`: block/warp tile and stages); `matmul(..., config=NAME)`
runs any entry.

Tolerance: ||out - ref|| / ||ref|| <= 1e-5 against a float64 reference. Each output is a float32
sum of k products; with random signs the rounding error grows like sqrt(k) * 2^-24 relative to the
result (about 4e-6 at k = 4096), so 1e-5 holds for every k the tests and benchmarks use. The ladder
kernels sum in a different order from 01-03 (k in steps of the tile, then within it), which moves
the error around inside that bound, not beyond it.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from harness.base.sim import blk_kernel2d, dim3, launch
from harness.calling import library, results
from harness.calling.cudart import MAX_GRID_YZ
from harness.programs import matmul_exercises as _ex
from harness.programs.record import Exercise, Program, Tour

if TYPE_CHECKING:  # the CPU paths return DataFrames; pandas is imported where they run
    import pandas as pd

STATIC_TILES = (16, 32)
NAIVE_BLOCK = 16
TOL = 1e-5
INT_MAX = 2**31 - 1
TUNED = "09_tuned"
PROGRAM = "matmul"


# VARIANTS and KERNEL_VARIANTS come from the library's one table, read when first asked for.
# LADDER: the rungs, the variants the C table gives a configuration (matmul_variant_config); CLASSIC: the
# other kernels, the lecture's three.
__getattr__ = library.table_attributes(
    __name__, PROGRAM, KERNEL_VARIANTS=lambda: tuple(v for v in library.read_table(PROGRAM) if v != "cublas"),
    LADDER=lambda: _ladder(), CLASSIC=lambda: _classic())


# --- the library ---------------------------------------------------------------------------------

def _lib():
    return library.load("matmul")


def _ladder() -> tuple[str, ...]:
    lib = _lib()
    return tuple(v for v in library.read_table(PROGRAM) if lib.matmul_variant_config(v) >= 0)


def _classic() -> tuple[str, ...]:
    return tuple(v for v in library.read_table(PROGRAM) if v != "cublas" and v not in _ladder())


def have_cublas() -> bool:
    """Whether libmatmul.so was built against cuBLAS (the Makefile found its header and library)."""
    return bool(_lib().matmul_have_cublas())


def tail_plan(tail: int, slots: int, ktiles: int) -> tuple[int, int]:
    """11_splitk_tail's rule, from the library (matmul.cu's tail_plan), for the `tail` tiles of a partial
    last wave with `slots` blocks resident and `ktiles` k-tiles a tile: (pieces a tile, kt_big). kt_big is
    0 for equal k-slices (or none, pieces = 1), else the k-tiles of the first of two uneven pieces."""
    lib = _lib()
    kt_big = lib.ffi.new("long long *")
    splits = int(lib.matmul_tail_plan(tail, slots, ktiles, kt_big))
    return splits, int(kt_big[0])








def variant_config(variant: str) -> str | None:
    """The configuration a ladder variant runs (09_tuned: the tuned one), None for the others."""
    if variant == TUNED:
        apply_tuned()
    i = _lib().matmul_variant_config(variant)
    return library.read_table(PROGRAM, "config")[i] if i >= 0 else None


def config_info(name: str) -> dict:
    """What a configuration needs and what this device allows (cudaFuncGetAttributes and the device's limits)."""
    lib = _lib()
    out = lib.ffi.new("int[7]")
    lib.matmul_config_info(library.table_index(PROGRAM, "config", name), out)
    keys = ("threads", "dynamic_smem", "static_smem", "registers", "max_threads_for_registers", "smem_limit",
            "local_bytes")
    return dict(zip(keys, list(out)))


def config_problem(info: dict) -> str | None:
    """Why a configuration cannot run on the device described by `info` (see config_info), or None."""
    if info["threads"] > info["max_threads_for_registers"]:
        return (f"needs {info['threads']} threads per block, but its {info['registers']} registers per thread "
                f"allow at most {info['max_threads_for_registers']} on this device")
    need = info["dynamic_smem"] + info["static_smem"]
    if need > info["smem_limit"]:
        return (f"needs {need} bytes of shared memory per block; this device allows at most {info['smem_limit']} "
                "(cudaDevAttrMaxSharedMemoryPerBlockOptin)")
    return None


def check_config(name: str, info: dict | None = None) -> None:
    """Raise ValueError naming the limit when configuration `name` does not fit the device."""
    why = config_problem(info if info is not None else config_info(name))
    if why:
        raise ValueError(f"matmul configuration {name}: {why}")


def smem_bytes(variant: str, tile: int, trans_b: bool = False) -> int:
    """Shared memory one block of `variant` uses: the A and B tiles (B's rows padded by one float
    when B is transposed, against bank conflicts); 0 for 01_naive and cuBLAS."""
    if variant in ("01_naive", "cublas"):
        return 0
    return 4 * (tile * tile + tile * (tile + (1 if trans_b else 0)))


def device_limits(device: int = 0) -> dict:
    from harness.calling import cudart

    return {"max_threads_per_block": cudart.attribute("max_threads_per_block", device),
            "smem_per_block": cudart.attribute("smem_per_block", device)}


def _check_variant(variant: str) -> None:
    library.table_index(PROGRAM, "variant", variant)


def check_tile(variant: str, tile: int, trans_b: bool = False, limits: dict | None = None) -> None:
    """Raise ValueError unless `variant` can run with this tile width on the device.

    `limits` (max_threads_per_block, smem_per_block) defaults to the current device's attributes.
    """
    _check_variant(variant)
    if variant in _ladder():
        if trans_b:
            raise ValueError(f"{variant} takes B as (k, n) only; trans_b is for {', '.join(_classic())} and cublas")
        check_config(variant_config(variant))
        return
    if variant == "cublas":
        if not have_cublas():
            raise ValueError("variant 'cublas': libmatmul.so was built without cuBLAS "
                             "(the Makefile did not find cublas_v2.h and libcublas.so beside nvcc; see `invoke doctor`)")
        return
    if variant == "01_naive":
        return
    if not isinstance(tile, (int, np.integer)) or isinstance(tile, bool) or tile < 1:
        raise ValueError(f"tile must be a positive integer, got {tile!r}")
    if variant == "02_tiled" and tile not in STATIC_TILES:
        raise ValueError(f"02_tiled is compiled for tile widths {STATIC_TILES}, got {tile}; "
                         "use 03_tiled_dynamic for another width")
    lim = limits if limits is not None else device_limits()
    threads, max_threads = tile * tile, lim["max_threads_per_block"]
    if threads > max_threads:
        raise ValueError(f"tile {tile} needs {tile}x{tile} = {threads} threads per block; "
                         f"this device allows {max_threads} (largest tile: {math.isqrt(max_threads)})")
    need, have = smem_bytes(variant, tile, trans_b), lim["smem_per_block"]
    if need > have:
        raise ValueError(f"tile {tile} needs {need} bytes of shared memory per block; this device allows {have}")


def check_rows(m: int, variant: str | None = None, tile: int = 16, config: str | None = None) -> None:
    """Raise ValueError when m is more rows than the variant's (or configuration's) grid can hold: at
    most 65535 blocks on the grid's y axis, each of the variant's block rows (matmul_max_m)."""
    lib = _lib()
    limit = lib.matmul_config_max_m(library.table_index(PROGRAM, "config", config)) if config is not None else lib.matmul_max_m(variant, int(tile))
    if limit >= 0 and m > limit:
        rows = limit // MAX_GRID_YZ
        raise ValueError(f"m must be at most {limit} for {config or variant} (the grid's y limit: {MAX_GRID_YZ} "
                         f"blocks of {rows} rows), got m={m}")


def _check_operands(a, b, trans_b: bool = False, batched: bool = False) -> tuple[np.ndarray, np.ndarray]:
    nd = 3 if batched else 2
    a = library.check_array(a, "a", np.float32, ndim=nd)
    b = library.check_array(b, "b", np.float32, ndim=nd)
    if batched and a.shape[0] != b.shape[0]:
        raise ValueError(f"batch sizes differ: a is {a.shape}, b is {b.shape}")
    k_b = b.shape[-1] if trans_b else b.shape[-2]
    if a.shape[-1] != k_b:
        what = "a's last dimension and b's last (b is transposed)" if trans_b else "a's columns and b's rows"
        raise ValueError(f"matmul shapes do not match ({what} differ): a is {a.shape}, b is {b.shape}")
    if max(a.shape + b.shape, default=0) > INT_MAX:
        raise ValueError(f"dimensions must be below 2^31: a is {a.shape}, b is {b.shape}")
    return a, b


def matmul(a: np.ndarray, b: np.ndarray, variant: str = "02_tiled", tile: int = 16,
           config: str | None = None) -> np.ndarray:
    """a (m, k) @ b (k, n) on the GPU: float32, C-contiguous (a non-contiguous array is refused
    with ValueError; pass np.ascontiguousarray(x)). Returns a new (m, n) float32 array.

    Shapes are checked before anything runs (ValueError naming both). k = 0 gives zeros (computed
    by the kernel); an empty output gives an empty array without touching the GPU.
    `config` runs one ladder configuration by name (the library's config table) instead of a variant.
    """
    a, b = _check_operands(a, b)
    (m, k), n = a.shape, b.shape[1]
    out = np.empty((m, n), dtype=np.float32)
    if config is not None:
        ci = library.table_index(PROGRAM, "config", config)
    else:
        _check_variant(variant)
    if out.size == 0:
        return out
    lib = _lib()
    if config is not None:
        check_config(config)
        check_rows(m, config=config)
        lib.matmul_config_host(ci, m, n, k, a, b, out)
        return out
    check_tile(variant, tile)
    check_rows(m, variant, tile)
    lib.matmul_host(variant, int(tile), m, n, k, a, b, out)
    return out


def matmul_batched(a: np.ndarray, b: np.ndarray, variant: str = "02_tiled", tile: int = 16,
                   trans_b: bool = False, alpha: float = 1.0) -> np.ndarray:
    """For each z: alpha * a[z] @ (b[z].T if trans_b else b[z]). The general form of the shared
    kernels (attention's S = Q K^T * scale and O = P V); a (batch, m, k), b (batch, k, n) or
    (batch, n, k) with trans_b. Same validation as `matmul`."""
    a, b = _check_operands(a, b, trans_b, batched=True)
    batch, m, k = a.shape
    n = b.shape[1] if trans_b else b.shape[2]
    out = np.empty((batch, m, n), dtype=np.float32)
    _check_variant(variant)
    if out.size == 0:
        return out
    if batch > MAX_GRID_YZ:
        raise ValueError(f"batch must be at most {MAX_GRID_YZ} (the grid's z limit), got {batch}")
    check_tile(variant, tile, trans_b)
    check_rows(m, variant, tile)
    lib = _lib()
    lib.matmul_host_batched(variant, int(tile), int(bool(trans_b)), batch, m, n, k, float(alpha), a, b, out)
    return out


def matmul_device(variant: str, tile: int, m: int, n: int, k: int, a_ptr, b_ptr, c_ptr, stream=None) -> None:
    """Device pointers (DeviceBuffer or cffi), enqueued on `stream` with no sync: for the timing loop."""
    _check_variant(variant)
    if min(m, n, k) < 0:
        raise ValueError(f"sizes must be >= 0, got m={m} n={n} k={k}")
    if variant == TUNED:
        apply_tuned()
    check_rows(m, variant, tile)
    lib = _lib()
    lib.matmul_device(variant, int(tile), m, n, k, a_ptr, b_ptr, c_ptr, stream)


def config_device(config: str, m: int, n: int, k: int, a_ptr, b_ptr, c_ptr, stream=None) -> None:
    """One ladder configuration on device pointers, enqueued on `stream` (the tuner's launch)."""
    ci = library.table_index(PROGRAM, "config", config)
    if min(m, n, k) < 0:
        raise ValueError(f"sizes must be >= 0, got m={m} n={n} k={k}")
    check_rows(m, config=config)
    _lib().matmul_config_device(ci, m, n, k, a_ptr, b_ptr, c_ptr, stream)


# --- tuning: which configuration 09_tuned runs on this GPU ------------------------------------------

# The configurations the search times. 10's and 11's are in it, so after a tuning run 09_tuned
# may run one of theirs: 09 is "the tuner's pick", 10 and 11 their own default configurations.
TUNE_KINDS = ("07_warptile", "08_pipelined", "10_regtile", "11_splitk_tail")


def tuned_choice(device: str | None = None) -> tuple[str | None, str]:
    """(configuration, why) for 09_tuned on `device`: the cached winner when `invoke tune matmul` ran on
    this exact device and names a configuration this build has, else (None, why the default is used)."""
    from harness.measuring import tune as htune

    return htune.cached_winner(PROGRAM, device, functools.partial(library.read_table, PROGRAM, "config"))


def apply_tuned() -> str:
    """Point 09_tuned at this GPU's cached winner unless already chosen in this process (the library holds
    the choice); returns the configuration it runs."""
    from harness.measuring import tune as htune

    return htune.apply_tuned(PROGRAM, tuned_choice)


def tune(size: int = 4096, kinds=TUNE_KINDS, save: bool = True, on_progress=None, options=None):
    """Time every configuration of `kinds` at size^3 with harness.measuring.timing; cache the fastest for this GPU.

    Configurations the device cannot hold are listed with the limit they exceed, never launched.
    `options` (harness.measuring.timing.Options) sets NVBench's knobs; the default is the bench's.
    Returns (table, path): one row per configuration (tflops, ms, iqr_ms, status) and the JSON file
    written (None when save=False). The JSON holds the device name, the winner and the whole table.
    """
    from harness.calling import cudart
    from harness.measuring import timing
    from harness.measuring import tune as htune

    device = cudart.device_name(0)
    rows, items = [], []
    for name in library.read_table(PROGRAM, "config"):
        if not name.startswith(tuple(kinds)):
            continue
        why = config_problem(config_info(name))
        if why:
            rows.append({"config": name, "status": "refused: " + why, "ms": np.nan, "iqr_ms": np.nan, "tflops": np.nan})
            continue
        rows.append({"config": name, "status": "ok"})
        items.append(timing.Item(name, "harness.programs.matmul:config_setup", {"config": name, "size": size}))
    # One NVBench session for every choice (harness.measuring.timing), each a cold measurement stopped on noise.
    return htune.time_and_pick("matmul", device, rows, items, size, options, on_progress, save)


# --- reference and checker -----------------------------------------------------------------------

def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in float64 (returned as float64)."""
    return np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)


def relerr(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| (harness.calling.results.relative_error; inf for a shape mismatch or a NaN)."""
    try:
        return results.relative_error(out, ref)
    except ValueError:
        return math.inf


def check(out: np.ndarray, ref: np.ndarray, tol: float = TOL) -> tuple[bool, float]:
    """The checker: (ok, relative error). NaN anywhere (an unwritten, poisoned element) fails."""
    e = relerr(out, ref)
    return bool(np.isfinite(e) and e <= tol), e


# --- Python twins ---------------------------------------------------------------------------------

# EXERCISE matmul: copy
def matmul_bk(blockidx: dim3, threadidx: dim3, blockdim: dim3, m, n, out, h, w, k):
    """Lecture 3's matmul_k for blk_kernel2d on flattened arrays: m (h x k), n (k x w), out (h x w)."""
    # EXERCISE matmul: begin r = this thread's row of out (the .y of blockidx, blockdim, threadidx), c = its column
    # EXERCISE matmul: todo (.x); return when (r, c) is outside the h x w output (the grid is rounded up to whole
    # EXERCISE matmul: todo blocks); then out[r * w + c] = the dot product of row r of m (h x k, flattened) and column c
    # EXERCISE matmul: todo of n (k x w, flattened).
    r = blockidx.y * blockdim.y + threadidx.y
    c = blockidx.x * blockdim.x + threadidx.x
    if r >= h or c >= w:
        return
    o = 0.0
    for i in range(k):
        o += m[r * k + i] * n[i * w + c]
    out[r * w + c] = o
    # EXERCISE matmul: end
# EXERCISE matmul: end copy


def matmul_2d(a: np.ndarray, b: np.ndarray, tw: int = NAIVE_BLOCK) -> np.ndarray:
    """Run matmul_bk over a cdiv-sized grid of tw x tw blocks."""
    h, k = a.shape
    k2, w = b.shape
    if k != k2:
        raise ValueError(f"matmul shapes do not match: a is {a.shape}, b is {b.shape}")
    out = np.full(h * w, np.nan, dtype=np.float32)
    blocks = dim3(math.ceil(w / tw), math.ceil(h / tw))
    blk_kernel2d(matmul_bk, blocks, dim3(tw, tw), a.ravel(), b.ravel(), out, h, w, k)
    return out.reshape(h, w)


# EXERCISE matmul_tiled: copy
def matmul_tiled_k(ctx, m, n, out, h, w, k, tw, sync=True):
    """Lecture 5's tiled kernel as a generator: each bare `yield` is a __syncthreads().

    Every thread loads one element of each tile into the block's shared arrays `ms` and `ns`, then
    reads a whole row of ms and column of ns -- values other threads loaded. sync=False drops the
    first barrier to show why it is there: the simulator runs threads in order, so a thread reads
    cells of the tile that later threads have not written yet (NaN in the simulator's shared memory).
    """
    tc, tr = ctx.threadIdx.x, ctx.threadIdx.y
    r = ctx.blockIdx.y * tw + tr
    c = ctx.blockIdx.x * tw + tc
    ms, ns = ctx.shared.ms, ctx.shared.ns
    p = np.float32(0)
    for ph in range(math.ceil(k / tw)):
        idx = ph * tw
        # EXERCISE matmul_tiled: begin load one element of each tile: ms[tr, tc] = m's element (r, idx + tc) and
        # EXERCISE matmul_tiled: todo ns[tr, tc] = n's element (idx + tr, c) (both flattened, row-major), each 0.0 when
        # EXERCISE matmul_tiled: todo outside its matrix (ragged edges); wait for the whole tile (a bare `yield` is a
        # EXERCISE matmul_tiled: todo __syncthreads()); add the tw products ms[tr, i] * ns[i, tc]
        # EXERCISE matmul_tiled: todo to p; wait again before the next phase overwrites the tiles.
        # Zero-fill outside the matrices, so the full-width dot product below needs no bounds test.
        ms[tr, tc] = m[r * k + tc + idx] if r < h and idx + tc < k else 0.0
        ns[tr, tc] = n[(tr + idx) * w + c] if c < w and idx + tr < k else 0.0
        if sync:
            yield  # the whole tile must be loaded before anyone reads a row or column of it
        for i in range(tw):
            p = p + ms[tr, i] * ns[i, tc]
        yield  # everyone must finish reading this tile before the next phase overwrites it
        # EXERCISE matmul_tiled: end
    if r < h and c < w:
        out[r * w + c] = p
# EXERCISE matmul_tiled: end copy


def matmul_tiled_sim(a: np.ndarray, b: np.ndarray, tw: int = 4, sync: bool = True) -> np.ndarray:
    """Run matmul_tiled_k with harness.base.sim.launch: shared tiles per block, barriers at each yield."""
    h, k = a.shape
    k2, w = b.shape
    if k != k2:
        raise ValueError(f"matmul shapes do not match: a is {a.shape}, b is {b.shape}")
    out = np.full(h * w, np.nan, dtype=np.float32)
    launch(matmul_tiled_k, dim3(math.ceil(w / tw), math.ceil(h / tw)), dim3(tw, tw),
           a.ravel(), b.ravel(), out, h, w, k, tw, sync,
           shared={"ms": ((tw, tw), np.float32), "ns": ((tw, tw), np.float32)})
    return out.reshape(h, w)


# --- without a GPU --------------------------------------------------------------------------------

CPU_MAX_EDGE = 96  # the simulator runs one Python call per thread and k steps each: small shapes only


def on_cpu(args: list[str]) -> tuple[pd.DataFrame, str]:
    """`invoke run matmul [-- m k n]` without a GPU: lecture 3's naive kernel and lecture 5's tiled
    kernel (shared tiles, both barriers) on the simulator, at a small ragged shape (default
    37 x 29 @ 29 x 41, not a multiple of any tile), each checked against the float64 reference."""
    import time

    import pandas as pd

    args = [str(a) for a in args]
    if args and (len(args) != 3 or not all(a.isdigit() for a in args)):
        raise ValueError(f"on the CPU, matmul takes m k n (three integers) or nothing, got: {' '.join(args)}")
    m, k, n = (int(a) for a in args) if args else (37, 29, 41)
    if not all(1 <= d <= CPU_MAX_EDGE for d in (m, k, n)):
        raise ValueError(f"on the CPU (the simulator) m, k and n must be 1..{CPU_MAX_EDGE}, got {m} {k} {n}")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ref = reference(a, b)
    rows = []
    for what, fn in (("01_naive (lecture 3, 16x16 blocks)", lambda: matmul_2d(a, b)),
                     ("02_tiled (lecture 5, 8x8 shared tiles)", lambda: matmul_tiled_sim(a, b, tw=8))):
        t0 = time.perf_counter()
        out = fn()
        secs = time.perf_counter() - t0
        ok, err = check(out, ref)
        rows.append({"variant": what, "shape": f"{m}x{k} @ {k}x{n}", "rel_error": float(f"{err:.3g}"),
                     "seconds": round(secs, 2), "check": "pass" if ok else "fail"})
    return pd.DataFrame(rows), (f"the kernels' Python twins on harness.base.sim (one call per thread), "
                                f"against the float64 numpy reference, tolerance {TOL:g}")


# --- the lectures' shapes -----------------------------------------------------------------------

LECTURE_SHAPES = {
    "mnist_5": (5, 784, 10),  # 5 MNIST images through a 784 -> 10 layer (random data, no download)
    "mnist_50000": (50000, 784, 10),
    "lecture5": (5120, 256, 5120),
}


# --- the executable -----------------------------------------------------------------------------

def parse_output(text: str):
    """build/bin/matmul's result lines as a DataFrame (numbers converted)."""
    return results.parse_output(text, "matmul")


def run(*args, timeout: float = 300):
    """Run build/bin/matmul with args (e.g. "--variant", "all", ...) and parse its result lines.
    A failed check is exit status 1 and raises ProgramError."""
    return results.run("matmul", *[str(a) for a in args], timeout=timeout)


# --- benchmarks ---------------------------------------------------------------------------------

BENCH_N = 4096
# The ladder's sizes: (label, m, n, k). 5120x256x5120 is the lectures' A (5120 x 256) @ B (256 x 5120).
LADDER_SIZES = (("2048^3", 2048, 2048, 2048), ("4096^3", 4096, 4096, 4096), ("8192^3", 8192, 8192, 8192),
                ("5120x256x5120", 5120, 5120, 256))
QUICK_RUNGS = ("07_warptile", "08_pipelined", TUNED, "10_regtile", "11_splitk_tail")  # `invoke bench --quick`: 4096^3 only
# The goals for the last rung, as a fraction of cuBLAS SGEMM at the same size.
LAST_RUNG_TARGETS = {"2048^3": 0.95, "4096^3": 1.0, "8192^3": 1.0}
LAST_RUNG = "11_splitk_tail"


def cublas_ceiling_name(size: str) -> str:
    """The cuBLAS ceiling measured at `size` in the same run ("cublas" is 4096^3, the classic cases' one)."""
    return "cublas" if size == f"{BENCH_N}^3" else f"cublas@{size}"


@functools.lru_cache(maxsize=2)
def _host_operands(m: int, n: int, k: int):
    # Uniform in [-1, 1), never zeros (skipped work fails); cached so the cases of one size share one draw.
    rng = np.random.default_rng(0)
    a = (rng.random((m, k), dtype=np.float32) * 2 - 1).astype(np.float32)
    b = (rng.random((k, n), dtype=np.float32) * 2 - 1).astype(np.float32)
    return a, b


def _bench_buffers(m: int, n: int, k: int):
    from harness.calling import cudart

    ha, hb = _host_operands(m, n, k)
    a = cudart.DeviceBuffer.from_array(ha)
    b = cudart.DeviceBuffer.from_array(hb)
    c = cudart.DeviceBuffer(4 * m * n)
    return a, b, c


def prepared_launch(variant: str, tile: int, m: int, n: int, k: int, a_ptr, b_ptr, c_ptr, config: str | None = None):
    """`launch(stream)` for the timing loop, marshalled once by Library.prepare (the variant name or the
    configuration's index, the pointers), so that the timed call is the C call alone: harness.measuring.timing
    records its start event before calling it. A non-zero status raises CudaError after the enqueue."""
    lib = _lib()
    if config is not None:
        return lib.prepare("matmul_config_device", library.table_index(PROGRAM, "config", config), m, n, k, a_ptr, b_ptr, c_ptr,
                           library.STREAM)
    _check_variant(variant)
    if variant == TUNED:
        apply_tuned()
    return lib.prepare("matmul_device", variant, int(tile), m, n, k, a_ptr, b_ptr, c_ptr, library.STREAM)


def variant_setup(variant: str, tile: int, m: int, n: int, k: int, config: str | None = None):
    """harness.measuring.timing's target: random A and B on the device and a prepared launch of `variant` (or of
    a tuning configuration by name) at m x n x k."""
    from harness.measuring import bench

    a, b, c = _bench_buffers(m, n, k)

    def close():
        for buf in (a, b, c):
            buf.close()

    try:
        launch = prepared_launch(variant, tile, m, n, k, a.ptr, b.ptr, c.ptr, config=config)
    except BaseException:
        close()
        raise
    return bench.Prepared(launch, close)


@functools.lru_cache(maxsize=2)
def _shared_buffers(m: int, n: int, k: int):
    """One set of operands per shape for a tuning session (kept until the session's process exits)."""
    return _bench_buffers(m, n, k)


def config_setup(config: str, size: int):
    """harness.measuring.timing's target for `invoke tune matmul`: one tuning configuration at size^3."""
    from harness.measuring import bench

    a, b, c = _shared_buffers(size, size, size)
    return bench.Prepared(prepared_launch("", 0, size, size, size, a.ptr, b.ptr, c.ptr, config=config))


def _make_cublas_ceiling(label: str, m: int, n: int, k: int):
    def ceiling(quick: bool = False):
        """cuBLAS SGEMM at this size, timed beside the cases; None without cuBLAS."""
        from harness.measuring import bench

        if not have_cublas():
            return None
        return bench.TimedCeiling(cublas_ceiling_name(label), "TFLOP/s", 2.0 * m * n * k,
                                  "harness.programs.matmul:variant_setup",
                                  {"variant": "cublas", "tile": 0, "m": m, "n": n, "k": k},
                                  f"cuBLAS SGEMM {label} FP32",
                                  same_as=("matmul", "cublas", label) if label == f"{BENCH_N}^3" else None)
    return ceiling


def _naive_ceiling(quick: bool = False):
    """01_naive at 4096^3: the yardstick for "02_tiled >= 1.5x 01_naive"."""
    from harness.measuring import bench

    return bench.TimedCeiling("matmul_01_naive", "TFLOP/s", 2.0 * BENCH_N**3, "harness.programs.matmul:variant_setup",
                              {"variant": "01_naive", "tile": 16, "m": BENCH_N, "n": BENCH_N, "k": BENCH_N},
                              f"01_naive {BENCH_N}^3", same_as=("matmul", "01_naive", f"{BENCH_N}^3"))


def ceilings() -> dict:
    """The registry's hook (harness/programs/__init__.py): cuBLAS SGEMM at each ladder size (the 4096^3
    one is "cublas") and 01_naive at 4096^3, each measured by the bench only when a case names it."""
    out = {cublas_ceiling_name(label): _make_cublas_ceiling(label, m, n, k) for label, m, n, k in LADDER_SIZES}
    out["matmul_01_naive"] = _naive_ceiling
    return out


def bench_cases(quick: bool = False):
    """Every variant against cuBLAS SGEMM measured in the same run, TFLOP/s = 2mnk / time.

    The ladder (04-11) at 2048^3, 4096^3, 8192^3 and 5120x256x5120, each against cuBLAS at that size;
    01-03 at 4096^3 (02_tiled also against 01_naive: at least 1.5x); cuBLAS against the FP32 peak.
    Quick (`invoke bench --quick`): only 07-11 at 4096^3 and cuBLAS against the peak.
    09_tuned's target: 0.9 of cuBLAS at 4096^3; the last rung's are in LAST_RUNG_TARGETS.
    """
    from harness.measuring import bench

    def case(variant, tile, size, m, n, k, ceiling, label=None, target=None, note="", is_quick=False):
        flops = 2.0 * m * n * k
        nbytes = 4.0 * (m * k + k * n + m * n)  # compulsory traffic: read A and B, write C
        return bench.BenchCase("matmul", label or variant, size, "harness.programs.matmul:variant_setup", "TFLOP/s",
                               flops, ceiling, target=target, quick=is_quick, bytes=nbytes, flops=flops, note=note,
                               kwargs={"variant": variant, "tile": tile, "m": m, "n": n, "k": k})

    size, n4 = f"{BENCH_N}^3", BENCH_N
    kernels = [("01_naive", 16), ("02_tiled", 16), ("02_tiled", 32), ("03_tiled_dynamic", 8),
               ("03_tiled_dynamic", 16), ("03_tiled_dynamic", 32)]
    cases = [case(v, t, size, n4, n4, n4, "cublas", v if v == "01_naive" else f"{v}-t{t}",
                  note="fraction of cuBLAS SGEMM") for v, t in kernels]
    cases += [case("02_tiled", t, size, n4, n4, n4, "matmul_01_naive", f"02_tiled-t{t}-vs-naive", target=1.5,
                   note="speed-up over 01_naive (goal: >= 1.5)") for t in STATIC_TILES]
    for label, m, n, k in LADDER_SIZES:
        for v in _ladder():
            target, note = None, "fraction of cuBLAS SGEMM at this size"
            if v == TUNED and label == size:
                target, note = 0.9, note + " (goal: best rung >= 0.9 at 4096^3)"
            elif v == LAST_RUNG and label in LAST_RUNG_TARGETS:
                target = LAST_RUNG_TARGETS[label]
                note += f" (goal: >= {target} at {label})"
            cases.append(case(v, 0, label, m, n, k, cublas_ceiling_name(label), target=target, note=note,
                              is_quick=v in QUICK_RUNGS and label == size))
    try:
        cublas_ok = have_cublas()
    except Exception:
        cublas_ok = False
    if cublas_ok:
        cases.append(case("cublas", 0, size, n4, n4, n4, "fp32", "cublas",
                          note="cuBLAS SGEMM as a fraction of the FP32 peak", is_quick=True))
    return cases


# --- hooks for `invoke profile` and `invoke sanitize` (small, ragged sizes; see harness/profiling/profile.py) ---
def profile_args(variant: str | None = None) -> list[str]:
    return ["--variant", variant or "02_tiled", "--reps", "1", "65", "33", "47"]


def sanitize_args() -> dict[str, list[str]]:
    """compute-sanitizer runs: every variant on a small ragged shape (k = 47: the 4-byte paths), and
    every ladder rung also on one whose rows are 16-byte aligned but whose edges are ragged against
    every tile (m = 129, n = 68, k = 36: the 16-byte and cp.async paths, partial tiles). 11 also runs a
    grid of 232 tiles on ragged edges (m = 3700, n = 2045, k = 250): on 132 SMs its 100-tile tail is cut
    in two uneven pieces, so the head -> rest hand-over runs under the sanitizers too."""
    runs = {v: profile_args(v) for v in library.read_table(PROGRAM) if v != "cublas"}
    for v in _ladder():
        runs[f"{v}-vec"] = ["--variant", v, "--reps", "1", "129", "68", "36"]
    runs["11_splitk_tail-uneven"] = ["--variant", "11_splitk_tail", "--reps", "1", "3700", "2045", "250"]
    return runs


# --- `invoke run matmul -- ...` ----------------------------------------------------------------------
def cli(args: list[str], variant: str | None = None, **_) -> int:
    """tasks.run's hook: build/bin/matmul with the tuned configuration passed as --config when the run
    includes 09_tuned (the executable cannot read the JSON cache itself). Returns the exit status."""
    from harness.measuring import tune as htune

    return htune.run_with_tuned("matmul", args, variant, TUNED, tuned_choice, "default configuration")


# --- the exercises this program offers (their problems: matmul_exercises.py) --------------------------------

EXERCISES = (
    Exercise(
        "matmul", origin="GPU MODE lecture 3, exercise 2 (matrix multiplication)",
        writes="the naive kernel body: row and column, the bounds, the dot product",
        tracks=("python", "cuda"), problem=_ex.Matmul(), py_entry="matmul_bk",
        cu_source="cuda/shared/matmul/matmul_kernels.cuh", cu_kernels=("matmul_01_naive",), glue="exercise_matmul.cu",
        hints=("One thread per element of the output: the row from the .y parts, the column from the .x parts.",
             "Row-major: element (r, c) of a matrix with `cols` columns is at r * cols + c. Python: the matrix m is "
             "h x k, n is k x w, out is h x w. CUDA: the sizes are m, n, k: A is m x k, B is k x n, C is m x n.",
             "The grid is rounded up on both axes: return when the row or the column is outside the output."),
        block="16x16 blocks, x along the columns",
    ),
    Exercise(
        "matmul_tiled", origin="GPU MODE lecture 5 (tiling through shared memory)",
        writes="the shared-memory tile loads, the two barriers, the ragged edges",
        tracks=("python", "cuda"), problem=_ex.MatmulTiled(), py_entry="matmul_tiled_k",
        cu_source="cuda/shared/matmul/matmul_kernels.cuh", cu_kernels=("matmul_03_tiled_dynamic",), glue="exercise_matmul_tiled.cu",
        hints=("Each thread loads one element of each tile; the dot product then reads a whole row and a whole column "
             "of the tiles, loaded by other threads.",
             "Two barriers per step: after the loads (the tile is complete) and after the products (nobody still "
             "reads it when the next step overwrites it). In Python a bare `yield` is __syncthreads().",
             "Sizes that are not multiples of the tile: load 0 for elements outside the matrices, so the products "
             "over the whole tile need no test; every thread, even one outside C, loads and reaches the barriers."),
        block="16x16 tiles (Python: 4x4)",
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name='matmul',
    summary='a 2-D grid over C, then shared-memory tiles and barriers',
    follows='[lecture 3](https://github.com/gpu-mode/lectures/blob/main/lecture_003/pmpp.ipynb), [lecture 5](https://github.com/gpu-mode/lectures/blob/main/lecture_005/matmul_l5.ipynb)',
    order=60,
    readme_picture='[ladder](bench/results/h100/ladder_matmul-20261124T195859.png)',
    variants=True,
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    bench_cases=bench_cases,
    ceilings=ceilings,
    tune=tune,
    run=run,
    parse_output=parse_output,
    reference=reference,
    cli=cli,
    on_cpu=on_cpu,
    cli_options=('variant',),
    tour=Tour("the SGEMM ladder: each rung's TFLOP/s as a fraction of cuBLAS", drawn=('plots/ladder_matmul*.png',), committed=('bench/results/h100/ladder_matmul-20261124T195859.png',)),
    exercises=EXERCISES,
)
