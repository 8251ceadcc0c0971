// convolution: 1-D and 2-D convolution with zero padding (PMPP chapter 7), six variants behind one
// dispatcher per dimension. See convolution.h for the exact formula (a cross-correlation, as PMPP's)
// and the contract of each entry point.
#include <cstdint>
#include <cstring>

#include "check.cuh"
#include "convolution.h"

namespace {

const char *const kVariants[] = {"01_naive_1d", "02_constant_1d", "03_tiled_1d",
                                 "04_naive_2d", "05_constant_2d", "06_tiled_2d"};
const int kDims[] = {1, 1, 1, 2, 2, 2};
const int kNumVariants = (int)(sizeof(kVariants) / sizeof(kVariants[0]));

int variant_id(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < kNumVariants; ++i)
        if (strcmp(name, kVariants[i]) == 0) return i;
    return -1;
}

}  // namespace

// EXERCISE conv1d_tiled: copy
// EXERCISE conv2d_tiled: copy
// The largest radius each dimension accepts: 17 taps in 1-D, 9x9 in 2-D.
constexpr int kMaxR1 = 8;
constexpr int kMaxR2 = 4;
// EXERCISE conv1d_tiled: end copy
// EXERCISE conv2d_tiled: end copy

// EXERCISE conv1d_naive: copy
// 01, 02: one thread per output.
constexpr int kThreads1d = 256;
// EXERCISE conv1d_naive: end copy
// EXERCISE conv1d_tiled: copy
// 03: 256 threads, 8 consecutive outputs each, so a block covers 2048 outputs. Each thread then has
// 8 loads of the tile in flight at once: 64 KiB a full SM, more than DRAM's latency needs covered.
constexpr int kTiledThreads1d = 256;
constexpr int kOuts1d = 8;
constexpr int kTile1d = kTiledThreads1d * kOuts1d;
// EXERCISE conv1d_tiled: end copy
// 04, 05: 32x8 blocks, so that a warp is 32 neighbours along a row (coalesced).
constexpr int kBlockX2d = 32;
constexpr int kBlockY2d = 8;
// EXERCISE conv2d_tiled: copy
// 06: 32x8 threads, 8 outputs each down a column: a 32-wide, 64-tall output tile.
constexpr int kTiledX2d = 32;
constexpr int kTiledY2d = 8;
constexpr int kRows2d = 8;
constexpr int kTileW2d = kTiledX2d;
constexpr int kTileH2d = kTiledY2d * kRows2d;
// EXERCISE conv2d_tiled: end copy

// 04 and 05 cover the rows with 8-row blocks and gridDim.y is at most 65535; the width stays far from
// INT_MAX so that a column index plus the halo never overflows an int.
constexpr int kMaxHeight = CUDALAB_MAX_GRID_YZ * kBlockY2d;
constexpr int kMaxWidth = 1 << 30;
// The 1-D grids have one block per 256 outputs, and gridDim.x is at most 2^31 - 1.
constexpr long long kMaxN = (long long)0x7fffffff * kThreads1d;

// EXERCISE conv1d_tiled: copy
// EXERCISE conv2d_tiled: copy
// The filters in constant memory, one slot per radius: slot r holds the 2r+1 (or (2r+1)^2) taps last
// loaded for that radius. Every thread of a warp reads the same tap at the same time, which the
// constant cache answers with one broadcast; a global-memory filter costs a load instruction per tap.
// One slot per radius lets cases with different radii run interleaved (the bench) without reloading.
// EXERCISE conv2d_tiled: end copy
__constant__ float c_filter_1d[kMaxR1 + 1][2 * kMaxR1 + 1];
// EXERCISE conv1d_tiled: end copy
// EXERCISE conv2d_tiled: copy
__constant__ float c_filter_2d[kMaxR2 + 1][(2 * kMaxR2 + 1) * (2 * kMaxR2 + 1)];
// EXERCISE conv2d_tiled: end copy

