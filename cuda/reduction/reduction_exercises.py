"""reduction's exercises: 02's tree in shared memory (each block's sum), 02's one atomicAdd per block into
a total (and the launch that zeroes it first), and 04's grid-stride first pass. The problems the check
runs (harness/programs/exercise.py says what each part is); declared in reduction.py's RECORD.

The tolerances. A float32 sum whose every input passes through at most D additions is within
gamma_D * sum|x| of the exact sum, gamma_D = D u / (1 - D u), u = 2^-24, in any order of the additions
(reduction.py's docstring). The check compares relative to the reference's norm, so the float inputs
here are positive (sum|x| = |sum|: the bound is gamma_D relative, for every output), and each problem's
tolerance is gamma_D for the longest chain a right solution can have in any of its cases (each class
says which). Float inputs come two ways: uniform in [0.5, 1.5), and spread over 2^-12 .. 2^12 (small
values that a careless order would absorb into large ones; only in cases without a partial block, head
or tail, since a tiny value missed there would pass unseen). The integer-valued inputs (+-1..15, never 0) are
summed exactly in any order; the cases keep their outputs small enough that an error of 1 (one element
dropped or added twice) is beyond the tolerance, so for them the comparison is exact in effect
(test_reduction_exercises.py holds every integer case to it).

The input x is followed by NaN (and, on the grid-stride exercise's CUDA track, preceded by NaN): an
element read past either end makes its output NaN, told apart from an output never written (which holds
the check's own poison)."""

from __future__ import annotations

import re

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed

U = 2.0 ** -24  # float32's unit roundoff
IN_GUARD = 1024  # NaN floats after x (and before it, where a misaligned start is played)
KINDS = ("float", "int", "wide")


def gamma(d: int) -> float:
    """gamma_d: how far, relative to sum|x|, a float32 sum through at most d additions may land."""
    return d * U / (1.0 - d * U)


def values(rng: np.random.Generator, n: int, kind: str) -> np.ndarray:
    """float: uniform [0.5, 1.5); wide: positive, spread over 2^-12 .. 2^12; int: +-1..15 (exact in any order).
    No float is below 0.5: one dropped or added twice moves its output by far more than the tolerance."""
    if kind == "int":
        return (rng.integers(1, 16, n) * rng.choice([-1, 1], n)).astype(np.float32)
    if kind == "wide":
        return np.exp2(rng.uniform(-12.0, 12.0, n)).astype(np.float32)
    return rng.uniform(0.5, 1.5, n).astype(np.float32)


def padded(x: np.ndarray, before: int = 0) -> np.ndarray:
    """x with NaN around it: an element read past its end (or before its start) poisons its sum."""
    nan = np.float32(np.nan)  # the canonical NaN, not the output's poison
    return np.concatenate([np.full(before, nan, np.float32), x, np.full(IN_GUARD, nan, np.float32)])


class _Written(np.ndarray):
    """The Python track's total: notes that something stored into it (`out[0] += s` stores too), and
    whether a kernel's thread did."""

    written: bool = False
    in_kernel: bool = False
    kernel_wrote: bool = False

    def __setitem__(self, key, value):
        self.written = True
        self.kernel_wrote = self.kernel_wrote or self.in_kernel
        super().__setitem__(key, value)


class BlockOrder(Exception):
    """The total relies on the order the blocks run in, or comes from no kernel at all."""


def _fmt(v) -> str:
    return f"{float(v):.6g}"


class PartialWrite(Exception):
    """A block's partial stored wrong in a way its final value may hide: added into (`+=`) while it
    still held the check's poison, or stored by a second thread of the block with another value."""


