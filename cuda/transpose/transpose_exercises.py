"""transpose's exercises: the naive kernel (the index mapping and both bounds), the shared tile with its
barrier (02) and the padded tile against bank conflicts (03). The problems the check runs
(harness/programs/exercise.py says what each part is); declared in transpose.py's RECORD.

A transpose computes nothing, so every check is exact. On the Python track the matrices are watched as
the kernel runs: an index outside x or out (numpy would wrap a negative one) stops the case there,
saying whether the thread's own element lies past the matrix's edge (the bounds check) or inside it
(the index arithmetic); and the padded tile's shared memory notes which word each thread touches, so
the bank conflicts a GPU would serialise are counted, and two threads writing one word between two
barriers (tile rows that overlap) are caught as they happen.
"""

from __future__ import annotations

import inspect
from collections import defaultdict

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed

TILE = 32  # the CUDA kernels' kTile, and the Python track's tile where banks are counted
PY_TILE = 8  # the Python track's tile for the naive and tiled kernels: several tiles at a simulator's speed
BANKS = 32  # 4-byte banks of shared memory; a warp is 32 threads


class PastTheEnd(Exception):
    """A thread indexed x or out outside the array."""


class WrittenTwice(Exception):
    """Two threads wrote one element of out: a transpose gives every element one thread."""


class SharedOutside(Exception):
    """A thread indexed the padded kernel's shared words outside the block's shared memory."""


class SharedOverlap(Exception):
    """Two threads wrote one shared word between the same two barriers: tile rows that overlap."""


class BankConflicts(Exception):
    """The output is right, but a warp's access to the tile hits some bank at several different words."""


class InputWritten(Exception):
    """A thread wrote into x, the input (const on the GPU)."""


class TileUnused(Exception):
    """The output is right, but it did not go through the shared tile (read from x twice, or the tile never read)."""


# --- who runs: the thread and how many barriers it has passed ---------------------------------------

class _Who:
    ctx = None
    phase = 0  # the barriers (bare yields) the running thread has passed


def _watched(fn, who: _Who):
    """The learner's kernel, telling `who` which thread runs and in which phase (a generator kernel:
    before each resumption, as the simulator interleaves a block's threads at every barrier)."""
    if inspect.isgeneratorfunction(fn):
        def gen(ctx, *args):
            it = fn(ctx, *args)
            phase = 0
            while True:
                who.ctx, who.phase = ctx, phase
                try:
                    v = next(it)
                except StopIteration:
                    return
                phase += 1
                yield v
        return gen

    def plain(ctx, *args):
        who.ctx, who.phase = ctx, 0
        return fn(ctx, *args)
    return plain


def _thread(ctx) -> str:
    b, t = ctx.blockIdx, ctx.threadIdx
    return f"thread ({t.x}, {t.y}) of block ({b.x}, {b.y})"


def _tid(ctx) -> int:
    return ctx.threadIdx.x + ctx.blockDim.x * ctx.threadIdx.y


def _bid(ctx) -> tuple:
    return (ctx.blockIdx.x, ctx.blockIdx.y)


_OUTSIDE = ("lies past the matrix's ragged edge (the grid is rounded up to whole tiles), and it must touch neither x "
            "nor out: look at the bounds check")
_INDEX = ("element (r, c) of a row-major matrix with C columns is at r * C + c (x is rows x cols, out is cols x rows), "
          "and each thread's row and column come from its own block and thread")


