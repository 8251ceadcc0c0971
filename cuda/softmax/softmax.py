"""softmax: row-wise softmax of a float32 rows x cols matrix (the step between attention's two matmuls),
from one thread per row to the online softmax that flash attention is built on.

Public API (numpy in, numpy out; every argument is checked before anything is launched):
    softmax(x, variant="05_fused_scale", scale=1.0, out=None)   x (rows, cols) float32, C-contiguous
    softmax_dev(variant, d_x, d_out, rows, cols, scale=1.0, stream=None)   device pointers, no sync
    reference(x, scale=1.0)          numpy in float64, max subtracted
    unstable(x)                      numpy in float32 WITHOUT the max subtracted: what goes wrong
    twin(x, variant, threads)        the Python twins of 01_naive, 02_block_row and 04_online on the
                                     lectures' simulator (harness/base/sim.py), used by `on_cpu`
    online_trace(x, threads)         04_online's running (max, sum) per thread, for the picture
Variants (the one table is in cuda/softmax/softmax.cu; `library.read_table("softmax")` reads it):
    01_naive, 02_block_row, 03_warp_row, 04_online, 05_fused_scale. `scale` other than 1 is
    05_fused_scale's (softmax(scale * x)); the other variants compute softmax(x).

Tolerance: ||out - ref|| / ||ref|| <= 1e-5 per call against the float64 reference. Each output is one
exponential (a few ulps), a product by 1/sum, and the row's sum, whose rounding is the larger part:
a float32 sum of n positive terms, added one after the other, drifts by about 7.5e-10 * n relative
(measured with numpy's float32 cumsum at n = 1000 to 100003: 8.4e-7 to 7.7e-5). 01_naive's single
thread adds the whole row so, hence its tolerance of 2e-9 per column where that is above 1e-5; the other
variants split the row over 32 to 1024 threads and add the partial sums in a tree.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from harness.base import sim
from harness.calling import library
from harness.calling import results as _results
from harness.calling.cudart import INT_MAX
from harness.programs import softmax_exercises as _ex
from harness.programs.record import Exercise, Picture, Program, Tour

if TYPE_CHECKING:  # the CPU paths return DataFrames; pandas is imported where they run
    import pandas as pd

PROGRAM = "softmax"
DEFAULT_VARIANT = "05_fused_scale"
SCALED = "05_fused_scale"  # the one variant that takes a scale
NAIVE = "01_naive"
TOL = 1e-5
NAIVE_TOL_PER_COL = 2e-9
# EXERCISE softmax_online: copy
LOG2E = math.log2(math.e)
# EXERCISE softmax_online: end copy

# VARIANTS is the library's one table (cuda/softmax/softmax.cu), read when first asked for: never typed here.
__getattr__ = library.table_attributes(__name__, PROGRAM)


def lib() -> library.Library:
    return library.load(PROGRAM)


# --- argument checks (before any launch) ------------------------------------------------------------

def check_variant(variant: str) -> str:
    """The variant's name, or ValueError naming those in the library's one table."""
    library.table_index(PROGRAM, "variant", variant)
    return variant


def check_scale(scale, variant: str) -> float:
    """scale as a float32-representable number: finite, and 1 unless the variant is 05_fused_scale."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale must be a number, got {type(scale).__name__}")
    if not math.isfinite(scale) or abs(float(scale)) > float(np.finfo(np.float32).max):
        raise ValueError(f"scale must be a finite float32, got {scale}")
    if float(scale) != 1.0 and variant != SCALED:
        raise ValueError(f"scale is {SCALED}'s: {variant} computes softmax(x); pass scale * x, or use {SCALED}")
    return float(scale)


def check_shape(rows, cols) -> tuple[int, int]:
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
        if v > INT_MAX:
            raise ValueError(f"{name} must be at most {INT_MAX} (one block per row on the grid's x axis), got {v}")
    return int(rows), int(cols)


def tolerance(variant: str, cols: int) -> float:
    """The relative error a variant's output is held to at this row length (see the module's docstring)."""
    return max(TOL, NAIVE_TOL_PER_COL * cols) if variant == NAIVE else TOL


def register_cols(variant: str) -> int:
    """The longest row `variant` keeps in registers (read from memory once); 0 where it never does."""
    check_variant(variant)
    return int(lib().softmax_register_cols(variant))


# --- the API ------------------------------------------------------------------------------------------

