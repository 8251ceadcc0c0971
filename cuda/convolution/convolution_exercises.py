"""convolution's exercises: the naive 1-D kernel (one thread per output, zero padding at both ends),
the tiled 1-D kernel (the input tile and its halo in shared memory, the barrier, the sums from the
tile) and the tiled 2-D kernel (the same with a halo on all four sides). The problems the check runs
(harness/programs/exercise.py says what each part is); declared in convolution.py's RECORD.

Every filter is asymmetric (random taps plus a ramp), so a flipped filter (a textbook convolution
instead of this lab's cross-correlation) gets other answers, except in one control case whose filter
is its own mirror image: a kernel that passes it and a single tap, and fails every asymmetric filter,
applies the taps in reverse order, and the check says so. Inputs are uniform in [-1, 1).

Tolerance: the lab's, ||out - ref|| / ||ref|| <= 1e-5 against the float64 reference. Each output is a
float32 sum of at most 17 (1-D) or 81 (2-D) products, in an order the CUDA compiler may fuse into
FMAs: rounding stays near sqrt(taps) * 2^-24 of the result (below 1e-6), while one missing, extra or
misplaced tap on one output of a million moves the error past 1e-4.
"""

from __future__ import annotations

import inspect

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed

# The Python track's launch shapes: small, so that the cases cross several blocks and radii reach past
# a block's neighbours.
PY_THREADS_1D = 32  # conv1d_naive
PY_TILED_1D = (8, 2)  # conv1d_tiled: threads, outputs a thread (a 16-output tile)
PY_TILED_2D = (8, 2, 4)  # conv2d_tiled: threads in x and y, outputs a thread down a column (an 8x8 tile)
# The CUDA track's: the lab's (convolution.cu).
CU_THREADS_1D = 256
CU_TILE_1D = 2048
CU_TILE_2D = (32, 64)  # columns, rows


class BeforeStart(Exception):
    """An index below 0 into x or out (numpy would count it from the end)."""


class OutReadFirst(Exception):
    """A thread read an element of out that no thread had written yet."""


class TileUnused(Exception):
    """The output is right, but the sums were not taken from the shared tile."""


def _negative(key) -> int | None:
    keys = key if isinstance(key, tuple) else (key,)
    for k in keys:
        if isinstance(k, (int, np.integer)) and int(k) < 0:
            return int(k)
    return None


class _Input(np.ndarray):
    """x on the Python track: an integer index below 0 fails (numpy would wrap it to the other end, where
    a GPU reads before the array), and the elements read are counted by thread and by the barriers it has
    passed (`reads`: {(thread, barriers): elements}; `phase`: [the running thread, its barriers passed])."""

    reads: dict | None = None
    phase: list | None = None

    def __getitem__(self, key):
        k = _negative(key)
        if k is not None:
            raise BeforeStart(f"read x at index {k}, below 0 (numpy would take it from the other end of the array): a "
                              f"neighbour outside the input is zero padding: skip it, or count it as 0")
        got = super().__getitem__(key)
        if self.reads is not None and self.phase is not None:
            where = (self.phase[1], self.phase[0])
            self.reads[where] = self.reads.get(where, 0) + int(np.size(got))
        return got


class _Output(np.ndarray):
    """out on the Python track: reading an element nobody has written yet fails (on a GPU out holds
    whatever was there; here, the check's poison), and so does an index below 0."""

    def _key(self, key, verb: str) -> None:
        k = _negative(key)
        if k is not None:
            raise BeforeStart(f"{verb} out at index {k}, below 0 (numpy would take it from the other end): each "
                              f"thread's output index is its own, 0 .. n-1")

    def __getitem__(self, key):
        self._key(key, "read")
        got = super().__getitem__(key)
        if np.any(kit.is_poison(np.asarray(got, dtype=np.float32).reshape(-1))):
            raise OutReadFirst("read an element of out before any thread wrote it (out += ... or out[i] = out[i] + "
                               "...): out is not zeroed before the launch (on a GPU it holds what was there before): "
                               "sum into a local variable, then store it once")
        return got

    def __setitem__(self, key, value):
        self._key(key, "wrote")
        super().__setitem__(key, value)


