"""convolution's exercises shown to the checker: for each exercise and track, wrong solutions (patches
over the lab's solution) that must fail naming their cause, and one right solution written differently
that must pass. The Python track runs here; the CUDA track's patches are checked to apply here and run
on a GPU (tests/wrong_solutions.py makes the tests)."""

from __future__ import annotations

import numpy as np
import wrong_solutions
from wrong_solutions import BARRIER, BOUNDS

from harness.user.exercises import catalog
from harness.user.exercises import check as hcheck

FLIPPED = "the filter is not flipped"
PADDING = "the zero padding"
HALO = "the halo"
BELOW = "below 0"
NOT_TILE = "did not come from the shared tile"
LAUNCH = "another block shape"
NEVER = "never written"
WRONG_VALUES = "outputs wrong"

# (what the mistake is, [(old, new), ...], text the thing to fix must hold, text it must not hold)
WRONG = {("conv1d_naive", "python"): [
    ("no bounds check", [("    if i >= n:\n        return\n", "")], "IndexError", None),
    ("stops one early", [("    if i >= n:\n", "    if i >= n - 1:\n")], NEVER, BOUNDS),
    ("blockIdx times threadIdx", [("    i = blockidx * blockdim + threadidx\n", "    i = blockidx * threadidx + threadidx\n")],
     NEVER, BOUNDS),
    # x[-1] is Python's last element: the small cases catch it as an IndexError, the others as wrong values
    ("negative neighbours not skipped", [("        if 0 <= k < n:\n", "        if k < n:\n")], BELOW, None),
    ("the last input skipped", [("        if 0 <= k < n:\n", "        if 0 <= k < n - 1:\n")], WRONG_VALUES, BOUNDS),
    ("the filter flipped", [("f[j] * x[k]", "f[2 * r - j] * x[k]")], FLIPPED, BOUNDS),
    ("one tap short", [("    for j in range(2 * r + 1):\n", "    for j in range(2 * r):\n")], WRONG_VALUES, FLIPPED),
    ("neighbours not centred", [("        k = i - r + j\n", "        k = i + j\n")], WRONG_VALUES, FLIPPED),
    ("the edges replicated, not zero", [("        if 0 <= k < n:\n            s = np.float32(s + f[j] * x[k])\n", "        s = np.float32(s + f[j] * x[min(max(k, 0), n - 1)])\n")],
     PADDING, FLIPPED),
    ("the ends wrapped around", [("        if 0 <= k < n:\n            s = np.float32(s + f[j] * x[k])\n", "        s = np.float32(s + f[j] * x[k % n])\n")], PADDING, FLIPPED),
    ("x[0] taken for padding", [("        if 0 <= k < n:\n", "        if 0 < k < n:\n")], PADDING, BOUNDS),
    ("the outputs near the ends left 0", [("    s = np.float32(0)\n", "    if i < r or i >= n - r:\n        out[i] = 0\n"
                                                                      "        return\n    s = np.float32(0)\n")],
     PADDING, FLIPPED),
    ("the sum added into out", [("    out[i] = s\n", "    out[i] += s\n")], "before any thread wrote it", NEVER),
    ("the block's size written as 32", [("    i = blockidx * blockdim + threadidx\n", "    i = blockidx * 32 + threadidx\n")],
     LAUNCH, FLIPPED),
    ("a float16 sum", [("            s = np.float32(s + f[j] * x[k])\n", "            s = np.float16(s + f[j] * x[k])\n")],
     WRONG_VALUES, FLIPPED),
    ("the sum starts at the first tap", [("    s = np.float32(0)\n", "    s = np.float32(f[0])\n")], WRONG_VALUES, BOUNDS),
    ("half the taps", [("    for j in range(2 * r + 1):\n", "    for j in range(r + 1):\n")], WRONG_VALUES, BOUNDS),
    ("the bound one too far", [("    if i >= n:\n", "    if i > n:\n")], "IndexError", None),
], ("conv1d_naive", "cuda"): [
    ("no bounds check", [("    if (i >= n) return;\n", "")], "wrote past the end", None),
    ("no zero padding", [("        if (k >= 0 && k < n) sum += f[j] * x[k];\n", "        sum += f[j] * x[k];\n")],
     "memcheck", None),
    ("index shifted by one", [("blockDim.x + threadIdx.x;\n", "blockDim.x + threadIdx.x + 1;\n")],
     "an index shifted by one", BOUNDS),
    ("x[0] skipped", [("if (k >= 0 && k < n)", "if (k > 0 && k < n)")], WRONG_VALUES, BOUNDS),
    ("the edges replicated, not zero", [("        if (k >= 0 && k < n) sum += f[j] * x[k];\n",
                                         "        sum += f[j] * x[k < 0 ? 0 : (k >= n ? n - 1 : k)];\n")],
     WRONG_VALUES, BOUNDS),
    ("the filter flipped", [("sum += f[j] * x[k]", "sum += f[2 * r - j] * x[k]")], FLIPPED, BOUNDS),
    ("one tap short", [("for (int j = 0; j <= 2 * r; ++j)", "for (int j = 0; j < 2 * r; ++j)")], WRONG_VALUES,
     FLIPPED),
    ("neighbours not centred", [("const long long k = i - r + j;", "const long long k = i + j;")], WRONG_VALUES,
     FLIPPED),
], ("conv1d_tiled", "python"): [
    ("no barrier after the loads",
     [("    yield  # the whole tile, halo included, must be in shared memory before any thread reads it\n", "")],
     "the barrier after the loads", None),
    ("the halo not loaded", [("inside = t < span + 2 * r and 0 <= k < n", "inside = r <= t < span + r and 0 <= k < n")],
     WRONG_VALUES, BARRIER),
    ("negative inputs not zeroed", [("inside = t < span + 2 * r and 0 <= k < n", "inside = t < span + 2 * r and k < n")],
     BELOW, BARRIER),
    ("no bound at the array's end", [("inside = t < span + 2 * r and 0 <= k < n", "inside = t < span + 2 * r and 0 <= k")],
     "IndexError", None),
    ("loads skip cells", [("        t += ctx.blockDim.x\n", "        t += 2 * ctx.blockDim.x\n")],
     "no thread stored", "a missing barrier"),
    ("the filter flipped", [("f[j] * win[m + j]", "f[2 * r - j] * win[m + j]")], FLIPPED, BARRIER),
    ("every thread's window at the tile's start", [("win = tile[first:first + outs + 2 * r]", "win = tile[:outs + 2 * r]")],
     WRONG_VALUES, BARRIER),
    ("no bound on the store", [("        if i < n:\n", "        if True:\n")], "IndexError", None),
    ("the right halo not loaded", [("        inside = t < span + 2 * r and 0 <= k < n\n", "        inside = t < span + r and 0 <= k < n\n")], HALO, BARRIER),
    ("the edge replicated past the end", [("        tile[t] = x[k] if inside else np.float32(0)\n",
                                           "        tile[t] = x[min(k, n - 1)] if inside or k >= n else np.float32(0)\n")],
     PADDING, BARRIER),
    ("the sums read x, not the tile", [("                s = np.float32(s + f[j] * win[m + j])\n",
                                        "                k = i - r + j\n                s = np.float32(s + f[j] * "
                                        "(x[k] if 0 <= k < n else np.float32(0)))\n")], NOT_TILE, "a missing barrier"),
    ("a barrier inside the load loop", [("        t += ctx.blockDim.x\n    yield", "        t += ctx.blockDim.x\n        yield\n    yield")],
     "every thread of a block must reach each barrier", None),
    ("the outputs a thread written as 2", [("    for m in range(outs):\n", "    for m in range(2):\n")], LAUNCH, BARRIER),
    ("the loads strided by 8", [("        t += ctx.blockDim.x\n", "        t += 8\n")], "no thread stored", "a missing barrier"),
    ("the tile's start without the halo", [("        k = start - r + t\n", "        k = start + t\n")], WRONG_VALUES, BARRIER),
    ("the block's start without its outputs a thread", [("        k = start - r + t\n",
                                                         "        k = ctx.blockIdx.x * ctx.blockDim.x - r + t\n")],
     WRONG_VALUES, BARRIER),
    ("outputs strided by the block", [("        i = start + first + m\n",
                                       "        i = start + ctx.threadIdx.x + m * ctx.blockDim.x\n")], WRONG_VALUES, BARRIER),
    ("the sum not restarted for each output", [("            s = np.float32(0)\n            for j",
                                                "            s = s if m else np.float32(0)\n            for j")],
     WRONG_VALUES, BARRIER),
    ("the sum added into out", [("            out[i] = s\n", "            out[i] += s\n")], "before any thread wrote it", NEVER),
], ("conv1d_tiled", "cuda"): [
    ("no barrier after the loads", [("    __syncthreads();\n", "")], "racecheck", None),
    ("the edges replicated, not zero", [("tile[t] = (t < kTile1d + 2 * R && k >= 0 && k < n) ? v : 0.0f;", "tile[t] = v;")],
     WRONG_VALUES, BOUNDS),
    ("unguarded loads", [("const float v = x[k < 0 ? 0 : (k >= n ? n - 1 : k)];", "const float v = x[k];")],
     "memcheck", None),
    ("the halo not loaded", [("tile[t] = (t < kTile1d + 2 * R && k >= 0", "tile[t] = (t >= R && t < kTile1d + R && k >= 0")],
     WRONG_VALUES, BOUNDS),
    ("the filter flipped", [("c_filter_1d[R][j] * win[m + j]", "c_filter_1d[R][2 * R - j] * win[m + j]")], FLIPPED,
     BOUNDS),
    ("the partial tile's last outputs never stored",
     [("    } else {\n#pragma unroll\n        for (int m = 0; m < kOuts1d; ++m)\n            if (i + m < n) out[i + m] = acc[m];\n"
       "    }\n", "    }\n")], BOUNDS, None),
    ("one tap short", [("for (int j = 0; j <= 2 * R; ++j) acc[m]", "for (int j = 0; j < 2 * R; ++j) acc[m]")],
     WRONG_VALUES, FLIPPED),
], ("conv2d_tiled", "python"): [
    ("no barrier after the loads",
     [("    yield  # every pixel of the tile and its halo loaded before anyone reads a neighbour's\n", "")],
     "the barrier after the loads", None),
    ("no column bound on the store", [("        if row < h and col < w:\n", "        if row < h:\n")], "IndexError", None),
    ("the top edge not zeroed", [("inside = 0 <= gy < h and 0 <= gx < w", "inside = gy < h and 0 <= gx < w")],
     BELOW, BARRIER),
    ("the tile without its halo offset", [("gy, gx = row0 - r + ty, col0 - r + tx", "gy, gx = row0 + ty, col0 + tx")],
     WRONG_VALUES, BARRIER),
    ("the filter transposed", [("f[fy, fx] * v", "f[fx, fy] * v")], WRONG_VALUES, FLIPPED),
    ("the filter flipped", [("f[fy, fx] * v", "f[2 * r - fy, 2 * r - fx] * v")], FLIPPED, BARRIER),
    ("one load a thread", [("    while k < in_h * in_w:\n", "    if k < in_h * in_w:\n")], "no thread stored",
     "a missing barrier"),
    ("the right and bottom halo not loaded", [("        inside = 0 <= gy < h and 0 <= gx < w\n",
                                               "        inside = 0 <= gy < h and 0 <= gx < w and tx < tw + r and ty < th + r\n")],
     HALO, BARRIER),
    ("the right edge replicated", [("tile[ty, tx] = x[gy, gx] if inside", "tile[ty, tx] = x[gy, min(gx, w - 1)] if (0 <= gy < h and 0 <= gx)")],
     PADDING, BARRIER),
    ("the sums read x, not the tile", [("    acc = [np.float32(0)] * rows\n",
                                        "    for oy in range(rows):\n        rr, cc = row0 + ty0 + oy, col0 + tx\n"
                                        "        if rr < h and cc < w:\n            s = np.float32(0)\n"
                                        "            for fy in range(2 * r + 1):\n                for fx in range(2 * r + 1):\n"
                                        "                    yy, xx = rr - r + fy, cc - r + fx\n"
                                        "                    if 0 <= yy < h and 0 <= xx < w:\n"
                                        "                        s = np.float32(s + f[fy, fx] * x[yy, xx])\n"
                                        "            out[rr, cc] = s\n    return\n    acc = [np.float32(0)] * rows\n")],
     NOT_TILE, "a missing barrier"),
    ("the loads strided by 16", [("        k += ctx.blockDim.x * ctx.blockDim.y\n", "        k += 16\n")], "no thread stored",
     "a missing barrier"),
    ("the halo offset on the columns only", [("        gy, gx = row0 - r + ty, col0 - r + tx\n", "        gy, gx = row0 + ty, col0 - r + tx\n")], WRONG_VALUES, BARRIER),
    ("the rows of a thread interleaved", [("        row, col = row0 + ty0 + oy, col0 + tx\n",
                                           "        row, col = row0 + ctx.threadIdx.y + oy * ctx.blockDim.y, col0 + tx\n")],
     WRONG_VALUES, BARRIER),
    ("the last filter row skipped", [("                if 0 <= fy <= 2 * r:\n", "                if 0 <= fy < 2 * r:\n")],
     WRONG_VALUES, FLIPPED),
    ("the store bounded by the transposed image", [("        if row < h and col < w:\n", "        if row < w and col < h:\n")],
     "IndexError", None),
    ("the image read as x[column, row]", [("tile[ty, tx] = x[gy, gx] if inside", "tile[ty, tx] = x[gx, gy] if inside")],
     "IndexError", None),
    ("the sums added into out", [("            out[row, col] = acc[oy]\n", "            out[row, col] += acc[oy]\n")],
     "before any thread wrote it", NEVER),
], ("conv2d_tiled", "cuda"): [
    ("no barrier after the loads", [("    __syncthreads();\n", "")], "racecheck", None),
    ("the edges replicated, not zero", [("tile[k] = (gy == cy && gx == cx) ? v : 0.0f;", "tile[k] = v;")],
     WRONG_VALUES, BOUNDS),
    ("unguarded loads", [("const float v = x[(long long)cy * w + cx];", "const float v = x[(long long)gy * w + gx];")],
     "memcheck", None),
    ("no column bound on the store", [("if (row < h && col < w) out", "if (row < h) out")], "wrote past the end", None),
    ("the filter flipped", [("c_filter_2d[R][fy * kSide + fx] * v",
                             "c_filter_2d[R][(kSide - 1 - fy) * kSide + kSide - 1 - fx] * v")], FLIPPED, BOUNDS),
    ("the tile's row length without the halo", [("tile[(ty0 + iy) * kInW + tx + fx]", "tile[(ty0 + iy) * kTileW2d + tx + fx]")],
     WRONG_VALUES, BOUNDS),
    ("tile cells placed by the output tile's width",
     [("const int ty = k / kInW, tx = k % kInW;", "const int ty = k / kTileW2d, tx = k % kTileW2d;")],
     WRONG_VALUES, BOUNDS),
]}

