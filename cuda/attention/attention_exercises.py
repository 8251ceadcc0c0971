"""attention's exercises: flash attention's online softmax (the running max, the rescaled sum and
output), and the backward's key-block recurrence (dK and dV from the saved log-sum-exp). The problems
the check runs (harness/programs/exercise.py says what each part is); declared in attention.py's RECORD."""

from __future__ import annotations

import math
import re

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
        # exp overflows by (709 in float64, 88.7 in float32), and on the Python track by more than that
        # within one 4-key tile: without the running max, with a max that stops following the tiles, or
        # with one that is not the largest score of the tile, an exponent overflows. A negative `wide`:
        # scores that fall as steeply, so a running max that drops to a later tile's smaller max makes
        # alpha = exp(m - m_new) overflow. Low: every score near -low (past exp's underflow), so a max
        # held at 0 or above leaves every weight 0. Both whole tiles, so that their failure alone is not
        # read as one of the ragged sizes'. The falling case's second tile must sit more than exp's range
        # (88.7) below the first: 400 over two tiles of 64 puts it about 200 below.
        shapes = ([(2, 1, 4, False, 0), (2, 5, 4, False, 0), (2, 8, 4, False, 0), (1, 13, 8, False, 0),
                   (2, 12, 8, True, 0), (2, 13, 8, True, 0), (1, 9, 4, True, 0), (1, 11, 4, False, 4000),
                   (1, 12, 8, True, 4000), (1, 12, 4, False, -4000), (1, 12, 4, True, 0, 1000)] if py else
                  [(2, 1, 32, False, 0), (2, 63, 64, False, 0), (2, 128, 64, False, 0), (3, 65, 32, True, 0),
                   (2, 256, 32, True, 0), (2, 200, 64, False, 0), (1, 1031, 128, True, 0), (8, 2048, 64, False, 0),
                   (2, 300, 64, False, 150), (1, 256, 128, True, 150), (2, 128, 64, False, -400)])
        shapes.append((int(rng.integers(1, 3)), int(rng.integers(2, 30 if py else 400)), 4 if py else 64,
                       bool(rng.integers(0, 2)), 0))
        rows = [s if len(s) == 6 else (*s, 0) for s in shapes]
        return kit.made(rows,
                        lambda bh, s, d, c, w, lo: f"BH={bh} S={s} D={d}" + (" causal" if c else "")
                        + (f" scores climbing by {w}" if w > 0 else f" scores falling by {-w}" if w < 0 else "")
                        + (f" scores all near -{lo}" if lo else ""),
                        lambda bh, s, d, c, w, lo: {"bh": bh, "S": s, "D": d, "causal": c, "wide": w, "low": lo},
                        lambda bh, s, d, c, w, lo: s % br, lambda bh, s, d, c, w, lo: s % br == 0 and s > br,
                        lambda bh, s, d, c, w, lo: s == 65, seed, wide=lambda bh, s, d, c, w, lo: w > 0)

    def inputs(self, case: Case) -> dict:
        p, rng = case.params, kit.rng(case)
        shape = (p["bh"], p["S"], p["D"])
        q, k, v = (rng.standard_normal(shape) for _ in range(3))
        if p.get("wide") or p.get("low"):
            u = rng.standard_normal(p["D"])
            u /= np.linalg.norm(u)
        if p.get("wide"):
            # q·k·scale gains a * g * r_j / sqrt(D) = |wide| * r_j along one direction u, with r_j = j / S
            # (climbing) or (S - 1 - j) / S (falling): every row's scores climb or fall by |wide| across the keys.
            w = p["wide"]
            a = math.sqrt(abs(w) * math.sqrt(p["D"]))
            j = np.arange(p["S"])
            ramp = j / p["S"] if w > 0 else (p["S"] - 1 - j) / p["S"]
            q = q + a * u
            k = k + (a * ramp)[None, :, None] * u
        if p.get("low"):
            # q·k·scale loses low along u (q gains b·u, k loses it): every score near -low.
            b = math.sqrt(p["low"] * math.sqrt(p["D"]))
            q = q + b * u
            k = k - b * u
        return {"q": q.astype(np.float32), "k": k.astype(np.float32), "v": v.astype(np.float32)}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        return _at().reference(inp["q"], inp["k"], inp["v"], causal=case.params["causal"]).ravel()

    def facts(self, case: Case) -> dict:
        w = case.params.get("wide", 0)
        return {"wide": w > 0, "falling": w < 0, "low": bool(case.params.get("low"))}

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        if not good:
            return None
        if all(r.get("falling") for r in bad):
            return ("only the cases whose scores fall far along the keys fail: the running max must never go down: "
                    "m_new = the larger of the running max m and this tile's max (a later tile's smaller max makes "
                    "alpha = exp(m - m_new) overflow)")
        if all(r.get("low") for r in bad):
            return ("only the case whose scores are all far below 0 fails: exp underflows to 0 there: the max "
                    "subtracted must be the scores' own (the running max starts at -inf, never at 0 or above)")
        if all(r.get("wide") for r in bad):
            return ("only the cases whose scores climb far along the keys fail: exp overflows there: subtract from "
                    "every exponent the largest score so far (m_new = the larger of m and the largest of all this "
                    "tile's scores), and rescale what was summed under the old max")
        if all(r.get("wide") or r.get("falling") or r.get("low") for r in bad):
            return ("only the cases whose scores lie far from 0 or spread far along the keys fail: exp overflows or "
                    "underflows there: subtract the running max (the largest score so far, updated at every tile) "
                    "from every exponent, and rescale what was summed under the old max")
        return None

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        bh, S, D = case.params["bh"], case.params["S"], case.params["D"]
        q, k, v = (inp[x].astype(np.float64) for x in ("q", "k", "v"))
        out = kit.poisoned((bh, S, D), np.float64)
        br = bc = 4
        try:
            sim.launch(fn, sim.dim3(kit.cdiv(S, br), bh), sim.dim3(br), q, k, v, out, S, D, 1.0 / math.sqrt(D),
                       bool(case.params["causal"]), br, bc,
                       shared={"k": ((bc, D), np.float64), "v": ((bc, D), np.float64)})
        except OverflowError as e:
            # math.exp raises where numpy's exp gives inf: say what a positive exponent means here (the check
            # quotes the learner's line from the traceback, which re-raising keeps).
            e.args = (f"{e.args[0] if e.args else 'overflow'}: an exponent past exp's range: every exponent must "
                      f"be <= 0: m_new = the larger of m and this tile's largest score (never below m), "
                      f"alpha = exp(m - m_new), p = exp(s - m_new)",)
            raise
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