class Edged(np.ndarray):
    """x or out of a Python-track case (flattened). An integer index outside it raises PastTheEnd, and
    (out) a second thread writing an element raises WrittenTwice. Each names the bounds check only when
    the access is the thread's own element and that element lies past the matrix's edge; else the index
    (its arithmetic, or the row and column it is made from). `place(ctx, phase, label)` is where the
    thread's own element lies: (inside the matrix, its index in this array or None)."""

    who: _Who
    label: str
    place = None
    writer: dict | None = None  # out: element -> (the ctx that wrote it, its phase)
    reads: list | None = None  # x: how many element reads the launch made, in a one-item list

    def _stray(self, ctx, phase: int, i: int) -> bool:
        """The thread's own element, past the matrix's edge: what a missing bounds check lets through."""
        if ctx is None or self.place is None:
            return False
        inside, own = self.place(ctx, phase, self.label)
        return not inside and own == i

    def _cause(self, ctx, phase: int) -> str:
        if ctx is None or self.place is None:
            return ""
        inside, own = self.place(ctx, phase, self.label)
        mine = f"its element of {self.label} is at {own}" if inside and own is not None else (
            "it has no element there" if own is None else "its element lies past the matrix's edge")
        return f": the index is wrong, not the bounds ({mine}): {_INDEX}"

    def _check(self, key, verb: str) -> None:
        if not isinstance(key, (int, np.integer)):
            return
        i, ctx, phase = int(key), self.who.ctx, self.who.phase
        if verb == "read" and self.reads is not None:
            self.reads[0] += 1
        if verb == "wrote" and self.label == "x":
            where = "" if ctx is None else f"{_thread(ctx)} "
            raise InputWritten(f"{where}wrote x[{i}]: x is the input (a const pointer on the GPU), and the transpose "
                               f"writes only out: out[c * rows + r] = x[r * cols + c], x left as it is")
        if not 0 <= i < self.size:
            where = "" if ctx is None else f"{_thread(ctx)}{' after the barrier' if phase else ''} "
            msg = f"{where}{verb} {self.label}[{i}], outside its {self.size} elements"
            msg += f": that thread's element {_OUTSIDE}" if self._stray(ctx, phase, i) else self._cause(ctx, phase)
            raise PastTheEnd(msg)
        if verb == "wrote" and self.writer is not None and ctx is not None:
            first = self.writer.setdefault(i, (ctx, phase))
            if first[0] is not ctx:
                msg = f"{_thread(first[0])} and {_thread(ctx)} both wrote {self.label}[{i}]"
                if self._stray(ctx, phase, i) or self._stray(*first, i):
                    msg += f": one of them has no element: its element {_OUTSIDE}"
                else:
                    msg += f": each element of out is one thread's{self._cause(ctx, phase)}"
                raise WrittenTwice(msg)

    def __getitem__(self, key):
        self._check(key, "read")
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        self._check(key, "wrote")
        super().__setitem__(key, value)


def _edged(a: np.ndarray, label: str, who: _Who, place, writes: bool = False) -> Edged:
    e = a.view(Edged)
    e.who, e.label, e.place, e.writer = who, label, place, ({} if writes else None)
    e.reads = None if writes else [0]
    return e


def _place_naive(ctx, phase: int, label: str, rows: int, cols: int) -> tuple[bool, int]:
    """The naive kernel's element: x's (row, col) with col from the .x parts and row from the .y parts."""
    t = ctx.blockDim.x
    row, col = ctx.blockIdx.y * t + ctx.threadIdx.y, ctx.blockIdx.x * t + ctx.threadIdx.x
    return row < rows and col < cols, (row * cols + col if label == "x" else col * rows + row)


def _place_tiled(ctx, phase: int, label: str, rows: int, cols: int) -> tuple[bool, int | None]:
    """Before the barrier the thread's element of x (its block's tile, its thread); after it its element
    of out (r, c), in the block's tile of out (block row blockIdx.x, block column blockIdx.y)."""
    if not phase:
        inside, own = _place_naive(ctx, phase, "x", rows, cols)
        return inside, (own if label == "x" else None)
    t = ctx.blockDim.x
    r, c = ctx.blockIdx.x * t + ctx.threadIdx.y, ctx.blockIdx.y * t + ctx.threadIdx.x
    return r < cols and c < rows, (r * rows + c if label == "out" else None)


# --- the padded tile's shared memory, as words -------------------------------------------------------