def _watched(x: np.ndarray, out: np.ndarray):
    xi = x.view(_Input)
    xi.reads, xi.phase = {}, [0, None]
    return xi, out.view(_Output)


def _phased(fn, phase: list, last: dict):
    """A generator kernel that sets phase to [the barriers the running thread has passed, the thread]
    before each resumption (the simulator interleaves a block's threads at every barrier), and notes in
    `last` how many barriers each thread passed in all."""
    if not inspect.isgeneratorfunction(fn):
        return fn

    def gen(ctx, *args):
        it, k, me = fn(ctx, *args), 0, id(ctx)
        while True:
            phase[0], phase[1] = k, me
            try:
                v = next(it)
            except StopIteration:
                last[me] = k
                return
            k += 1
            yield v
    return gen


def _reads_after_last_barrier(reads: dict, last: dict) -> int:
    """The elements of x read by threads after their last barrier (where the sums are), 0 without one."""
    return sum(n for (me, k), n in reads.items() if k and k == last.get(me))


def _window_facts(wrong: np.ndarray, edge: np.ndarray, seam: np.ndarray | None) -> dict:
    """Where the wrong outputs lie: all of them within reach of the input's ends (`edge`: an output whose
    window reaches the first or last input), or all within reach of a tile's edge or the input's (`seam`);
    `interior`, `middle`: outputs lie elsewhere (and, the case failing no further, are right)."""
    facts = {"edge_only": bool(wrong.any() and not (wrong & ~edge).any()), "interior": bool((~edge).any())}
    if seam is not None:
        facts["seam_only"] = bool(wrong.any() and not (wrong & ~(seam | edge)).any())
        facts["middle"] = bool((~(seam | edge)).any())
    return facts


def _near(pos: np.ndarray, size: int, r: int) -> np.ndarray:
    """Positions within r of either end of 0 .. size-1 (their window reaches the first or last element)."""
    return (pos <= r) | (pos >= size - 1 - r)


def _cv():
    # This program's own module (it imports this file for its RECORD).
    from harness.programs import convolution

    return convolution


def filter_taps(rng: np.random.Generator, dims: int, r: int, sym: bool = False) -> np.ndarray:
    """(2r+1) taps a side. Asymmetric: uniform in [0.25, 1) plus a ramp of +-0.75 across the filter
    (in 2-D unequal along the two axes, so a transposed filter is wrong too), so its mirror image is
    far from it. `sym`: the control case's, its own mirror image (f[::-1], both axes in 2-D)."""
    side = 2 * r + 1
    g = rng.uniform(0.25, 1.0, (side,) * dims)
    if sym:
        return ((g + (g[::-1] if dims == 1 else g[::-1, ::-1])) / 2).astype(np.float32)
    idx = np.indices((side,) * dims) - r
    ramp = 0.75 * (idx[0] if dims == 1 else 0.4 * idx[0] + 0.6 * idx[1]) / max(r, 1)
    return (g + ramp).astype(np.float32)


