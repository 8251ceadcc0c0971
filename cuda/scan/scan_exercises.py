"""scan's exercises: one block's tile scanned in shared memory, Kogge-Stone (the double-buffered steps) and
Brent-Kung (the work-efficient up-sweep and down-sweep). The problems the check runs
(harness/programs/exercise.py says what each part is); declared in scan.py's RECORD.

Each block scans its own tile and nothing else: the check launches the tile kernel once, without the
tile totals and the pass that adds them (scan.cu's scan_hierarchy), and compares every tile with its
own prefix sums, so a mistake shows in the tile it is made in and a ragged edge stays in the last tile.
The values are uint32 with sums that wrap modulo 2^32, so the comparison is exact; every uint32 is
some prefix sum, so each case runs with two poisons.
"""

from __future__ import annotations

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed

KINDS = ("random", "max")  # full-range values (the sums wrap at once), or every element 2^32 - 1


def tile_scan(x: np.ndarray, tile: int, exclusive: bool) -> np.ndarray:
    """Each `tile` elements of x scanned on their own, modulo 2^32 (the last tile may be short)."""
    x = np.asarray(x, dtype=np.uint32)
    n = x.size
    pad = np.zeros(kit.cdiv(n, tile) * tile, dtype=np.uint64)
    pad[:n] = x
    s = np.cumsum(pad.reshape(-1, tile), axis=1, dtype=np.uint64)
    if exclusive:
        s -= pad.reshape(-1, tile)
    return (s.ravel()[:n] & 0xFFFFFFFF).astype(np.uint32)


class ThreadOrderRace(Exception):
    """The kernel's output depends on the order the threads of a block run in: a missing barrier."""


