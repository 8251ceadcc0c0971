"""reduction's exercises: wrong solutions the checker must fail, each with the cause it must (and must not)
name, and a right solution written differently that it must pass (tests/wrong_solutions.py makes the
tests from the tables); the tolerances' promises (integer cases exact in effect, the grid-stride cases'
chain within its bound); a hard-coded output fails the next check's fresh cases."""

from __future__ import annotations

import numpy as np
import pytest
import wrong_solutions
from wrong_solutions import BOUNDS

from harness.programs import reduction_exercises as rx
from harness.user.exercises import catalog
from harness.user.exercises import check as hcheck

BARRIER = "a missing barrier"
MULTI = "more than one block"
HEAD_TAIL = "has a head or a tail"
OUTSIDE = "an element outside x was added"

# (what the mistake is, [(old, new), ...], text the thing to fix must hold, text it must not hold). The CUDA
# track's rows name what its case lines say: the cause the grader reads across the cases (the bounds check,
# "more than one block", a head or a tail, "k times the sum") goes into its final `fix:` line only, which
# the table's GPU test does not read.
WRONG = {("reduce_tree", "python"): [
    ("no barrier after the loads", [("    yield  # every partial written before anyone reads a neighbour's\n", "")],
     BARRIER, None),
    ("no barrier after each step", [("        yield  # this level finished before the next one reads it\n", "")],
     BARRIER, None),
    ("the barrier inside the if", [("            partial[t] = partial[t] + partial[t + stride]\n        yield",
                                    "            partial[t] = partial[t] + partial[t + stride]\n            yield")],
     "must reach each barrier", None),
    ("no bound on the second load", [("    if i + bd < n:\n        v = v + x[i + bd]\n", "    v = v + x[i + bd]\n")],
     BOUNDS, None),
    ("the block's offset without the 2", [("    i = ctx.blockIdx.x * 2 * bd + t\n", "    i = ctx.blockIdx.x * bd + t\n")],
     MULTI, BOUNDS),
    ("the tree stops a level early", [("    while stride > 0:\n", "    while stride > 1:\n")], "outputs wrong", BOUNDS),
    ("the first element loaded twice", [("        v = v + x[i + bd]\n", "        v = v + x[i]\n")],
     "outputs wrong", BOUNDS),
    ("the partial indexed by the thread", [("        partials[ctx.blockIdx.x] = s\n", "        partials[ctx.threadIdx.x] = s\n")],
     "never written", BOUNDS),
    ("the block size typed in", [("    i = ctx.blockIdx.x * 2 * bd + t\n", "    i = ctx.blockIdx.x * 32 + t\n"),
                                 ("    if i + bd < n:\n        v = v + x[i + bd]\n", "    if i + 16 < n:\n        v = v + x[i + 16]\n")],
     "block size is typed in", BOUNDS),
    ("the tree's first stride typed in", [("    stride = bd // 2\n", "    stride = 8\n")], "IndexError", None),
    ("every thread stores its own cell as the partial",
     [("    if ctx.threadIdx.x == 0:\n        partials[ctx.blockIdx.x] = s\n",
       "    partials[ctx.blockIdx.x] = ctx.shared.partial[ctx.threadIdx.x]\n")], "then by thread 1", BARRIER),
    ("the partial added into", [("        partials[ctx.blockIdx.x] = s\n", "        partials[ctx.blockIdx.x] += s\n")],
     "made from the check's poison", "never written"),
    ("the first load's bound i <= n", [("    if i < n:\n        v = x[i]\n", "    if i <= n:\n        v = x[i]\n")],
     BOUNDS, None),
    ("one element a thread", [("    if i + bd < n:\n        v = v + x[i + bd]\n", "")], "outputs wrong", BOUNDS),
    ("the stride doubles", [("    stride = bd // 2\n    while stride > 0:\n", "    stride = 1\n    while stride < bd:\n"),
                            ("        stride //= 2\n", "        stride *= 2\n")], "outputs wrong", BOUNDS),
    ("the second element x[i + 1]", [("        v = v + x[i + bd]\n", "        v = v + x[i + 1]\n")], "outputs wrong", BOUNDS),
    ("the stride shrinks by one", [("        stride //= 2\n", "        stride -= 1\n")], "outputs wrong", BOUNDS),
    ("the tree without the if", [("        if t < stride:\n            partial[t] = partial[t] + partial[t + stride]\n",
                                  "        partial[t] = partial[t] + partial[t + stride]\n")], "IndexError", None),
], ("reduce_tree", "cuda"): [
    ("no barrier after the loads", [("    __syncthreads();  // every partial written before anyone reads a neighbour's\n", "")],
     "racecheck", None),
    ("no barrier after each step", [("        __syncthreads();  // this level finished before the next one reads it\n", "")],
     "racecheck", None),
    ("no bound on the second load", [("    if (i + blockDim.x < n) v += x[i + blockDim.x];\n",
                                      "    v += x[i + blockDim.x];\n")], "past the end of x was added", None),
    ("the block's offset without the 2", [("(long long)blockIdx.x * (2 * blockDim.x) + t;",
                                           "(long long)blockIdx.x * blockDim.x + t;")], "outputs wrong", "never written"),
    ("the tree stops a level early", [("stride > 0; stride /= 2", "stride > 1; stride /= 2")], "outputs wrong", BOUNDS),
    ("every thread writes its own partial", [("    if (threadIdx.x == 0) partials[blockIdx.x] = s;\n",
                                              "    partials[threadIdx.x] = s;\n")], "wrote past the end", None),
    ("the first load's bound i <= n", [("    if (i < n) v = x[i];\n", "    if (i <= n) v = x[i];\n")],
     "past the end of x was added", None),
    ("one element a thread", [("    if (i + blockDim.x < n) v += x[i + blockDim.x];\n", "")], "outputs wrong", None),
], ("reduce_atomic", "python"): [
    ("the total never set to 0", [("    out[0] = 0\n", "")], "before it was set to 0", BOUNDS),
    ("every thread adds", [("    if ctx.threadIdx.x == 0:\n        out[0] += s", "    if True:\n        out[0] += s")],
     "16 times the sum", None),
    ("stores instead of adding", [("        out[0] += s  # atomicAdd(out, s)\n", "        out[0] = s\n")],
     "outputs wrong", BOUNDS),
    ("zeroed after the launch", [("    out[0] = 0\n    sim.launch(shared_tree_k, -(-n // (2 * threads)), threads, x, n, out,\n"
                                  "               shared={\"partial\": ((threads,), np.float32)})\n",
                                  "    sim.launch(shared_tree_k, -(-n // (2 * threads)), threads, x, n, out,\n"
                                  "               shared={\"partial\": ((threads,), np.float32)})\n    out[0] = 0\n")],
     "all 0", None),
    ("the total starts at 1", [("    out[0] = 0\n", "    out[0] = 1\n")], "outputs wrong", BOUNDS),
    ("the tree called without yield from", [("    s = yield from tree_block_sum(ctx, x, n)\n",
                                             "    s = tree_block_sum(ctx, x, n)\n    yield\n")],
     "TypeError", None),
    ("zeroed by block 0 in the kernel", [("    out[0] = 0\n", ""),
                                         ("    if ctx.threadIdx.x == 0:\n        out[0] += s",
                                          "    if ctx.threadIdx.x == 0 and ctx.blockIdx.x == 0:\n        out[0] = 0\n"
                                          "    if ctx.threadIdx.x == 0:\n        out[0] += s")],
     "order the blocks run in", BOUNDS),
    ("the sum taken on the host", [("    out[0] = 0\n    sim.launch(shared_tree_k, -(-n // (2 * threads)), threads, x, n, out,\n"
                                    "               shared={\"partial\": ((threads,), np.float32)})\n",
                                    "    out[0] = np.sum(x[:n])\n")], "outside any kernel", None),
    ("the grid rounds down", [("-(-n // (2 * threads))", "n // (2 * threads)")], "empty launch", None),
    ("only block 0 adds", [("    if ctx.threadIdx.x == 0:\n", "    if ctx.threadIdx.x == 0 and ctx.blockIdx.x == 0:\n")],
     "outputs wrong", BOUNDS),
    ("n from the padded x", [("threads, x, n, out,", "threads, x, x.size, out,")], "NaN", BOUNDS),
    ("two threads add", [("    if ctx.threadIdx.x == 0:\n        out[0] +=", "    if ctx.threadIdx.x < 2:\n        out[0] +=")],
     "2 times the sum", None),
    ("the total rebound to a new array", [("    out[0] = 0\n", "    out = np.zeros(1, np.float32)\n")],
     "still holds the check's poison", None),
    ("blocks of half the threads", [("-(-n // (2 * threads)), threads, x, n", "-(-n // (2 * threads)), threads // 2, x, n")],
     "outputs wrong", BOUNDS),
    ("zeroed by block 0 before its tree", [("    out[0] = 0\n", ""),
                                           ("    s = yield from tree_block_sum(ctx, x, n)\n    if ctx.threadIdx.x == 0:\n        out[0] += s",
                                            "    if ctx.threadIdx.x == 0 and ctx.blockIdx.x == 0:\n        out[0] = 0\n"
                                            "    s = yield from tree_block_sum(ctx, x, n)\n    if ctx.threadIdx.x == 0:\n        out[0] += s")],
     "order the blocks run in", None),
    ("shared memory for twice the threads", [("-(-n // (2 * threads)), threads, x, n", "-(-n // (2 * threads)), 2 * threads, x, n")],
     "IndexError", None),
], ("reduce_atomic", "cuda"): [
    ("the total never set to 0", [("    const cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), s);\n"
                                   "    if (err != cudaSuccess) return err;\n", "")], "before it was set to 0", BOUNDS),
    ("every thread adds", [("    if (threadIdx.x == 0) atomicAdd(out, s);\n", "    atomicAdd(out, s);\n")],
     "outputs wrong", "never written"),
    ("a plain += across blocks", [("atomicAdd(out, s);", "*out += s;")], "outputs wrong", BOUNDS),
    ("zeroed after the launch", [("    const cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), s);\n"
                                  "    if (err != cudaSuccess) return err;\n"
                                  "    reduction_02_shared_tree<<<blocks, kThreads, 0, s>>>(x, n, out);\n",
                                  "    reduction_02_shared_tree<<<blocks, kThreads, 0, s>>>(x, n, out);\n"
                                  "    const cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), s);\n"
                                  "    if (err != cudaSuccess) return err;\n")], ": got 0,", None),
    ("a float zeroed per block", [("cudaMemsetAsync(out, 0, sizeof(float), s)", "cudaMemsetAsync(out, 0, blocks * sizeof(float), s)")],
     "wrote past the end", None),
    ("only block 0 adds", [("    if (threadIdx.x == 0) atomicAdd(out, s);\n",
                            "    if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(out, s);\n")], "outputs wrong", BOUNDS),
    ("two threads add", [("    if (threadIdx.x == 0) atomicAdd(out, s);\n", "    if (threadIdx.x < 2) atomicAdd(out, s);\n")],
     "outputs wrong", None),
], ("reduce_grid_stride", "python"): [
    ("stride of blockDim only", [("    stride = ctx.gridDim.x * ctx.blockDim.x\n", "    stride = ctx.blockDim.x\n")],
     MULTI, BOUNDS),
    ("start without the block", [("    tid = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x\n",
                                  "    tid = ctx.threadIdx.x\n")], MULTI, BOUNDS),
    ("the tail skipped", [("    if tid < 4 and t < n:\n        s = s + x[t]\n", "")], HEAD_TAIL, None),
    ("the head skipped", [("    if tid < head:\n        s = s + x[tid]\n", "")], HEAD_TAIL, None),
    ("the tail without its bound", [("    if tid < 4 and t < n:\n", "    if tid < 4:\n")], OUTSIDE, None),
    ("chunks counted from x, not x + head", [("        s = s + _f4(x, head + 4 * i)\n", "        s = s + _f4(x, 4 * i)\n"),
                                              ("_f4(x, head + 4 * (i + k * stride))", "_f4(x, 4 * (i + k * stride))")],
     "outputs wrong", HEAD_TAIL),
    ("the unrolled loop steps one stride", [("        i += 4 * stride\n", "        i += stride\n")], "outputs wrong",
     HEAD_TAIL),
    ("the partial indexed by the thread", [("        partials[ctx.blockIdx.x] = s\n", "        partials[tid] = s\n")],
     "IndexError", None),
    ("the block size typed in", [("    tid = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x\n    stride = ctx.gridDim.x * ctx.blockDim.x\n",
                                  "    tid = ctx.blockIdx.x * 64 + ctx.threadIdx.x\n    stride = ctx.gridDim.x * 64\n")],
     "block size is typed in", BOUNDS),
    ("the unrolled loop's bound <=", [("    while i + 3 * stride < n4:\n", "    while i + 3 * stride <= n4:\n")], OUTSIDE, MULTI),
    ("the loop after it steps four strides", [("        s = s + _f4(x, head + 4 * i)\n        i += stride\n",
                                               "        s = s + _f4(x, head + 4 * i)\n        i += 4 * stride\n")],
     "outputs wrong", MULTI),
    ("the partial added into", [("        partials[ctx.blockIdx.x] = s\n", "        partials[ctx.blockIdx.x] += s\n")],
     "made from the check's poison", "never written"),
    ("every thread stores the partial", [("    if ctx.threadIdx.x == 0:\n        partials[ctx.blockIdx.x] = s\n",
                                          "    partials[ctx.blockIdx.x] = s\n")], "then by thread 1", "zeros"),
    ("the head taken to tid <= head", [("    if tid < head:\n", "    if tid <= head:\n")], "outputs wrong", None),
    ("the tail's index without the head", [("    t = head + 4 * n4 + tid\n", "    t = 4 * n4 + tid\n")], HEAD_TAIL, None),
    ("the tail's bound t <= n", [("    if tid < 4 and t < n:\n", "    if tid < 4 and t <= n:\n")], OUTSIDE, None),
    ("the start from gridDim", [("    tid = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x\n",
                                 "    tid = ctx.blockIdx.x * ctx.gridDim.x + ctx.threadIdx.x\n")], MULTI, BOUNDS),
    ("chunks a float apart", [("        s = s + _f4(x, head + 4 * i)\n", "        s = s + _f4(x, head + i)\n"),
                              ("_f4(x, head + 4 * (i + k * stride))", "_f4(x, head + (i + k * stride))")],
     "outputs wrong", HEAD_TAIL),
], ("reduce_grid_stride", "cuda"): [
    ("stride of blockDim only", [("    const long long stride = (long long)gridDim.x * blockDim.x;\n",
                                  "    const long long stride = blockDim.x;\n")], "outputs wrong", "never written"),
    ("start without the block", [("    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
                                  "    const long long tid = threadIdx.x;\n")], "outputs wrong", "never written"),
    ("the tail skipped", [("    if (tid < 4 && t < n) sum += x[t];\n", "")], "wrong, first at index 0:", OUTSIDE),
    ("the head skipped", [("    if (tid < head) sum += x[tid];\n", "")], "wrong, first at index 0:", OUTSIDE),
    ("the tail without its bound", [("    if (tid < 4 && t < n) sum += x[t];\n", "    if (tid < 4) sum += x[t];\n")],
     OUTSIDE, None),
    ("one float4 too many", [("    for (; i < n4; i += stride) {\n", "    for (; i <= n4; i += stride) {\n")], OUTSIDE, None),
    ("the unrolled loop steps one stride", [("i += 4 * stride) {", "i += stride) {")], "outputs wrong", HEAD_TAIL),
    ("the partial indexed by the thread", [("        if (lane == 0) partials[blockIdx.x] = sum;\n",
                                            "        if (lane == 0) partials[threadIdx.x] = sum;\n")], "never written", None),
]}

