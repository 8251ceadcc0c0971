"""square: the course's square kernels (Stringer sections 2.7-2.12) and the 2-D square of the
GPU MODE profiling lecture.

Public API (numpy in, numpy out; arguments are checked before anything is launched):
    square(x, variant="03_vectorized", out=None)   float32, out of place, any 1-D length
    square_int32(a, threads=256)                   int32, IN PLACE (the course's semantics), wraps like numpy
    square_matrix(x, out=None)                     float32 2-D, 16x16 blocks
    reference(x)                                   numpy's answer
Python twins (harness.base.sim, as in lecture 3): square_bk, square_grid_stride_k, square_vectorized_k,
square_matrix_bk, and `twin(...)` to run them. `compare(n)` is `invoke compare square`;
`bench_cases(quick)` is `invoke bench --programs square`.
"""

from __future__ import annotations

import statistics

import numpy as np
import pandas as pd

from harness.base import sim
from harness.calling import library, parse, runner
from harness.calling.results import relative_error
from harness.programs import square_exercises as _ex
from harness.programs.record import Exercise, Program, Tour

PROGRAM = "square"


# VARIANTS is the library's one table (cuda/square/square.cu), read when first asked for: never typed here.
__getattr__ = library.table_attributes(__name__, PROGRAM)

DEFAULT_VARIANT = "03_vectorized"
DEFAULT_THREADS = 256
MATRIX_TILE = 16
MAX_THREADS = 1024  # every CUDA GPU since Fermi; the library also checks the device's own limit


# --- argument checks (before any launch) ------------------------------------------------------------

def check_variant(variant: str) -> str:
    library.table_index(PROGRAM, "variant", variant)
    return variant


def check_threads(threads: int) -> int:
    if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool):
        raise TypeError(f"threads must be an integer, got {type(threads).__name__}")
    if not 1 <= threads <= MAX_THREADS:
        raise ValueError(f"threads must be between 1 and {MAX_THREADS}, got {threads}")
    return int(threads)


def _out_array(out, shape, name="out") -> np.ndarray:
    if out is None:
        return np.empty(shape, dtype=np.float32)
    out = library.check_array(out, name, np.float32, ndim=len(shape), shape=shape)
    if not out.flags.writeable:
        raise ValueError(f"{name} must be writeable")
    return out


# --- numpy reference ----------------------------------------------------------------------------------

