"""The exercises: where each one's blanks are marked, what the CUDA track's entry point is, the hints,
and its problem: the cases a lazy kernel gets wrong, how each track runs the learner's kernel on
them, and the lab's own reference and tolerance.

The runners take the learner's Python function (Python track) or loaded inline module (CUDA track)
and return the output as a numpy array; every output array starts poisoned (NaN, or a byte pattern),
and the CUDA track's outputs carry a poisoned guard zone past their end, so a missing bounds check
shows up even where the stray write lands in the allocation's padding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

GUARD = 1024  # poisoned elements after each CUDA output: a write there is past the end


@dataclass(frozen=True)
class Case:
    label: str
    params: dict
    seed: int = 0  # the case's number within the check
    ragged: bool = False  # a size that is not a multiple of the block or tile
    small: bool = False  # the sanitizer's case (CUDA track)
    run: int = 0  # the check's seed: fresh each check, so a hard-coded output cannot pass; --seed replays it
    exact_multi: bool = False  # every size a multiple of the block or tile, and more than one block: the
    #                            evidence that lets a failure of the ragged cases alone blame the bounds check
    wide: bool = False  # flash_softmax: scores spread far enough that exp overflows without the running max


@dataclass(frozen=True)
class Speed:
    """The CUDA track's timed case: the work of one launch, in the ceiling's unit's base."""
    params: dict
    ceiling: str  # "memcpy" (GB/s), "fp32" (TFLOP/s) or "fp32_inst" (Ginst/s)
    amount: float


@dataclass(frozen=True)
class Exercise:
    name: str
    program: str
    origin: str  # course and section
    writes: str  # what the learner writes
    tracks: tuple
    py_source: str | None  # relative to the repository root
    py_entry: str | None  # the function the check calls
    cu_source: str | None
    cu_kernels: tuple = ()  # kernels whose name and parameters the check relies on
    cu_glue: str = ""  # the CUDA file's fixed end: the entry point(s) the check calls
    cu_includes: str = ""
    hints: tuple = ()
    block: str = ""  # the launch shape, for messages
    extra: dict = field(default_factory=dict)


def _rng(seed: int, run: int = 0) -> np.random.Generator:
    return np.random.default_rng([int(run) & 0xFFFFFFFF, 1000 + int(seed)])


def new_seed() -> int:
    """A fresh seed for one check's cases (recorded in its output, so a failure can be replayed)."""
    import secrets

    return secrets.randbelow(10**9)


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


# --- the CUDA track's entry points ---------------------------------------------------------------
# Each is the fixed end of the learner's .cu file: the check calls exercise_run (device pointers,
# the lab's launch shape); square's also has the course's managed-memory program as a function, a
# blank of its own.

_SQUARE_GLUE = r"""
// The check calls this with device memory: one thread per element, cdiv(n, threads) blocks.
extern "C" int exercise_run(int *d_a, long long n, int threads, void *stream) {
    if (n <= 0) return 0;
    square_int32_kernel<<<(unsigned)cdiv(n, threads), threads, 0, (cudaStream_t)stream>>>(d_a, n);
    return (int)cudaGetLastError();
}

// The course's program as one function (its main() without the printing): host holds n ints.
extern "C" int exercise_managed(int *host, long long n, int threads) {
// EXERCISE square: begin allocate n ints of managed memory (cudaMallocManaged: one pointer valid on the host and
// EXERCISE square: todo the device); copy host into it; launch square_int32_kernel on it over cdiv(n, threads) blocks
// EXERCISE square: todo of `threads`; check the launch (cudaGetLastError); wait for the kernel
// EXERCISE square: todo (cudaDeviceSynchronize: the host may not read managed memory a kernel is still writing); copy
// EXERCISE square: todo the result back into host; cudaFree it. Return the first CUDA error as an int, 0 if none.
    int *a = nullptr;
    cudaError_t err = cudaMallocManaged(&a, (size_t)n * sizeof(int));
    if (err != cudaSuccess) return (int)err;
    for (long long i = 0; i < n; ++i) a[i] = host[i];
    square_int32_kernel<<<(unsigned)cdiv(n, threads), threads>>>(a, n);
    err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err == cudaSuccess)
        for (long long i = 0; i < n; ++i) host[i] = a[i];
    const cudaError_t ferr = cudaFree(a);
    return (int)(err != cudaSuccess ? err : ferr);
// EXERCISE square: stub (void)host; (void)n; (void)threads; return 0;
// EXERCISE square: end
}
"""

_GRID_STRIDE_GLUE = r"""
// The check calls this with device memory and a grid of its choice, often smaller than n.
extern "C" int exercise_run(const float *x, float *out, long long n, int blocks, int threads, void *stream) {
    square_02_grid_stride<<<blocks, threads, 0, (cudaStream_t)stream>>>(x, out, n);
    return (int)cudaGetLastError();
}
"""

_GRAYSCALE_GLUE = r"""
// The check calls this with device memory: 256 threads a block, cdiv(n, 256) blocks.
extern "C" int exercise_run(const unsigned char *x, long long stride, unsigned char *out, int n, void *stream) {
    grayscale_01_1d<<<(unsigned)cdiv(n, 256), 256, 0, (cudaStream_t)stream>>>(x, stride, out, n);
    return (int)cudaGetLastError();
}
"""

_GRAYSCALE_2D_GLUE = r"""
// The check calls this with device memory: 16x16 blocks over (w, h).
extern "C" int exercise_run(const unsigned char *x, long long stride, unsigned char *out, int h, int w, void *stream) {
    const dim3 block(16, 16), grid((unsigned)cdiv(w, 16), (unsigned)cdiv(h, 16));
    grayscale_02_2d<<<grid, block, 0, (cudaStream_t)stream>>>(x, stride, out, h, w);
    return (int)cudaGetLastError();
}
"""

_MATMUL_GLUE = r"""
// The check calls this with device memory: C = A·B, 16x16 blocks, x along the columns of C.
extern "C" int exercise_run(int m, int n, int k, const float *A, const float *B, float *C, void *stream) {
    const dim3 block(16, 16), grid((unsigned)cdiv(n, 16), (unsigned)cdiv(m, 16));
    matmul_01_naive<false><<<grid, block, 0, (cudaStream_t)stream>>>(m, n, k, A, B, C, 1.0f, 0, 0, 0);
    return (int)cudaGetLastError();
}
"""

_MATMUL_TILED_GLUE = r"""
// The check calls this with device memory: C = A·B in 16x16 tiles (two tiles of dynamic shared memory).
extern "C" int exercise_run(int m, int n, int k, const float *A, const float *B, float *C, void *stream) {
    const int tw = 16;
    const dim3 block(tw, tw), grid((unsigned)cdiv(n, tw), (unsigned)cdiv(m, tw));
    matmul_03_tiled_dynamic<false><<<grid, block, 2 * tw * tw * sizeof(float), (cudaStream_t)stream>>>(
        m, n, k, A, B, C, 1.0f, 0, 0, 0);
    return (int)cudaGetLastError();
}
"""

