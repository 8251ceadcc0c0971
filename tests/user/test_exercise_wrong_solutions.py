"""Wrong solutions the exercise checker must fail, with the cause it must (and must not) name, and a
right solution written differently from the lab's that it must pass: for every exercise and both
tracks. Each is a small patch over the lab's solution (old text -> new text, old found exactly once).
The Python track runs here (CPU); the CUDA track's runs are gpu-marked, and their patches are checked
to apply here. harness/user/exercises/README.md lists them per exercise."""

from __future__ import annotations

from pathlib import Path

import pytest
import wrong_solutions
from wrong_solutions import BARRIER, BOUNDS, check_fails, patched, write

from harness.user import exercises as hx
from harness.user.exercises import catalog
from harness.user.exercises import check as hcheck

ROOT = Path(__file__).resolve().parents[2]


# (what the mistake is, [(old, new), ...], text the thing to fix must hold, text it must not hold)
WRONG = {("square", "python"): [
    ("blockIdx times threadIdx", [("    i = blockidx * blockdim + threadidx\n", "    i = blockidx * threadidx + threadidx\n")],
     "never written", BOUNDS),
    ("stops one early", [("    if i < n:\n", "    if i < n - 1:\n")], "never written", BOUNDS),
    ("no bounds check", [("    if i < n:\n", "    if i <= n:\n")], "IndexError", None),
    ("a square that does not wrap", [("        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)\n",
                                      "        a[i] = (int(a[i]) * int(a[i])) % (2**31)\n")], "outputs wrong", BOUNDS),
    ("block and thread swapped", [("    i = blockidx * blockdim + threadidx\n", "    i = threadidx * blockdim + blockidx\n")],
     "never written", BOUNDS),
    ("the partial block skipped", [("    if i < n:\n", "    if i < (n // blockdim) * blockdim:\n")], BOUNDS, None),
    ("one thread squares the whole array", [("    i = blockidx * blockdim + threadidx\n    if i < n:\n", "    if blockidx == 0 and threadidx == 0:\n"),
                                            ("        v = int(a[i]) & 0xFFFFFFFF\n        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)\n",
                                             "        a[:n] = a[:n] * a[:n]\n")], "one thread per element", BOUNDS),
    ("every thread squares the whole array", [("        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)\n", "        a[:] = a * a\n")],
     "one thread per element", BOUNDS),
    ("a block of 256 hard-coded", [("    i = blockidx * blockdim + threadidx\n", "    i = blockidx * 256 + threadidx\n")], "never written", BOUNDS),
    ("blocks overlap by one", [("    i = blockidx * blockdim + threadidx\n", "    i = blockidx * (blockdim - 1) + threadidx\n")],
     "outputs wrong", BOUNDS),
    ("element 0 skipped", [("    if i < n:\n", "    if 0 < i < n:\n")], "the first thread's index is not 0", BOUNDS),
    ("a saturating square", [("        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)\n", "        a[i] = min(int(a[i]) ** 2, 2**31 - 1)\n")],
     "outputs wrong", BOUNDS),
    ("the square in float32", [("        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)\n",
                                "        a[i] = np.int32(np.float32(a[i]) * np.float32(a[i]))\n")], "outputs wrong", BOUNDS),
    ("the square in float64", [("        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)\n",
                                "        a[i] = np.uint32(int(float(v) * float(v)) & 0xFFFFFFFF).view(np.int32)\n")], "outputs wrong", BOUNDS),
    ("the low 31 bits kept", [("        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)\n", "        a[i] = (v * v) & 0x7FFFFFFF\n")],
     "outputs wrong", BOUNDS),
    ("a Python int stored unwrapped", [("        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)\n", "        a[i] = int(a[i]) * int(a[i])\n")],
     "OverflowError", BOUNDS),
], ("square", "cuda"): [
    ("no bounds check", [("    if (i >= n) return;\n", "")], "wrote past the end", None),
    ("index shifted by one", [("    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
                               "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x + 1;\n")],
     "an index shifted by one", BOUNDS),
    ("writes zeros", [("    a[i] = wrap_square(a[i]);\n", "    a[i] = 0;\n")], "writes zeros", None),
    ("managed memory never freed", [("    const cudaError_t ferr = cudaFree(a);\n", "    const cudaError_t ferr = cudaSuccess;\n")],
     "never freed", None),
    ("managed launch rounds the grid down", [("    square_int32_kernel<<<(unsigned)cdiv(n, threads), threads>>>(a, n);\n",
                                              "    square_int32_kernel<<<(unsigned)(n / threads), threads>>>(a, n);\n")],
     "exercise_managed", None),
    ("blockIdx times threadIdx", [("    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
                                   "    long long i = (long long)blockIdx.x * threadIdx.x + threadIdx.x;\n")],
     "never written", BOUNDS),
    ("a block of 256 hard-coded", [("    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
                                    "    long long i = (long long)blockIdx.x * 256 + threadIdx.x;\n")], "never written", BOUNDS),
    ("element 0 skipped", [("    if (i >= n) return;\n", "    if (i >= n || i == 0) return;\n")], "the first thread's index is not 0", BOUNDS),
    ("the square in float", [("    a[i] = wrap_square(a[i]);\n", "    a[i] = (int)((float)a[i] * (float)a[i]);\n")], "outputs wrong", BOUNDS),
], ("grid_stride", "python"): [
    ("stride of blockDim only", [("    stride = ctx.blockDim.x * ctx.gridDim.x\n", "    stride = ctx.blockDim.x\n")],
     "more than one thread", None),
    ("stride of gridDim only", [("    stride = ctx.blockDim.x * ctx.gridDim.x\n", "    stride = ctx.gridDim.x\n")],
     "more than one thread", None),
    ("start forgets threadIdx", [("    i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x\n",
                                  "    i = ctx.blockIdx.x * ctx.blockDim.x\n")], "more than one thread", None),
    ("stops one early", [("    while i < n:\n", "    while i < n - 1:\n")], "never written", BOUNDS),
    ("adds instead of squaring", [("        out[i] = x[i] * x[i]\n", "        out[i] = x[i] + x[i]\n")],
     "outputs wrong", None),
    ("steps one too far", [("        i += stride\n", "        i += stride + 1\n")], "never written", None),
    ("one thread runs the whole loop", [("    while i < n:\n        out[i] = x[i] * x[i]\n        i += stride\n",
                                         "    if i == 0:\n        out[:n] = x[:n] * x[:n]\n")], "more than its share", BOUNDS),
    ("x squared in place", [("        out[i] = x[i] * x[i]\n", "        x[i] = x[i] * x[i]\n        out[i] = x[i]\n")], "read-only", None),
    ("an if, not a loop", [("    while i < n:\n        out[i] = x[i] * x[i]\n        i += stride\n", "    if i < n:\n        out[i] = x[i] * x[i]\n")],
     "each thread stops after its first element", BOUNDS),
    ("start from gridDim", [("    i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x\n", "    i = ctx.blockIdx.x * ctx.gridDim.x + ctx.threadIdx.x\n")],
     "more than one thread", BOUNDS),
    ("stride one more than the grid", [("    stride = ctx.blockDim.x * ctx.gridDim.x\n", "    stride = ctx.blockDim.x * ctx.gridDim.x + 1\n")],
     "the stride must be the whole grid's thread count", BOUNDS),
    ("stride a block short", [("    stride = ctx.blockDim.x * ctx.gridDim.x\n", "    stride = ctx.blockDim.x * max(ctx.gridDim.x - 1, 1)\n")],
     "more than one thread", BOUNDS),
    ("32 threads a block hard-coded", [("    stride = ctx.blockDim.x * ctx.gridDim.x\n    i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x\n",
                                        "    stride = 32 * ctx.gridDim.x\n    i = ctx.blockIdx.x * 32 + ctx.threadIdx.x\n")], "never written", BOUNDS),
    ("x times |x|", [("        out[i] = x[i] * x[i]\n", "        out[i] = x[i] * abs(x[i])\n")], "outputs wrong", BOUNDS),
    ("the square in float16", [("        out[i] = x[i] * x[i]\n", "        out[i] = np.float16(x[i]) * np.float16(x[i])\n")], "outputs wrong", BOUNDS),
    ("the last element copied", [("        out[i] = x[i] * x[i]\n", "        out[i] = x[i] * x[i] if i < n - 1 else x[i]\n")], "outputs wrong", BOUNDS),
], ("grid_stride", "cuda"): [
    ("stride of blockDim only", [("    const long long stride = (long long)gridDim.x * blockDim.x;\n",
                                  "    const long long stride = blockDim.x;\n")], "more than one thread", None),
    ("stride of gridDim only", [("    const long long stride = (long long)gridDim.x * blockDim.x;\n",
                                 "    const long long stride = gridDim.x;\n")], "more than one thread", None),
    ("start is threadIdx", [("    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
                             "    const long long idx = threadIdx.x;\n")], "more than one thread", None),
    ("stride doubled", [("    const long long stride = (long long)gridDim.x * blockDim.x;\n",
                         "    const long long stride = 2LL * gridDim.x * blockDim.x;\n")], "never written", None),
    ("one past the end", [("i < n; i += stride", "i <= n; i += stride")], "wrote past the end", None),
    ("copies instead of squaring", [("out[i] = x[i] * x[i];", "out[i] = x[i];")], "outputs wrong", None),
    ("an if, not a loop", [("for (long long i = idx; i < n; i += stride) out[i] = x[i] * x[i];",
                            "if (idx < n) out[idx] = x[idx] * x[idx] + 0.0f * stride;")], "each thread stops after its first element", BOUNDS),
    ("start from gridDim", [("    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
                             "    const long long idx = (long long)blockIdx.x * gridDim.x + threadIdx.x;\n")], "more than one thread", BOUNDS),
], ("grayscale", "python"): [
    ("float64 weights", [("    return int((CR * np.float32(r) + CG * np.float32(g)) + CB * np.float32(b))\n",
                          "    return int(0.2989 * float(r) + 0.5870 * float(g) + 0.1140 * float(b))\n")],
     "outputs wrong", "never written"),
    ("a weight off by one in the last digit", [("CR, CG, CB = np.float32(0.2989), np.float32(0.5870), np.float32(0.1140)",
                                              "CR, CG, CB = np.float32(0.2990), np.float32(0.5870), np.float32(0.1140)")],
     "outputs wrong", "never written"),
    ("no bounds check", [("    if i < n:\n", "    if True:\n")], "IndexError", None),
    ("the partial block skipped", [("    if i < n:\n", "    if i < (n // blockdim) * blockdim:\n")], BOUNDS, None),
    ("blockIdx times threadIdx", [("    i = blockidx * blockdim + threadidx\n", "    i = blockidx * threadidx + threadidx\n")],
     "never written", BOUNDS),
    ("planes swapped", [("_grey(x[i], x[i + n], x[i + 2 * n])", "_grey(x[i + 2 * n], x[i + n], x[i])")],
     "outputs wrong", BOUNDS),
    ("256 threads a block hard-coded", [("    i = blockidx * blockdim + threadidx\n", "    i = blockidx * 256 + threadidx\n")],
     "never written", BOUNDS),
    ("rounded to the nearest byte", [("    return int((CR * np.float32(r) + CG * np.float32(g)) + CB * np.float32(b))\n",
                                      "    return int(round(float((CR * np.float32(r) + CG * np.float32(g)) + CB * np.float32(b))))\n")],
     "rounding to the nearest byte", "never written"),
    ("the sum from blue to red", [("    return int((CR * np.float32(r) + CG * np.float32(g)) + CB * np.float32(b))\n",
                                   "    return int((CB * np.float32(b) + CG * np.float32(g)) + CR * np.float32(r))\n")],
     "the sum in another order", "never written"),
    ("green and blue added first", [("    return int((CR * np.float32(r) + CG * np.float32(g)) + CB * np.float32(b))\n",
                                      "    return int(CR * np.float32(r) + (CG * np.float32(g) + CB * np.float32(b)))\n")],
     "the sum in another order", "never written"),
    ("integer weights", [("_grey(x[i], x[i + n], x[i + 2 * n])", "(299 * int(x[i]) + 587 * int(x[i + n]) + 114 * int(x[i + 2 * n])) // 1000")],
     "one off the lab's", BOUNDS),
    ("interleaved RGB", [("_grey(x[i], x[i + n], x[i + 2 * n])", "_grey(x[3 * i], x[3 * i + 1], x[3 * i + 2])")], "outputs wrong", BOUNDS),
    ("the input overwritten", [("        out[i] = _grey(x[i], x[i + n], x[i + 2 * n])\n",
                                "        x[i] = _grey(x[i], x[i + n], x[i + 2 * n])\n        out[i] = x[i]\n")], "read-only", None),
    ("stops one early", [("    if i < n:\n", "    if i < n - 1:\n")], "never written", None),
    ("the planes averaged", [("_grey(x[i], x[i + n], x[i + 2 * n])", "x[i] // 3 + x[i + n] // 3 + x[i + 2 * n] // 3")],
     "outputs wrong", BOUNDS),
    ("planes 256 apart", [("_grey(x[i], x[i + n], x[i + 2 * n])", "_grey(x[i], x[i + 256], x[i + 512])")], "IndexError", None),
], ("grayscale", "cuda"): [
    ("no bounds check", [("    if (i < n) out[i]", "    out[i]")], "wrote past the end", None),
    ("plane offset", [("x[i + 2 * stride]);  // the last block", "x[i + 2]);  // the last block")], "outputs wrong", BOUNDS),
    ("fused multiply-adds", [("grey_u8(x[i], x[i + stride], x[i + 2 * stride]);  // the last block is partial",
                              "(unsigned char)(0.2989f * x[i] + 0.5870f * x[i + stride] + 0.1140f * x[i + 2 * stride]);")],
     "outputs wrong", "never written"),
    ("double weights", [("grey_u8(x[i], x[i + stride], x[i + 2 * stride]);  // the last block is partial",
                         "(unsigned char)(0.2989 * x[i] + 0.5870 * x[i + stride] + 0.1140 * x[i + 2 * stride]);")],
     "outputs wrong", "never written"),
    ("the partial block skipped", [("    if (i < n) out[i]", "    if (i < n / 256 * 256) out[i]")], BOUNDS, None),
    ("blockIdx times threadIdx", [("    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n)",
                                   "    const int i = blockIdx.x * threadIdx.x + threadIdx.x;\n    if (i < n)")],
     "never written", BOUNDS),
    ("the sum from blue to red", [("grey_u8(x[i], x[i + stride], x[i + 2 * stride]);  // the last block is partial",
                                   "(unsigned char)__fadd_rn(__fadd_rn(__fmul_rn(0.1140f, x[i + 2 * stride]), __fmul_rn(0.5870f, "
                                   "x[i + stride])), __fmul_rn(0.2989f, x[i]));")], "the sum in another order", "never written"),
    ("rounded to the nearest byte", [("grey_u8(x[i], x[i + stride], x[i + 2 * stride]);  // the last block is partial",
                                      "(unsigned char)rintf(grey_value(x[i], x[i + stride], x[i + 2 * stride]));")],
     "rounding to the nearest byte", "never written"),
], ("grayscale_2d", "python"): [
    ("no bound on the rows", [("    if c >= w or r >= h:\n", "    if c >= w:\n")], "IndexError", None),
    ("x and y swapped", [("    c = blockidx.x * blockdim.x + threadidx.x\n    r = blockidx.y * blockdim.y + threadidx.y\n",
                          "    c = blockidx.y * blockdim.y + threadidx.y\n    r = blockidx.x * blockdim.x + threadidx.x\n")],
     "outputs", BOUNDS),
    ("row stride of h", [("    i = r * w + c\n", "    i = r * h + c\n")], "outputs", BOUNDS),
    ("blockIdx times threadIdx", [("    c = blockidx.x * blockdim.x + threadidx.x\n",
                                   "    c = blockidx.x * threadidx.x + threadidx.x\n")], "never written", BOUNDS),
    ("last column skipped", [("    if c >= w or r >= h:\n", "    if c >= w - 1 or r >= h:\n")], "never written", BOUNDS),
    ("the partial blocks skipped", [("    if c >= w or r >= h:\n", "    if c >= (w // 16) * 16 or r >= h:\n")],
     BOUNDS, None),
    ("blocks of 16 hard-coded", [("    c = blockidx.x * blockdim.x + threadidx.x\n    r = blockidx.y * blockdim.y + threadidx.y\n",
                                  "    c = blockidx.x * 16 + threadidx.x\n    r = blockidx.y * 16 + threadidx.y\n")], "never written", BOUNDS),
    ("rows from blockdim.x", [("    r = blockidx.y * blockdim.y + threadidx.y\n", "    r = blockidx.y * blockdim.x + threadidx.y\n")],
     "never written", BOUNDS),
    ("the output column-major", [("    out[i] = _grey(x[i], x[i + n], x[i + 2 * n])\n", "    out[c * h + r] = _grey(x[i], x[i + n], x[i + 2 * n])\n")],
     "transposed", BOUNDS),
    ("the output upside down", [("    out[i] = _grey(x[i], x[i + n], x[i + 2 * n])\n", "    out[(h - 1 - r) * w + c] = _grey(x[i], x[i + n], x[i + 2 * n])\n")],
     "in the wrong place", BOUNDS),
    ("> where >= belongs", [("    if c >= w or r >= h:\n", "    if c > w or r > h:\n")], "IndexError", None),
    ("the bounds of w and h swapped", [("    if c >= w or r >= h:\n", "    if c >= h or r >= w:\n")], "IndexError", None),
    ("and where or belongs", [("    if c >= w or r >= h:\n", "    if c >= w and r >= h:\n")], "IndexError", None),
    ("planes w apart", [("    out[i] = _grey(x[i], x[i + n], x[i + 2 * n])\n", "    out[i] = _grey(x[i], x[i + w], x[i + 2 * w])\n")],
     "outputs wrong", BOUNDS),
    ("the first row skipped", [("    if c >= w or r >= h:\n", "    if c >= w or r >= h or r == 0:\n")], "never written", None),
    ("rounded to the nearest byte", [("    return int((CR * np.float32(r) + CG * np.float32(g)) + CB * np.float32(b))\n",
                                      "    return int(np.float32(0.5) + (CR * np.float32(r) + CG * np.float32(g)) + CB * np.float32(b))\n")],
     "rounding to the nearest byte", "never written"),
], ("grayscale_2d", "cuda"): [
    ("no bound on the rows", [("    if (c >= w || r >= h) return;", "    if (c >= w) return;")], "wrote past the end", None),
    ("row without its block", [("    const int r = blockIdx.y * blockDim.y + threadIdx.y;\n",
                                "    const int r = blockIdx.y + threadIdx.y;\n")], "never written", BOUNDS),
    ("column from threadIdx.y", [("    const int c = blockIdx.x * blockDim.x + threadIdx.x;\n",
                                  "    const int c = blockIdx.x * blockDim.x + threadIdx.y;\n")], "never written", BOUNDS),
    ("row stride of h", [("    const int i = r * w + c;\n", "    const int i = r * h + c;\n")], "outputs", BOUNDS),
    ("x and y swapped", [("    const int c = blockIdx.x * blockDim.x + threadIdx.x;\n    const int r = blockIdx.y * blockDim.y + threadIdx.y;\n",
                          "    const int c = blockIdx.y * blockDim.y + threadIdx.y;\n    const int r = blockIdx.x * blockDim.x + threadIdx.x;\n")],
     "outputs", BOUNDS),
    ("the partial blocks skipped", [("    if (c >= w || r >= h) return;", "    if (c >= w / 16 * 16 || r >= h) return;")],
     BOUNDS, None),
    ("the output column-major", [("    out[i] = grey_u8(x[i], x[i + stride], x[i + 2 * stride]);\n",
                                  "    out[c * h + r] = grey_u8(x[i], x[i + stride], x[i + 2 * stride]);\n")], "transposed", BOUNDS),
    ("> where >= belongs", [("    if (c >= w || r >= h) return;", "    if (c > w || r > h) return;")], "wrote past the end", None),
], ("matmul", "python"): [
    # wrong values, or (a case whose k is larger than w first) B read past its end: named by its stride
    ("B's row stride of k", [("n[i * w + c]", "n[i * k + c]")], ("wrong", "(a row length or stride)"), BOUNDS),
    ("A's row stride of w", [("m[r * k + i]", "m[r * w + i]")], "", BOUNDS),
    ("rows and columns swapped", [("    r = blockidx.y * blockdim.y + threadidx.y\n    c = blockidx.x * blockdim.x + threadidx.x\n",
                                   "    r = blockidx.x * blockdim.x + threadidx.x\n    c = blockidx.y * blockdim.y + threadidx.y\n")],
     "", BOUNDS),
    ("one product short", [("    for i in range(k):\n", "    for i in range(k - 1):\n")], "outputs wrong", BOUNDS),
    ("the sum restarted each step", [("        o += m[r * k + i] * n[i * w + c]\n", "        o = m[r * k + i] * n[i * w + c]\n")],
     "outputs wrong", BOUNDS),
    ("a bound one too far", [("    if r >= h or c >= w:\n", "    if r > h or c > w:\n")], "IndexError", None),
    # out starts poisoned, not at 0: a sum added into it is told from an element never written
    ("the sum added into the output", [("    o = 0.0\n    for i in range(k):\n        o += m[r * k + i] * n[i * w + c]\n"
                                        "    out[r * w + c] = o\n",
                                        "    for i in range(k):\n        out[r * w + c] += m[r * k + i] * n[i * w + c]\n")],
     "the output's own starting value", "never written"),
    ("the result added into the output", [("    out[r * w + c] = o\n", "    out[r * w + c] += o\n")],
     "the output's own starting value", "never written"),
    # the Python track's 8x4 blocks: the row from blockdim.x, or a fixed 16, miss rows there
    ("the row from blockdim.x", [("    r = blockidx.y * blockdim.y + threadidx.y\n", "    r = blockidx.y * blockdim.x + threadidx.y\n")],
     "blocks other than 16x16", BOUNDS),
    ("a fixed block of 16", [("    r = blockidx.y * blockdim.y + threadidx.y\n    c = blockidx.x * blockdim.x + threadidx.x\n",
                              "    r = blockidx.y * 16 + threadidx.y\n    c = blockidx.x * 16 + threadidx.x\n")],
     "blocks other than 16x16", BOUNDS),
    ("the product stored transposed", [("    out[r * w + c] = o\n", "    out[c * h + r] = o\n")], "outputs wrong", BOUNDS),
    ("out's row stride of h", [("    out[r * w + c] = o\n", "    out[r * h + c] = o\n")], "never written", BOUNDS),
    ("the dot product over w", [("    for i in range(k):\n", "    for i in range(w):\n")], "outputs wrong", BOUNDS),
    ("B read column-major", [("n[i * w + c]", "n[c * k + i]")], "outputs wrong", BOUNDS),
    ("a float16 accumulator", [("    o = 0.0\n", "    o = np.float16(0)\n"),
                               ("        o += m[r * k + i] * n[i * w + c]\n", "        o = np.float16(o + m[r * k + i] * n[i * w + c])\n")],
     "outputs wrong", BOUNDS),
    ("the sum truncated to an integer", [("    out[r * w + c] = o\n", "    out[r * w + c] = int(o)\n")], "outputs wrong", BOUNDS),
    ("the bounds of h and w swapped", [("    if r >= h or c >= w:\n", "    if r >= w or c >= h:\n")], "IndexError", None),
    ("the bounds joined with and", [("    if r >= h or c >= w:\n", "    if r >= h and c >= w:\n")], "IndexError", None),
    ("the last row skipped", [("    if r >= h or c >= w:\n", "    if r >= h - 1 or c >= w:\n")], "never written", BOUNDS),
], ("matmul", "cuda"): [
    ("no bound on the columns", [("    if (row >= m || col >= n) return;", "    if (row >= m) return;")], "wrote past the end", None),
    ("one product short", [("for (int kk = 0; kk < k; ++kk) acc", "for (int kk = 0; kk < k - 1; ++kk) acc")],
     "outputs wrong", BOUNDS),
    ("writes zeros", [("    C[(size_t)row * n + col] = alpha * acc;\n", "    C[(size_t)row * n + col] = 0.0f;\n")],
     "writes zeros", None),
    ("B's row stride of k", [("matmul_op_b<TRANS_B>(B, kk, col, n, k)", "matmul_op_b<TRANS_B>(B, kk, col, k, k)")],
     "", BOUNDS),
    ("rows and columns swapped", [("    const int row = blockIdx.y * blockDim.y + threadIdx.y;\n    const int col = blockIdx.x * blockDim.x + threadIdx.x;\n",
                                   "    const int row = blockIdx.x * blockDim.x + threadIdx.x;\n    const int col = blockIdx.y * blockDim.y + threadIdx.y;\n")],
     "", BOUNDS),
    ("the sum starts at 1", [("    float acc = 0.0f;\n    for (int kk", "    float acc = 1.0f;\n    for (int kk")],
     "outputs wrong", BOUNDS),
    ("the result added into C", [("    C[(size_t)row * n + col] = alpha * acc;\n", "    C[(size_t)row * n + col] += alpha * acc;\n")],
     "outputs", BOUNDS),
    ("the product stored transposed", [("    C[(size_t)row * n + col] = alpha * acc;\n", "    C[(size_t)col * m + row] = alpha * acc;\n")],
     "outputs", BOUNDS),
    ("B read column-major", [("matmul_op_b<TRANS_B>(B, kk, col, n, k)", "B[(size_t)col * k + kk]")], "outputs wrong", BOUNDS),
    ("the last row skipped", [("    if (row >= m || col >= n) return;", "    if (row >= m - 1 || col >= n) return;")],
     "never written", BOUNDS),
], ("matmul_tiled", "python"): [
    ("no barrier after the loads", [("        if sync:\n            yield  # the whole tile must be loaded before anyone reads a row or column of it\n", "")],
     "the barrier after the loads", None),
    ("no barrier after the products", [("        yield  # everyone must finish reading this tile before the next phase overwrites it\n", "")],
     "the barrier after the products", None),
    ("the sum restarted each tile", [("        idx = ph * tw\n", "        idx = ph * tw\n        p = np.float32(0)\n")],
     "the sum across tiles", BARRIER),
    ("tiles loaded from the wrong offset", [("        idx = ph * tw\n", "        idx = ph\n")], "outputs", BARRIER),
    ("no zero fill outside A", [("m[r * k + tc + idx] if r < h and idx + tc < k else 0.0",
                                 "m[r * k + tc + idx] if r < h and idx + tc < k else ms[tr, tc]")],
     "0 outside the matrices", "a missing barrier"),
    ("B tile indexed by the column thread", [("n[(tr + idx) * w + c]", "n[(tc + idx) * w + c]")], "outputs", BARRIER),
    ("no bound on the store", [("    if r < h and c < w:\n        out[r * w + c] = p\n", "    out[r * w + c] = p\n")],
     "IndexError", None),
    # the Python track's 8x8 tiles: a fixed 4 sums half of each tile there
    ("products over a fixed 4", [("        for i in range(tw):\n", "        for i in range(4):\n")], "never a fixed 4", BARRIER),
    # k shorter than a tile with several rows: a row of A read with the tile's width as its length
    ("A's row length taken as the tile's", [("m[r * k + tc + idx]", "m[r * tw + tc + idx]")], "outputs wrong",
     "the sum across tiles"),
    ("B tile read along its row", [("ms[tr, i] * ns[i, tc]", "ms[tr, i] * ns[tc, i]")], "outputs wrong", BARRIER),
    ("A tile stored transposed", [("        ms[tr, tc] = m[", "        ms[tc, tr] = m[")], "outputs wrong", BARRIER),
    ("the second barrier before the products", [
        ("        for i in range(tw):\n            p = p + ms[tr, i] * ns[i, tc]\n"
         "        yield  # everyone must finish reading this tile before the next phase overwrites it\n",
         "        yield\n        for i in range(tw):\n            p = p + ms[tr, i] * ns[i, tc]\n")],
     "the barrier after the products", None),
    ("a barrier inside the bounds check", [("        if sync:\n            yield  # the whole tile must be loaded before anyone reads a row or column of it\n",
                                            "        if r < h and c < w:\n            yield\n")],
     "every thread of a block must reach each barrier", None),
    ("no zero fill outside B", [("n[(tr + idx) * w + c] if c < w and idx + tr < k else 0.0",
                                 "n[(tr + idx) * w + c] if c < w and idx + tr < k else ns[tr, tc]")],
     "0 outside the matrices", "a missing barrier"),
    ("the partial last tile skipped", [("    for ph in range(math.ceil(k / tw)):\n", "    for ph in range(k // tw):\n")],
     BOUNDS, BARRIER),
    ("float16 products", [("            p = p + ms[tr, i] * ns[i, tc]\n", "            p = np.float16(p + ms[tr, i] * ns[i, tc])\n")],
     "outputs wrong", BARRIER),
    ("B's row length taken as k", [("n[(tr + idx) * w + c]", "n[(tr + idx) * k + c]")], "IndexError", None),
    ("A bounded by the column", [("m[r * k + tc + idx] if r < h and idx + tc < k", "m[r * k + tc + idx] if r < h and c < w")],
     "IndexError", None),
    ("A's k bound one too far", [("m[r * k + tc + idx] if r < h and idx + tc < k", "m[r * k + tc + idx] if r < h and idx + tc <= k")],
     "IndexError", None),
], ("matmul_tiled", "cuda"): [
    ("no barrier after the loads", [("        // Rows of As and columns of Bs come from other threads' loads: wait for the whole tile.\n"
                                     "        __syncthreads();\n", "")], "racecheck", None),
    ("no barrier after the products", [("        // The next iteration overwrites the tiles: wait until everyone has finished reading them.\n"
                                        "        __syncthreads();\n", "")], "racecheck", None),
    ("no zero fill outside A", [("    a = (row < m && a_k < k) ? A[(size_t)row * k + a_k] : 0.0f;\n",
                                 "    a = A[(size_t)row * k + a_k];\n")], "memcheck", None),
    ("the sum restarted each tile", [("        matmul_load_tiles<TRANS_B>(m, n, k, A, B, As, Bs, tw, bs_ld, k0);\n",
                                      "        acc = 0.0f;\n        matmul_load_tiles<TRANS_B>(m, n, k, A, B, As, Bs, tw, bs_ld, k0);\n")],
     "the sum across tiles", "the barrier after the products"),
    ("A tile read transposed", [("acc += As[ty * tw + kk] * Bs[kk * bs_ld + tx]", "acc += As[kk * tw + ty] * Bs[kk * bs_ld + tx]")],
     "outputs", BOUNDS),
    ("no bound on the store", [("    if (row < m && col < n) C[(size_t)row * n + col] = alpha * acc;",
                                "    C[(size_t)row * n + col] = alpha * acc;")], "wrote past the end", None),
    ("B tile read along its row", [("acc += As[ty * tw + kk] * Bs[kk * bs_ld + tx]", "acc += As[ty * tw + kk] * Bs[tx * bs_ld + kk]")],
     "outputs", BOUNDS),
    ("tiles loaded from the tile's number, not its offset", [
        ("        matmul_load_tiles<TRANS_B>(m, n, k, A, B, As, Bs, tw, bs_ld, k0);\n",
         "        matmul_load_tiles<TRANS_B>(m, n, k, A, B, As, Bs, tw, bs_ld, k0 / tw);\n")], "outputs", BOUNDS),
    ("the second barrier before the products", [
        ("        __syncthreads();\n        for (int kk = 0; kk < tw; ++kk) acc += As[ty * tw + kk] * Bs[kk * bs_ld + tx];\n"
         "        // The next iteration overwrites the tiles: wait until everyone has finished reading them.\n"
         "        __syncthreads();\n",
         "        __syncthreads();\n        __syncthreads();\n"
         "        for (int kk = 0; kk < tw; ++kk) acc += As[ty * tw + kk] * Bs[kk * bs_ld + tx];\n")], "racecheck", None),
], ("mandelbrot", "python"): [
    ("escape at >= 4", [("        if xx + yy > dt(4):\n", "        if xx + yy >= dt(4):\n")], "outputs wrong", BOUNDS),
    ("one step too many", [("    while n < max_iters:\n", "    while n <= max_iters:\n")], "outputs wrong", BOUNDS),
    ("x updated before y", [("        y = (xy + xy) + ci\n        x = (xx - yy) + cr\n",
                             "        x = (xx - yy) + cr\n        y = (x * y + x * y) + ci\n")], "outputs wrong", BOUNDS),
    ("float64 arithmetic", [("    dt = type(x0)\n", "    dt = np.float64\n")], "outputs wrong", BOUNDS),
    ("row stride of height", [("    out[row * width + col] = n\n", "    out[row * height + col] = n\n")], "", BOUNDS),
    ("no bound on the rows", [("    if col >= width or row >= height:\n", "    if col >= width:\n")], "IndexError", None),
    ("a for loop leaves n at max_iters - 1", [("    while n < max_iters:\n", "    for n in range(max_iters):\n"), ("        n += 1\n", "")],
     "only the points that never escape", BOUNDS),
    ("the test after the step", [("        if xx + yy > dt(4):\n            break\n", ""),
                                 ("        n += 1\n", "        if x * x + y * y > dt(4):\n            break\n        n += 1\n")],
     "one fewer step", BOUNDS),
    ("z starts at c", [("    while n < max_iters:\n", "    x, y = cr, ci\n    while n < max_iters:\n")], "one fewer step", BOUNDS),
    ("the count starts at 1", [("    while n < max_iters:\n", "    n = 1\n    while n < max_iters:\n")], "one more step", BOUNDS),
    ("counted before the test", [("        n += 1\n", ""), ("        xx, yy = x * x, y * y\n", "        xx, yy = x * x, y * y\n        n += 1\n")],
     "one more step", BOUNDS),
    ("x's sum reordered", [("        x = (xx - yy) + cr\n", "        x = cr + xx - yy\n")], "only a few points differ", BOUNDS),
    ("complex128 arithmetic", [("        xy = x * y\n        y = (xy + xy) + ci\n        x = (xx - yy) + cr\n",
                                "        z = complex(x, y) ** 2 + complex(cr, ci)\n        x, y = dt(z.real), dt(z.imag)\n")],
     "only a few points differ", BOUNDS),
    ("escape at |z|^2 > 16", [("        if xx + yy > dt(4):\n", "        if xx + yy > dt(16):\n")], "outputs wrong", BOUNDS),
    ("cr and ci swapped", [("        y = (xy + xy) + ci\n        x = (xx - yy) + cr\n", "        y = (xy + xy) + cr\n        x = (xx - yy) + ci\n")],
     "outputs wrong", BOUNDS),
    ("blocks of 16 hard-coded", [("    col = blockidx.x * blockdim.x + threadidx.x\n", "    col = blockidx.x * 16 + threadidx.x\n")],
     "never written", BOUNDS),
    ("rows from blockdim.x", [("    row = blockidx.y * blockdim.y + threadidx.y\n", "    row = blockidx.y * blockdim.x + threadidx.y\n")],
     "never written", BOUNDS),
    ("256 iterations hard-coded", [("    while n < max_iters:\n", "    while n < 256:\n")], "only the points that never escape", BOUNDS),
], ("mandelbrot", "cuda"): [
    ("escape at >= 4", [("        if (A::add(xx, yy) > (T)4) break;\n", "        if (A::add(xx, yy) >= (T)4) break;\n")],
     "outputs wrong", BOUNDS),
    ("one step too many", [("    while (n < max_iters) {\n", "    while (n <= max_iters) {\n")], "outputs wrong", BOUNDS),
    ("x from the new y", [("        x = A::add(A::sub(xx, yy), cr);\n", "        x = A::add(A::sub(A::mul(x, x), A::mul(y, y)), cr);\n")],
     "outputs wrong", BOUNDS),
    ("a fused multiply-add", [("        y = A::add(A::add(xy, xy), ci);\n", "        y = 2 * x * y + ci;\n")],
     "outputs wrong", BOUNDS),
    ("row stride of height", [("    out[(size_t)row * width + col] = (uint32_t)n;\n", "    out[(size_t)row * height + col] = (uint32_t)n;\n")],
     "", BOUNDS),
    ("no bound on the rows", [("    if (col >= width || row >= height) return;", "    if (col >= width) return;")],
     "wrote past the end", None),
    ("the count starts at 1", [("    int n = 0;\n", "    int n = 1;\n")], "one more step", BOUNDS),
    ("counted before the test", [("        ++n;\n    }\n", "    }\n"), ("        const T xx = A::mul(x, x), yy = A::mul(y, y);\n",
                                  "        const T xx = A::mul(x, x), yy = A::mul(y, y);\n        ++n;\n")], "one more step", BOUNDS),
    ("x's sum reordered", [("        x = A::add(A::sub(xx, yy), cr);\n", "        x = A::sub(A::add(cr, xx), yy);\n")], "outputs wrong", BOUNDS),
]}