class _Convolution(kit.Problem):
    """What the three share: inputs, the float64 reference, the tolerance, the flipped-filter pattern."""

    dims = 1

    @property
    def tolerance(self) -> float:
        return _cv().TOL

    def inputs(self, case: Case) -> dict:
        p, rng = case.params, kit.rng(case)
        shape = (p["n"],) if self.dims == 1 else (p["h"], p["w"])
        x = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        return {"x": x, "f": filter_taps(rng, self.dims, p["r"], p["sym"])}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return _cv().reference(inp["x"], inp["f"]).ravel()

    def facts(self, case: Case) -> dict:
        # A single tap is its own mirror image too.
        return {"mirror": bool(case.params["sym"] or case.params["r"] == 0), "control": bool(case.params["sym"]),
                "other_launch": bool(case.params.get("other_launch"))}

    def _wrong(self, out: np.ndarray, ref: np.ndarray) -> np.ndarray:
        o, r_ = np.asarray(out, dtype=np.float64).ravel(), np.asarray(ref, dtype=np.float64).ravel()
        scale = float(np.linalg.norm(r_) / max(1.0, np.sqrt(r_.size))) or 1.0
        with np.errstate(invalid="ignore"):
            return ~(np.abs(o - r_) <= 10 * self.tolerance * scale)

    def _edges(self, case: Case) -> tuple[np.ndarray, np.ndarray | None]:
        """(the outputs whose window reaches the input's ends, those whose window reaches past their
        tile's edge (None for an untiled kernel)), flattened."""
        p = case.params
        r, n = p["r"], p["n"]
        pos = np.arange(n)
        return _near(pos, n, r), None

    def out_facts(self, case: Case, out: np.ndarray, ref: np.ndarray) -> dict:
        if np.asarray(out).size != np.asarray(ref).size or kit.is_poison(np.asarray(out)).any():
            return {}  # elements never written: the grader's own words say more than where they lie
        edge, seam = self._edges(case)
        return _window_facts(self._wrong(out, ref), edge, seam)

    def _place_cause(self, bad: list[dict]) -> str | None:
        """The zero padding when only outputs near the input's ends fail (and outputs away from them are
        right); the halo when only outputs near a tile's edge fail."""
        if all(r.get("edge_only") for r in bad) and any(r.get("interior") for r in bad):
            where = ("a neighbour outside 0 .. n-1" if self.dims == 1 else
                     "a neighbour outside the h x w image (above, below, left or right of it)")
            ends, them = ("ends", "them") if self.dims == 1 else ("border", "it")
            return (f"in every failing case only the outputs within r of the input's {ends} are wrong, and the "
                    f"outputs away from {them} are right: the zero padding: {where} counts as 0 (not clamped to the "
                    f"edge, not wrapped around), and every neighbour inside the input counts")
        if all(r.get("seam_only") for r in bad) and any(r.get("middle") for r in bad):
            return ("in every failing case only outputs within r of a tile's edge are wrong (the tile's middle is "
                    "right): the halo: the tile holds r inputs beyond the block's own on each side, from the "
                    "neighbouring tiles' inputs (0 only outside the input), and each output's window starts r "
                    "cells before it in the tile")
        return None

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        return self._place_cause(bad)

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        if all(r.get("other_launch") for r in bad) and any(not r.get("other_launch") for r in good):
            return ("only the cases launched with another block shape fail (those with the usual shape pass): a "
                    "size of the launch is written as a number: take it from the launch (blockDim, the tile's size, "
                    "the outputs a thread) instead")
        if any(r.get("control") for r in good) and not any(r.get("mirror") for r in bad):
            where = ("tap j goes with x[i - r + j], tap 0 with the leftmost neighbour" if self.dims == 1 else
                     "tap (fy, fx) goes with the input at (y - r + fy, x - r + fx), tap (0, 0) with the upper-left one")
            return (f"only the asymmetric filters fail (the filter that is its own mirror image and the single tap "
                    f"pass): the taps are applied in reverse order: {where} (PMPP's formula, a cross-correlation: "
                    f"the filter is not flipped)")
        return None


def _label_1d(n, r, sym, b):
    return f"n={n} r={r}" + (", a filter that is its own mirror image" if sym else "")


def _label_2d(h, w, r, sym, th, tw):
    return f"{h}x{w} r={r}" + (", a filter that is its own mirror image" if sym else "")


def _made_1d(rows, b, small, seed, outs: int = 1):
    """Cases of 1-D rows (n, r, sym), or (n, r, sym, b), on blocks or tiles of b outputs (`outs` a thread,
    or (n, r, sym, b, outs)); `small`: the sanitizers' (n, r)."""
    full = [tuple(row) + (b, outs)[len(row) - 3:] for row in rows]
    return kit.made(full, lambda n, r, s, b, o: _label_1d(n, r, s, b) + ("" if (b, o) == full[0][3:] else
                                                                         f" ({b // o} threads of {o})"),
                    lambda n, r, s, b, o: {"n": n, "r": r, "sym": s, "b": b, "outs": o,
                                           "other_launch": (b, o) != full[0][3:]},
                    lambda n, r, s, b, o: n % b, lambda n, r, s, b, o: n % b == 0 and n > b,
                    lambda n, r, s, b, o: (n, r) == small, seed)


