"""grayscale's exercises: the 1-D kernel (one thread per pixel) and the 2-D mapping. The problems the
check runs (harness/programs/exercise.py says what each part is); declared in grayscale.py's RECORD."""

from __future__ import annotations

from functools import cache

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed


def _gs():
    from harness.programs import grayscale  # this program's own module (it imports this file for its RECORD)

    return grayscale


def _variants(r, g, b, rounding: bool = True) -> dict:
    """The grey bytes of float32 planes r, g, b as the ways of rounding the weighted sum that are not the
    lab's give them (the lab's: float32, each step rounded, ((R*r + G*g) + B*b), then truncated)."""
    gs = _gs()
    r64, g64, b64 = (np.asarray(c, dtype=np.float64) for c in (r, g, b))
    w64 = [np.float64(w) for w in (gs.CR, gs.CG, gs.CB)]
    # fmaf(B, b, fmaf(R, r, G*g)) and fmaf(B, b, fmaf(G, g, R*r)), the compiler's contractions of the sum
    # (float32 products of a byte are exact in float64, so one float64 operation then a rounding is a fma)
    fused = (w64[0] * r64 + (gs.CG * g).astype(np.float64)).astype(np.float32)
    fused = (w64[2] * b64 + fused.astype(np.float64)).astype(np.float32)
    fused2 = (w64[1] * g64 + (gs.CR * r).astype(np.float64)).astype(np.float32)
    fused2 = (w64[2] * b64 + fused2.astype(np.float64)).astype(np.float32)
    ways = {
        "float64 arithmetic (the weights or the sum in double precision)":
            [np.floor(0.2989 * r64 + 0.5870 * g64 + 0.1140 * b64), (w64[0] * r64 + w64[1] * g64) + w64[2] * b64],
        "a fused multiply-add (fmaf, or a*b + c contracted by the compiler)": [fused, fused2],
        "the sum in another order": [(gs.CB * b + gs.CG * g) + gs.CR * r, gs.CR * r + (gs.CG * g + gs.CB * b),
                                     (gs.CR * r + gs.CB * b) + gs.CG * g],
    }
    if rounding:  # half the pixels: any random picture shows it
        lab = (gs.CR * r + gs.CG * g) + gs.CB * b
        ways["rounding to the nearest byte, not truncating"] = [np.floor(lab.astype(np.float64) + 0.5),
                                                                        np.round(lab)]  # halves up, or to even
    return ways


@cache
def _rounding_edge_table() -> dict:
    """{way: (3, m) pixels whose grey byte that way of rounding changes}, from all 2^24 pixels (once a
    process): a reordered sum changes about 1 pixel in a million, too few for random pictures to hold
    any, or a random draw to be sure of. Only sums within 1e-3 of a whole number can change their byte
    (every way is within a few float32 steps of the lab's), so the ways are computed on those alone."""
    gs = _gs()
    v = np.arange(256, dtype=np.float32)
    rg = (gs.CR * v[:, None] + gs.CG * v[None, :]).ravel()  # (r, g) pairs, r major
    bb = gs.CB * v
    near = []
    for lo in range(0, rg.size, 4096):
        y = rg[lo:lo + 4096, None] + bb[None, :]
        frac = y - np.floor(y)
        k = np.flatnonzero((frac < 1e-3) | (frac > 1 - 1e-3))
        near.append(k + lo * 256)
    px = np.concatenate(near)
    r, g, b = ((px >> s) & 0xFF for s in (16, 8, 0))
    planes = [c.astype(np.float32) for c in (r, g, b)]
    want = ((gs.CR * planes[0] + gs.CG * planes[1]) + gs.CB * planes[2]).astype(np.uint8)
    found = {}
    for name, ways in _variants(*planes, rounding=False).items():
        apart = np.zeros(want.size, dtype=bool)
        for w in ways:
            apart |= w.astype(np.uint8) != want
        found[name] = np.stack([r[apart], g[apart], b[apart]]).astype(np.uint8)
    return found


def _rounding_edge_pixels(rng: np.random.Generator, per: int = 40) -> np.ndarray:
    """(3, m) pixels whose grey byte changes when the weighted sum is not rounded exactly as the
    reference rounds it: `per` of each other way of rounding it (float64, a fused multiply-add, another
    order), drawn from every such pixel."""
    picks = []
    for px in _rounding_edge_table().values():
        picks.append(px[:, rng.permutation(px.shape[1])[:per]])
    return np.concatenate(picks, axis=1)