# Right, and written differently from the lab's solution: the check must pass them.
RIGHT = {("square", "python"): [("    i = blockidx * blockdim + threadidx\n    if i < n:\n"
                                 "        v = int(a[i]) & 0xFFFFFFFF\n        a[i] = np.uint32((v * v) & 0xFFFFFFFF).view(np.int32)\n",
                                 "    i = threadidx + blockdim * blockidx\n    if i >= n:\n        return\n"
                                 "    a[i:i + 1] *= a[i:i + 1]  # int32 arrays wrap, like the GPU\n")],
         ("square", "cuda"): [("    if (i >= n) return;\n    a[i] = wrap_square(a[i]);\n",
                               "    if (i < n) a[i] = (int)((unsigned)a[i] * (unsigned)a[i]);\n")],
         ("grid_stride", "python"): [("    while i < n:\n        out[i] = x[i] * x[i]\n        i += stride\n",
                                      "    for j in range(i, n, stride):\n        out[j] = x[j]\n        out[j] *= x[j]\n")],
         ("grid_stride", "cuda"): [("for (long long i = idx; i < n; i += stride) out[i] = x[i] * x[i];",
                                    "for (long long i = idx; i < n; i += stride) {\n        out[i] = x[i];\n"
                                    "        out[i] *= x[i];\n    }")],
         ("grayscale", "python"): [("    if i < n:\n        out[i] = _grey(x[i], x[i + n], x[i + 2 * n])\n",
                                    "    if i >= n:\n        return\n    r, g, b = (np.float32(x[i + p * n]) for p in range(3))\n"
                                    "    y = CR * r\n    y = y + CG * g\n    out[i] = int(y + CB * b)\n")],
         ("grayscale", "cuda"): [("    if (i < n) out[i] = grey_u8(x[i], x[i + stride], x[i + 2 * stride]);  // the last block is partial\n",
                                  "    if (i >= n) return;\n    out[i] = grey_u8(x[i], x[i + stride], x[i + 2 * stride]);\n")],
         ("grayscale_2d", "python"): [("    if c >= w or r >= h:\n        return\n    i = r * w + c\n    n = h * w\n"
                                       "    out[i] = _grey(x[i], x[i + n], x[i + 2 * n])\n",
                                       "    if c < w and r < h:\n        i, n = r * w + c, h * w\n"
                                       "        out[i] = _grey(x[i], x[n + i], x[2 * n + i])\n")],
         ("grayscale_2d", "cuda"): [("    if (c >= w || r >= h) return;  // blocks on the right and bottom edges overhang the image\n"
                                     "    const int i = r * w + c;\n    out[i] = grey_u8(x[i], x[i + stride], x[i + 2 * stride]);\n",
                                     "    if (c < w && r < h) {\n        const int i = r * w + c;\n"
                                     "        out[i] = grey_u8(x[i], x[stride + i], x[2 * stride + i]);\n    }\n")],
         ("matmul", "python"): [("    o = 0.0\n    for i in range(k):\n        o += m[r * k + i] * n[i * w + c]\n",
                                 "    o = np.dot(m[r * k:(r + 1) * k], n[c::w][:k])\n")],
         ("matmul", "cuda"): [("for (int kk = 0; kk < k; ++kk) acc += A[(size_t)row * k + kk] * matmul_op_b<TRANS_B>(B, kk, col, n, k);",
                               "for (int kk = 0; kk < k; ++kk) acc = fmaf(A[(size_t)row * k + kk], B[(size_t)kk * n + col], acc);")],
         ("matmul_tiled", "python"): [("        for i in range(tw):\n            p = p + ms[tr, i] * ns[i, tc]\n",
                                       "        p = p + np.float32(np.dot(ms[tr, :], ns[:, tc]))\n")],
         ("matmul_tiled", "cuda"): [("for (int kk = 0; kk < tw; ++kk) acc += As[ty * tw + kk] * Bs[kk * bs_ld + tx];",
                                     "for (int kk = 0; kk < tw; ++kk) acc = fmaf(As[ty * tw + kk], Bs[kk * bs_ld + tx], acc);")],
         ("mandelbrot", "python"): [("    while n < max_iters:\n", "    for _ in range(max_iters):\n")],
         ("mandelbrot", "cuda"): [("    while (n < max_iters) {\n", "    for (int step = 0; step < max_iters; ++step) {\n")]}

