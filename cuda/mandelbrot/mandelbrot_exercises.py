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


class Mandelbrot(kit.Problem):
    """Escape counts (uint32) in float32, 16x16 blocks over (width, height); exact."""

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
        sizes = [(1, 1, 50, FULL), (17, 13, 64, FULL), (48, 32, 64, FULL), (32, 32, 40, edge), (40, 33, 100, FULL),
                 (32, 32, 200, zoom), (int(rng.integers(9, 41)), int(rng.integers(9, 41)), 80, fresh)]
        sizes += [] if track == "python" else [(1021, 767, 256, FULL), (1024, 768, 256, FULL)]
        names = {FULL: "", zoom: " (zoomed)", edge: " (|z|^2 = 4 exactly at c = -2 and c = -2i)",
                 fresh: f" region {fresh}"}
        return kit.made(sizes, lambda w, h, it, r: f"{w}x{h} iters={it}" + names[r],
                        lambda w, h, it, r: {"width": w, "height": h, "iters": it, "region": r},
                        lambda w, h, it, r: w % 16 or h % 16,
                        lambda w, h, it, r: w % 16 == 0 == h % 16 and max(w, h) > 16, lambda w, h, it, r: w == 17,
                        seed)

    def inputs(self, case: Case) -> dict:
        return {}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        p = case.params
        return _mb().reference(p["width"], p["height"], p["iters"], p["region"], np.float32).ravel()

    def tail(self, case: Case) -> np.ndarray:
        return kit.two_d_tail(case.params["height"], case.params["width"], 16, 16)

    @staticmethod
    def _view(p):
        t = np.float32
        x0, x1, y0, y1 = (t(v) for v in p["region"])
        return x0, t(x1 - x0), y0, t(y1 - y0)

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        p = case.params
        w, h = p["width"], p["height"]
        out = kit.poisoned(w * h, np.uint32)
        sim.blk_kernel2d(fn, sim.dim3(kit.cdiv(w, 16), kit.cdiv(h, 16)), sim.dim3(16, 16), out, w, h, p["iters"],
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

    def verdict(self, region) -> tuple[bool, str, dict]:
        mb = _mb()
        x0, x1, y0, y1 = mb.parse_region(region)
        facts = {"region": (x0, x1, y0, y1)}
        if max(x1 - x0, y1 - y0) > ZOOM_MAX_SPAN * (1 + 1e-9):
            return False, (f"the region is {x1 - x0:.3g} wide and {y1 - y0:.3g} high: zoom in until both are at "
                           f"most {ZOOM_MAX_SPAN}"), facts
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