class Grayscale(kit.Problem):
    """RGB planes to grey bytes. Every byte is a legal grey value, so each case runs with two poisons."""

    two_poisons = True
    two_d = False

    # The CUDA track's launch is fixed by the entry point (256 threads, 16x16 blocks); the Python track's
    # cases use other blocks too, so an index or bound that holds only for one block size fails.
    def _block(self, bs):
        return tuple(bs) if self.two_d else (int(bs), 1)

    def _ragged(self, h, w, bs):
        bx, by = self._block(bs)
        return (h * w) % bx != 0 if not self.two_d else (h % by or w % bx) != 0

    def _exact_multi(self, h, w, bs):
        bx, by = self._block(bs)
        return not self._ragged(h, w, bs) and (h * w > bx if not self.two_d else (h > by or w > bx))

    def _shapes(self, track: str, rng) -> list:
        std = (16, 16) if self.two_d else 256
        if track != "python":
            other = wide = tall = std
        elif self.two_d:
            other, wide, tall = std, (32, 8), (8, 32)
        else:
            other, wide, tall = int(rng.choice([64, 128, 512])), 128, 64
        shapes = [(1, 1, std), (1, 7, std), (13, 17, std), (16, 32, std), (32, 48, std),
                  (32, 64, wide), (31, 61, tall), (100, 201, std)]
        shapes += [] if track == "python" else [(2003, 3001, std)]
        shapes.append((int(rng.integers(5, 60)), int(rng.integers(5, 90)), other))
        return shapes

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        std = (16, 16) if self.two_d else 256

        def label(h, w, bs):
            return f"{h}x{w}" + ("" if bs == std else f" with blocks of {'x'.join(map(str, bs)) if self.two_d else bs}")

        out = kit.made(self._shapes(track, rng), label, lambda h, w, bs: {"h": h, "w": w, "block": bs}, self._ragged,
                       self._exact_multi, lambda h, w, bs: h == 31, seed)
        n = len(out)
        out.append(Case("8x40 pixels whose byte changes with the rounding (float64, a fused multiply-add, another "
                        "order of the sum)", {"h": 8, "w": 40, "block": std, "edge": True}, seed=n,
                        ragged=bool(self._ragged(8, 40, std)), run=seed))
        out.append(Case("the lab's test picture 64x96", {"h": 64, "w": 96, "block": std, "picture": True}, seed=n + 1,
                        ragged=bool(self._ragged(64, 96, std)), exact_multi=bool(self._exact_multi(64, 96, std)),
                        run=seed))
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
        bx, by = self._block(case.params.get("block", (16, 16) if self.two_d else 256))
        if self.two_d:
            return kit.two_d_tail(h, w, by, bx)
        return np.arange(h * w) >= (h * w // bx) * bx

    def out_facts(self, case: Case, out: np.ndarray, ref: np.ndarray) -> dict:
        """Where the values say more than which bytes are wrong: the right bytes in the wrong places
        (the same bytes, moved: the output's index is not the pixel's), or bytes one off the lab's that
        another way of rounding the weighted sum gives (the rounding, not the mapping)."""
        out, ref = np.asarray(out).ravel(), np.asarray(ref).ravel()
        wrong = out != ref
        if not wrong.any():
            return {}
        if np.array_equal(np.sort(out), np.sort(ref)):
            h, w = case.params["h"], case.params["w"]
            return {"misplaced": "transposed" if np.array_equal(out, ref.reshape(h, w).T.ravel()) else "moved"}
        if np.abs(out.astype(np.int16) - ref.astype(np.int16)).max() > 1:
            return {}
        x = self.inputs(case)["x"].reshape(3, -1).astype(np.float32)
        # every way that gives these bytes: a picture may hold only pixels where two ways agree
        return {"rounding": [name for name, ways in _variants(*x).items()
                             if any(np.array_equal(v.astype(np.uint8), out) for v in ways)]}

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        moved = {r.get("misplaced") for r in bad}
        if None not in moved:
            where = "out[r * w + c] for the pixel at row r, column c" if self.two_d else "out[i] for pixel i"
            if moved == {"transposed"}:
                return (f"every byte is right, and the output is transposed (column-major): each grey byte goes to "
                        f"{where}, the same index as its red byte in x")
            return (f"every byte is right, in the wrong place: each grey byte goes to {where}, the same index as "
                    f"its red byte in x")
        if any(r.get("rounding") is None for r in bad):
            return None
        common = [name for name in bad[0]["rounding"] if all(name in r["rounding"] for r in bad)]
        how = f"the bytes are those of {common[0]}" if len(common) == 1 else \
            "every wrong byte is one off the lab's: the weighted sum is rounded another way"
        return (f"{how}: the grey byte is the float32 sum ((0.2989 * r + 0.5870 * g) + 0.1140 * b), each product and "
                f"sum rounded to float32 in that order, no fused multiply-add, then truncated (_grey / grey_u8 do it)")

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        h, w = case.params["h"], case.params["w"]
        bx, by = self._block(case.params.get("block", (16, 16) if self.two_d else 256))
        out = kit.poisoned(h * w, np.uint8, alt)
        x = inp["x"].ravel().copy()
        x.setflags(write=False)  # the input, const in the CUDA kernel: a thread that writes it fails at its line
        if self.two_d:
            sim.blk_kernel2d(fn, sim.dim3(kit.cdiv(w, bx), kit.cdiv(h, by)), sim.dim3(bx, by), x, out, h, w)
        else:
            sim.blk_kernel(fn, kit.cdiv(h * w, bx), bx, x, out, h * w)
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
