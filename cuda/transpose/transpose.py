"""transpose: out = in^T for a row-major float32 matrix, the classic lesson in coalescing and
shared-memory bank conflicts (NVIDIA's "An Efficient Matrix Transpose in CUDA C/C++"; PMPP ch. 5-6).

Public API (numpy in, numpy out; arguments are checked before anything is launched):
    transpose(x, variant=None, out=None)               x (rows, cols) float32 -> (cols, rows); None: 04
    transpose_dev(variant, d_in, d_out, rows, cols, stream=None)   device pointers, no sync
    reference(x)                                       numpy's x.T, contiguous
    mismatches(out, ref)                               elements that differ bit for bit (the checker)
Python twins on the lectures' simulator (harness.base.sim): naive_k, tiled_k (02), padded_k (03: the
tile as shared memory's words, its rows t + 1 words apart), coarsened_k, and `twin(x, variant, tile)`
to run one.
`access_map(...)` and `bank_map(...)` record, through the twins, which thread reads and writes which
element and which shared-memory bank a warp's column read hits: the data of `invoke viz transpose`.

The variant names are the library's one table (cuda/transpose/transpose.cu), never typed here.
A transpose computes nothing, so every check is exact: out must equal in^T bit for bit.
"""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING

import numpy as np

from harness.base import sim
from harness.calling import library
from harness.calling import results as _results
from harness.programs import transpose_exercises as _ex
from harness.programs.record import Exercise, Picture, Program, Tour

if TYPE_CHECKING:  # the CPU paths return DataFrames; pandas is imported where they run
    import pandas as pd

PROGRAM = "transpose"
TILE = 32  # the tile's edge in transpose.cu (kTile); a test holds the two equal through transpose_tile()
BLOCK_ROWS = 8  # 04_coarsened's block is TILE x BLOCK_ROWS threads, each moving TILE // BLOCK_ROWS elements
# The positions in the library's variant table, which is the launcher's switch (transpose.cu): the
# names themselves are read from the table, never typed here.
NAIVE, SHARED_TILE, PADDED, COARSENED, WIDE = range(5)
INT_MAX = 2**31 - 1
BANKS = 32  # shared memory's banks, 4 bytes wide, on every GPU since Fermi

# VARIANTS is the library's one table, read when first asked for.
__getattr__ = library.table_attributes(__name__, PROGRAM)


# --- argument checks (before any launch) ------------------------------------------------------------

def lib() -> library.Library:
    return library.load(PROGRAM)


def variant_name(i: int) -> str:
    """The name at position i of the library's variant table (NAIVE, SHARED_TILE, PADDED, COARSENED, WIDE)."""
    return library.read_table(PROGRAM)[i]


def check_variant(variant: str | None) -> str:
    """The variant's name (None: the best rung, the table's last), or ValueError naming those in the
    library's one table."""
    if variant is None:
        return variant_name(WIDE)
    library.table_index(PROGRAM, "variant", variant)
    return variant


def max_rows() -> int:
    """The most rows one launch takes: a block row of tiles per row of the grid, whose y axis holds
    65535 blocks (cudart.MAX_GRID_YZ)."""
    from harness.calling.cudart import MAX_GRID_YZ

    return MAX_GRID_YZ * TILE


def check_size(rows, cols) -> tuple[int, int]:
    """rows and cols as ints: TypeError for a non-integer, ValueError for a negative one or one past
    the launch's limits (rows: the grid's y axis; cols: a C int)."""
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    if rows > max_rows():
        raise ValueError(f"rows must be at most {max_rows()} (the grid's y limit: 65535 blocks of {TILE} rows), "
                         f"got {rows}")
    if cols > INT_MAX:
        raise ValueError(f"cols must be at most {INT_MAX} (a C int), got {cols}")
    return int(rows), int(cols)


# --- the library ------------------------------------------------------------------------------------

