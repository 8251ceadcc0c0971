"""histogram: counts of uint8 values into 256 uint32 bins (PMPP chapter 9), and CUB's DeviceHistogram as
the ceiling.

Public API (numpy in, numpy out; arguments are checked before anything is launched):
    histogram(x, variant="03_coarsened", out=None)   uint8 1-D in, 256 uint32 counts out (exact)
    histogram_cub(x, out=None)                       the same through cub::DeviceHistogram::HistogramEven
    histogram_dev(variant, d_in, n, d_bins, ...)     device pointers, enqueued on a stream (bench, profilers)
    reference(x)                                     numpy's answer (np.bincount)
    uniform_bytes(n, seed), skewed_bytes(n, seed)    the two inputs: random bytes, and 90% one value
Python twins on the lectures' simulator (harness.base.sim): global_atomics_k, shared_private_k and
coarsened_k, run by `twin(x, variant)`. `contention(x)` counts, without a GPU, what makes the variants
differ: global atomics per byte and how many lanes of a warp instruction collide.

Variants (the one table is in cuda/histogram/histogram.cu; `library.read_table("histogram")` reads it):
  01_global_atomics   one thread and one global atomicAdd per byte
  02_shared_private   one thread per byte, bins privatised per block in shared memory
  03_coarsened        a grid-stride loop over 16-byte loads; 32 interleaved copies of the bins, one per lane
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from harness.base import sim
from harness.calling import library
from harness.calling import results as _results
from harness.programs import histogram_exercises as _ex
from harness.programs.record import Exercise, Picture, Program, Tour

PROGRAM = "histogram"

# VARIANTS is the library's one table (cuda/histogram/histogram.cu), read when first asked for.
__getattr__ = library.table_attributes(__name__, PROGRAM)

# EXERCISE histogram_private: copy
BINS = 256
# EXERCISE histogram_private: end copy
LANES = 32  # threads in a warp, and banks in shared memory
MAX_N = 2**31 - 1  # the entry points' limit (CUB's int offset); no uint32 bin can overflow below it
DEFAULT_VARIANT = "03_coarsened"
DEFAULT_THREADS = 256  # 01 and 02, as histogram.cu launches them
COARSENED_THREADS = 512  # 03
SKEW_FRACTION = 0.9  # skewed input: this share of the bytes hold HOT_VALUE
HOT_VALUE = 0  # a mostly black image
INPUTS = ("uniform", "skewed")


# --- argument checks (before any launch) ------------------------------------------------------------

def check_variant(variant: str) -> str:
    """The variant's name, or ValueError naming those in the library's one table."""
    library.table_index(PROGRAM, "variant", variant)
    return variant


def check_n(n) -> int:
    """A byte count the entry points take: an integer in 0..2^31-1."""
    return library.check_int(n, "n", 0, MAX_N, " bytes (2^31-1)")


def _check_launch(blocks, threads) -> None:
    for name, v in (("blocks", blocks), ("threads", threads)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be at least 0 (0: the default), got {v}")
    if threads > 1024:
        raise ValueError(f"threads must be at most 1024, got {threads}")


def _input(x) -> np.ndarray:
    x = library.check_array(x, "x", np.uint8, ndim=1)
    check_n(x.size)
    return x


def _out(out) -> np.ndarray:
    if out is None:
        return np.empty(BINS, dtype=np.uint32)
    out = library.check_array(out, "out", np.uint32, ndim=1, shape=(BINS,))
    if not out.flags.writeable:
        raise ValueError("out must be writeable")
    return out


def check_input_kind(kind: str) -> str:
    if kind not in INPUTS:
        raise ValueError(f"input must be one of {', '.join(INPUTS)}, got {kind!r}")
    return kind


# --- inputs and the numpy reference -------------------------------------------------------------------

def uniform_bytes(n: int, seed: int = 0) -> np.ndarray:
    """n bytes drawn uniformly from 0..255: every bin gets about n/256, few collisions."""
    return np.random.default_rng(seed).integers(0, BINS, check_n(n), dtype=np.uint8)


def skewed_bytes(n: int, seed: int = 0, fraction: float = SKEW_FRACTION, hot: int = HOT_VALUE) -> np.ndarray:
    """n bytes of which about `fraction` hold `hot`, the rest uniform: the contention case."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    if not 0 <= hot < BINS:
        raise ValueError(f"hot must be a byte value 0..255, got {hot}")
    rng = np.random.default_rng(seed)
    x = rng.integers(0, BINS, check_n(n), dtype=np.uint8)
    x[rng.random(n) < fraction] = hot
    return x


