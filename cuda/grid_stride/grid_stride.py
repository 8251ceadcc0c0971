"""grid_stride: the course's squareElements (a[i] *= i over a grid-stride loop) and its trace.

build/bin/grid_stride N BLOCKS THREADS prints, for every element,
    Thread %d (Block %d, Thread in Block %d) processing element %d. Old value: %d, New value: %d
The array starts as a[i] = i, so Old Value = index and New Value = Old * index = index^2 (mod 2^32).

    parse_trace(text)               -> DataFrame with the course's columns
    validate(df, n, blocks, threads) -> the same, sorted by element; TraceError if any line is
                                       missing, duplicated or wrong (a partial trace is never used)
    run(n, blocks, threads)          -> run the executable, parse, validate
    simulate(n, blocks, threads)     -> the same DataFrame from the Python twin on harness.base.sim
    expected_mapping(n, blocks, threads) -> numpy's closed form: element i <- thread i % (blocks*threads)
    viz_data(n, blocks, threads, simulate) -> GridStrideData for analysis/gridstride.py
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.base import sim
from harness.base.errors import TraceError
from harness.calling import runner
from harness.programs import grid_stride_exercises as _ex
from harness.programs.record import Exercise, Picture, Program, Tour

PROGRAM = "grid_stride"
COLUMNS = ["Thread ID", "Block ID", "Thread in Block", "Element Index", "Old Value", "New Value"]
DEFAULT_N, DEFAULT_BLOCKS, DEFAULT_THREADS = 500, 8, 32
MAX_N = 1 << 20  # GRID_STRIDE_MAX_N in grid_stride.h: one line of trace per element
MAX_THREADS = 1024

LINE = re.compile(
    r"^Thread (-?\d+) \(Block (-?\d+), Thread in Block (-?\d+)\) processing element (-?\d+)\. "
    r"Old value: (-?\d+), New value: (-?\d+)$")
VERDICT = re.compile(r"^All elements were squared\? (TRUE|FALSE)$")


def _wrap32(v: np.ndarray) -> np.ndarray:
    """int64 values reduced to int32's range modulo 2^32 (what the kernel's unsigned multiply gives)."""
    return (np.asarray(v, dtype=np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)


def _wrap32_int(v: int) -> int:
    return ((v & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000


def check_launch(n: int, blocks: int, threads: int) -> None:
    """ValueError/TypeError for a launch the program would refuse, before anything runs."""
    for name, v in (("n", n), ("blocks", blocks), ("threads", threads)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
        if v <= 0:
            raise ValueError(f"{name} must be positive, got {v}")
    if n > MAX_N:
        raise ValueError(f"n={n}: at most {MAX_N} elements (each prints a line of trace)")
    if threads > MAX_THREADS:
        raise ValueError(f"threads={threads}: at most {MAX_THREADS} threads per block")
    if blocks * threads > 2**31 - 1:
        raise ValueError("blocks * threads must fit an int (the kernel's thread index)")


# --- parsing and checking -------------------------------------------------------------------------

def parse_trace(text: str) -> pd.DataFrame:
    """Every trace line as a row (in printed order). Lines starting with '#' are comments (the
    recorded fixtures name their device there: `# device: ...`); other lines are ignored.
    attrs: all_squared (True/False/None when the verdict line is absent), device, line_numbers."""
    rows, device, verdict = [], None, None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            m = re.match(r"#\s*device:\s*(.+)$", line)
            if m:
                device = m.group(1).strip()
            continue
        m = LINE.match(line)
        if m:
            rows.append(tuple(int(g) for g in m.groups()))
            continue
        v = VERDICT.match(line)
        if v:
            verdict = v.group(1) == "TRUE"
    df = pd.DataFrame(rows, columns=COLUMNS, dtype=np.int64) if rows else pd.DataFrame(
        {c: pd.Series(dtype=np.int64) for c in COLUMNS})
    df.attrs.update(all_squared=verdict, device=device)
    return df


def validate(df: pd.DataFrame, n: int, blocks: int | None = None, threads: int | None = None) -> pd.DataFrame:
    """Check the trace: each element 0..n-1 exactly once, New Value == Old Value * index (mod 2^32),
    Old Value == index (the program's a[i] = i), and, when the launch is given, consistent ids.
    Returns the rows sorted by element index; raises TraceError naming what is wrong."""
    if list(df.columns[:len(COLUMNS)]) != COLUMNS:
        raise TraceError(f"trace columns are {list(df.columns)}, expected {COLUMNS}")
    if len(df) == 0:
        raise TraceError(f"empty trace: expected {n} lines", missing=range(n))
    idx = df["Element Index"].to_numpy()
    counts = np.bincount(idx[(idx >= 0) & (idx < n)], minlength=n)
    missing = np.flatnonzero(counts == 0)
    duplicated = np.flatnonzero(counts > 1)
    outside = sorted(set(idx[(idx < 0) | (idx >= n)].tolist()))
    if len(missing) or len(duplicated) or outside:
        parts = []
        if len(missing):
            parts.append(f"{len(missing)} element(s) missing (first: {missing[:5].tolist()})")
        if len(duplicated):
            parts.append(f"{len(duplicated)} element(s) printed more than once (first: {duplicated[:5].tolist()})")
        if outside:
            parts.append(f"element index outside 0..{n - 1}: {outside[:5]}")
        raise TraceError(f"grid-stride trace of {len(df)} lines for n={n}: " + "; ".join(parts),
                         missing=missing.tolist(), duplicated=duplicated.tolist())
    old, new = df["Old Value"].to_numpy(), df["New Value"].to_numpy()
    bad = np.flatnonzero(_wrap32(old * idx) != new)
    if len(bad):
        i = bad[0]
        raise TraceError(f"{len(bad)} line(s) with New Value != Old Value * index, first: element {idx[i]} "
                         f"old {old[i]} new {new[i]}")
    bad = np.flatnonzero(old != idx)
    if len(bad):
        raise TraceError(f"{len(bad)} line(s) whose Old Value is not the element index (the array starts as a[i] = i)")
    if threads is not None:
        tid = df["Block ID"].to_numpy() * threads + df["Thread in Block"].to_numpy()
        if np.any(tid != df["Thread ID"].to_numpy()) or np.any(df["Thread in Block"].to_numpy() >= threads):
            raise TraceError(f"Thread ID != Block ID * {threads} + Thread in Block on some lines")
    if blocks is not None and np.any(df["Block ID"].to_numpy() >= blocks):
        raise TraceError(f"a Block ID >= {blocks} in a launch of {blocks} blocks")
    if df.attrs.get("all_squared") is False:
        raise TraceError("the program itself reported `All elements were squared? FALSE`")
    out = df.sort_values("Element Index", kind="stable").reset_index(drop=True)
    out.attrs = dict(df.attrs)
    return out


def expected_mapping(n: int, blocks: int, threads: int) -> pd.DataFrame:
    """What a grid-stride loop must do, in closed form: element i belongs to global thread
    i % (blocks*threads); sorted by element index, same columns as the trace."""
    i = np.arange(n, dtype=np.int64)
    t = i % (blocks * threads)
    return pd.DataFrame({"Thread ID": t, "Block ID": t // threads, "Thread in Block": t % threads,
                         "Element Index": i, "Old Value": i, "New Value": _wrap32(i * i)})


# --- the Python twin ------------------------------------------------------------------------------

def square_elements_k(ctx, a, n, trace):
    """squareElements on harness.base.sim: the same loop, appending the line the GPU would print."""
    index = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
    stride = ctx.blockDim.x * ctx.gridDim.x
    i = index
    while i < n:
        old = int(a[i])
        a[i] = _wrap32_int(old * i)
        trace.append((index, ctx.blockIdx.x, ctx.threadIdx.x, i, old, int(a[i])))
        i += stride


def simulate(n: int = DEFAULT_N, blocks: int = DEFAULT_BLOCKS, threads: int = DEFAULT_THREADS,
             progress=None) -> pd.DataFrame:
    """The trace the twin predicts, rows in the simulator's thread order (not sorted).
    `progress(done, total)` is called after each simulated block (Python runs every thread in turn:
    a million elements take tens of seconds)."""
    check_launch(n, blocks, threads)
    a = np.arange(n, dtype=np.int64)
    trace: list[tuple] = []
    sim.launch(square_elements_k, blocks, threads, a, n, trace, on_block=progress)
    df = pd.DataFrame(trace, columns=COLUMNS, dtype=np.int64)
    df.attrs.update(all_squared=bool(np.all(a == _wrap32(np.arange(n) ** 2))), device=None)
    return df


_simulate = simulate  # viz_data's `simulate` flag shadows the function's name


# --- running the program --------------------------------------------------------------------------

def run(n: int = DEFAULT_N, blocks: int = DEFAULT_BLOCKS, threads: int = DEFAULT_THREADS,
        timeout: float = 300) -> pd.DataFrame:
    """Run build/bin/grid_stride, parse and validate its trace (sorted by element)."""
    check_launch(n, blocks, threads)
    res = runner.run(PROGRAM, n, blocks, threads, timeout=timeout)
    df = parse_trace(res.stdout)
    if df.attrs.get("all_squared") is None:
        raise TraceError("the program's `All elements were squared?` line is missing")
    return validate(df, n, blocks, threads)


@dataclass
class GridStrideData:
    """What analysis/gridstride.py draws: the validated trace and the launch it came from."""
    frame: pd.DataFrame
    n: int
    blocks: int
    threads: int
    simulated: bool
    device: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def source(self) -> str:
        return "simulated" if self.simulated else (self.device or "GPU")


def viz_data(n: int = DEFAULT_N, blocks: int = DEFAULT_BLOCKS, threads: int = DEFAULT_THREADS,
             simulate: bool = False, progress=None) -> GridStrideData:
    """The validated trace for `invoke viz gridstride`: from the GPU, or from the simulator
    (simulate=True, no GPU needed; the figures then say "(simulated)"; `progress(done, total)`
    follows its blocks)."""
    check_launch(n, blocks, threads)
    if simulate:
        df = validate(_simulate(n, blocks, threads, progress), n, blocks, threads)
        return GridStrideData(df, n, blocks, threads, simulated=True)
    df = run(n, blocks, threads)
    device = None
    try:
        from harness.calling import cudart

        device = cudart.device_name(0)
    except Exception:  # the name is only a label on the figures
        device = None
    return GridStrideData(df, n, blocks, threads, simulated=False, device=device)


# --- hooks for `invoke profile` and `invoke sanitize` (small sizes; see harness/profiling/profile.py) ---
def profile_args(variant: str | None = None) -> list[str]:
    """argv for build/bin/grid_stride: N=100 over 3 blocks of 32, so threads take several elements."""
    return ["100", "3", "32"]


# --- the exercises this program offers (their problems: grid_stride_exercises.py) ---------------------------

EXERCISES = (
    Exercise(
        "grid_stride", origin="CUDA course, the grid-stride exercise (squareElements)",
        writes="idx and stride of the grid-stride loop",
        tracks=("python", "cuda"), problem=_ex.GridStride(), py_entry="square_grid_stride_k",
        py_source="cuda/square/square.py",
        cu_source="cuda/square/square.cu", cu_kernels=("square_02_grid_stride",), glue="exercise_grid_stride.cu",
        hints=("The loop starts at the thread's global index, like a one-thread-per-element kernel.",
             "The step is the number of threads in the whole grid: gridDim.x * blockDim.x. Then thread t handles "
             "t, t + stride, t + 2*stride, ... and the threads together cover every element once.",
             "The check runs grids both smaller and larger than n: a stride of blockDim.x alone, or a start that "
             "forgets blockIdx, leaves elements unwritten or writes them twice."),
        block="a grid of the check's choice, often smaller than n",
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name='grid_stride',
    summary='a grid-stride loop: any n with a fixed grid',
    follows='intro course, grid-stride loops',
    order=40,
    readme_picture='[trace](cuda/grid_stride/trace_sim.png)',
    profile_args=profile_args,
    run=run,
    picture=Picture('gridstride', viz_data, options=('n', 'blocks', 'threads', 'simulate', 'progress')),
    tour=Tour('which thread squared which element: a grid-stride loop steps by blocks x threads', drawn=('plots/gridstride_*_scatter.png',), committed=('cuda/grid_stride/trace_sim.png',)),
    exercises=EXERCISES,
)