def softmax(x: np.ndarray, variant: str = DEFAULT_VARIANT, scale: float = 1.0,
            out: np.ndarray | None = None) -> np.ndarray:
    """softmax(scale * x) along the rows of a 2-D C-contiguous float32 array, on the GPU. Returns out."""
    check_variant(variant)
    scale = check_scale(scale, variant)
    x = library.check_array(x, "x", np.float32, ndim=2)
    rows, cols = check_shape(*x.shape)
    if out is None:
        out = np.empty(x.shape, dtype=np.float32)
    else:
        out = library.check_array(out, "out", np.float32, ndim=2, shape=x.shape)
        if not out.flags.writeable:
            raise ValueError("out must be writeable")
        if np.shares_memory(x, out):
            raise ValueError("out must not overlap x")
    if x.size:
        lib().softmax_f32(variant, x, out, rows, cols, scale)
    return out


def softmax_dev(variant: str, d_x, d_out, rows: int, cols: int, scale: float = 1.0, stream=None) -> None:
    """Enqueue one softmax on device pointers (DeviceBuffer or cffi pointers) on `stream`; no sync."""
    check_variant(variant)
    scale = check_scale(scale, variant)
    rows, cols = check_shape(rows, cols)
    lib().softmax_f32_dev(variant, d_x, d_out, rows, cols, scale, stream)