// Kernels sit outside the anonymous namespace so that profilers show their plain names.

// ---- 1-D -------------------------------------------------------------------------------------------

// EXERCISE conv1d_naive: copy
// 01: one thread per output, everything from global memory. Each output reads 2r+1 inputs and 2r+1
// taps; neighbouring threads read almost the same inputs, which the L1 cache, not DRAM, serves.
// Inputs outside 0..n-1 count as zero (the "ghost cells" of PMPP): they are simply skipped.
__global__ void conv1d_01_naive(const float *x, const float *f, int r, float *out, long long n) {
// EXERCISE conv1d_naive: begin i = this thread's output (from its block and thread; a long long, since n may pass
// EXERCISE conv1d_naive: todo 2^31); return when i >= n (the grid is rounded up to whole blocks).
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
// EXERCISE conv1d_naive: end
// EXERCISE conv1d_naive: begin out[i] = the float sum over j = 0 .. 2r of f[j] * x[i - r + j] (tap 0 with the
// EXERCISE conv1d_naive: todo leftmost neighbour: the filter is not flipped), where a neighbour outside 0 .. n-1
// EXERCISE conv1d_naive: todo counts as 0 (zero padding: skip it; both ends of the array have them).
    float sum = 0.0f;
    for (int j = 0; j <= 2 * r; ++j) {
        const long long k = i - r + j;
        if (k >= 0 && k < n) sum += f[j] * x[k];
    }
    out[i] = sum;
// EXERCISE conv1d_naive: end
}
// EXERCISE conv1d_naive: end copy

// 02: the same loop, the taps from constant memory: all 32 threads of a warp read tap j at once, a
// broadcast from the constant cache, and the load/store unit is left to the inputs alone.
__global__ void conv1d_02_constant(const float *x, int r, float *out, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float sum = 0.0f;
    for (int j = 0; j <= 2 * r; ++j) {
        const long long k = i - r + j;
        if (k >= 0 && k < n) sum += c_filter_1d[r][j] * x[k];
    }
    out[i] = sum;
}

