"""matmul's exercises: the naive kernel (one thread per output element) and the tiled one through
shared memory. The problems the check runs (harness/programs/exercise.py says what each part is);
declared in matmul.py's RECORD."""

from __future__ import annotations

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed


def _mm():
    from harness.programs import matmul  # this program's own module (it imports this file for its RECORD)

    return matmul


class Watched(np.ndarray):
    """A poisoned output that notes which elements were stored to (a 1-D array, as the kernels get it):
    an element stored to that still holds the poison was computed from its own unwritten value
    (`out[i] += x` with out assumed to start at 0), which `settled` tells apart from one never written."""

    written: np.ndarray | None = None

    def __setitem__(self, key, value):
        w = getattr(self, "written", None)
        if w is not None and self.ndim == 1 and w.shape == self.shape:
            w[np.arange(self.size)[key]] = True
        super().__setitem__(key, value)


def watched(n: int, dtype) -> Watched:
    out = kit.poisoned(n, dtype).view(Watched)
    out.written = np.zeros(n, dtype=bool)
    return out


# A NaN no arithmetic makes and no poison holds: an element stored to with the poison's own value.
_READ_POISON = 0x7FE5A5A7


def settled(out: Watched) -> np.ndarray:
    """The plain output the check judges: an element stored to with the poison still in it holds another
    NaN (a NaN output, whose cause nan_cause names), not the poison (an element never written)."""
    a = np.array(out, copy=True).view(np.ndarray)
    if out.written is not None:
        stale = out.written & kit.is_poison(a)
        a.view(np.uint32)[stale] = _READ_POISON
    return a


class Matmul(kit.Problem):
    """C = A·B in float32, 16x16 blocks with x along the columns of C (the Python track also launches one
    case in 8x4 blocks: the kernel reads its block's shape from blockdim, so a fixed 16, or blockdim.x
    for the rows, shows there)."""

    nan_cause = ("the inputs are finite, so a NaN comes from a value the kernel read before anything stored it: "
                 "most often the output's own starting value (out[...] += ... assumes out starts at 0, and it starts "
                 "as the check's poison): sum into a local variable and store it once with =")

    @property
    def tolerance(self) -> float:
        return _mm().TOL

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        # (m, n, k, block width, block height): non-square blocks, a whole number of them on both axes with
        # m != n (Python track; the CUDA track's entry point launches 16x16).
        shapes = [(1, 1, 1), (3, 5, 7), (16, 16, 16), (32, 48, 20), (17, 13, 11), (33, 31, 29)]
        shapes += [(16, 24, 5, 8, 4)] if track == "python" else [(1023, 1031, 517)]
        shapes.append(tuple(int(v) for v in rng.integers(2, 40, size=3)))
        rows = [s if len(s) == 5 else (*s, 16, 16) for s in shapes]
        return kit.made(rows, lambda m, n, k, bx, by: f"{m}x{k} @ {k}x{n}" + ("" if bx == by == 16 else
                                                                                  f", {bx}x{by} blocks"),
                        lambda m, n, k, bx, by: {"m": m, "n": n, "k": k, "bx": bx, "by": by},
                        lambda m, n, k, bx, by: m % by or n % bx,
                        lambda m, n, k, bx, by: m % by == 0 == n % bx and (m > by or n > bx),
                        lambda m, n, k, bx, by: m == 17, seed)

    def facts(self, case: Case) -> dict:
        return {"odd_block": (case.params.get("bx", 16), case.params.get("by", 16)) != (16, 16)}

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        if all(r.get("odd_block") for r in bad):
            return ("only the case launched in blocks other than 16x16 fails: take the block's shape from blockdim "
                    "(blockdim.y for the rows, blockdim.x for the columns), never a fixed 16")
        return None

    def inputs(self, case: Case) -> dict:
        p, rng = case.params, kit.rng(case)
        return {"a": rng.standard_normal((p["m"], p["k"])).astype(np.float32),
                "b": rng.standard_normal((p["k"], p["n"])).astype(np.float32)}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return _mm().reference(inp["a"], inp["b"]).ravel()

    def tail(self, case: Case) -> np.ndarray | None:
        p = case.params
        return kit.two_d_tail(p["m"], p["n"], p.get("by", 16), p.get("bx", 16))

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        m, n, k = case.params["m"], case.params["n"], case.params["k"]
        bx, by = case.params.get("bx", 16), case.params.get("by", 16)
        out = watched(m * n, np.float32)
        sim.blk_kernel2d(fn, sim.dim3(kit.cdiv(n, bx), kit.cdiv(m, by)), sim.dim3(bx, by), inp["a"].ravel(),
                         inp["b"].ravel(), out, m, n, k)
        return settled(out)

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        m, n, k = case.params["m"], case.params["n"], case.params["k"]
        return kit.cuda_outputs(mod, {"a": inp["a"], "b": inp["b"]}, {"out": (m * n, np.float32, False)},
                                lambda d: mod.exercise_run(m, n, k, d["a"], d["b"], d["out"], None))

    def speed(self) -> Speed:
        s = 2048
        return Speed({"m": s, "n": s, "k": s, "tw": 16}, "fp32", 2.0 * s ** 3)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        m, n, k = params["m"], params["n"], params["k"]
        a, b, c = dev(m * k, np.float32, 0x3C), dev(k * n, np.float32, 0x3C), dev(m * n, np.float32)
        return kit.prepared(lambda s: mod.exercise_run(m, n, k, a, b, c, s), close)


