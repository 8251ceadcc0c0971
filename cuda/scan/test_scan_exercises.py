"""scan's exercises graded: wrong solutions the checker must fail, naming their cause (and not naming
another), and a right solution written differently that it must pass, for both exercises and both tracks
(tests/wrong_solutions.py makes the tests from the tables). The Python track's run here; the CUDA
track's need a GPU (gpu-marked; here their patches are checked to apply)."""

from __future__ import annotations

import numpy as np
import wrong_solutions
from wrong_solutions import BOUNDS

from harness.user import exercises as hx
from harness.user.exercises import catalog
from harness.user.exercises import check as hcheck

KS, BK = "scan_kogge_stone", "scan_brent_kung"
RACE = "a missing barrier"
ONLY_EXCLUSIVE = "only the exclusive scans fail"
ONLY_INCLUSIVE = "only the inclusive scans fail"

KS_PY_STORE = "        out[i] = (inclusive - mine) & MASK if exclusive else inclusive\n"
BK_PY_STORE0 = "        out[i0] = (int(s[t]) - mine0) & MASK if exclusive else int(s[t])\n"
BK_PY_STORE1 = "        out[i1] = (int(s[t + nt]) - mine1) & MASK if exclusive else int(s[t + nt])\n"
KS_CU_STORE = "    if (i < n) out[i] = exclusive ? inclusive - mine : inclusive;\n"