# A right solution written differently from the lab's (old -> new).
RIGHT = {
    ("reduce_tree", "python"): [
        ("    v = np.float32(0)\n    if i < n:\n        v = x[i]\n    if i + bd < n:\n        v = v + x[i + bd]\n",
         "    v = (x[i] if i < n else np.float32(0)) + (x[i + bd] if i + bd < n else np.float32(0))\n"),
        ("    stride = bd // 2\n    while stride > 0:\n        if t < stride:\n"
         "            partial[t] = partial[t] + partial[t + stride]\n"
         "        yield  # this level finished before the next one reads it\n        stride //= 2\n",
         "    for level in reversed(range(int(math.log2(bd)))):\n        stride = 1 << level\n        if t < stride:\n"
         "            partial[t] += partial[t + stride]\n        yield\n"),
    ],
    ("reduce_tree", "cuda"): [
        ("    float v = 0.0f;\n    if (i < n) v = x[i];\n    if (i + blockDim.x < n) v += x[i + blockDim.x];\n"
         "    partial[t] = v;\n",
         "    partial[t] = (i < n ? x[i] : 0.0f) + (i + blockDim.x < n ? x[i + blockDim.x] : 0.0f);\n"),
        ("for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {",
         "for (unsigned stride = blockDim.x >> 1; stride != 0; stride >>= 1) {"),
    ],
    ("reduce_atomic", "python"): [
        ("    if ctx.threadIdx.x == 0:\n        out[0] += s  # atomicAdd(out, s)\n",
         "    if ctx.threadIdx.x != 0:\n        return\n    out[0] = out[0] + s\n"),
        ("    out[0] = 0\n    sim.launch(shared_tree_k, -(-n // (2 * threads)), threads,",
         "    out[:] = 0.0\n    sim.launch(shared_tree_k, math.ceil(n / (2 * threads)), threads,"),
    ],
    ("reduce_atomic", "cuda"): [
        ("    if (threadIdx.x == 0) atomicAdd(out, s);\n", "    if (threadIdx.x != 0) return;\n    atomicAdd(out, s);\n"),
        ("    const cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), s);\n    if (err != cudaSuccess) return err;\n",
         "    if (cudaError_t err = cudaMemsetAsync(out, 0, 4, s)) return err;\n"),
    ],
    ("reduce_grid_stride", "python"): [
        ("    while i + 3 * stride < n4:\n        a, b, c, d = (_f4(x, head + 4 * (i + k * stride)) for k in range(4))\n"
         "        s = s + (a + b + c + d)\n        i += 4 * stride\n", ""),
        ("    if tid < head:\n        s = s + x[tid]\n", "    if tid < head:\n        s += x[tid]\n"),
    ],
    ("reduce_grid_stride", "cuda"): [
        ("    for (; i + 3 * stride < n4; i += 4 * stride) {\n"
         "        const float4 a = x4[i], b = x4[i + stride], c = x4[i + 2 * stride], d = x4[i + 3 * stride];\n"
         "        sum += ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w)) + ((c.x + c.y) + (c.z + c.w)) +\n"
         "               ((d.x + d.y) + (d.z + d.w));\n    }\n", ""),
        ("        sum += (a.x + a.y) + (a.z + a.w);\n", "        sum += a.x + a.y + a.z + a.w;\n"),
    ],
}

