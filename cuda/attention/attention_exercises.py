"""attention's exercise: flash attention's online softmax (the running max, the rescaled sum and
output). The problem the check runs (harness/programs/exercise.py says what each part is); declared in
attention.py's RECORD."""

from __future__ import annotations

import math

import numpy as np

from harness.programs import exercise as kit
from harness.programs.exercise import Case, Speed


def _at():
    from harness.programs import attention  # this program's own module (it imports this file for its RECORD)

    return attention


class FlashSoftmax(kit.Problem):
    """softmax(q k^T / sqrt(D)) v per slab, float32 on the GPU (64 query rows a block), float64 on the
    simulator (4 rows, 4-key tiles)."""

    order_checked = True
    nan_cause = ("an exponent overflowed to inf (every exponent needs the running max subtracted), or "
                 "exp(-inf - -inf) is NaN (alpha must be 0 while the running max is still -inf)")
    ragged_cause = ("only S that are not a multiple of the block's rows fail (S that are, with several blocks, pass): "
                    "look at the masking of keys past S and the rows past S")

    @property
    def tolerance(self) -> float:
        return _at().TOLERANCE

    def cases(self, track: str, seed: int) -> list[Case]:
        rng = kit.cases_rng(seed)
        py = track == "python"
        br = 4 if py else 64
        # Wide: scores that climb by `wide` (natural log units) from the first key to the last, more than
        # exp overflows by (709 in float64, 88.7 in float32): without the running max, or with a max that
        # stops following the tiles, an exponent overflows.
        shapes = ([(2, 1, 4, False, 0), (2, 5, 4, False, 0), (2, 8, 4, False, 0), (1, 13, 8, False, 0),
                   (2, 12, 8, True, 0), (2, 13, 8, True, 0), (1, 9, 4, True, 0), (1, 11, 4, False, 1500),
                   (1, 12, 8, True, 1500)] if py else
                  [(2, 1, 32, False, 0), (2, 63, 64, False, 0), (2, 128, 64, False, 0), (3, 65, 32, True, 0),
                   (2, 256, 32, True, 0), (2, 200, 64, False, 0), (1, 1031, 128, True, 0), (8, 2048, 64, False, 0),
                   (2, 300, 64, False, 150), (1, 256, 128, True, 150)])
        shapes.append((int(rng.integers(1, 3)), int(rng.integers(2, 30 if py else 400)), 4 if py else 64,
                       bool(rng.integers(0, 2)), 0))
        return kit.made(shapes,
                        lambda bh, s, d, c, w: f"BH={bh} S={s} D={d}" + (" causal" if c else "")
                        + (f" scores climbing by {w}" if w else ""),
                        lambda bh, s, d, c, w: {"bh": bh, "S": s, "D": d, "causal": c, "wide": w},
                        lambda bh, s, d, c, w: s % br, lambda bh, s, d, c, w: s % br == 0 and s > br,
                        lambda bh, s, d, c, w: s == 65, seed, wide=lambda bh, s, d, c, w: w > 0)

    def inputs(self, case: Case) -> dict:
        p, rng = case.params, kit.rng(case)
        shape = (p["bh"], p["S"], p["D"])
        q, k, v = (rng.standard_normal(shape) for _ in range(3))
        if p.get("wide"):
            # q·k·scale gains a * g * (j / S) / sqrt(D) = wide * j / S along one direction u: the scores of
            # every row climb by `wide` from the first key to the last.
            u = rng.standard_normal(p["D"])
            u /= np.linalg.norm(u)
            a = math.sqrt(p["wide"] * math.sqrt(p["D"]))
            q = q + a * u
            k = k + (a * np.arange(p["S"]) / p["S"])[None, :, None] * u
        return {"q": q.astype(np.float32), "k": k.astype(np.float32), "v": v.astype(np.float32)}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return _at().reference(inp["q"], inp["k"], inp["v"], causal=case.params["causal"]).ravel()

    def facts(self, case: Case) -> dict:
        return {"wide": case.wide}

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        if good and all(r.get("wide") for r in bad):
            return ("only the cases whose scores climb far along the keys fail: exp overflows there: subtract the "
                    "running max (updated at every tile) from every exponent, and rescale what was summed under the "
                    "old max")
        return None

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        bh, S, D = case.params["bh"], case.params["S"], case.params["D"]
        q, k, v = (inp[x].astype(np.float64) for x in ("q", "k", "v"))
        out = kit.poisoned((bh, S, D), np.float64)
        br = bc = 4
        sim.launch(fn, sim.dim3(kit.cdiv(S, br), bh), sim.dim3(br), q, k, v, out, S, D, 1.0 / math.sqrt(D),
                   bool(case.params["causal"]), br, bc, shared={"k": ((bc, D), np.float64), "v": ((bc, D), np.float64)})
        return out.ravel()

    def run_cuda(self, mod, case: Case, inp: dict, alt: bool = False) -> dict:
        bh, S, D = case.params["bh"], case.params["S"], case.params["D"]
        return kit.cuda_outputs(mod, {x: inp[x] for x in ("q", "k", "v")}, {"out": (bh * S * D, np.float32, False)},
                                lambda d: mod.exercise_run(d["q"], d["k"], d["v"], d["out"], bh, S, D,
                                                           1.0 / math.sqrt(D), int(case.params["causal"]), None))

    def speed(self) -> Speed:
        bh, s, d = 64, 4096, 64
        return Speed({"bh": bh, "S": s, "D": d, "causal": False}, "fp32", 4.0 * bh * s * s * d)

    def timing_launch(self, mod, params: dict):
        dev, close = kit.dev_buffers()
        bh, S, D = params["bh"], params["S"], params["D"]
        q, k, v, o = (dev(bh * S * D, np.float32, 0x3C) for _ in range(4))
        return kit.prepared(lambda s: mod.exercise_run(q, k, v, o, bh, S, D, 1.0 / math.sqrt(D), 0, s), close)
