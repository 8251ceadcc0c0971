"""softmax's exercises shown to fail: for softmax_row and softmax_online, on both tracks, wrong
solutions a learner writes (patches over the lab's solution), each with the cause the check must name
and one it must not, and a right solution written differently that must pass (tests/wrong_solutions.py
makes the tests). The Python track runs here; the CUDA track's runs need a GPU (gpu-marked), and here
only their patches are checked to apply. On the CUDA track the text searched is the failing lines (the
cases', the sanitizers'), so each CUDA row names what a case's own message says."""

from __future__ import annotations

import wrong_solutions
from wrong_solutions import BARRIER, BOUNDS

from harness.user import exercises as hx
from harness.user.exercises import catalog
from harness.user.exercises import check as hcheck

# Causes the problems name (cuda/softmax/softmax_exercises.py).
SHORT = "rows shorter than the block"
MAX_AT_0 = "starts above every score"
TRUE_MAX = "true max"

_ROW_WRITE_PY = "    for c in range(t, cols, nt):\n        out[row, c] = np.exp(x[row, c] - m) * inv\n"
_ROW_WRITE_CU = "    for (long long c = t; c < cols; c += blockDim.x) o[c] = expf(in[c] - m) * inv;\n"
_ONLINE_UPDATE_PY = ("        if y > m:  # a new maximum: what was summed so far shrinks by exp(m_old - m_new)\n"
                     "            d = F32(d * np.exp2(F32((m - y) * log2e)))\n"
                     "            m = y\n"
                     "        d = F32(d + np.exp2(F32(_fmaf(scale, xc, -m) * log2e)))\n")
_MERGE_RETURN_PY = ("    return mm, F32(d * np.exp2(F32((m - mm) * F32(LOG2E))) + d2 * np.exp2(F32((m2 - mm) * "
                    "F32(LOG2E))))\n")
_ONLINE_RESCALE_CU = ("            d *= exp2f((m - y) * CUDALAB_LOG2E);  // by exp(m_old - m_new); the first time, m = -inf "
                      "and d = 0\n")
_ONLINE_TERM_CU = "        d += exp2f(fmaf(scale, xc, -m) * CUDALAB_LOG2E);\n"

