"""scan: inclusive and exclusive prefix sums of 32-bit integers (PMPP chapter 11, the GPU MODE lecture on
scan), from one block's tile in shared memory to CUB's single-pass decoupled look-back.

Public API (numpy in, numpy out; arguments are checked before anything is launched):
    scan(x, variant=None, exclusive=False)       int32 or uint32, 1-D; sums wrap modulo 2^32 (exact)
    cub_scan(x, exclusive=False)                 the same through CUB (the bench's ceiling)
    scan_dev(...), workspace_bytes(variant, n)   device pointers, for the bench and the profilers
    reference(x, exclusive=False)                numpy's answer
    mismatches(out, ref)                         the tests' exact checker: (count, first index)
Python twins on harness.base.sim, kernel for kernel: kogge_stone_k, brent_kung_k, propagate_k (the
scan-then-propagate driver `twin_hierarchy`) and lookback_k (with `look_back`, the walk over earlier
tiles); `twin(x, variant, exclusive)` runs one variant's.

The variant names come from the library's one table (cuda/scan/scan.cu) through library.read_table; a
variant left out is the last, best rung. Twins are listed in the table's order (TWINS).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from harness.base import sim
from harness.calling import library
from harness.calling import results as _results
from harness.programs import scan_exercises as _ex
from harness.programs.record import Exercise, Picture, Program, Tour

if TYPE_CHECKING:  # the CPU paths return DataFrames; pandas is imported where they run
    import pandas as pd

PROGRAM = "scan"
# EXERCISE scan_kogge_stone: copy
# EXERCISE scan_brent_kung: copy
MASK = 0xFFFFFFFF
# EXERCISE scan_brent_kung: end copy
# EXERCISE scan_kogge_stone: end copy
MAX_N = 2**31 - 1  # the library's scan_max_n(): CUB's item count is an int
HEADLINE, HEADLINE_LABEL = 1 << 28, "2^28"
QUICK, QUICK_LABEL = 1 << 24, "2^24"
TARGET = 0.9  # the best rung's goal, as a fraction of CUB's InclusiveSum at the headline size

# VARIANTS is the library's one table, read when first asked for: never typed here.
__getattr__ = library.table_attributes(__name__, PROGRAM)


def lib() -> library.Library:
    return library.load(PROGRAM)


# --- argument checks (before any launch) ------------------------------------------------------------

def best_variant() -> str:
    """The last rung of the table: the one the bench holds to its target."""
    return library.read_table(PROGRAM)[-1]


def check_variant(variant: str | None) -> str:
    """The variant's name (None: the best rung), or ValueError naming those in the library's table."""
    if variant is None:
        return best_variant()
    library.table_index(PROGRAM, "variant", variant)
    return variant


def check_n(n) -> int:
    return library.check_int(n, "n", 0, MAX_N, " (2^31 - 1: CUB's item count is an int)")


def check_exclusive(exclusive) -> bool:
    if not isinstance(exclusive, (bool, np.bool_)):
        raise TypeError(f"exclusive must be True or False, got {exclusive!r}")
    return bool(exclusive)


def check_input(x) -> np.ndarray:
    """A 1-D C-contiguous int32 or uint32 array of at most MAX_N elements."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy array, got {type(x).__name__}")
    if x.dtype not in (np.int32, np.uint32):
        raise TypeError(f"x must be int32 or uint32, got {x.dtype}")
    x = library.check_array(x, "x", x.dtype, ndim=1)
    check_n(x.size)
    return x


# --- numpy reference and the checker -------------------------------------------------------------------

def reference(x: np.ndarray, exclusive: bool = False) -> np.ndarray:
    """The running sum, modulo 2^32 and in x's dtype (int32 wraps as two's complement): numpy's cumsum in
    64 bits, whose low 32 bits are exact whatever it wraps to."""
    x = check_input(np.asarray(x))
    s = np.cumsum(x.view(np.uint32), dtype=np.uint64)
    if check_exclusive(exclusive):
        s = np.concatenate([np.zeros(min(1, s.size), np.uint64), s[:-1]])
    return (s & MASK).astype(np.uint32).view(x.dtype)