# (what the mistake is, [(old, new), ...], text the thing to fix must hold, text it must not hold)
WRONG = {(KS, "python"): [
    ("no barrier at the end of a step", [("        cur = 1 - cur\n        yield\n", "        cur = 1 - cur\n")],
     RACE, BOUNDS),
    ("no barrier after the loads", [("    buf[cur, t] = mine\n    yield\n", "    buf[cur, t] = mine\n")], RACE, BOUNDS),
    ("one buffer updated in place", [("        buf[1 - cur, t] = v  # the other buffer: a neighbour may still read this "
                                      "step's buf[cur]\n        cur = 1 - cur\n", "        buf[cur, t] = v\n")],
     RACE, BOUNDS),
    ("the exclusive flag ignored", [(KS_PY_STORE, "        out[i] = inclusive\n")], ONLY_EXCLUSIVE, BOUNDS),
    ("always exclusive", [(KS_PY_STORE, "        out[i] = (inclusive - mine) & MASK\n")], ONLY_INCLUSIVE, BOUNDS),
    ("the stride grows by one", [("        stride *= 2\n", "        stride += 1\n")], "outputs wrong", BOUNDS),
    ("t > stride", [("        if t >= stride:\n", "        if t > stride:\n")], "outputs wrong", BOUNDS),
    ("the partial tile skipped", [("    mine = int(x[i]) if i < n else 0\n", "    mine = int(x[i]) if i < n // nt * nt else 0\n")],
     BOUNDS, None),
    ("no bound on the store", [("    if i < n:\n" + KS_PY_STORE, KS_PY_STORE[4:])], "IndexError", None),
    ("the exclusive difference not wrapped", [("(inclusive - mine) & MASK", "inclusive - mine")], "OverflowError", None),
    ("exclusive from the left neighbour, t == 0 unguarded",
     [(KS_PY_STORE, "        out[i] = int(buf[cur, t - 1]) if exclusive else inclusive\n")], ONLY_EXCLUSIVE, BOUNDS),
    ("the load's bound i <= n", [("    mine = int(x[i]) if i < n else 0\n", "    mine = int(x[i]) if i <= n else 0\n")],
     "IndexError", None),
    ("a step too few", [("    while stride < nt:\n", "    while stride < nt // 2:\n")], "outputs wrong", BOUNDS),
    ("the result read from the other buffer", [("    inclusive = int(buf[cur, t])\n", "    inclusive = int(buf[1 - cur, t])\n")],
     "outputs wrong", BOUNDS),
    ("the sum not taken modulo 2^32", [("            v = _add(v, buf[cur, t - stride])\n", "            v = v + int(buf[cur, t - stride])\n")],
     "OverflowError", None),
    ("the barrier inside the if", [("        cur = 1 - cur\n        yield\n", "        cur = 1 - cur\n        if t >= stride:\n            yield\n")],
     "must reach each barrier", None),
    ("exclusive shifted across the tiles", [("    mine = int(x[i]) if i < n else 0\n",
                                             "    mine = int(x[i]) if i < n else 0\n    if exclusive:\n"
                                             "        mine = int(x[i - 1]) if 0 < i <= n else 0\n"), (KS_PY_STORE, "        out[i] = inclusive\n")],
     ONLY_EXCLUSIVE, BOUNDS),
    ("the left neighbour wraps round the tile", [("            v = _add(v, buf[cur, t - stride])\n", "            v = _add(v, buf[cur, (t - stride) % nt])\n"),
                                                 ("        if t >= stride:\n", "        if True:\n")], "outputs wrong", BOUNDS),
    ("the buffers never swap", [("        cur = 1 - cur\n        yield\n", "        yield\n")], "outputs wrong", BOUNDS),
    ("exclusive from the tile's first element", [(KS_PY_STORE, "        out[i] = (inclusive - int(buf[cur, 0])) & MASK if exclusive else inclusive\n")],
     ONLY_EXCLUSIVE, BOUNDS),
], (KS, "cuda"): [
    ("no barrier at the end of a step", [("        __syncthreads();  // the whole step is written before anyone reads it\n",
                                          "")], "racecheck", None),
    ("no barrier after the loads", [("    buf[in][t] = mine;\n    __syncthreads();\n", "    buf[in][t] = mine;\n")],
     "racecheck", None),
    ("one buffer updated in place", [("        buf[1 - in][t] = v;\n        in = 1 - in;\n", "        buf[in][t] = v;\n")],
     "racecheck", None),
    ("the exclusive flag ignored", [(KS_CU_STORE, "    if (i < n) out[i] = inclusive;\n")], ONLY_EXCLUSIVE, None),
    ("no bound on the store", [(KS_CU_STORE, KS_CU_STORE.replace("if (i < n) ", ""))], "wrote past the end", None),
    ("no bound on the load", [("    const unsigned mine = i < n ? x[i] : 0u;", "    const unsigned mine = x[i];")],
     "memcheck", None),
    ("t > stride", [("        if (t >= stride) v +=", "        if (t > stride) v +=")], "outputs wrong", "memcheck"),
    ("a step too few", [("stride < (int)blockDim.x; stride *= 2", "stride < (int)blockDim.x / 2; stride *= 2")],
     "outputs wrong", "racecheck"),
], (BK, "python"): [
    ("no barrier in the up-sweep", [("    while stride < tile:\n        yield\n", "    while stride < tile:\n")],
     RACE, BOUNDS),
    ("no barrier in the down-sweep", [("    while stride > 0:\n        yield\n", "    while stride > 0:\n")],
     RACE, BOUNDS),
    ("no barrier before the stores", [("        stride //= 2\n    yield\n", "        stride //= 2\n")], RACE, BOUNDS),
    ("exclusive: the second element not corrected",
     [("        out[i1] = (int(s[t + nt]) - mine1) & MASK if exclusive else int(s[t + nt])\n",
       "        out[i1] = int(s[t + nt])\n")], ONLY_EXCLUSIVE, BOUNDS),
    ("the down-sweep starts a level late", [("    stride = tile // 4\n", "    stride = tile // 8\n")],
     "outputs wrong", BOUNDS),
    ("the up-sweep's tree index", [("        idx = (t + 1) * 2 * stride - 1\n        if idx < tile:\n",
                                    "        idx = t * 2 * stride + stride\n        if idx < tile:\n")],
     "outputs wrong", BOUNDS),
    ("the second store guarded by the first element", [("    if i1 < n:\n        out[i1]", "    if i0 < n:\n        out[i1]")],
     "IndexError", None),
    ("no bound on the second load", [("    mine1 = int(x[i1]) if i1 < n else 0\n", "    mine1 = int(x[i1])\n")],
     "IndexError", None),
    ("tiles one block's threads apart", [("    base = ctx.blockIdx.x * tile\n", "    base = ctx.blockIdx.x * nt\n")],
     "never written", BOUNDS),
    ("the down-sweep's index without the 2", [("        idx = (t + 1) * 2 * stride - 1\n        if idx + stride < tile:\n",
                                               "        idx = (t + 1) * stride - 1\n        if idx + stride < tile:\n")],
     "two threads of one level touch the same cell", BOUNDS),
    ("the down-sweep reads idx - stride", [("            s[idx + stride] = _add(s[idx + stride], s[idx])\n",
                                            "            s[idx + stride] = _add(s[idx + stride], s[idx - stride])\n")],
     RACE, BOUNDS),
    ("exclusive from the left neighbour, t == 0 unguarded", [(BK_PY_STORE0, "        out[i0] = int(s[t - 1]) if exclusive else int(s[t])\n"),
                                                            (BK_PY_STORE1, "        out[i1] = int(s[t + nt - 1]) if exclusive else int(s[t + nt])\n")],
     ONLY_EXCLUSIVE, BOUNDS),
    ("the down-sweep's bound <= tile", [("        if idx + stride < tile:\n", "        if idx + stride <= tile:\n")], "IndexError", None),
    ("exclusive: the second element less the first's value", [(BK_PY_STORE1, BK_PY_STORE1.replace("mine1", "mine0"))],
     ONLY_EXCLUSIVE, BOUNDS),
    ("the up-sweep a level short", [("    while stride < tile:\n", "    while stride < tile // 2:\n")], "outputs wrong", BOUNDS),
    ("the down-sweep's strides ascending", [("    stride = tile // 4\n    while stride > 0:\n", "    stride = 1\n    while stride <= tile // 4:\n"),
                                            ("        stride //= 2\n    yield\n", "        stride *= 2\n    yield\n")],
     "outputs wrong", BOUNDS),
    ("the second element loaded from i0 + 1", [("    mine1 = int(x[i1]) if i1 < n else 0\n", "    mine1 = int(x[i0 + 1]) if i0 + 1 < n else 0\n")],
     "outputs wrong", BOUNDS),
    ("inclusive: the second element from its left cell", [(BK_PY_STORE1, BK_PY_STORE1.replace("else int(s[t + nt])", "else int(s[t + nt - 1])"))],
     ONLY_INCLUSIVE, BOUNDS),
    ("the up-sweep starts at stride 2", [("    stride = 1\n    while stride < tile:\n", "    stride = 2\n    while stride < tile:\n")],
     "outputs wrong", BOUNDS),
    ("loaded to adjacent cells, stored from the split ones", [("    s[t], s[t + nt] = mine0, mine1\n", "    s[2 * t], s[2 * t + 1] = mine0, mine1\n")],
     "outputs wrong", BOUNDS),
], (BK, "cuda"): [
    ("no barrier in the up-sweep", [("        __syncthreads();  // the previous level is complete\n", "")],
     "racecheck", None),
    ("no barrier in the down-sweep", [("stride > 0; stride /= 2) {\n        __syncthreads();\n",
                                       "stride > 0; stride /= 2) {\n")], "racecheck", None),
    ("no barrier before the stores", [("    }\n    __syncthreads();\n    if (i0 < n)", "    }\n    if (i0 < n)")],
     "racecheck", None),
    ("exclusive: the second element not corrected",
     [("exclusive ? s[t + blockDim.x] - mine1 : s[t + blockDim.x]", "s[t + blockDim.x]")], ONLY_EXCLUSIVE, None),
    ("the down-sweep starts a level late", [("int stride = tile / 4;", "int stride = tile / 8;")], "outputs wrong",
     "racecheck"),
    ("the up-sweep's tree index", [("        const int idx = (t + 1) * 2 * stride - 1;\n        if (idx < tile)",
                                    "        const int idx = t * 2 * stride + stride;\n        if (idx < tile)")],
     "outputs wrong", "memcheck"),
    ("the second store guarded by the first element", [("    if (i1 < n) out[i1]", "    if (i0 < n) out[i1]")],
     "wrote past the end", None),
    ("no bound on the second load", [("    const unsigned mine1 = i1 < n ? x[i1] : 0u;", "    const unsigned mine1 = x[i1];")],
     "memcheck", None),
]}

