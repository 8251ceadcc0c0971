"""histogram's exercises: wrong solutions the checker must fail, with the cause it must (and must not) name,
and a right solution written differently that it must pass, for both exercises and both tracks
(tests/wrong_solutions.py makes the tests; the CUDA track's are graded on a GPU, their patches checked
here). Then: counts hard-coded from one check's cases fail the next check's."""

from __future__ import annotations

import numpy as np
import wrong_solutions
from wrong_solutions import BARRIER, BOUNDS

from harness.user import exercises as hx
from harness.user.exercises import catalog
from harness.user.exercises import check as hcheck

_PY_INDEX = "    i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x\n"
_PY_ZERO = "    for b in range(t, BINS, ctx.blockDim.x):\n        local[b] = 0\n"
_PY_MERGE = "    for b in range(t, BINS, ctx.blockDim.x):\n        if local[b] != 0:\n            bins[b] += local[b]"
_CU_INDEX = "    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
_CU_ZERO = "    for (int b = threadIdx.x; b < kBins; b += blockDim.x) local[b] = 0;\n"
_CU_MERGE = "        if (c != 0) atomicAdd(&bins[b], c);"

# (what the mistake is, [(old, new), ...], text the verdict must hold, text it must not hold)
WRONG = {("histogram_atomic", "python"): [
    ("no bounds check", [("    if i < n:\n", "    if True:\n")], "IndexError", None),
    ("one byte past the end", [("    if i < n:\n", "    if i <= n:\n")], "IndexError", None),
    ("the partial block skipped", [("    if i < n:\n", "    if i < n // ctx.blockDim.x * ctx.blockDim.x:\n")],
     BOUNDS, None),
    ("stops one early", [("    if i < n:\n", "    if i < n - 1:\n")], "never counted", BOUNDS),
    ("blockIdx times threadIdx", [(_PY_INDEX, "    i = ctx.blockIdx.x * ctx.threadIdx.x + ctx.threadIdx.x\n")],
     "outputs wrong", BOUNDS),
    ("the bin next to the byte's", [("bins[x[i]] += 1", "bins[x[i] + 1] += 1")], "outputs wrong", BOUNDS),
    ("adds the byte instead of 1", [("bins[x[i]] += 1", "bins[x[i]] += x[i]")], "outputs wrong", BOUNDS),
    ("the bins zeroed by the first thread", [(_PY_INDEX, _PY_INDEX + "    if i == 0:\n        bins[:] = 0\n")],
     "set to 0 inside the kernel", BOUNDS),
    ("the bins zeroed by each block", [(_PY_INDEX, _PY_INDEX + "    if ctx.threadIdx.x == 0:\n        bins[:] = 0\n")],
     "set to 0 inside the kernel", BOUNDS),
    ("the byte read as signed", [("bins[x[i]] += 1", "bins[np.int8(x[i])] += 1")], "a bin below 0", BOUNDS),
    ("gridDim for blockDim", [(_PY_INDEX, "    i = ctx.blockIdx.x * ctx.gridDim.x + ctx.threadIdx.x\n")], "outputs wrong",
     BOUNDS),
    ("the bin of half the byte", [("bins[x[i]] += 1", "bins[x[i] >> 1] += 1")], "outputs wrong", BOUNDS),
    ("a loop strided by the block", [("    if i < n:\n        bins[x[i]] += 1", "    for j in range(i, n, ctx.blockDim.x):\n"
                                                                          "        bins[x[j]] += 1")],
     "counted twice", BOUNDS),
    ("only block 0 counts", [("    if i < n:\n", "    if i < n and ctx.blockIdx.x == 0:\n")], "fewer counts", BOUNDS),
    ("the block's size written as 256", [(_PY_INDEX, "    i = ctx.blockIdx.x * 256 + ctx.threadIdx.x\n")],
     "fewer counts", BOUNDS),
    ("the bin set to 1", [("bins[x[i]] += 1", "bins[x[i]] = 1")], "fewer counts", BOUNDS),
    ("a byte-sized count", [("bins[x[i]] += 1", "bins[x[i]] = np.uint8(bins[x[i]] + 1)")], "fewer counts", BOUNDS),
], ("histogram_atomic", "cuda"): [
    ("a plain increment", [("    if (i < n) atomicAdd(&bins[in[i]], 1u);\n", "    if (i < n) bins[in[i]]++;\n")],
     "outputs wrong", None),
    ("no bounds check", [("    if (i < n) atomicAdd(&bins[in[i]], 1u);\n", "    atomicAdd(&bins[in[i]], 1u);\n")],
     "outputs wrong", None),
    ("one byte past the end", [("    if (i < n) atomicAdd", "    if (i <= n) atomicAdd")], "outputs wrong", None),
    ("the partial block skipped", [("    if (i < n) atomicAdd", "    if (i < n / blockDim.x * blockDim.x) atomicAdd")],
     BOUNDS, None),
    ("blockIdx times threadIdx", [(_CU_INDEX, "    const long long i = (long long)blockIdx.x * threadIdx.x + threadIdx.x;\n")],
     "outputs wrong", None),
    ("the bin next to the byte's", [("atomicAdd(&bins[in[i]], 1u)", "atomicAdd(&bins[in[i] + 1], 1u)")],
     "wrote past the end", None),
    ("adds the byte instead of 1", [("atomicAdd(&bins[in[i]], 1u)", "atomicAdd(&bins[in[i]], (unsigned)in[i])")],
     "outputs wrong", None),
], ("histogram_private", "python"): [
    ("the counters never zeroed", [(_PY_ZERO, "")], "set every one of the BINS counters to 0", BARRIER),
    ("one counter zeroed per thread", [(_PY_ZERO, "    local[t] = 0\n")], "strided by blockDim.x", BARRIER),
    ("no barrier after the zeroing",
     [("    yield  # __syncthreads(): every counter zeroed before any thread adds to one\n", "")],
     "a missing barrier: every counter zeroed before any thread counts", None),
    ("no barrier before the merge", [("    yield  # every byte of the block counted before the counters are read\n", "")],
     "a missing barrier", None),
    ("merged with a plain store", [("            bins[b] += local[b]", "            bins[b] = local[b]")],
     "a plain store (=)", BARRIER),
    ("counts one byte past the end", [("    if i < n:\n        local", "    if i <= n:\n        local")], "IndexError", None),
    ("the partial block skipped", [("    if i < n:\n        local", "    if i < n // ctx.blockDim.x * ctx.blockDim.x:\n"
                                                                  "        local")], BOUNDS, BARRIER),
    ("the counter next to the byte's", [("local[x[i]] += 1", "local[x[i] + 1] += 1")], "outputs wrong", BOUNDS),
    ("the bytes counted into the global bins", [("        local[x[i]] += 1", "        bins[x[i]] += 1")],
     "straight into the global bins", "a missing barrier"),
    ("the bins zeroed in the kernel", [(_PY_ZERO, _PY_ZERO + "    if ctx.blockIdx.x == 0 and t == 0:\n        bins[:] = 0\n")],
     "set to 0 inside the kernel", BOUNDS),
    ("the zeroing after the barrier", [(_PY_ZERO + "    yield  # __syncthreads(): every counter zeroed before any thread adds to one\n",
                                        "    yield\n" + _PY_ZERO)], "a missing barrier", None),
    ("each thread merges its own counter only", [(_PY_MERGE, "    if t < BINS and local[t] != 0:\n        bins[t] += local[t]")],
     "fewer counts", BOUNDS),
    ("every thread merges every counter", [(_PY_MERGE, "    for b in range(BINS):\n        if local[b] != 0:\n"
                                                       "            bins[b] += local[b]")], "merged twice", "fill"),
    ("the merge strided by 32", [(_PY_MERGE, _PY_MERGE.replace("ctx.blockDim.x", "32"))], "merged twice", BOUNDS),
    ("a barrier inside the if", [("    if i < n:\n        local[x[i]] += 1  # atomicAdd on shared memory\n",
                                  "    if i < n:\n        local[x[i]] += 1\n        yield\n        yield\n")],
     "every thread of a block must reach each barrier", None),
    ("the merge adds the thread's counter", [(_PY_MERGE, _PY_MERGE.replace("bins[b] += local[b]", "bins[b] += local[t]"))],
     "outputs wrong", BOUNDS),
    ("the counter of the byte modulo the block", [("local[x[i]] += 1", "local[x[i] % ctx.blockDim.x] += 1")],
     "outputs wrong", BOUNDS),
    ("one barrier between the zeroing and the merge", [("    yield  # every byte of the block counted before the counters are read\n",
                                                        "")], "a missing barrier", None),
], ("histogram_private", "cuda"): [
    ("the counters never zeroed", [(_CU_ZERO, "")], "outputs wrong", None),
    # racecheck does not follow shared atomics: the check's build starts half the warps late, and counts are lost
    ("no barrier after the zeroing", [("    __syncthreads();  // every counter zeroed before any thread adds to one\n", "")],
     "the __syncthreads() after the zeroing", None),
    ("no barrier before the merge", [("    __syncthreads();  // every byte of the block counted before the counters are read\n",
                                      "")], "outputs wrong", None),
    ("merged with a plain store", [(_CU_MERGE, "        if (c != 0) bins[b] = c;")], "outputs wrong", None),
    ("counts one byte past the end", [("    if (i < n) atomicAdd(&local", "    if (i <= n) atomicAdd(&local")],
     "outputs wrong", None),
    ("the partial block skipped", [("    if (i < n) atomicAdd(&local", "    if (i < n / blockDim.x * blockDim.x) atomicAdd(&local")],
     BOUNDS, None),
    ("merged into the next bin", [(_CU_MERGE, "        if (c != 0) atomicAdd(&bins[b + 1], c);")],
     "wrote past the end", None),
]}

