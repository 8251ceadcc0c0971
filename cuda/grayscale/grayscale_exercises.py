"""grayscale's exercises: the 1-D kernel (one thread per pixel) and the 2-D mapping. The problems the
check runs (harness/programs/exercise.py says what each part is); declared in grayscale.py's RECORD."""

from __future__ import annotations

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed


def _gs():
    from harness.programs import grayscale  # this program's own module (it imports this file for its RECORD)

    return grayscale


def _rounding_edge_pixels(rng: np.random.Generator, draws: int = 1 << 21) -> np.ndarray:
    """(3, m) pixels whose grey byte changes when the weighted sum is not rounded exactly as the
    reference rounds it (float64 weights or arithmetic, or a fused multiply-add): about 1 pixel in
    60000 of random ones, too few for random pictures to hold any."""
    gs = _gs()
    x = rng.integers(0, 256, size=(3, draws), dtype=np.uint8)
    r, g, b = (x[c].astype(np.float32) for c in range(3))
    want = ((gs.CR * r + gs.CG * g) + gs.CB * b).astype(np.uint8)
    r64, g64, b64 = (x[c].astype(np.float64) for c in range(3))
    w64 = [np.float64(w) for w in (gs.CR, gs.CG, gs.CB)]
    apart = (np.floor(0.2989 * r64 + 0.5870 * g64 + 0.1140 * b64).astype(np.uint8) != want)
    apart |= ((w64[0] * r64 + w64[1] * g64) + w64[2] * b64).astype(np.uint8) != want
    fused = (w64[0] * r64 + (gs.CG * g).astype(np.float64)).astype(np.float32)
    fused = (w64[2] * b64 + fused.astype(np.float64)).astype(np.float32)
    apart |= fused.astype(np.uint8) != want
    return x[:, apart]


class Grayscale(kit.Problem):
    """RGB planes to grey bytes. Every byte is a legal grey value, so each case runs with two poisons."""

    two_poisons = True
    two_d = False

    def _ragged(self, h, w):
        return (h * w) % 256 != 0 if not self.two_d else (h % 16 or w % 16) != 0

    def _exact_multi(self, h, w):
        return not self._ragged(h, w) and (h * w > 256 if not self.two_d else (h > 16 or w > 16))

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        shapes = [(1, 1), (1, 7), (13, 17), (16, 32), (32, 48), (31, 61), (100, 201)]
        shapes += [] if track == "python" else [(2003, 3001)]
        shapes.append((int(rng.integers(5, 60)), int(rng.integers(5, 90))))
        out = kit.made(shapes, lambda h, w: f"{h}x{w}", lambda h, w: {"h": h, "w": w}, self._ragged, self._exact_multi,
                       lambda h, w: h == 31, seed)
        n = len(out)
        out.append(Case("8x40 pixels where float32 and float64 weights round apart", {"h": 8, "w": 40, "edge": True},
                        seed=n, ragged=bool(self._ragged(8, 40)), run=seed))
        out.append(Case("the lab's test picture 64x96", {"h": 64, "w": 96, "picture": True}, seed=n + 1,
                        ragged=bool(self._ragged(64, 96)), exact_multi=bool(self._exact_multi(64, 96)), run=seed))
        return out

    def inputs(self, case: Case) -> dict:
        p, rng = case.params, kit.rng(case)
        if p.get("picture"):
            gs = _gs()
            return {"x": gs.planar(gs.test_image(p["h"], p["w"]))}
        x = rng.integers(0, 256, size=(3, p["h"] * p["w"]), dtype=np.uint8)
        if p.get("edge"):
            pick = _rounding_edge_pixels(rng)[:, :x.shape[1]]
            x[:, :pick.shape[1]] = pick
            x = x[:, rng.permutation(x.shape[1])]
        return {"x": x.reshape(3, p["h"], p["w"])}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return _gs().reference(inp["x"]).ravel()

    def tail(self, case: Case) -> np.ndarray:
        h, w = case.params["h"], case.params["w"]
        if self.two_d:
            return kit.two_d_tail(h, w, 16, 16)
        return np.arange(h * w) >= (h * w // 256) * 256

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        h, w = case.params["h"], case.params["w"]
        out = kit.poisoned(h * w, np.uint8, alt)
        if self.two_d:
            sim.blk_kernel2d(fn, sim.dim3(kit.cdiv(w, 16), kit.cdiv(h, 16)), sim.dim3(16, 16), inp["x"].ravel(), out,
                             h, w)
        else:
            sim.blk_kernel(fn, kit.cdiv(h * w, 256), 256, inp["x"].ravel(), out, h * w)
        return out

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        h, w = case.params["h"], case.params["w"]
        n = h * w

        def call(d):
            if self.two_d:
                mod.exercise_run(d["x"], n, d["out"], h, w, None)
            else:
                mod.exercise_run(d["x"], n, d["out"], n, None)

        return kit.cuda_outputs(mod, {"x": inp["x"].ravel()}, {"out": (n, np.uint8, alt)}, call)

    def speed(self) -> Speed:
        h, w = 4096, 4096
        return Speed({"h": h, "w": w}, "memcpy", 4.0 * h * w)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        h, w = params["h"], params["w"]
        n = h * w
        x, o = dev(3 * n, np.uint8, 0x7F), dev(n, np.uint8)
        if self.two_d:
            return kit.prepared(lambda s: mod.exercise_run(x, n, o, h, w, s), close)
        return kit.prepared(lambda s: mod.exercise_run(x, n, o, n, s), close)


class Grayscale2D(Grayscale):
    """The same picture through a 2-D grid of 16x16 blocks: both edges overhang."""

    two_d = True