// EXERCISE conv1d_tiled: copy
// 03: the block first copies its 2048 inputs and the R on each side (the halo) into shared memory,
// each element read from global memory once, zeros past the ends: a fixed number of loads a thread,
// unrolled, so that all of them are in flight together. After the barrier each thread takes 8
// consecutive outputs: their 8 + 2R inputs come from shared memory in 16-byte loads into registers,
// and every input in registers feeds up to 8 outputs. Per output that is ~(8 + 2R) / 32 shared loads
// instead of 2R + 1 reads: with the loads out of the way, DRAM is the limit.
// R is a compile-time constant, as PMPP's FILTER_RADIUS: the loops unroll, the window and the sums
// stay in registers, and each tap is an operand read straight from the constant bank by the FMA.
template <int R>
__global__ void __launch_bounds__(kTiledThreads1d) conv1d_03_tiled(const float *__restrict__ x,
                                                                   float *__restrict__ out, long long n) {
    constexpr int kWindow4 = (kOuts1d + 2 * R + 3) / 4;  // float4s of one thread's inputs
    // Loads a thread: enough that the last thread's window (from 2048 - 8) ends inside the tile.
    constexpr int kLoads = (kTile1d - kOuts1d + 4 * kWindow4 + kTiledThreads1d - 1) / kTiledThreads1d;
    __shared__ __align__(16) float tile[kLoads * kTiledThreads1d];  // tile[t] = x[start - R + t]
    const long long start = (long long)blockIdx.x * kTile1d;
// EXERCISE conv1d_tiled: begin load the tile: for q = 0 .. kLoads-1, t = threadIdx.x + q * kTiledThreads1d (each
// EXERCISE conv1d_tiled: todo thread loads every kTiledThreads1d-th cell): tile[t] = x[start - R + t], this block's
// EXERCISE conv1d_tiled: todo kTile1d inputs and R more on each side (the halo), and 0.0f where start - R + t is
// EXERCISE conv1d_tiled: todo outside 0 .. n-1 (zero padding, at both ends of the array; never read x there). Cells
// EXERCISE conv1d_tiled: todo from kTile1d + 2 * R on enter no sum (0.0f will do). Then wait until every thread's
// EXERCISE conv1d_tiled: todo loads are in shared memory.
    // Every load happens, from an index clamped into the array, and the value is zeroed afterwards
    // where the index was outside it (or past the halo): no branch between the loads, so the compiler
    // can issue all kLoads of them before the first one returns.
#pragma unroll
    for (int q = 0; q < kLoads; ++q) {
        const int t = threadIdx.x + q * kTiledThreads1d;
        const long long k = start - R + t;
        const float v = x[k < 0 ? 0 : (k >= n ? n - 1 : k)];
        tile[t] = (t < kTile1d + 2 * R && k >= 0 && k < n) ? v : 0.0f;
    }
    __syncthreads();
// EXERCISE conv1d_tiled: end

    // This thread's outputs are start + 8*tid + m (m = 0..7); their inputs are tile[8*tid .. 8*tid+7+2R].
    float acc[kOuts1d];
// EXERCISE conv1d_tiled: begin acc[m] for m = 0 .. kOuts1d-1 = the float sum over j = 0 .. 2R of c_filter_1d[R][j] *
// EXERCISE conv1d_tiled: todo tile[kOuts1d * threadIdx.x + m + j] (tap 0 with the leftmost input: the filter is not
// EXERCISE conv1d_tiled: todo flipped), read from shared memory, or from a copy of the thread's window of
// EXERCISE conv1d_tiled: todo kOuts1d + 2R inputs in registers.
    float win[4 * kWindow4];
    const float4 *src = reinterpret_cast<const float4 *>(tile + kOuts1d * threadIdx.x);
#pragma unroll
    for (int q = 0; q < kWindow4; ++q) {
        const float4 v = src[q];
        win[4 * q] = v.x;
        win[4 * q + 1] = v.y;
        win[4 * q + 2] = v.z;
        win[4 * q + 3] = v.w;
    }
#pragma unroll
    for (int m = 0; m < kOuts1d; ++m) {
        acc[m] = 0.0f;
#pragma unroll
        for (int j = 0; j <= 2 * R; ++j) acc[m] += c_filter_1d[R][j] * win[m + j];
    }
// EXERCISE conv1d_tiled: end
    const long long i = start + (long long)kOuts1d * threadIdx.x;
    if (i + kOuts1d <= n) {
        // 16-byte stores: out + i is 16-byte aligned because out is and i is a multiple of 8.
        float4 *dst = reinterpret_cast<float4 *>(out + i);
#pragma unroll
        for (int q = 0; q < kOuts1d / 4; ++q)
            dst[q] = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
    } else {
#pragma unroll
        for (int m = 0; m < kOuts1d; ++m)
            if (i + m < n) out[i + m] = acc[m];
    }
}
// EXERCISE conv1d_tiled: end copy

// ---- 2-D -------------------------------------------------------------------------------------------

// 04: one thread per output pixel, (2r+1)^2 taps from global memory. threadIdx.x runs along a row so
// that a warp reads 32 neighbouring pixels of each input row.
__global__ void conv2d_04_naive(const float *x, const float *f, int r, float *out, int h, int w) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= h || col >= w) return;
    const int side = 2 * r + 1;
    float sum = 0.0f;
    for (int fy = 0; fy < side; ++fy) {
        const int y = row - r + fy;
        if (y < 0 || y >= h) continue;  // a whole filter row over the zero padding
        for (int fx = 0; fx < side; ++fx) {
            const int xx = col - r + fx;
            if (xx >= 0 && xx < w) sum += f[fy * side + fx] * x[(long long)y * w + xx];
        }
    }
    out[(long long)row * w + col] = sum;
}