ZOOM_WRONG = [  # mandelbrot_zoom has only the Python track: its region is checked, not a kernel
    ("the full view", "(-2.0, 1.0, -1.5, 1.5)", "zoom in"),
    ("inside the set", "(-0.1, -0.05, -0.05, 0.0)", "inside the set"),
    ("outside the set", "(1.0, 1.05, 1.0, 1.05)", "escapes at once"),
    ("a sliver 0.002 wide and 1e-9 high", "(-0.7469, -0.7449, 0.1049, 0.104900001)", "a sliver"),
    ("too small for float64", "(-0.7459, -0.7458999999999995, 0.1059, 0.1059000000000005)", "too small for float64"),
    ("an empty region", "(-0.7449, -0.7469, 0.1049, 0.1069)", "empty region"),
    ("corners as (x0, y0, x1, y1)", "(-0.7469, 0.1049, -0.7449, 0.1069)", "read as corners (x0, y0, x1, y1)"),
    ("a centre and a size", "(-0.7459, 0.1059, 0.002, 0.002)", "read as a centre and a size"),
    ("an integer too large for a float", "(10**400, 10**401, 0, 1)", "four finite numbers"),
    ("three numbers", "(-0.7469, -0.7449, 0.1049)", "4 numbers"),
    ("a dict of the edges", "{'x0': -0.7469, 'x1': -0.7449, 'y0': 0.1049, 'y1': 0.1069}", "four numbers"),
    ("mostly inside the set", "(-0.8, -0.7, 0.05, 0.15)", "inside the set"),
]
ZOOM_RIGHT = "(-0.7436, -0.7416, 0.1302, 0.1322)"


