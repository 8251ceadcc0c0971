"""What an exercise's problem is made of: the kit a program's `<prog>_exercises.py` builds its problems
from, and the `Problem` each one fills in.

An exercise is declared by the program it belongs to (record.Exercise, in the program's RECORD); its
problem (a `Problem` subclass, in cuda/<prog>/<prog>_exercises.py) says what the check runs: the cases
a lazy kernel gets wrong, the inputs, the lab's own reference and tolerance, how each track runs the
learner's kernel, and, on the CUDA track, the timed case. The grader (harness/user/exercises/) asks the
problem and never names an exercise itself.

Every output array starts poisoned (a NaN no arithmetic makes, or a byte pattern), and the CUDA track's
outputs carry a poisoned guard zone past their end, so a missing bounds check shows up even where the
stray write lands in the allocation's padding.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

GUARD = 1024  # poisoned elements after each CUDA output: a write there is past the end


@dataclass(frozen=True)
class Case:
    label: str
    params: dict
    seed: int = 0  # the case's number within the check
    ragged: bool = False  # a size that is not a multiple of the block or tile
    small: bool = False  # the sanitizer's case (CUDA track)
    run: int = 0  # the check's seed: fresh each check, so a hard-coded output cannot pass; --seed replays it
    exact_multi: bool = False  # every size a multiple of the block or tile, and more than one block: the
    #                            evidence that lets a failure of the ragged cases alone blame the bounds check
    wide: bool = False  # values spread far enough that exp overflows without a running max


@dataclass(frozen=True)
class Speed:
    """The CUDA track's timed case: the work of one launch, in the ceiling's unit's base."""
    params: dict
    ceiling: str  # "memcpy" (GB/s), "fp32" (TFLOP/s) or "fp32_inst" (Ginst/s)
    amount: float


def rng(case: Case) -> np.random.Generator:
    """The case's random numbers: from the check's seed and the case's number, so --seed replays them."""
    return np.random.default_rng([int(case.run) & 0xFFFFFFFF, 1000 + int(case.seed)])


def cases_rng(seed: int) -> np.random.Generator:
    """The random numbers that choose the check's fresh case(s)."""
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, 7])


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def made(rows, label, params, ragged, exact_multi, small, seed: int, **more) -> list[Case]:
    """One Case per row of sizes: each of label, params, ragged, exact_multi, small (and the Case's other
    flags, in `more`) is a function of the row's values."""
    return [Case(label(*row), params(*row), seed=i, ragged=bool(ragged(*row)), small=bool(small(*row)), run=seed,
                 exact_multi=bool(exact_multi(*row)), **{k: bool(f(*row)) for k, f in more.items()})
            for i, row in enumerate(rows)]


def unusual_block_size(bad: list[dict], good: list[dict], key: str = "threads") -> int | None:
    """The usual block size (the one most cases have, by each result's `key`) when only the cases run with
    another size fail and some case with the usual one passes: a block size typed into the kernel. None
    otherwise, or when a result does not say its size."""
    sizes = [r.get(key) for r in bad + good]
    if None in sizes or not bad or not good:
        return None
    usual = max(set(sizes), key=sizes.count)
    if all(r[key] != usual for r in bad) and any(r[key] == usual for r in good):
        return usual
    return None


