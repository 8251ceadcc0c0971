"""attention's exercises, tried with wrong solutions: each must fail naming its cause (and not naming
another), and a right solution written differently must pass (tests/wrong_solutions.py makes the
tests from the tables). flash_softmax: both tracks (the CUDA track's runs need a GPU; here only their
patches are checked to apply); flash_bwd: the Python track, the only one it has.
Each row: (what the mistake is, [(old, new), ...] over the lab's solution, text the thing to fix
must hold, text it must not hold)."""

from __future__ import annotations

import wrong_solutions
from wrong_solutions import BARRIER, BOUNDS

WRONG = {("flash_softmax", "python"): [
    ("no running max", [("        alpha = math.exp(m - m_new) if m != -np.inf else 0.0\n        p = np.exp(s - m_new)\n",
                         "        alpha = 1.0\n        p = np.exp(s)\n")], "exp overflows", BOUNDS),
    ("the running max never stored", [("        m = m_new\n", "")], "outputs wrong", BOUNDS),
    ("output not rescaled", [("        o = alpha * o + p @ vs\n", "        o = o + p @ vs\n")], "outputs wrong", BOUNDS),
    ("sum not rescaled", [("        lsum = alpha * lsum + p.sum()\n", "        lsum = lsum + p.sum()\n")], "outputs wrong", BOUNDS),
    ("keys past S not masked", [("        s[(j >= S) | ((j > i) if causal else False)] = -np.inf\n",
                                 "        s[(j > i) if causal else np.zeros(bc, dtype=bool)] = -np.inf\n")],
     "masking of keys past S", None),
    ("causal mask keeps out the diagonal", [("((j > i) if causal else False)", "((j >= i) if causal else False)")],
     "outputs", BOUNDS),
    # scores that fall by more than exp's range from one tile to the next: a max that follows the tile's own
    # overflows alpha (math.exp raises at the line; numpy's exp gives inf, named by the falling cases)
    ("the max of the tile alone (math.exp)", [("        m_new = max(m, s.max())\n", "        m_new = s.max()\n")],
     "OverflowError: math range error: an exponent past exp's range", BOUNDS),
    ("the max of the tile alone (np.exp)", [("        m_new = max(m, s.max())\n        alpha = math.exp(m - m_new)",
                                            "        m_new = s.max()\n        alpha = np.exp(m - m_new)")],
     "the running max must never go down", BOUNDS),
    # scores that climb past exp's range within one tile: a max taken from one key of the tile overflows
    ("the max from the tile's first key", [("        m_new = max(m, s.max())\n", "        m_new = max(m, s[0])\n")],
     "climb far along the keys", BOUNDS),
    # scores all near -1000: a max held at 0 leaves every weight 0 (0/0)
    ("the max held at 0 or above", [("        m_new = max(m, s.max())\n", "        m_new = max(m, s.max(), 0.0)\n")],
     "all far below 0", BOUNDS),
    ("the tile's max kept as the running max", [("        m = m_new\n", "        m = s.max()\n")], "outputs wrong", BOUNDS),
    ("alpha inverted", [("math.exp(m - m_new)", "math.exp(m_new - m)")], "outputs wrong", BOUNDS),
    ("the max stored before alpha", [("        m_new = max(m, s.max())\n", "        m_new = max(m, s.max())\n        m = m_new\n"),
                                     ("        m = m_new\n    if i < S:", "    if i < S:")], "outputs wrong", BOUNDS),
    ("alpha from the tile's max", [("math.exp(m - m_new) if", "math.exp(m - s.max()) if")], "outputs wrong", BOUNDS),
    ("base-2 exponents", [("math.exp(m - m_new)", "2.0 ** (m - m_new)"), ("np.exp(s - m_new)", "np.exp2(s - m_new)")],
     "outputs wrong", BOUNDS),
    ("p under the old max", [("np.exp(s - m_new)", "np.exp(s - m)")], "NaN or infinite", BOUNDS),
    ("the output from the keys", [("p @ vs", "p @ ks")], "outputs wrong", BOUNDS),
    ("the output rescaled twice", [("        o = alpha * o + p @ vs\n", "        o = alpha * (alpha * o) + p @ vs\n")],
     "outputs wrong", BOUNDS),
], ("flash_softmax", "cuda"): [
    ("output not rescaled", [("            for (int c = 0; c < OC; ++c) o[r][c] *= alpha;\n",
                              "            for (int c = 0; c < OC; ++c) o[r][c] *= 1.0f;\n")], "outputs wrong", BOUNDS),
    ("row sum over one lane", [("            for (int off = 8; off > 0; off >>= 1) rs += __shfl_xor_sync(0xffffffffu, rs, off);\n", "")],
     "outputs wrong", BOUNDS),
    ("sum not rescaled", [("            l[r] = l[r] * alpha + rs;\n", "            l[r] = l[r] + rs;\n")], "outputs wrong", BOUNDS),
    ("no running max", [("            const float alpha = exp2f(m[r] - m_new);\n", "            const float alpha = 1.0f;\n"),
                        ("                const float p = exp2f(s[r][c] - m_new);\n", "                const float p = exp2f(s[r][c]);\n")],
     "the running max subtracted", BOUNDS),
    ("keys past S not masked", [("if (j >= S || (causal && j > i)) s[r][c] = -INFINITY;", "if (causal && j > i) s[r][c] = -INFINITY;")],
     "masking of keys past S", None),
    ("causal mask keeps out the diagonal", [("if (j >= S || (causal && j > i))", "if (j >= S || (causal && j >= i))")],
     "outputs", BOUNDS),
    # the falling case: a later tile's smaller max makes alpha overflow float32
    ("the max of the tile alone", [("            const float m_new = fmaxf(m[r], mt);\n", "            const float m_new = mt;\n")],
     "the running max must never go down", BOUNDS),
    ("the tile's max kept as the running max", [("            m[r] = m_new;\n", "            m[r] = mt;\n")], "outputs", BOUNDS),
    ("alpha inverted", [("            const float alpha = exp2f(m[r] - m_new);\n", "            const float alpha = exp2f(m_new - m[r]);\n")],
     "outputs", BOUNDS),
    ("p in base e", [("                const float p = exp2f(s[r][c] - m_new);\n", "                const float p = expf(s[r][c] - m_new);\n")],
     "outputs wrong", BOUNDS),
], ("flash_bwd", "python"): [
    # every case fails; the wide ones overflow to inf, which names L
    ("P from exp(S) without L", [("        p = np.exp(s - ls)\n", "        p = np.exp(s)\n")],
     "subtract the query row's saved log-sum-exp L", BOUNDS),
    # dV stays right: the cause named is what only dK uses
    ("dS without subtracting delta", [("        ds = p * (dp - dl)\n", "        ds = p * dp\n")],
     "dV is right in every failing case and dK is wrong", BARRIER),
    ("the scale forgotten in dK", [("        dkj = dkj + scale * (ds @ qs)\n", "        dkj = dkj + ds @ qs\n")],
     "dV is right in every failing case and dK is wrong", BARRIER),
    # P·dO instead of Pᵀ·dO: the product sums over the head dimension, not the queries; numpy refuses
    # the shapes (a tile of 8 queries, D = 4) and the check quotes the line
    ("dV from P, not its transpose", [("        dvj = dvj + p @ dos\n", "        dvj = dvj + dos @ p\n")],
     "`dvj = dvj + dos @ p`: ValueError", BOUNDS),
    ("causal mask without the diagonal", [("((i < j) if causal else False)", "((i <= j) if causal else False)")],
     "only the causal cases fail", BOUNDS),
    ("no barrier after the tile load", [("        yield  # the whole tile is loaded\n", "")],
     "the barrier after the loads", None),
    ("no barrier before the next tile's load", [
        ("        yield  # the previous tile is fully consumed before it is overwritten\n", "")],
     "the barrier after the products", None),
    # the last block's threads past S treated as any other: their keys accumulated, then stored past the end
    ("keys past S not stopped", [("        if j >= S:\n            continue  # a key past S: its thread still reaches "
                                  "every barrier, and computes nothing\n", ""),
                                 ("    if j < S:\n        dk[bh, j] = dkj\n        dv[bh, j] = dvj\n",
                                  "    dk[bh, j] = dkj\n    dv[bh, j] = dvj\n")], "the bounds check", None),
    ("the sums restarted each query tile", [("        dvj = dvj + p @ dos\n", "        dvj = p @ dos\n"),
                                            ("        dkj = dkj + scale * (ds @ qs)\n", "        dkj = scale * (ds @ qs)\n")],
     "only the cases with more than one query tile fail", BARRIER),
    # L belongs to the query row; the key's own row's L is a different number (no overflow, plain wrong values)
    ("L of the key's row", [("        p = np.exp(s - ls)\n", "        p = np.exp(s - lse[bh, j])\n")],
     "outputs wrong", BARRIER),
    # a mask that lets a key the row never saw through: in the wide causal case exp(s - L) overflows, yet only
    # the causal cases fail, so the mask is named, not L
    ("the causal mask reversed", [("((i < j) if causal else False)", "((j < i) if causal else False)")],
     "only the causal cases fail", "log-sum-exp"),
    ("the causal mask the other side of the diagonal", [("((i < j) if causal else False)", "((i > j) if causal else False)")],
     "only the causal cases fail", "log-sum-exp"),
    ("masked scores set to 0, not -inf", [("= -np.inf  # masked", "= 0.0  # masked")], "only the causal cases fail", BOUNDS),
    ("the scale left out of the scores", [("        s = scale * (qs @ kj)\n", "        s = qs @ kj\n")], "the scale included", BOUNDS),
    ("exp(s) / exp(L)", [("        p = np.exp(s - ls)\n", "        p = np.exp(s) / np.exp(ls)\n")],
     "subtract the query row's saved log-sum-exp L", BOUNDS),
    ("dP from the key", [("        dp = dos @ vj\n", "        dp = dos @ kj\n")], "dV is right in every failing case and dK is wrong", BARRIER),
    ("delta of the key's row", [("        ds = p * (dp - dl)\n", "        ds = p * (dp - delta[bh, j])\n")],
     "dV is right in every failing case and dK is wrong", BARRIER),
    ("dS minus dP's mean", [("        ds = p * (dp - dl)\n", "        ds = p * (dp - dp.mean())\n")],
     "dV is right in every failing case and dK is wrong", BARRIER),
    ("dS without its parentheses", [("        ds = p * (dp - dl)\n", "        ds = p * dp - dl\n")],
     "dV is right in every failing case and dK is wrong", BARRIER),
    ("dK from dO", [("        dkj = dkj + scale * (ds @ qs)\n", "        dkj = dkj + scale * (ds @ dos)\n")],
     "dV is right in every failing case and dK is wrong", BARRIER),
    ("dK from P", [("        dkj = dkj + scale * (ds @ qs)\n", "        dkj = dkj + scale * (p @ qs)\n")],
     "dV is right in every failing case and dK is wrong", BARRIER),
    ("dV scaled", [("        dvj = dvj + p @ dos\n", "        dvj = dvj + scale * (p @ dos)\n")], "outputs wrong", BARRIER),
    ("L as the tile's largest", [("        p = np.exp(s - ls)\n", "        p = np.exp(s - ls.max())\n")], "outputs wrong", BARRIER),
]}