# Right, and written differently from the lab's solution: the check must pass them.
RIGHT = {("histogram_atomic", "python"): [(_PY_INDEX + "    if i < n:\n        bins[x[i]] += 1  # atomicAdd(&bins[in[i]], 1)\n",
                                           "    i = ctx.threadIdx.x + ctx.blockDim.x * ctx.blockIdx.x\n    if i >= n:\n"
                                           "        return\n    v = int(x[i])\n    bins[v] = bins[v] + 1\n")],
         ("histogram_atomic", "cuda"): [("    if (i < n) atomicAdd(&bins[in[i]], 1u);\n",
                                         "    if (i >= n) return;\n    atomicAdd(bins + in[i], 1u);\n")],
         ("histogram_private", "python"): [(_PY_ZERO, "    local[t::ctx.blockDim.x] = 0\n"),
                                           (_PY_MERGE + "  # one global atomicAdd per non-zero bin\n",
                                            "    bins[t::ctx.blockDim.x] += local[t::ctx.blockDim.x]\n")],
         ("histogram_private", "cuda"): [(_CU_MERGE + "  // an empty bin adds nothing: skip its atomic\n",
                                          "        atomicAdd(bins + b, c);\n")]}

globals().update(wrong_solutions.tests_for("histogram", WRONG, RIGHT))