def reference(x: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """numpy, in float64: softmax(scale * x) along the last axis, the row's max subtracted first."""
    y = float(scale) * np.asarray(x, dtype=np.float64)
    e = np.exp(y - y.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def unstable(x: np.ndarray) -> np.ndarray:
    """The textbook formula exp(x) / sum(exp(x)) in float32, without the max subtracted: any score
    above log(FLT_MAX) ~ 88.7 makes exp(x) inf, and the row becomes inf / inf = NaN. Kept to show why
    every kernel here subtracts the max."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True, dtype=np.float32)


# --- Python twins on the lectures' simulator (harness/base/sim.py) ------------------------------------
# Float32 throughout, as on the GPU: np.float32 scalars, np.exp/np.exp2 of them (expf/exp2f).

# EXERCISE softmax_row: copy
# EXERCISE softmax_online: copy
F32 = np.float32
# EXERCISE softmax_row: end copy


def _fmaf(a, b, c) -> np.float32:
    """fmaf(a, b, c): a * b + c rounded once (the product of two float32s is exact in float64)."""
    return F32(float(a) * float(b) + float(c))
# EXERCISE softmax_online: end copy


def softmax_naive_bk(blockidx, threadidx, blockdim, x, out, rows, cols):
    """01_naive, lecture-3 style: one thread per row, three passes."""
    row = blockidx * blockdim + threadidx
    if row >= rows:
        return
    m = F32(-np.inf)
    for c in range(cols):
        m = max(m, x[row, c])
    s = F32(0)
    for c in range(cols):
        s = F32(s + np.exp(x[row, c] - m))
    inv = F32(1) / s
    for c in range(cols):
        out[row, c] = np.exp(x[row, c] - m) * inv


# EXERCISE softmax_row: copy
def softmax_block_row_k(ctx, x, out, rows, cols):
    """02_block_row: one block per row (x and out are rows x cols float32; blockDim.x threads share a
    row, blockDim.x a power of two); red = ctx.shared.red holds blockDim.x float32s. Each bare `yield`
    is a __syncthreads()."""
    red = ctx.shared.red
    row, t, nt = ctx.blockIdx.x, ctx.threadIdx.x, ctx.blockDim.x
    # EXERCISE softmax_row: begin m = the row's max: each thread's max over its columns c = t, t + nt, ... (c < cols;
    # EXERCISE softmax_row: todo a thread with no column must not change the max: start from the identity of max); then a
    # EXERCISE softmax_row: todo tree in red: red[t] = m, and for half = nt // 2, ..., 1 the threads t < half keep the larger
    # EXERCISE softmax_row: todo of red[t] and red[t + half], with a barrier (a bare `yield`) before the tree and after each
    # EXERCISE softmax_row: todo step; m = red[0], and one more barrier before red is reused below.
    m = F32(-np.inf)
    for c in range(t, cols, nt):
        m = max(m, x[row, c])
    red[t] = m
    yield
    half = nt // 2
    while half > 0:
        if t < half:
            red[t] = max(red[t], red[t + half])
        yield  # this step's results are the next step's inputs
        half //= 2
    m = red[0]
    yield  # everyone has read the max before red[] is reused for the sums
    # EXERCISE softmax_row: stub m = F32(0)
    # EXERCISE softmax_row: end
    # EXERCISE softmax_row: begin inv = 1 / the row's sum of np.exp(x[row, c] - m) (float32, as on the GPU): each
    # EXERCISE softmax_row: todo thread's sum over its columns, then the same tree over red with + in place of the max, and
    # EXERCISE softmax_row: todo inv from red[0].
    s = F32(0)
    for c in range(t, cols, nt):
        s = F32(s + np.exp(x[row, c] - m))
    red[t] = s
    yield
    half = nt // 2
    while half > 0:
        if t < half:
            red[t] = F32(red[t] + red[t + half])
        yield
        half //= 2
    inv = F32(1) / red[0]
    # EXERCISE softmax_row: stub inv = F32(0)
    # EXERCISE softmax_row: end
    # EXERCISE softmax_row: begin the normalised write: out[row, c] = np.exp(x[row, c] - m) * inv for each of this
    # EXERCISE softmax_row: todo thread's columns.
    for c in range(t, cols, nt):
        out[row, c] = np.exp(x[row, c] - m) * inv
    # EXERCISE softmax_row: end
# EXERCISE softmax_row: end copy


# EXERCISE softmax_online: copy
def merge(m, d, m2, d2) -> tuple[np.float32, np.float32]:
    """Online softmax's merge of two (max, sum) pairs (softmax.cu's softmax_merge): d is a sum of
    exp(y - m) over the values y seen so far, m their max; a pair with no values is (-inf, 0)."""
    # EXERCISE softmax_online: begin the merged pair (mm, the merged sum): the larger max wins, and each sum, taken
    # EXERCISE softmax_online: todo relative to its own max, is brought to the merged one by exp(its max - the merged max)
    # EXERCISE softmax_online: todo (exp(z) is np.exp2(F32(z * F32(LOG2E))) here, in float32). Two empty pairs (-inf, 0)
    # EXERCISE softmax_online: todo stay as they are: -inf - -inf is NaN.
    mm = max(m, m2)
    if mm == -np.inf:
        return m, d
    return mm, F32(d * np.exp2(F32((m - mm) * F32(LOG2E))) + d2 * np.exp2(F32((m2 - mm) * F32(LOG2E))))
    # EXERCISE softmax_online: stub return m, d
    # EXERCISE softmax_online: end


def softmax_online_k(ctx, x, out, rows, cols, scale, trace=None):
    """04_online: one pass for the running (max, sum) per thread, a shared tree of pairs, the write pass.
    `trace`, a list, receives (row, thread, column, x, max, sum) after each element of the first pass."""
    red_m, red_d = ctx.shared.red_m, ctx.shared.red_d
    row, t, nt = ctx.blockIdx.x, ctx.threadIdx.x, ctx.blockDim.x
    log2e = F32(LOG2E)
    # EXERCISE softmax_online: begin the running pair of a thread that has seen no column yet: m, the max so far,
    # EXERCISE softmax_online: todo must be below every value; d, the sum so far, is empty (both float32).
    m, d = F32(-np.inf), F32(0)
    # EXERCISE softmax_online: stub m, d = F32(0), F32(0)
    # EXERCISE softmax_online: end
    for c in range(t, cols, nt):
        xc = x[row, c]
        y = F32(scale * xc)
        # EXERCISE softmax_online: begin fold y into (m, d): when y is a new max, what d summed under the old max
        # EXERCISE softmax_online: todo shrinks by exp(m_old - m_new), and m = y; then add this column's term exactly as the
        # EXERCISE softmax_online: todo write pass below computes it (exp(z) is np.exp2(F32(z * log2e)), float32 throughout).
        if y > m:  # a new maximum: what was summed so far shrinks by exp(m_old - m_new)
            d = F32(d * np.exp2(F32((m - y) * log2e)))
            m = y
        d = F32(d + np.exp2(F32(_fmaf(scale, xc, -m) * log2e)))
        # EXERCISE softmax_online: end
        if trace is not None:
            trace.append((row, t, c, float(xc), float(m), float(d)))
    red_m[t], red_d[t] = m, d
    yield
    half = nt // 2
    while half > 0:
        if t < half:
            red_m[t], red_d[t] = merge(red_m[t], red_d[t], red_m[t + half], red_d[t + half])
        yield
        half //= 2
    m, inv = red_m[0], F32(1) / red_d[0]
    for c in range(t, cols, nt):
        out[row, c] = np.exp2(F32(_fmaf(scale, x[row, c], -m) * log2e)) * inv
# EXERCISE softmax_online: end copy


TWINS = ("01_naive", "02_block_row", "04_online")  # the variants with a twin (03's shuffles have none)


def twin(x: np.ndarray, variant: str = "04_online", threads: int = 32, scale: float = 1.0,
         on_block=None, trace=None) -> np.ndarray:
    """Run a variant's Python twin on the simulator and return its output (NaN where nothing was
    written). `threads`: rows per block for 01, threads per row (a power of two) for 02 and 04."""
    x = library.check_array(np.asarray(x), "x", np.float32, ndim=2)
    if variant not in TWINS:
        raise ValueError(f"no Python twin for {variant!r}; twins: {', '.join(TWINS)}")
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1 or threads > 1024:
        raise ValueError(f"threads must be an integer in 1..1024, got {threads!r}")
    if variant != "01_naive" and threads & (threads - 1):
        raise ValueError(f"{variant}'s tree halves the block: threads must be a power of two, got {threads}")
    if float(scale) != 1.0 and variant != "04_online":
        raise ValueError("only the online twin takes a scale (05_fused_scale's fallback kernel)")
    rows, cols = x.shape
    out = np.full(x.shape, np.nan, dtype=np.float32)
    if x.size == 0:
        return out
    if variant == "01_naive":
        sim.blk_kernel(softmax_naive_bk, -(-rows // threads), threads, x, out, rows, cols)
    elif variant == "02_block_row":
        sim.launch(softmax_block_row_k, rows, threads, x, out, rows, cols,
                   shared={"red": ((threads,), np.float32)}, on_block=on_block)
    else:
        sim.launch(softmax_online_k, rows, threads, x, out, rows, cols, F32(scale), trace,
                   shared={"red_m": ((threads,), np.float32), "red_d": ((threads,), np.float32)}, on_block=on_block)
    return out


def online_trace(x: np.ndarray, threads: int = 4):
    """04_online's twin on one row: (DataFrame of each thread's running max and sum after each of its
    elements, the output row). The picture draws this."""
    import pandas as pd

    x = np.asarray(x, dtype=np.float32).reshape(1, -1)
    rows: list = []
    p = twin(x, "04_online", threads, trace=rows)[0]
    df = pd.DataFrame(rows, columns=["row", "thread", "column", "x", "max", "sum"])
    return df, p


# --- without a GPU --------------------------------------------------------------------------------

CPU_MAX_ELEMENTS = 20000  # the simulator runs Python per thread and per element: small shapes only


def _cpu_inputs(rows: int, cols: int, span: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-span, span, (rows, cols)).astype(np.float32)


def on_cpu(args: list[str]) -> tuple[pd.DataFrame, str]:
    """`invoke run softmax [-- ROWS COLS]` without a GPU: the twins of 01_naive, 02_block_row and
    04_online on ragged shapes (cols 1, 31, 33, 1000 and a row spanning +-1000, or the ROWS x COLS given),
    each against the float64 reference; the last row shows the formula without the max overflowing."""
    import pandas as pd

    args = [str(a) for a in args]
    if args and (len(args) != 2 or not all(a.isdigit() for a in args)):
        raise ValueError(f"on the CPU, softmax takes ROWS COLS (two integers) or nothing, got: {' '.join(args)}")
    if args:
        rows, cols = int(args[0]), int(args[1])
        if not (rows >= 1 and cols >= 1 and rows * cols <= CPU_MAX_ELEMENTS):
            raise ValueError(f"on the CPU (the simulator) ROWS and COLS must be >= 1 with ROWS * COLS <= "
                             f"{CPU_MAX_ELEMENTS}, got {rows} {cols}")
        shapes = [(rows, cols, 10.0)]
    else:
        shapes = [(3, 1, 10.0), (4, 31, 10.0), (2, 33, 10.0), (3, 1000, 10.0), (2, 257, 1000.0)]
    table = []
    for rows, cols, span in shapes:
        x = _cpu_inputs(rows, cols, span, rows * 1000 + cols)
        ref = reference(x)
        for v in TWINS:
            err = _results.relative_error(twin(x, v, 32), ref)
            table.append({"variant": v, "rows": rows, "cols": cols, "span": f"+-{span:g}",
                          "rel_error": float(f"{err:.3g}"), "check": "pass" if err <= tolerance(v, cols) else "fail"})
    x = _cpu_inputs(2, 257, 1000.0, 2257)
    bad = int(np.count_nonzero(~np.isfinite(unstable(x))))
    table.append({"variant": "exp(x) / sum, no max (numpy float32)", "rows": 2, "cols": 257, "span": "+-1000",
                  "rel_error": float("inf"), "check": "pass" if bad else "fail"})
    return pd.DataFrame(table), ("the kernels' Python twins on harness.base.sim against the float64 reference "
                                 f"(tolerance {TOL:g}); the last row passes when the formula without the max "
                                 f"does overflow ({bad} of 514 outputs not finite)")


# --- the executable -------------------------------------------------------------------------------

def run(*args, timeout: float = 300) -> pd.DataFrame:
    """Run build/bin/softmax and parse its result lines (a failed check raises ProgramError)."""
    return _results.run(PROGRAM, *args, timeout=timeout)


def parse_output(text: str) -> pd.DataFrame:
    return _results.parse_output(text, PROGRAM)


# --- the picture (`invoke viz softmax`, analysis/softmax.py) ---------------------------------------

PICTURE_COLS, PICTURE_THREADS = 48, 4


def picture_row() -> np.ndarray:
    """The picture's row: scores drifting upwards, so each thread meets several new maxima."""
    rng = np.random.default_rng(3)
    return (rng.normal(0.0, 1.5, PICTURE_COLS) + np.linspace(0.0, 6.0, PICTURE_COLS)).astype(np.float32)