// 05: the same, the taps from constant memory (one broadcast per tap per warp).
__global__ void conv2d_05_constant(const float *x, int r, float *out, int h, int w) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= h || col >= w) return;
    const int side = 2 * r + 1;
    float sum = 0.0f;
    for (int fy = 0; fy < side; ++fy) {
        const int y = row - r + fy;
        if (y < 0 || y >= h) continue;
        for (int fx = 0; fx < side; ++fx) {
            const int xx = col - r + fx;
            if (xx >= 0 && xx < w) sum += c_filter_2d[r][fy * side + fx] * x[(long long)y * w + xx];
        }
    }
    out[(long long)row * w + col] = sum;
}

// EXERCISE conv2d_tiled: copy
// 06: the block copies its 32-wide, 64-tall output tile plus R pixels of halo on every side into
// shared memory (zeros outside the image; ~10 loads a thread, unrolled so that all are in flight
// together), then each thread computes the 8 outputs of one column,
// rows 8*ty .. 8*ty+7 of the tile. Walking down the 8 + 2R input rows under them, every input read
// from shared memory feeds each of those outputs whose filter covers it (up to 2R + 1 of them), so a
// thread reads (8 + 2R)(2R + 1) values for 8 outputs instead of 8 (2R + 1)^2. Consecutive threads read
// consecutive columns: no bank conflicts. R is compile-time, as in 03, so the sums stay in registers.
template <int R>
__global__ void __launch_bounds__(kTiledX2d * kTiledY2d) conv2d_06_tiled(const float *__restrict__ x,
                                                                         float *__restrict__ out, int h, int w) {
    constexpr int kInW = kTileW2d + 2 * R;
    constexpr int kInH = kTileH2d + 2 * R;
    constexpr int kSide = 2 * R + 1;
    constexpr int kThreads = kTiledX2d * kTiledY2d;
    constexpr int kLoads = (kInH * kInW + kThreads - 1) / kThreads;  // loads a thread, all in flight at once
    // Row-major, kInW floats a row: tile[ty * kInW + tx] = x[row0 - R + ty][col0 - R + tx]. Rounded up to
    // whole rounds of loads so the last round needs no bounds test (its extra cells are never read).
    __shared__ float tile[kLoads * kThreads];
    const int col0 = blockIdx.x * kTileW2d, row0 = blockIdx.y * kTileH2d;
    const int tid = threadIdx.y * kTiledX2d + threadIdx.x;
// EXERCISE conv2d_tiled: begin load the tile: cell k = tid + q * kThreads for q = 0 .. kLoads-1 (each thread loads
// EXERCISE conv2d_tiled: todo every kThreads-th cell) is row ty = k / kInW, column tx = k % kInW of the tile: tile[k] =
// EXERCISE conv2d_tiled: todo pixel (row0 - R + ty, col0 - R + tx) of x (h x w, row-major; index as long long): this
// EXERCISE conv2d_tiled: todo block's kTileH2d x kTileW2d outputs and R pixels of halo on every side, 0.0f where that
// EXERCISE conv2d_tiled: todo pixel is outside the image (zero padding, on all four edges; never read x there). Cells
// EXERCISE conv2d_tiled: todo from kInH * kInW on enter no sum. Then wait until the whole tile is in shared memory.
    // As in 03: every load happens, from a position clamped into the image, and is zeroed afterwards
    // where the position was outside: no branch between the loads.
#pragma unroll
    for (int q = 0; q < kLoads; ++q) {
        const int k = tid + q * kThreads;
        const int ty = k / kInW, tx = k % kInW;
        const int gy = row0 - R + ty, gx = col0 - R + tx;
        const int cy = gy < 0 ? 0 : (gy >= h ? h - 1 : gy), cx = gx < 0 ? 0 : (gx >= w ? w - 1 : gx);
        const float v = x[(long long)cy * w + cx];
        tile[k] = (gy == cy && gx == cx) ? v : 0.0f;
    }
    __syncthreads();
// EXERCISE conv2d_tiled: end

    const int tx = threadIdx.x, ty0 = threadIdx.y * kRows2d;
    float acc[kRows2d];
// EXERCISE conv2d_tiled: begin this thread's outputs are the kRows2d pixels (row0 + ty0 + oy, col0 + tx) for oy = 0
// EXERCISE conv2d_tiled: todo .. kRows2d-1, one column: acc[oy] = the float sum over fy, fx = 0 .. 2R of
// EXERCISE conv2d_tiled: todo c_filter_2d[R][fy * kSide + fx] * tile[(ty0 + oy + fy) * kInW + tx + fx] (tap (0, 0) with
// EXERCISE conv2d_tiled: todo the upper-left input: the filter is not flipped). Then store each into out (row-major, w
// EXERCISE conv2d_tiled: todo columns; index as long long) where its pixel lies inside the h x w image: the last tiles
// EXERCISE conv2d_tiled: todo of a row and of a column may be partial.
    // Each input value read from the tile is added into every one of this thread's outputs it is under.
#pragma unroll
    for (int oy = 0; oy < kRows2d; ++oy) acc[oy] = 0.0f;
#pragma unroll
    for (int iy = 0; iy < kRows2d + 2 * R; ++iy) {  // each input row under this thread's outputs
#pragma unroll
        for (int fx = 0; fx < kSide; ++fx) {
            const float v = tile[(ty0 + iy) * kInW + tx + fx];
#pragma unroll
            for (int oy = 0; oy < kRows2d; ++oy) {  // each output whose filter row fy covers input row iy
                const int fy = iy - oy;
                if (fy >= 0 && fy < kSide) acc[oy] += c_filter_2d[R][fy * kSide + fx] * v;
            }
        }
    }
    const int col = col0 + tx;
#pragma unroll
    for (int oy = 0; oy < kRows2d; ++oy) {
        const int row = row0 + ty0 + oy;
        if (row < h && col < w) out[(long long)row * w + col] = acc[oy];
    }
// EXERCISE conv2d_tiled: end
}
// EXERCISE conv2d_tiled: end copy