def _hard_coded(name: str, seed: int) -> str:
    """The kernel of `name` replaced by one that stores the counts the check expects under `seed`, found
    by the case's size and block."""
    counts = {}
    for case in catalog.cases(name, "python", seed):
        ref = catalog.reference(name, case, catalog.inputs(name, case))
        counts[(case.params["n"], case.params["threads"])] = [int(v) for v in ref]
    text = hx.solution_text(hx.exercise(name), "python")
    head, sep, _ = text.partition(f"def {hx.exercise(name).py_entry}(ctx, x, n, bins):\n")
    assert sep
    return (f"{head}COUNTS = {counts!r}\n\n\n{sep}    if ctx.blockIdx.x == 0 and ctx.threadIdx.x == 0:\n"
            f"        bins[:] = np.array(COUNTS[(n, ctx.blockDim.x)], dtype=np.uint32)\n")


def test_counts_hard_coded_from_one_check_fail_the_next(tmp_path):
    for name in ("histogram_atomic", "histogram_private"):
        wrong_solutions.write(tmp_path, name, "python", _hard_coded(name, seed=1))
        assert hcheck.check(name, "python", tmp_path, seed=1).passed  # the counts are those of seed 1's cases
        v = hcheck.check(name, "python", tmp_path, seed=2)
        assert not v.passed and "outputs wrong" in v.first_fix, v.lines


def test_the_skewed_cases_pile_most_bytes_on_one_value():
    for track in ("python", "cuda"):
        for case in catalog.cases("histogram_private", track, seed=5):
            if case.params["kind"] == "skewed" and case.params["n"] >= 500:
                counts = np.bincount(catalog.inputs("histogram_private", case)["x"], minlength=256)
                assert counts.max() > 0.8 * case.params["n"], case.label


def test_the_private_checks_build_starts_half_the_warps_late_and_compiles(tmp_path, monkeypatch):
    """The CUDA cases of histogram_private run on a build whose odd warps wait at the kernel's start, so
    that a missing barrier around the shared counters loses counts on the GPU; it compiles as the
    learner's file does, on the line of the kernel's brace (the compiler's line numbers stay the same)."""
    from harness.calling import inline

    monkeypatch.setenv("CUDALAB_CACHE", str(tmp_path))
    sol = hx.solution_text(hx.exercise("histogram_private"), "cuda")
    built = catalog.check_source("histogram_private", sol)
    assert "clock64()" in built and built.count("\n") == sol.count("\n")
    assert catalog.check_source("histogram_private", sol.replace("histogram_02_shared_private", "h2")) is None
    assert "exercise_run" in inline.load(built, name="exercise_histogram_private_check").functions