# Right, and written differently from the lab's solution: the check must pass them.
RIGHT = {
    ("flash_softmax", "python"): [("        alpha = math.exp(m - m_new) if m != -np.inf else 0.0\n",
                                   "        alpha = float(np.exp(m - m_new)) if np.isfinite(m) else 0.0\n"),
                                  ("        o = alpha * o + p @ vs\n", "        o = o * alpha + vs.T @ p\n")],
    ("flash_softmax", "cuda"): [("            const float alpha = exp2f(m[r] - m_new);\n",
                                 "            const float alpha = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - m_new);\n")],
    # flash_bwd: a loop over the tile's query rows, one scalar weight at a time, masked by skipping
    ("flash_bwd", "python"): [("""        s = scale * (qs @ kj)
        s[(i >= S) | ((i < j) if causal else False)] = -np.inf  # masked before exp: exp(-inf - L) is 0
        p = np.exp(s - ls)
        dvj = dvj + p @ dos
        dp = dos @ vj
        ds = p * (dp - dl)
        dkj = dkj + scale * (ds @ qs)
""", """        for r in range(br):
            if i[r] >= S or (causal and j > i[r]):
                continue
            pr = math.exp(scale * float(np.dot(qs[r], kj)) - ls[r])
            dvj += pr * dos[r]
            dkj += (scale * pr * (float(np.dot(dos[r], vj)) - dl[r])) * qs[r]
""")],
}

