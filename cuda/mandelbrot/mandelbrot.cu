// mandelbrot: escape-time counts of z = z^2 + c over a rectangle of the complex plane.
// See mandelbrot.h for the pixel mapping and the meaning of a count.
#include <cmath>
#include <cstring>

#include "mandelbrot.h"
#include "check.cuh"

// EXERCISE mandelbrot: copy
// ---------------------------------------------------------------------------------------------
// IEEE-rounded arithmetic. nvcc contracts a*b + c into one fused multiply-add (a single rounding)
// unless told not to; numpy never does. Writing every operation with its _rn intrinsic pins the
// rounding of each step, so the numpy reference reproduces 01_naive bit for bit, in float32 as in
// float64, and a comparison can demand equality instead of "mostly equal".
// ---------------------------------------------------------------------------------------------
template <typename T>
struct Ieee;
template <>
struct Ieee<float> {
    static __device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
    static __device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
    static __device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
    static __device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
};
template <>
struct Ieee<double> {
    static __device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
    static __device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
    static __device__ __forceinline__ double sub(double a, double b) { return __dsub_rn(a, b); }
    static __device__ __forceinline__ double div(double a, double b) { return __ddiv_rn(a, b); }
};

// lo + span * i / n, evaluated as ((span * i) / n) + lo in T: the order the numpy reference uses.
template <typename T>
__device__ __forceinline__ T pixel_coord(T lo, T span, int i, int n) {
    using A = Ieee<T>;
    return A::add(A::div(A::mul(span, (T)i), (T)n), lo);
}

// ---------------------------------------------------------------------------------------------
// 01_naive: the course's kernel. One thread per pixel, 16x16 blocks; test |z|^2 <= 4 before
// every step, so the loop does exactly `count` steps.
// ---------------------------------------------------------------------------------------------
template <typename T>
__global__ void mandelbrot_01_naive(uint32_t *__restrict__ out, int width, int height, int max_iters, T x0,
                                    T span_x, T y0, T span_y) {
    using A = Ieee<T>;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col >= width || row >= height) return;  // the grid is rounded up with cdiv
    const T cr = pixel_coord(x0, span_x, col, width);
    const T ci = pixel_coord(y0, span_y, row, height);
    T x = 0, y = 0;
    int n = 0;
// EXERCISE mandelbrot: begin the escape-time loop: while n < max_iters, stop as soon as |z|^2 = x*x + y*y > 4;
// EXERCISE mandelbrot: todo otherwise step z = z^2 + c, i.e. y = 2xy + ci and x = x*x - y*y + cr (both from the old x
// EXERCISE mandelbrot: todo and y), and count the step in n. Write every operation as A::mul/A::add/A::sub (each
// EXERCISE mandelbrot: todo rounded on its own): plain * and + may be fused into one FMA, which rounds differently from
// EXERCISE mandelbrot: todo the reference and changes a few counts.
    while (n < max_iters) {
        const T xx = A::mul(x, x), yy = A::mul(y, y);
        if (A::add(xx, yy) > (T)4) break;
        const T xy = A::mul(x, y);
        y = A::add(A::add(xy, xy), ci);
        x = A::add(A::sub(xx, yy), cr);
        ++n;
    }
// EXERCISE mandelbrot: end
    out[(size_t)row * width + col] = (uint32_t)n;
}
// EXERCISE mandelbrot: end copy

// ---------------------------------------------------------------------------------------------
// 02_fast (float32). Where 01's loop spends its instructions, per iteration (SASS, sm_90):
// 3 FMUL + 5 FADD for the arithmetic, FSETP + BRA for the escape test, VIADD + ISETP + BRA for
// the counter: 13. Two changes remove most of that (NOTES-mandelbrot.md has counts and timings):
//  * fused multiply-adds: x' = fma(x, x, fma(-y, y, cr)), y' = fma(x + x, y, ci): 4 FP32
//    instructions per step instead of 8;
//  * the escape test and the loop counter once per FAST_UNROLL steps. Once |z| > 2 (and
//    |c| <= 2, or |c| > 2 where the first test already fails) |z| grows at every step, so a
//    block of steps that ends inside the disc never left it. A block that ends outside is
//    thrown away: z is restored from the copy taken at its start and stepped one at a time with
//    the test, which finds the exact escape step. Every step the count claims is computed.
//    Overflow to inf/NaN inside a thrown-away block is harmless: NaN fails `<= 4` like any escape.
// Blocks are 8x16 so that each warp covers an 8x4 patch: a compact patch spans fewer distinct
// escape counts than a 32x1 strip, and a warp runs as long as its slowest pixel.
// (Two pixels per thread, for two independent dependency chains, was tried and was slower: a
// lane finishing its second pixel runs different code from a lane finishing its first, and the
// warp serialises the two. See the notes.)
// The numpy model `reference_fast` in harness/programs/mandelbrot.py follows the same steps with
// an exactly emulated float32 fma, so this kernel too is compared for equality.
// ---------------------------------------------------------------------------------------------
#define FAST_UNROLL 16
#define FAST_BX 8
#define FAST_BY 16

__device__ __forceinline__ bool inside(float x, float y) { return fmaf(x, x, __fmul_rn(y, y)) <= 4.0f; }

__device__ __forceinline__ void step(float &x, float &y, float cr, float ci) {
    const float t = fmaf(-y, y, cr);
    y = fmaf(__fadd_rn(x, x), y, ci);
    x = fmaf(x, x, t);
}