def make_input(kind: str, n: int, seed: int = 0) -> np.ndarray:
    return uniform_bytes(n, seed) if check_input_kind(kind) == "uniform" else skewed_bytes(n, seed)


def reference(x: np.ndarray) -> np.ndarray:
    """numpy's counts of each byte value: 256 uint32, exact."""
    x = np.asarray(x)
    if x.dtype != np.uint8:
        raise TypeError(f"reference: expected uint8, got {x.dtype}")
    return np.bincount(x.ravel(), minlength=BINS).astype(np.uint32)


def check_counts(out: np.ndarray, ref: np.ndarray) -> None:
    """The tests' checker: the 256 counts equal exactly, else AssertionError naming the first wrong bin."""
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != (BINS,) or ref.shape != (BINS,):
        raise AssertionError(f"expected {BINS} bins, got shapes {out.shape} and {ref.shape}")
    bad = np.flatnonzero(out.astype(np.int64) != ref.astype(np.int64))
    if bad.size:
        b = int(bad[0])
        raise AssertionError(f"{bad.size} bin(s) wrong, first bin {b}: got {int(out[b])}, expected {int(ref[b])}")


# --- the library ----------------------------------------------------------------------------------

def lib() -> library.Library:
    return library.load(PROGRAM)


def histogram(x: np.ndarray, variant: str = DEFAULT_VARIANT, out: np.ndarray | None = None) -> np.ndarray:
    """The 256 counts of a 1-D C-contiguous uint8 array, on the GPU with `variant`. Returns out."""
    check_variant(variant)
    x = _input(x)
    out = _out(out)
    lib().histogram_u8(variant, x, x.size, out)
    return out


def histogram_cub(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The same counts through CUB's DeviceHistogram::HistogramEven (the bench's ceiling)."""
    x = _input(x)
    out = _out(out)
    lib().histogram_cub_u8(x, x.size, out)
    return out


def histogram_dev(variant: str, d_in, n: int, d_bins, stream=None, blocks: int = 0, threads: int = 0) -> None:
    """Enqueue one histogram on device pointers (DeviceBuffer or cffi pointers) on `stream`; no sync.
    The bins are zeroed first by the entry point. blocks/threads of 0 take the variant's defaults
    (01 and 02 run one thread per byte: blocks must be 0)."""
    check_variant(variant)
    n = check_n(n)
    _check_launch(blocks, threads)
    if blocks and variant != DEFAULT_VARIANT:
        raise ValueError(f"{variant} runs one thread per byte: blocks must be 0, got {blocks}")
    lib().histogram_u8_dev(variant, d_in, n, d_bins, blocks, threads, stream)


def cub_temp_bytes(n: int) -> int:
    """The temporary storage CUB's HistogramEven needs for n bytes (asked once, before the timing loop)."""
    n = check_n(n)
    out = np.zeros(1, dtype=np.uint64)
    lib().histogram_cub_temp_bytes(n, out)
    return int(out[0])


# --- Python twins (harness.base.sim) -------------------------------------------------------------------
# One thread at a time runs on the simulator, so `+=` on a counter is already the whole read-modify-write
# an atomicAdd makes of it on the GPU; what the twins show is who adds to which counter, and when.

# EXERCISE histogram_atomic: copy
def global_atomics_k(ctx, x, n, bins):
    """01_global_atomics: one thread per byte, one atomicAdd on the global bins."""
    # EXERCISE histogram_atomic: begin i = this thread's global index (ctx.blockIdx.x, ctx.blockDim.x,
    # EXERCISE histogram_atomic: todo ctx.threadIdx.x); only when i < n (the last block is partial), add 1 to the bin of
    # EXERCISE histogram_atomic: todo the byte x[i]. (The simulator runs one thread at a time, so `+=` is already whole,
    # EXERCISE histogram_atomic: todo as atomicAdd makes it on the GPU.)
    i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
    if i < n:
        bins[x[i]] += 1  # atomicAdd(&bins[in[i]], 1)
    # EXERCISE histogram_atomic: end