def transpose(x: np.ndarray, variant: str | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """out = x.T on the GPU (variant None: the best rung, 04), for a 2-D C-contiguous float32 x of shape (rows, cols). out, when given,
    is a writeable C-contiguous float32 (cols, rows) array not overlapping x; an element the kernel does
    not write keeps the value it had (a new out starts as NaN). Returns out."""
    variant = check_variant(variant)
    x = library.check_array(x, "x", np.float32, ndim=2)
    rows, cols = check_size(*x.shape)
    if out is None:
        out = np.full((cols, rows), np.nan, dtype=np.float32)
    else:
        out = library.check_array(out, "out", np.float32, ndim=2, shape=(cols, rows))
        if not out.flags.writeable:
            raise ValueError("out must be writeable")
        if np.shares_memory(x, out):
            raise ValueError("out must not overlap x (a transpose cannot run in place)")
    if x.size:
        lib().transpose_f32(variant, x, out, rows, cols)
    return out


def transpose_dev(variant: str, d_in, d_out, rows: int, cols: int, stream=None) -> None:
    """Enqueue one transpose on device pointers (DeviceBuffer or cffi pointers) on `stream`; no sync."""
    variant = check_variant(variant)
    rows, cols = check_size(rows, cols)
    lib().transpose_f32_dev(variant, d_in, d_out, rows, cols, stream)


# --- the numpy reference and the checker ----------------------------------------------------------

def reference(x: np.ndarray) -> np.ndarray:
    """x.T, as a new C-contiguous array of x's dtype: what every variant must produce exactly."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"reference: x must be 2-D, got shape {x.shape}")
    return np.ascontiguousarray(x.T)


def mismatches(out: np.ndarray, ref: np.ndarray) -> int:
    """How many elements of out differ from ref bit for bit (a NaN left in out always differs, since
    the inputs hold none). Different shapes or dtypes raise ValueError. 0 is the only passing answer."""
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape or out.dtype != ref.dtype:
        raise ValueError(f"shape or dtype mismatch: {out.shape} {out.dtype} vs {ref.shape} {ref.dtype}")
    if out.size == 0:
        return 0
    bits = f"u{out.itemsize}"  # compare the words, not the values: NaN != NaN, -0.0 != 0.0
    return int(np.count_nonzero(np.ascontiguousarray(out).reshape(-1).view(bits)
                                != np.ascontiguousarray(ref).reshape(-1).view(bits)))


# --- Python twins (harness.base.sim) ----------------------------------------------------------------
# x and out are the flattened row-major matrices, as the CUDA kernels see them. The tile's edge is the
# block's width (ctx.blockDim.x), so a twin runs at TILE = 32 like the GPU or at a smaller tile for a
# picture; a bare `yield` is __syncthreads().

# EXERCISE transpose_naive: copy
def naive_k(ctx, x, out, rows, cols):
    """01_naive: one thread per element; a warp reads along a row of x and writes down a column of out."""
    # EXERCISE transpose_naive: begin col = this thread's column of x (the .x of blockIdx and threadIdx; the tile's
    # EXERCISE transpose_naive: todo edge t is the block's width, ctx.blockDim.x), row = its row (the .y parts). The grid is
    # EXERCISE transpose_naive: todo rounded up to whole tiles: only when (row, col) lies inside the rows x cols matrix,
    # EXERCISE transpose_naive: todo out[col][row] = x[row][col] (both flattened row-major: x has cols columns, out has rows).
    t = ctx.blockDim.x
    col = ctx.blockIdx.x * t + ctx.threadIdx.x  # column of x = row of out
    row = ctx.blockIdx.y * t + ctx.threadIdx.y  # row of x = column of out
    if row < rows and col < cols:
        out[col * rows + row] = x[row * cols + col]
    # EXERCISE transpose_naive: end
# EXERCISE transpose_naive: end copy


# EXERCISE transpose_tiled: copy
def tiled_k(ctx, x, out, rows, cols):
    """02_shared_tile: a tile of x into shared memory row by row, a barrier, then the tile out row by row
    of out, reading the tile down a column. The tile is ctx.shared.tile, t x t (t = blockDim.x)."""
    t = ctx.blockDim.x
    tx, ty = ctx.threadIdx.x, ctx.threadIdx.y
    tile = ctx.shared.tile
    # EXERCISE transpose_tiled: begin load: col and row = this thread's element of x (the .x and .y parts: block times t
    # EXERCISE transpose_tiled: todo plus thread); when it lies inside the rows x cols matrix, tile[ty, tx] = x[row][col]
    # EXERCISE transpose_tiled: todo (flattened row-major, cols columns). Then wait until the whole tile is loaded (a bare
    # EXERCISE transpose_tiled: todo `yield` is __syncthreads()): every thread stores an element another thread loaded.
    col = ctx.blockIdx.x * t + tx
    row = ctx.blockIdx.y * t + ty
    if row < rows and col < cols:
        tile[ty, tx] = x[row * cols + col]
    yield  # every thread writes an element another thread loaded: all loads first
    # EXERCISE transpose_tiled: end
    # EXERCISE transpose_tiled: begin store: in out (cols x rows) this block's tile sits at block row blockIdx.x, block
    # EXERCISE transpose_tiled: todo column blockIdx.y, and tx runs along a row of out (coalesced writes on a GPU). When the
    # EXERCISE transpose_tiled: todo element lies inside out, out[row][col] = the tile's cell holding x's element (col, row).
    col = ctx.blockIdx.y * t + tx  # column of out = row of x
    row = ctx.blockIdx.x * t + ty  # row of out = column of x
    if row < cols and col < rows:
        out[row * rows + col] = tile[tx, ty]
    # EXERCISE transpose_tiled: end
# EXERCISE transpose_tiled: end copy


# EXERCISE transpose_padded: copy
def padded_k(ctx, x, out, rows, cols):
    """03_padded: 02's tile through shared memory, laid out as shared memory is: ctx.shared.smem is the
    block's shared memory as 4-byte words (room for t rows of t + 1; bank = word index % 32), and the
    kernel chooses where each tile cell lives, and so which banks a warp's accesses hit."""
    t = ctx.blockDim.x
    tx, ty = ctx.threadIdx.x, ctx.threadIdx.y
    smem = ctx.shared.smem
    # EXERCISE transpose_padded: begin pitch = how many words apart the tile's rows lie in smem, so that cell (r, c) is
    # EXERCISE transpose_padded: todo smem[r * pitch + c] and a warp (one ty, tx = 0..31) reading a column of the tile,
    # EXERCISE transpose_padded: todo cells (tx, ty), touches 32 different banks. Then the load: col and row = this thread's
    # EXERCISE transpose_padded: todo element of x (the .x and .y parts: block times t plus thread); when it lies inside the
    # EXERCISE transpose_padded: todo rows x cols matrix, cell (ty, tx) = x[row][col] (flattened row-major, cols columns).
    # Row r of the tile starts at word r * (t + 1): one unused word a row puts the t words of a column in t
    # different banks (with t rows t words apart, all of them would share one bank).
    pitch = t + 1
    col = ctx.blockIdx.x * t + tx
    row = ctx.blockIdx.y * t + ty
    if row < rows and col < cols:
        smem[ty * pitch + tx] = x[row * cols + col]
    # EXERCISE transpose_padded: end
    # EXERCISE transpose_padded: begin the store: wait until the whole tile is loaded (a bare `yield` is __syncthreads());
    # EXERCISE transpose_padded: todo then this thread's element of out (cols x rows; the block's tile sits at block row
    # EXERCISE transpose_padded: todo blockIdx.x, block column blockIdx.y of out, tx along its row), when it lies inside
    # EXERCISE transpose_padded: todo out, from the tile's cell (tx, ty).
    yield  # every thread writes an element another thread loaded: all loads first
    col = ctx.blockIdx.y * t + tx  # column of out = row of x
    row = ctx.blockIdx.x * t + ty  # row of out = column of x
    if row < cols and col < rows:
        out[row * rows + col] = smem[tx * pitch + ty]  # words tx * (t + 1) + ty: banks (tx + ty) % 32, all different
    # EXERCISE transpose_padded: end
# EXERCISE transpose_padded: end copy


def coarsened_k(ctx, x, out, rows, cols):
    """04_coarsened: the padded tile moved by t x (t / 4) threads, each taking every (t / 4)-th row."""
    t, step = ctx.blockDim.x, ctx.blockDim.y
    tx, ty = ctx.threadIdx.x, ctx.threadIdx.y
    tile = ctx.shared.tile
    col = ctx.blockIdx.x * t + tx
    row0 = ctx.blockIdx.y * t + ty
    for j in range(0, t, step):
        if row0 + j < rows and col < cols:
            tile[ty + j, tx] = x[(row0 + j) * cols + col]
    yield
    out_col = ctx.blockIdx.y * t + tx
    out_row0 = ctx.blockIdx.x * t + ty
    for j in range(0, t, step):
        if out_row0 + j < cols and out_col < rows:
            out[(out_row0 + j) * rows + out_col] = tile[tx, ty + j]


def wide_k(ctx, x, out, rows, cols):
    """05_wide_tile: a 2t x 2t tile moved by t x (t / 2) threads, each taking two neighbouring columns (the
    GPU's one float2 access, two scalars here) in every (t / 2)-th row. Cells outside the matrix hold 0."""
    t, step = ctx.blockDim.x, ctx.blockDim.y
    w = 2 * t
    tx, ty = ctx.threadIdx.x, ctx.threadIdx.y
    tile = ctx.shared.tile
    c0, r0 = ctx.blockIdx.x * w, ctx.blockIdx.y * w
    for i in range(0, w, step):
        r = r0 + ty + i
        for k in (0, 1):
            c = c0 + 2 * tx + k
            tile[ty + i, 2 * tx + k] = x[r * cols + c] if r < rows and c < cols else 0.0
    yield
    for i in range(0, w, step):
        orow = c0 + ty + i  # out is cols x rows
        for k in (0, 1):
            ocol = r0 + 2 * tx + k
            if orow < cols and ocol < rows:
                out[orow * rows + ocol] = tile[2 * tx + k, ty + i]


def _plan(variant: str | None, rows: int, cols: int, tile: int):
    """(kernel, grid, block, shared) of a variant's twin: the CUDA launcher's shapes at this tile."""
    i = library.table_index(PROGRAM, "variant", check_variant(variant))
    grid = sim.dim3(max(1, math.ceil(cols / tile)), max(1, math.ceil(rows / tile)))
    if i == NAIVE:
        return naive_k, grid, sim.dim3(tile, tile), None
    if i == SHARED_TILE:
        return tiled_k, grid, sim.dim3(tile, tile), {"tile": ((tile, tile), np.float32)}
    if i == PADDED:  # shared memory as words, room for t rows of t + 1: one spare word a row, against bank conflicts
        return padded_k, grid, sim.dim3(tile, tile), {"smem": ((tile * (tile + 1),), np.float32)}
    if i == COARSENED:
        return coarsened_k, grid, sim.dim3(tile, tile * BLOCK_ROWS // TILE), {"tile": ((tile, tile + 1), np.float32)}
    wide = sim.dim3(max(1, math.ceil(cols / (2 * tile))), max(1, math.ceil(rows / (2 * tile))))
    return wide_k, wide, sim.dim3(tile, tile // 2), {"tile": ((2 * tile, 2 * tile + 1), np.float32)}


def _check_tile(tile) -> int:
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)):
        raise TypeError(f"tile must be an integer, got {type(tile).__name__}")
    if tile < 4 or tile > TILE or tile % 4:
        raise ValueError(f"tile must be a multiple of 4 from 4 to {TILE} (04 gives each thread 4 rows), got {tile}")
    return int(tile)


def twin(x: np.ndarray, variant: str | None = None, tile: int = TILE, on_block=None) -> np.ndarray:
    """Run a variant's Python twin on the simulator; returns out (cols, rows), NaN where no thread wrote."""
    tile = _check_tile(tile)
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D, got shape {x.shape}")
    rows, cols = x.shape
    out = np.full(cols * rows, np.nan, dtype=x.dtype)
    if x.size:
        kernel, grid, block, shared = _plan(variant, rows, cols, tile)
        sim.launch(kernel, grid, block, x.ravel(), out, rows, cols, shared=shared, on_block=on_block)
    return out.reshape(cols, rows)


# --- who touches what: the twins, traced --------------------------------------------------------------

class _Traced:
    """An array that logs each read and write with the thread doing it (who[0], set by _traced)."""

    def __init__(self, a: np.ndarray, log: list, who: list):
        self.a, self.log, self.who = a, log, who

    @property
    def shape(self):
        return self.a.shape

    def __getitem__(self, i):
        self.log.append(("read", i, self.who[0]))
        return self.a[i]

    def __setitem__(self, i, v):
        self.log.append(("write", i, self.who[0]))
        self.a[i] = v


def _traced(kernel, who: list):
    """The kernel with who[0] set to each thread's ctx whenever that thread runs (before each resume of
    a generator kernel, since the simulator interleaves the threads of a block at every barrier)."""
    if inspect.isgeneratorfunction(kernel):
        def run(ctx, *args):
            g = kernel(ctx, *args)
            while True:
                who[0] = ctx
                try:
                    next(g)
                except StopIteration:
                    return
                yield
    else:
        def run(ctx, *args):
            who[0] = ctx
            kernel(ctx, *args)
    return run


def _trace(variant: str, rows: int, cols: int, tile: int):
    """Run the twin with every global and shared access logged: (global log, shared log, x, out, the
    shared array's row length in words: 1 for 03's flat words, whose indexes are the words themselves)."""
    kernel, grid, block, shared = _plan(variant, rows, cols, tile)
    who, glog, slog = [None], [], []
    x = _Traced(np.arange(rows * cols, dtype=np.float32), glog, who)
    out = _Traced(np.full(rows * cols, np.nan, dtype=np.float32), glog, who)
    make, width = None, 0
    if shared:
        ((name, (shape, dtype)),) = shared.items()
        width = shape[1] if len(shape) == 2 else 1
        make = lambda: {name: _Traced(np.full(shape, np.nan, dtype=dtype), slog, who)}  # noqa: E731
    sim.launch(_traced(kernel, who), grid, block, x, out, rows, cols, shared=make)
    return glog, slog, x, out, width


def access_map(variant: str, rows: int, cols: int, tile: int, block=(0, 0)) -> dict:
    """For one block of the variant's twin: which thread read each element of in and wrote each element
    of out, as arrays of its threadIdx.y (the row of threads: a warp when the tile is 32) and threadIdx.x
    (its lane), -1 where another block did. block = (blockIdx.x, blockIdx.y)."""
    tile = _check_tile(tile)
    glog, _, x, out, _ = _trace(variant, rows, cols, tile)
    maps = {k: np.full(n, -1, dtype=np.int32) for k, n in
            (("in_ty", rows * cols), ("in_tx", rows * cols), ("out_ty", rows * cols), ("out_tx", rows * cols))}
    for kind, i, ctx in glog:
        if (ctx.blockIdx.x, ctx.blockIdx.y) != tuple(block):
            continue
        side = "in" if kind == "read" else "out"
        maps[f"{side}_ty"][i], maps[f"{side}_tx"][i] = ctx.threadIdx.y, ctx.threadIdx.x
    result = {k: v.reshape((rows, cols) if k.startswith("in") else (cols, rows)) for k, v in maps.items()}
    # The traced run is a transpose too: its out, read back, must be in^T (a wrong twin draws nothing).
    if mismatches(out.a.reshape(cols, rows), reference(x.a.reshape(rows, cols))):
        raise AssertionError(f"{variant}'s traced twin did not transpose {rows}x{cols}")
    return result


def bank_map(variant: str, tile: int = TILE) -> np.ndarray:
    """The shared-memory bank each lane of warp 0 (threadIdx.y = 0) of block (0, 0) reads after the
    barrier, from the twin's own accesses at this tile: bank = word index mod 32."""
    tile = _check_tile(tile)
    _, slog, _, _, width = _trace(variant, tile, tile, tile)
    if not width:
        raise ValueError(f"{variant} uses no shared memory")
    banks = np.full(tile, -1, dtype=np.int32)
    for kind, i, ctx in slog:
        if kind == "read" and ctx.threadIdx.y == 0 and (ctx.blockIdx.x, ctx.blockIdx.y) == (0, 0):
            r, c = i if isinstance(i, tuple) else (0, i)  # a 2-D tile's row r starts at word r * width
            banks[ctx.threadIdx.x] = (r * width + c) % BANKS
    return banks


def viz_data(width: int = 20, height: int = 12, simulate: bool | None = None) -> dict:
    """The access-pattern picture (analysis/transpose.py): for a height x width matrix at an 8-wide tile,
    who reads and writes what in 01_naive and 02_shared_tile (one block's threads coloured), and the banks of a
    warp's column read of the 32x32 tile (02) and the 32x33 one (03). Always from the twins on the
    simulator (simulate is accepted for `invoke viz --simulate`): the pattern is the index arithmetic,
    the same on any GPU."""
    from . import cpu_label

    for name, v in (("width", width), ("height", height)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= 64:
            raise ValueError(f"{name} must be an integer from 1 to 64 (one cell a matrix element), got {v!r}")
    # Block (1, 0) where the matrix has a second tile column: its tile of in (rows 0-7, columns 8-15)
    # lands at rows 8-15, columns 0-7 of out, so the picture shows the blocks' swap as well.
    tile = 8
    block = (1, 0) if width > tile else (0, 0)
    return {"rows": int(height), "cols": int(width), "tile": tile, "block": block,
            "naive": access_map(variant_name(NAIVE), height, width, tile, block),
            "tiled": access_map(variant_name(SHARED_TILE), height, width, tile, block),
            "banks_02": bank_map(variant_name(SHARED_TILE)), "banks_03": bank_map(variant_name(PADDED)),
            "names": [variant_name(i) for i in (NAIVE, SHARED_TILE, PADDED)],
            "computed_on": cpu_label("the kernels' Python twins on harness/base/sim.py", no_gpu=False)}


# --- without a GPU ----------------------------------------------------------------------------------

CPU_MAX_EDGE = 256  # the simulator runs one Python call per thread: small matrices only
CPU_SHAPES = ((1, 1), (37, 45), (64, 32), (70, 31))


def on_cpu(args: list[str]) -> tuple[pd.DataFrame, str]:
    """`invoke run transpose [-- ROWS COLS]` without a GPU: every variant's twin at TILE = 32 on ragged
    shapes (or the one given), each checked bit for bit against numpy's x.T."""
    import time

    import pandas as pd

    args = [str(a) for a in args]
    if args and (len(args) != 2 or not all(a.isdigit() for a in args)):
        raise ValueError(f"on the CPU, transpose takes ROWS COLS (two integers) or nothing, got: {' '.join(args)}")
    shapes = [tuple(int(a) for a in args)] if args else list(CPU_SHAPES)
    for r, c in shapes:
        if not (1 <= r <= CPU_MAX_EDGE and 1 <= c <= CPU_MAX_EDGE):
            raise ValueError(f"on the CPU (the simulator) ROWS and COLS must be 1..{CPU_MAX_EDGE}, got {r} {c}")
    rng = np.random.default_rng(0)
    rows = []
    for r, c in shapes:
        x = rng.uniform(-1, 1, (r, c)).astype(np.float32)
        for v in library.read_table(PROGRAM):
            t0 = time.perf_counter()
            bad = mismatches(twin(x, v), reference(x))
            rows.append({"variant": v, "rows": r, "cols": c, "bad": bad, "seconds": round(time.perf_counter() - t0, 3),
                         "check": "pass" if bad == 0 else "fail"})
    return pd.DataFrame(rows), (f"the kernels' Python twins on harness.base.sim ({TILE}x{TILE} tiles), "
                                "against numpy's x.T, bit for bit")


# --- the executable ---------------------------------------------------------------------------------

def run(*args, timeout: float = 300) -> pd.DataFrame:
    """Run build/bin/transpose and parse its result lines (a failed check raises ProgramError)."""
    return _results.run(PROGRAM, *args, timeout=timeout)


def parse_output(text: str) -> pd.DataFrame:
    return _results.parse_output(text, PROGRAM)


# --- the bench, the profiler and the sanitizer --------------------------------------------------------

# (label, rows, cols, quick): the headline 8192^2 (256 MiB a matrix, far past any L2) and 4096^2 for --quick.
BENCH_SIZES = (("8192x8192", 8192, 8192, False), ("4096x4096", 4096, 4096, True))
HEADLINE = "8192x8192"
TARGET = 0.9  # the best rung's goal at the headline size, as a fraction of memcpy in the same run


def bench_setup(variant: str, rows: int, cols: int):
    """The timing child's target: a rows x cols matrix and its transpose's room on the device, the launch
    marshalled once (library.prepare), so the timed call is the C call alone."""
    from harness.calling import cudart
    from harness.measuring import bench

    check_variant(variant)
    rows, cols = check_size(rows, cols)
    x, out = cudart.DeviceBuffer(4 * rows * cols), cudart.DeviceBuffer(4 * rows * cols)
    x.fill_bytes(0x3F)  # 0x3F3F3F3F = 0.747f: a normal float, no NaN or denormal slow paths

    def close():
        x.close()
        out.close()

    try:
        launch = lib().prepare("transpose_f32_dev", variant, x, out, rows, cols, library.STREAM)
    except BaseException:
        close()
        raise
    return bench.Prepared(launch, close)


def bench_cases(quick: bool = False) -> list:
    """Every variant at 8192x8192 (4096x4096 with --quick) against cudaMemcpy of the same matrix timed in
    the same run. Bytes = 2 * 4 * rows * cols (each element read once and written once), counted as the
    memcpy ceiling counts them; the best rung, 04_coarsened, is held to 0.9 at 8192x8192. The
    predictions, written before the first run, are in bench/results/h200/NOTES-transpose.md."""
    from harness.measuring import bench

    best = variant_name(WIDE)
    cases = []
    for label, r, c, is_quick in BENCH_SIZES:
        if quick and not is_quick:
            continue
        for v in library.read_table(PROGRAM):
            target = TARGET if (v == best and label == HEADLINE) else None
            note = "float32 out = in^T; bytes = read + written; fraction of memcpy of the same bytes"
            if target:
                note += f" (goal: >= {target} at {label})"
            cases.append(bench.BenchCase(
                program=PROGRAM, variant=v, size=label, setup=f"harness.programs.{PROGRAM}:bench_setup",
                kwargs={"variant": v, "rows": r, "cols": c}, unit="GB/s", amount=8.0 * r * c,
                ceiling=bench.memcpy_of(4 * r * c), target=target, quick=is_quick, bytes=8.0 * r * c, flops=0.0,
                note=note))
    return cases


def profile_args(variant: str | None = None) -> list[str]:
    """One run at 4096x4096: big enough for ncu's counters to mean something, small enough to replay."""
    return ["--variant", check_variant(variant), "--reps", "1", "4096", "4096"]


def profile_variants() -> tuple[str, ...]:
    """Every variant: the profile's point is 01 against 02 (coalescing) and 02 against 03 (bank conflicts)."""
    return library.read_table(PROGRAM)


def sanitize_args() -> dict[str, list[str]]:
    """Each variant on a ragged shape (partial tiles on both edges and both axes), and all of them at 1x1."""
    runs = {f"{v} ragged": ["--variant", v, "--reps", "1", "67", "35"] for v in library.read_table(PROGRAM)}
    runs["all 1x1"] = ["--variant", "all", "--reps", "1", "1", "1"]
    return runs


# --- the exercises this program offers (their problems: transpose_exercises.py) ---------------------------

EXERCISES = (
    Exercise(
        "transpose_naive", origin="PMPP ch. 5; NVIDIA's \"An Efficient Matrix Transpose in CUDA C/C++\" (the naive "
        "kernel)",
        writes="the naive kernel body: row and column from block and thread, both bounds, the swapped index",
        tracks=("python", "cuda"), problem=_ex.TransposeNaive(), py_entry="naive_k",
        cu_source="cuda/transpose/transpose.cu", cu_kernels=("transpose_01_naive",), glue="exercise_transpose_naive.cu",
        hints=("One thread per element of x: its column from the .x parts (block times the tile's edge, plus the "
               "thread), its row from the .y parts.",
               "Row-major: element (r, c) of a matrix with C columns is at r * C + c. x is rows x cols; out is cols x "
               "rows, so x's element (row, col) goes to out's (col, row), at col * rows + row.",
               "The grid is rounded up to whole tiles on both axes: write only when row < rows and col < cols; "
               "out[col * rows + row] = x[row * cols + col]."),
        block="32x32 blocks, x along the columns of in (Python: 8x8, and one case at 32x32)",
    ),
    Exercise(
        "transpose_tiled", origin="PMPP ch. 5 (tiling through shared memory); NVIDIA's \"An Efficient Matrix "
        "Transpose in CUDA C/C++\" (the shared-memory tile)",
        writes="the shared tile's load, the barrier, the transposed store, the ragged edges",
        tracks=("python", "cuda"), problem=_ex.TransposeTiled(), py_entry="tiled_k",
        cu_source="cuda/transpose/transpose.cu", cu_kernels=("transpose_02_shared_tile",),
        glue="exercise_transpose_tiled.cu",
        hints=("Each thread loads one element of x into the tile, at the cell of its own thread: [ty][tx]. The store "
               "then writes an element of out that another thread loaded, so every thread waits for all the loads "
               "(Python: a bare `yield` is __syncthreads(); every thread must reach it, even one outside the matrix).",
               "In out, the block's tile moves: its block row is blockIdx.x and its block column blockIdx.y. With tx "
               "along a row of out again, the thread's element of out is (blockIdx.x * t + ty, blockIdx.y * t + tx).",
               "out's element (r, c) is x's element (c, r), which the thread with tx and ty swapped loaded: read the "
               "tile at [tx][ty]; store only when r < cols and c < rows (out is cols x rows): out[r * rows + c]."),
        block="32x32 tiles (Python: 8x8, and one case at 32x32)",
    ),
    Exercise(
        "transpose_padded", origin="NVIDIA's \"An Efficient Matrix Transpose in CUDA C/C++\" (shared memory bank "
        "conflicts); PMPP ch. 6",
        writes="the padded tile: where its cells live in shared memory, so a warp's column read is conflict-free",
        tracks=("python", "cuda"), problem=_ex.TransposePadded(), py_entry="padded_k",
        cu_source="cuda/transpose/transpose.cu", cu_kernels=("transpose_03_padded",),
        glue="exercise_transpose_padded.cu",
        hints=("Shared memory has 32 banks of 4-byte words: word w is in bank w % 32, and a warp's 32 accesses are "
               "served at once only when they fall in 32 different banks (or read one word). After the barrier a warp "
               "(one ty, tx = 0..31) reads a COLUMN of the tile: cells (tx, ty).",
               "With the tile's rows `pitch` words apart, cell (r, c) is word r * pitch + c, so the column read "
               "touches words tx * pitch + ty. A pitch of 32 puts all 32 in bank ty: a 32-way conflict. Which pitch "
               "makes (tx * pitch + ty) % 32 different for every tx?",
               "One unused word at the end of each row: pitch = t + 1 (33), so the column's words land in banks "
               "(tx + ty) % 32, all different. CUDA: __shared__ float tile[kTile][kTile + 1]; Python: "
               "smem[ty * (t + 1) + tx] on the load, smem[tx * (t + 1) + ty] on the store."),
        block="32x32 tiles on both tracks (the banks are counted at the GPU's width)",
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name=PROGRAM,
    summary="coalescing through a shared tile; bank conflicts and padding",
    follows="PMPP ch. 5, [NVIDIA's article](https://developer.nvidia.com/blog/efficient-matrix-transpose-cuda-cc/)",
    order=62,
    readme_picture="[access](cuda/transpose/access_pattern.png)",
    variants=True,
    profile_variants=profile_variants,
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    bench_cases=bench_cases,
    run=run,
    parse_output=parse_output,
    reference=reference,
    on_cpu=on_cpu,
    picture=Picture("transpose", viz_data, options=("width", "height", "simulate")),
    tour=Tour("who reads and writes which element: naive (writes down a column) against a shared tile (rows both "
              "ways), and the banks of a tile's column read, 32x32 against 32x33",
              drawn=("plots/transpose_access.png",), committed=("cuda/transpose/access_pattern.png",)),
    exercises=EXERCISES,
)