def viz_data(simulate: bool = False, progress=None) -> dict:
    """04_online on one row of 48 scores, 4 threads: each thread's running max and rescaled sum (from the
    twin, which the GPU's registers cannot show), and the softmax from the GPU's 04_online, or with
    simulate=True from the twin as well."""
    x = picture_row()
    trace, p_twin = online_trace(x, PICTURE_THREADS)
    if progress is not None:
        progress(1, 1)
    if simulate:
        p, where = p_twin, "the output computed by the Python twin on the simulator"
    else:
        p, where = softmax(x.reshape(1, -1), "04_online")[0], "the output computed by 04_online on the GPU"
    return {"x": x, "trace": trace, "p": p, "ref": reference(x), "threads": PICTURE_THREADS, "simulated": bool(simulate),
            "computed_on": f"the running max and sum from 04_online's Python twin; {where}"}


# --- the bench, the profiler and the sanitizer --------------------------------------------------------

BENCH_ROWS, BENCH_COLS = 4096, 4096
HEADLINE = f"{BENCH_ROWS}x{BENCH_COLS}"
# (label, rows, cols, quick): the headline; rows that 03 and 05 keep in registers; rows past 05's registers.
BENCH_SIZES = ((HEADLINE, BENCH_ROWS, BENCH_COLS, True), ("32768x1024", 32768, 1024, False),
               ("512x32768", 512, 32768, False))