_MANDELBROT_GLUE = r"""
// The check calls this with device memory: float32, 16x16 blocks over (width, height).
extern "C" int exercise_run(uint32_t *out, int width, int height, int max_iters, float x0, float span_x, float y0,
                            float span_y, void *stream) {
    const dim3 block(16, 16), grid((unsigned)cdiv(width, 16), (unsigned)cdiv(height, 16));
    mandelbrot_01_naive<float><<<grid, block, 0, (cudaStream_t)stream>>>(out, width, height, max_iters, x0, span_x,
                                                                         y0, span_y);
    return (int)cudaGetLastError();
}
"""

_FLASH_GLUE = r"""
template <int D>
static int exercise_flash(int BH, int S, const float *q, const float *k, const float *v, float *o, float scale,
                          int causal, cudaStream_t stream) {
    const size_t smem = FlashLayout<D>::BYTES;
    const cudaError_t e = cudalab_allow_dynamic_smem(attn_flash_fwd<D>, smem);
    if (e != cudaSuccess) return (int)e;
    const dim3 grid((unsigned)cdiv(S, FA_BR), (unsigned)BH);
    attn_flash_fwd<D><<<grid, FA_NT, smem, stream>>>(q, k, v, o, S, scale * CUDALAB_LOG2E, causal, 0);
    return (int)cudaGetLastError();
}

// The check calls this with device memory: BH slabs of S x D, D = 32, 64 or 128.
extern "C" int exercise_run(const float *q, const float *k, const float *v, float *o, int BH, int S, int D,
                            float scale, int causal, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (D == 32) return exercise_flash<32>(BH, S, q, k, v, o, scale, causal, s);
    if (D == 64) return exercise_flash<64>(BH, S, q, k, v, o, scale, causal, s);
    if (D == 128) return exercise_flash<128>(BH, S, q, k, v, o, scale, causal, s);
    return (int)cudaErrorInvalidValue;
}
"""

EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        "square", "square", "CUDA course, \"Exercise: CUDA version\" (section 2.10)",
        "the global index, the bounds check and the square; managed memory (cudaMallocManaged, cudaFree) in the "
        "course's program", ("python", "cuda"),
        "cuda/square/square.py", "square_int32_bk", "cuda/square/square.cu", ("square_int32_kernel",),
        _SQUARE_GLUE, "#include <cstdint>\n#include <cstring>\n",
        ("One thread per element: its index is blockIdx.x * blockDim.x + threadIdx.x (in Python: "
         "blockidx * blockdim + threadidx).",
         "The grid is rounded up to whole blocks, so the last block has threads past the end: they must do "
         "nothing (i < n).",
         "CUDA track: cudaMallocManaged(&a, n * sizeof(int)) gives one pointer for host and device; call "
         "cudaDeviceSynchronize() before the host reads it, then cudaFree(a)."),
        "cdiv(n, threads) blocks of `threads`"),
    Exercise(
        "grid_stride", "square", "CUDA course, the grid-stride exercise (squareElements)",
        "idx and stride of the grid-stride loop", ("python", "cuda"),
        "cuda/square/square.py", "square_grid_stride_k", "cuda/square/square.cu", ("square_02_grid_stride",),
        _GRID_STRIDE_GLUE, "",
        ("The loop starts at the thread's global index, like a one-thread-per-element kernel.",
         "The step is the number of threads in the whole grid: gridDim.x * blockDim.x. Then thread t handles "
         "t, t + stride, t + 2*stride, ... and the threads together cover every element once.",
         "The check runs grids both smaller and larger than n: a stride of blockDim.x alone, or a start that "
         "forgets blockIdx, leaves elements unwritten or writes them twice."),
        "a grid of the check's choice, often smaller than n"),
    Exercise(
        "grayscale", "grayscale", "GPU MODE lecture 3, exercise 1 (RGB to grayscale)",
        "the 1-D kernel body: the pixel index, the bounds check, the weighted sum of the three planes",
        ("python", "cuda"),
        "cuda/grayscale/grayscale.py", "rgb2grey_bk", "cuda/grayscale/grayscale.cu", ("grayscale_01_1d",),
        _GRAYSCALE_GLUE, "#include <cstdint>\n",
        ("The planes are stored one after the other: red at x[i], green at x[i + n] (Python) or "
         "x[i + stride] (CUDA), blue two planes on.",
         "There are more threads than pixels in the last block: guard with i < n.",
         "The weights are in _grey / grey_u8 already, rounded exactly as numpy rounds them: call them."),
        "256 threads a block, cdiv(n, 256) blocks"),
    Exercise(
        "grayscale_2d", "grayscale", "GPU MODE lecture 3 (the 2-D grid of the grayscale kernel)",
        "the 2-D mapping: row and column from block and thread, the bounds on both edges", ("python", "cuda"),
        "cuda/grayscale/grayscale.py", "rgb2grey_bk2d", "cuda/grayscale/grayscale.cu", ("grayscale_02_2d",),
        _GRAYSCALE_2D_GLUE, "#include <cstdint>\n",
        ("x runs along the width (columns), y along the height (rows).",
         "Both edges overhang: blocks on the right have columns >= w, blocks at the bottom rows >= h.",
         "Column c and row r: c = blockIdx.x * blockDim.x + threadIdx.x, r from the .y parts; "
         "return when c >= w or r >= h."),
        "16x16 blocks over (w, h)"),
    Exercise(
        "matmul", "matmul", "GPU MODE lecture 3, exercise 2 (matrix multiplication)",
        "the naive kernel body: row and column, the bounds, the dot product", ("python", "cuda"),
        "cuda/matmul/matmul.py", "matmul_bk", "cuda/shared/matmul/matmul_kernels.cuh", ("matmul_01_naive",),
        _MATMUL_GLUE, "",
        ("One thread per element of the output: the row from the .y parts, the column from the .x parts.",
         "Row-major: element (r, c) of a matrix with `cols` columns is at r * cols + c. Python: the matrix m is "
         "h x k, n is k x w, out is h x w. CUDA: the sizes are m, n, k: A is m x k, B is k x n, C is m x n.",
         "The grid is rounded up on both axes: return when the row or the column is outside the output."),
        "16x16 blocks, x along the columns"),
    Exercise(
        "matmul_tiled", "matmul", "GPU MODE lecture 5 (tiling through shared memory)",
        "the shared-memory tile loads, the two barriers, the ragged edges", ("python", "cuda"),
        "cuda/matmul/matmul.py", "matmul_tiled_k", "cuda/shared/matmul/matmul_kernels.cuh",
        ("matmul_03_tiled_dynamic",), _MATMUL_TILED_GLUE, "",
        ("Each thread loads one element of each tile; the dot product then reads a whole row and a whole column "
         "of the tiles, loaded by other threads.",
         "Two barriers per step: after the loads (the tile is complete) and after the products (nobody still "
         "reads it when the next step overwrites it). In Python a bare `yield` is __syncthreads().",
         "Sizes that are not multiples of the tile: load 0 for elements outside the matrices, so the products "
         "over the whole tile need no test; every thread, even one outside C, loads and reaches the barriers."),
        "16x16 tiles (Python: 4x4)"),
    Exercise(
        "mandelbrot", "mandelbrot", "CUDA course, section 3.1 (the Mandelbrot set)",
        "the escape-time loop of one pixel", ("python", "cuda"),
        "cuda/mandelbrot/mandelbrot.py", "mandelbrot_bk", "cuda/mandelbrot/mandelbrot.cu", ("mandelbrot_01_naive",),
        _MANDELBROT_GLUE, "#include <cstdint>\n#include <cmath>\n",
        ("z starts at 0; each step is z = z^2 + c: x' = x*x - y*y + cr, y' = 2*x*y + ci, both from the old x, y.",
         "Test |z|^2 = x*x + y*y > 4 before each step, and count only the steps taken: a pixel that never "
         "escapes gets max_iters.",
         "CUDA: write each operation with A::mul/A::add/A::sub; the compiler fuses plain a*b + c into one FMA, "
         "which rounds differently from the reference and changes a few counts."),
        "16x16 blocks over (width, height)"),
    Exercise(
        "mandelbrot_zoom", "mandelbrot", "CUDA course, section 3.1's puzzle (zoom into an interesting region)",
        "a region (x0, x1, y0, y1) whose picture is interesting", ("python",),
        "cuda/mandelbrot/mandelbrot.py", "ZOOM_REGION", None, (), "", "",
        ("The interesting pixels sit on the boundary of the set: where some points escape after a few steps "
         "and their neighbours after many.",
         "Look at `invoke viz mandelbrot` (or the picture in the README): the cusp at the left of the main "
         "cardioid (x near -0.75, y near 0.1) and the small bulbs around it are good places to start.",
         "Zoom in until the region is at most 0.1 wide and high; most of its pixels must neither escape at once "
         "nor stay to the last iteration."),
        ""),
    Exercise(
        "flash_softmax", "attention", "CUDA course, section 4 (flash attention's online softmax)",
        "the online-softmax update: the running max, the rescaled sum and output", ("python", "cuda"),
        "cuda/attention/attention.py", "flash_bk", "cuda/shared/attention/attention_kernels.cuh", ("attn_flash_fwd",),
        _FLASH_GLUE, "#include <cmath>\n",
        ("Keep, per query row, the largest score seen so far (m), the sum of exp(score - m) (l) and the sum of "
         "exp(score - m) * v (o).",
         "When a tile brings a larger max m', everything summed so far was scaled by exp(-m); multiply l and o "
         "by alpha = exp(m - m') to bring them to exp(-m').",
         "On the first tile m is -inf: alpha must be 0 there (exp(-inf) is 0; in Python write it out, since "
         "-inf - -inf is NaN). The CUDA kernel's scores are in base 2: exp2f, not expf."),
        "64 query rows a block, 128 threads (Python: 4 rows, 4-key tiles)"),
)