def _wrong_params(track, graded: bool = False, replay: bool = False):
    return wrong_solutions.wrong_params(WRONG, track, graded=graded, replay=replay)


def _right_params(track):
    return wrong_solutions.right_params(RIGHT, track)


def _own_table(ex) -> bool:
    """The exercise's table lives beside its program (tests/wrong_solutions.py makes its tests)."""
    return (ROOT / "cuda" / ex.program / f"test_{ex.program}_exercises.py").is_file()


def test_every_exercise_and_track_has_five_wrong_solutions_and_a_different_right_one():
    for ex in catalog.EXERCISES:
        if _own_table(ex):
            assert not any(key[0] == ex.name for key in WRONG), f"{ex.name} has two tables"
            continue
        for track in ex.tracks:
            if ex.name == "mandelbrot_zoom":
                assert len(ZOOM_WRONG) >= 5
                continue
            assert len(WRONG[(ex.name, track)]) >= 5, (ex.name, track)
            assert (ex.name, track) in RIGHT, (ex.name, track)


@pytest.mark.parametrize("name, patches, says, never, replay", list(_wrong_params("python", replay=True)))
def test_python_wrong_solution_fails_naming_its_cause(name, patches, says, never, replay, tmp_path):
    v = check_fails(name, "python", patches, says, never, tmp_path)
    # the failure can be replayed: the verdict says its seed, and (wrong_solutions.replays) the same seed
    # fails the same way
    assert any(ok is None and f"--seed {v.seed}" in t for ok, t in v.lines)
    if replay:
        assert hcheck.check(name, "python", tmp_path, seed=v.seed).first_fix == v.first_fix


