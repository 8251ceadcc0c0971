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


class Matmul(kit.Problem):
    """C = A·B in float32, 16x16 blocks with x along the columns of C."""

    @property
    def tolerance(self) -> float:
        return _mm().TOL

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        shapes = [(1, 1, 1), (3, 5, 7), (16, 16, 16), (32, 48, 20), (17, 13, 11), (33, 31, 29)]
        shapes += [] if track == "python" else [(1023, 1031, 517)]
        shapes.append(tuple(int(v) for v in rng.integers(2, 40, size=3)))
        return kit.made(shapes, lambda m, n, k: f"{m}x{k} @ {k}x{n}", lambda m, n, k: {"m": m, "n": n, "k": k},
                        lambda m, n, k: m % 16 or n % 16, lambda m, n, k: m % 16 == 0 == n % 16 and max(m, n) > 16,
                        lambda m, n, k: m == 17, seed)

    def inputs(self, case: Case) -> dict:
        p, rng = case.params, kit.rng(case)
        return {"a": rng.standard_normal((p["m"], p["k"])).astype(np.float32),
                "b": rng.standard_normal((p["k"], p["n"])).astype(np.float32)}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return _mm().reference(inp["a"], inp["b"]).ravel()

    def tail(self, case: Case) -> np.ndarray | None:
        return kit.two_d_tail(case.params["m"], case.params["n"], 16, 16)

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        m, n, k = case.params["m"], case.params["n"], case.params["k"]
        out = kit.poisoned(m * n, np.float32)
        sim.blk_kernel2d(fn, sim.dim3(kit.cdiv(n, 16), kit.cdiv(m, 16)), sim.dim3(16, 16), inp["a"].ravel(),
                         inp["b"].ravel(), out, m, n, k)
        return out

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
        shapes = ([(1, 1, 1), (4, 4, 4), (3, 5, 7), (8, 8, 12), (8, 8, 6), (9, 6, 13), (17, 13, 11)] if py else
                  [(1, 1, 1), (16, 16, 16), (3, 5, 7), (32, 32, 48), (32, 32, 40), (17, 13, 11), (33, 31, 29),
                   (1023, 1031, 517)])
        shapes.append(tuple(int(v) for v in rng.integers(2, 5 * tw, size=3)))
        # The sanitizers' case spans two tiles of k: racecheck sees a missing barrier after the products
        # only when a second tile is loaded over the first.
        return kit.made(shapes, lambda m, n, k: f"{m}x{k} @ {k}x{n}",
                        lambda m, n, k: {"m": m, "n": n, "k": k, "tw": tw},
                        lambda m, n, k: m % tw or n % tw or k % tw,
                        lambda m, n, k: m % tw == n % tw == k % tw == 0 and max(m, n) > tw, lambda m, n, k: m == 33,
                        seed)

    def tail(self, case: Case) -> np.ndarray | None:
        p = case.params
        return None if p["k"] % p["tw"] else kit.two_d_tail(p["m"], p["n"], p["tw"], p["tw"])

    def facts(self, case: Case) -> dict:
        return {"multi": case.params["k"] > case.params["tw"]}

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
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