RIGHT = {
    ("conv1d_naive", "python"): [("    s = np.float32(0)\n    for j in range(2 * r + 1):\n        k = i - r + j\n"
                                  "        if 0 <= k < n:\n            s = np.float32(s + f[j] * x[k])\n    out[i] = s\n",
                                  "    lo, hi = max(i - r, 0), min(i + r + 1, n)\n"
                                  "    out[i] = np.dot(f[lo - i + r:hi - i + r], x[lo:hi])\n")],
    ("conv1d_naive", "cuda"): [("    for (int j = 0; j <= 2 * r; ++j) {\n        const long long k = i - r + j;\n"
                                "        if (k >= 0 && k < n) sum += f[j] * x[k];\n    }\n",
                                "    const long long lo = i < r ? 0 : i - r, hi = i + r < n ? i + r : n - 1;\n"
                                "    for (long long k = lo; k <= hi; ++k) sum = fmaf(f[k - i + r], x[k], sum);\n")],
    ("conv1d_tiled", "python"): [("    t = ctx.threadIdx.x\n", ""),
                                 ("    while t < tile.size:", "    for t in range(ctx.threadIdx.x, tile.size, ctx.blockDim.x):"),
                                 ("        t += ctx.blockDim.x\n", ""),
                                 ("            s = np.float32(0)\n            for j in range(2 * r + 1):\n"
                                  "                s = np.float32(s + f[j] * win[m + j])\n            out[i] = s\n",
                                  "            out[i] = np.dot(f, tile[first + m:first + m + 2 * r + 1])\n")],
    ("conv1d_tiled", "cuda"): [("        const float v = x[k < 0 ? 0 : (k >= n ? n - 1 : k)];\n"
                                "        tile[t] = (t < kTile1d + 2 * R && k >= 0 && k < n) ? v : 0.0f;\n",
                                "        if (k >= 0 && k < n) tile[t] = x[k];\n        else tile[t] = 0.0f;\n"),
                               ("        for (int j = 0; j <= 2 * R; ++j) acc[m] += c_filter_1d[R][j] * win[m + j];\n",
                                "        for (int j = 0; j <= 2 * R; ++j)\n"
                                "            acc[m] = fmaf(c_filter_1d[R][j], tile[kOuts1d * threadIdx.x + m + j], acc[m]);\n")],
    ("conv2d_tiled", "python"): [("    acc = [np.float32(0)] * rows\n    for iy in range(rows + 2 * r):\n"
                                  "        for fx in range(2 * r + 1):\n            v = tile[ty0 + iy, tx + fx]\n"
                                  "            for oy in range(rows):\n                fy = iy - oy\n"
                                  "                if 0 <= fy <= 2 * r:\n"
                                  "                    acc[oy] = np.float32(acc[oy] + f[fy, fx] * v)\n"
                                  "    for oy in range(rows):\n        row, col = row0 + ty0 + oy, col0 + tx\n"
                                  "        if row < h and col < w:\n            out[row, col] = acc[oy]\n",
                                  "    for oy in range(rows):\n        row, col = row0 + ty0 + oy, col0 + tx\n"
                                  "        if row >= h or col >= w:\n            continue\n"
                                  "        window = tile[ty0 + oy:ty0 + oy + 2 * r + 1, tx:tx + 2 * r + 1]\n"
                                  "        out[row, col] = np.sum(f * window, dtype=np.float32)\n")],
    ("conv2d_tiled", "cuda"): [("        const float v = x[(long long)cy * w + cx];\n"
                                "        tile[k] = (gy == cy && gx == cx) ? v : 0.0f;\n",
                                "        tile[k] = (gy >= 0 && gy < h && gx >= 0 && gx < w) ? x[(long long)gy * w + gx] : 0.0f;\n"),
                               ("        const int cy = gy < 0 ? 0 : (gy >= h ? h - 1 : gy), cx = gx < 0 ? 0 : (gx >= w ? w - 1 : gx);\n",
                                ""),
                               ("            for (int oy = 0; oy < kRows2d; ++oy) {  // each output whose filter row fy covers input row iy\n"
                                "                const int fy = iy - oy;\n"
                                "                if (fy >= 0 && fy < kSide) acc[oy] += c_filter_2d[R][fy * kSide + fx] * v;\n",
                                "            for (int oy = 0; oy < kRows2d; ++oy) {\n"
                                "                const int fy = iy - oy;\n"
                                "                if (fy >= 0 && fy < kSide) acc[oy] = fmaf(c_filter_2d[R][fy * kSide + fx], v, acc[oy]);\n")],
}

