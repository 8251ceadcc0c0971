"""mandelbrot's exercises: the escape-time loop of one pixel, and a zoom into a region worth looking
at. The problems the check runs (harness/programs/exercise.py says what each part is); declared in
mandelbrot.py's RECORD."""

from __future__ import annotations

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed

FULL = (-2.0, 1.0, -1.5, 1.5)


def _mb():
    from harness.programs import mandelbrot  # this program's own module (it imports this file for its RECORD)

    return mandelbrot


def _counts(p: dict, view, dt=np.float32, strict: bool = True) -> np.ndarray:
    """The escape counts the kernel gives with its coordinates from `view` (the float32 x0, span_x,
    y0, span_y it is passed) in arithmetic `dt`, escaping at |z|^2 > 4 (`strict`) or >= 4: the lab's
    kernel, and the ways of getting it wrong that its output can be matched against."""
    w, h, iters = p["width"], p["height"], p["iters"]
    x0, sx, y0, sy = (dt(v) for v in view)
    cr = np.broadcast_to(((sx * np.arange(w, dtype=dt)) / dt(w) + x0)[None, :], (h, w)).ravel()
    ci = np.broadcast_to(((sy * np.arange(h, dtype=dt)) / dt(h) + y0)[:, None], (h, w)).ravel()
    return _mb().escape_counts(cr, ci, iters, dt, strict)


