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
        return {"mirror": bool(case.params["sym"] or case.params["r"] == 0), "control": bool(case.params["sym"])}

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
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


def _made_1d(rows, b, small, seed):
    """Cases of 1-D rows (n, r, sym) on blocks or tiles of b outputs; `small`: the sanitizers' (n, r)."""
    return kit.made([(*row, b) for row in rows], _label_1d, lambda n, r, s, b: {"n": n, "r": r, "sym": s, "b": b},
                    lambda n, r, s, b: n % b, lambda n, r, s, b: n % b == 0 and n > b,
                    lambda n, r, s, b: (n, r) == small, seed)


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
        rows.append((int(rng.integers(2, 200 if py else 5000)), int(rng.integers(0, 9)), False))
        return _made_1d(rows, PY_THREADS_1D if py else CU_THREADS_1D, (1000, 3), seed)

    def tail(self, case: Case) -> np.ndarray | None:
        n, b = case.params["n"], case.params["b"]
        return np.arange(n) >= (n // b) * b

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        n, r = case.params["n"], case.params["r"]
        out = kit.poisoned(n, np.float32)
        sim.blk_kernel(fn, kit.cdiv(n, PY_THREADS_1D), PY_THREADS_1D, inp["x"], inp["f"], r, out, n)
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
        return None

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
        rows.append((int(rng.integers(2, 200 if py else 20000)), int(rng.integers(0, 9)), False))
        return _made_1d(rows, threads * outs if py else CU_TILE_1D, (4099, 3), seed)

    def tail(self, case: Case) -> np.ndarray | None:
        n, b = case.params["n"], case.params["b"]
        return np.arange(n) >= (n // b) * b

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        n, r = case.params["n"], case.params["r"]
        threads, outs = PY_TILED_1D
        out = kit.poisoned(n, np.float32)
        sim.launch(fn, kit.cdiv(n, threads * outs), threads, inp["x"], inp["f"], r, out, n, outs,
                   shared={"tile": ((threads * outs + 2 * r,), np.float32)})
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
        shapes.append((int(rng.integers(2, hi)), int(rng.integers(2, hi)), int(rng.integers(0, 5)), False))
        return kit.made([(*s, th, tw) for s in shapes], _label_2d,
                        lambda h, w, r, s, th, tw: {"h": h, "w": w, "r": r, "sym": s, "th": th, "tw": tw},
                        lambda h, w, r, s, th, tw: h % th or w % tw,
                        lambda h, w, r, s, th, tw: h % th == 0 == w % tw and (h > th or w > tw),
                        lambda h, w, r, s, th, tw: (h, w) == (67, 45), seed)

    def tail(self, case: Case) -> np.ndarray | None:
        p = case.params
        return kit.two_d_tail(p["h"], p["w"], p["th"], p["tw"])

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        h, w, r = case.params["h"], case.params["w"], case.params["r"]
        bx, by, rows = PY_TILED_2D
        out = kit.poisoned((h, w), np.float32)
        sim.launch(fn, sim.dim3(kit.cdiv(w, bx), kit.cdiv(h, by * rows)), sim.dim3(bx, by), inp["x"], inp["f"], r,
                   out, h, w, rows, shared={"tile": ((by * rows + 2 * r, bx + 2 * r), np.float32)})
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