# Right, and written differently from the lab's solution: the check must pass them.
RIGHT = {(KS, "python"): [  # one buffer, a barrier between the reads and the writes; exclusive from the neighbour
    ("        v = int(buf[cur, t])\n        if t >= stride:\n            v = _add(v, buf[cur, t - stride])\n"
     "        buf[1 - cur, t] = v  # the other buffer: a neighbour may still read this step's buf[cur]\n"
     "        cur = 1 - cur\n        yield\n",
     "        v = _add(buf[cur, t], buf[cur, t - stride]) if t >= stride else int(buf[cur, t])\n"
     "        yield  # every read of this step is done before anyone writes\n        buf[cur, t] = v\n        yield\n"),
    (KS_PY_STORE, "        out[i] = (int(buf[cur, t - 1]) if t else 0) if exclusive else inclusive\n")],
    (KS, "cuda"): [
    ("        unsigned v = buf[in][t];\n        if (t >= stride) v += buf[in][t - stride];\n"
     "        buf[1 - in][t] = v;\n        in = 1 - in;\n",
     "        const unsigned v = buf[in][t] + (t >= stride ? buf[in][t - stride] : 0u);\n"
     "        __syncthreads();  // every read of this step is done before anyone writes\n        buf[in][t] = v;\n"),
    (KS_CU_STORE, "    if (i < n) out[i] = exclusive ? (t > 0 ? buf[in][t - 1] : 0u) : inclusive;\n")],
    (BK, "python"): [  # for loops over the strides; exclusive from the neighbour
    ("    stride = 1\n    while stride < tile:\n        yield\n",
     "    for stride in (1 << k for k in range((tile - 1).bit_length())):\n        yield\n"),
    ("            s[idx] = _add(s[idx], s[idx - stride])\n        stride *= 2\n",
     "            s[idx] = _add(s[idx], s[idx - stride])\n"),
    ("    stride = tile // 4\n    while stride > 0:\n        yield\n",
     "    for stride in reversed([1 << k for k in range((tile // 4).bit_length())]):\n        yield\n"),
    ("            s[idx + stride] = _add(s[idx + stride], s[idx])\n        stride //= 2\n",
     "            s[idx + stride] = _add(s[idx + stride], s[idx])\n"),
    ("        out[i0] = (int(s[t]) - mine0) & MASK if exclusive else int(s[t])\n",
     "        out[i0] = (int(s[t - 1]) if t else 0) if exclusive else int(s[t])\n"),
    ("        out[i1] = (int(s[t + nt]) - mine1) & MASK if exclusive else int(s[t + nt])\n",
     "        out[i1] = int(s[t + nt - 1 if exclusive else t + nt])\n")],
    (BK, "cuda"): [
    ("    if (i0 < n) out[i0] = exclusive ? s[t] - mine0 : s[t];\n",
     "    if (i0 < n) out[i0] = exclusive ? (t > 0 ? s[t - 1] : 0u) : s[t];\n"),
    ("    if (i1 < n) out[i1] = exclusive ? s[t + blockDim.x] - mine1 : s[t + blockDim.x];\n",
     "    if (i1 < n) out[i1] = s[t + blockDim.x - (exclusive ? 1 : 0)];\n")]}