def mismatches(out: np.ndarray, ref: np.ndarray) -> tuple[int, int]:
    """The exact checker: (elements that differ, the first index that does; -1 when none). Different
    shapes count every element as wrong."""
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return max(out.size, ref.size), 0
    bad = np.flatnonzero(out.view(np.uint32) != ref.view(np.uint32))
    return int(bad.size), int(bad[0]) if bad.size else -1


# --- the library ------------------------------------------------------------------------------------

def workspace_bytes(variant: str | None, n: int) -> int:
    """Device workspace scan_dev needs for `variant` at n elements."""
    variant = check_variant(variant)
    return int(lib().scan_workspace_bytes(variant, check_n(n)))


def scan(x: np.ndarray, variant: str | None = None, exclusive: bool = False) -> np.ndarray:
    """The prefix sum of a 1-D int32 or uint32 array on the GPU; a new array of x's dtype."""
    variant = check_variant(variant)
    exclusive = check_exclusive(exclusive)
    x = check_input(x)
    out = np.full(x.shape, 0xA5A5A5A5, dtype=np.uint32)  # a byte pattern, so an unwritten element shows
    if x.size:
        lib().scan_u32(variant, x.view(np.uint32), out, x.size, int(exclusive))
    return out.view(x.dtype)


def scan_dev(variant: str | None, d_x, d_out, n: int, exclusive: bool, d_work, work_bytes: int,
             stream=None) -> None:
    """Enqueue one scan on device pointers (DeviceBuffer or cffi); no sync. d_work holds at least
    workspace_bytes(variant, n) bytes."""
    variant = check_variant(variant)
    n, exclusive = check_n(n), check_exclusive(exclusive)
    need = workspace_bytes(variant, n)
    if work_bytes < need:
        raise ValueError(f"{variant} at n={n} needs {need} bytes of workspace, got {work_bytes}")
    lib().scan_u32_dev(variant, d_x, d_out, n, int(exclusive), d_work, int(work_bytes), stream)


def cub_workspace_bytes(n: int, exclusive: bool = False) -> int:
    """What CUB's DeviceScan asks for as temporary storage at n elements."""
    L = lib()
    out = L.ffi.new("long long *")
    L.scan_cub_workspace_bytes(check_n(n), int(check_exclusive(exclusive)), out)
    return int(out[0])


def cub_scan(x: np.ndarray, exclusive: bool = False) -> np.ndarray:
    """CUB's scan of x (the ceiling's very call), for a test that it computes what the variants do."""
    from harness.calling import cudart

    exclusive = check_exclusive(exclusive)
    x = check_input(x)
    out = np.full(x.shape, 0xA5A5A5A5, dtype=np.uint32)
    if not x.size:
        return out.view(x.dtype)
    wb = cub_workspace_bytes(x.size, exclusive)
    with cudart.DeviceBuffer.from_array(x.view(np.uint32)) as dx, cudart.DeviceBuffer(out.nbytes) as dout, \
            cudart.DeviceBuffer(max(wb, 8)) as work:
        dout.fill_bytes(0xA5)
        lib().scan_cub_dev(dx, dout, x.size, int(exclusive), work, wb, None)
        cudart.synchronize()
        dout.to_host(out)
    return out.view(x.dtype)


# --- Python twins (harness.base.sim): each a generator, a bare `yield` is a __syncthreads() ----------

# EXERCISE scan_kogge_stone: copy
# EXERCISE scan_brent_kung: copy
def _add(a, b) -> int:
    """a + b modulo 2^32, as CUDA's unsigned addition (Python ints: numpy scalars would warn)."""
    return (int(a) + int(b)) & MASK
# EXERCISE scan_brent_kung: end copy
# EXERCISE scan_kogge_stone: end copy


def _note(trace, step: int, src: int, dst: int) -> None:
    """One addition, out[dst] += out[src] in `step`, for the picture (trace None: not tracing)."""
    if trace is not None:
        trace.append((step, src, dst))