class Conv1dNaive(_Convolution):
    """01_naive_1d: one thread per output, the taps from global memory (256-thread blocks on the GPU,
    32 on the simulator)."""

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        py = track == "python"
        # One element, and fewer elements than the radius (padding on both sides of every output), whole
        # blocks (several), partial ones, a single tap, the symmetric control and (CUDA) a large case.
        rows = ([(1, 8, False), (5, 8, False), (64, 1, False), (96, 8, False), (37, 0, False), (100, 3, False),
                 (75, 2, True)] if py else
                [(1, 8, False), (5, 8, False), (512, 1, False), (768, 8, False), (300, 0, False), (1000, 3, False),
                 (1000, 2, True), (1_000_003, 8, False)])
        if py:
            # Blocks of other sizes too: an index made with the block's size written as a number passes only
            # the launches of that size.
            rows += [(48, 2, False, 16), (90, 5, False, 64)]
        rows.append((int(rng.integers(2, 200 if py else 5000)), int(rng.integers(0, 9)), False))
        return _made_1d(rows, PY_THREADS_1D if py else CU_THREADS_1D, (1000, 3), seed)

    def tail(self, case: Case) -> np.ndarray | None:
        n, b = case.params["n"], case.params["b"]
        return np.arange(n) >= (n // b) * b

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        n, r, b = case.params["n"], case.params["r"], case.params["b"]
        out = kit.poisoned(n, np.float32)
        x, o = _watched(inp["x"], out)
        sim.blk_kernel(fn, kit.cdiv(n, b), b, x, inp["f"], r, o, n)
        return out

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        n, r = case.params["n"], case.params["r"]
        return kit.cuda_outputs(mod, {"x": inp["x"], "f": inp["f"]}, {"out": (n, np.float32, False)},
                                lambda d: mod.exercise_run(d["x"], d["f"], r, d["out"], n, None))

    def speed(self) -> Speed:
        n = 1 << 24
        return Speed({"n": n, "r": 8}, "memcpy", 8.0 * n)  # the compulsory traffic: x read once, out written once

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        n, r = params["n"], params["r"]
        x, f, out = dev(n, np.float32, 0x3F), dev(2 * r + 1, np.float32, 0x3F), dev(n, np.float32)
        return kit.prepared(lambda s: mod.exercise_run(x, f, r, out, n, s), close)


class _Tiled(_Convolution):
    """The tiled kernels' common part: shared memory (a missing barrier shows in the Python track's
    mirrored thread order), and the filter in constant memory on the CUDA track (loaded once per case
    through the glue's exercise_set_filter)."""

    order_checked = True
    barrier_cause = "the barrier after the loads (the whole tile and its halo stored before any thread sums from it)"
    unit = "tile"
    nan_cause = ("a tile cell was read before any thread stored it: the barrier after the loads, or a cell of the "
                 "tile (the halo, or 0 outside the input) that no thread stores")
    ragged_cause = ("only sizes that are not a multiple of the tile fail, in their partial tiles (sizes that are, with "
                    "several tiles, pass): look at the bounds checks: the loads past the input's end (0 there) and "
                    "the stores of the last, partial tile")

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        if track == "python" and any(r.get("nan") for r in bad):
            return ("a shared tile cell no thread stored was read (NaN, the simulator's fill), whatever order the "
                    "threads run in: the threads together store every cell of the tile, the halo included (0 outside "
                    "the input), before the barrier")
        return self._place_cause(bad)

    def _launch(self, fn, case: Case, inp: dict, out: np.ndarray, grid, block, args: tuple, spec: dict) -> None:
        """Run the kernel on watched x and out with a read-counted tile; a right output whose sums did not
        come from the tile (the tile never read, or x read beyond what the tiles load) fails."""
        from harness.base import sim

        x, o = _watched(inp["x"], out)
        make, reads, _ = kit.read_counted(spec)
        last: dict = {}
        # The contexts stay alive until the launch ends, so id(ctx) names one thread throughout.
        sim.launch(_phased(fn, x.phase, last), grid, block, x, inp["f"], case.params["r"], o, *args, shared=make)
        if not np.isfinite(out).all() or self._wrong(out, self.reference(case, inp)).any():
            return  # a wrong output is the first thing to fix
        after = _reads_after_last_barrier(x.reads, last)
        if reads["tile"][0] == 0 or after:
            how = ("the tile was never read" if reads["tile"][0] == 0 else
                   f"x was read {after} times after the last barrier, where the sums are")
            raise TileUnused(f"the output is right, but the sums did not come from the shared tile: {how}: each "
                             f"block loads its inputs and halo into the tile once, and after the barrier every sum "
                             f"reads its neighbours from the tile")

    def _cuda_run(self, mod, inp: dict, n_out: int, r: int, run) -> dict:
        def call(d):
            mod.exercise_set_filter(d["f"], r)
            run(d)

        return kit.cuda_outputs(mod, {"x": inp["x"], "f": inp["f"]}, {"out": (n_out, np.float32, False)}, call)


class Conv1dTiled(_Tiled):
    """03_tiled_1d: the tile of 2048 inputs and its halo in shared memory, 8 outputs a thread (the
    simulator: 8 threads of 2 outputs, a 16-output tile)."""

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        py = track == "python"
        threads, outs = PY_TILED_1D
        # The radius reaches across half a Python tile (r = 8 on 16 outputs); the CUDA cases end inside
        # the last thread's 8 outputs (4099, 5000) and in its float4 stores (6144), and the sanitizers'
        # case spans three tiles.
        rows = ([(1, 8, False), (5, 8, False), (48, 1, False), (64, 8, False), (37, 0, False), (100, 3, False),
                 (45, 2, True)] if py else
                [(1, 8, False), (5, 8, False), (4096, 1, False), (6144, 8, False), (3000, 0, False), (4099, 3, False),
                 (5000, 2, True), (1_000_003, 8, False)])
        if py:
            # Other launch shapes too (threads, outputs a thread): a loop bound or a stride written as a number
            # passes only the launches of that shape.
            rows += [(48, 5, False, 12, 3), (41, 8, False, 16, 4)]
        rows.append((int(rng.integers(2, 200 if py else 20000)), int(rng.integers(0, 9)), False))
        return _made_1d(rows, threads * outs if py else CU_TILE_1D, (4099, 3), seed, outs if py else 8)

    def tail(self, case: Case) -> np.ndarray | None:
        n, b = case.params["n"], case.params["b"]
        return np.arange(n) >= (n // b) * b

    def _edges(self, case: Case) -> tuple[np.ndarray, np.ndarray | None]:
        edge, _ = super()._edges(case)
        p = case.params
        within = np.arange(p["n"]) % p["b"]
        return edge, _near(within, p["b"], p["r"])

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        n, r, b, outs = case.params["n"], case.params["r"], case.params["b"], case.params["outs"]
        out = kit.poisoned(n, np.float32)
        self._launch(fn, case, inp, out, kit.cdiv(n, b), b // outs, (n, outs), {"tile": ((b + 2 * r,), np.float32)})
        return out

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        n, r = case.params["n"], case.params["r"]
        return self._cuda_run(mod, inp, n, r, lambda d: mod.exercise_run(d["x"], r, d["out"], n, None))

    def speed(self) -> Speed:
        n = 1 << 24
        return Speed({"n": n, "r": 8}, "memcpy", 8.0 * n)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        n, r = params["n"], params["r"]
        x, f, out = dev(n, np.float32, 0x3F), dev(2 * r + 1, np.float32, 0x3F), dev(n, np.float32)
        mod.exercise_set_filter(f, r)
        return kit.prepared(lambda s: mod.exercise_run(x, r, out, n, s), close)


class Conv2dTiled(_Tiled):
    """06_tiled_2d: a 64-row, 32-column output tile and its halo in shared memory, 32x8 threads of 8
    outputs down a column (the simulator: 8x2 threads of 4, an 8x8 tile)."""

    dims = 2

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        py = track == "python"
        bx, by, rows_ = PY_TILED_2D
        th, tw = (by * rows_, bx) if py else (CU_TILE_2D[1], CU_TILE_2D[0])
        # One pixel, an image smaller than the radius, whole tiles in both directions and in one, partial
        # tiles on the right, at the bottom and both, a single tap, the symmetric control, and (CUDA) a
        # large case.
        shapes = ([(1, 1, 4, False), (3, 2, 4, False), (16, 16, 1, False), (8, 24, 4, False), (13, 21, 2, False),
                   (24, 11, 0, False), (20, 13, 4, False), (19, 13, 1, True)] if py else
                  [(1, 1, 4, False), (3, 2, 4, False), (128, 64, 1, False), (64, 96, 4, False), (67, 45, 2, False),
                   (100, 33, 0, False), (200, 70, 3, False), (70, 40, 1, True), (1000, 2001, 4, False)])
        hi = 30 if py else 300
        shape = [(bx, by, rows_)] * len(shapes)
        if py:
            # Another launch shape (4x2 threads of 3 outputs, a 6x4 tile, whole tiles and partial ones): a
            # stride or a tile width written as a number passes only the launches of that shape.
            shapes += [(12, 20, 2, False), (14, 9, 3, False)]
            shape += [(4, 2, 3)] * 2
        shapes.append((int(rng.integers(2, hi)), int(rng.integers(2, hi)), int(rng.integers(0, 5)), False))
        shape.append((bx, by, rows_))
        return kit.made([(*s, *k) for s, k in zip(shapes, shape)],
                        lambda h, w, r, s, bx_, by_, o: _label_2d(h, w, r, s, 0, 0) + (
                            "" if (bx_, by_, o) == (bx, by, rows_) or not py else
                            f" ({bx_}x{by_} threads of {o} rows)"),
                        lambda h, w, r, s, bx_, by_, o: {"h": h, "w": w, "r": r, "sym": s, "bx": bx_, "by": by_,
                                                         "rows": o, "other_launch": (bx_, by_, o) != (bx, by, rows_),
                                                         **({"th": by_ * o, "tw": bx_} if py else {"th": th, "tw": tw})},
                        lambda h, w, r, s, bx_, by_, o: h % (by_ * o if py else th) or w % (bx_ if py else tw),
                        lambda h, w, r, s, bx_, by_, o: (h % (by_ * o if py else th) == 0 == w % (bx_ if py else tw)
                                                         and (h > (by_ * o if py else th) or w > (bx_ if py else tw))),
                        lambda h, w, r, s, bx_, by_, o: (h, w) == (67, 45), seed)

    def tail(self, case: Case) -> np.ndarray | None:
        p = case.params
        return kit.two_d_tail(p["h"], p["w"], p["th"], p["tw"])

    def _edges(self, case: Case) -> tuple[np.ndarray, np.ndarray | None]:
        p = case.params
        h, w, r, th, tw = p["h"], p["w"], p["r"], p["th"], p["tw"]
        ys, xs = np.arange(h)[:, None], np.arange(w)[None, :]
        edge = _near(ys, h, r) | _near(xs, w, r)
        seam = _near(ys % th, th, r) | _near(xs % tw, tw, r)
        return edge.ravel(), seam.ravel()

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        p = case.params
        h, w, r = p["h"], p["w"], p["r"]
        bx, by, rows = p["bx"], p["by"], p["rows"]
        out = kit.poisoned((h, w), np.float32)
        self._launch(fn, case, inp, out, sim.dim3(kit.cdiv(w, bx), kit.cdiv(h, by * rows)), sim.dim3(bx, by),
                     (h, w, rows), {"tile": ((by * rows + 2 * r, bx + 2 * r), np.float32)})
        return out.ravel()

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        h, w, r = case.params["h"], case.params["w"], case.params["r"]
        return self._cuda_run(mod, inp, h * w, r, lambda d: mod.exercise_run(d["x"], r, d["out"], h, w, None))

    def speed(self) -> Speed:
        side = 4096
        return Speed({"h": side, "w": side, "r": 2}, "memcpy", 8.0 * side * side)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        h, w, r = params["h"], params["w"], params["r"]
        x, f, out = dev(h * w, np.float32, 0x3F), dev((2 * r + 1) ** 2, np.float32, 0x3F), dev(h * w, np.float32)
        mod.exercise_set_filter(f, r)
        return kit.prepared(lambda s: mod.exercise_run(x, r, out, h, w, s), close)