# EXERCISE histogram_atomic: end copy


# EXERCISE histogram_private: copy
def shared_private_k(ctx, x, n, bins):
    """02_shared_private: the block's own bins in shared memory, zeroed, counted, merged once each.
    A generator: each bare `yield` is a __syncthreads()."""
    local = ctx.shared.local  # the simulator fills shared memory with a marker: zeroing it matters
    t = ctx.threadIdx.x
    # EXERCISE histogram_private: begin set the block's BINS counters in `local` to 0 (the simulator fills shared
    # EXERCISE histogram_private: todo memory with 2^32-1), in a loop strided by ctx.blockDim.x (the block may have fewer
    # EXERCISE histogram_private: todo threads than bins); then wait until every counter is 0 (a bare `yield`).
    for b in range(t, BINS, ctx.blockDim.x):
        local[b] = 0
    yield  # __syncthreads(): every counter zeroed before any thread adds to one
    # EXERCISE histogram_private: end
    # EXERCISE histogram_private: begin i = this thread's global index; only when i < n, add 1 to local's counter of the
    # EXERCISE histogram_private: todo byte x[i] (an atomicAdd on shared memory on the GPU).
    i = ctx.blockIdx.x * ctx.blockDim.x + t
    if i < n:
        local[x[i]] += 1  # atomicAdd on shared memory
    # EXERCISE histogram_private: end
    # EXERCISE histogram_private: begin wait until every byte of the block is counted; then add each non-zero counter
    # EXERCISE histogram_private: todo local[b] to bins[b] (one atomicAdd per counter on the GPU: every block adds to the
    # EXERCISE histogram_private: todo same bins), over the same loop strided by ctx.blockDim.x.
    yield  # every byte of the block counted before the counters are read
    for b in range(t, BINS, ctx.blockDim.x):
        if local[b] != 0:
            bins[b] += local[b]  # one global atomicAdd per non-zero bin
    # EXERCISE histogram_private: end
# EXERCISE histogram_private: end copy


def coarsened_k(ctx, x, n, bins, head):
    """03_coarsened: a grid-stride loop over 16-byte chunks from x[head:], each lane counting into its
    own interleaved copy of the bins (copies[bin * 32 + lane]); the head and tail bytes one a thread,
    grid-stride."""
    copies = ctx.shared.copies
    t = ctx.threadIdx.x
    for i in range(t, BINS * LANES, ctx.blockDim.x):
        copies[i] = 0
    yield  # all copies zeroed before any thread counts
    lane = t % LANES
    chunks = (n - head) // 16
    tid = ctx.blockIdx.x * ctx.blockDim.x + t
    stride = ctx.gridDim.x * ctx.blockDim.x
    c = tid
    while c < chunks:
        for byte in x[head + 16 * c: head + 16 * c + 16]:  # the 16 bytes of one uint4 load
            copies[int(byte) * LANES + lane] += 1
        c += stride
    tail = head + chunks * 16
    for k in range(tid, head, stride):  # the head and the tail grid-stride: any grid counts them all
        copies[int(x[k]) * LANES + lane] += 1
    for k in range(tail + tid, n, stride):
        copies[int(x[k]) * LANES + lane] += 1
    yield  # every byte of the block counted before the copies are summed
    for b in range(t, BINS, ctx.blockDim.x):
        s = sum(int(copies[b * LANES + (j + b) % LANES]) for j in range(LANES))
        if s:
            bins[b] += s


def coarsened_head(misalign: int, n: int) -> int:
    """The bytes 03 counts one by one before the first 16-byte boundary, when the input starts
    `misalign` bytes past one (the CUDA kernel computes it from the pointer)."""
    if not 0 <= misalign <= 15:
        raise ValueError(f"misalign must be 0..15 bytes, got {misalign}")
    return min((16 - misalign) % 16, n)