def reference(x: np.ndarray) -> np.ndarray:
    """x*x the numpy way. float32: the product of two float32s is exact in float64, so computing
    there and rounding once gives the correctly rounded float32 square. int32: the 64-bit product
    reduced modulo 2^32, i.e. numpy int32's wrap-around, spelled out."""
    x = np.asarray(x)
    if x.dtype == np.int32:
        sq = x.astype(np.int64) * x.astype(np.int64)
        return (sq & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    if x.dtype == np.float32:
        return (x.astype(np.float64) * x.astype(np.float64)).astype(np.float32)
    raise TypeError(f"reference: expected int32 or float32, got {x.dtype}")


def check_close(out: np.ndarray, ref: np.ndarray, rtol: float = 1e-5) -> None:
    """The tests' float32 checker: ||out-ref||/||ref|| <= rtol, else AssertionError."""
    err = relative_error(out, ref)
    if not err <= rtol:
        raise AssertionError(f"relative error {err:.3g} > {rtol:g}")


# --- the library ----------------------------------------------------------------------------------

def lib() -> library.Library:
    return library.load(PROGRAM)


def square(x: np.ndarray, variant: str = DEFAULT_VARIANT, out: np.ndarray | None = None) -> np.ndarray:
    """out = x*x for a 1-D C-contiguous float32 array, with the chosen variant. Returns out."""
    check_variant(variant)
    x = library.check_array(x, "x", np.float32, ndim=1)
    out = _out_array(out, x.shape)
    if np.shares_memory(x, out):
        raise ValueError("out must not overlap x (the float32 variants are out of place)")
    if x.size:
        L = lib()
        L.square_f32(variant, x, out, x.size)
    return out


def square_int32(a: np.ndarray, threads: int = DEFAULT_THREADS) -> np.ndarray:
    """Square a 1-D C-contiguous int32 array IN PLACE, one thread per element (the course's
    kernel), wrapping modulo 2^32 like numpy. Returns a."""
    threads = check_threads(threads)
    a = library.check_array(a, "a", np.int32, ndim=1)
    if not a.flags.writeable:
        raise ValueError("a must be writeable (it is squared in place)")
    if a.size:
        lib().square_int32(a, a.size, threads)
    return a


def square_matrix(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """out = x*x for a 2-D C-contiguous float32 (height x width) matrix, 16x16 blocks. Returns out."""
    x = library.check_array(x, "x", np.float32, ndim=2)
    h, w = x.shape
    from harness.calling.cudart import INT_MAX, MAX_GRID_YZ

    if w > INT_MAX:
        raise ValueError(f"width must be at most {INT_MAX} (a C int), got {w}")
    if -(-h // MATRIX_TILE) > MAX_GRID_YZ:
        raise ValueError(f"height must be at most {MAX_GRID_YZ * MATRIX_TILE} ({MAX_GRID_YZ} rows of "
                         f"{MATRIX_TILE}-row blocks, the gridDim.y limit), got {h}")
    out = _out_array(out, x.shape)
    if np.shares_memory(x, out):
        raise ValueError("out must not overlap x")
    if x.size:
        lib().square_matrix(x, out, h, w)
    return out


def square_dev(variant: str, d_x, d_out, n: int, stream=None, blocks: int = 0, threads: int = 0) -> None:
    """Enqueue one float32 square on device pointers (DeviceBuffer or cffi pointers); no sync.
    blocks/threads of 0 take the variant's defaults. For timing and profiling."""
    check_variant(variant)
    if n < 0 or blocks < 0 or threads < 0:
        raise ValueError("n, blocks and threads must be >= 0")
    if threads:
        check_threads(threads)
    L = lib()
    L.square_f32_dev(variant, d_x, d_out, n, blocks, threads, stream)


# --- Python twins (harness.base.sim) -------------------------------------------------------------------

def square_bk(blockidx, threadidx, blockdim, x, out, n):
    """01_naive, lecture-3 style: one thread per element and a bounds guard."""
    i = blockidx * blockdim + threadidx
    if i < n:
        out[i] = x[i] * x[i]


# EXERCISE grid_stride: copy
def square_grid_stride_k(ctx, x, out, n):
    """02_grid_stride: start at the global index, step by the whole grid."""
    # EXERCISE grid_stride: begin i = this thread's global index (ctx.blockIdx, ctx.blockDim, ctx.threadIdx);
    # EXERCISE grid_stride: todo stride = the number of threads in the whole grid (ctx.gridDim too).
    stride = ctx.blockDim.x * ctx.gridDim.x
    i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
    # EXERCISE grid_stride: stub i, stride = 0, n
    # EXERCISE grid_stride: end
    while i < n:
        out[i] = x[i] * x[i]
        i += stride
# EXERCISE grid_stride: end copy


def square_vectorized_k(ctx, x, out, n, head):
    """03_vectorized: float4 chunks from x[head:] over a grid-stride loop, then a scalar head and
    tail done by the first threads -- kernel-for-kernel the CUDA code."""
    tid = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
    stride = ctx.gridDim.x * ctx.blockDim.x
    nvec = (n - head) // 4
    i = tid
    while i < nvec:
        s = head + 4 * i
        v = x[s:s + 4]
        out[s:s + 4] = v * v
        i += stride
    if tid < head:
        out[tid] = x[tid] * x[tid]
    t = head + nvec * 4 + tid
    if tid < 4 and t < n:
        out[t] = x[t] * x[t]


def vectorized_head(misalign_floats: int, n: int) -> int:
    """Scalar elements before a 16-byte boundary when x and out start `misalign_floats` floats past one."""
    if not 0 <= misalign_floats <= 3:
        raise ValueError("misalignment is 0..3 floats")
    return min((4 - misalign_floats) % 4, n)


def square_matrix_bk(blockidx, threadidx, blockdim, x, out, h, w):
    """The profiling lecture's 2-D kernel, lecture-3 style (blk_kernel2d)."""
    row = blockidx.y * blockdim.y + threadidx.y
    col = blockidx.x * blockdim.x + threadidx.x
    if row < h and col < w:
        out[row, col] = x[row, col] * x[row, col]


# EXERCISE square: copy
def square_int32_bk(blockidx, threadidx, blockdim, a, n):
    """The course's in-place int32 kernel; the square wraps modulo 2^32 (unsigned multiply)."""
    # EXERCISE square: begin i = this thread's global index (block index times block size plus thread index);
    # EXERCISE square: todo only when i < n (the last block is partial), square a[i] in place, wrapping modulo 2^32 like
    # EXERCISE square: todo int32: v = int(a[i]) & 0xFFFFFFFF; a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)
    i = blockidx * blockdim + threadidx
    if i < n:
        v = int(a[i]) & 0xFFFFFFFF
        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)
    # EXERCISE square: end
# EXERCISE square: end copy


def twin(x: np.ndarray, variant: str = DEFAULT_VARIANT, threads: int = 32, blocks: int | None = None,
         misalign: int = 0) -> np.ndarray:
    """Run a variant's Python twin on the simulator. For 03_vectorized, `misalign` (0..3 floats)
    plays the pointer's offset from a 16-byte boundary (the head the CUDA launcher computes)."""
    x = np.asarray(x)
    if x.ndim == 2:
        out = np.full_like(x, np.nan)
        h, w = x.shape
        sim.blk_kernel2d(square_matrix_bk, sim.dim3(-(-w // MATRIX_TILE), -(-h // MATRIX_TILE)),
                         sim.dim3(MATRIX_TILE, MATRIX_TILE), x, out, h, w)
        return out
    n = x.size
    if x.dtype == np.int32:
        a = x.copy()
        sim.blk_kernel(square_int32_bk, -(-n // threads), threads, a, n)
        return a
    check_variant(variant)
    out = np.full_like(x, np.nan)
    if variant == "01_naive":
        sim.blk_kernel(square_bk, -(-n // threads), threads, x, out, n)
    elif variant == "02_grid_stride":
        sim.launch(square_grid_stride_k, blocks or 2, threads, x, out, n)
    else:
        head = vectorized_head(misalign, n)
        sim.launch(square_vectorized_k, blocks or 2, threads, x, out, n, head)
    return out


# --- CPU vs GPU (`invoke compare square`) ---------------------------------------------------------

def _median_process(prog: str, args: list, runs: int) -> tuple[float, list[dict]]:
    secs, results = [], []
    for _ in range(runs):
        r = runner.run(prog, *args, timeout=300)
        secs.append(r.seconds * 1e3)
        results.append(parse.tagged_dict(r.stdout, "result"))
    return statistics.median(secs), results


def kernel_setup(n: int, threads: int = DEFAULT_THREADS):
    """harness.measuring.timing's target: the int32 kernel on 1..n already on the device."""
    from harness.calling import cudart
    from harness.measuring import bench

    fn = lib().square_int32_dev
    buf = cudart.DeviceBuffer(4 * n)
    cudart.memcpy_htod(buf.ptr, np.arange(1, n + 1, dtype=np.int32))
    return bench.Prepared(lambda s: fn(buf, n, threads, s), buf.close)


def kernel_ms(n: int, threads: int = DEFAULT_THREADS) -> float:
    """The int32 kernel alone, data already on the device, timed by harness.measuring.timing (NVBench; median ms)."""
    from harness.measuring import timing

    return timing.time_one("harness.programs.square:kernel_setup", n=int(n), threads=int(threads)).median_ms


def compare(n: int = 100000, runs: int = 5, threads: int = DEFAULT_THREADS) -> tuple[pd.DataFrame, str]:
    """square_cpu vs square as whole processes (median of `runs`), plus the kernel alone."""
    if not isinstance(n, (int, np.integer)) or n <= 0 or n > 2**31 - 1:
        raise ValueError(f"n must be a positive int (at most 2^31-1), got {n!r}")
    threads = check_threads(threads)
    if runs < 1:
        raise ValueError("runs must be >= 1")
    from . import gpu_here

    if not gpu_here()[0]:
        return compare_cpu_only(n, runs)
    cpu_ms, cpu_res = _median_process("square_cpu", [n], runs)
    gpu_ms, gpu_res = _median_process("square", [n, threads], runs)
    loop_ms = statistics.median(float(r["loop_ms"]) for r in cpu_res)
    in_proc_ms = statistics.median(float(r["kernel_ms"]) for r in gpu_res)
    alone_ms = kernel_ms(n, threads)
    rows = [
        ("CPU process (build/bin/square_cpu)", cpu_ms),
        ("CPU loop only (timed inside square_cpu)", loop_ms),
        ("GPU process (build/bin/square)", gpu_ms),
        ("GPU kernel inside the process (events; managed pages migrate)", in_proc_ms),
        ("GPU kernel alone (harness.measuring.timing; data on the device, L2 flushed)", alone_ms),
    ]
    df = pd.DataFrame(rows, columns=["what", "median_ms"])
    df["speedup_vs_cpu_process"] = cpu_ms / df["median_ms"]
    df["speedup_vs_cpu_loop"] = loop_ms / df["median_ms"]
    explanation = explain(n, cpu_ms, loop_ms, gpu_ms, in_proc_ms, alone_ms)
    return df, explanation


def compare_cpu_only(n: int, runs: int = 5) -> tuple[pd.DataFrame, str]:
    """`invoke compare square` without a GPU: the C twin's two rows, and what a GPU would add."""
    from . import cpu_label

    cpu_ms, cpu_res = _median_process("square_cpu", [n], runs)
    if any(r.get("check") != "pass" for r in cpu_res):
        raise ValueError(f"square_cpu {n}: its own check failed: {cpu_res[-1]}")
    loop_ms = statistics.median(float(r["loop_ms"]) for r in cpu_res)
    df = pd.DataFrame([("CPU process (build/bin/square_cpu)", cpu_ms),
                       ("CPU loop only (timed inside square_cpu)", loop_ms)], columns=["what", "median_ms"])
    return df, (cpu_label(f"build/bin/square_cpu, the course's C twin, n={n}, median of {runs} runs, "
                          "check=pass")
                + ". With a GPU the comparison adds build/bin/square (the same work as a CUDA program on "
                  "managed memory) and its kernel timed alone, and explains where the GPU process's time goes.")


def on_cpu(args: list[str]) -> tuple[pd.DataFrame, str]:
    """`invoke run square` without a GPU: build/bin/square_cpu [N], the course's gcc twin of the
    managed-memory program (fills 1..N, squares in a loop, checks every element)."""
    args = [str(a) for a in args]
    if len(args) > 1 or (args and not args[0].isdigit()):
        raise ValueError(f"on the CPU, square takes one argument N (elements), got: {' '.join(args)}")
    n = int(args[0]) if args else 100000
    if not 1 <= n <= 2**31 - 1:
        raise ValueError(f"N must be between 1 and 2^31-1, got {n}")
    r = runner.run("square_cpu", n, timeout=300, check=False)
    rec = parse.tagged_dict(r.stdout, "result")
    if r.returncode != 0 or not rec:
        raise ValueError(f"square_cpu {n} exited {r.returncode}: {runner.tail(r.stderr or r.stdout, 3)}")
    df = pd.DataFrame([{"program": "square_cpu", "n": n, "loop_ms": float(rec["loop_ms"]),
                        "mismatches": int(rec["mismatches"]), "check": rec["check"]}])
    return df, f"build/bin/square_cpu {n}, the course's C twin (gcc): 1..{n} squared in a plain loop"


def explain(n, cpu_ms, loop_ms, gpu_ms, in_proc_ms, alone_ms) -> str:
    rest = gpu_ms - in_proc_ms
    return (
        f"n={n}: the GPU process takes {gpu_ms:.1f} ms, of which the kernel is {in_proc_ms:.3f} ms as it ran there "
        f"and {alone_ms:.4f} ms with its data already on the device. The other ~{rest:.0f} ms are what "
        "`time ./square` also counts: loading the driver and creating the CUDA context (typically 100+ ms, "
        "independent of n), cudaMallocManaged, initialising the array on the host, migrating the managed pages "
        "to the GPU on first touch inside the kernel (which is why the in-process kernel time exceeds the "
        "kernel alone) and back to the host for the check, and tearing the context down. The CPU process "
        f"({cpu_ms:.1f} ms) pays none of that: its squaring loop is {loop_ms:.3f} ms. So a whole-process "
        "comparison measures start-up, not the kernel; the GPU pays off when the data stays on the device "
        "and the work per launch is large enough to hide the launch and transfer costs."
    )


# --- benchmarks -----------------------------------------------------------------------------------

def bench_setup(variant: str, n: int):
    """harness.measuring.timing's target for a bench case: n float32 on the device, the launch marshalled."""
    from harness.calling import cudart
    from harness.measuring import bench

    x, out = cudart.DeviceBuffer(4 * n), cudart.DeviceBuffer(4 * n)
    x.fill_bytes(0x3F)  # 0x3F3F3F3F = 0.747f: a normal float, no NaN or denormal slow paths
    # Marshalled once here: the timed launch is the cffi call alone (library.prepare).
    launch = lib().prepare("square_f32_dev", variant, x, out, n, 0, 0, library.STREAM)

    def close():
        x.close()
        out.close()

    return bench.Prepared(launch, close)


def bench_cases(quick: bool = False) -> list:
    """float32 square, each variant, at 2^28 elements (1 GiB in, 1 GiB out) and 2^24 for --quick.
    Bytes counted = 8 per element (4 read + 4 written), the same way as the memcpy ceiling.

    Prediction, written before the first measurement on an H100: a copy-like kernel is bounded by
    the same DRAM traffic as cudaMemcpy DtoD, so the best it can do is ~1.0 of the ceiling.
    01_naive ~0.90-0.93 (one 4-byte load per thread, 2^20 short-lived blocks: block launch and
    tail overheads); 02_grid_stride ~0.88-0.92 (scalar loads, one load in flight per thread);
    03_vectorized ~0.95-0.98 (16-byte accesses, four loads in flight per thread before the
    stores). The results and the comparison are in bench/results/<gpu>/NOTES-square.md.
    """
    from harness.measuring import bench

    sizes = [("2^24", 1 << 24, True)] + ([] if quick else [("2^28", 1 << 28, False)])
    cases = []
    for label, n, is_quick in sizes:
        for v in library.read_table(PROGRAM):
            cases.append(bench.BenchCase(
                program=PROGRAM, variant=v, size=label, setup="harness.programs.square:bench_setup",
                kwargs={"variant": v, "n": n}, unit="GB/s", amount=8.0 * n,
                ceiling="memcpy", target=0.95 if (v == "03_vectorized" and n == 1 << 28) else None,
                quick=is_quick, bytes=8.0 * n, flops=float(n),
                note="float32 out-of-place; bytes = read + written"))
    return cases


# --- hooks for `invoke profile` and `invoke sanitize` (small sizes; see harness/profiling/profile.py) ---
def profile_args(variant: str | None = None) -> list[str]:
    """argv for build/bin/square: the course's managed-memory program has one kernel."""
    return ["1000"]


def sanitize_args() -> dict[str, list[str]]:
    return {"n1000": ["1000"], "ragged": ["4099", "96"]}


# --- the exercises this program offers (their problems: square_exercises.py) --------------------------------

EXERCISES = (
    Exercise(
        "square", origin="CUDA course, \"Exercise: CUDA version\" (section 2.10)",
        writes="the global index, the bounds check and the square; managed memory (cudaMallocManaged, cudaFree) in the "
        "course's program",
        tracks=("python", "cuda"), problem=_ex.Square(), py_entry="square_int32_bk",
        cu_source="cuda/square/square.cu", cu_kernels=("square_int32_kernel",), glue="exercise_square.cu",
        cu_includes="#include <cstdint>\n#include <cstring>\n",
        hints=("One thread per element: its index is blockIdx.x * blockDim.x + threadIdx.x (in Python: "
             "blockidx * blockdim + threadidx).",
             "The grid is rounded up to whole blocks, so the last block has threads past the end: they must do "
             "nothing (i < n).",
             "CUDA track: cudaMallocManaged(&a, n * sizeof(int)) gives one pointer for host and device; call "
             "cudaDeviceSynchronize() before the host reads it, then cudaFree(a)."),
        block="cdiv(n, threads) blocks of `threads`",
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name='square',
    summary='managed memory, one thread per element, the bounds check; the CPU twin',
    follows='intro course §2.7-2.12',
    order=30,
    variants=True,
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    bench_cases=bench_cases,
    reference=reference,
    compare=compare,
    on_cpu=on_cpu,
    tour=Tour("x*x on managed memory against its C twin; the chart is the kernel's share of GPU time", drawn=('profiles/square/*.png',)),
    exercises=EXERCISES,
)