// ---- the launchers --------------------------------------------------------------------------------

namespace {

// The compile-time radius of 03 and 06 picked from the run-time one: one instantiation per radius.
template <int R>
int launch_03(const float *d_x, float *d_out, long long n, cudaStream_t s) {
    const long long blocks = cdiv(n, kTile1d);
    conv1d_03_tiled<R><<<(unsigned)blocks, kTiledThreads1d, 0, s>>>(d_x, d_out, n);
    CUDA_TRY_LAUNCH();
    return 0;
}

int dispatch_03(int r, const float *d_x, float *d_out, long long n, cudaStream_t s) {
    switch (r) {
        case 0: return launch_03<0>(d_x, d_out, n, s);
        case 1: return launch_03<1>(d_x, d_out, n, s);
        case 2: return launch_03<2>(d_x, d_out, n, s);
        case 3: return launch_03<3>(d_x, d_out, n, s);
        case 4: return launch_03<4>(d_x, d_out, n, s);
        case 5: return launch_03<5>(d_x, d_out, n, s);
        case 6: return launch_03<6>(d_x, d_out, n, s);
        case 7: return launch_03<7>(d_x, d_out, n, s);
        case 8: return launch_03<8>(d_x, d_out, n, s);
        default: return (int)cudaErrorInvalidValue;
    }
}
static_assert(kMaxR1 == 8, "dispatch_03 instantiates radii 0..8");

template <int R>
int launch_06(const float *d_x, float *d_out, int h, int w, cudaStream_t s) {
    const dim3 grid((unsigned)cdiv(w, kTileW2d), (unsigned)cdiv(h, kTileH2d));
    conv2d_06_tiled<R><<<grid, dim3(kTiledX2d, kTiledY2d), 0, s>>>(d_x, d_out, h, w);
    CUDA_TRY_LAUNCH();
    return 0;
}

int dispatch_06(int r, const float *d_x, float *d_out, int h, int w, cudaStream_t s) {
    switch (r) {
        case 0: return launch_06<0>(d_x, d_out, h, w, s);
        case 1: return launch_06<1>(d_x, d_out, h, w, s);
        case 2: return launch_06<2>(d_x, d_out, h, w, s);
        case 3: return launch_06<3>(d_x, d_out, h, w, s);
        case 4: return launch_06<4>(d_x, d_out, h, w, s);
        default: return (int)cudaErrorInvalidValue;
    }
}
static_assert(kMaxR2 == 4, "dispatch_06 instantiates radii 0..4");

int taps(int dims, int r) { return dims == 1 ? 2 * r + 1 : (2 * r + 1) * (2 * r + 1); }

}  // namespace