BENCH_SCALE = 0.125  # 1/sqrt(64): attention's scale at head dimension 64
BEST = SCALED
TARGET = 0.9  # BEST's goal at the headline size, as a fraction of cudaMemcpy's bandwidth for the same bytes


def _bench_input(rows: int, cols: int) -> np.ndarray:
    # Scores in [-10, 10): the max moves now and then along a row, as in real logits; never a NaN path.
    return np.random.default_rng(0).uniform(-10, 10, (rows, cols)).astype(np.float32)


def bench_setup(variant: str, rows: int, cols: int, scale: float = 1.0):
    """The timing child's target: x and out on the device, the launch marshalled once."""
    from harness.calling import cudart
    from harness.measuring import bench

    check_variant(variant)
    scale = check_scale(scale, variant)
    x = cudart.DeviceBuffer.from_array(_bench_input(rows, cols))
    out = cudart.DeviceBuffer(4 * rows * cols)

    def close():
        x.close()
        out.close()

    try:
        launch = lib().prepare("softmax_f32_dev", variant, x, out, rows, cols, scale, library.STREAM)
    except BaseException:
        close()
        raise
    return bench.Prepared(launch, close)


def torch_setup(rows: int, cols: int):
    """The timing child's target for the torch ceiling: torch.softmax(x, dim=-1) in float32 on the same
    inputs, enqueued on the timing session's stream (a torch ExternalStream per stream handle)."""
    import torch

    from harness.calling import cudart
    from harness.measuring import bench

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    x = torch.from_numpy(_bench_input(rows, cols)).cuda()
    streams: dict = {}

    def launch(stream):
        handle = 0 if stream is None else int(cudart.ffi.cast("uintptr_t", stream))
        if handle not in streams:
            streams[handle] = torch.cuda.ExternalStream(handle) if handle else torch.cuda.current_stream()
        with torch.cuda.stream(streams[handle]):
            torch.softmax(x, dim=-1)

    launch(None)  # the first call loads torch's kernels: not part of any timed launch
    torch.cuda.synchronize()
    return bench.Prepared(launch, torch.cuda.synchronize)