class Banked(np.ndarray):
    """The block's shared memory as 4-byte words: notes which word each thread reads and writes (its
    n-th read and its n-th write are one instruction of its warp), raises SharedOutside past its end and
    SharedOverlap when a second thread writes a word between the same two barriers."""

    who: _Who
    log: list
    counts: dict
    writers: dict

    def _note(self, key, kind: str) -> None:
        ctx = self.who.ctx
        if isinstance(key, (int, np.integer)):
            words = [int(key)]
        else:
            words = [int(w) for w in np.arange(self.size)[key].ravel()]  # a slice: numpy's own checks
        for w in words:
            if not 0 <= w < self.size:
                raise SharedOutside(
                    f"{_thread(ctx)} {'read' if kind == 'read' else 'wrote'} shared word {w}, outside the block's "
                    f"{self.size} words (t * (t + 1) for t = {ctx.blockDim.x}): tile cell (r, c) is at r * pitch + c, "
                    f"so the tile's t rows, `pitch` words apart, must fit in them")
        tid = _tid(ctx)
        key_n = (_bid(ctx), tid, kind)
        n = self.counts.get(key_n, 0)
        self.counts[key_n] = n + 1
        self.log.append((_bid(ctx), tid, kind, n, words))
        if kind == "write":
            for w in words:
                other = self.writers.setdefault((self.who.phase, w), tid)
                if other != tid:
                    t = ctx.blockDim.x
                    raise SharedOverlap(
                        f"{_thread(ctx)} wrote shared word {w}, which thread ({other % t}, {other // t}) of the same "
                        f"block wrote before the same barrier: two tile cells share a word, so the tile's rows "
                        f"overlap: the pitch (the words from one tile row to the next) must be at least t = {t}")

    def __getitem__(self, key):
        self._note(key, "read")
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        self._note(key, "write")
        super().__setitem__(key, value)