BY_NAME = {e.name: e for e in EXERCISES}


# --- the problems: cases, runners, references ----------------------------------------------------

def cases(name: str, track: str, seed: int = 0) -> list[Case]:
    """The check's cases. Fixed ones reach the edges each exercise's mistakes live on (one element,
    sizes that are a multiple of the block with several blocks, sizes that are not, the values where
    a rounding or a comparison decides); one more, and every random input, come from `seed`."""
    py = track == "python"
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 7])

    def made(rows, label, params, ragged, exact_multi, small_when, **more):
        return [Case(label(*row), params(*row), seed=i, ragged=bool(ragged(*row)), small=bool(small_when(*row)),
                     run=seed, exact_multi=bool(exact_multi(*row)), **{k: bool(f(*row)) for k, f in more.items()})
                for i, row in enumerate(rows)]

    if name == "square":
        sizes = [(1, 32), (31, 32), (257, 64), (1024, 256), (1000, 256), (4099, 96)]
        sizes += [(20011, 128)] if py else [(1 << 20, 256), (10_000_019, 256)]
        t = int(rng.choice([32, 64, 128]))
        n = int(rng.integers(300, 5000))
        sizes.append((n + (n % t == 0), t))  # the fresh one, never a multiple of the block
        return made(sizes, lambda n, t: f"n={n} threads={t}", lambda n, t: {"n": n, "threads": t},
                    lambda n, t: n % t, lambda n, t: n % t == 0 and n > t, lambda n, t: n == 257)
    if name == "grid_stride":
        # Grids smaller than n (each thread handles several elements), exactly n, and larger than n.
        launches = [(1, 1, 32), (7, 2, 32), (64, 2, 32), (97, 3, 16), (256, 2, 32), (1000, 2, 128), (50, 4, 32),
                    (4099, 5, 64)]
        launches += [(20011, 4, 128)] if py else [(10_000_019, 264, 256)]
        launches.append((int(rng.integers(100, 3000)), int(rng.integers(2, 7)), int(rng.choice([16, 32, 64]))))
        return made(launches, lambda n, b, t: f"n={n} grid={b}x{t}", lambda n, b, t: {"n": n, "blocks": b, "threads": t},
                    lambda *_: False, lambda *_: False, lambda n, b, t: n == 97)
    if name in ("grayscale", "grayscale_2d"):
        one_d = name == "grayscale"
        shapes = [(1, 1), (1, 7), (13, 17), (16, 32), (32, 48), (31, 61), (100, 201)] + ([] if py else [(2003, 3001)])
        shapes.append((int(rng.integers(5, 60)), int(rng.integers(5, 90))))

        def ragged(h, w):
            return (h * w) % 256 != 0 if one_d else (h % 16 or w % 16) != 0

        def exact_multi(h, w):
            return not ragged(h, w) and (h * w > 256 if one_d else (h > 16 or w > 16))

        out = made(shapes, lambda h, w: f"{h}x{w}", lambda h, w: {"h": h, "w": w}, ragged, exact_multi,
                   lambda h, w: h == 31)
        n = len(out)
        out.append(Case("8x40 pixels where float32 and float64 weights round apart", {"h": 8, "w": 40, "edge": True},
                        seed=n, ragged=ragged(8, 40), run=seed))
        out.append(Case("the lab's test picture 64x96", {"h": 64, "w": 96, "picture": True}, seed=n + 1,
                        ragged=ragged(64, 96), exact_multi=exact_multi(64, 96), run=seed))
        return out
    if name == "matmul":
        shapes = [(1, 1, 1), (3, 5, 7), (16, 16, 16), (32, 48, 20), (17, 13, 11), (33, 31, 29)]
        shapes += [] if py else [(1023, 1031, 517)]
        shapes.append(tuple(int(v) for v in rng.integers(2, 40, size=3)))
        return made(shapes, lambda m, n, k: f"{m}x{k} @ {k}x{n}", lambda m, n, k: {"m": m, "n": n, "k": k},
                    lambda m, n, k: m % 16 or n % 16, lambda m, n, k: m % 16 == 0 == n % 16 and max(m, n) > 16,
                    lambda m, n, k: m == 17)
    if name == "matmul_tiled":
        tw = 4 if py else 16
        shapes = ([(1, 1, 1), (4, 4, 4), (3, 5, 7), (8, 8, 12), (8, 8, 6), (9, 6, 13), (17, 13, 11)] if py else
                  [(1, 1, 1), (16, 16, 16), (3, 5, 7), (32, 32, 48), (32, 32, 40), (17, 13, 11), (33, 31, 29),
                   (1023, 1031, 517)])
        shapes.append(tuple(int(v) for v in rng.integers(2, 5 * tw, size=3)))
        # The sanitizers' case spans two tiles of k: racecheck sees a missing barrier after the products
        # only when a second tile is loaded over the first.
        return made(shapes, lambda m, n, k: f"{m}x{k} @ {k}x{n}", lambda m, n, k: {"m": m, "n": n, "k": k, "tw": tw},
                    lambda m, n, k: m % tw or n % tw or k % tw,
                    lambda m, n, k: m % tw == n % tw == k % tw == 0 and max(m, n) > tw, lambda m, n, k: m == 33)
    if name == "mandelbrot":
        full = (-2.0, 1.0, -1.5, 1.5)
        zoom = (-0.7530, -0.7390, 0.0960, 0.1100)
        # |z|^2 lands on exactly 4 at c = -2 (z: 0, -2, 2, 2, ...: it never escapes) and at c = -2i (escapes
        # after 2 steps): a full view with an even height has c = -2 on its first column; the square
        # (-2, 2, -2, 2) at 32x32 has both.
        edge = (-2.0, 2.0, -2.0, 2.0)
        x0 = float(rng.uniform(-1.9, 0.2))
        y0 = float(rng.uniform(-1.2, 1.0))
        span = float(rng.uniform(0.05, 0.6))
        fresh = (round(x0, 6), round(x0 + span, 6), round(y0, 6), round(y0 + span, 6))
        sizes = [(1, 1, 50, full), (17, 13, 64, full), (48, 32, 64, full), (32, 32, 40, edge), (40, 33, 100, full),
                 (32, 32, 200, zoom), (int(rng.integers(9, 41)), int(rng.integers(9, 41)), 80, fresh)]
        sizes += [] if py else [(1021, 767, 256, full), (1024, 768, 256, full)]
        names = {full: "", zoom: " (zoomed)", edge: " (|z|^2 = 4 exactly at c = -2 and c = -2i)",
                 fresh: f" region {fresh}"}
        return made(sizes, lambda w, h, it, r: f"{w}x{h} iters={it}" + names[r],
                    lambda w, h, it, r: {"width": w, "height": h, "iters": it, "region": r},
                    lambda w, h, it, r: w % 16 or h % 16, lambda w, h, it, r: w % 16 == 0 == h % 16 and max(w, h) > 16,
                    lambda w, h, it, r: w == 17)
    if name == "flash_softmax":
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
        return made(shapes,
                    lambda bh, s, d, c, w: f"BH={bh} S={s} D={d}" + (" causal" if c else "")
                    + (f" scores climbing by {w}" if w else ""),
                    lambda bh, s, d, c, w: {"bh": bh, "S": s, "D": d, "causal": c, "wide": w},
                    lambda bh, s, d, c, w: s % br, lambda bh, s, d, c, w: s % br == 0 and s > br,
                    lambda bh, s, d, c, w: s == 65, wide=lambda bh, s, d, c, w: w > 0)
    raise KeyError(name)