globals().update(wrong_solutions.tests_for("convolution", WRONG, RIGHT))


def test_every_case_but_the_control_has_an_asymmetric_filter_and_the_edges_are_reached():
    """A flipped filter must fail: every filter but the control's differs from its mirror image (and in
    2-D from its transpose); radius 0, 1 and the largest, an input smaller than the radius, whole tiles
    (several) and partial ones are all among the cases, and the CUDA track has one large case."""
    for name, dims, rmax in (("conv1d_naive", 1, 8), ("conv1d_tiled", 1, 8), ("conv2d_tiled", 2, 4)):
        for track in ("python", "cuda"):
            cases = catalog.cases(name, track, 12345)
            radii = {c.params["r"] for c in cases}
            assert {0, 1, rmax} <= radii, (name, track, radii)
            assert any(c.exact_multi for c in cases) and any(c.ragged for c in cases), (name, track)
            sizes = [c.params["n"] if dims == 1 else min(c.params["h"], c.params["w"]) for c in cases]
            assert any(s < c.params["r"] for s, c in zip(sizes, cases)), (name, track)
            assert sum(c.params["sym"] for c in cases) == 1, (name, track)
            if track == "cuda":
                assert max(c.params["n"] if dims == 1 else c.params["h"] * c.params["w"] for c in cases) > 10 ** 6
            for c in cases:
                f = catalog.inputs(name, c)["f"]
                if c.params["sym"]:
                    assert np.array_equal(f, f[::-1] if dims == 1 else f[::-1, ::-1])
                elif c.params["r"]:
                    flipped = f[::-1] if dims == 1 else f[::-1, ::-1]
                    assert np.abs(f - flipped).max() > 0.3, (name, track, c.label)
                    if dims == 2:
                        assert np.abs(f - f.T).max() > 0.05, (name, track, c.label)