__global__ void __launch_bounds__(FAST_BX *FAST_BY)
    mandelbrot_02_fast(uint32_t *__restrict__ out, int width, int height, int max_iters, float x0, float span_x,
                       float y0, float span_y) {
    const int col = blockIdx.x * FAST_BX + threadIdx.x;
    const int row = blockIdx.y * FAST_BY + threadIdx.y;
    if (col >= width || row >= height) return;  // the grid is rounded up with cdiv
    const float cr = pixel_coord(x0, span_x, col, width);
    const float ci = pixel_coord(y0, span_y, row, height);
    float x = 0.0f, y = 0.0f;
    int n = 0;
    // Block mode: z_n is known to be inside the disc (z_0 = 0 is).
    while (n <= max_iters - FAST_UNROLL) {
        const float sx = x, sy = y;
#pragma unroll
        for (int k = 0; k < FAST_UNROLL; ++k) step(x, y, cr, ci);
        if (!inside(x, y)) {
            x = sx;
            y = sy;
            break;
        }
        n += FAST_UNROLL;
    }
    // Single steps: the block in which z escaped, or the last max_iters % FAST_UNROLL steps.
    while (n < max_iters && inside(x, y)) {
        step(x, y, cr, ci);
        ++n;
    }
    out[(size_t)row * width + col] = (uint32_t)n;
}

// ---------------------------------------------------------------------------------------------
// Dispatcher
// ---------------------------------------------------------------------------------------------
static const char *const kVariants[] = {"01_naive", "02_fast"};
static const int kNumVariants = (int)(sizeof(kVariants) / sizeof(kVariants[0]));

extern "C" int mandelbrot_variant_count(void) { return kNumVariants; }
extern "C" const char *mandelbrot_variant_name(int i) {
    return (i >= 0 && i < kNumVariants) ? kVariants[i] : nullptr;
}
extern "C" int mandelbrot_fast_unroll(void) { return FAST_UNROLL; }

static int variant_id(const char *variant) {
    if (variant == nullptr) return -1;
    for (int i = 0; i < kNumVariants; ++i)
        if (strcmp(variant, kVariants[i]) == 0) return i;
    return -1;
}

// The largest image edge: pixel indexes must be exact in float32 (2^24), and the grid's y
// dimension is limited to CUDALAB_MAX_GRID_YZ blocks (of 16 rows; x 8 keeps a margin for smaller blocks).
static const int kMaxEdge = CUDALAB_MAX_GRID_YZ * 8;

extern "C" int mandelbrot_max_edge(void) { return kMaxEdge; }

static cudaError_t validate(const char *variant, int dtype_bits, int width, int height, int max_iters, double x0,
                            double x1, double y0, double y1) {
    const int id = variant_id(variant);
    if (id < 0) return cudaErrorInvalidValue;
    if (dtype_bits != 32 && dtype_bits != 64) return cudaErrorInvalidValue;
    if (id == 1 && dtype_bits != 32) return cudaErrorInvalidValue;  // 02_fast is float32 only
    if (width <= 0 || height <= 0 || max_iters <= 0 || width > kMaxEdge || height > kMaxEdge)
        return cudaErrorInvalidValue;
    if (!std::isfinite(x0) || !std::isfinite(x1) || !std::isfinite(y0) || !std::isfinite(y1))
        return cudaErrorInvalidValue;
    if (!(x1 > x0) || !(y1 > y0)) return cudaErrorInvalidValue;  // an empty region
    return cudaSuccess;
}

extern "C" cudalab_status mandelbrot_render_device(const char *variant, int dtype_bits, int width, int height, int max_iters,
                                        double x0, double x1, double y0, double y1, uint32_t *d_out,
                                        void *stream) {
    CUDA_TRY(validate(variant, dtype_bits, width, height, max_iters, x0, x1, y0, y1));
    if (d_out == nullptr) return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    if (variant_id(variant) == 0) {
        const dim3 block(16, 16);
        const dim3 grid((unsigned)cdiv(width, 16), (unsigned)cdiv(height, 16));
        if (dtype_bits == 32) {
            // The spans are rounded to float32 first and subtracted in float32, as numpy does.
            const float fx0 = (float)x0, fy0 = (float)y0;
            mandelbrot_01_naive<float><<<grid, block, 0, s>>>(d_out, width, height, max_iters, fx0,
                                                              (float)x1 - fx0, fy0, (float)y1 - fy0);
        } else {
            mandelbrot_01_naive<double><<<grid, block, 0, s>>>(d_out, width, height, max_iters, x0, x1 - x0, y0,
                                                               y1 - y0);
        }
    } else {
        const dim3 block(FAST_BX, FAST_BY);
        const dim3 grid((unsigned)cdiv(width, FAST_BX), (unsigned)cdiv(height, FAST_BY));
        const float fx0 = (float)x0, fy0 = (float)y0;
        mandelbrot_02_fast<<<grid, block, 0, s>>>(d_out, width, height, max_iters, fx0, (float)x1 - fx0, fy0,
                                                  (float)y1 - fy0);
    }
    CUDA_TRY_LAUNCH();
    return 0;
}

extern "C" cudalab_status mandelbrot_render(const char *variant, int dtype_bits, int width, int height, int max_iters,
                                 double x0, double x1, double y0, double y1, uint32_t *out) {
    CUDA_TRY(validate(variant, dtype_bits, width, height, max_iters, x0, x1, y0, y1));
    if (out == nullptr) return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)width * height * sizeof(uint32_t);
    cudalab::DeviceAlloc d_out;  // freed on every path; release() reports cudaFree's own status
    if (int err = d_out.alloc(bytes)) return err;
    if (int err = mandelbrot_render_device(variant, dtype_bits, width, height, max_iters, x0, x1, y0, y1,
                                           d_out.as<uint32_t>(), nullptr))
        return err;
    CUDA_TRY(cudaMemcpy(out, d_out.p, bytes, cudaMemcpyDeviceToHost));
    return d_out.release();
}