globals().update(wrong_solutions.tests_for("attention", WRONG, RIGHT))


def test_flash_bwd_cases_reach_the_edges_its_mistakes_live_on():
    """S = 1; S a multiple of the query tile with several tiles, and not; one more than a key block and
    than a tile; causal and not; D 4 and 8; scores past exp's range (exp(s) without L overflows there,
    while exp(s - L) stays <= 1); the fresh case changes with the seed."""
    import numpy as np

    from harness.programs import attention as att
    from harness.user.exercises import catalog

    cs = catalog.cases("flash_bwd", "python", 11)
    ps = [c.params for c in cs]
    assert any(p["S"] == 1 for p in ps) and any(c.exact_multi for c in cs) and any(c.ragged for c in cs)
    assert {att.BWD_BC + 1, att.BWD_BR + 1} <= {p["S"] for p in ps}
    assert {p["causal"] for p in ps} == {False, True} and {p["D"] for p in ps} == {4, 8}
    for c in (c for c in cs if c.wide):
        inp = catalog.inputs("flash_bwd", c)
        s = np.einsum("bid,bjd->bij", inp["q"], inp["k"]) / np.sqrt(c.params["D"])
        assert s.max() > 709.8 and np.isfinite(inp["lse"]).all()
    assert cs[-1].params != catalog.cases("flash_bwd", "python", 12)[-1].params