extern "C" int convolution_variant_count(void) { return kNumVariants; }

extern "C" const char *convolution_variant_name(int i) {
    return (i >= 0 && i < kNumVariants) ? kVariants[i] : nullptr;
}

extern "C" int convolution_variant_dims(int i) { return (i >= 0 && i < kNumVariants) ? kDims[i] : 0; }

extern "C" int convolution_max_radius(int dims) { return dims == 1 ? kMaxR1 : dims == 2 ? kMaxR2 : 0; }
extern "C" long long convolution_max_n(void) { return kMaxN; }
extern "C" int convolution_max_height(void) { return kMaxHeight; }
extern "C" int convolution_max_width(void) { return kMaxWidth; }

extern "C" int convolution_tiling(int dims, int what) {
    if (dims == 1) return what == 0 ? kTiledThreads1d : what == 1 ? 1 : what == 2 ? kOuts1d : -1;
    if (dims == 2) return what == 0 ? kTiledX2d : what == 1 ? kTiledY2d : what == 2 ? kRows2d : -1;
    return -1;
}

extern "C" cudalab_status convolution_set_filter(int dims, const float *filter, int r) {
    if (filter == nullptr || r < 0 || r > convolution_max_radius(dims)) return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)taps(dims, r) * sizeof(float);
    if (dims == 1) {
        CUDA_TRY(cudaMemcpyToSymbol(c_filter_1d, filter, bytes, (size_t)r * sizeof(c_filter_1d[0])));
    } else {
        CUDA_TRY(cudaMemcpyToSymbol(c_filter_2d, filter, bytes, (size_t)r * sizeof(c_filter_2d[0])));
    }
    return 0;
}

extern "C" cudalab_status convolution_1d_f32_dev(const char *variant, const float *d_x, long long n,
                                                 const float *d_filter, int r, float *d_out, void *stream) {
    const int v = variant_id(variant);
    if (v < 0 || kDims[v] != 1 || n < 0 || n > kMaxN || r < 0 || r > kMaxR1) return (int)cudaErrorInvalidValue;
    if (n == 0) return 0;
    if (d_x == nullptr || d_out == nullptr || (v == 0 && d_filter == nullptr)) return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    const unsigned blocks = (unsigned)cdiv(n, kThreads1d);
    switch (v) {
        case 0: conv1d_01_naive<<<blocks, kThreads1d, 0, s>>>(d_x, d_filter, r, d_out, n); break;
        case 1: conv1d_02_constant<<<blocks, kThreads1d, 0, s>>>(d_x, r, d_out, n); break;
        default:
            if ((uintptr_t)d_out % 16 != 0) return (int)cudaErrorInvalidValue;  // its float4 stores
            return dispatch_03(r, d_x, d_out, n, s);
    }
    CUDA_TRY_LAUNCH();
    return 0;
}