def twin(x: np.ndarray, variant: str = DEFAULT_VARIANT, threads: int = 32, blocks: int = 2,
         misalign: int = 0, on_block=None) -> np.ndarray:
    """Run a variant's Python twin on the simulator: 256 uint32 counts. 01 and 02 launch one thread per
    byte (cdiv(n, threads) blocks); 03 launches `blocks` blocks and `misalign` (0..15) plays the input
    pointer's offset from a 16-byte boundary."""
    check_variant(variant)
    x = np.asarray(x)
    if x.dtype != np.uint8 or x.ndim != 1:
        raise TypeError(f"twin: expected a 1-D uint8 array, got {x.dtype} with shape {x.shape}")
    _check_launch(blocks, threads)
    if threads < 1 or blocks < 1:
        raise ValueError("the twin needs at least one block of one thread")
    n = x.size
    bins = np.zeros(BINS, dtype=np.uint32)
    if n == 0:
        return bins
    which = library.table_index(PROGRAM, "variant", variant)  # 0, 1, 2: the table's order, 01 to 03
    if which == 0:
        sim.launch(global_atomics_k, -(-n // threads), threads, x, n, bins, on_block=on_block)
    elif which == 1:
        sim.launch(shared_private_k, -(-n // threads), threads, x, n, bins,
                   shared={"local": ((BINS,), np.uint32)}, on_block=on_block)
    else:
        sim.launch(coarsened_k, blocks, threads, x, n, bins, coarsened_head(misalign, n),
                   shared={"copies": ((BINS * LANES,), np.uint32)}, on_block=on_block)
    return bins


# --- contention, counted on the CPU ---------------------------------------------------------------

def _busiest(keys: np.ndarray) -> np.ndarray:
    """For each row (one warp instruction's 32 lanes), how many lanes share its most common key."""
    s = np.sort(keys, axis=1)
    best = np.ones(len(s), dtype=np.int64)
    run = np.ones(len(s), dtype=np.int64)
    for j in range(1, s.shape[1]):
        run = np.where(s[:, j] == s[:, j - 1], run + 1, 1)
        best = np.maximum(best, run)
    return best


def _nonzero_bins_per_group(x: np.ndarray, group: np.ndarray) -> int:
    """The sum over groups (blocks) of the bins each group's bytes touch: its merge's global atomics."""
    return int(np.unique(group.astype(np.int64) * BINS + x.astype(np.int64)).size)


def contention(x: np.ndarray, sms: int = 132, coarsened_blocks_per_sm: int = 4) -> pd.DataFrame:
    """What each variant asks of the atomics for the bytes x (a multiple of 512 bytes long), counted on
    the CPU from the kernels' index arithmetic:

    global_atomics        atomicAdds that reach the L2 (01: one per byte; 02 and 03: one per non-zero
                          bin per block, 03 on a grid of `sms` x `coarsened_blocks_per_sm` blocks)
    per_byte              global_atomics / n
    lanes_serialised      the mean, over warp instructions, of the lanes that wait on each other in the
                          busiest place: 01 lanes on one global counter; 02 lanes on one shared-memory
                          bank (one copy: bank = bin % 32); 03 the same with bank = lane (always 1)
    """
    x = np.asarray(x, dtype=np.uint8)
    n = x.size
    if n == 0 or n % (16 * LANES) != 0:
        raise ValueError(f"contention: n must be a positive multiple of {16 * LANES}, got {n}")
    warps = x.reshape(-1, LANES)  # 01 and 02: lane l of a warp holds byte 32w + l
    same_counter = _busiest(warps)
    same_bank_one_copy = _busiest(warps % LANES)
    # 03: in one instruction lane l counts byte k of its chunk; its address is bin * 32 + l.
    chunks = x.reshape(-1, 16)
    k_rows = chunks[: (len(chunks) // LANES) * LANES].reshape(-1, LANES, 16).transpose(0, 2, 1).reshape(-1, LANES)
    lane_banks = (k_rows.astype(np.int64) * LANES + np.arange(LANES)) % LANES
    per_lane = _busiest(lane_banks)
    idx = np.arange(n, dtype=np.int64)
    g03 = min(sms * coarsened_blocks_per_sm, -(-(n // 16) // COARSENED_THREADS))
    block03 = ((idx // 16) % (g03 * COARSENED_THREADS)) // COARSENED_THREADS
    rows = [(n, same_counter), (_nonzero_bins_per_group(x, idx // DEFAULT_THREADS), same_bank_one_copy),
            (_nonzero_bins_per_group(x, block03), per_lane)]  # in the table's order: 01, 02, 03
    return pd.DataFrame([{"variant": v, "n": n, "global_atomics": g, "per_byte": g / n,
                          "lanes_serialised": float(np.mean(depth))}
                         for v, (g, depth) in zip(library.read_table(PROGRAM), rows, strict=True)])


def viz_data(n: int = 1 << 20) -> dict:
    """`invoke viz histogram`: the counts of both inputs and their contention table, all on the CPU."""
    n = check_n(n)
    if n < 16 * LANES:
        raise ValueError(f"n must be at least {16 * LANES} for the contention table, got {n}")
    n -= n % (16 * LANES)
    frames, counts = [], {}
    for kind in INPUTS:
        x = make_input(kind, n, seed=1)
        counts[kind] = reference(x)
        frames.append(contention(x).assign(input=kind))
    return {"n": n, "counts": counts, "contention": pd.concat(frames, ignore_index=True),
            "computed_on": "computed on the CPU from numpy's counts and the kernels' index arithmetic"}


# --- without a GPU: `invoke run histogram` ------------------------------------------------------------

CPU_MAX_N = 20000  # the simulator runs one Python call per thread


def on_cpu(args: list[str]) -> tuple[pd.DataFrame, str]:
    """`invoke run histogram [-- N]` without a GPU: each variant's Python twin on the simulator, on the
    uniform and the skewed input of N bytes (default 4099: ragged against every block and chunk) with the
    input starting 3 bytes past a 16-byte boundary for 03, checked bin by bin against numpy."""
    args = [str(a) for a in args]
    if len(args) > 1 or (args and not args[0].isdigit()):
        raise ValueError(f"on the CPU, histogram takes one argument N (bytes), got: {' '.join(args)}")
    n = int(args[0]) if args else 4099
    if not 1 <= n <= CPU_MAX_N:
        raise ValueError(f"on the CPU (the simulator) N must be 1..{CPU_MAX_N}, got {n}")
    rows = []
    for kind in INPUTS:
        x = make_input(kind, n, seed=0)
        ref = reference(x)
        for v in library.read_table(PROGRAM):
            got = twin(x, v, threads=64, blocks=3, misalign=3)
            wrong = int(np.count_nonzero(got != ref))
            rows.append({"variant": v, "input": kind, "n": n, "hot_bin_count": int(got[HOT_VALUE]),
                         "wrong_bins": wrong, "check": "pass" if wrong == 0 else "fail"})
    return pd.DataFrame(rows), "the kernels' Python twins on the simulator (harness.base.sim) against numpy's bincount"


def run(*args, timeout: float = 300) -> pd.DataFrame:
    """Run build/bin/histogram and parse its result lines (a failed check raises ProgramError)."""
    return _results.run(PROGRAM, *args, timeout=timeout)


def parse_output(text: str) -> pd.DataFrame:
    return _results.parse_output(text, PROGRAM)


# --- the bench -----------------------------------------------------------------------------------------

HEADLINE = ("2^28", 1 << 28)
QUICK = ("2^24", 1 << 24)
TARGET = 0.9  # 03_coarsened against CUB at the headline size, uniform input


@functools.lru_cache(maxsize=2)
def _host_input(kind: str, n: int) -> np.ndarray:
    # Drawn once per timing child and size: 2^28 random bytes take a second, and every round reuses them.
    return make_input(kind, n, seed=0)


def _device_input(kind: str, n: int):
    from harness.calling import cudart

    d_in = cudart.DeviceBuffer.from_array(_host_input(check_input_kind(kind), check_n(n)))
    d_bins = cudart.DeviceBuffer(4 * BINS)
    return d_in, d_bins


def bench_setup(variant: str, kind: str, n: int):
    """The timing child's target: n bytes of `kind` on the device, the launch of `variant` marshalled once."""
    from harness.measuring import bench

    check_variant(variant)
    d_in, d_bins = _device_input(kind, n)

    def close():
        d_in.close()
        d_bins.close()

    try:
        launch = lib().prepare("histogram_u8_dev", variant, d_in, n, d_bins, 0, 0, library.STREAM)
    except BaseException:
        close()
        raise
    return bench.Prepared(launch, close)


def cub_setup(kind: str, n: int):
    """The ceiling's target: CUB's HistogramEven on the same bytes, its temporary storage allocated here,
    once, so the timed call is the histogram alone."""
    from harness.calling import cudart
    from harness.measuring import bench

    d_in, d_bins = _device_input(kind, n)
    temp_bytes = cub_temp_bytes(n)
    d_temp = cudart.DeviceBuffer(max(temp_bytes, 1))

    def close():
        for b in (d_in, d_bins, d_temp):
            b.close()

    try:
        launch = lib().prepare("histogram_cub_u8_dev", d_in, n, d_bins, d_temp, temp_bytes, library.STREAM)
    except BaseException:
        close()
        raise
    return bench.Prepared(launch, close)


def cub_ceiling_name(kind: str, label: str) -> str:
    return f"cub@{kind}-{label}"


def _cub_ceiling(kind: str, label: str, n: int):
    def ceiling(quick: bool = False):
        """CUB's DeviceHistogram::HistogramEven on the same input and size, timed beside the cases."""
        from harness.measuring import bench

        return bench.TimedCeiling(cub_ceiling_name(kind, label), "GB/s", float(n),
                                  f"harness.programs.{PROGRAM}:cub_setup", {"kind": kind, "n": n},
                                  f"CUB DeviceHistogram::HistogramEven, 256 bins, {label} {kind} bytes",
                                  same_as=(PROGRAM, "cub", f"{label} {kind}") if kind == "uniform" else None)
    return ceiling


def ceilings() -> dict:
    """CUB at each bench size and input (each measured only when a case names it); memcpy is built in."""
    return {cub_ceiling_name(kind, label): _cub_ceiling(kind, label, n)
            for label, n in (QUICK, HEADLINE) for kind in INPUTS}


def bench_cases(quick: bool = False) -> list:
    """Every variant on both inputs against CUB on the same input and size, timed in the same run;
    03_coarsened and CUB itself also against cudaMemcpy (uniform input). GB/s = n bytes read / time,
    the 1 KiB of bins being negligible. 2^24 bytes with --quick, and 2^28 (the headline) without.
    03_coarsened's target: 0.9 of CUB at 2^28 on the uniform input. The predictions are in
    bench/results/h200/NOTES-histogram.md."""
    from harness.measuring import bench

    sizes = [(*QUICK, True)] + ([] if quick else [(*HEADLINE, False)])
    cases = []
    for label, n, is_quick in sizes:
        for kind in INPUTS:
            size = f"{label} {kind}"
            for v in library.read_table(PROGRAM):
                held = v == DEFAULT_VARIANT and kind == "uniform" and n == HEADLINE[1]
                cases.append(bench.BenchCase(
                    program=PROGRAM, variant=v, size=size, setup=f"harness.programs.{PROGRAM}:bench_setup",
                    kwargs={"variant": v, "kind": kind, "n": n}, unit="GB/s", amount=float(n),
                    ceiling=cub_ceiling_name(kind, label), target=TARGET if held else None, quick=is_quick,
                    bytes=float(n), note="fraction of CUB's HistogramEven on the same bytes"
                    + (f" (goal: >= {TARGET})" if held else "")))
        size = f"{label} uniform"
        cases.append(bench.BenchCase(
            program=PROGRAM, variant=DEFAULT_VARIANT, size=size, setup=f"harness.programs.{PROGRAM}:bench_setup",
            kwargs={"variant": DEFAULT_VARIANT, "kind": "uniform", "n": n}, unit="GB/s", amount=float(n),
            ceiling="memcpy", quick=is_quick, bytes=float(n),
            note="bytes read against cudaMemcpy's read + written: a read-only stream can pass 1.0"))
        cases.append(bench.BenchCase(
            program=PROGRAM, variant="cub", size=size, setup=f"harness.programs.{PROGRAM}:cub_setup",
            kwargs={"kind": "uniform", "n": n}, unit="GB/s", amount=float(n), ceiling="memcpy", quick=is_quick,
            bytes=float(n), note="CUB's HistogramEven against cudaMemcpy"))
    return cases


# --- hooks for `invoke profile` and `invoke sanitize` ------------------------------------------------

def profile_args(variant: str | None = None) -> list[str]:
    return ["--variant", check_variant(variant or DEFAULT_VARIANT), "--reps", "1", "1000003"]


def sanitize_args() -> dict[str, list[str]]:
    """Small ragged runs of every variant on both inputs: 4099 bytes (a partial block, a 3-byte tail
    after the last 16-byte chunk) and 1 byte."""
    runs = {}
    for v in library.read_table(PROGRAM):
        runs[f"{v} ragged"] = ["--variant", v, "--reps", "1", "4099"]
        runs[f"{v} skewed"] = ["--variant", v, "--reps", "1", "--input", "skewed", "4099"]
        runs[f"{v} one byte"] = ["--variant", v, "--reps", "1", "1"]
    return runs


# --- the exercises this program offers (their problems: histogram_exercises.py) ---------------------

EXERCISES = (
    Exercise(
        "histogram_atomic", origin="PMPP chapter 9 (a basic parallel histogram: atomic operations)",
        writes="the kernel of 01: one thread per byte, the bounds check, one atomicAdd on the global bins",
        tracks=("python", "cuda"), problem=_ex.HistogramAtomic(), py_entry="global_atomics_k",
        cu_source="cuda/histogram/histogram.cu", cu_kernels=("histogram_01_global_atomics",),
        glue="exercise_histogram_atomic.cu",
        hints=("One thread per byte: its index is blockIdx.x * blockDim.x + threadIdx.x (Python: the same from "
               "ctx); the grid is rounded up to whole blocks, so threads with i >= n do nothing.",
               "The bin of a byte is its value: the thread adds 1 to bins[in[i]]. Many threads hold the same value "
               "at once (most of them, in the skewed cases).",
               "CUDA: `if (i < n) atomicAdd(&bins[in[i]], 1u);` -- a plain bins[in[i]]++ reads, adds and writes, "
               "and two threads that overlap keep one add. Python: `if i < n: bins[x[i]] += 1`."),
        block="cdiv(n, threads) blocks of `threads` (the lab: 256)",
    ),
    Exercise(
        "histogram_private", origin="PMPP chapter 9 (privatization: the block's own bins in shared memory)",
        writes="the kernel of 02: zero the block's bins in shared memory, a barrier, count, a barrier, merge each "
        "non-zero bin with one atomicAdd",
        tracks=("python", "cuda"), problem=_ex.HistogramPrivate(), py_entry="shared_private_k",
        cu_source="cuda/histogram/histogram.cu", cu_kernels=("histogram_02_shared_private",),
        glue="exercise_histogram_private.cu",
        hints=("Three phases, with a barrier between each two: zero the block's counters; count each byte into "
               "them; add each counter to the global bins. A barrier (__syncthreads(); in Python a bare `yield`) is "
               "reached by every thread of the block, also those with i >= n.",
               "The block may have fewer (or more) threads than the 256 counters: zero and merge them in a loop "
               "`for (int b = threadIdx.x; b < kBins; b += blockDim.x)` (Python: range(t, BINS, ctx.blockDim.x)).",
               "Count with atomicAdd(&local[in[i]], 1u) when i < n; merge with `if (local[b] != 0) "
               "atomicAdd(&bins[b], local[b]);` -- every block adds to the same global bins, so a plain store "
               "would keep only the last block's counts."),
        block="cdiv(n, threads) blocks of `threads` (the lab: 256); 256 counters of shared memory a block",
    ),
)


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name=PROGRAM,
    summary="atomics and contention: private bins in shared memory, then coarsening",
    follows="PMPP ch. 9",
    order=67,
    readme_picture="[contention](cuda/histogram/contention.png)",
    variants=True,
    profile_variants=lambda: library.read_table(PROGRAM),
    profile_args=profile_args,
    sanitize_args=sanitize_args,
    bench_cases=bench_cases,
    ceilings=ceilings,
    run=run,
    parse_output=parse_output,
    reference=reference,
    on_cpu=on_cpu,
    picture=Picture("histogram", viz_data, options=("n",)),
    tour=Tour("256-bin counts of uniform and 90%-skewed bytes, and how many atomics each variant makes "
              "collide", drawn=("plots/histogram_contention.png",), committed=("cuda/histogram/contention.png",)),
    exercises=EXERCISES,
)