@pytest.mark.parametrize("name, patches", list(_right_params("python")))
def test_python_right_solution_written_differently_passes(name, patches, tmp_path):
    write(tmp_path, name, "python", patched(name, "python", patches))
    v = hcheck.check(name, "python", tmp_path)
    assert v.passed, v.lines


@pytest.mark.parametrize("what, region, says", ZOOM_WRONG, ids=[w[0].replace(" ", "_") for w in ZOOM_WRONG])
def test_zoom_wrong_region_fails_naming_why(what, region, says, tmp_path):
    sol = "ZOOM_REGION = (-0.7469, -0.7449, 0.1049, 0.1069)"
    check_fails("mandelbrot_zoom", "python", [(sol, f"ZOOM_REGION = {region}")], says, None, tmp_path)


@pytest.mark.parametrize("region", ["np.array([-0.7436, -0.7416, 0.1302, 0.1322])",
                                    "tuple(np.float32(v) for v in (-0.7436, -0.7416, 0.1302, 0.1322))",
                                    "'-0.7436 -0.7416 0.1302 0.1322'"], ids=["numpy", "float32", "string"])
def test_zoom_region_written_as_other_numbers_passes(region, tmp_path):
    sol = "ZOOM_REGION = (-0.7469, -0.7449, 0.1049, 0.1069)"
    write(tmp_path, "mandelbrot_zoom", "python", patched("mandelbrot_zoom", "python", [(sol, f"ZOOM_REGION = {region}")]))
    v = hcheck.check("mandelbrot_zoom", "python", tmp_path)
    assert v.passed, v.lines