class TileScan(kit.Problem):
    """One tile per block, inclusive or exclusive as the case says; `per_thread` elements a thread."""

    per_thread = 1
    cuda_threads = 1024  # scan.cu's kKoggeStoneThreads / kBrentKungThreads
    two_poisons = True
    unit = "tile"
    barrier_cause = ""  # what a missing barrier is, in this kernel
    ragged_cause = ("only sizes that are not a multiple of the tile fail, in their partial tiles (sizes that are, with "
                    "several tiles, pass): look at the bounds check: past the end of x a thread loads 0 and still "
                    "takes part in every step, and it stores only inside x")

    def rows(self, py: bool) -> list[tuple]:
        """(n, threads, exclusive, kind) of the fixed cases."""
        raise NotImplementedError

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        py = track == "python"
        rows = self.rows(py)
        threads = int(rng.choice(self.py_threads)) if py else self.cuda_threads
        n = int(rng.integers(2, 30 * threads if py else 40 * threads))
        rows.append((n, threads, bool(rng.integers(0, 2)), "random"))
        tile = self.per_thread
        small = self.small_n
        return kit.made(rows,
                        lambda n, t, e, k: f"n={n} tile={tile * t} " + ("exclusive" if e else "inclusive")
                        + ("" if k == "random" else ", every element 2^32 - 1"),
                        lambda n, t, e, k: {"n": n, "threads": t, "exclusive": e, "kind": k},
                        lambda n, t, e, k: n % (tile * t), lambda n, t, e, k: n % (tile * t) == 0 and n > tile * t,
                        lambda n, t, e, k: not py and n == small, seed)

    def inputs(self, case: Case) -> dict:
        n = case.params["n"]
        if case.params["kind"] == "max":
            return {"x": np.full(n, 0xFFFFFFFF, dtype=np.uint32)}
        return {"x": kit.rng(case).integers(0, 2**32, size=n, dtype=np.uint32)}

    def tile(self, case: Case) -> int:
        return self.per_thread * case.params["threads"]

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return tile_scan(inp["x"], self.tile(case), case.params["exclusive"])

    def tail(self, case: Case) -> np.ndarray:
        n, tile = case.params["n"], self.tile(case)
        return np.arange(n) >= (n // tile) * tile

    def facts(self, case: Case) -> dict:
        return {"exclusive": bool(case.params["exclusive"])}

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        kinds = {r.get("exclusive") for r in bad}
        if len(kinds) != 1 or not any(r.get("exclusive") != bad[0].get("exclusive") for r in good):
            return None
        if bad[0].get("exclusive"):
            return ("only the exclusive scans fail (every inclusive one passes): look at the exclusive store: there "
                    "out[i] is the sum of the elements before i, without x[i] itself: the inclusive sum minus x[i] "
                    "(0 for a tile's first element)")
        return ("only the inclusive scans fail (every exclusive one passes): look at the inclusive store: there "
                "out[i] is the sum up to and including x[i]")

    def shared(self, threads: int) -> dict:
        raise NotImplementedError

    def launch_python(self, fn, case: Case, inp: dict, alt: bool) -> np.ndarray:
        from harness.base import sim

        p = case.params
        n, nt = p["n"], p["threads"]
        out = kit.poisoned(n, np.uint32, alt)
        sim.launch(fn, kit.cdiv(n, self.tile(case)), nt, inp["x"], out, n, bool(p["exclusive"]), None,
                   shared=self.shared(nt))
        return out

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        """Each case in both thread orders. The simulator runs a block's threads one after another, so a
        read of a lower-numbered thread's result with no barrier before it gets the finished value in
        that order alone (Brent-Kung's down-sweep, Kogge-Stone's first step): the mirrored order shows
        it, and a kernel whose output changes with the order has a race, whichever order is right."""
        out = self.launch_python(fn, case, inp, alt)
        mirrored = self.launch_python(kit.reversed_threads(fn), case, inp, alt)
        differ = np.flatnonzero(out != mirrored)
        if differ.size:
            i = int(differ[0])
            raise ThreadOrderRace(
                f"the output changes with the order the threads of a block run in ({differ.size} of {out.size} "
                f"elements; element {i} is {int(out[i])} with the threads in order, {int(mirrored[i])} in the "
                f"opposite order): a missing barrier: {self.barrier_cause}")
        return out

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        n, exclusive = case.params["n"], int(bool(case.params["exclusive"]))
        return kit.cuda_outputs(mod, {"x": inp["x"]}, {"out": (n, np.uint32, alt)},
                                lambda d: mod.exercise_run(d["x"], d["out"], n, exclusive, None))

    def speed(self) -> Speed:
        n = 1 << 26
        return Speed({"n": n, "exclusive": 0}, "memcpy", 8.0 * n)  # x read once, out written once

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        n = params["n"]
        x, out = dev(n, np.uint32, 0x01), dev(n, np.uint32)
        return kit.prepared(lambda s: mod.exercise_run(x, out, n, params["exclusive"], s), close)


class KoggeStone(TileScan):
    """01_kogge_stone's tile: one element a thread, blocks of 1024 on the GPU (4 to 32 on the simulator)."""

    per_thread = 1
    py_threads = (4, 8, 16, 32)
    small_n = 1500  # the sanitizers' case: two tiles, the second ragged
    barrier_cause = ("each step must read only what the step before wrote: the sums go into the other buffer, and "
                     "every thread waits at a barrier after the loads and at the end of every step before any "
                     "thread reads the tile again")

    def rows(self, py: bool) -> list[tuple]:
        if py:
            return [(1, 8, False, "random"), (1, 4, True, "random"), (32, 8, False, "random"),
                    (64, 16, True, "random"), (96, 32, False, "max"), (13, 8, False, "random"),
                    (37, 8, True, "random"), (100, 32, False, "random"), (1500, 16, True, "random")]
        return [(1, 1024, False, "random"), (1, 1024, True, "random"), (3072, 1024, False, "random"),
                (2048, 1024, True, "random"), (4096, 1024, False, "max"), (1000, 1024, False, "random"),
                (self.small_n, 1024, True, "random"), (5000, 1024, False, "random"),
                ((1 << 22) + 77, 1024, False, "random")]

    def shared(self, threads: int) -> dict:
        return {"buf": ((2, threads), np.uint32)}


class BrentKung(TileScan):
    """02_brent_kung's tile: two elements a thread, a tile of 2048 on the GPU (4 to 32 on the simulator)."""

    per_thread = 2
    py_threads = (2, 4, 8, 16)
    small_n = 3000  # the sanitizers' case: two tiles, the second ragged
    barrier_cause = ("every level of the up-sweep and of the down-sweep reads what the level before wrote: a barrier "
                     "before each level (the first one after the loads), and one after the down-sweep before the "
                     "stores; or, with every barrier there, two threads of one level touch the same cell: a "
                     "level's threads each read and write their own cells, idx = (t + 1) * 2 * stride - 1 and "
                     "idx - stride (up) or idx + stride (down)")

    def rows(self, py: bool) -> list[tuple]:
        if py:
            return [(1, 4, False, "random"), (1, 2, True, "random"), (32, 4, False, "random"),
                    (64, 8, True, "random"), (96, 16, False, "max"), (13, 4, False, "random"),
                    (37, 8, True, "random"), (100, 16, False, "random"), (1500, 16, True, "random")]
        return [(1, 1024, False, "random"), (1, 1024, True, "random"), (6144, 1024, False, "random"),
                (4096, 1024, True, "random"), (8192, 1024, False, "max"), (2000, 1024, False, "random"),
                (self.small_n, 1024, True, "random"), (10001, 1024, False, "random"),
                ((1 << 22) + 333, 1024, False, "random")]

    def shared(self, threads: int) -> dict:
        return {"s": ((2 * threads,), np.uint32)}