def speed(name: str) -> Speed | None:
    """The CUDA track's timed case (the bench's ceiling for the program)."""
    if name == "square":
        n = 1 << 26
        return Speed({"n": n, "threads": 256}, "memcpy", 8.0 * n)
    if name == "grid_stride":
        n = 1 << 26
        return Speed({"n": n, "blocks": 132 * 8, "threads": 256}, "memcpy", 8.0 * n)
    if name in ("grayscale", "grayscale_2d"):
        h, w = 4096, 4096
        return Speed({"h": h, "w": w}, "memcpy", 4.0 * h * w)
    if name in ("matmul", "matmul_tiled"):
        s = 2048
        return Speed({"m": s, "n": s, "k": s, "tw": 16}, "fp32", 2.0 * s ** 3)
    if name == "mandelbrot":
        # Instruction-bound: 8 FP32 instructions per iteration of 01_naive's loop (the bench's count).
        from harness import programs  # the registry: the catalog imports no program module
        mb = programs.module("mandelbrot")

        w = h = 1024
        it = 256
        total = float(mb.reference(w, h, it, (-2.0, 1.0, -1.5, 1.5), np.float32).astype(np.int64).sum())
        return Speed({"width": w, "height": h, "iters": it, "region": (-2.0, 1.0, -1.5, 1.5)}, "fp32_inst",
                     8.0 * total)
    if name == "flash_softmax":
        bh, s, d = 64, 4096, 64
        return Speed({"bh": bh, "S": s, "D": d, "causal": False}, "fp32", 4.0 * bh * s * s * d)
    return None


# Inputs and reference, shared by both tracks.

def inputs(name: str, case: Case) -> dict:
    p, rng = case.params, _rng(case.seed, case.run)
    if name == "square":
        return {"a": rng.integers(-2**31, 2**31, size=p["n"], dtype=np.int64).astype(np.int32)}
    if name == "grid_stride":
        return {"x": rng.standard_normal(p["n"]).astype(np.float32) * 8}
    if name in ("grayscale", "grayscale_2d"):
        if p.get("picture"):
            from harness import programs  # the registry: the catalog imports no program module
            gs = programs.module("grayscale")

            return {"x": gs.planar(gs.test_image(p["h"], p["w"]))}
        x = rng.integers(0, 256, size=(3, p["h"] * p["w"]), dtype=np.uint8)
        if p.get("edge"):
            pick = _rounding_edge_pixels(rng)[:, :x.shape[1]]
            x[:, :pick.shape[1]] = pick
            x = x[:, rng.permutation(x.shape[1])]
        return {"x": x.reshape(3, p["h"], p["w"])}
    if name in ("matmul", "matmul_tiled"):
        return {"a": rng.standard_normal((p["m"], p["k"])).astype(np.float32),
                "b": rng.standard_normal((p["k"], p["n"])).astype(np.float32)}
    if name == "mandelbrot":
        return {}
    if name == "flash_softmax":
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
    raise KeyError(name)