def two_d_tail(h: int, w: int, bh: int, bw: int) -> np.ndarray:
    """The elements of an h x w output (flattened) that lie in a partial bh x bw block."""
    r = np.arange(h)[:, None] >= (h // bh) * bh
    c = np.arange(w)[None, :] >= (w // bw) * bw
    return (r | c).ravel()


# --- the poisons ------------------------------------------------------------------------------------

_POISON_BITS = {np.dtype(np.float32): (np.uint32, 0x7FE5A5A5), np.dtype(np.float64): (np.uint64, 0x7FFDEAD5A5A5A5A5)}


def poison_value(dtype, alt: bool = False) -> object:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.nan
    if dt.kind == "u":
        return ({1: 0x54, 2: 0x5A54, 4: 0xA5A5A5A5, 8: 0xA5A5A5A5A5A5A5A5} if alt else
                {1: 0xAB, 2: 0xA5AB, 4: 0x5A5A5A5A, 8: 0x5A5A5A5A5A5A5A5A})[dt.itemsize]
    return -0x5A5A5A5A if alt else -0x5A5A5A5B


def poisoned(shape, dtype, alt: bool = False) -> np.ndarray:
    """An output array full of the poison (floats: a NaN whose payload no arithmetic makes, so a NaN
    computed from an unwritten shared cell is told apart from an output nobody wrote)."""
    dt = np.dtype(dtype)
    if dt in _POISON_BITS:
        ut, bits = _POISON_BITS[dt]
        return np.full(shape, bits, dtype=ut).view(dt)
    return np.full(shape, poison_value(dt, alt), dtype=dt)


def is_poison(a: np.ndarray, alt: bool = False) -> np.ndarray:
    dt = a.dtype
    if dt in _POISON_BITS:
        ut, bits = _POISON_BITS[dt]
        return a.view(ut) == bits
    return a == np.asarray(poison_value(dt, alt)).astype(dt)


def dev_out(n: int, dtype, alt: bool = False):
    """A poisoned device output of n elements plus GUARD poisoned ones after it."""
    from harness.calling import cudart

    return cudart.to_device(poisoned(n + GUARD, dtype, alt))


def cuda_outputs(mod, inputs: dict, outputs: dict, call) -> dict:
    """Run one CUDA-track case: `inputs` (name -> host array) copied to the device, `outputs` (name ->
    (n, dtype, alt)) poisoned device arrays with their guard, `call(dev)` enqueues the learner's entry
    point with the device arrays by name. Returns {name: the n elements, name + "_guard": the guard}
    ("out" and "guard" for the output named "out"), every device array freed whatever happens."""
    from harness.calling import cudart

    dev: dict = {}
    try:
        for k, a in inputs.items():
            dev[k] = cudart.to_device(np.ascontiguousarray(a))
        for k, (n, dtype, alt) in outputs.items():
            dev[k] = dev_out(n, dtype, alt)
        call(dev)
        got = {}
        for k, (n, _, _) in outputs.items():
            res = dev[k].to_host()
            got[k], got["guard" if k == "out" else f"{k}_guard"] = res[:n], res[n:]
        return got
    finally:
        for d in dev.values():
            d.close()


# --- the Python track's instruments on harness.base.sim ---------------------------------------------

class RedundantWrites(Exception):
    """Some element was written by more than one thread (right values, the work done several times)."""


def redundant_message(i: int, threads: int | None = None) -> str:
    by = f"{threads} threads" if threads else "a second thread"
    return (f"element {i} was written by {by}: more than one thread handles it, so the grid does the work several "
            f"times over: the stride must be the whole grid's thread count, and the start the thread's global index")


class Counting(np.ndarray):
    """An output that records which thread first wrote each element and raises RedundantWrites when
    another thread writes it (every element handled by one thread; one thread may write an element
    several times, as in out[i] = x[i]; out[i] *= x[i])."""

    owner: np.ndarray
    writer: int = -1

    def __setitem__(self, key, value):
        idx = np.arange(self.owner.size)[key].ravel()
        own = self.owner[idx]
        twice = idx[(own >= 0) & (own != self.writer)]
        if twice.size:  # stop here: a grid that does the work many times over can take very long to finish it
            raise RedundantWrites(redundant_message(int(twice[0])))
        self.owner[idx[own < 0]] = self.writer
        super().__setitem__(key, value)


def counting(n: int, dtype) -> Counting:
    out = poisoned(n, dtype).view(Counting)
    out.owner = np.full(n, -1, dtype=np.int64)
    return out


def as_writer(fn, out: Counting):
    """The learner's kernel, telling `out` which thread runs (a generator kernel: before each resumption)."""

    def me(ctx):
        g, b, t = ctx.gridDim, ctx.blockIdx, ctx.threadIdx
        block = b.x + g.x * (b.y + g.y * b.z)
        return block * ctx.blockDim.size + t.x + ctx.blockDim.x * (t.y + ctx.blockDim.y * t.z)

    if inspect.isgeneratorfunction(fn):
        def gen(ctx, *args):
            it = fn(ctx, *args)
            while True:
                out.writer = me(ctx)
                try:
                    v = next(it)
                except StopIteration:
                    return
                yield v
        return gen

    def plain(ctx, *args):
        out.writer = me(ctx)
        return fn(ctx, *args)
    return plain


def _seen_as(fn, view):
    """The kernel run with the context `view(ctx)` gives it in place of the simulator's (a generator
    kernel stays one, so its barriers still yield)."""
    if inspect.isgeneratorfunction(fn):
        def gen(ctx, *args):
            return (yield from fn(view(ctx), *args))
        return gen
    return lambda ctx, *args: fn(view(ctx), *args)


def reversed_threads(fn):
    """The kernel with the threads of each block run in the opposite order (sim runs them in order):
    threadIdx is mirrored, so the thread that ran last runs first. A kernel without a race gives the
    same output; one that lacks a barrier reads what other threads have, or have not yet, written."""
    from harness.base.sim import dim3

    def mirrored(ctx):
        d, t = ctx.blockDim, ctx.threadIdx
        return SimpleNamespace(blockIdx=ctx.blockIdx, threadIdx=dim3(d.x - 1 - t.x, d.y - 1 - t.y, d.z - 1 - t.z),
                               blockDim=d, gridDim=ctx.gridDim, shared=ctx.shared)

    return _seen_as(fn, mirrored)


def blocks_reversed(fn):
    """The kernel with the blocks run last to first (sim runs them in order): blockIdx is mirrored on
    every axis. Blocks that only add to a shared result give the same output in any order; a kernel that
    relies on block 0 running first (the output zeroed inside the kernel) does not."""
    from harness.base.sim import dim3

    def mirrored(ctx):
        g, b = ctx.gridDim, ctx.blockIdx
        return SimpleNamespace(blockIdx=dim3(g.x - 1 - b.x, g.y - 1 - b.y, g.z - 1 - b.z), threadIdx=ctx.threadIdx,
                               blockDim=ctx.blockDim, gridDim=g, shared=ctx.shared)

    return _seen_as(fn, mirrored)


class ReadCounted(np.ndarray):
    """A shared-memory array that counts the element reads made through it (`reads`, a one-item list
    every block's array of one name shares), so a check can tell a tiled kernel that never reads its
    tile back (its answers taken straight from global memory) from one that uses it."""

    reads: list | None = None

    def __getitem__(self, key):
        if self.reads is not None:
            self.reads[0] += 1
        return super().__getitem__(key)


def read_counted(spec: dict) -> tuple:
    """(a `shared=` factory for sim.launch, {name: [reads]}, [each block's arrays]): `spec` is sim's
    name -> (shape, dtype); each block gets fresh arrays, filled as sim fills them (NaN, or the integer
    type's largest value), whose element reads are counted by name over the launch."""
    reads = {name: [0] for name in spec}
    made: list = []

    def make():
        arrays = {}
        for name, (shape, dtype) in spec.items():
            dt = np.dtype(dtype)
            fill = np.nan if dt.kind == "f" else np.iinfo(dt).max if dt.kind in "iu" else 0
            a = np.full(shape, fill, dtype=dt).view(ReadCounted)
            a.reads = reads[name]
            arrays[name] = a
        made.append(arrays)
        return arrays

    return make, reads, made


# --- the problem ------------------------------------------------------------------------------------

class Problem:
    """One exercise's problem. A subclass fills in `cases`, `inputs`, `reference`, and `run_python` and
    `run_cuda` for the tracks it offers; the rest has defaults.

    Attributes: `tolerance` (None: exact equality; else the relative error the lab's own tests allow),
    `two_poisons` (every value of the output's type is a legal answer, a grey byte: each case runs twice
    with two poisons), `in_place` (the input that the kernel overwrites, to tell elements left alone from
    elements computed wrongly), `order_checked` (the Python track's kernel shares memory between threads:
    a failing case runs again with the threads reversed to see a missing barrier), `unit` ("block" or
    "tile": what a partial one is called in messages), `nan_cause` (what a NaN or infinite output points
    at), `ragged_cause` (what failures in the partial blocks alone point at, instead of the bounds check),
    `barrier_cause` (which barrier an output that changes with the threads' order points at, where the
    grader's own words, about tiles, do not fit the kernel).
    """

    tolerance: float | None = None
    two_poisons: bool = False
    in_place: str | None = None
    order_checked: bool = False
    unit: str = "block"
    nan_cause: str = ""
    ragged_cause: str = ""
    barrier_cause: str = ""

    def cases(self, track: str, seed: int) -> list[Case]:
        raise NotImplementedError

    def inputs(self, case: Case) -> dict:
        raise NotImplementedError

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        raise NotImplementedError

    def tail(self, case: Case) -> np.ndarray | None:
        """The output elements in a partial block or tile (the ragged edges, where the mistakes of a
        bounds check live); None where a mistake at the edge can reach every element."""
        return None

    def facts(self, case: Case) -> dict:
        """What the grader's pattern (`pattern`) reads about a case besides its size flags."""
        return {}

    def out_facts(self, case: Case, out: np.ndarray, ref: np.ndarray) -> dict:
        """What the grader's patterns read about a wrong output beside its size flags (counts lost or
        added, where the values themselves say more than which elements are wrong)."""
        return {}

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        """A cause only this problem can name from the failing cases alone, before the grader looks at
        which sizes fail (its facts outweigh the sizes'), or None."""
        return None

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        """A cause only this problem can name from the failing and passing cases' facts, once the sizes
        have named none, or None."""
        return None

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        raise NotImplementedError

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        """The arrays one case leaves, for the checker to judge: "out" and "guard" (the poisoned zone
        after the output, which must come back untouched), and any counters `counted_problem` reads."""
        raise NotImplementedError

    def check_source(self, text: str) -> str | None:
        """The learner's file as the cases' child compiles it, with what the values cannot show counted;
        None: the plain file serves."""
        return None

    def counted_problem(self, got: dict) -> str | None:
        """What the counting build's counters (run_cuda's extra arrays) show wrong, or None."""
        return None

    def speed(self) -> Speed | None:
        """The CUDA track's timed case (the bench's ceiling for the program), or None."""
        return None

    def timing_launch(self, mod, params: dict):
        """Device buffers for the timed case and a harness.measuring.bench.Prepared whose launch(stream)
        enqueues one run of the learner's entry point."""
        raise NotImplementedError


class ValueProblem(Problem):
    """An exercise whose answer is a value the learner's file defines (a region to zoom into), judged by
    `verdict(value) -> (passed, message, facts)`; no kernel runs."""

    def cases(self, track: str, seed: int) -> list[Case]:
        return []

    def verdict(self, value) -> tuple[bool, str, dict]:
        raise NotImplementedError


def dev_buffers():
    """(dev(shape, dtype, fill=None), close()) for a timed case's device buffers."""
    from harness.calling import cudart

    bufs: list = []

    def dev(shape, dtype, fill=None):
        d = cudart.empty(shape, dtype)
        bufs.append(d)
        if fill is not None:
            d.fill_bytes(fill)
        return d

    def close():
        for d in bufs:
            d.close()

    return dev, close


def prepared(launch, close):
    from harness.measuring import bench

    return bench.Prepared(launch, close)


# --- the CUDA track's files in the program's folder --------------------------------------------------

SPLIT = "// ---- the learner's file goes here; what follows is appended after it ----\n"


def _file(prog: str, name: str) -> str:
    from harness.base import paths

    return (paths.CUDA_DIR / prog / name).read_text(encoding="utf-8")


def glue_text(prog: str, name: str) -> str:
    """The fixed end of the learner's CUDA file (cuda/<prog>/<name>), without the file's own header
    (its comment lines up to the first blank line), which speaks to the lab's developers."""
    text = _file(prog, name)
    head, sep, body = text.partition("\n\n")
    return body if sep and all(ln.startswith("//") for ln in head.splitlines()) else text


# Held back at the kernel's start on the odd warps of each block, on the check's build alone: the GPU starts
# a block's warps together, so a missing barrier between a warp's shared writes and another warp's atomics
# on them (which racecheck does not follow) loses nothing there; with half the warps late, it does.
SKEW_CYCLES = 20000  # about 12 us on a 1.7 GHz SM: far longer than any warp's work before a barrier


def warps_skewed(text: str, kernel: str) -> str | None:
    """The learner's file with `kernel`'s odd warps waiting SKEW_CYCLES clock cycles before its first
    statement, on the line of its opening brace (so that the compiler's line numbers stay the learner's);
    None where the file has no definition of `kernel`."""
    m = re.search(rf"\b{re.escape(kernel)}\s*\([^)]*\)\s*\{{", text)
    if m is None:
        return None
    wait = (" { const long long cudalab_t0 = clock64(); if (((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * "
            f"threadIdx.z)) / 32u) & 1u) while (clock64() - cudalab_t0 < {SKEW_CYCLES}) {{}} }}")
    return text[:m.end()] + wait + text[m.end():]


def counting_build(prog: str, name: str, learner: str) -> str:
    """The learner's file wrapped in a counting build (cuda/<prog>/<name>: what goes before it, SPLIT,
    what goes after it)."""
    before, sep, after = glue_text(prog, name).partition(SPLIT)
    if not sep:
        raise ValueError(f"cuda/{prog}/{name} lacks the line {SPLIT.strip()!r}")
    return before + learner + after