# (what the mistake is, [(old, new), ...], text the thing to fix must hold, text it must not hold)
WRONG = {("softmax_row", "python"): [
    ("no barrier after storing the thread's max", [("    red[t] = m\n    yield\n", "    red[t] = m\n")], BARRIER, BOUNDS),
    ("no barrier between the max tree's steps", [("        yield  # this step's results are the next step's inputs\n", "")],
     BARRIER, BOUNDS),
    ("red reused for the sums before everyone read the max",
     [("    yield  # everyone has read the max before red[] is reused for the sums\n", "")], BARRIER, BOUNDS),
    ("the max starts at 0", [("    m = F32(-np.inf)\n", "    m = F32(0)\n")], "start the max at -inf", BOUNDS),
    ("no max subtracted", [("        s = F32(s + np.exp(x[row, c] - m))\n", "        s = F32(s + np.exp(x[row, c]))\n"),
                           ("        out[row, c] = np.exp(x[row, c] - m) * inv\n", "        out[row, c] = np.exp(x[row, c]) * inv\n")],
     TRUE_MAX, BOUNDS),
    ("the write skips the partial stride", [(_ROW_WRITE_PY, _ROW_WRITE_PY.replace("range(t, cols, nt)",
                                                                                   "range(t, cols // nt * nt, nt)"))],
     BOUNDS, None),
    ("the max's loop runs to c <= cols", [("    for c in range(t, cols, nt):\n        m = max(m, x[row, c])\n",
                                           "    for c in range(t, cols + 1, nt):\n        m = max(m, x[row, c])\n")],
     "IndexError", None),
    ("the sum's tree starts at a quarter", [("    red[t] = s\n    yield\n    half = nt // 2\n",
                                             "    red[t] = s\n    yield\n    half = nt // 4\n")], "outputs wrong", BOUNDS),
    ("each thread divides by its own sum", [("    inv = F32(1) / red[0]\n", "    inv = F32(1) / s\n")], "outputs wrong",
     BOUNDS),
    ("no barrier after storing the thread's sum", [("    red[t] = s\n    yield\n", "    red[t] = s\n")], BARRIER, BOUNDS),
    ("no barrier between the sum tree's steps", [("            red[t] = F32(red[t] + red[t + half])\n        yield\n",
                                                   "            red[t] = F32(red[t] + red[t + half])\n")], BARRIER, BOUNDS),
    ("the columns' stride typed in", [(_ROW_WRITE_PY, _ROW_WRITE_PY.replace("range(t, cols, nt)", "range(t, cols, 8)"))],
     "block size is typed in", BOUNDS),
    ("the sum tree's first half typed in", [("    red[t] = s\n    yield\n    half = nt // 2\n",
                                             "    red[t] = s\n    yield\n    half = 4\n")], "IndexError", None),
    ("the write without the max", [(_ROW_WRITE_PY, _ROW_WRITE_PY.replace("np.exp(x[row, c] - m)", "np.exp(x[row, c])"))],
     "outputs wrong", BOUNDS),
    ("the write subtracts red[0], now the sum", [(_ROW_WRITE_PY, _ROW_WRITE_PY.replace("x[row, c] - m)", "x[row, c] - red[0])"))],
     "outputs wrong", BOUNDS),
    ("the thread's own max, not the row's", [("    m = red[0]\n", "")], "outputs wrong", BOUNDS),
    ("the max from one column a thread", [("    for c in range(t, cols, nt):\n        m = max(m, x[row, c])\n",
                                           "    if t < cols:\n        m = max(m, x[row, t])\n")], TRUE_MAX, BOUNDS),
    ("the max starts at the thread's first column", [("    m = F32(-np.inf)\n", "    m = x[row, t]\n")], "IndexError", None),
    ("the max tree adds", [("            red[t] = max(red[t], red[t + half])\n", "            red[t] = red[t] + red[t + half]\n")],
     "NaN or infinite", BOUNDS),
], ("softmax_row", "cuda"): [
    ("no barrier after storing the thread's max", [("    red[t] = m;\n    __syncthreads();\n", "    red[t] = m;\n")],
     "racecheck", None),
    ("no barrier between the max tree's steps",
     [("        __syncthreads();  // this step's results are the next step's inputs\n", "")], "racecheck", None),
    ("red reused for the sums before everyone read the max",
     [("    __syncthreads();  // everyone has read the max before red[] is reused for the sums\n", "")], "racecheck", None),
    ("the max starts at 0", [("    float m = -INFINITY;  // a thread with no column (cols < blockDim.x) adds nothing to the max\n",
                              "    float m = 0.0f;\n")], MAX_AT_0, BOUNDS),
    ("no max subtracted", [("sum += expf(in[c] - m);", "sum += expf(in[c]);"), ("o[c] = expf(in[c] - m) * inv;", "o[c] = expf(in[c]) * inv;")],
     "needs the row's own max subtracted", BOUNDS),
    ("the write skips the partial stride", [(_ROW_WRITE_CU, _ROW_WRITE_CU.replace("c < cols;", "c < cols / blockDim.x * blockDim.x;"))],
     "never written", None),
    ("the write runs to c <= cols", [(_ROW_WRITE_CU, _ROW_WRITE_CU.replace("c < cols;", "c <= cols;"))], "wrote past the end",
     None),
    ("the sum's tree starts at a quarter", [("    red[t] = sum;\n    __syncthreads();\n    for (int half = blockDim.x / 2;",
                                             "    red[t] = sum;\n    __syncthreads();\n    for (int half = blockDim.x / 4;")],
     "outputs wrong", BOUNDS),
    ("each thread divides by its own sum", [("    const float inv = 1.0f / red[0];\n", "    const float inv = 1.0f / sum;\n")],
     "outputs wrong", BOUNDS),
    ("the write without the max", [("o[c] = expf(in[c] - m) * inv;", "o[c] = expf(in[c]) * inv;")], "outputs wrong", BOUNDS),
], ("softmax_online", "python"): [
    ("the sum not rescaled when the max grows", [("            d = F32(d * np.exp2(F32((m - y) * log2e)))\n", "")],
     "outputs wrong", BOUNDS),
    ("the rescale factor inverted", [("np.exp2(F32((m - y) * log2e))", "np.exp2(F32((y - m) * log2e))")],
     "not its inverse", BOUNDS),
    ("the term added under the old max", [(_ONLINE_UPDATE_PY, "        d = F32(d + np.exp2(F32(_fmaf(scale, xc, -m) * log2e)))\n"
                                                              "        if y > m:\n"
                                                              "            d = F32(d * np.exp2(F32((m - y) * log2e)))\n"
                                                              "            m = y\n")],
     "the max it is added under", BOUNDS),
    ("the merge does not rescale", [("    return mm, F32(d * np.exp2(F32((m - mm) * F32(LOG2E))) + d2 * np.exp2(F32((m2 - mm) * F32(LOG2E))))\n",
                                     "    return mm, F32(d + d2)\n")], "outputs wrong", BOUNDS),
    ("the merge of two empty pairs", [("    if mm == -np.inf:\n        return m, d\n", "")], SHORT, BOUNDS),
    ("the running max starts at 0", [("    m, d = F32(-np.inf), F32(0)\n", "    m, d = F32(0), F32(0)\n")],
     "start it at -inf", BOUNDS),
    ("the merge keeps the smaller max", [("    mm = max(m, m2)\n", "    mm = min(m, m2)\n")], "keep the larger of the two maxima",
     BOUNDS),
    ("the scale left out of the term", [(_ONLINE_UPDATE_PY.splitlines(True)[3],
                                         "        d = F32(d + np.exp2(F32((xc - m) * log2e)))\n")], "outputs wrong", BOUNDS),
    ("the merge assumes the first max is the larger",
     [("    mm = max(m, m2)\n    if mm == -np.inf:\n        return m, d\n" + _MERGE_RETURN_PY,
       "    if m == -np.inf and m2 == -np.inf:\n        return m, d\n"
       "    return max(m, m2), F32(d + d2 * np.exp2(F32((m2 - m) * F32(LOG2E))))\n")], "outputs wrong", BOUNDS),
    ("the merge returns the first max", [(_MERGE_RETURN_PY, _MERGE_RETURN_PY.replace("return mm,", "return m,"))],
     "outputs wrong", BOUNDS),
    ("the merge takes the second sum as 1", [(_MERGE_RETURN_PY, _MERGE_RETURN_PY.replace(" + d2 * np.exp2", " + np.exp2"))],
     "outputs wrong", BOUNDS),
    ("the merge keeps the larger sum", [(_MERGE_RETURN_PY, "    return mm, max(d, d2)\n")], "outputs wrong", BOUNDS),
    ("the max updated before the rescale", [("            d = F32(d * np.exp2(F32((m - y) * log2e)))\n            m = y\n",
                                             "            m = y\n            d = F32(d * np.exp2(F32((m - y) * log2e)))\n")],
     "outputs wrong", BOUNDS),
    ("the term relative to itself", [(_ONLINE_UPDATE_PY.splitlines(True)[3],
                                      "        d = F32(d + np.exp2(F32(_fmaf(scale, xc, -y) * log2e)))\n")], "outputs wrong", BOUNDS),
    ("the rescale without log2e", [("            d = F32(d * np.exp2(F32((m - y) * log2e)))\n",
                                    "            d = F32(d * np.exp2(F32(m - y)))\n")], "outputs wrong", BOUNDS),
    ("the term without log2e", [(_ONLINE_UPDATE_PY.splitlines(True)[3],
                                 "        d = F32(d + np.exp2(F32(_fmaf(scale, xc, -m))))\n")], "outputs wrong", BOUNDS),
], ("softmax_online", "cuda"): [
    ("the sum not rescaled when the max grows", [(_ONLINE_RESCALE_CU, "")], "outputs wrong", BOUNDS),
    ("the rescale factor inverted", [("d *= exp2f((m - y) * CUDALAB_LOG2E);", "d *= exp2f((y - m) * CUDALAB_LOG2E);")],
     "not its inverse", BOUNDS),
    ("the term added under the old max", [(_ONLINE_TERM_CU, ""), ("        if (y > m) {", _ONLINE_TERM_CU + "        if (y > m) {")],
     "the max it is added under", BOUNDS),
    ("the merge does not rescale", [("    d = d * exp2f((m - mm) * CUDALAB_LOG2E) + d2 * exp2f((m2 - mm) * CUDALAB_LOG2E);\n",
                                     "    d = d + d2;\n")], "outputs wrong", BOUNDS),
    ("the merge of two empty pairs", [("    if (mm == -INFINITY) return;\n", "")], "empty pair", BOUNDS),
    ("the running max starts at 0", [("    float m = -INFINITY, d = 0.0f;\n", "    float m = 0.0f, d = 0.0f;\n")], MAX_AT_0,
     BOUNDS),
    ("the merge keeps the smaller max", [("    const float mm = fmaxf(m, m2);\n", "    const float mm = fminf(m, m2);\n")],
     "bring both sums to the larger max", BOUNDS),
    ("the max updated before the rescale", [("            d *= exp2f((m - y) * CUDALAB_LOG2E);", "            m = y;\n"
                                             "            d *= exp2f((m - y) * CUDALAB_LOG2E);")], "outputs wrong", BOUNDS),
]}