def _rounding_edge_pixels(rng: np.random.Generator, draws: int = 1 << 21) -> np.ndarray:
    """(3, m) pixels whose grey byte changes when the weighted sum is not rounded exactly as the
    reference rounds it (float64 weights or arithmetic, or a fused multiply-add): about 1 pixel in
    60000 of random ones, too few for random pictures to hold any."""
    from harness import programs  # the registry: the catalog imports no program module
    gs = programs.module("grayscale")

    x = rng.integers(0, 256, size=(3, draws), dtype=np.uint8)
    r, g, b = (x[c].astype(np.float32) for c in range(3))
    want = ((gs.CR * r + gs.CG * g) + gs.CB * b).astype(np.uint8)
    r64, g64, b64 = (x[c].astype(np.float64) for c in range(3))
    w64 = [np.float64(w) for w in (gs.CR, gs.CG, gs.CB)]
    apart = (np.floor(0.2989 * r64 + 0.5870 * g64 + 0.1140 * b64).astype(np.uint8) != want)
    apart |= ((w64[0] * r64 + w64[1] * g64) + w64[2] * b64).astype(np.uint8) != want
    fused = (w64[0] * r64 + (gs.CG * g).astype(np.float64)).astype(np.float32)
    fused = (w64[2] * b64 + fused.astype(np.float64)).astype(np.float32)
    apart |= fused.astype(np.uint8) != want
    return x[:, apart]


def reference(name: str, case: Case, inp: dict) -> np.ndarray:
    p = case.params
    if name == "square":
        from harness import programs  # the registry: the catalog imports no program module
        sq = programs.module("square")

        return sq.reference(inp["a"])
    if name == "grid_stride":
        from harness import programs  # the registry: the catalog imports no program module
        sq = programs.module("square")

        return sq.reference(inp["x"])
    if name in ("grayscale", "grayscale_2d"):
        from harness import programs  # the registry: the catalog imports no program module
        gs = programs.module("grayscale")

        return gs.reference(inp["x"]).ravel()
    if name in ("matmul", "matmul_tiled"):
        from harness import programs  # the registry: the catalog imports no program module
        mm = programs.module("matmul")

        return mm.reference(inp["a"], inp["b"]).ravel()
    if name == "mandelbrot":
        from harness import programs  # the registry: the catalog imports no program module
        mb = programs.module("mandelbrot")

        return mb.reference(p["width"], p["height"], p["iters"], p["region"], np.float32).ravel()
    if name == "flash_softmax":
        from harness import programs  # the registry: the catalog imports no program module
        at = programs.module("attention")

        return at.reference(inp["q"], inp["k"], inp["v"], causal=p["causal"]).ravel()
    raise KeyError(name)


# How outputs are compared: the lab's own tolerance for each program.
def tolerance(name: str) -> float | None:
    """None: exact equality (integers, and the float kernels whose rounding the reference pins)."""
    if name in ("matmul", "matmul_tiled"):
        from harness import programs  # the registry: the catalog imports no program module
        mm = programs.module("matmul")

        return mm.TOL
    if name == "flash_softmax":
        from harness import programs  # the registry: the catalog imports no program module
        at = programs.module("attention")

        return at.TOLERANCE
    if name == "grid_stride":
        return 1e-5  # square's check_close
    return None


_POISON_BITS = {np.dtype(np.float32): (np.uint32, 0x7FE5A5A5), np.dtype(np.float64): (np.uint64, 0x7FFDEAD5A5A5A5A5)}
# Outputs where every value of the type is a legal answer (a grey byte): each case runs twice, with
# two poisons, and an element is unwritten only when it holds the first in the first run and the
# second in the second (a kernel that writes it writes the same value both times).
TWO_POISONS = ("grayscale", "grayscale_2d")


def poisoned(shape, dtype, alt: bool = False) -> np.ndarray:
    """An output array full of the poison (floats: a NaN whose payload no arithmetic makes, so a NaN
    computed from an unwritten shared cell is told apart from an output nobody wrote)."""
    dt = np.dtype(dtype)
    if dt in _POISON_BITS:
        ut, bits = _POISON_BITS[dt]
        return np.full(shape, bits, dtype=ut).view(dt)
    return np.full(shape, poison_value(dt, alt), dtype=dt)


def is_poison(a: np.ndarray, alt: bool = False) -> np.ndarray:
    dt = a.dtype
    if dt in _POISON_BITS:
        ut, bits = _POISON_BITS[dt]
        return a.view(ut) == bits
    return a == np.asarray(poison_value(dt, alt)).astype(dt)


def poison_value(dtype, alt: bool = False) -> object:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.nan
    if dt.kind == "u":
        return ({1: 0x54, 4: 0xA5A5A5A5} if alt else {1: 0xAB, 4: 0x5A5A5A5A})[dt.itemsize]
    return -0x5A5A5A5B