class _Partials(np.ndarray):
    """The Python track's partials: notes the thread that first stores each one (kit.as_writer says
    which thread runs) and stops at a store the final values would misname: one made from the poison
    (the partial read before anything was stored in it), or a second thread's store of another value
    (the last thread to store wins, so its value is what the output shows)."""

    owner: np.ndarray
    writer: int = -1
    threads: int = 1

    def __setitem__(self, key, value):
        idx = np.arange(self.owner.size)[key].ravel()
        new = np.broadcast_to(np.asarray(value, dtype=np.float32), idx.shape)
        if kit.is_poison(np.ascontiguousarray(new)).any():
            raise PartialWrite(f"partials[{int(idx[0])}] was given a value made from the check's poison (the NaN "
                               f"every output starts as): it was read before anything was stored in it (`+=` adds "
                               f"into memory nobody set): store the block's sum with `=`")
        own = self.owner[idx]
        old = np.asarray(self)[idx]
        # Another thread of the same block (another block's store shows in the values: a partial left unset).
        other = ((own >= 0) & (own != self.writer) & (own // self.threads == self.writer // self.threads)
                 & ~((old == new) | (np.isnan(old) & np.isnan(new))))
        if other.any():
            j = int(np.flatnonzero(other)[0])
            raise PartialWrite(f"partials[{int(idx[j])}] was stored by thread {int(own[j]) % self.threads} of its "
                               f"block, then by thread {self.writer % self.threads} with another value: one thread "
                               f"of each block (thread 0, which holds the block's sum) stores the partial")
        self.owner[idx[own < 0]] = self.writer
        super().__setitem__(key, value)


def partials_out(n: int, threads: int) -> _Partials:
    out = kit.poisoned(n, np.float32).view(_Partials)
    out.owner = np.full(n, -1, dtype=np.int64)
    out.threads = threads
    return out


PY_BLOCKS = (8, 16, 32)  # the simulator's block sizes for the tree's exercises (16 the usual one)


def _label(py: bool, usual: int):
    """A case's label: its size and values, and its block size where it is not the usual one."""
    return lambda n, k, b: f"n={n}" + (f", {b} threads a block" if b != usual else "") + f" ({k} values)"


def _other_block_size(bad: list[dict], good: list[dict], use: str) -> str | None:
    """The cause when only the cases whose block size is not the usual one fail."""
    usual = kit.unusual_block_size(bad, good)
    if usual is None:
        return None
    return (f"only the cases whose blocks are not {usual} threads fail (every case with {usual} passes): a "
            f"block size is typed in somewhere: use {use}, whatever the launch chose")


def _rg():
    from harness.programs import reduction  # this program's own module (it imports this file for its RECORD)

    return reduction


class ReduceTree(kit.Problem):
    """02's tree, each block's sum to partials[blockIdx.x]: blocks of 256 threads on the GPU (16 on the
    simulator), 2 elements a thread. Tolerance: a block's sum has at most 511 additions in any order
    (2 * 256 elements), gamma_511 = 3.05e-5; the lab's tree has 9."""

    order_checked = True
    barrier_cause = ("every partial stored before the tree reads it (a barrier after the loads), and each level "
                     "finished before the next reads it (a barrier after each step)")
    tolerance = gamma(2 * 256 - 1)
    nan_cause = ("an element past the end of x was added (x is followed by NaN here): a thread whose index is at or "
                 "past n loads 0, the identity of the sum, in its place; or a shared cell was read before any thread "
                 "stored it")

    @staticmethod
    def threads(track: str) -> int:
        return 16 if track == "python" else 256

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        py = track == "python"
        t = self.threads(track)
        e = 2 * t  # elements a block
        rows = [(1, "float"), (4 * e, "int"), (3 * e, "float"), (e - 1, "float"), (e + 1, "int"), (3 * t, "int")]
        rows += [(100, "float"), (20 * e, "wide")] if py else [(4099, "float"), (128 * e, "wide"),
                                                               (5_000_011, "float")]
        rows = [(n, k, t) for n, k in rows]
        if py:  # other block sizes: a kernel written for one blockDim (a stride or an offset typed in) fails them
            rows += [(112, "int", 8), (2 * 64 + 5, "float", 32)]
        ft = int(rng.choice(PY_BLOCKS)) if py else t
        rows.append((int(rng.integers(2, 40 * 2 * ft if py else 200 * e)), str(rng.choice(["float", "int"])), ft))
        return kit.made(rows, _label(py, t), lambda n, k, b: {"n": n, "threads": b, "kind": k},
                        lambda n, k, b: n % (2 * b), lambda n, k, b: n % (2 * b) == 0 and n > 2 * b,
                        lambda n, k, b: n == (100 if py else 4099), seed)

    def blocks(self, case: Case) -> int:
        return kit.cdiv(case.params["n"], 2 * case.params["threads"])

    def inputs(self, case: Case) -> dict:
        return {"x": values(kit.rng(case), case.params["n"], case.params["kind"])}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        n, e = case.params["n"], 2 * case.params["threads"]
        return np.bincount(np.arange(n) // e, weights=inp["x"].astype(np.float64), minlength=self.blocks(case))

    def tail(self, case: Case) -> np.ndarray | None:
        b = self.blocks(case)
        return np.arange(b) == b - 1 if case.params["n"] % (2 * case.params["threads"]) else None

    def facts(self, case: Case) -> dict:
        return {"blocks": self.blocks(case), "threads": case.params["threads"]}

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        odd = _other_block_size(bad, good, "blockDim.x (the block's threads; two elements each)")
        if odd:
            return odd
        if any(r.get("nan") for r in bad):
            return None  # an element read past the end: the case's own message names it
        if all(r.get("blocks", 0) > 1 for r in bad) and any(r.get("blocks", 0) == 1 for r in good):
            return ("only the cases with more than one block fail: each block starts at its own offset, "
                    "blockIdx.x * 2 * blockDim.x (two elements a thread), and writes its own partial")
        return None

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        t = case.params["threads"]
        out = partials_out(self.blocks(case), t)
        sim.launch(kit.as_writer(fn, out), self.blocks(case), t, padded(inp["x"]), case.params["n"], out,
                   shared={"partial": ((t,), np.float32)})
        return np.asarray(out).copy()

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        n = case.params["n"]
        return kit.cuda_outputs(mod, {"x": padded(inp["x"])}, {"out": (self.blocks(case), np.float32, False)},
                                lambda d: mod.exercise_run(d["x"], n, d["out"], None))

    def speed(self) -> Speed:
        n = 1 << 26
        return Speed({"n": n}, "memcpy", 4.0 * n)  # 4 bytes read an element; the partials are 1/512 of that

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        n = params["n"]
        x, p = dev(n, np.float32, 0x3C), dev(kit.cdiv(n, 512), np.float32)
        return kit.prepared(lambda s: mod.exercise_run(x, n, p, s), close)


# The atomic exercise's largest case, and from it its tolerance: the lab's tree (9 additions: the pair on
# load and 8 levels), then one atomicAdd per block in a row, in whatever order the blocks arrive.
ATOMIC_LARGE = (1 << 20) + 1
ATOMIC_CHAIN = 1 + 8 + kit.cdiv(ATOMIC_LARGE, 512)


class ReduceAtomic(kit.Problem):
    """02_shared_tree: the block's tree (given), thread 0's atomicAdd of the block's sum into the total,
    and the launch that sets the total to 0 first. The output is the total, one float; it starts as the
    check's poison (NaN) on both tracks, as memory nobody set may hold anything. Tolerance: gamma of the
    tree's 9 additions plus one per block of the largest case (2049 blocks): 1.23e-4, while a block
    counted twice is off by about 1/2049 = 4.9e-4 even there."""

    tolerance = gamma(ATOMIC_CHAIN)
    nan_cause = ("the total was added into before it was set to 0 (it starts as NaN here, as memory nobody set may "
                 "hold anything: set it to 0 before the launch, on the same stream), or an element past the end of "
                 "x was added (x is followed by NaN here: past n a thread loads 0)")

    threads = staticmethod(ReduceTree.threads)

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        py = track == "python"
        t = self.threads(track)
        e = 2 * t
        rows = [(1, "float"), (4 * e, "int"), (3 * e, "float"), (e - 1, "int"), (e + 1, "float"), (3 * t, "int")]
        rows += [(100, "float"), (20 * e, "wide"), (1001, "int")] if py else [
            (4099, "int"), (128 * e, "wide"), (ATOMIC_LARGE, "float")]
        rows = [(n, k, t) for n, k in rows]
        if py:  # other block sizes: a launch or a kernel written for one `threads` fails them
            rows += [(112, "int", 8), (2 * 64 + 5, "float", 32)]
        ft = int(rng.choice(PY_BLOCKS)) if py else t
        rows.append((int(rng.integers(2, 40 * 2 * ft if py else 200 * e)), "float", ft))
        return kit.made(rows, _label(py, t), lambda n, k, b: {"n": n, "threads": b, "kind": k},
                        lambda n, k, b: n % (2 * b), lambda n, k, b: n % (2 * b) == 0 and n > 2 * b,
                        lambda n, k, b: n == (100 if py else 4099), seed)

    def inputs(self, case: Case) -> dict:
        return {"x": values(kit.rng(case), case.params["n"], case.params["kind"])}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return np.array([np.sum(inp["x"], dtype=np.float64)])

    def tail(self, case: Case) -> np.ndarray:
        # The total lies in no partial block: a wrong total never points at the bounds check by itself (an
        # element read past n shows as NaN, and nan_cause names it).
        return np.zeros(1, dtype=bool)

    def facts(self, case: Case) -> dict:
        return {"threads": case.params["threads"]}

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        return _other_block_size(bad, good, "the `threads` shared_tree_sum is given, in the grid's size, the "
                                            "block's and the shared memory's")

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        if any("never written" in (r.get("message") or "") for r in bad):
            return ("the total still holds the check's poison (NaN): nothing was stored into it, or the blocks added "
                    "into it before it was set to 0: the launch sets it to 0, then thread 0 of each block adds the "
                    "block's sum into it")
        # "got G, expected E" of each failing case: a total that is a whole multiple (2 or more) of the sum
        # in every one is the block's sum added by several threads of each block.
        ratios = []
        for r in bad:
            m = _GOT.search(r.get("message") or "")
            if not m or float(m.group(2)) == 0.0:
                return None
            ratios.append(float(m.group(1)) / float(m.group(2)))
        ks = [round(q) for q in ratios]
        if ratios and all(k >= 2 and abs(q - k) <= 1e-3 * k for q, k in zip(ratios, ks)):
            if len(set(ks)) == 1:
                return (f"every failing total is {ks[0]} times the sum: {ks[0]} threads of each block add the block's "
                        f"sum: only thread 0 (the one that holds it) does the atomicAdd")
            each = ", ".join(dict.fromkeys(f"{k} times the sum with {r.get('threads')} threads a block"
                                           for k, r in zip(ks, bad)))
            return (f"every failing total is a whole multiple of the sum ({each}): several threads of each block add "
                    f"the block's sum: only thread 0 (the one that holds it) does the atomicAdd")
        return None

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        """The learner's launch, run twice: as the simulator runs the blocks (0 first), and with the last
        block first. A total right in the first order and not in the second relies on the blocks' order
        (block 0 setting it to 0, say), which the GPU never promises."""
        got = self._run(fn, case, inp, last_first=False)
        ref = self.reference(case, inp)
        x = inp["x"].astype(np.float64)
        slack = 2 * self.tolerance * float(np.abs(x).sum()) + 1e-30
        if np.all(np.abs(got.astype(np.float64) - ref) <= slack):
            again = self._run(fn, case, inp, last_first=True)
            if not np.all(np.abs(again.astype(np.float64) - ref) <= slack):
                raise BlockOrder(f"the total depends on the order the blocks run in: {_fmt(got[0])} with block 0 "
                                 f"first, {_fmt(again[0])} with the last block first (expected {_fmt(ref[0])}): "
                                 f"on the GPU blocks run in any order, so no block may rely on another having run: "
                                 f"the launch sets the total to 0 before the kernel, and each block only adds its "
                                 f"sum into it")
        return got

    def _run(self, fn, case: Case, inp: dict, last_first: bool) -> np.ndarray:
        from harness.base import sim

        out = kit.poisoned(1, np.float32).view(_Written)
        real = sim.launch
        launched = []

        def launch(kernel, grid, block, *args, **kw):
            launched.append(kernel)
            out.in_kernel = True
            try:
                return real(kit.blocks_reversed(kernel) if last_first else kernel, grid, block, *args, **kw)
            finally:
                out.in_kernel = False

        # The learner's file calls sim.launch (or a name it imported for it): both lead here while it runs.
        names = [k for k, v in getattr(fn, "__globals__", {}).items() if v is real]
        sim.launch = launch
        for k in names:
            fn.__globals__[k] = launch
        try:
            fn(padded(inp["x"]), case.params["n"], out, case.params["threads"])
        finally:
            sim.launch = real
            for k in names:
                fn.__globals__[k] = real
        if out.written and not out.kernel_wrote:
            raise BlockOrder("the total was stored only outside any kernel (" + (
                "no kernel was launched" if not launched else "the launched kernel never added into it") +
                "): the exercise's total comes from the blocks: thread 0 of each block adds its block's sum into it")
        got = np.array(out, dtype=np.float32)
        if out.written:
            # Stored into, yet still the poison: the poison was added to (numpy keeps a NaN's payload; a
            # GPU's arithmetic gives the canonical NaN, and so does this).
            got[kit.is_poison(got)] = np.float32(np.nan)
        return got

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        n = case.params["n"]
        return kit.cuda_outputs(mod, {"x": padded(inp["x"])}, {"out": (1, np.float32, False)},
                                lambda d: mod.exercise_run(d["x"], n, d["out"], None))

    def speed(self) -> Speed:
        n = 1 << 26
        return Speed({"n": n}, "memcpy", 4.0 * n)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        n = params["n"]
        x, out = dev(n, np.float32, 0x3C), dev(1, np.float32)
        return kit.prepared(lambda s: mod.exercise_run(x, n, out, s), close)


_GOT = re.compile(r"got (\S+), expected (\S+?)(?: |$)")

# The grid-stride exercise's cases keep at most this many float4s a thread, so that a thread's own chain
# is at most 4 * 16 elements + its head and tail element; the block's tree (given) adds 10 more (5
# shuffles in a warp, 5 across the warps' sums). 128 bounds that chain with room to spare.
GS_CHUNKS = 16
GS_CHAIN = 128
# A float case's block sums hold at most about this many elements (values 0.5 .. 1.5): one element missed
# or added twice then moves its block's sum by more than 10 tolerances of a typical sum, so the check can
# tell which blocks are wrong (block 0 alone: the head or the tail).
GS_PER_BLOCK = 5000
GS_PY_BLOCKS = (32, 64, 128)  # the simulator's block sizes for the grid-stride exercise (whole warps; 64 the usual)


class ReduceGridStride(kit.Problem):
    """04's first pass: `blocks` blocks of 256 threads (64 on the simulator) walk x in float4 chunks with
    a grid-sized stride, the head (before the first 16-byte boundary) and the tail (after the last whole
    float4) by the first threads, then the block's tree (given): each block's sum to partials[blockIdx.x].
    Which elements a block sums is fixed by the grid stride: chunk j (x[head + 4j .. head + 4j + 3]) is
    thread j % (blocks * threads)'s, head and tail are block 0's. Tolerance: gamma_128 = 7.6e-6 (GS_CHAIN)."""

    tolerance = gamma(GS_CHAIN)
    nan_cause = ("an element outside x was added (x is surrounded by NaN here): the float4 loop stops at n4, the head "
                 "takes x[tid] only for tid < head, the tail x[head + 4 * n4 + tid] only for tid < 4 and below n")
    ragged_cause = ("only the cases whose x has a head or a tail fail (a start that is not 16-byte aligned, or n - head "
                    "not a multiple of 4), in block 0's partial, while the others pass: the head x[tid] for tid < head "
                    "and the tail x[head + 4 * n4 + tid] for tid < 4 (below n) are added by the first threads")

    @staticmethod
    def threads(track: str) -> int:
        return 64 if track == "python" else 256

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        py = track == "python"
        t = self.threads(track)
        # n=3 after a start 1 float past a boundary: three head elements and nothing else. It comes after the
        # other misaligned cases: a head skipped leaves its output all 0, a message of its own, and the
        # cause across the cases is read from the first failing one.
        rows = ([(1, 1, 0, "float"), (1024, 2, 0, "int"), (1280, 1, 0, "float"), (2048, 3, 0, "float"),
                 (4099, 2, 0, "float"), (1001, 3, 2, "int"), (2050, 2, 3, "float"), (1536, 2, 0, "wide"),
                 (3, 2, 1, "int"), (1792, 1, 0, "int")] if py else
                [(1, 1, 0, "float"), (1 << 16, 4, 0, "int"), (1 << 17, 8, 0, "float"), (16387, 4, 0, "float"),
                 (100003, 8, 2, "int"), (50001, 16, 3, "float"), (1 << 16, 16, 0, "wide"),
                 (3, 2, 1, "int"), (5_000_011, 1024, 1, "float")])
        # 1792 in one block: 7 float4s a thread, so the loop after the unrolled one makes several trips.
        rows = [(*r, t) for r in rows]
        if py:  # other block sizes: a kernel written for one blockDim (an index or a stride typed in) fails them
            rows += [(2051, 2, 1, "float", 32), (4096, 2, 0, "int", 128)]
        # The fresh case: at most GS_CHUNKS float4s a thread, and at most GS_PER_BLOCK elements a block.
        ft = int(rng.choice(GS_PY_BLOCKS)) if py else t
        n = int(rng.integers(5, 3000 if py else 200_000))
        g = int(rng.integers(max(1, kit.cdiv(n, 4 * GS_CHUNKS * ft), kit.cdiv(n, GS_PER_BLOCK)), 4 if py else 64))
        rows.append((n, g, int(rng.integers(0, 4)), "float", ft))

        def head(n, g, m, k, b):
            return min((4 - m) % 4, n)

        def ragged(n, g, m, k, b):
            return head(n, g, m, k, b) > 0 or (n - head(n, g, m, k, b)) % 4 != 0

        return kit.made(rows, lambda n, g, m, k, b: f"n={n} blocks={g}" + (f" of {b} threads" if b != t else "")
                        + (f", x {m} floats past a 16-byte boundary" if m else "") + f" ({k} values)",
                        lambda n, g, m, k, b: {"n": n, "blocks": g, "misalign": m, "head": head(n, g, m, k, b),
                                               "threads": b, "kind": k},
                        ragged, lambda n, g, m, k, b: not ragged(n, g, m, k, b) and g > 1,
                        lambda n, g, m, k, b: n == (1001 if py else 100003), seed)

    def inputs(self, case: Case) -> dict:
        return {"x": values(kit.rng(case), case.params["n"], case.params["kind"])}

    @staticmethod
    def owners(n: int, head: int, blocks: int, threads: int) -> np.ndarray:
        """The block that adds each element: chunk j is thread j % (blocks * threads)'s; head and tail, block 0's."""
        own = np.zeros(n, dtype=np.int64)
        n4 = (n - head) // 4
        chunk_block = (np.arange(n4) % (blocks * threads)) // threads
        own[head:head + 4 * n4] = np.repeat(chunk_block, 4)
        return own

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        p = case.params
        own = self.owners(p["n"], p["head"], p["blocks"], p["threads"])
        return np.bincount(own, weights=inp["x"].astype(np.float64), minlength=p["blocks"])

    def tail(self, case: Case) -> np.ndarray | None:
        return np.arange(case.params["blocks"]) == 0 if case.ragged else None

    def facts(self, case: Case) -> dict:
        return {"blocks": case.params["blocks"], "threads": case.params["threads"]}

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        odd = _other_block_size(bad, good, "blockDim.x and gridDim.x")
        if odd:
            return odd
        if any(r.get("nan") for r in bad):
            return None  # an element outside x was added: the case's own message names it
        if all(r.get("blocks", 0) > 1 for r in bad) and any(r.get("blocks", 0) == 1 for r in good):
            return ("only the grids of more than one block fail: the start is the thread's global index "
                    "(blockIdx.x * blockDim.x + threadIdx.x) and the stride the whole grid's thread count "
                    "(gridDim.x * blockDim.x); each block writes its own partial")
        return None

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        p = case.params
        out = partials_out(p["blocks"], p["threads"])
        sim.launch(kit.as_writer(fn, out), p["blocks"], p["threads"], padded(inp["x"]), p["n"], p["head"], out,
                   shared=_rg()._shared(p["threads"]))
        return np.asarray(out).copy()

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        p = case.params
        return kit.cuda_outputs(mod, {"x": padded(inp["x"], before=p["misalign"])},
                                {"out": (p["blocks"], np.float32, False)},
                                lambda d: mod.exercise_run(d["x"], p["misalign"], p["n"], d["out"], p["blocks"], None))

    def speed(self) -> Speed:
        n = 1 << 26
        return Speed({"n": n}, "memcpy", 4.0 * n)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        n = params["n"]
        x, p = dev(n, np.float32, 0x3C), dev(4096, np.float32)  # 0 blocks: a full wave, at most 4096
        return kit.prepared(lambda s: mod.exercise_run(x, 0, n, p, 0, s), close)