# Right, and written differently from the lab's solution: the check must pass them.
RIGHT = {
    ("softmax_row", "python"): [
        ("    m = F32(-np.inf)\n    for c in range(t, cols, nt):\n        m = max(m, x[row, c])\n",
         "    mine = x[row, t:cols:nt]  # this thread's columns, as a strided slice\n"
         "    m = mine.max() if mine.size else F32(-np.inf)\n"),
        ("    half = nt // 2\n    while half > 0:\n        if t < half:\n            red[t] = max(red[t], red[t + half])\n"
         "        yield  # this step's results are the next step's inputs\n        half //= 2\n",
         "    step = nt\n    while step > 1:\n        step //= 2\n        if t < step:\n"
         "            red[t] = np.maximum(red[t], red[t + step])\n        yield\n"),
        (_ROW_WRITE_PY, "    out[row, t:cols:nt] = np.exp(x[row, t:cols:nt] - m) * inv\n"),
    ],
    ("softmax_row", "cuda"): [
        ("    for (long long c = t; c < cols; c += blockDim.x) m = fmaxf(m, in[c]);\n",
         "    for (long long c = t; c < cols; c += blockDim.x) m = in[c] > m ? in[c] : m;\n"),
        ("        if (t < half) red[t] = fmaxf(red[t], red[t + half]);\n",
         "        if (t < half && red[t + half] > red[t]) red[t] = red[t + half];\n"),
    ],
    ("softmax_online", "python"): [
        (_ONLINE_UPDATE_PY, "        m_new = max(m, y)\n"
                            "        d = F32(d * np.exp2(F32((m - m_new) * log2e)) + np.exp2(F32(_fmaf(scale, xc, -m_new) * log2e)))\n"
                            "        m = m_new\n"),
        ("    mm = max(m, m2)\n    if mm == -np.inf:\n        return m, d\n"
         "    return mm, F32(d * np.exp2(F32((m - mm) * F32(LOG2E))) + d2 * np.exp2(F32((m2 - mm) * F32(LOG2E))))\n",
         "    if m2 > m:  # the larger max first\n        m, d, m2, d2 = m2, d2, m, d\n"
         "    if m2 == -np.inf:  # the other pair is empty (or both are)\n        return m, d\n"
         "    return m, F32(d + d2 * np.exp2(F32((m2 - m) * F32(LOG2E))))\n"),
    ],
    ("softmax_online", "cuda"): [
        ("    const float mm = fmaxf(m, m2);\n    if (mm == -INFINITY) return;\n"
         "    d = d * exp2f((m - mm) * CUDALAB_LOG2E) + d2 * exp2f((m2 - mm) * CUDALAB_LOG2E);\n    m = mm;\n",
         "    if (m2 > m) {  // the larger max first\n        const float tm = m, td = d;\n        m = m2, d = d2;\n"
         "        m2 = tm, d2 = td;\n    }\n"
         "    if (m2 != -INFINITY) d += d2 * exp2f((m2 - m) * CUDALAB_LOG2E);  // an empty pair adds nothing\n"),
    ],
}

globals().update(wrong_solutions.tests_for("softmax", WRONG, RIGHT))


def test_an_output_hard_coded_from_one_check_fails_the_next(tmp_path):
    """The outputs of one seed's cases written out as constants pass that seed and fail another: every
    input, the fixed cases' too, comes from the check's seed."""
    name, seed = "softmax_row", 12345
    table = {}
    for case in catalog.cases(name, "python", seed):
        p = case.params
        ref = catalog.reference(name, case, catalog.inputs(name, case))
        table[(p["rows"], p["cols"])] = [float(v) for v in ref]
    text = hx.solution_text(hx.exercise(name), "python")
    text = text.replace("def softmax_block_row_k(", f"TABLE = {table!r}\n\n\ndef softmax_block_row_k(", 1)
    text = text.replace(_ROW_WRITE_PY, "    for c in range(t, cols, nt):\n"
                                       "        out[row, c] = TABLE[(rows, cols)][row * cols + c]\n")
    wrong_solutions.write(tmp_path, name, "python", text)
    assert hcheck.check(name, "python", tmp_path, seed=seed).passed
    v = hcheck.check(name, "python", tmp_path, seed=seed + 1)
    assert not v.passed and "outputs wrong" in v.first_fix, v.lines