globals().update(wrong_solutions.tests_for("reduction", WRONG, RIGHT))

NAMES = ("reduce_tree", "reduce_atomic", "reduce_grid_stride")


@pytest.mark.parametrize("track", ["python", "cuda"])
@pytest.mark.parametrize("name", NAMES)
def test_integer_cases_are_exact_in_effect(name, track):
    """An integer case's sums are exact in any order, and an error of 1 (one element dropped or counted
    twice) is beyond the tolerance: 1 / ||reference|| > tolerance, whatever the seed."""
    tol = catalog.tolerance(name)
    for seed in range(5):
        for case in catalog.cases(name, track, seed):
            if case.params["kind"] != "int":
                continue
            ref = catalog.reference(name, case, catalog.inputs(name, case))
            assert np.array_equal(ref, np.round(ref)), case.label
            assert 1.0 / max(float(np.linalg.norm(ref)), 1.0) > tol, (case.label, float(np.linalg.norm(ref)))


@pytest.mark.parametrize("track", ["python", "cuda"])
def test_grid_stride_cases_keep_the_chain_the_tolerance_assumes(track):
    """At most GS_CHUNKS float4s a thread (plus a head and a tail element) and the 10-level tree: within
    GS_CHAIN additions, the tolerance's D."""
    assert 4 * rx.GS_CHUNKS + 2 + 10 <= rx.GS_CHAIN
    for seed in range(20):
        for case in catalog.cases("reduce_grid_stride", track, seed):
            p = case.params
            n4 = (p["n"] - p["head"]) // 4
            assert -(-n4 // (p["blocks"] * p["threads"])) <= rx.GS_CHUNKS, case.label
            if case.ragged and p["kind"] == "float":  # a head or tail element missed shows in block 0 alone
                assert p["n"] / p["blocks"] <= rx.GS_PER_BLOCK, case.label


def test_the_atomic_tolerance_still_tells_a_block_counted_twice_in_the_largest_case():
    blocks = -(-rx.ATOMIC_LARGE // 512)
    assert rx.ReduceAtomic.tolerance < 0.5 / blocks


def test_each_check_draws_a_fresh_case():
    for name in NAMES:
        for track in ("python", "cuda"):
            labels = {tuple(c.label for c in catalog.cases(name, track, s)) for s in range(6)}
            assert len(labels) > 1, (name, track)


_HARD_CODED = {
    "reduce_tree": ("def block_sums_k(ctx, x, n, partials):\n    if ctx.threadIdx.x == 0:\n"
                    "        partials[ctx.blockIdx.x] = TABLE[n][ctx.blockIdx.x]\n"),
    # from a kernel: a total stored outside any kernel fails every check
    "reduce_atomic": ("from harness.base import sim\n\n\ndef _k(ctx, n, out):\n    out[0] = TABLE[n][0]\n\n\n"
                      "def shared_tree_sum(x, n, out, threads):\n    sim.launch(_k, 1, 1, n, out)\n"),
    "reduce_grid_stride": ("def grid_stride_k(ctx, x, n, head, partials):\n    if ctx.threadIdx.x == 0:\n"
                           "        partials[ctx.blockIdx.x] = TABLE[n][ctx.blockIdx.x]\n"),
}


@pytest.mark.parametrize("name", NAMES)
def test_a_hard_coded_output_fails_the_next_check(name, tmp_path):
    """Every output of one check's cases, typed into the file: the next check draws new values and a new
    size, so it fails."""
    table = {}
    for case in catalog.cases(name, "python", 1):
        table[case.params["n"]] = [float(v) for v in catalog.reference(name, case, catalog.inputs(name, case))]
    text = f"import numpy as np\n\nTABLE = {table!r}\n\n\n" + _HARD_CODED[name]
    wrong_solutions.write(tmp_path, name, "python", text)
    assert hcheck.check(name, "python", tmp_path, seed=1).passed  # the table is right for its own cases
    assert not hcheck.check(name, "python", tmp_path, seed=2).passed