class MatmulTiled(Matmul):
    """The same product through shared-memory tiles (16x16 on the GPU, 4x4 on the simulator): the
    tiles, the two barriers, the zero-filled ragged edges."""

    order_checked = True
    unit = "tile"
    nan_cause = ("a tile cell was read before any thread stored it: the barrier after the loads, or a tile element "
                 "some thread never stores (0 outside the matrices)")
    ragged_cause = ("only sizes that are not a multiple of the tile fail, in their partial tiles (sizes that are, with "
                    "several tiles, pass): look at the bounds check and the zero-filled ragged edges")

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        py = track == "python"
        tw = 4 if py else 16
        # Python: k shorter than one tile with several rows (a row of A read with the tile's width as its
        # length shows only there), and two cases in 8x8 tiles (the kernel takes tw: a fixed 4 shows there).
        shapes = ([(1, 1, 1), (4, 4, 4), (3, 5, 7), (7, 6, 3), (8, 8, 12), (8, 8, 6), (9, 6, 13), (17, 13, 11),
                   (16, 16, 16, 8), (10, 13, 19, 8)] if py else
                  [(1, 1, 1), (16, 16, 16), (3, 5, 7), (32, 32, 48), (32, 32, 40), (17, 13, 11), (33, 31, 29),
                   (1023, 1031, 517)])
        shapes.append(tuple(int(v) for v in rng.integers(2, 5 * tw, size=3)))
        rows = [s if len(s) == 4 else (*s, tw) for s in shapes]
        # The sanitizers' case spans two tiles of k: racecheck sees a missing barrier after the products
        # only when a second tile is loaded over the first.
        return kit.made(rows, lambda m, n, k, t: f"{m}x{k} @ {k}x{n}" + ("" if t == tw else f", {t}x{t} tiles"),
                        lambda m, n, k, t: {"m": m, "n": n, "k": k, "tw": t},
                        lambda m, n, k, t: m % t or n % t or k % t,
                        lambda m, n, k, t: m % t == n % t == k % t == 0 and max(m, n) > t,
                        lambda m, n, k, t: m == 33, seed)

    def tail(self, case: Case) -> np.ndarray | None:
        p = case.params
        return None if p["k"] % p["tw"] else kit.two_d_tail(p["m"], p["n"], p["tw"], p["tw"])

    def facts(self, case: Case) -> dict:
        return {"multi": case.params["k"] > case.params["tw"], "tile": case.params["tw"]}

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        if track == "python" and all(r.get("tile", 4) != 4 for r in bad):
            return ("only the cases in 8x8 tiles fail (every 4x4 one passes): the tile's width is the parameter tw "
                    "(the tiles are tw x tw, the products run over range(tw)), never a fixed 4")
        if track == "python" and any(r.get("nan") for r in bad):
            return ("a shared tile cell no thread stored was read (NaN, the simulator's fill), whatever order the "
                    "threads run in: every thread stores its element of both tiles at every step, 0 outside the "
                    "matrices")
        return None

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        if good and all(r.get("multi") for r in bad):
            return ("only products longer than one tile fail: the sum across tiles: one running sum for the whole "
                    "loop (set to 0 once, before it), each tile loaded from its own offset along k"
                    + ("" if track == "python" else "; a missing barrier would show in racecheck above"))
        return None

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        m, n, k, tw = (case.params[x] for x in ("m", "n", "k", "tw"))
        out = kit.poisoned(m * n, np.float32)
        sim.launch(fn, sim.dim3(kit.cdiv(n, tw), kit.cdiv(m, tw)), sim.dim3(tw, tw), inp["a"].ravel(),
                   inp["b"].ravel(), out, m, n, k, tw,
                   shared={"ms": ((tw, tw), np.float32), "ns": ((tw, tw), np.float32)})
        return out