class Mandelbrot(kit.Problem):
    """Escape counts (uint32) in float32, 16x16 blocks over (width, height); exact. The Python track
    also runs two cases with 32x8 and 8x32 blocks, so an index that holds only for square blocks of 16
    fails (the CUDA track's launch is the entry point's, 16x16)."""

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        zoom = (-0.7530, -0.7390, 0.0960, 0.1100)
        # |z|^2 lands on exactly 4 at c = -2 (z: 0, -2, 2, 2, ...: it never escapes) and at c = -2i (escapes
        # after 2 steps): a full view with an even height has c = -2 on its first column; the square
        # (-2, 2, -2, 2) at 32x32 has both.
        edge = (-2.0, 2.0, -2.0, 2.0)
        x0 = float(rng.uniform(-1.9, 0.2))
        y0 = float(rng.uniform(-1.2, 1.0))
        span = float(rng.uniform(0.05, 0.6))
        fresh = (round(x0, 6), round(x0 + span, 6), round(y0, 6), round(y0 + span, 6))
        sq = (16, 16)
        sizes = [(1, 1, 50, FULL, sq), (17, 13, 64, FULL, sq), (48, 32, 64, FULL, sq), (32, 32, 40, edge, sq),
                 (40, 33, 100, FULL, sq), (32, 32, 200, zoom, sq),
                 (int(rng.integers(9, 41)), int(rng.integers(9, 41)), 80, fresh, sq)]
        sizes += [(64, 16, 50, FULL, (32, 8)), (24, 40, 60, FULL, (8, 32))] if track == "python" else \
            [(1021, 767, 256, FULL, sq), (1024, 768, 256, FULL, sq)]
        names = {FULL: "", zoom: " (zoomed)", edge: " (|z|^2 = 4 exactly at c = -2 and c = -2i)",
                 fresh: f" region {fresh}"}

        def label(w, h, it, r, bs):
            return f"{w}x{h} iters={it}" + names[r] + ("" if bs == sq else f" with blocks of {bs[0]}x{bs[1]}")

        return kit.made(sizes, label, lambda w, h, it, r, bs: {"width": w, "height": h, "iters": it, "region": r,
                                                               "block": bs},
                        lambda w, h, it, r, bs: w % bs[0] or h % bs[1],
                        lambda w, h, it, r, bs: w % bs[0] == 0 == h % bs[1] and (w > bs[0] or h > bs[1]),
                        lambda w, h, it, r, bs: w == 17, seed)

    def inputs(self, case: Case) -> dict:
        return {}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        p = case.params
        return _mb().reference(p["width"], p["height"], p["iters"], p["region"], np.float32).ravel()

    @staticmethod
    def _bs(p) -> tuple:
        return tuple(p.get("block", (16, 16)))

    def tail(self, case: Case) -> np.ndarray:
        bx, by = self._bs(case.params)
        return kit.two_d_tail(case.params["height"], case.params["width"], by, bx)

    def out_facts(self, case: Case, out: np.ndarray, ref: np.ndarray) -> dict:
        """What the wrong counts say: counts wrong only where the orbit never escapes (the loop's length),
        every escaping pixel's count off by the same one step (where the test or the count is), or the
        counts another arithmetic or escape test gives."""
        p = case.params
        out = np.asarray(out).ravel().astype(np.int64)
        ref = np.asarray(ref).ravel().astype(np.int64)
        wrong = out != ref
        if not wrong.any() or kit.is_poison(np.asarray(out, dtype=np.uint32)).any():
            return {}
        # One case can fit several readings (a small view where one point is a step off, deep in its orbit,
        # fits both "one fewer" and "rounding"; a reordered sum can give float64's counts on a few points):
        # the case lists every kind it fits, exact matches first, and the pattern takes the one every failing
        # case fits.
        view = self._view(p)
        kinds, extra = [], {}
        for name, dt, strict in (("float64", np.float64, True), ("escape at >= 4", np.float32, False)):
            if np.array_equal(out, _counts(p, view, dt, strict).astype(np.int64)):
                kinds.append(name)
        if (ref[wrong] == p["iters"]).all():
            kinds.append("inside")
            extra.update(got=int(out[wrong][0]), iters=int(p["iters"]))
        esc = ref < p["iters"]
        d = np.unique(out[esc] - ref[esc])
        if d.size == 1 and abs(int(d[0])) == 1:
            kinds.append("one more" if d[0] > 0 else "one fewer")
        if np.count_nonzero(wrong) <= max(2, wrong.size // 50) and (ref[wrong] > 8).all():
            kinds.append("rounding")  # a few points deep in the orbits: the last bit of some operation
        return {"counts": kinds[0], "kinds": kinds, **extra} if kinds else {}

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        fits = [r.get("kinds") or ([r["counts"]] if r.get("counts") else []) for r in bad]
        common = set(fits[0]).intersection(*fits[1:]) if fits else set()
        if not common:
            return None
        kind = next(k for k in fits[0] if k in common)  # several fit every case: the first case's order
        if kind == "float64":
            return ("the counts are those of float64 arithmetic: compute in the kernel's dtype (dt = type(x0), "
                    "float in CUDA), so each operation rounds as the GPU's float32 does")
        if kind == "escape at >= 4":
            return ("the counts are those of an escape test |z|^2 >= 4: a point with |z|^2 exactly 4 has not "
                    "escaped yet (c = -2 never does): stop only when x*x + y*y > 4")
        if kind == "rounding":
            return ("only a few points differ, each near the set's edge, where the orbit magnifies a difference "
                    "in the last bit: round every operation as the lab does, in the kernel's dtype and in this "
                    "order: xx = x*x, yy = y*y, escape when xx + yy > 4, xy = x*y, y = (xy + xy) + ci, "
                    "x = (xx - yy) + cr (no reordering, no complex numbers or float64 in between)")
        if kind == "inside":
            r = next(r for r in bad if "got" in r)
            return (f"only the points that never escape are wrong (got {r['got']}, expected {r['iters']}): the loop "
                    f"runs exactly max_iters steps and n counts each one (a for loop's variable stops at max_iters "
                    f"- 1; `n <= max_iters` runs one step too many)")
        return (f"every point that escapes gets {kind} step than the lab's count: n counts the steps z -> z^2 + c "
                f"taken from z = 0 before |z|^2 > 4 is seen; test |z|^2 first, then step, then count")

    @staticmethod
    def _view(p):
        t = np.float32
        x0, x1, y0, y1 = (t(v) for v in p["region"])
        return x0, t(x1 - x0), y0, t(y1 - y0)

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        p = case.params
        w, h = p["width"], p["height"]
        bx, by = self._bs(p)
        out = kit.poisoned(w * h, np.uint32)
        sim.blk_kernel2d(fn, sim.dim3(kit.cdiv(w, bx), kit.cdiv(h, by)), sim.dim3(bx, by), out, w, h, p["iters"],
                         *self._view(p))
        return out

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        p = case.params
        w, h = p["width"], p["height"]
        view = [float(v) for v in self._view(p)]
        return kit.cuda_outputs(mod, {}, {"out": (w * h, np.uint32, False)},
                                lambda d: mod.exercise_run(d["out"], w, h, p["iters"], *view, None))

    def speed(self) -> Speed:
        # Instruction-bound: 8 FP32 instructions per iteration of 01_naive's loop (the bench's count).
        w = h = 1024
        it = 256
        total = float(_mb().reference(w, h, it, FULL, np.float32).astype(np.int64).sum())
        return Speed({"width": w, "height": h, "iters": it, "region": FULL}, "fp32_inst", 8.0 * total)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        w, h, it = params["width"], params["height"], params["iters"]
        view = [float(v) for v in self._view(params)]
        o = dev(w * h, np.uint32)
        return kit.prepared(lambda s: mod.exercise_run(o, w, h, it, *view, s), close)


ZOOM_SIZE, ZOOM_ITERS = 192, 256
ZOOM_MAX_SPAN = 0.1  # a zoom: at most 1/30 of the default view's 3 units
ZOOM_MIN_SHARE = 0.5  # pixels neither escaping at once (count <= 2) nor reaching max_iters
ZOOM_MIN_LEVELS = 24  # distinct counts among the pixels: a picture, not two flat colours
ZOOM_MAX_ASPECT = 4.0  # width to height (or height to width): a picture, not a sliver
ZOOM_MIN_STEPS = 16  # float64 steps between neighbouring pixels: coordinates that still differ


class Zoom(kit.ValueProblem):
    """The learner's REGION, judged with the lab's reference at 192x192, 256 iterations."""

    @staticmethod
    def _misread(region) -> str:
        """Why four numbers that make no region as (x0, x1, y0, y1) may be one written in another order:
        corners as (x0, y0, x1, y1), or a centre and a size (cx, cy, w, h); "" when neither fits."""
        try:
            a, b, c, d = (float(v) for v in region)
        except (TypeError, ValueError, OverflowError):
            return ""
        if 0 < c - a <= ZOOM_MAX_SPAN and 0 < d - b <= ZOOM_MAX_SPAN:
            return (f": read as corners (x0, y0, x1, y1) it is a region; ZOOM_REGION is (x0, x1, y0, y1), the left "
                    f"and right edges, then the bottom and top: ({a}, {c}, {b}, {d})")
        if 0 < c <= ZOOM_MAX_SPAN and 0 < d <= ZOOM_MAX_SPAN:
            return (f": read as a centre and a size (cx, cy, w, h) it is a region; ZOOM_REGION is (x0, x1, y0, y1), "
                    f"the left and right edges, then the bottom and top: ({a - c / 2}, {a + c / 2}, {b - d / 2}, "
                    f"{b + d / 2})")
        return ""

    def verdict(self, region) -> tuple[bool, str, dict]:
        mb = _mb()
        try:
            x0, x1, y0, y1 = mb.parse_region(region)
        except OverflowError:  # an integer too large for a float
            raise ValueError(f"region must be four finite numbers (x0, x1, y0, y1), got {str(region)[:80]}") from None
        except ValueError as e:
            raise ValueError(f"{e}{self._misread(region)}") from None
        facts = {"region": (x0, x1, y0, y1)}
        if max(x1 - x0, y1 - y0) > ZOOM_MAX_SPAN * (1 + 1e-9):
            return False, (f"the region is {x1 - x0:.3g} wide and {y1 - y0:.3g} high: zoom in until both are at "
                           f"most {ZOOM_MAX_SPAN}" + self._misread(region)), facts
        w, h = x1 - x0, y1 - y0
        if max(w / h, h / w) > ZOOM_MAX_ASPECT:
            return False, (f"the region is {w:.3g} wide and {h:.3g} high: a sliver, not a picture; make its width "
                           f"and height within {ZOOM_MAX_ASPECT:g}x of each other"), facts
        ulp = max(np.spacing(abs(v)) for v in (x0, x1, y0, y1))
        if min(w, h) / ZOOM_SIZE < ZOOM_MIN_STEPS * ulp:
            return False, (f"the region is {w:.3g} wide and {h:.3g} high: too small for float64, neighbouring "
                           f"pixels get the same coordinates; zoom out"), facts
        counts = mb.reference(ZOOM_SIZE, ZOOM_SIZE, ZOOM_ITERS, (x0, x1, y0, y1), np.float64)
        at_once = float(np.mean(counts <= 2))
        inside = float(np.mean(counts >= ZOOM_ITERS))
        share = 1.0 - at_once - inside
        levels = int(np.unique(counts).size)
        facts.update(share=share, at_once=at_once, inside=inside, levels=levels)
        if share < ZOOM_MIN_SHARE:
            where = ("most of it escapes at once: it lies outside the set; move towards the boundary"
                     if at_once > inside else
                     "most of it never escapes: it lies inside the set; move towards the boundary")
            return False, (f"only {share:.0%} of the pixels are interesting (need {ZOOM_MIN_SHARE:.0%}): {where}"), facts
        if levels < ZOOM_MIN_LEVELS:
            return False, (f"only {levels} distinct escape counts (need {ZOOM_MIN_LEVELS}): a flat picture; pick a "
                           f"region closer to the boundary"), facts
        return True, f"{share:.0%} of the pixels are interesting, {levels} distinct escape counts", facts