def torch_ceiling_name(size: str) -> str:
    return "torch_softmax" if size == HEADLINE else f"torch_softmax@{size}"


def _torch_ceiling(label: str, rows: int, cols: int):
    def ceiling(quick: bool = False):
        """torch.softmax at this size, timed beside the cases; None where torch is not installed."""
        import importlib.util

        from harness.measuring import bench

        if importlib.util.find_spec("torch") is None:
            return None
        return bench.TimedCeiling(torch_ceiling_name(label), "GB/s", 8.0 * rows * cols,
                                  f"harness.programs.{PROGRAM}:torch_setup", {"rows": rows, "cols": cols},
                                  f"torch.softmax(x, dim=-1) float32 {label}")
    return ceiling


def ceilings() -> dict:
    """The registry's hook: torch.softmax at each bench size (memcpy of the same bytes is the bench's own)."""
    return {torch_ceiling_name(label): _torch_ceiling(label, r, c) for label, r, c, _ in BENCH_SIZES}


def _case(v: str, label: str, rows: int, cols: int, is_quick: bool, ceiling: str, name: str | None = None,
          target: float | None = None, note: str = ""):
    from harness.measuring import bench

    n = rows * cols
    scale = BENCH_SCALE if v == SCALED else 1.0
    return bench.BenchCase(program=PROGRAM, variant=name or v, size=label, setup=f"harness.programs.{PROGRAM}:bench_setup",
                           kwargs={"variant": v, "rows": rows, "cols": cols, "scale": scale}, unit="GB/s",
                           amount=8.0 * n, ceiling=ceiling, target=target, quick=is_quick, bytes=8.0 * n,
                           flops=5.0 * n, note=note)


def bench_cases(quick: bool = False) -> list:
    """Every variant at each size against cudaMemcpy of the same bytes timed in the same run, 8 bytes an element
    (x read once, out written once: the least a softmax moves), counted as the memcpy ceiling counts.
    05_fused_scale runs softmax(0.125 * x); its goal is TARGET of memcpy at the headline size. 04 and 05
    also against torch.softmax at the same size (the same bytes; torch's has no scale to fold).
    --quick: the headline size only."""
    from harness.measuring import bench

    cases = []
    for label, rows, cols, is_quick in BENCH_SIZES:
        if quick and not is_quick:
            continue
        for v in library.read_table(PROGRAM):
            goal = TARGET if (v == BEST and label == HEADLINE) else None
            note = "fraction of cudaMemcpy DtoD of the same bytes; bytes = 4 read + 4 written per element"
            cases.append(_case(v, label, rows, cols, is_quick, bench.memcpy_of(4 * rows * cols), target=goal,
                               note=note + (f" (goal: >= {TARGET} at {HEADLINE})" if goal else "")))
        for v in ("04_online", BEST):
            cases.append(_case(v, label, rows, cols, is_quick, torch_ceiling_name(label), name=f"{v}-vs-torch",
                               note="ratio to torch.softmax"))
    return cases


def profile_args(variant: str | None = None) -> list[str]:
    return ["--variant", variant or DEFAULT_VARIANT, "--reps", "1", str(BENCH_ROWS), str(BENCH_COLS)]