extern "C" cudalab_status convolution_2d_f32_dev(const char *variant, const float *d_x, int h, int w,
                                                 const float *d_filter, int r, float *d_out, void *stream) {
    const int v = variant_id(variant);
    if (v < 0 || kDims[v] != 2 || h < 0 || w < 0 || h > kMaxHeight || w > kMaxWidth || r < 0 || r > kMaxR2)
        return (int)cudaErrorInvalidValue;
    if (h == 0 || w == 0) return 0;
    if (d_x == nullptr || d_out == nullptr || (v == 3 && d_filter == nullptr)) return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    const dim3 block(kBlockX2d, kBlockY2d);
    const dim3 grid((unsigned)cdiv(w, kBlockX2d), (unsigned)cdiv(h, kBlockY2d));
    switch (v) {
        case 3: conv2d_04_naive<<<grid, block, 0, s>>>(d_x, d_filter, r, d_out, h, w); break;
        case 4: conv2d_05_constant<<<grid, block, 0, s>>>(d_x, r, d_out, h, w); break;
        default: return dispatch_06(r, d_x, d_out, h, w, s);
    }
    CUDA_TRY_LAUNCH();
    return 0;
}

namespace {

// The host-pointer forms' common part: upload input and filter, load the constant slot, run, copy out.
template <class Launch>
int run_host(int dims, const float *x, size_t elems, const float *filter, int r, float *out, Launch launch) {
    const size_t bytes = elems * sizeof(float);
    const size_t fbytes = (size_t)taps(dims, r) * sizeof(float);
    cudalab::DeviceAlloc dx, df, dout;
    if (int err = dx.upload(x, bytes)) return err;
    if (int err = df.upload(filter, fbytes)) return err;
    if (int err = dout.alloc(bytes)) return err;
    // NaN in every output first: one the kernel never writes comes back NaN and fails every check,
    // instead of showing what an earlier call left in recycled memory.
    CUDA_TRY(cudaMemset(dout.p, 0xFF, bytes));
    if (int err = convolution_set_filter(dims, filter, r)) return err;
    if (int err = launch(dx.as<const float>(), df.as<const float>(), dout.as<float>())) return err;
    CUDA_TRY(cudaDeviceSynchronize());
    CUDA_TRY(cudaMemcpy(out, dout.p, bytes, cudaMemcpyDeviceToHost));
    return cudalab::release_all(dx, df, dout);
}

}  // namespace

extern "C" cudalab_status convolution_1d_f32(const char *variant, const float *x, long long n, const float *filter,
                                             int r, float *out) {
    const int v = variant_id(variant);
    if (v < 0 || kDims[v] != 1 || n < 0 || n > kMaxN || r < 0 || r > kMaxR1) return (int)cudaErrorInvalidValue;
    if (n == 0) return 0;
    if (x == nullptr || filter == nullptr || out == nullptr) return (int)cudaErrorInvalidValue;
    return run_host(1, x, (size_t)n, filter, r, out, [&](const float *dx, const float *df, float *dout) {
        return convolution_1d_f32_dev(variant, dx, n, df, r, dout, nullptr);
    });
}

extern "C" cudalab_status convolution_2d_f32(const char *variant, const float *x, int h, int w, const float *filter,
                                             int r, float *out) {
    const int v = variant_id(variant);
    if (v < 0 || kDims[v] != 2 || h < 0 || w < 0 || h > kMaxHeight || w > kMaxWidth || r < 0 || r > kMaxR2)
        return (int)cudaErrorInvalidValue;
    if (h == 0 || w == 0) return 0;
    if (x == nullptr || filter == nullptr || out == nullptr) return (int)cudaErrorInvalidValue;
    return run_host(2, x, (size_t)h * (size_t)w, filter, r, out, [&](const float *dx, const float *df, float *dout) {
        return convolution_2d_f32_dev(variant, dx, h, w, df, r, dout, nullptr);
    });
}