globals().update(wrong_solutions.tests_for("scan", WRONG, RIGHT))


def test_every_exercise_here_has_six_wrong_solutions_a_track():
    for key, rows in WRONG.items():
        assert len(rows) >= 6, key


def test_a_hard_coded_output_fails_the_next_seed(tmp_path):
    """A kernel that writes the outputs one check's cases had (looked up by size and kind) passes that
    seed and fails the next: the inputs and the fresh case come from the seed."""
    for name in (KS, BK):
        table = {(c.params["n"], bool(c.params["exclusive"])):
                 [int(v) for v in catalog.reference(name, c, catalog.inputs(name, c))]
                 for c in catalog.cases(name, "python", 1)}
        text = hx.solution_text(hx.exercise(name), "python")
        head = text[:text.index("def _add")]
        entry = hx.exercise(name).py_entry
        replay = (f"TABLE = {table!r}\n\n\ndef {entry}(ctx, x, out, n, exclusive, block_sums, trace=None):\n"
                  f"    if ctx.blockIdx.x == 0 and ctx.threadIdx.x == 0:\n"
                  f"        for j, v in enumerate(TABLE[(n, bool(exclusive))]):\n            out[j] = v\n")
        wrong_solutions.write(tmp_path, name, "python", head + replay)
        assert hcheck.check(name, "python", tmp_path, seed=1).passed
        v = hcheck.check(name, "python", tmp_path, seed=2)
        assert not v.passed and "outputs wrong" in v.first_fix, v.first_fix


def test_the_reference_scans_each_tile_on_its_own():
    from harness.programs import scan_exercises as ex

    x = np.array([1, 2, 3, 4, 5, 0xFFFFFFFF, 2], dtype=np.uint32)
    assert ex.tile_scan(x, 3, False).tolist() == [1, 3, 6, 4, 9, 8, 2]
    assert ex.tile_scan(x, 3, True).tolist() == [0, 1, 3, 0, 4, 9, 0]
    assert ex.tile_scan(x, 8, False).tolist() == np.cumsum(x, dtype=np.uint32).tolist()