def sanitize_args() -> dict[str, list[str]]:
    """Every variant on ragged shapes: 37 x 1000 (inside 03's and 05's registers, 05 in float4s) and
    5 x 4097 (03 looping, 05 on scalars); 05 also with a scale, and on rows past its registers."""
    runs = {}
    for v in library.read_table(PROGRAM):
        runs[f"{v} 37x1000"] = ["--variant", v, "--reps", "1", "37", "1000"]
        runs[f"{v} 5x4097"] = ["--variant", v, "--reps", "1", "5", "4097"]
    runs[f"{SCALED} 9x1024 scaled"] = ["--variant", SCALED, "--reps", "1", "--scale", "0.125", "9", "1024"]
    runs[f"{SCALED} 3x16385"] = ["--variant", SCALED, "--reps", "1", "3", "16385"]
    return runs


# --- the exercises (`invoke exercise start softmax_row`; harness/user/exercises/README.md) ---------------

EXERCISES = (
    Exercise(
        "softmax_row", origin="PMPP ch. 10 (reduction trees in shared memory), GPU MODE lecture 12's softmax",
        writes="the row's max and sum as shared-memory trees with their barriers, and the normalised write",
        tracks=("python", "cuda"), problem=_ex.SoftmaxRow(), py_entry="softmax_block_row_k",
        cu_source="cuda/softmax/softmax.cu", cu_kernels=("softmax_02_block_row",), glue="exercise_softmax_row.cu",
        cu_includes="#include <cmath>\n",
        hints=("The block's threads split the row: thread t takes columns t, t + blockDim.x, ... below cols. Each "
               "keeps its own max, then the block combines them in shared memory; the same again for the sum of "
               "exp(x - max), then each thread writes its columns.",
               "The tree: store your value in red[t]; then for half = blockDim.x / 2, ..., 1, threads t < half "
               "combine red[t] with red[t + half]. A barrier (Python: a bare `yield`) before the tree and after "
               "every step, taken by every thread, even those with no column; red[0] is the answer, and everyone "
               "reads it before red[] is written again.",
               "A thread with no column (a row shorter than the block) stores -inf for the max and 0 for the sum: "
               "the values that change nothing. Start the max at -inf, not 0: with every score far below 0, a max "
               "of 0 makes every exp(x - 0) underflow and the sum 0."),
        block="one block of 256 threads per row (Python: 8)",
    ),
    Exercise(
        "softmax_online", origin="Milakov and Gimelshein, Online normalizer calculation for softmax (2018); "
                                 "GPU MODE lecture 12",
        writes="the running max and the rescaled running sum, and the merge of two (max, sum) pairs",
        tracks=("python", "cuda"), problem=_ex.SoftmaxOnline(), py_entry="softmax_online_k",
        cu_source="cuda/softmax/softmax.cu", cu_kernels=("softmax_04_online",), glue="exercise_softmax_online.cu",
        cu_includes="#include <cmath>\n",
        hints=("Keep, per thread, the largest score seen so far (m) and the sum of exp(score - m) over the scores "
               "seen so far (d); one pass over the row fills both.",
               "When a score y is larger than m, every term already in d was exp(score - m_old) and must become "
               "exp(score - y): multiply d by exp(m_old - y) and set m = y. Then, new max or not, add this score's "
               "exp(y - m). The merge of two pairs does the same to both sums, towards the larger max.",
               "Start from m = -inf, d = 0 (the pair of no scores). In the merge, return at once when the larger "
               "max is -inf: two empty pairs, and -inf - -inf is NaN. The kernel writes exp(z) as "
               "exp2(z * log2 e): CUDA exp2f((m - y) * CUDALAB_LOG2E), Python np.exp2(F32((m - y) * log2e))."),
        block="one block of 256 threads per row (Python: 8)",
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name=PROGRAM,
    summary="row softmax: block and warp reductions, then the online softmax",
    follows="PMPP ch. 10, [GPU MODE lecture 12](https://github.com/gpu-mode/lectures/tree/main/lecture_012)",
    order=75,
    readme_picture="[online](cuda/softmax/online_sim.png)",
    variants=True,
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    bench_cases=bench_cases,
    ceilings=ceilings,
    run=run,
    parse_output=parse_output,
    reference=reference,
    on_cpu=on_cpu,
    picture=Picture("softmax", viz_data, options=("simulate", "progress")),
    tour=Tour("the online softmax: each thread's running max and rescaled sum along a row, then the merge",
              drawn=("plots/softmax_online*.png",), committed=("cuda/softmax/online_sim.png",)),
    exercises=EXERCISES,
)