def test_zoom_another_interesting_region_passes(tmp_path):
    sol = "ZOOM_REGION = (-0.7469, -0.7449, 0.1049, 0.1069)"
    write(tmp_path, "mandelbrot_zoom", "python", patched("mandelbrot_zoom", "python", [(sol, f"ZOOM_REGION = {ZOOM_RIGHT}")]))
    assert hcheck.check("mandelbrot_zoom", "python", tmp_path).passed


@pytest.mark.parametrize("name, patches, says, never", list(_wrong_params("cuda")))
def test_cuda_wrong_solution_patches_apply(name, patches, says, never):
    """The CPU half of the GPU test below: each mistake is put into the solution's text."""
    assert patched(name, "cuda", patches) != hx.solution_text(hx.exercise(name), "cuda")


@pytest.mark.parametrize("name, patches", list(_right_params("cuda")))
def test_cuda_right_solution_patches_apply(name, patches):
    assert patched(name, "cuda", patches) != hx.solution_text(hx.exercise(name), "cuda")


@pytest.mark.long
@pytest.mark.gpu
@pytest.mark.grader
@pytest.mark.parametrize("name, patches, says, never", list(_wrong_params("cuda", graded=True)))
def test_gpu_cuda_wrong_solution_fails_naming_its_cause(name, patches, says, never, tmp_path):
    check_fails(name, "cuda", patches, says, never, tmp_path)


@pytest.mark.long
@pytest.mark.gpu
@pytest.mark.grader
@pytest.mark.parametrize("name, patches", list(_right_params("cuda")))
def test_gpu_cuda_right_solution_written_differently_passes(name, patches, tmp_path):
    write(tmp_path, name, "cuda", patched(name, "cuda", patches))
    v = hcheck.check(name, "cuda", tmp_path, timing=False)
    assert v.passed, v.lines