def bank_conflicts(log: list, warp: int = BANKS) -> tuple[int, str]:
    """The worst bank conflict in a shared-memory log: (how many different words of one bank one warp
    instruction touched, a sentence saying where); (1, "") when none. A warp is `warp` consecutive
    threads of a block; the same word read by several lanes is one broadcast, no conflict."""
    groups: dict = defaultdict(set)
    for block, tid, kind, n, words in log:
        groups[(block, tid // warp, kind, n)].update(words)
    worst, where = 1, ""
    for (block, w, kind, _n), words in sorted(groups.items(), key=lambda kv: kv[0]):
        by_bank: dict = defaultdict(list)
        for word in words:
            by_bank[word % BANKS].append(word)
        bank, hit = max(by_bank.items(), key=lambda kv: (len(kv[1]), -kv[0]))
        if len(hit) > worst:
            worst = len(hit)
            shown = ", ".join(str(v) for v in sorted(hit)[:6]) + (", ..." if len(hit) > 6 else "")
            where = (f"the {'read of the tile after' if kind == 'read' else 'store into the tile before'} the barrier: "
                     f"warp {w} of block {block} touches {len(hit)} different words of bank {bank} ({shown}) in one "
                     f"access")
    return worst, where


# --- the problems -----------------------------------------------------------------------------------

def _shape_cases(shapes, seed: int, small) -> list[Case]:
    """(rows, cols, t) rows as cases: ragged when a side is not a multiple of the tile; exact_multi when
    both are and there is more than one tile."""
    return kit.made(shapes, lambda r, c, t: f"{r}x{c}" + ("" if t == TILE else f" (tile {t})"),
                    lambda r, c, t: {"rows": r, "cols": c, "t": t}, lambda r, c, t: r % t or c % t,
                    lambda r, c, t: r % t == 0 == c % t and max(r, c) > t, small, seed)


class TransposeNaive(kit.Problem):
    """out (cols x rows) = x (rows x cols)^T in float32, one thread per element, t x t blocks (CUDA: 32;
    Python: 8, and one case at 32), x along the columns of x."""

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        if track == "python":
            t = PY_TILE
            # Non-square before square: a mix-up of rows and cols is invisible on a square matrix.
            shapes = [(1, 1, t), (5, 7, t), (7, 5, t), (8, 8, t), (16, 24, t), (24, 16, t), (13, 21, t), (17, 9, t),
                      (1, 19, t), (33, 45, TILE)]
            hi = 40
        else:
            t = TILE
            shapes = [(1, 1, t), (5, 7, t), (7, 5, t), (32, 32, t), (64, 96, t), (96, 64, t), (33, 31, t), (31, 65, t),
                      (1, 1000, t), (1000, 1, t), (4099, 2051, t)]
            hi = 300
        r, c = (int(v) for v in rng.integers(2, hi, size=2))
        shapes.append((r, c + (c == r), t))  # the fresh one, never square
        return _shape_cases(shapes, seed, lambda r, c, t: (r, c) == (33, 31))

    def inputs(self, case: Case) -> dict:
        p = case.params
        # Never zero, both signs, many magnitudes: an element in the wrong place is a different word.
        x = kit.rng(case).standard_normal((p["rows"], p["cols"]), dtype=np.float32) * np.float32(8)
        x[x == 0] = 1.5
        return {"x": x}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return np.ascontiguousarray(inp["x"].T).ravel()

    def tail(self, case: Case) -> np.ndarray | None:
        p = case.params
        return kit.two_d_tail(p["cols"], p["rows"], p["t"], p["t"])  # out's partial tiles (out is cols x rows)

    place = staticmethod(_place_naive)

    def _grid(self, case: Case):
        from harness.base import sim

        p = case.params
        return sim.dim3(kit.cdiv(p["cols"], p["t"]), kit.cdiv(p["rows"], p["t"])), sim.dim3(p["t"], p["t"])

    def _shared(self, case: Case, who: _Who):
        return None

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        rows, cols = case.params["rows"], case.params["cols"]
        who = _Who()
        place = lambda ctx, phase, label: self.place(ctx, phase, label, rows, cols)  # noqa: E731
        x = _edged(inp["x"].ravel().copy(), "x", who, place)
        out = _edged(kit.poisoned(rows * cols, np.float32), "out", who, place, writes=True)
        grid, block = self._grid(case)
        shared = self._shared(case, who)
        sim.launch(_watched(fn, who), grid, block, x, out, rows, cols, shared=shared)
        got = out.view(np.ndarray)
        self._after(shared, got, inp, x.reads[0])
        return got

    def _after(self, shared, got: np.ndarray, inp: dict, x_reads: int) -> None:
        """What the run's shared memory shows once the output is in (the tile's use, the padded tile's
        banks)."""

    @staticmethod
    def _right(got: np.ndarray, inp: dict) -> bool:
        ref = np.ascontiguousarray(inp["x"].T).ravel()
        return got.size == ref.size and np.array_equal(got.view(np.uint32), ref.view(np.uint32))

    @staticmethod
    def _through_tile(tile_reads: int, x_reads: int, size: int) -> None:
        """A right output that did not go through the tile: its elements read from x more than once
        each (the store read x again), or the tile never read back. Named only once the output is right
        (a wrong output is the first thing to fix)."""
        if x_reads > size or (tile_reads == 0 and size):
            how = (f"x was read {x_reads} times for its {size} elements (the store read x again, not the tile)"
                   if x_reads > size else "the tile was never read back")
            raise TileUnused(f"the output is right, but it did not go through the shared tile: {how}: each element "
                             f"of x is read once, into the tile; after the barrier out's elements come from the tile "
                             f"(on a GPU that is what makes both the reads and the writes coalesced)")

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        rows, cols = case.params["rows"], case.params["cols"]
        return kit.cuda_outputs(mod, {"x": inp["x"]}, {"out": (rows * cols, np.float32, False)},
                                lambda d: mod.exercise_run(d["x"], d["out"], rows, cols, None))

    def speed(self) -> Speed:
        # 256 MiB a matrix, far past any L2: the bench's headline size. Bytes: each element read once and
        # written once, as the memcpy ceiling counts its own.
        s = 8192
        return Speed({"rows": s, "cols": s}, "memcpy", 8.0 * s * s)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        rows, cols = params["rows"], params["cols"]
        x, out = dev(rows * cols, np.float32, 0x3F), dev(rows * cols, np.float32)  # 0x3F3F3F3F: a normal float
        return kit.prepared(lambda s: mod.exercise_run(x, out, rows, cols, s), close)


class TransposeTiled(TransposeNaive):
    """The same transpose through a t x t shared tile: the load, the barrier, the transposed store and the
    ragged edges on both sides."""

    order_checked = True
    barrier_cause = ("the barrier after the loads (the whole tile stored before any thread reads it back "
                     "transposed)")
    unit = "tile"
    nan_cause = ("a tile cell was read that no thread had stored: the barrier between the loads and the store, or a "
                 "store that reads another cell than the one its element was loaded into")
    ragged_cause = ("only sizes that are not a multiple of the tile fail, in their partial tiles (sizes that are, with "
                    "several tiles, pass): look at the bounds checks: the load's (inside x: rows x cols) and the "
                    "store's (inside out: cols x rows)")

    place = staticmethod(_place_tiled)

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        if track == "python" and any(r.get("nan") for r in bad):
            return ("a tile cell no thread stored was read (NaN, the simulator's fill), whatever order the threads run "
                    "in: the store must read the cell its element was loaded into: x's element (row, col) went to cell "
                    "(row % t, col % t), and out's element (r, c) is x's (c, r)")
        return None

    def _shared(self, case: Case, who: _Who):
        t = case.params["t"]
        make, reads, _ = kit.read_counted({"tile": ((t, t), np.float32)})
        make.reads = reads["tile"]
        return make

    def _after(self, shared, got: np.ndarray, inp: dict, x_reads: int) -> None:
        if self._right(got, inp):
            self._through_tile(shared.reads[0], x_reads, got.size)


class TransposePadded(TransposeTiled):
    """The tiled transpose with its tile placed in shared memory's words by the kernel: on the Python track
    at t = 32, with the banks each warp touches counted (a conflict fails the check, as its cost on a GPU
    would); on the CUDA track 03_padded, whose timed case shows an unpadded tile's conflicts as time."""

    nan_cause = ("a shared word was read that no thread had stored: the barrier between the loads and the store, or "
                 "a store that reads another word than the one its element was loaded into")

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        if track == "python" and any(r.get("nan") for r in bad):
            return ("a shared word no thread stored was read (NaN, the simulator's fill), whatever order the threads "
                    "run in: the store must read the word its element was loaded into: x's element (row, col) went "
                    "to cell (row % t, col % t) at word (row % t) * pitch + col % t, and out's element (r, c) is x's "
                    "(c, r)")
        return None

    def cases(self, track: str, seed: int) -> list[Case]:
        if track == "cuda":
            return super().cases(track, seed)
        rng = kit.cases_rng(seed)
        t = TILE  # banks and warps are 32 wide: so is the tile whose conflicts are counted
        shapes = [(1, 1, t), (32, 32, t), (5, 7, t), (64, 96, t), (33, 45, t), (70, 31, t)]
        r, c = (int(v) for v in rng.integers(2, 80, size=2))
        shapes.append((r, c + (c == r), t))
        return _shape_cases(shapes, seed, lambda r, c, t: False)

    def _shared(self, case: Case, who: _Who):
        t = case.params["t"]
        log: list = []
        counts: dict = {}

        def make():
            # Fresh words for each block, one log over the launch; a word written twice before a barrier is
            # a block's own business, so each block gets its own writers.
            m = np.full(t * (t + 1), np.nan, dtype=np.float32).view(Banked)
            m.who, m.log, m.counts, m.writers = who, log, counts, {}
            return {"smem": m}

        make.log = log
        return make

    def _after(self, shared, got: np.ndarray, inp: dict, x_reads: int) -> None:
        # Conflicts are named only once the output is right: a wrong output is the first thing to fix,
        # and the grader names its cause from the values.
        if not self._right(got, inp):
            return
        self._through_tile(sum(1 for e in shared.log if e[2] == "read"), x_reads, got.size)
        ways, where = bank_conflicts(shared.log)
        if ways > 1:
            raise BankConflicts(
                f"the output is right, but {where}: a {ways}-way bank conflict, which a GPU serves one word at a "
                f"time. Shared memory has {BANKS} banks of 4-byte words (bank = word % {BANKS}); a warp reads a "
                f"column of the tile, cells (0..31, ty): with rows `pitch` words apart those are words "
                f"tx * pitch + ty, in bank (tx * pitch + ty) % {BANKS}: choose the pitch that puts the {BANKS} lanes "
                f"in {BANKS} different banks")