def test_a_hard_coded_output_fails_the_fresh_case(tmp_path):
    """An output copied from one check (the fresh case's, by its size) fails the next check, whose fresh
    case of that size holds other numbers: the lab's solution with its outputs replaced by one run's."""
    name = "conv1d_naive"
    fixed = {c.params["n"] for c in catalog.cases(name, "python", 0)[:-1]}
    seed = next(s for s in range(1, 100) if catalog.cases(name, "python", s)[-1].params["n"] not in fixed)
    fresh = catalog.cases(name, "python", seed)[-1]
    n = fresh.params["n"]
    got = catalog.reference(name, fresh, catalog.inputs(name, fresh)).astype(np.float32)
    table = ", ".join(repr(float(v)) for v in got)
    text = wrong_solutions.patched(name, "python", [("    out[i] = s\n",
                                                     f"    out[i] = [{table}][i] if n == {n} else s\n")])
    wrong_solutions.write(tmp_path, name, "python", text)
    assert hcheck.check(name, "python", tmp_path, seed=seed).passed  # the run it was copied from
    other = next(s for s in range(seed + 1, 10_000) if catalog.cases(name, "python", s)[-1].params["n"] == n)
    v = hcheck.check(name, "python", tmp_path, seed=other)  # a fresh case of the same size, other numbers
    assert not v.passed and WRONG_VALUES in v.first_fix, v.lines