def _down_step(tile: int, stride: int) -> int:
    """The picture's step of Brent-Kung's down-sweep at `stride`: numbered after the up-sweep's
    (tile - 1).bit_length() steps, one more each time the stride halves from tile // 4."""
    return (tile - 1).bit_length() + (tile // 4).bit_length() - stride.bit_length()


# The picture's tracing lines are the lab's own: the exercises' texts leave them out (the `lab` markers).
# EXERCISE scan_kogge_stone: copy
def kogge_stone_k(ctx, x, out, n, exclusive, block_sums, trace=None):
    """01_kogge_stone's kernel: one element per thread, log2(blockDim) steps, two buffers in turn. The
    shared `buf` is 2 x blockDim; a bare `yield` is __syncthreads(). `trace` is the picture's (a list of
    the additions); the exercise's check passes None."""
    t, nt = ctx.threadIdx.x, ctx.blockDim.x
    i = ctx.blockIdx.x * nt + t
    buf = ctx.shared.buf
    # EXERCISE scan_kogge_stone: begin mine = x[i] as an int, or 0 past the end of x (the last tile is ragged; 0
    # EXERCISE scan_kogge_stone: todo changes no sum); put it in buf[0, t] and wait for the whole tile (a bare `yield`).
    # EXERCISE scan_kogge_stone: todo Then for stride = 1, 2, 4, ... below nt: each thread reads its own value and, when
    # EXERCISE scan_kogge_stone: todo t >= stride, adds the one `stride` places to its left (_add: modulo 2^32), from
    # EXERCISE scan_kogge_stone: todo one buffer, and writes the sum into the other (so no thread overwrites a value a
    # EXERCISE scan_kogge_stone: todo neighbour has yet to read); the buffers swap roles, and every thread waits
    # EXERCISE scan_kogge_stone: todo (`yield`) before the next step reads. Leave the tile's inclusive sum up to t in
    # EXERCISE scan_kogge_stone: todo `inclusive` (the tile total below reads it), and when i < n store out[i] =
    # EXERCISE scan_kogge_stone: todo inclusive, or, when `exclusive` is set, the sum of the elements before i alone
    # EXERCISE scan_kogge_stone: todo (modulo 2^32: out holds uint32).
    mine = int(x[i]) if i < n else 0
    cur = 0
    buf[cur, t] = mine
    yield
    stride = 1
    while stride < nt:
        v = int(buf[cur, t])
        if t >= stride:
            v = _add(v, buf[cur, t - stride])
            # EXERCISE scan_kogge_stone: lab
            _note(trace, stride.bit_length() - 1, i - stride, i)
        buf[1 - cur, t] = v  # the other buffer: a neighbour may still read this step's buf[cur]
        cur = 1 - cur
        yield
        stride *= 2
    inclusive = int(buf[cur, t])
    if i < n:
        out[i] = (inclusive - mine) & MASK if exclusive else inclusive
    # EXERCISE scan_kogge_stone: stub inclusive = 0
    # EXERCISE scan_kogge_stone: end
    if block_sums is not None and t == nt - 1:
        block_sums[ctx.blockIdx.x] = inclusive
# EXERCISE scan_kogge_stone: end copy


# EXERCISE scan_brent_kung: copy
def brent_kung_k(ctx, x, out, n, exclusive, block_sums, trace=None):
    """02_brent_kung's kernel: two elements per thread, an up-sweep then a down-sweep in the shared `s`
    (a tile of 2 * blockDim); a bare `yield` is __syncthreads(). `trace` is the picture's (a list of the
    additions); the exercise's check passes None."""
    t, nt = ctx.threadIdx.x, ctx.blockDim.x
    tile = 2 * nt
    base = ctx.blockIdx.x * tile
    s = ctx.shared.s
    i0, i1 = base + t, base + t + nt
    # EXERCISE scan_brent_kung: begin load mine0 = x[i0] and mine1 = x[i1] as ints (0 past the end of x: the last tile
    # EXERCISE scan_brent_kung: todo is ragged) into s[t] and s[t + nt]. Up-sweep, for stride = 1, 2, 4, ... below
    # EXERCISE scan_brent_kung: todo `tile`: wait for the level before (a bare `yield`), then thread t adds
    # EXERCISE scan_brent_kung: todo s[idx - stride] into s[idx] (_add: modulo 2^32), idx = (t + 1) * 2 * stride - 1,
    # EXERCISE scan_brent_kung: todo when idx < tile. Down-sweep, for stride = tile // 4, tile // 8, ..., 1: wait, then
    # EXERCISE scan_brent_kung: todo add s[idx] (a finished prefix) into s[idx + stride], same idx, when idx + stride <
    # EXERCISE scan_brent_kung: todo tile. Wait once more, then store out[i0] and out[i1] (each only inside x): s[t] and
    # EXERCISE scan_brent_kung: todo s[t + nt], or, when `exclusive` is set, the sum of the elements before each alone
    # EXERCISE scan_brent_kung: todo (modulo 2^32: out holds uint32). s[tile - 1] must end as the tile's total (read
    # EXERCISE scan_brent_kung: todo below).
    mine0 = int(x[i0]) if i0 < n else 0
    mine1 = int(x[i1]) if i1 < n else 0
    s[t], s[t + nt] = mine0, mine1
    stride = 1
    while stride < tile:
        yield
        idx = (t + 1) * 2 * stride - 1
        if idx < tile:
            s[idx] = _add(s[idx], s[idx - stride])
            # EXERCISE scan_brent_kung: lab
            _note(trace, stride.bit_length() - 1, base + idx - stride, base + idx)
        stride *= 2
    stride = tile // 4
    while stride > 0:
        yield
        idx = (t + 1) * 2 * stride - 1
        if idx + stride < tile:
            s[idx + stride] = _add(s[idx + stride], s[idx])
            # EXERCISE scan_brent_kung: lab
            _note(trace, _down_step(tile, stride), base + idx, base + idx + stride)
        stride //= 2
    yield
    if i0 < n:
        out[i0] = (int(s[t]) - mine0) & MASK if exclusive else int(s[t])
    if i1 < n:
        out[i1] = (int(s[t + nt]) - mine1) & MASK if exclusive else int(s[t + nt])
    # EXERCISE scan_brent_kung: end
    if block_sums is not None and t == 0:
        block_sums[ctx.blockIdx.x] = int(s[tile - 1])
# EXERCISE scan_brent_kung: end copy


def propagate_k(ctx, out, n, scanned_sums, tile):
    """scan_propagate: block b adds the sum of tiles 0..b to tile b + 1."""
    b = ctx.blockIdx.x + 1
    add = int(scanned_sums[b - 1])
    i = b * tile + ctx.threadIdx.x
    while i < min((b + 1) * tile, n):
        out[i] = _add(out[i], add)
        i += ctx.blockDim.x


def twin_hierarchy(kernel, per_thread: int, x, out, n: int, exclusive: bool, threads: int, trace=None) -> None:
    """Scan-then-propagate, as scan.cu's scan_hierarchy: scan each tile keeping its total, scan the
    totals the same way (recursively, in place), then add each tile's offset."""
    tile = threads * per_thread
    if tile < 2:
        raise ValueError(f"a tile of {tile} element never shrinks the totals: use at least 2")
    blocks = -(-n // tile)
    sums = np.full(blocks, 0xA5A5A5A5, dtype=np.uint32) if blocks > 1 else None
    spec = {"buf": ((2, threads), np.uint32)} if per_thread == 1 else {"s": ((tile,), np.uint32)}
    sim.launch(kernel, blocks, threads, x, out, n, exclusive, sums, trace, shared=spec)
    if blocks == 1:
        return
    twin_hierarchy(kernel, per_thread, sums, sums, blocks, False, threads)
    sim.launch(propagate_k, blocks - 1, threads, out, n, sums, tile)


NOT_READY, AGGREGATE, PREFIX = 0, 1, 2  # scan.cu's tile flags


def status_word(flag: int, value: int) -> int:
    """A tile's status as scan.cu packs it: the flag in the high 32 bits, the value in the low 32."""
    return (flag << 32) | (int(value) & MASK)


def look_back(status, tile: int) -> int:
    """The sum of every tile before `tile`, read from their status words: add aggregates walking back
    until a tile with its inclusive prefix (which counts all before it). The CUDA warp reads 32 words a
    round and spins on one not ready; the simulator runs blocks one after another, so a predecessor
    that is not ready here would be a bug, and raises."""
    prefix = 0
    for pred in range(tile - 1, -1, -1):
        w = int(status[pred])
        flag = w >> 32
        if flag == NOT_READY:
            raise sim.SimError(f"tile {tile}: tile {pred} has published nothing")
        prefix = _add(prefix, w & MASK)
        if flag == PREFIX:
            return prefix
    return prefix


def lookback_k(ctx, x, out, n, exclusive, status, counter, items):
    """03_decoupled_lookback's kernel for one block: a tile number from the counter, a coalesced load
    through shared memory, each thread's `items` consecutive elements summed, the block's aggregate
    published, the look-back, then the scanned tile written back coalesced. On the GPU the sum over the
    threads before this one is a warp shuffle scan; here it is read from shared memory."""
    t, nt = ctx.threadIdx.x, ctx.blockDim.x
    sh = ctx.shared
    if t == 0:
        sh.tile[0] = counter[0]  # atomicAdd(counter, 1)
        counter[0] += 1
    yield
    tile = int(sh.tile[0])
    base = tile * nt * items
    for j in range(items):
        k = j * nt + t
        sh.items[k] = x[base + k] if base + k < n else 0
    yield
    v = [int(sh.items[t * items + j]) for j in range(items)]
    sh.totals[t] = sum(v) & MASK
    yield
    before = sum(int(a) for a in sh.totals[:t]) & MASK
    aggregate = sum(int(a) for a in sh.totals) & MASK
    if t == 0:
        prefix = 0
        if tile == 0:
            status[0] = status_word(PREFIX, aggregate)
        else:
            status[tile] = status_word(AGGREGATE, aggregate)
            prefix = look_back(status, tile)
            status[tile] = status_word(PREFIX, _add(prefix, aggregate))
        sh.prefix[0] = prefix
    yield
    run = _add(sh.prefix[0], before)
    for j in range(items):
        prev = run
        run = _add(run, v[j])
        sh.items[t * items + j] = prev if exclusive else run
    yield
    for j in range(items):
        k = j * nt + t
        if base + k < n:
            out[base + k] = sh.items[k]


def twin_lookback(x, out, n: int, exclusive: bool, threads: int, items: int) -> np.ndarray:
    """One launch over all tiles, status words and counter zeroed first (as scan.cu's memset); returns
    the status words (every tile's inclusive prefix, flagged PREFIX)."""
    tiles = -(-n // (threads * items))
    status = np.zeros(tiles, dtype=np.uint64)
    counter = np.zeros(1, dtype=np.int64)
    spec = {"items": ((threads * items,), np.uint32), "totals": ((threads,), np.uint32),
            "tile": ((1,), np.int64), "prefix": ((1,), np.uint32)}
    sim.launch(lookback_k, tiles, threads, x, out, n, exclusive, status, counter, items, shared=spec)
    return status


def twin_kogge_stone(x, exclusive: bool = False, threads: int = 8) -> np.ndarray:
    return _twin_run(x, exclusive, lambda xu, out, n: twin_hierarchy(kogge_stone_k, 1, xu, out, n, exclusive, threads))


def twin_brent_kung(x, exclusive: bool = False, threads: int = 8) -> np.ndarray:
    return _twin_run(x, exclusive, lambda xu, out, n: twin_hierarchy(brent_kung_k, 2, xu, out, n, exclusive, threads))


def twin_decoupled_lookback(x, exclusive: bool = False, threads: int = 8, items: int = 4) -> np.ndarray:
    return _twin_run(x, exclusive, lambda xu, out, n: twin_lookback(xu, out, n, exclusive, threads, items))


def _twin_run(x, exclusive, body) -> np.ndarray:
    x = check_input(np.asarray(x))
    check_exclusive(exclusive)
    out = np.full(x.shape, 0xA5A5A5A5, dtype=np.uint32)
    if x.size:
        body(x.view(np.uint32), out, x.size)
    return out.view(x.dtype)


TWINS = (twin_kogge_stone, twin_brent_kung, twin_decoupled_lookback)  # in the library table's order


def twin(x, variant: str | None = None, exclusive: bool = False, threads: int = 8) -> np.ndarray:
    """Run a variant's Python twin on the simulator (small blocks, so that even short arrays span
    several tiles and levels)."""
    variant = check_variant(variant)
    return TWINS[library.table_index(PROGRAM, "variant", variant)](x, exclusive, threads)


# --- without a GPU --------------------------------------------------------------------------------

CPU_MAX_N = 5000  # the simulator runs one Python generator per thread: small arrays only


def on_cpu(args: list[str]) -> tuple[pd.DataFrame, str]:
    """`invoke run scan [-- N]` without a GPU: every variant's twin, inclusive and exclusive, on random
    uint32 of ragged sizes (or N), each checked exactly against numpy."""
    import pandas as pd

    args = [str(a) for a in args]
    if len(args) > 1 or (args and not args[0].isdigit()):
        raise ValueError(f"on the CPU, scan takes one argument N (elements) or nothing, got: {' '.join(args)}")
    sizes = [int(args[0])] if args else [1, 31, 97, 1000]
    if not all(1 <= n <= CPU_MAX_N for n in sizes):
        raise ValueError(f"on the CPU (the simulator) N must be 1..{CPU_MAX_N}, got {sizes[0]}")
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        x = rng.integers(0, 2**32, n, dtype=np.uint32)
        for variant, fn in zip(library.read_table(PROGRAM), TWINS):
            for exclusive in (False, True):
                bad, first = mismatches(fn(x, exclusive), reference(x, exclusive))
                rows.append({"variant": variant, "n": n, "scan": "exclusive" if exclusive else "inclusive",
                             "mismatches": bad, "first_bad": first, "check": "pass" if bad == 0 else "fail"})
    return pd.DataFrame(rows), ("the kernels' Python twins on harness.base.sim (blocks of 8 threads, so the "
                                "tiles, levels and look-back all run), exact against numpy")


# --- the picture: which element adds into which, step by step (`invoke viz scan`) ----------------------

PICTURE_MAX_N = 64


def viz_data(n: int = 16, progress=None) -> dict:
    """The additions of one tile of n elements (2..64) in Kogge-Stone and Brent-Kung, traced from the
    twins on the simulator, for analysis/scan.py's `plot`."""
    import pandas as pd

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 2 <= n <= PICTURE_MAX_N:
        raise ValueError(f"n must be an integer in 2..{PICTURE_MAX_N} (one tile drawn), got {n!r}")
    n = int(n)
    width = 1 << (n - 1).bit_length()  # one tile: the block is the next power of two
    x = np.arange(1, n + 1, dtype=np.uint32)
    traces = {}
    for name, kernel, per_thread in (("kogge_stone", kogge_stone_k, 1), ("brent_kung", brent_kung_k, 2)):
        trace: list = []
        out = np.zeros(n, dtype=np.uint32)
        twin_hierarchy(kernel, per_thread, x, out, n, False, width // per_thread, trace)
        if mismatches(out, reference(x))[0]:
            raise AssertionError(f"{name}'s twin disagrees with numpy at n={n}")
        df = pd.DataFrame(trace, columns=["step", "src", "dst"])
        traces[name] = df[df["dst"] < n].reset_index(drop=True)  # additions into the padding change nothing
        if progress is not None:
            progress(len(traces), 2)
    return {"n": n, "x": x, "out": reference(x), "traces": traces,
            "computed_on": "traced from the kernels' Python twins on the simulator (no GPU needed)"}


# --- the executable ---------------------------------------------------------------------------------

def run(*args, timeout: float = 300) -> pd.DataFrame:
    """Run build/bin/scan and parse its result lines (a failed check raises ProgramError)."""
    return _results.run(PROGRAM, *args, timeout=timeout)


def parse_output(text: str) -> pd.DataFrame:
    return _results.parse_output(text, PROGRAM)


# --- the bench, the profiler and the sanitizer --------------------------------------------------------

def _prepared(entry: str, head: tuple, n: int, exclusive: bool, work_bytes: int):
    """x (0x01010101 each: the work does not depend on the values), out and the workspace on the device,
    allocated once, and `entry(*head, x, out, n, exclusive, work, work_bytes, stream)` marshalled once."""
    from harness.calling import cudart
    from harness.measuring import bench

    bufs = []

    def close():
        for b in bufs:
            b.close()

    try:
        for nbytes in (4 * n, 4 * n, max(work_bytes, 8)):
            bufs.append(cudart.DeviceBuffer(nbytes))
        x, out, work = bufs
        x.fill_bytes(0x01)
        launch = lib().prepare(entry, *head, x, out, n, int(bool(exclusive)), work, work_bytes, library.STREAM)
    except BaseException:
        close()
        raise
    return bench.Prepared(launch, close)


def variant_setup(variant: str, n: int, exclusive: bool = False):
    """The timing child's target: one variant's scan (the look-back's memset of its status words is part
    of every timed call, as it is of every call)."""
    variant, n = check_variant(variant), check_n(n)
    return _prepared("scan_u32_dev", (variant,), n, exclusive, workspace_bytes(variant, n))


def cub_setup(n: int, exclusive: bool = False):
    """The ceiling's target: cub::DeviceScan::InclusiveSum (ExclusiveSum), its temporary storage allocated
    here, once, as CUB's users do."""
    n = check_n(n)
    return _prepared("scan_cub_dev", (), n, exclusive, cub_workspace_bytes(n, bool(exclusive)))


def cub_ceiling_name(label: str) -> str:
    return f"scan_cub@{label}"


def _cub_ceiling(label: str, n: int):
    def ceiling(quick: bool = False):
        """CUB's InclusiveSum at n, timed beside the cases: 8 bytes an element."""
        from harness.measuring import bench

        return bench.TimedCeiling(cub_ceiling_name(label), "GB/s", 8.0 * n, f"harness.programs.{PROGRAM}:cub_setup",
                                  {"n": n}, f"cub::DeviceScan::InclusiveSum uint32 {label}",
                                  same_as=(PROGRAM, "cub", label))
    return ceiling


def ceilings() -> dict:
    """CUB's scan at each bench size (the memcpy ceiling is the bench's own)."""
    return {cub_ceiling_name(label): _cub_ceiling(label, n) for label, n in ((QUICK_LABEL, QUICK),
                                                                             (HEADLINE_LABEL, HEADLINE))}


def bench_cases(quick: bool = False) -> list:
    """Every variant against CUB's InclusiveSum at the same size, timed in the same run: GB/s counting 8
    bytes an element (x read once, out written once: the least any scan moves). The best rung is held to
    0.9 of CUB at 2^28 and also shown against cudaMemcpy; CUB itself against cudaMemcpy says how close
    the ceiling is to the bandwidth. --quick: 2^24 only."""
    from harness.measuring import bench

    best = best_variant()
    sizes = [(QUICK_LABEL, QUICK, True)] + ([] if quick else [(HEADLINE_LABEL, HEADLINE, False)])
    setup = f"harness.programs.{PROGRAM}:variant_setup"
    cases = []
    for label, n, is_quick in sizes:
        for v in library.read_table(PROGRAM):
            target = TARGET if v == best and label == HEADLINE_LABEL else None
            note = "uint32 inclusive; fraction of CUB's InclusiveSum" + (f" (goal: >= {TARGET})" if target else "")
            cases.append(bench.BenchCase(PROGRAM, v, label, setup, "GB/s", 8.0 * n, cub_ceiling_name(label),
                                         target=target, quick=is_quick, bytes=8.0 * n, flops=float(n), note=note,
                                         kwargs={"variant": v, "n": n}))
        cases.append(bench.BenchCase(PROGRAM, f"{best}-vs-memcpy", label, setup, "GB/s", 8.0 * n, "memcpy",
                                     quick=is_quick, bytes=8.0 * n, flops=float(n),
                                     note="fraction of cudaMemcpy's bandwidth", kwargs={"variant": best, "n": n}))
        cases.append(bench.BenchCase(PROGRAM, "cub", label, f"harness.programs.{PROGRAM}:cub_setup", "GB/s", 8.0 * n,
                                     "memcpy", quick=is_quick, bytes=8.0 * n, flops=float(n),
                                     note="CUB's InclusiveSum as a fraction of cudaMemcpy's bandwidth",
                                     kwargs={"n": n}))
    return cases


def profile_args(variant: str | None = None) -> list[str]:
    return ["--variant", check_variant(variant), "--reps", "1", "1000003"]


def sanitize_args() -> dict[str, list[str]]:
    """Small ragged runs of every variant, inclusive and exclusive: 4099 elements span several tiles of
    each (two levels of totals for 01 and 02, two tiles for 03); 03 also at 200003 (49 tiles, so the
    look-back walks more than one round of 32)."""
    runs = {}
    for v in library.read_table(PROGRAM):
        runs[f"{v} ragged"] = ["--variant", v, "--reps", "1", "4099"]
        runs[f"{v} exclusive"] = ["--variant", v, "--reps", "1", "--exclusive", "4099"]
    runs[f"{best_variant()} long look-back"] = ["--variant", best_variant(), "--reps", "1", "200003"]
    return runs


# --- the exercises this program offers (their problems: scan_exercises.py) ----------------------------------

EXERCISES = (
    Exercise(
        "scan_kogge_stone", origin="PMPP chapter 11 (Kogge-Stone parallel scan), GPU MODE lecture on scan",
        writes="one tile's inclusive and exclusive scan in shared memory: the load (0 past the end), the "
               "double-buffered stride-doubling steps with their barriers, the guarded store; each block scans its own "
               "tile (the check runs no pass across tiles)",
        tracks=("python", "cuda"), problem=_ex.KoggeStone(), py_entry="kogge_stone_k",
        cu_source="cuda/scan/scan.cu", cu_kernels=("scan_01_kogge_stone",), glue="exercise_scan_kogge_stone.cu",
        hints=("One element per thread. After step k (stride 2^k) thread t holds the sum of the 2^(k+1) elements "
               "ending at t (fewer near the tile's start): log2(blockDim) steps finish the tile.",
               "Within a step every thread reads a neighbour's value from the step before: read from one buffer and "
               "write the other, then swap; a barrier (Python: a bare `yield`) after the loads and at the end of each "
               "step. Every thread takes part in every step, even one past the end of x (it loaded 0).",
               "for stride in 1, 2, 4, ... < blockDim: v = buf[in][t]; if t >= stride: v += buf[in][t - stride]; "
               "buf[1 - in][t] = v; in = 1 - in; barrier. Then inclusive = buf[in][t], and out[i] = inclusive, or "
               "inclusive - x[i] for an exclusive scan, only where i < n."),
        block="1024 threads a block, one element each (Python: 4 to 32)",
    ),
    Exercise(
        "scan_brent_kung", origin="PMPP chapter 11 (Brent-Kung work-efficient scan), GPU MODE lecture on scan",
        writes="one tile's work-efficient scan in shared memory: two elements a thread, the up-sweep and the "
               "down-sweep with their barriers, the ragged tile, inclusive or exclusive; each block scans its own tile "
               "(the check runs no pass across tiles)",
        tracks=("python", "cuda"), problem=_ex.BrentKung(), py_entry="brent_kung_k",
        cu_source="cuda/scan/scan.cu", cu_kernels=("scan_02_brent_kung",), glue="exercise_scan_brent_kung.cu",
        hints=("A tile of 2 * blockDim elements, thread t loading elements t and t + blockDim (coalesced). The "
               "up-sweep builds a tree of partial sums in place; the down-sweep hands each finished prefix on to the "
               "middle of the span to its right.",
               "Up-sweep: at stride 1, 2, 4, ... thread t adds s[idx - stride] into s[idx], idx = (t + 1) * 2 * stride "
               "- 1 (only idx < tile). Down-sweep: at stride tile / 4, ..., 1, s[idx + stride] += s[idx] (only idx + "
               "stride < tile). Each level reads the one before: a barrier before each.",
               "Load with 0 past the end; loop up-sweep {barrier; add}; loop down-sweep {barrier; add}; barrier; store "
               "s[t] at i0 and s[t + blockDim] at i1, each only inside x, minus the element itself (mine0, mine1) for "
               "an exclusive scan."),
        block="1024 threads a block, two elements each: tiles of 2048 (Python: 2 to 16 threads, tiles of 4 to 32)",
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name=PROGRAM,
    summary="prefix sums: Kogge-Stone, Brent-Kung, then one pass with decoupled look-back",
    follows="PMPP ch. 11",
    order=66,
    readme_picture="[steps](cuda/scan/scan_steps.png)",
    variants=True,
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    bench_cases=bench_cases,
    ceilings=ceilings,
    run=run,
    parse_output=parse_output,
    reference=reference,
    on_cpu=on_cpu,
    picture=Picture("scan", viz_data, options=("n", "progress")),
    tour=Tour("which element adds into which, step by step, in Kogge-Stone and Brent-Kung",
              drawn=("plots/scan_steps.png",), committed=("cuda/scan/scan_steps.png",)),
    exercises=EXERCISES,
)
