"""reduction: the sum of a float32 array (PMPP chapter 10, GPU MODE lecture 9 "reductions"), four ways,
against CUB's cub::DeviceReduce::Sum.

Public API (numpy in, a number out; arguments are checked before anything is launched):
    sum_f32(x, variant="04_grid_stride")   the float32 sum of a 1-D float32 array, on the GPU
    cub_sum_f32(x)                         the same by cub::DeviceReduce::Sum
    sum_dev(variant, d_x, n, d_out, d_scratch, stream=None)   on device pointers, no sync
    reference(x)                           the sum in float64 (numpy)
    error_bound(x, d), chain(variant, n, blocks, threads), plan(variant, n)   the tolerance, below
    block_sums_f32(x)                      02's per-block sums (no atomics: the same bits every run)
Python twins on the lectures' simulator (harness.base.sim): atomic_naive_k, shared_tree_k (tree_block_sum,
launched by shared_tree_sum), block_sums_k, warp_shuffle_k, grid_stride_k + finish_k, and
`twin(x, variant, ...)` and `twin_block_sums(x)` to run them. Their exercises (reduction_exercises.py):
reduce_tree, reduce_atomic, reduce_grid_stride.

The variants (the one table is in cuda/reduction/reduction.cu; `library.read_table("reduction")` reads it):
  01_atomic_naive   one thread per element, every one atomicAdd-ing into the result
  02_shared_tree    a tree in shared memory per block, one atomicAdd per block
  03_warp_shuffle   the tree inside warps with __shfl_down_sync, shared memory only across warps
  04_grid_stride    a full-wave grid, float4 loads summed per thread, the warp/block tree, one partial
                    per block and a one-block second pass: the best rung

The tolerance, and why it grows with n. Every variant adds in float32, each addition rounding by at
most u = 2^-24 of its result. An input that passes through a chain of D additions on its way to the
sum carries at most D of those roundings, and the classical bound (Higham, "Accuracy and Stability of
Numerical Algorithms", section 4.2) is

    |sum - exact| <= gamma_D * sum|x_i|,   gamma_D = D u / (1 - D u),

whatever the order of the additions, atomics included. D is the variant's longest chain, counted from
its kernels by `reduction_chain` in C: n - 1 for 01 (one chain through every element), about
log2(block) + blocks for 02 and 03 (the block's tree, then one atomicAdd per block in a row), and about
n / (threads in the grid) + a few dozen for 04. So 01's bound is useless past 2^24 elements (D u >= 1:
float32 promises nothing, and a chain of ones really does stop at 2^24) while the trees' stay small.
The reference is numpy's float64 sum of the same float32 inputs (exact to about 2^-53 sum|x|, added
to the allowance). Atomics make 01-03's result depend on the order the blocks arrive in, so tests
compare against this bound, never bit for bit; 04 has no atomics and gives the same bits every run on
one GPU. Inputs of small integers are exact in every variant (every partial sum is an integer below
2^24), so those are compared exactly: that catches a single element dropped or counted twice, which no
tolerance on random floats could.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from harness.base import sim
from harness.calling import library
from harness.calling import results as _results
from harness.programs import reduction_exercises as _ex
from harness.programs.record import Exercise, Picture, Program, Tour

PROGRAM = "reduction"
DEFAULT_VARIANT = "04_grid_stride"
U = 2.0**-24  # float32's unit roundoff
# EXERCISE reduce_grid_stride: copy
WARP = 32
# EXERCISE reduce_grid_stride: end copy

# VARIANTS is the library's one table, read when first asked for: never typed here.
__getattr__ = library.table_attributes(__name__, PROGRAM)


def lib() -> library.Library:
    return library.load(PROGRAM)


@functools.cache
def max_n() -> int:
    """The most elements an entry point takes (reduction_max_n in C)."""
    return int(lib().reduction_max_n())


@functools.cache
def scratch_floats() -> int:
    """The floats of device scratch sum_dev needs (04's per-block partials)."""
    return int(lib().reduction_scratch_floats())


# --- argument checks (before any launch) ------------------------------------------------------------

def check_variant(variant: str) -> str:
    """The variant's name, or ValueError naming those in the library's one table."""
    library.table_index(PROGRAM, "variant", variant)
    return variant


def check_n(n) -> int:
    return library.check_int(n, "n", 0, max_n(), " elements")


def _check_x(x) -> np.ndarray:
    x = library.check_array(x, "x", np.float32, ndim=1)
    check_n(x.size)
    return x


# --- the API ------------------------------------------------------------------------------------------

def sum_f32(x: np.ndarray, variant: str = DEFAULT_VARIANT) -> np.float32:
    """The float32 sum of a 1-D C-contiguous float32 array on the GPU (0 for an empty one, computed by
    the GPU like any other). The result comes back through a NaN-poisoned float."""
    check_variant(variant)
    x = _check_x(x)
    out = np.full(1, np.nan, dtype=np.float32)
    lib().reduction_sum_f32(variant, x, x.size, out)
    return out[0]


def block_sums_f32(x: np.ndarray) -> np.ndarray:
    """02_shared_tree's per-block sums on the GPU (reduction_02_block_sums_f32), one float per block of
    its launch: the same bits every run (no atomics), so twin_block_sums must give exactly them."""
    x = _check_x(x)
    if x.size == 0:
        raise ValueError("block_sums_f32 needs at least one element (an empty sum has no blocks)")
    blocks, _ = plan("02_shared_tree", x.size)
    out = np.full(blocks, np.nan, dtype=np.float32)
    lib().reduction_02_block_sums_f32(x, x.size, out)
    return out


def cub_sum_f32(x: np.ndarray) -> np.float32:
    """The same sum by cub::DeviceReduce::Sum (the yardstick)."""
    x = _check_x(x)
    out = np.full(1, np.nan, dtype=np.float32)
    lib().reduction_cub_sum_f32(x, x.size, out)
    return out[0]


def sum_dev(variant: str, d_x, n: int, d_out, d_scratch, stream=None) -> None:
    """Enqueue one sum of n floats at d_x into the one float at d_out, on device pointers (DeviceBuffer or
    cffi); d_scratch holds scratch_floats() floats. No sync: for timing and profiling."""
    check_variant(variant)
    check_n(n)
    lib().reduction_sum_f32_dev(variant, d_x, n, d_out, d_scratch, stream)


def plan(variant: str, n: int) -> tuple[int, int]:
    """(blocks, threads) of the launch `variant` makes at n (04 asks the device how many fill it)."""
    check_variant(variant)
    check_n(n)
    L = lib()
    blocks, threads = L.ffi.new("long long *"), L.ffi.new("int *")
    L.reduction_plan(variant, n, blocks, threads)
    return int(blocks[0]), int(threads[0])


def chain(variant: str, n: int, blocks: int, threads: int) -> int:
    """D of the error bound: the longest chain of float32 additions an input passes through, for `variant`
    over n elements on blocks x threads (reduction_chain in C, counted from the kernels)."""
    check_variant(variant)
    d = int(lib().reduction_chain(variant, check_n(n), int(blocks), int(threads)))
    if d < 0:
        raise ValueError(f"no chain for {variant} at n={n}, blocks={blocks}, threads={threads}")
    return d


def reference(x: np.ndarray) -> float:
    """numpy's sum in float64 of the float32 inputs (each exact in float64): the truth to about
    2^-53 * sum|x|, far below float32's rounding."""
    return float(np.sum(np.asarray(x, dtype=np.float64)))


def error_bound(x: np.ndarray, d: int) -> float:
    """How far a float32 sum whose longest chain is d additions may be from the exact sum:
    gamma_d * sum|x| (module docstring), plus the float64 reference's own error; inf when d u >= 1."""
    x64 = np.abs(np.asarray(x, dtype=np.float64))
    mag = float(np.sum(x64))
    if d * U >= 1.0:
        return math.inf
    return d * U / (1.0 - d * U) * mag + x64.size * 2.0**-53 * mag


def check(out: float, x: np.ndarray, d: int) -> tuple[bool, float, float]:
    """(within the bound, |out - reference|, the bound). A NaN or infinite out never passes."""
    err = abs(float(out) - reference(x)) if np.isfinite(out) else math.inf
    bound = error_bound(x, d)
    return bool(err <= bound and np.isfinite(out)), err, bound


# --- Python twins (harness.base.sim) -------------------------------------------------------------------
# Kernel for kernel the CUDA code, run block by block on the CPU in float32 (np.float32 arithmetic
# rounds like the GPU's). In a generator kernel each bare `yield` is a __syncthreads(). The simulator
# runs one thread at a time, so `out[0] += v` is atomic there as atomicAdd is on the GPU.

def atomic_naive_k(ctx, x, n, out):
    """01_atomic_naive: one thread per element, every thread adding into out[0]."""
    i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
    if i < n:
        out[0] += x[i]  # atomicAdd(out, x[i])


# EXERCISE reduce_tree: copy
# EXERCISE reduce_atomic: copy
def tree_block_sum(ctx, x, n):
    """02's tree for one block: two elements per thread on load (0 past n), then the tree in shared
    memory (ctx.shared.partial, blockDim.x floats), halving the active threads each level. Use as
    `s = yield from tree_block_sum(ctx, x, n)`: thread 0 gets the block's sum."""
    t, bd = ctx.threadIdx.x, ctx.blockDim.x
    partial = ctx.shared.partial
    # EXERCISE reduce_tree: begin load: i = blockIdx.x * 2 * blockDim.x + t; v = x[i] plus x[i + blockDim.x],
    # EXERCISE reduce_tree: todo each only when its index is below n (np.float32(0), the identity of the sum, in its
    # EXERCISE reduce_tree: todo place: the last block is partial); partial[t] = v; then wait until every thread of
    # EXERCISE reduce_tree: todo the block has stored its value (a bare `yield` is __syncthreads()).
    i = ctx.blockIdx.x * 2 * bd + t
    v = np.float32(0)
    if i < n:
        v = x[i]
    if i + bd < n:
        v = v + x[i + bd]
    partial[t] = v
    yield  # every partial written before anyone reads a neighbour's
    # EXERCISE reduce_tree: end
    # EXERCISE reduce_tree: begin the tree: for stride = blockDim.x // 2, halving down to 1, threads t < stride add
    # EXERCISE reduce_tree: todo partial[t + stride] into partial[t]; every thread waits (`yield`) after each step,
    # EXERCISE reduce_tree: todo outside the `if` (the next step reads what this one wrote).
    stride = bd // 2
    while stride > 0:
        if t < stride:
            partial[t] = partial[t] + partial[t + stride]
        yield  # this level finished before the next one reads it
        stride //= 2
    # EXERCISE reduce_tree: end
    return partial[0]

# EXERCISE reduce_atomic: end copy

def block_sums_k(ctx, x, n, partials):
    """02's per-block sums, before any atomic: each block's tree, its sum to partials[blockIdx.x] (the
    twin of reduction_02_block_sums)."""
    s = yield from tree_block_sum(ctx, x, n)
    # EXERCISE reduce_tree: begin thread 0 (and only it) writes the block's sum s to partials[blockIdx.x].
    if ctx.threadIdx.x == 0:
        partials[ctx.blockIdx.x] = s
    # EXERCISE reduce_tree: end
# EXERCISE reduce_tree: end copy


# EXERCISE reduce_atomic: copy
def shared_tree_k(ctx, x, n, out):
    """02_shared_tree: the block's tree, then one atomicAdd per block into out[0]."""
    s = yield from tree_block_sum(ctx, x, n)
    # EXERCISE reduce_atomic: begin thread 0 alone adds its block's sum s into out[0] (atomicAdd on the GPU; the
    # EXERCISE reduce_atomic: todo simulator runs one thread at a time, so a plain += is atomic here).
    if ctx.threadIdx.x == 0:
        out[0] += s  # atomicAdd(out, s)
    # EXERCISE reduce_atomic: end


def shared_tree_sum(x, n, out, threads):
    """02's launch (reduction_02_launch): out[0] = 0 first, since the blocks add into it, then one block
    of `threads` (a power of two) per 2 * threads elements, with `threads` floats of shared memory."""
    # EXERCISE reduce_atomic: begin set out[0] to 0 (the blocks add into it), then launch shared_tree_k with
    # EXERCISE reduce_atomic: todo sim.launch on ceil(n / (2 * threads)) blocks of `threads`, passing x, n, out and
    # EXERCISE reduce_atomic: todo shared={"partial": ((threads,), np.float32)}.
    out[0] = 0
    sim.launch(shared_tree_k, -(-n // (2 * threads)), threads, x, n, out,
               shared={"partial": ((threads,), np.float32)})
    # EXERCISE reduce_atomic: end
# EXERCISE reduce_atomic: end copy


def traced(kernel, trace: list):
    """`kernel` with shared memory's `partial` copied into `trace` (block 0) each time its threads pass a
    barrier: the levels of the tree, as the picture draws them."""
    def gen(ctx, *args):
        it = kernel(ctx, *args)
        try:
            while True:
                next(it)
                yield
                if ctx.threadIdx.x == 0 and ctx.blockIdx.x == 0:
                    trace.append(ctx.shared.partial.copy())
        except StopIteration as stop:
            return stop.value
    return gen


# EXERCISE reduce_grid_stride: copy
def shfl_down(ctx, v, offset):
    """__shfl_down_sync(0xffffffff, v, offset) for every lane of the block at once: each lane publishes
    its value, then reads the one `offset` lanes above it in its own warp (a lane with none above keeps
    its own, as on the GPU). Two barriers stand in for the warp's lockstep, so every thread of the block
    must call it: use as `v = v + (yield from shfl_down(ctx, v, offset))`."""
    t = ctx.threadIdx.x
    lanes = ctx.shared.lanes
    lanes[t] = v
    yield
    got = lanes[t + offset] if t % WARP + offset < WARP else v
    yield  # all have read before the next call writes again
    return got


def block_sum(ctx, v):
    """The warp tree (five shuffles), each warp's lane 0 writing its sum to shared memory, then warp 0
    adding those with shuffles again: thread 0 returns the block's sum. On the GPU only warp 0 runs the
    second round; here every warp does (the barriers inside shfl_down need all of them) and only thread
    0's value is used."""
    t = ctx.threadIdx.x
    lane, warp = t % WARP, t // WARP
    offset = WARP // 2
    while offset > 0:
        v = v + (yield from shfl_down(ctx, v, offset))
        offset //= 2
    if lane == 0:
        ctx.shared.warp_sums[warp] = v
    yield  # every warp's sum written before warp 0 reads them
    v = ctx.shared.warp_sums[lane] if lane < ctx.blockDim.x // WARP else np.float32(0)
    offset = WARP // 2
    while offset > 0:
        v = v + (yield from shfl_down(ctx, v, offset))
        offset //= 2
    return v
# EXERCISE reduce_grid_stride: end copy


def warp_shuffle_k(ctx, x, n, out):
    """03_warp_shuffle: two elements per thread on load, the tree through shuffles; one atomicAdd per block."""
    bd = ctx.blockDim.x
    i = ctx.blockIdx.x * 2 * bd + ctx.threadIdx.x
    v = np.float32(0)
    if i < n:
        v = x[i]
    if i + bd < n:
        v = v + x[i + bd]
    v = yield from block_sum(ctx, v)
    if ctx.threadIdx.x == 0:
        out[0] += v  # atomicAdd(out, v)


# EXERCISE reduce_grid_stride: copy
def _f4(x, s):
    """The sum of one float4 as the CUDA code adds it: (a.x + a.y) + (a.z + a.w)."""
    return (x[s] + x[s + 1]) + (x[s + 2] + x[s + 3])


def grid_stride_k(ctx, x, n, head, partials):
    """04_grid_stride's first pass: float4 chunks of x[head:] in a grid-stride loop, four per trip where
    four remain, the head and tail by the first threads, then the block's tree into partials[block]."""
    # EXERCISE reduce_grid_stride: begin tid = this thread's global index; stride = the number of threads in the
    # EXERCISE reduce_grid_stride: todo whole grid.
    tid = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
    stride = ctx.gridDim.x * ctx.blockDim.x
    # EXERCISE reduce_grid_stride: stub tid, stride = 0, 1
    # EXERCISE reduce_grid_stride: end
    n4 = (n - head) // 4
    s = np.float32(0)
    # EXERCISE reduce_grid_stride: begin add this thread's elements into s (np.float32 arithmetic): the float4 chunks
    # EXERCISE reduce_grid_stride: todo i = tid, tid + stride, ... below n4, chunk i being _f4(x, head + 4 * i) (four
    # EXERCISE reduce_grid_stride: todo a trip, a stride apart, while four remain, as the CUDA code does, or one a
    # EXERCISE reduce_grid_stride: todo trip); then the head x[tid] when tid < head (the elements before the 16-byte
    # EXERCISE reduce_grid_stride: todo boundary) and the tail x[head + 4 * n4 + tid] when tid < 4 and that index is
    # EXERCISE reduce_grid_stride: todo below n (those after the last whole float4).
    i = tid
    while i + 3 * stride < n4:
        a, b, c, d = (_f4(x, head + 4 * (i + k * stride)) for k in range(4))
        s = s + (a + b + c + d)
        i += 4 * stride
    while i < n4:
        s = s + _f4(x, head + 4 * i)
        i += stride
    if tid < head:
        s = s + x[tid]
    t = head + 4 * n4 + tid
    if tid < 4 and t < n:
        s = s + x[t]
    # EXERCISE reduce_grid_stride: end
    s = yield from block_sum(ctx, s)
    # EXERCISE reduce_grid_stride: begin thread 0 now holds the block's sum s: write it to the block's partial.
    if ctx.threadIdx.x == 0:
        partials[ctx.blockIdx.x] = s
    # EXERCISE reduce_grid_stride: end
# EXERCISE reduce_grid_stride: end copy


def finish_k(ctx, partials, count, out):
    """04_grid_stride's second pass (one block): strided over the partials, then the tree; writes out[0]."""
    s = np.float32(0)
    i = ctx.threadIdx.x
    while i < count:
        s = s + partials[i]
        i += ctx.blockDim.x
    s = yield from block_sum(ctx, s)
    if ctx.threadIdx.x == 0:
        out[0] = s


TWIN_THREADS = 64  # two warps: the smallest block where the cross-warp step does something


def _shared(threads: int) -> dict:
    return {"partial": ((threads,), np.float32), "lanes": ((threads,), np.float32),
            "warp_sums": ((max(threads // WARP, 1),), np.float32)}


def twin_plan(variant: str, n: int, threads: int = TWIN_THREADS, blocks: int | None = None) -> int:
    """The twin's grid: as the CUDA dispatcher sizes it for 01-03 (one element, or two, per thread); 04
    takes `blocks` (default 3: a small "full wave", so threads loop several times)."""
    if variant == "01_atomic_naive":
        return max(-(-n // threads), 1)
    if variant in ("02_shared_tree", "03_warp_shuffle"):
        return max(-(-n // (2 * threads)), 1)
    return blocks or 3


def twin_block_sums(x: np.ndarray, threads: int = TWIN_THREADS) -> np.ndarray:
    """02's per-block sums on the simulator (block_sums_k): the twin of block_sums_f32 at threads=256."""
    x = np.asarray(x, dtype=np.float32)
    g = twin_plan("02_shared_tree", x.size, threads)
    partials = np.full(g, np.nan, dtype=np.float32)  # poisoned: a sum never written shows up
    sim.launch(block_sums_k, g, threads, x, x.size, partials, shared=_shared(threads))
    return partials


def twin(x: np.ndarray, variant: str = DEFAULT_VARIANT, threads: int = TWIN_THREADS, blocks: int | None = None,
         misalign: int = 0, trace: list | None = None) -> tuple[np.float32, int]:
    """Run a variant's Python twin on the simulator: (the float32 sum, the blocks it ran). For
    04_grid_stride, `misalign` (0..3 floats) plays the pointer's offset from a 16-byte boundary (the head
    the CUDA launcher computes). `threads` must be a power of two, at least 32 (a whole warp)."""
    check_variant(variant)
    if not isinstance(threads, int) or threads < WARP or threads & (threads - 1):
        raise ValueError(f"threads must be a power of two of at least {WARP}, got {threads!r}")
    if not 0 <= misalign <= 3:
        raise ValueError(f"misalign is 0..3 floats, got {misalign}")
    x = np.asarray(x, dtype=np.float32)
    n = x.size
    g = twin_plan(variant, n, threads, blocks)
    out = np.zeros(1, dtype=np.float32)  # what cudaMemsetAsync(out, 0) gives the atomic variants
    if n == 0:
        return out[0], g
    sh = _shared(threads)
    if variant == "01_atomic_naive":
        sim.launch(atomic_naive_k, g, threads, x, n, out)
    elif variant == "02_shared_tree" and trace is not None:
        sim.launch(traced(shared_tree_k, trace), g, threads, x, n, out, shared=sh)
    elif variant == "02_shared_tree":
        out[0] = np.nan  # shared_tree_sum sets it to 0 itself, as reduction_02_launch does
        shared_tree_sum(x, n, out, threads)
    elif variant == "03_warp_shuffle":
        sim.launch(warp_shuffle_k, g, threads, x, n, out, shared=sh)
    else:
        head = min((4 - misalign) % 4, n)
        partials = np.full(g, np.nan, dtype=np.float32)  # poisoned: a partial never written shows up
        out[0] = np.nan
        sim.launch(grid_stride_k, g, threads, x, n, head, partials, shared=sh)
        sim.launch(finish_k, 1, threads, partials, g, out, shared=sh)
    return out[0], g


# --- without a GPU --------------------------------------------------------------------------------

CPU_SIZES = (1, 31, 64, 129, 1000, 4099)


def on_cpu(args: list[str]) -> tuple[pd.DataFrame, str]:
    """`invoke run reduction [-- N]` without a GPU: every variant's Python twin on the simulator, at
    ragged sizes (or N, at most 20000: one Python call per thread), each against the float64 reference
    within the variant's error bound."""
    args = [str(a) for a in args]
    if len(args) > 1 or (args and not args[0].isdigit()):
        raise ValueError(f"on the CPU, reduction takes one argument N (elements) or nothing, got: {' '.join(args)}")
    sizes = (int(args[0]),) if args else CPU_SIZES
    if not all(1 <= n <= 20000 for n in sizes):
        raise ValueError(f"on the CPU (the simulator) N must be 1..20000, got {sizes[0]}")
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        x = rng.uniform(-1, 1, n).astype(np.float32)
        for v in library.read_table(PROGRAM):
            got, g = twin(x, v)
            ok, err, bound = check(got, x, chain(v, n, g, TWIN_THREADS))
            rows.append({"variant": v, "n": n, "sum": float(got), "reference": reference(x), "abs_error": err,
                         "bound": bound, "check": "pass" if ok else "fail"})
    return pd.DataFrame(rows), ("the kernels' Python twins on the simulator (harness.base.sim, blocks of 64 threads), against "
                                "numpy's float64 sum, within gamma_D * sum|x|")


# --- the executable -----------------------------------------------------------------------------

def run(*args, timeout: float = 300) -> pd.DataFrame:
    """Run build/bin/reduction and parse its result lines (a failed check raises ProgramError)."""
    return _results.run(PROGRAM, *args, timeout=timeout)


def parse_output(text: str) -> pd.DataFrame:
    return _results.parse_output(text, PROGRAM)


# --- the picture: `invoke viz reduction` (analysis/reduction.py draws it) -----------------------------

TREE_N = 16
ERROR_SIZES = tuple(1 << k for k in range(10, 26))


def tree_model(x: np.ndarray) -> np.ndarray:
    """02's tree over a whole array in float32 (padded with zeros to a power of two): the first half
    plus the second half, again and again, as partial[t] += partial[t + stride] does."""
    a = np.asarray(x, dtype=np.float32)
    size = 1 << max(a.size - 1, 0).bit_length()
    a = np.concatenate([a, np.zeros(size - a.size, np.float32)])
    while a.size > 1:
        a = a[: a.size // 2] + a[a.size // 2:]
    return a


def viz_data(simulate: bool = False, progress=None) -> dict:
    """What analysis/reduction.py draws: (1) 02_shared_tree's levels over 16 inputs (one block of 8
    threads), from the twin; (2) how far float32 sums of n uniform [0, 1) values land from the exact sum,
    relative to it: one chain (np.cumsum in float32, 01's arithmetic in one order) against a tree
    (tree_model), and, with a GPU (simulate=False), every variant and CUB measured at the same n."""
    x16 = np.arange(1, TREE_N + 1, dtype=np.float32)
    levels: list = []
    sim.launch(traced(shared_tree_k, levels), 1, TREE_N // 2, x16, TREE_N, np.zeros(1, np.float32),
               shared={"partial": ((TREE_N // 2,), np.float32)})
    rng = np.random.default_rng(0)
    rows = []
    variants = () if simulate else library.read_table(PROGRAM)
    total = len(ERROR_SIZES)
    for k, n in enumerate(ERROR_SIZES):
        x = rng.random(n, dtype=np.float32)
        exact = reference(x)
        sums = {"one float32 chain (model of 01)": float(np.cumsum(x, dtype=np.float32)[-1]),
                "a float32 tree (model of 02-04)": float(tree_model(x)[0])}
        for v in variants:
            sums[v] = float(sum_f32(x, v))
        if not simulate:
            sums["cub"] = float(cub_sum_f32(x))
        rows += [{"n": n, "what": what, "rel_error": abs(s - exact) / exact} for what, s in sums.items()]
        if progress is not None:
            progress(k + 1, total)
    device = None
    if not simulate:
        try:
            from harness.calling import cudart

            device = cudart.device_name(0)
        except Exception:  # the name is only a label on the figure
            device = None
    how = ("the tree from the Python simulator; the errors from numpy models" if simulate else
           f"the tree from the Python simulator; the errors measured on {device or 'the GPU'} and from numpy models")
    return {"inputs": x16, "levels": levels, "errors": pd.DataFrame(rows), "simulated": bool(simulate),
            "device": device, "computed_on": how}


# --- the bench, the profiler and the sanitizer --------------------------------------------------------

HEADLINE, QUICK = ("2^28", 1 << 28), ("2^24", 1 << 24)
BEST = "04_grid_stride"
TARGET = 0.9  # the best rung's goal, as a fraction of CUB at the headline size


def _filled(nbytes: int):
    from harness.calling import cudart

    buf = cudart.DeviceBuffer(nbytes)
    buf.fill_bytes(0x3F)  # 0x3F3F3F3F = 0.747f: a normal float, no NaN or denormal slow paths
    return buf


def bench_setup(variant: str, n: int):
    """The timing child's target: n float32 on the device, the result and the scratch allocated once,
    the launch marshalled once."""
    from harness.calling import cudart
    from harness.measuring import bench

    check_variant(variant)
    check_n(n)
    x, out, scratch = _filled(4 * n), cudart.DeviceBuffer(4), cudart.DeviceBuffer(4 * scratch_floats())

    def close():
        for b in (x, out, scratch):
            b.close()

    try:
        launch = lib().prepare("reduction_sum_f32_dev", variant, x, n, out, scratch, library.STREAM)
    except BaseException:
        close()
        raise
    return bench.Prepared(launch, close)


def cub_setup(n: int):
    """The CUB ceiling's target: cub::DeviceReduce::Sum over n float32, its temporary storage sized and
    allocated here, once, so the timed call is the reduction alone."""
    from harness.calling import cudart
    from harness.measuring import bench

    check_n(n)
    L = lib()
    need = np.zeros(1, dtype=np.int64)
    L.reduction_cub_temp_bytes(n, need)
    temp_bytes = int(need[0])
    x, out, temp = _filled(4 * n), cudart.DeviceBuffer(4), cudart.DeviceBuffer(max(temp_bytes, 1))

    def close():
        for b in (x, out, temp):
            b.close()

    try:
        launch = L.prepare("reduction_cub_sum_f32_dev", x, n, out, temp, temp_bytes, library.STREAM)
    except BaseException:
        close()
        raise
    return bench.Prepared(launch, close)


def cub_ceiling_name(label: str) -> str:
    return f"reduction_cub@{label}"


def _make_cub_ceiling(label: str, n: int):
    def ceiling(quick: bool = False):
        """cub::DeviceReduce::Sum at this size, timed beside the cases (4 bytes read an element)."""
        from harness.measuring import bench

        return bench.TimedCeiling(cub_ceiling_name(label), "GB/s", 4.0 * n, f"harness.programs.{PROGRAM}:cub_setup",
                                  {"n": n}, f"cub::DeviceReduce::Sum over {label} float32",
                                  same_as=(PROGRAM, "cub", label))
    return ceiling


def ceilings() -> dict:
    """CUB's sum at the headline size and at the quick one (the memcpy ceiling is built in)."""
    return {cub_ceiling_name(label): _make_cub_ceiling(label, n) for label, n in (HEADLINE, QUICK)}


def bench_cases(quick: bool = False) -> list:
    """Every variant against CUB's sum at the same size, timed in the same run, GB/s = 4n bytes read /
    time (a reduction writes one float). At 2^28 floats (1 GiB) the full run, at 2^24 `--quick`.
    Also, against cudaMemcpy's bandwidth (bytes read + written, 1 GiB): the best rung and CUB itself,
    which says how close to the memory system both come. The goal: 04_grid_stride >= 0.9 of CUB at 2^28.
    01_atomic_naive at 2^28 takes a good part of a second a launch: the bench spends seconds on it."""
    from harness.measuring import bench

    def case(variant, label, n, ceiling, setup, kwargs, target=None, is_quick=False, note="", row=None):
        return bench.BenchCase(program=PROGRAM, variant=row or variant, size=label,
                               setup=f"harness.programs.{PROGRAM}:{setup}", kwargs=kwargs, unit="GB/s",
                               amount=4.0 * n, ceiling=ceiling, target=target, quick=is_quick, bytes=4.0 * n,
                               flops=float(n), note=note)

    cases = []
    for label, n in (QUICK, HEADLINE):
        is_quick = label == QUICK[0]
        for v in library.read_table(PROGRAM):
            target = TARGET if (v == BEST and label == HEADLINE[0]) else None
            note = "fraction of CUB's sum at this size; bytes = 4n read" + (
                f" (goal: >= {TARGET} at {label})" if target else "")
            cases.append(case(v, label, n, cub_ceiling_name(label), "bench_setup", {"variant": v, "n": n},
                              target=target, is_quick=is_quick, note=note))
        cases.append(case(BEST, label, n, "memcpy", "bench_setup", {"variant": BEST, "n": n}, is_quick=is_quick,
                          row=f"{BEST}-vs-memcpy", note="fraction of cudaMemcpy DtoD bandwidth (read + written)"))
        cases.append(case("cub", label, n, "memcpy", "cub_setup", {"n": n}, is_quick=is_quick,
                          note="cub::DeviceReduce::Sum as a fraction of cudaMemcpy DtoD bandwidth"))
    return cases


def profile_args(variant: str | None = None) -> list[str]:
    return ["--variant", variant or DEFAULT_VARIANT, "--reps", "1", "1000003"]


def sanitize_args() -> dict[str, list[str]]:
    """Every variant on a ragged size (not a multiple of a block or of 4); 04 also on n = 3 (head and tail
    only, no float4) and on a size whose float4 body takes both of its loops."""
    runs = {f"{v} ragged": ["--variant", v, "--reps", "1", "4099"] for v in library.read_table(PROGRAM)}
    runs[f"{BEST} n=3"] = ["--variant", BEST, "--reps", "1", "3"]
    runs[f"{BEST} big"] = ["--variant", BEST, "--reps", "1", "5000011"]
    return runs


# --- the exercises: `invoke exercise start reduce_tree` (reduction_exercises.py holds their problems) ------

EXERCISES = (
    Exercise(
        "reduce_tree", origin="PMPP chapter 10 (the reduction tree in shared memory), GPU MODE lecture 9",
        writes="the load with 0 past n, the halving loop with a barrier after each step, the block's sum",
        tracks=("python", "cuda"), problem=_ex.ReduceTree(), py_entry="block_sums_k",
        cu_source="cuda/reduction/reduction.cu", cu_kernels=("reduction_02_block_sums",),
        glue="exercise_reduce_tree.cu",
        hints=("Each block sums its own 2 * blockDim.x elements: thread t loads two of them, blockDim.x apart, "
               "adds them, and stores the pair's sum in shared memory at partial[t].",
               "The tree: stride = blockDim.x / 2, then halved each step; threads t < stride add partial[t + stride] "
               "into partial[t]. Every thread reaches a barrier after the loads and after every step, so the barrier "
               "is outside the `if` (Python: a bare `yield`).",
               "The last block is partial: an index at or past n loads 0 (the identity of the sum), never x. After "
               "the tree partial[0] is the block's sum: thread 0 alone writes it to partials[blockIdx.x]."),
        block="256 threads, 512 elements a block (Python: 16 threads, 32 elements)",
    ),
    Exercise(
        "reduce_atomic", origin="PMPP chapter 10 (one atomic per block into the total), GPU MODE lecture 9",
        writes="one atomicAdd per block of the block's sum into the total, and the launch that zeroes it first",
        tracks=("python", "cuda"), problem=_ex.ReduceAtomic(), py_entry="shared_tree_sum",
        cu_source="cuda/reduction/reduction.cu", cu_kernels=("reduction_02_shared_tree",),
        glue="exercise_reduce_atomic.cu",
        hints=("The tree is done (tree_block_sum / reduction_02_block_sum): thread 0 gets its block's sum s. The "
               "blocks must now add their sums into one total.",
               "Blocks run at the same time: `*out += s` from two blocks can lose one addition; atomicAdd(out, s) "
               "cannot. Only thread 0 holds the block's sum: only it adds (Python: the simulator runs one thread at a "
               "time, so `out[0] += s` is atomic there).",
               "The total must start at 0 before any block adds into it: the launch sets it (CUDA: "
               "cudaMemsetAsync(out, 0, sizeof(float), s) on the kernel's stream, before the launch; Python: "
               "out[0] = 0 before sim.launch), then launches ceil(n / (2 * threads)) blocks."),
        block="256 threads, 512 elements a block (Python: 16 threads, 32 elements)",
    ),
    Exercise(
        "reduce_grid_stride", origin="GPU MODE lecture 9 (a full-wave grid, many elements a thread), PMPP chapter 10",
        writes="the grid-stride loop over float4 chunks, the head and tail, the block's partial",
        tracks=("python", "cuda"), problem=_ex.ReduceGridStride(), py_entry="grid_stride_k",
        cu_source="cuda/reduction/reduction.cu", cu_kernels=("reduction_04_grid_stride",),
        glue="exercise_reduce_grid_stride.cu", cu_includes="#include <cstdint>\n",
        hints=("The grid is smaller than the data: each thread starts at its global index and steps by the whole "
               "grid's thread count, summing in its own register; only then does the block's tree (given) run.",
               "The body is float4 chunks of x + head: chunk i is x[head + 4i .. head + 4i + 3], added as "
               "(a.x + a.y) + (a.z + a.w); there are n4 = (n - head) / 4 of them. Thread tid takes chunks tid, "
               "tid + stride, ... below n4.",
               "What the chunks miss: the head (x[0 .. head - 1], before the 16-byte boundary) goes to threads "
               "tid < head, one each; the tail (after the last whole chunk, at most 3) to threads tid < 4 at "
               "x[head + 4 * n4 + tid] when that is below n. Thread 0 writes the block's sum to partials[blockIdx.x]."),
        block="a grid of `blocks` x 256 threads, smaller than n (Python: 64 threads)",
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name=PROGRAM,
    summary="a sum: atomics, a shared tree, warp shuffles, grid-stride float4",
    follows="PMPP ch. 10, [lecture 9](https://github.com/gpu-mode/lectures/tree/main/lecture_009)",
    order=65,
    readme_picture="[tree](cuda/reduction/tree_sim.png)",
    variants=True,
    profile_variants=lambda: library.read_table(PROGRAM),  # all four: the ladder is the point
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    bench_cases=bench_cases,
    ceilings=ceilings,
    run=run,
    parse_output=parse_output,
    reference=reference,
    on_cpu=on_cpu,
    picture=Picture("reduction", viz_data, options=("simulate", "progress")),
    exercises=EXERCISES,
    tour=Tour("02's tree of partial sums, and how far float32 sums drift from the exact one as n grows",
              drawn=("plots/reduction_*.png",), committed=("cuda/reduction/tree_sim.png",)),
)