def tail(name: str, case: Case) -> np.ndarray | None:
    """The output elements that lie in a partial block or tile (the ragged edges), where the mistakes
    of a bounds check live; None where a mistake at the edge can reach every element (the k edge of a
    tiled product, the keys past S in attention) or there is no block edge (a grid-stride loop)."""
    p = case.params

    def two_d(h, w, bh, bw):
        r = np.arange(h)[:, None] >= (h // bh) * bh
        c = np.arange(w)[None, :] >= (w // bw) * bw
        return (r | c).ravel()

    if name == "square":
        return np.arange(p["n"]) >= (p["n"] // p["threads"]) * p["threads"]
    if name == "grayscale":
        n = p["h"] * p["w"]
        return np.arange(n) >= (n // 256) * 256
    if name == "grayscale_2d":
        return two_d(p["h"], p["w"], 16, 16)
    if name == "matmul":
        return two_d(p["m"], p["n"], 16, 16)
    if name == "matmul_tiled":
        return None if p["k"] % p["tw"] else two_d(p["m"], p["n"], p["tw"], p["tw"])
    if name == "mandelbrot":
        return two_d(p["height"], p["width"], 16, 16)
    return None


# --- the Python track: run the learner's function on harness.base.sim ---------------------------------

class RedundantWrites(Exception):
    """grid_stride: some element was written by more than one thread (right values, wasted work)."""


def redundant_message(i: int, threads: int | None = None) -> str:
    by = f"{threads} threads" if threads else "a second thread"
    return (f"element {i} was written by {by}: more than one thread handles it, so the grid does the work several "
            f"times over: the stride must be the whole grid's thread count, and the start the thread's global index")


class _Counting(np.ndarray):
    """An output that records which thread first wrote each element and raises RedundantWrites when
    another thread writes it (grid_stride: every element handled by one thread; one thread may write an
    element several times, as in out[i] = x[i]; out[i] *= x[i])."""

    owner: np.ndarray
    writer: int = -1

    def __setitem__(self, key, value):
        idx = np.arange(self.owner.size)[key].ravel()
        own = self.owner[idx]
        twice = idx[(own >= 0) & (own != self.writer)]
        if twice.size:  # stop here: a grid that does the work many times over can take very long to finish it
            raise RedundantWrites(redundant_message(int(twice[0])))
        self.owner[idx[own < 0]] = self.writer
        super().__setitem__(key, value)


def _as_writer(fn, out: _Counting):
    """The learner's kernel, telling `out` which thread runs (a generator kernel: before each resumption)."""
    import inspect

    def me(ctx):
        g, b, t = ctx.gridDim, ctx.blockIdx, ctx.threadIdx
        block = b.x + g.x * (b.y + g.y * b.z)
        return block * ctx.blockDim.size + t.x + ctx.blockDim.x * (t.y + ctx.blockDim.y * t.z)

    if inspect.isgeneratorfunction(fn):
        def gen(ctx, *args):
            it = fn(ctx, *args)
            while True:
                out.writer = me(ctx)
                try:
                    v = next(it)
                except StopIteration:
                    return
                yield v
        return gen

    def plain(ctx, *args):
        out.writer = me(ctx)
        return fn(ctx, *args)
    return plain


def reversed_threads(fn):
    """The kernel with the threads of each block run in the opposite order (sim runs them in order):
    threadIdx is mirrored, so the thread that ran last runs first. A kernel without a race gives the
    same output; one that lacks a barrier reads what other threads have, or have not yet, written."""
    import inspect
    from types import SimpleNamespace

    from harness.base.sim import dim3

    def mirrored(ctx):
        d, t = ctx.blockDim, ctx.threadIdx
        return SimpleNamespace(blockIdx=ctx.blockIdx, threadIdx=dim3(d.x - 1 - t.x, d.y - 1 - t.y, d.z - 1 - t.z),
                               blockDim=d, gridDim=ctx.gridDim, shared=ctx.shared)

    if inspect.isgeneratorfunction(fn):
        def gen(ctx, *args):
            return (yield from fn(mirrored(ctx), *args))
        return gen
    return lambda ctx, *args: fn(mirrored(ctx), *args)


def run_python(name: str, fn, case: Case, inp: dict, alt: bool = False) -> np.ndarray:
    """The learner's output on one case; `alt`: the outputs start with the second poison (TWO_POISONS)."""
    from harness.base import sim

    p = case.params
    if name == "square":
        a = inp["a"].copy()
        sim.blk_kernel(fn, cdiv(p["n"], p["threads"]), p["threads"], a, p["n"])
        return a
    if name == "grid_stride":
        out = poisoned(p["n"], np.float32).view(_Counting)
        out.owner = np.full(p["n"], -1, dtype=np.int64)
        sim.launch(_as_writer(fn, out), p["blocks"], p["threads"], inp["x"], out, p["n"])
        return np.asarray(out)
    if name == "grayscale":
        n = p["h"] * p["w"]
        out = poisoned(n, np.uint8, alt)
        sim.blk_kernel(fn, cdiv(n, 256), 256, inp["x"].ravel(), out, n)
        return out
    if name == "grayscale_2d":
        h, w = p["h"], p["w"]
        out = poisoned(h * w, np.uint8, alt)
        sim.blk_kernel2d(fn, sim.dim3(cdiv(w, 16), cdiv(h, 16)), sim.dim3(16, 16), inp["x"].ravel(), out, h, w)
        return out
    if name == "matmul":
        m, n, k = p["m"], p["n"], p["k"]
        out = poisoned(m * n, np.float32)
        sim.blk_kernel2d(fn, sim.dim3(cdiv(n, 16), cdiv(m, 16)), sim.dim3(16, 16), inp["a"].ravel(), inp["b"].ravel(),
                         out, m, n, k)
        return out
    if name == "matmul_tiled":
        m, n, k, tw = p["m"], p["n"], p["k"], p["tw"]
        out = poisoned(m * n, np.float32)
        sim.launch(fn, sim.dim3(cdiv(n, tw), cdiv(m, tw)), sim.dim3(tw, tw), inp["a"].ravel(), inp["b"].ravel(), out,
                   m, n, k, tw, shared={"ms": ((tw, tw), np.float32), "ns": ((tw, tw), np.float32)})
        return out
    if name == "mandelbrot":
        w, h, it = p["width"], p["height"], p["iters"]
        t = np.float32
        x0, x1, y0, y1 = (t(v) for v in p["region"])
        out = poisoned(w * h, np.uint32)
        sim.blk_kernel2d(fn, sim.dim3(cdiv(w, 16), cdiv(h, 16)), sim.dim3(16, 16), out, w, h, it, x0, t(x1 - x0), y0,
                         t(y1 - y0))
        return out
    if name == "flash_softmax":
        bh, S, D = p["bh"], p["S"], p["D"]
        q, k, v = (inp[x].astype(np.float64) for x in ("q", "k", "v"))
        out = poisoned((bh, S, D), np.float64)
        br = bc = 4
        sim.launch(fn, sim.dim3(cdiv(S, br), bh), sim.dim3(br), q, k, v, out, S, D, 1.0 / math.sqrt(D),
                   bool(p["causal"]), br, bc, shared={"k": ((bc, D), np.float64), "v": ((bc, D), np.float64)})
        return out.ravel()
    raise KeyError(name)


# --- the CUDA track: call exercise_run on device memory ------------------------------------------

def _dev_out(n: int, dtype, alt: bool = False):
    """A poisoned device output of n elements plus GUARD poisoned ones after it."""
    from harness.calling import cudart

    return cudart.to_device(poisoned(n + GUARD, dtype, alt))


# --- the CUDA track's check build: the learner's file with what the values cannot show counted -----
# grid_stride: the kernel's `out` becomes an object whose element writes note the writing thread, so an
# element handled by several threads (a stride of blockDim.x or gridDim.x alone: right values, the work
# done many times over) is seen. square: cudaMalloc*/cudaFree are counted, so memory the course's
# program never frees is seen. The values come from this build too; it is compiled in the cases' child.

_COUNTED_OUT = r"""
// The check's build: writes through `out` note their thread (an element handled by two threads is
// counted); everything else is the learner's code unchanged.
__device__ unsigned long long *cudalab_owner = nullptr;
__device__ unsigned int *cudalab_others = nullptr;
__device__ long long cudalab_limit = 0;
struct cudalab_counted_ref {
    float *p;
    long long i;
    __device__ void note() const {
        if (cudalab_owner == nullptr || i < 0 || i >= cudalab_limit) return;
        const unsigned long long block = blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
        const unsigned long long me = 1ull + block * blockDim.x * blockDim.y * blockDim.z + threadIdx.x
                                      + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        const unsigned long long was = atomicCAS(cudalab_owner + i, 0ull, me);
        if (was != 0ull && was != me) atomicAdd(cudalab_others + i, 1u);
    }
    __device__ operator float() const { return *p; }
    __device__ cudalab_counted_ref &operator=(float v) { note(); *p = v; return *this; }
    __device__ cudalab_counted_ref &operator=(const cudalab_counted_ref &o) { const float v = *o.p; note(); *p = v; return *this; }
    __device__ cudalab_counted_ref &operator+=(float v) { note(); *p += v; return *this; }
    __device__ cudalab_counted_ref &operator-=(float v) { note(); *p -= v; return *this; }
    __device__ cudalab_counted_ref &operator*=(float v) { note(); *p *= v; return *this; }
    __device__ cudalab_counted_ref &operator/=(float v) { note(); *p /= v; return *this; }
};
struct cudalab_counted_out {
    float *p;
    long long off;
    __host__ __device__ cudalab_counted_out(float *q, long long o = 0) : p(q), off(o) {}
    __device__ cudalab_counted_ref operator[](long long i) const { return cudalab_counted_ref{p + i, off + i}; }
    __device__ cudalab_counted_ref operator*() const { return cudalab_counted_ref{p, off}; }
    __device__ cudalab_counted_out operator+(long long i) const { return cudalab_counted_out(p + i, off + i); }
};
"""

_COUNTED_OUT_SET = r"""
extern "C" int exercise_count_writes(unsigned long long *owner, unsigned int *others, long long limit) {
    cudaError_t e = cudaMemcpyToSymbol(cudalab_owner, &owner, sizeof owner);
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(cudalab_others, &others, sizeof others);
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(cudalab_limit, &limit, sizeof limit);
    return (int)e;
}
"""

_COUNTED_ALLOC = r"""#include <cuda_runtime.h>
// The check's build: allocations and frees are counted (memory the program never frees is a leak).
static long long cudalab_live_allocations = 0;
template <class T>
static inline cudaError_t cudalab_counted_malloc_managed(T **p, size_t size, unsigned flags = cudaMemAttachGlobal) {
    const cudaError_t e = cudaMallocManaged((void **)p, size, flags);
    if (e == cudaSuccess) ++cudalab_live_allocations;
    return e;
}
template <class T>
static inline cudaError_t cudalab_counted_malloc(T **p, size_t size) {
    const cudaError_t e = cudaMalloc((void **)p, size);
    if (e == cudaSuccess) ++cudalab_live_allocations;
    return e;
}
static inline cudaError_t cudalab_counted_free(void *p) {
    const cudaError_t e = cudaFree(p);
    if (e == cudaSuccess && p != nullptr) --cudalab_live_allocations;
    return e;
}
#define cudaMallocManaged cudalab_counted_malloc_managed
#define cudaMalloc cudalab_counted_malloc
#define cudaFree cudalab_counted_free
"""

_COUNTED_ALLOC_GET = r"""
extern "C" long long exercise_live_allocations(void) { return cudalab_live_allocations; }
"""

_KERNEL_DEF = r"__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:void\s+)?{name}\s*\(([^)]*)\)"


def check_source(name: str, text: str) -> str | None:
    """The learner's file as the cases' child compiles it (see above), or None: the plain file serves."""
    import re

    if name == "square":
        return _COUNTED_ALLOC + text + _COUNTED_ALLOC_GET
    if name == "grid_stride":
        m = re.search(_KERNEL_DEF.format(name="square_02_grid_stride"), text)
        if m is None:
            return None
        params, k = re.subn(r"float\s*\*\s*(?:__restrict__\s*)?out\b", "cudalab_counted_out out", m.group(1))
        if k != 1:
            return None
        return (text[:m.start()] + _COUNTED_OUT + text[m.start():m.start(1)] + params + text[m.end(1):]
                + _COUNTED_OUT_SET)
    return None


def run_cuda(name: str, mod, case: Case, inp: dict, alt: bool = False) -> dict:
    """The arrays one case leaves, for the checker to judge: "out" and "guard" (the poisoned zone after
    the output, which must come back untouched). `mod` may be the counting build (check_source): its
    counters come back too, "others" (grid_stride: per element, the writes by a thread other than its
    first writer) and "leaked" (square: allocations exercise_managed left); square's "managed" is the
    course's managed-memory program's result on the same input. counted_problem() reads them."""
    from harness.calling import cudart

    p = case.params
    funcs = set(getattr(mod, "functions", ()))
    if name == "square":
        n = p["n"]
        host = poisoned(n + GUARD, np.int32)
        host[:n] = inp["a"]
        d = cudart.to_device(host)
        mod.exercise_run(d, n, p["threads"], None)
        res = d.to_host()
        d.close()
        got = {"out": res[:n], "guard": res[n:]}
        if n <= 1 << 20:  # the course's managed-memory program, on the host array
            h = inp["a"].copy()
            live = mod.exercise_live_allocations() if "exercise_live_allocations" in funcs else None
            mod.exercise_managed(h, n, p["threads"])
            if live is not None:
                got["leaked"] = np.array([mod.exercise_live_allocations() - live], dtype=np.int64)
            got["managed"] = h
        return got
    if name == "grid_stride":
        n = p["n"]
        x = cudart.to_device(inp["x"])
        out = _dev_out(n, np.float32)
        counted = "exercise_count_writes" in funcs
        if counted:
            owner = cudart.to_device(np.zeros(n + GUARD, dtype=np.uint64))
            others = cudart.to_device(np.zeros(n + GUARD, dtype=np.uint32))
            mod.exercise_count_writes(owner, others, n + GUARD)
        try:
            mod.exercise_run(x, out, n, p["blocks"], p["threads"], None)
            res = out.to_host()
            got = {"out": res[:n], "guard": res[n:]}
            if counted:
                got["others"] = others.to_host()
        finally:
            for d in [x, out] + ([owner, others] if counted else []):
                d.close()
        return got
    if name in ("grayscale", "grayscale_2d"):
        h, w = p["h"], p["w"]
        n = h * w
        x = cudart.to_device(inp["x"].ravel())
        out = _dev_out(n, np.uint8, alt)
        if name == "grayscale":
            mod.exercise_run(x, n, out, n, None)
        else:
            mod.exercise_run(x, n, out, h, w, None)
        res = out.to_host()
        x.close()
        out.close()
        return {"out": res[:n], "guard": res[n:]}
    if name in ("matmul", "matmul_tiled"):
        m, n, k = p["m"], p["n"], p["k"]
        a, b = cudart.to_device(inp["a"]), cudart.to_device(inp["b"])
        c = _dev_out(m * n, np.float32)
        mod.exercise_run(m, n, k, a, b, c, None)
        res = c.to_host()
        for d in (a, b, c):
            d.close()
        return {"out": res[:m * n], "guard": res[m * n:]}
    if name == "mandelbrot":
        w, h, it = p["width"], p["height"], p["iters"]
        t = np.float32
        x0, x1, y0, y1 = (t(v) for v in p["region"])
        out = _dev_out(w * h, np.uint32)
        mod.exercise_run(out, w, h, it, float(x0), float(t(x1 - x0)), float(y0), float(t(y1 - y0)), None)
        res = out.to_host()
        out.close()
        return {"out": res[:w * h], "guard": res[w * h:]}
    if name == "flash_softmax":
        bh, S, D = p["bh"], p["S"], p["D"]
        q, k, v = (cudart.to_device(inp[x]) for x in ("q", "k", "v"))
        o = _dev_out(bh * S * D, np.float32)
        mod.exercise_run(q, k, v, o, bh, S, D, 1.0 / math.sqrt(D), int(p["causal"]), None)
        res = o.to_host()
        for d in (q, k, v, o):
            d.close()
        return {"out": res[:bh * S * D], "guard": res[bh * S * D:]}
    raise KeyError(name)


def counted_problem(got: dict) -> str | None:
    """What the counting build's counters and the managed-memory program's result (run_cuda's extra
    arrays) show wrong, or None: the checker's reading of them."""
    others = got.get("others")
    if others is not None and others.size and np.asarray(others).any():
        i = int(np.argmax(others))
        return redundant_message(i, int(others[i]) + 1)
    leaked = got.get("leaked")
    if leaked is not None and leaked.size and int(np.asarray(leaked).ravel()[0]) > 0:
        return (f"exercise_managed returned with {int(np.asarray(leaked).ravel()[0])} allocation(s) never freed: a "
                f"leak: cudaFree what cudaMallocManaged gave, once the host has read the result")
    managed = got.get("managed")
    if managed is not None and not np.array_equal(np.asarray(managed).ravel(), np.asarray(got["out"]).ravel()):
        return ("exercise_managed (the course's program with managed memory) gives a different result from the "
                "kernel: look at the allocation, the copies, the launch and the cudaDeviceSynchronize before the "
                "host reads the result")
    return None


def timing_launch(name: str, mod, params: dict):
    """Device buffers for the timed case and a launch(stream) that enqueues one run (harness.measuring.timing)."""
    from harness.calling import cudart
    from harness.measuring import bench

    p = params
    bufs = []

    def dev(shape, dtype, fill=None):
        d = cudart.empty(shape, dtype)
        bufs.append(d)
        if fill is not None:
            d.fill_bytes(fill)
        return d

    if name == "square":
        a = dev(p["n"], np.int32, 0x01)
        launch = lambda s: mod.exercise_run(a, p["n"], p["threads"], s)  # noqa: E731
    elif name == "grid_stride":
        x, o = dev(p["n"], np.float32, 0x3F), dev(p["n"], np.float32)
        launch = lambda s: mod.exercise_run(x, o, p["n"], p["blocks"], p["threads"], s)  # noqa: E731
    elif name in ("grayscale", "grayscale_2d"):
        n = p["h"] * p["w"]
        x, o = dev(3 * n, np.uint8, 0x7F), dev(n, np.uint8)
        if name == "grayscale":
            launch = lambda s: mod.exercise_run(x, n, o, n, s)  # noqa: E731
        else:
            launch = lambda s: mod.exercise_run(x, n, o, p["h"], p["w"], s)  # noqa: E731
    elif name in ("matmul", "matmul_tiled"):
        m, n, k = p["m"], p["n"], p["k"]
        a, b, c = dev(m * k, np.float32, 0x3C), dev(k * n, np.float32, 0x3C), dev(m * n, np.float32)
        launch = lambda s: mod.exercise_run(m, n, k, a, b, c, s)  # noqa: E731
    elif name == "mandelbrot":
        w, h, it = p["width"], p["height"], p["iters"]
        t = np.float32
        x0, x1, y0, y1 = (t(v) for v in p["region"])
        o = dev(w * h, np.uint32)
        launch = lambda s: mod.exercise_run(o, w, h, it, float(x0), float(t(x1 - x0)), float(y0), float(t(y1 - y0)), s)  # noqa: E731,E501
    elif name == "flash_softmax":
        bh, S, D = p["bh"], p["S"], p["D"]
        q, k, v, o = (dev(bh * S * D, np.float32, 0x3C) for _ in range(4))
        launch = lambda s: mod.exercise_run(q, k, v, o, bh, S, D, 1.0 / math.sqrt(D), 0, s)  # noqa: E731
    else:
        raise KeyError(name)

    def close():
        for d in bufs:
            d.close()

    return bench.Prepared(launch, close)


# --- mandelbrot_zoom: is the learner's region interesting? ---------------------------------------

ZOOM_SIZE, ZOOM_ITERS = 192, 256
ZOOM_MAX_SPAN = 0.1  # a zoom: at most 1/30 of the default view's 3 units
ZOOM_MIN_SHARE = 0.5  # pixels neither escaping at once (count <= 2) nor reaching max_iters
ZOOM_MIN_LEVELS = 24  # distinct counts among the pixels: a picture, not two flat colours
ZOOM_MAX_ASPECT = 4.0  # width to height (or height to width): a picture, not a sliver
ZOOM_MIN_STEPS = 16  # float64 steps between neighbouring pixels: coordinates that still differ


def zoom_verdict(region) -> tuple[bool, str, dict]:
    """(passed, message, facts) for a region, computed with the lab's reference at 192x192, 256 iterations."""
    from harness import programs  # the registry: the catalog imports no program module
    mb = programs.module("mandelbrot")

    x0, x1, y0, y1 = mb.parse_region(region)
    facts = {"region": (x0, x1, y0, y1)}
    if max(x1 - x0, y1 - y0) > ZOOM_MAX_SPAN * (1 + 1e-9):
        return False, (f"the region is {x1 - x0:.3g} wide and {y1 - y0:.3g} high: zoom in until both are at most "
                       f"{ZOOM_MAX_SPAN}"), facts
    w, h = x1 - x0, y1 - y0
    if max(w / h, h / w) > ZOOM_MAX_ASPECT:
        return False, (f"the region is {w:.3g} wide and {h:.3g} high: a sliver, not a picture; make its width and "
                       f"height within {ZOOM_MAX_ASPECT:g}x of each other"), facts
    ulp = max(np.spacing(abs(v)) for v in (x0, x1, y0, y1))
    if min(w, h) / ZOOM_SIZE < ZOOM_MIN_STEPS * ulp:
        return False, (f"the region is {w:.3g} wide and {h:.3g} high: too small for float64, neighbouring pixels get "
                       f"the same coordinates; zoom out"), facts
    counts = mb.reference(ZOOM_SIZE, ZOOM_SIZE, ZOOM_ITERS, (x0, x1, y0, y1), np.float64)
    at_once = float(np.mean(counts <= 2))
    inside = float(np.mean(counts >= ZOOM_ITERS))
    share = 1.0 - at_once - inside
    levels = int(np.unique(counts).size)
    facts.update(share=share, at_once=at_once, inside=inside, levels=levels)
    if share < ZOOM_MIN_SHARE:
        where = ("most of it escapes at once: it lies outside the set; move towards the boundary" if at_once > inside
                 else "most of it never escapes: it lies inside the set; move towards the boundary")
        return False, (f"only {share:.0%} of the pixels are interesting (need {ZOOM_MIN_SHARE:.0%}): {where}"), facts
    if levels < ZOOM_MIN_LEVELS:
        return False, (f"only {levels} distinct escape counts (need {ZOOM_MIN_LEVELS}): a flat picture; pick a "
                       f"region closer to the boundary"), facts
    return True, f"{share:.0%} of the pixels are interesting, {levels} distinct escape counts", facts
