"""convolution: 1-D and 2-D convolution of float32 data with a (2r+1)-tap filter, zero padding at the
edges, out the shape of the input (PMPP chapter 7).

What is computed is PMPP's formula, a cross-correlation -- the filter is not flipped:
    1-D  out[i]    = sum_j f[j] * x[i - r + j]                       j = 0 .. 2r
    2-D  out[y, x] = sum_{fy, fx} f[fy, fx] * in[y - r + fy, x - r + fx]
with the input taken as 0 outside the array. numpy's np.convolve flips its second argument, so
np.convolve(x, f[::-1], "same") is this for len(x) >= 2r + 1 (`reference` is a direct float64 sum).

Public API (numpy in, numpy out; arguments are checked before anything is launched):
    convolve_1d(x, f, variant=None)             float32 x (n,), f (2r+1,), r <= max_radius(1) = 8
    convolve_2d(x, f, variant=None)             float32 x (h, w), f (2r+1, 2r+1), r <= max_radius(2) = 4
    convolve_dev(variant, d_x, d_f, r, d_out, n= | h=, w=, stream=)   device pointers, no sync
    set_filter(f)                               load f into the constant slot of its radius (for _dev)
    reference(x, f)                             float64 numpy, the same zero padding
    twin(x, f, variant, ...)                    the variant's Python twin on harness.base.sim (TWINS)
The variants come from the library's one table (cuda/convolution/convolution.cu), with their dimension;
variant=None is the best rung of that dimension, the table's last (07_vec_1d, 08_vec_2d). The book's
rungs 01-06 have Python twins; 07 and 08 differ from 03 and 06 in how wide their memory accesses are
and in their tile shapes, which the simulator would not show, and have none.

Tolerance: ||out - ref|| / ||ref|| <= 1e-5 against the float64 reference. Each output is a float32 sum
of at most 81 products; rounding adds about sqrt(taps) * 2^-24 relative to the result for random
signs (~5e-7 at 81 taps), far below 1e-5 and far below a wrong, missing or flipped tap.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from harness.base import sim
from harness.calling import library
from harness.calling import results as _results
from harness.programs import convolution_exercises as _ex
from harness.programs.record import Exercise, Picture, Program, Tour

if TYPE_CHECKING:  # the CPU paths return DataFrames; pandas is imported where they run
    import pandas as pd

PROGRAM = "convolution"
TOL = 1e-5

# VARIANTS is the library's one table, read when first asked for: never typed here.
__getattr__ = library.table_attributes(__name__, PROGRAM)


def lib() -> library.Library:
    return library.load(PROGRAM)


# --- what the library accepts (read from it, never typed twice) ---------------------------------------

def variant_dims(variant: str) -> int:
    """1 or 2: the dimension a variant convolves; ValueError naming the variants for an unknown one."""
    return int(lib().convolution_variant_dims(library.table_index(PROGRAM, "variant", variant)))


def variants_of(dims: int) -> tuple[str, ...]:
    return tuple(v for v in library.read_table(PROGRAM) if variant_dims(v) == dims)


@functools.cache
def max_radius(dims: int) -> int:
    return int(lib().convolution_max_radius(dims))


@functools.cache
def tiling(dims: int) -> tuple[int, int, int]:
    """The shape of the tiled rung with a twin, 03_tiled_1d or 06_tiled_2d: (threads in x, threads in y,
    outputs per thread)."""
    return tuple(int(lib().convolution_tiling(dims, i)) for i in range(3))


def check_variant(variant: str, dims: int) -> str:
    d = variant_dims(variant)
    if d != dims:
        raise ValueError(f"{variant} is a {d}-D variant; for {dims}-D data use one of "
                         f"{', '.join(variants_of(dims))}")
    return variant


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def check_radius(r, dims: int) -> int:
    if not _is_int(r):
        raise TypeError(f"the radius must be an integer, got {type(r).__name__}")
    if not 0 <= r <= max_radius(dims):
        raise ValueError(f"the radius must be 0..{max_radius(dims)} for {dims}-D convolution, got {r}")
    return int(r)


def check_filter(f, dims: int) -> tuple[np.ndarray, int]:
    """(f as float32, its radius): f must have 2r+1 taps (1-D) or be (2r+1) x (2r+1) (2-D), finite,
    with r at most max_radius(dims)."""
    f = library.check_array(f, "filter", np.float32, ndim=dims, contiguous="copy")
    side = f.shape[0]
    if dims == 2 and f.shape[1] != side:
        raise ValueError(f"a 2-D filter must be square, got shape {f.shape}")
    if side % 2 == 0:
        raise ValueError(f"a filter has 2r+1 taps a side (an odd number), got {side}")
    check_radius((side - 1) // 2, dims)
    if not np.all(np.isfinite(f)):
        raise ValueError("the filter must be finite")
    return f, (side - 1) // 2


def check_size(dims: int, n: int = 0, h: int = 0, w: int = 0) -> None:
    """Negative or too large sizes: ValueError naming the limit (the grids' limits, from the library)."""
    for name, v in (("n", n), ("h", h), ("w", w)):
        if not _is_int(v):
            raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    if dims == 1 and n > lib().convolution_max_n():
        raise ValueError(f"n must be at most {lib().convolution_max_n()} (the 1-D grid's limit), got {n}")
    if dims == 2 and h > lib().convolution_max_height():
        raise ValueError(f"h must be at most {lib().convolution_max_height()} (gridDim.y of 8-row blocks), got {h}")
    if dims == 2 and w > lib().convolution_max_width():
        raise ValueError(f"w must be at most {lib().convolution_max_width()}, got {w}")


# --- the library ----------------------------------------------------------------------------------

def convolve_1d(x: np.ndarray, f: np.ndarray, variant: str | None = None) -> np.ndarray:
    """out[i] = sum_j f[j] x[i - r + j] (zero padding) for a 1-D C-contiguous float32 x, on the GPU
    (variant None: the best 1-D rung)."""
    variant = check_variant(variant or variants_of(1)[-1], 1)
    x = library.check_array(x, "x", np.float32, ndim=1)
    f, r = check_filter(f, 1)
    check_size(1, n=x.size)
    out = np.full(x.shape, np.nan, dtype=np.float32)
    if x.size:
        lib().convolution_1d_f32(variant, x, x.size, f, r, out)
    return out


def convolve_2d(x: np.ndarray, f: np.ndarray, variant: str | None = None) -> np.ndarray:
    """out[y, x] = sum f[fy, fx] in[y - r + fy, x - r + fx] (zero padding), h x w float32, on the GPU
    (variant None: the best 2-D rung)."""
    variant = check_variant(variant or variants_of(2)[-1], 2)
    x = library.check_array(x, "x", np.float32, ndim=2)
    f, r = check_filter(f, 2)
    h, w = x.shape
    check_size(2, h=h, w=w)
    out = np.full(x.shape, np.nan, dtype=np.float32)
    if x.size:
        lib().convolution_2d_f32(variant, x, h, w, f, r, out)
    return out


def set_filter(f: np.ndarray) -> int:
    """Load a filter into the constant memory slot of its radius (what the constant and tiled variants
    read in a `_dev` call); returns the radius. 1-D or 2-D by f's dimension."""
    dims = np.ndim(f)
    if dims not in (1, 2):
        raise ValueError(f"a filter is 1-D or 2-D, got shape {np.shape(f)}")
    f, r = check_filter(f, dims)
    lib().convolution_set_filter(dims, f, r)
    return r


def convolve_dev(variant: str, d_x, d_filter, r: int, d_out, n: int = 0, h: int = 0, w: int = 0,
                 stream=None) -> None:
    """Enqueue one convolution on device pointers (DeviceBuffer or cffi), no sync: n for a 1-D variant,
    h and w for a 2-D one. The constant, tiled and vec variants read the taps set_filter loaded for
    radius r; 01 and 04 read d_filter. 03 needs d_out 16-byte aligned; 07 and 08 take any pointers (off
    the 16-byte grid they move one float at a time). For timing and profiling."""
    dims = variant_dims(variant)
    check_radius(r, dims)
    check_size(dims, n=n, h=h, w=w)
    if dims == 1:
        lib().convolution_1d_f32_dev(variant, d_x, n, d_filter, r, d_out, stream)
    else:
        lib().convolution_2d_f32_dev(variant, d_x, h, w, d_filter, r, d_out, stream)


def convolve(x: np.ndarray, f: np.ndarray, variant: str | None = None) -> np.ndarray:
    """convolve_1d or convolve_2d by x's dimension (the best rung unless a variant is named)."""
    x = np.asarray(x)
    if x.ndim == 1:
        return convolve_1d(x, f, variant)
    if x.ndim == 2:
        return convolve_2d(x, f, variant)
    raise ValueError(f"x must be 1-D or 2-D, got shape {x.shape}")


# --- numpy reference and checker ------------------------------------------------------------------

def reference(x: np.ndarray, f: np.ndarray) -> np.ndarray:
    """The float64 sum, zero padding, the filter not flipped (a cross-correlation, PMPP's formula):
    x padded by r zeros on every side, and one shifted copy per tap added up."""
    x = np.asarray(x, dtype=np.float64)
    f = np.asarray(f, dtype=np.float64)
    if x.ndim != f.ndim or x.ndim not in (1, 2) or f.shape[0] % 2 == 0 or len(set(f.shape)) != 1:
        raise ValueError(f"reference: x 1-D or 2-D and f of the same dimension, (2r+1) a side; got x {x.shape}, "
                         f"f {f.shape}")
    r = (f.shape[0] - 1) // 2
    xp = np.pad(x, r)
    out = np.zeros_like(x)
    if x.ndim == 1:
        for j in range(2 * r + 1):
            out += f[j] * xp[j:j + x.size]
        return out
    h, w = x.shape
    for fy in range(2 * r + 1):
        for fx in range(2 * r + 1):
            out += f[fy, fx] * xp[fy:fy + h, fx:fx + w]
    return out


def check(out: np.ndarray, ref: np.ndarray, tol: float = TOL) -> tuple[bool, float]:
    """The checker: (ok, ||out - ref|| / ||ref||). A NaN anywhere (an unwritten output) fails."""
    try:
        e = _results.relative_error(out, ref)
    except ValueError:
        return False, float("inf")
    return bool(e <= tol), e


# --- Python twins (harness.base.sim) ----------------------------------------------------------------

# EXERCISE conv1d_naive: copy
def conv1d_naive_bk(blockidx, threadidx, blockdim, x, f, r, out, n):
    """01_naive_1d (and 02_constant_1d, whose taps only live elsewhere): one thread per output."""
    # EXERCISE conv1d_naive: begin i = this thread's output (from blockidx, blockdim and threadidx, plain ints here);
    # EXERCISE conv1d_naive: todo return when i >= n (the grid is rounded up to whole blocks).
    i = blockidx * blockdim + threadidx
    if i >= n:
        return
    # EXERCISE conv1d_naive: end
    # EXERCISE conv1d_naive: begin out[i] = the sum over j = 0 .. 2r of f[j] * x[i - r + j] in float32 (tap 0 with
    # EXERCISE conv1d_naive: todo the leftmost neighbour: the filter is not flipped), where a neighbour outside
    # EXERCISE conv1d_naive: todo 0 .. n-1 counts as 0 (zero padding: skip it; both ends of the array have them).
    s = np.float32(0)
    for j in range(2 * r + 1):
        k = i - r + j
        if 0 <= k < n:
            s = np.float32(s + f[j] * x[k])
    out[i] = s
    # EXERCISE conv1d_naive: end
# EXERCISE conv1d_naive: end copy


# EXERCISE conv1d_tiled: copy
def conv1d_tiled_k(ctx, x, f, r, out, n, outs):
    """03_tiled_1d as a generator (the bare `yield` is the __syncthreads()): the block loads its
    blockDim * outs inputs and r on each side into ctx.shared.tile, then each thread computes `outs`
    consecutive outputs from its window tile[outs * t : outs * t + outs + 2r]."""
    tile = ctx.shared.tile
    span = ctx.blockDim.x * outs
    start = ctx.blockIdx.x * span
    # EXERCISE conv1d_tiled: begin load the tile: for t = threadIdx.x, threadIdx.x + blockDim.x, ... below tile.size
    # EXERCISE conv1d_tiled: todo (each thread loads every blockDim.x-th cell): tile[t] = x[start - r + t], this block's
    # EXERCISE conv1d_tiled: todo span inputs and r more on each side (the halo), and 0 where start - r + t is outside
    # EXERCISE conv1d_tiled: todo 0 .. n-1 (zero padding, at both ends of the array) or t >= span + 2r (cells there
    # EXERCISE conv1d_tiled: todo enter no sum). Then wait until every thread's loads are in the tile (a bare `yield`
    # EXERCISE conv1d_tiled: todo is __syncthreads()).
    t = ctx.threadIdx.x
    # The CUDA kernel loads from an index clamped into x and zeroes the value afterwards (no branch
    # between its loads); the tile it builds is this one.
    while t < tile.size:  # the padding past the halo is zeroed too: the CUDA kernel's last window reads into it
        k = start - r + t
        inside = t < span + 2 * r and 0 <= k < n
        tile[t] = x[k] if inside else np.float32(0)
        t += ctx.blockDim.x
    yield  # the whole tile, halo included, must be in shared memory before any thread reads it
    # EXERCISE conv1d_tiled: end
    first = outs * ctx.threadIdx.x
    # EXERCISE conv1d_tiled: begin out[start + first + m] for m = 0 .. outs-1 (those below n: the last block may be
    # EXERCISE conv1d_tiled: todo partial) = the float32 sum over j = 0 .. 2r of f[j] * tile[first + m + j] (tap 0
    # EXERCISE conv1d_tiled: todo with the leftmost input: the filter is not flipped).
    win = tile[first:first + outs + 2 * r].copy()  # the CUDA kernel's registers
    for m in range(outs):
        i = start + first + m
        if i < n:
            s = np.float32(0)
            for j in range(2 * r + 1):
                s = np.float32(s + f[j] * win[m + j])
            out[i] = s
    # EXERCISE conv1d_tiled: end
# EXERCISE conv1d_tiled: end copy


def conv2d_naive_bk(blockidx, threadidx, blockdim, x, f, r, out, h, w):
    """04_naive_2d (and 05_constant_2d): one thread per output pixel, x along a row."""
    col = blockidx.x * blockdim.x + threadidx.x
    row = blockidx.y * blockdim.y + threadidx.y
    if row >= h or col >= w:
        return
    s = np.float32(0)
    for fy in range(2 * r + 1):
        y = row - r + fy
        if not 0 <= y < h:
            continue
        for fx in range(2 * r + 1):
            c = col - r + fx
            if 0 <= c < w:
                s = np.float32(s + f[fy, fx] * x[y, c])
    out[row, col] = s


# EXERCISE conv2d_tiled: copy
def conv2d_tiled_k(ctx, x, f, r, out, h, w, rows):
    """06_tiled_2d as a generator: the block loads its (blockDim.x) x (blockDim.y * rows) output tile
    and r pixels of halo around it into ctx.shared.tile (zeros outside the image), then each thread
    computes `rows` outputs down its column, walking the input rows under them: every value read from
    the tile feeds each of those outputs whose filter covers it."""
    tile = ctx.shared.tile
    in_h, in_w = tile.shape
    tw, th = ctx.blockDim.x, ctx.blockDim.y * rows
    col0, row0 = ctx.blockIdx.x * tw, ctx.blockIdx.y * th
    # EXERCISE conv2d_tiled: begin load the tile (in_h x in_w = (th + 2r) x (tw + 2r)): the block's threads, numbered
    # EXERCISE conv2d_tiled: todo threadIdx.y * blockDim.x + threadIdx.x, take its cells k = ty * in_w + tx in turn
    # EXERCISE conv2d_tiled: todo (thread number, then every blockDim.x * blockDim.y-th cell after it): tile[ty, tx] =
    # EXERCISE conv2d_tiled: todo x[row0 - r + ty, col0 - r + tx], the block's th x tw outputs and r pixels of halo on
    # EXERCISE conv2d_tiled: todo every side, and 0 where that pixel is outside the h x w image (zero padding, on all
    # EXERCISE conv2d_tiled: todo four edges). Then wait until the whole tile is loaded (a bare `yield`).
    k = ctx.threadIdx.y * ctx.blockDim.x + ctx.threadIdx.x
    while k < in_h * in_w:
        ty, tx = divmod(k, in_w)
        gy, gx = row0 - r + ty, col0 - r + tx
        inside = 0 <= gy < h and 0 <= gx < w
        tile[ty, tx] = x[gy, gx] if inside else np.float32(0)
        k += ctx.blockDim.x * ctx.blockDim.y
    yield  # every pixel of the tile and its halo loaded before anyone reads a neighbour's
    # EXERCISE conv2d_tiled: end
    tx, ty0 = ctx.threadIdx.x, ctx.threadIdx.y * rows
    # EXERCISE conv2d_tiled: begin this thread's outputs are the `rows` pixels (row0 + ty0 + oy, col0 + tx), oy = 0 ..
    # EXERCISE conv2d_tiled: todo rows-1, one column: each the float32 sum over fy, fx = 0 .. 2r of f[fy, fx] *
    # EXERCISE conv2d_tiled: todo tile[ty0 + oy + fy, tx + fx] (tap (0, 0) with the upper-left input: the filter is not
    # EXERCISE conv2d_tiled: todo flipped), stored into out[row, col] where the pixel lies inside the h x w image (the
    # EXERCISE conv2d_tiled: todo last tiles of a row and of a column may be partial).
    acc = [np.float32(0)] * rows
    for iy in range(rows + 2 * r):
        for fx in range(2 * r + 1):
            v = tile[ty0 + iy, tx + fx]
            for oy in range(rows):
                fy = iy - oy
                if 0 <= fy <= 2 * r:
                    acc[oy] = np.float32(acc[oy] + f[fy, fx] * v)
    for oy in range(rows):
        row, col = row0 + ty0 + oy, col0 + tx
        if row < h and col < w:
            out[row, col] = acc[oy]
    # EXERCISE conv2d_tiled: end
# EXERCISE conv2d_tiled: end copy


class _ReadCounted(np.ndarray):
    """An input that counts how often each of its elements is read (`counts`, the picture's halo):
    the tiled twins read x one element at a time, as their CUDA kernels load it."""

    counts: np.ndarray

    def __getitem__(self, key):
        self.counts[key] += 1
        return np.ndarray.__getitem__(self, key)


def _read_counted(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    if counts.shape != x.shape:
        raise ValueError(f"loads must have x's shape {x.shape}, got {counts.shape}")
    xc = x.view(_ReadCounted)
    xc.counts = counts
    return xc


def _twin_filter(f, dims: int) -> tuple[np.ndarray, int]:
    f = np.asarray(f, dtype=np.float32)
    if f.ndim != dims or f.shape[0] % 2 == 0 or len(set(f.shape)) != 1:
        raise ValueError(f"a {dims}-D filter has (2r+1) taps a side, got shape {f.shape}")
    return f, (f.shape[0] - 1) // 2


# The variants with a Python twin, in the table's order: the book's rungs. 07_vec_1d and 08_vec_2d are
# 03 and 06 with 16-byte global accesses and other tile shapes; the simulator has no memory widths or
# alignment to show, so a twin of either would be 03's or 06's again.
TWINS = ("01_naive_1d", "02_constant_1d", "03_tiled_1d", "04_naive_2d", "05_constant_2d", "06_tiled_2d")


def twins_of(dims: int) -> tuple[str, ...]:
    """The variants of one dimension that have a twin; the last is the tiled one."""
    return tuple(v for v in TWINS if variant_dims(v) == dims)


def twin(x: np.ndarray, f: np.ndarray, variant: str, threads: int = 32, outs: int = 4,
         block: tuple[int, int] = (8, 2), rows: int = 4, loads: np.ndarray | None = None,
         progress=None) -> np.ndarray:
    """Run a variant's Python twin on the simulator. The tile shapes are arguments, small by default so
    that ragged sizes cross several blocks (the GPU's are `tiling(1)` and `tiling(2)`): 1-D `threads`
    per block and `outs` outputs a thread; 2-D a `block` of (x, y) threads and `rows` outputs a thread.
    `loads` counts global reads per input element (tiled variants only). The variants in TWINS only."""
    dims = variant_dims(variant)  # an unknown name: ValueError naming the variants
    if variant not in TWINS:
        raise ValueError(f"no Python twin for {variant!r}; twins: {', '.join(TWINS)}")
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != dims:
        raise ValueError(f"{variant} takes {dims}-D data, got shape {x.shape}")
    f, r = _twin_filter(f, dims)
    out = np.full(x.shape, np.nan, dtype=np.float32)
    if x.size == 0:
        return out
    tiled = variant == twins_of(dims)[-1]  # the last twin of each dimension is the tiled one
    if dims == 1:
        n = x.size
        if not tiled:
            sim.blk_kernel(conv1d_naive_bk, -(-n // threads), threads, x, f, r, out, n)
            return out
        window4 = -(-(outs + 2 * r) // 4) * 4
        xs = x if loads is None else _read_counted(x, loads)
        sim.launch(conv1d_tiled_k, -(-n // (threads * outs)), threads, xs, f, r, out, n, outs,
                   shared={"tile": ((threads * outs + window4,), np.float32)}, on_block=progress)
        return out
    h, w = x.shape
    bx, by = block
    if not tiled:
        sim.blk_kernel2d(conv2d_naive_bk, sim.dim3(-(-w // bx), -(-h // by)), sim.dim3(bx, by), x, f, r, out, h, w)
        return out
    xs = x if loads is None else _read_counted(x, loads)
    sim.launch(conv2d_tiled_k, sim.dim3(-(-w // bx), -(-h // (by * rows))), sim.dim3(bx, by), xs, f, r, out, h, w,
               rows, shared={"tile": ((by * rows + 2 * r, bx + 2 * r), np.float32)}, on_block=progress)
    return out


def tile_loads(h: int, w: int, r: int, tile_h: int, tile_w: int) -> np.ndarray:
    """How many blocks of a tiled 2-D kernel read each input pixel: each block reads its tile_h x tile_w
    output tile grown by r on every side, clipped to the image. 1 inside a tile, 2 in a halo shared by
    two tiles, up to 4 at corners (for r < the tile's side)."""
    loads = np.zeros((h, w), dtype=np.int64)
    for row0 in range(0, h, tile_h):
        for col0 in range(0, w, tile_w):
            loads[max(row0 - r, 0):min(row0 + tile_h + r, h), max(col0 - r, 0):min(col0 + tile_w + r, w)] += 1
    return loads


# --- without a GPU ------------------------------------------------------------------------------------

CPU_1D = ((1, 8), (37, 3), (1000, 8), (257, 0))  # (n, r): one element, ragged, several blocks, one tap
CPU_2D = ((1, 1, 4), (13, 29, 2), (37, 21, 4), (20, 18, 0))  # (h, w, r)


def random_problem(shape, r: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Input and an asymmetric filter, uniform in [-1, 1): a flipped filter gives another answer."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    fshape = (2 * r + 1,) * len(shape)
    return x, rng.uniform(-1, 1, fshape).astype(np.float32)


def on_cpu(args: list[str]) -> tuple[pd.DataFrame, str]:
    """`invoke run convolution` without a GPU: every twin (TWINS: 01-06; 07 and 08 have none) on the
    simulator against the float64 reference, on ragged sizes and radii (small blocks, so each size
    crosses several of them)."""
    import pandas as pd

    if args:
        raise ValueError(f"on the CPU, convolution takes no arguments (it runs fixed ragged sizes), got: "
                         f"{' '.join(str(a) for a in args)}")
    rows = []
    for v in TWINS:
        cases = [((n,), r) for n, r in CPU_1D] if variant_dims(v) == 1 else [((h, w), r) for h, w, r in CPU_2D]
        for seed, (shape, r) in enumerate(cases):
            x, f = random_problem(shape, r, seed)
            ok, err = check(twin(x, f, v), reference(x, f))
            rows.append({"variant": v, "shape": "x".join(map(str, shape)), "r": r,
                         "rel_error": float(f"{err:.3g}"), "check": "pass" if ok else "fail"})
    return pd.DataFrame(rows), (f"the Python twins of {', '.join(TWINS)} on harness.base.sim (one call per "
                                f"thread, small blocks; 07 and 08 have none) against the float64 numpy "
                                f"reference, tolerance {TOL:g}")


# --- the picture: `invoke viz convolution` -------------------------------------------------------------

PICTURE_SHAPE, PICTURE_R = (150, 80), 2


def viz_data(simulate: bool = False, progress=None) -> dict:
    """What analysis/convolution.py draws: an image of three impulses and a bar, its 2-D convolution by
    06_tiled_2d with an asymmetric 5x5 filter (on the GPU, or the twin on the simulator with the GPU's
    tile shape), and how many blocks read each input pixel (the tiles and their halos)."""
    h, w = PICTURE_SHAPE
    r = PICTURE_R
    x = np.zeros((h, w), dtype=np.float32)
    for y, c in ((20, 15), (70, 60), (120, 30)):
        x[y, c] = 1.0
    x[100:104, 45:75] = 0.5
    # An asymmetric filter: heavier to the lower right, so an impulse shows which way it lands.
    fy, fx = np.mgrid[0:2 * r + 1, 0:2 * r + 1]
    f = (0.2 + 0.8 * (fy + fx) / (4 * r)).astype(np.float32)
    f[r, r] = 1.5
    variant = twins_of(2)[-1]  # 06, whose twin draws it without a GPU; tiling(2) is its shape
    bx, by, rows = tiling(2)
    if simulate:
        loads = np.zeros((h, w), dtype=np.int64)
        out = twin(x, f, variant, block=(bx, by), rows=rows, loads=loads, progress=progress)
        from harness.programs import cpu_label

        how = cpu_label(f"{variant}'s Python twin on the simulator, its {by * rows}x{bx} tiles")
    else:
        out = convolve_2d(x, f, variant)
        loads = tile_loads(h, w, r, by * rows, bx)
        from harness.calling import cudart

        how = f"{variant} on {cudart.device_name(0)}"
    ok, err = check(out, reference(x, f))
    return {"x": x, "f": f, "r": r, "out": out, "loads": loads, "tile": (by * rows, bx), "variant": variant,
            "simulated": bool(simulate), "check": "pass" if ok else "fail", "rel_error": err, "computed_on": how}


# --- the executable -----------------------------------------------------------------------------------

def run(*args, timeout: float = 300) -> pd.DataFrame:
    """Run build/bin/convolution and parse its result lines (a failed check raises ProgramError)."""
    return _results.run(PROGRAM, *args, timeout=timeout)


def parse_output(text: str) -> pd.DataFrame:
    return _results.parse_output(text, PROGRAM)


# --- the bench, the profiler and the sanitizer --------------------------------------------------------

N_1D, QUICK_N_1D = 1 << 26, 1 << 24
SIDE_2D, QUICK_SIDE_2D = 8192, 4096
R_1D, R_2D, R_2D_WIDE = 8, 2, 4


def bench_filter(dims: int, r: int) -> np.ndarray:
    """The bench's taps: fixed, asymmetric, normal floats (no denormal slow paths)."""
    rng = np.random.default_rng(1000 * dims + r)
    return rng.uniform(0.25, 1.0, (2 * r + 1,) * dims).astype(np.float32)


def bench_setup(variant: str, r: int, n: int = 0, h: int = 0, w: int = 0):
    """The timing child's target: input and output on the device, the filter in a device array (01, 04)
    and in constant memory (loaded here, once, as PMPP's cudaMemcpyToSymbol), the launch marshalled."""
    from harness.calling import cudart
    from harness.measuring import bench

    dims = variant_dims(variant)
    check_radius(r, dims)
    check_size(dims, n=n, h=h, w=w)
    elems = n if dims == 1 else h * w
    f = bench_filter(dims, r)
    x, out = cudart.DeviceBuffer(4 * elems), cudart.DeviceBuffer(4 * elems)
    df = cudart.DeviceBuffer.from_array(f)
    x.fill_bytes(0x3F)  # 0x3F3F3F3F = 0.747f: a normal float, no NaN or denormal slow paths
    lib().convolution_set_filter(dims, f, r)
    if dims == 1:
        launch = lib().prepare("convolution_1d_f32_dev", variant, x, n, df, r, out, library.STREAM)
    else:
        launch = lib().prepare("convolution_2d_f32_dev", variant, x, h, w, df, r, out, library.STREAM)

    def close():
        for b in (x, out, df):
            b.close()

    return bench.Prepared(launch, close)


def bench_cases(quick: bool = False) -> list:
    """Every variant against cudaMemcpy of the same bytes timed in the same run, counting the compulsory
    traffic, 8 bytes an output (the input read once, the output written once), as the memcpy ceiling
    counts its bytes. 1-D at 2^26 with r = 8 (17 taps); 2-D at 8192^2 with r = 2 (5x5, PMPP's example)
    and r = 4 (9x9). Goals: the best rung of each dimension, the table's last (07_vec_1d, and 08_vec_2d
    at r = 2), >= 0.9 of memcpy. 9x9 in float32 is 81 FMAs an output, more than the FP32 units finish
    while memcpy moves 8 bytes on an H100 or H200: there the best 2-D rung is also measured against the
    FP32 peak ("fp32"). --quick: 2^24 and 4096^2."""
    from harness.measuring import bench

    cases = []

    def add(v, size, kwargs, elems, taps, ceiling=None, target=None, is_quick=False, note=""):
        ceiling = ceiling or bench.memcpy_of(4 * elems)  # the copy of the same bytes, in the same run
        flops = 2.0 * taps * elems
        unit, amount = ("TFLOP/s", flops) if ceiling == "fp32" else ("GB/s", 8.0 * elems)
        label = f"{v}-vs-fp32" if ceiling == "fp32" else v  # one row per (variant, size) and ceiling
        cases.append(bench.BenchCase(program=PROGRAM, variant=label, size=size,
                                     setup=f"harness.programs.{PROGRAM}:bench_setup", unit=unit, amount=amount,
                                     ceiling=ceiling, target=target, quick=is_quick, bytes=8.0 * elems, flops=flops,
                                     note=note, kwargs=kwargs))

    one, two = variants_of(1), variants_of(2)
    for label, n, is_quick in [(f"2^24 r{R_1D}", QUICK_N_1D, True)] + ([] if quick else [(f"2^26 r{R_1D}", N_1D, False)]):
        for v in one:
            best = v == one[-1] and not is_quick
            add(v, label, {"variant": v, "r": R_1D, "n": n}, n, 2 * R_1D + 1, target=0.9 if best else None,
                is_quick=is_quick, note="float32; bytes = 4n read + 4n written" + (" (goal: >= 0.9)" if best else ""))
    sides = [(QUICK_SIDE_2D, True)] + ([] if quick else [(SIDE_2D, False)])
    for side, is_quick in sides:
        for r in (R_2D, R_2D_WIDE):
            if is_quick and r != R_2D:
                continue
            label = f"{side}^2 r{r}"
            taps = (2 * r + 1) ** 2
            for v in two:
                best = v == two[-1] and r == R_2D and not is_quick
                add(v, label, {"variant": v, "r": r, "h": side, "w": side}, side * side, taps,
                    target=0.9 if best else None, is_quick=is_quick,
                    note="float32; bytes = 4hw read + 4hw written" + (" (goal: >= 0.9)" if best else ""))
            if r == R_2D_WIDE:
                add(two[-1], label, {"variant": two[-1], "r": r, "h": side, "w": side}, side * side, taps,
                    ceiling="fp32", note=f"{taps} FMAs an output against the FP32 peak")
    return cases


def profile_args(variant: str | None = None) -> list[str]:
    # Ragged sizes, but a width of whole float4s, so that 08_vec_2d is profiled on its 16-byte path (the
    # executable's buffers come from cudaMalloc: 07 always takes its 16-byte path).
    v = variant or "03_tiled_1d"
    size = ["1000003"] if variant_dims(v) == 1 else ["1023", "2048"]
    return ["--variant", v, "--reps", "1", *size]


def sanitize_args() -> dict[str, list[str]]:
    """Every variant on small ragged sizes: its largest radius and a small odd one (other window and
    halo widths), and a single element (every neighbour is padding). In 2-D the largest radius runs on
    a width of whole float4s (67 x 44) and the small one on an odd width (67 x 45), so that 08_vec_2d is
    checked on both its 16-byte path and its 4-byte one (1 x 1 takes the 4-byte one too)."""
    runs = {}
    for v in library.read_table(PROGRAM):
        dims = variant_dims(v)
        for r in (max_radius(dims), 1):
            sizes = ["4099"] if dims == 1 else ["67", "44" if r == max_radius(dims) else "45"]
            runs[f"{v} r{r}"] = ["--variant", v, "--reps", "1", "--radius", str(r), *sizes]
        runs[f"{v} one"] = ["--variant", v, "--reps", "1", *(["1"] if dims == 1 else ["1", "1"])]
    return runs


# --- the exercises this program offers (their problems: convolution_exercises.py) --------------------

EXERCISES = (
    Exercise(
        "conv1d_naive", origin="PMPP chapter 7.2 (a basic parallel convolution)",
        writes="the naive 1-D kernel: the output's index and bound, the sum over 2r+1 neighbours with zero padding",
        tracks=("python", "cuda"), problem=_ex.Conv1dNaive(), py_entry="conv1d_naive_bk",
        cu_source="cuda/convolution/convolution.cu", cu_kernels=("conv1d_01_naive",),
        glue="exercise_conv1d_naive.cu",
        hints=("One thread per output: i from the block and the thread, as in every 1-D kernel; the grid is rounded "
               "up to whole blocks, so some threads have no output.",
               "Output i needs the 2r+1 inputs x[i - r] .. x[i + r], tap j with x[i - r + j]: f[0] with the leftmost. "
               "That is PMPP's formula, a cross-correlation: the filter is not flipped.",
               "Near the ends some of those neighbours do not exist: they count as 0, so skip any k = i - r + j outside "
               "0 .. n-1 (in Python x[-1] is no error but the last element: test k >= 0 yourself)."),
        block="one thread per output: 256-thread blocks (Python: 32)",
    ),
    Exercise(
        "conv1d_tiled", origin="PMPP chapter 7.4-7.5 (tiled convolution with halo cells)",
        writes="the shared-memory tile and its halo (zero padding at both ends), the barrier, the sums from the tile",
        tracks=("python", "cuda"), problem=_ex.Conv1dTiled(), py_entry="conv1d_tiled_k",
        cu_source="cuda/convolution/convolution.cu", cu_kernels=("conv1d_03_tiled",),
        glue="exercise_conv1d_tiled.cu",
        hints=("A block's outputs start .. start + span - 1 need the inputs start - r .. start + span - 1 + r: its "
               "span inputs and r on each side (the halo), tile[t] = x[start - r + t]. Threads load cells in turn: "
               "t = threadIdx.x, then every blockDim.x cells further.",
               "Every thread reads cells other threads loaded: all loads must be done before any sum starts, one "
               "barrier between the two (a bare `yield` in Python, __syncthreads() in CUDA), reached by every thread.",
               "Cells whose input lies outside 0 .. n-1 hold 0 (zero padding, at both ends; never read x there). A "
               "thread's outputs are then sums over its window of the tile: output start + first + m is the sum of "
               "f[j] * tile[first + m + j], first being the thread's first output within the tile."),
        block="256 threads of 8 outputs, a 2048-output tile (Python: 8 threads of 2, a 16-output tile)",
    ),
    Exercise(
        "conv2d_tiled", origin="PMPP chapter 7.4-7.5 (2-D tiled convolution with halo cells)",
        writes="the 2-D shared-memory tile and its halo on all four edges, the barrier, the sums and the ragged stores",
        tracks=("python", "cuda"), problem=_ex.Conv2dTiled(), py_entry="conv2d_tiled_k",
        cu_source="cuda/convolution/convolution.cu", cu_kernels=("conv2d_06_tiled",),
        glue="exercise_conv2d_tiled.cu",
        hints=("The tile is the block's outputs grown by r pixels on every side: tile cell (ty, tx) holds input "
               "pixel (row0 - r + ty, col0 - r + tx). Number the block's threads 0, 1, ... and let them take the "
               "tile's cells (row-major) in turn, each thread every (number of threads)-th cell.",
               "Pixels outside the image hold 0: above and left (negative row or column; in Python a negative index "
               "wraps round, so test it) and below and right. Then one barrier before any thread reads the tile.",
               "Output (row0 + ty0 + oy, col0 + tx) is the sum of f[fy, fx] * tile[ty0 + oy + fy, tx + fx]: the "
               "filter's upper-left tap with the tile cell at the output's own position. Store it only where row < h "
               "and col < w: the last tiles of a row and of a column may be partial."),
        block="32x8 threads of 8 outputs down a column, a 64x32 tile (Python: 8x2 threads of 4, an 8x8 tile)",
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name=PROGRAM,
    summary="a halo: the filter in constant memory, shared tiles",
    follows="PMPP ch. 7",
    order=64,
    readme_picture="[halo](cuda/convolution/convolution_sim.png)",
    variants=True,
    profile_variants=lambda: library.read_table(PROGRAM),
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    bench_cases=bench_cases,
    run=run,
    parse_output=parse_output,
    reference=reference,
    on_cpu=on_cpu,
    picture=Picture("convolution", viz_data, options=("simulate", "progress")),
    tour=Tour("three impulses and a bar through an asymmetric 5x5 filter (each impulse comes back as the filter "
              "turned half a turn: a correlation), and how many blocks read each pixel: the tiles and their halos",
              drawn=("plots/convolution*.png",), committed=("cuda/convolution/convolution_sim.png",)),
    exercises=EXERCISES,
)