# "N of M outputs wrong, first at index I": the grader's message for values off beyond the tolerance.
_WRONG_AT = re.compile(r"(\d+) of (\d+) outputs wrong, first at index (\d+)")


class FlashBwd(kit.Problem):
    """FlashAttention-2's backward for dK and dV (attention.flash_bwd_kb), float64 on the simulator: one
    block per block of BWD_BC keys (a thread per key row) and BH, query tiles of BWD_BR rows in shared
    memory. The learner gets q, k, v, dO and what the forward left: L, the log-sum-exp of each query
    row, and delta = rowsum(dO * O), from the lab's float64 forward reference (attention.reference,
    reference_lse). The output is dV, then dK, in one array: a failure whose first wrong element lies
    in the dK half has every dV right, which points at what only dK uses."""

    order_checked = True  # the query tile is shared: a missing barrier shows with the threads reversed
    unit = "tile"
    # float64 on both sides, and the same recurrence: the sums differ by rounding only (~1e-15
    # relative); 1e-9 keeps a wide margin and no real mistake comes near it (a dropped delta or
    # scale, a lost tile or diagonal costs 1e-2 or more).
    tolerance = 1e-9
    nan_cause = ("an exponent overflowed to inf: P = exp(scale * q.k - L) needs the query row's saved "
                 "log-sum-exp L subtracted inside the exp (a raw score past ~709 overflows float64), or a "
                 "shared tile was read before every thread had stored its rows (NaN)")
    ragged_cause = ("only S that are not a multiple of the tiles fail (S that are, with several tiles, pass): "
                    "look at the rows past S: the last tile's queries past S must add nothing, and the last "
                    "block's keys past S must neither add nor be stored")

    def cases(self, track: str, seed: int) -> list[Case]:
        at = _at()
        bc, br = at.BWD_BC, at.BWD_BR
        rng = kit.cases_rng(seed)
        # (BH, S, D, causal, wide): S = 1; several whole key blocks and query tiles (16), causal too;
        # one more than a key block (5) and than a query tile (9); ragged with several of both (13);
        # one tile causal (6). Wide: scores that climb by `wide` (natural log units) from the first
        # key to the last, past exp's range in float64 (709): exp(s) without L overflows.
        shapes = [(2, 1, 4, False, 0), (2, 16, 4, False, 0), (1, 16, 8, True, 0), (2, 5, 8, False, 0),
                  (1, 9, 4, True, 0), (2, 9, 8, False, 0), (1, 13, 4, False, 0), (2, 13, 8, True, 0),
                  (1, 6, 4, True, 0), (1, 11, 4, False, 1500), (1, 12, 8, True, 1500)]
        shapes.append((int(rng.integers(1, 3)), int(rng.integers(2, 30)), int(rng.choice([4, 8])),
                       bool(rng.integers(0, 2)), 0))
        return kit.made(shapes,
                        lambda bh, s, d, c, w: f"BH={bh} S={s} D={d}" + (" causal" if c else "")
                        + (f" scores climbing by {w}" if w else ""),
                        lambda bh, s, d, c, w: {"bh": bh, "S": s, "D": d, "causal": c, "wide": w},
                        lambda bh, s, d, c, w: s % bc or s % br, lambda bh, s, d, c, w: s % br == 0 and s > br,
                        lambda bh, s, d, c, w: False, seed, wide=lambda bh, s, d, c, w: w > 0)

    def inputs(self, case: Case) -> dict:
        at = _at()
        p, rng = case.params, kit.rng(case)
        shape = (p["bh"], p["S"], p["D"])
        q, k, v, do = (rng.standard_normal(shape) for _ in range(4))
        if p.get("wide"):
            # As FlashSoftmax's: q.k.scale gains wide * j / S along one direction u, so every row's scores
            # climb by `wide` from the first key to the last.
            u = rng.standard_normal(p["D"])
            u /= np.linalg.norm(u)
            a = math.sqrt(p["wide"] * math.sqrt(p["D"]))
            q = q + a * u
            k = k + (a * np.arange(p["S"]) / p["S"])[None, :, None] * u
        causal = bool(p["causal"])
        # What the forward leaves for the backward, from the lab's float64 forward reference: the output O
        # (through delta = rowsum(dO * O), FlashAttention-2's preprocessing step) and L.
        o = at.reference(q, k, v, causal=causal)
        return {"q": q, "k": k, "v": v, "do": do, "o": o, "lse": at.reference_lse(q, k, causal=causal),
                "delta": np.sum(do * o, axis=-1)}

    def reference(self, case: Case, inp: dict) -> np.ndarray:
        _, dk, dv = _at().reference_backward(inp["q"], inp["k"], inp["v"], inp["do"], causal=case.params["causal"])
        return np.concatenate([dv.ravel(), dk.ravel()])

    def facts(self, case: Case) -> dict:
        return {"wide": case.wide, "causal": bool(case.params["causal"]), "tiles": case.params["S"] > _at().BWD_BR}

    def first_pattern(self, bad: list[dict], track: str) -> str | None:
        if all(r.get("causal") for r in bad):
            return None  # the non-causal cases pass: pattern() names the causal mask, even where a key the
            #              row never saw overflows exp in a wide case
        if any(r.get("wide") and r.get("nan") for r in bad):
            return ("the cases whose scores climb past exp's range give inf or NaN: P = exp(scale * q.k - L): "
                    "subtract the query row's saved log-sum-exp L inside the exp (L holds the row's max and sum, so "
                    "every exponent is <= 0 when the score is scale * q.k, the scale included)")
        at = [_WRONG_AT.match(r.get("message") or "") for r in bad]
        if all(m and 2 * int(m.group(3)) >= int(m.group(2)) for m in at):
            return ("dV is right in every failing case and dK is wrong (the output is dV, then dK): P is right, so "
                    "look at what only dK uses: dP = dO . v_j, dS = P * (dP - delta) (delta subtracted), and "
                    "dK += scale * dS^T Q (the scale of the scores comes back by the chain rule)")
        return None

    def pattern(self, bad: list[dict], good: list[dict], track: str) -> str | None:
        if all(r.get("causal") for r in bad) and any(not r.get("causal") for r in good):
            return ("only the causal cases fail (every non-causal one passes): look at the causal mask: query i sees "
                    "key j when j <= i, the diagonal included; and at which query tiles a key block visits")
        if all(r.get("tiles") for r in bad) and any(not r.get("tiles") for r in good):
            return ("only the cases with more than one query tile fail (one tile passes): dk and dv are sums over "
                    "every query tile: keep adding into them across the loop, never restart them")
        return None

    def run_python(self, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
        from harness.base import sim

        at = _at()
        bh, S, D = case.params["bh"], case.params["S"], case.params["D"]
        bc, br = at.BWD_BC, at.BWD_BR
        dk, dv = kit.poisoned((bh, S, D), np.float64), kit.poisoned((bh, S, D), np.float64)
        sim.launch(fn, sim.dim3(kit.cdiv(S, bc), bh), sim.dim3(bc), inp["q"], inp["k"], inp["v"], inp["do"],
                   inp["lse"], inp["delta"], dk, dv, S, D, 1.0 / math.sqrt(D), bool(case.params["causal"]), bc, br,
                   shared=at.backward_shared(D, br))
        return np.concatenate([dv.ravel(), dk.ravel()])
