// convolution: 1-D and 2-D convolution with zero padding (PMPP chapter 7), eight variants behind one
// dispatcher per dimension. See convolution.h for the exact formula (a cross-correlation, as PMPP's)
// and the contract of each entry point.
#include <cstdint>
#include <type_traits>
#include <cstring>

#include "check.cuh"
#include "convolution.h"

namespace {

// The ladder's order: the book's three rungs in 1-D, then in 2-D, then the two that move every byte of
// global memory in 16-byte pieces (added later, hence after the 2-D ones).
const char *const kVariants[] = {"01_naive_1d", "02_constant_1d", "03_tiled_1d", "04_naive_2d",
                                 "05_constant_2d", "06_tiled_2d", "07_vec_1d", "08_vec_2d"};
const int kDims[] = {1, 1, 1, 2, 2, 2, 1, 2};
static_assert(sizeof(kDims) / sizeof(kDims[0]) == sizeof(kVariants) / sizeof(kVariants[0]),
              "one dimension per variant");
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
// 07: 03's 2048-output tile and 256 threads, in float4s: a thread loads two float4s of the tile and
// computes two float4s of outputs, 1024 outputs apart, so that the 32 threads of a warp always touch 32
// consecutive float4s (512 contiguous bytes) with one instruction.
constexpr int kVecThreads1d = 256;
constexpr int kVecGroups1d = 2;  // float4s of outputs a thread
constexpr int kVecTile1d = kVecThreads1d * 4 * kVecGroups1d;
// 08: 8 warps, each thread 4 adjacent columns (one float4) x 8 rows: a 128-wide, 64-tall output tile.
// A shared row is 34 float4s: the float4 left of the tile (its left halo), the tile's 32, the float4
// right of it (its right halo). The halo is rounded up to whole float4s so that every shared row, like
// every image row, starts on a 16-byte boundary; one float4 a side covers any radius up to 4.
constexpr int kVecThreads2d = 256;
constexpr int kVecWarps2d = kVecThreads2d / 32;
constexpr int kVecRows2d = 8;
constexpr int kVecTileW2d = 32 * 4;
constexpr int kVecTileH2d = kVecWarps2d * kVecRows2d;
constexpr int kVecRow4 = 1 + kVecTileW2d / 4 + 1;
static_assert(kMaxR2 <= 4, "08's halo is one float4 on each side");

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

// 07 and 08 read and write global memory in float4s. Each one needs its address on the 16-byte grid:
// x + g with g a multiple of 4 is, when x is. The kernels' scalar forms (kVec false) take any address.
__device__ __forceinline__ float4 zero4() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

// The float4 x[g .. g+3] (g a multiple of 4, x 16-byte aligned), its elements outside 0 .. n-1 as 0.
// g being a multiple of 4, g < 0 puts the whole float4 before the array; only the array's last float4,
// when n is not a multiple of 4, is read element by element.
__device__ __forceinline__ float4 load4_or_zero(const float *__restrict__ x, long long g, long long n) {
    if (g >= 0 && g + 4 <= n) return __ldg(reinterpret_cast<const float4 *>(x + g));
    float4 v = zero4();
    if (g >= 0 && g < n) {  // g < n < g + 4
        v.x = x[g];
        if (g + 1 < n) v.y = x[g + 1];
        if (g + 2 < n) v.z = x[g + 2];
    }
    return v;
}

// 07: 03's tile (2048 outputs and their halo in shared memory, one barrier), with every access to
// global memory 16 bytes wide and aligned. 03 loads its tile 4 bytes a thread, starting R floats
// before a 128-byte line, so each warp load straddles two lines, and stores two float4s a thread at a
// 32-byte stride, each warp store spread over 1 KiB. Here a thread loads the float4s t and t + 256 of
// the tile and stores the outputs of the same two: every warp instruction moves 512 contiguous,
// aligned bytes, 4 whole 128-byte lines: a quarter of 03's load instructions, and no load or store
// wavefront spent on a line it half uses. For that the halo is rounded up to K = ceil(R/4) whole
// float4s a side, loaded by 2K threads, so the tile in shared memory stays on the 16-byte grid; a
// thread's 4 outputs then read 2K + 1 consecutive float4s of it, consecutive threads consecutive
// float4s: no bank conflicts (03's window loads, 32 bytes apart, have two-way conflicts). What this
// measured against 03, and the ncu counters that say why: bench/results/h200/NOTES-convolution.md.
// kVec false is the form for pointers off the 16-byte grid (a view into a larger array): the same
// tile and sums, filled and stored 4 bytes at a time.
template <int R, bool kVec>
__global__ void __launch_bounds__(kVecThreads1d) conv1d_07_vec(const float *__restrict__ x,
                                                               float *__restrict__ out, long long n) {
    constexpr int K = (R + 3) / 4;                  // float4s of halo on each side
    constexpr int kTile4 = kVecTile1d / 4;          // float4s of outputs a block
    __shared__ float4 tile[K + kTile4 + K];         // tile[i] = x[start - 4K + 4i .. start - 4K + 4i + 3]
    const int t = threadIdx.x;
    const long long start = (long long)blockIdx.x * kVecTile1d;
    if (kVec) {
        // Thread t's float4s are tile[K + t + 256q]; threads t < 2K also load one of the halo's 2K,
        // the left ones tile[0 .. K-1], the right ones tile[K + 512 .. 2K + 511]. All loads go into
        // registers first, so that they are all in flight before the first shared store waits on one.
        const int halo = t < K ? t : kTile4 + t;
        float4 v[kVecGroups1d], hv = zero4();
        if (start - 4 * K >= 0 && start + kVecTile1d + 4 * K <= n) {  // the whole tile inside: no tests
#pragma unroll
            for (int q = 0; q < kVecGroups1d; ++q)
                v[q] = __ldg(reinterpret_cast<const float4 *>(x + start + 4 * (t + q * kVecThreads1d)));
            if (t < 2 * K) hv = __ldg(reinterpret_cast<const float4 *>(x + start - 4 * K + 4 * halo));
        } else {  // the first and last blocks: zeros past either end of the array
#pragma unroll
            for (int q = 0; q < kVecGroups1d; ++q) v[q] = load4_or_zero(x, start + 4 * (t + q * kVecThreads1d), n);
            if (t < 2 * K) hv = load4_or_zero(x, start - 4 * K + 4 * halo, n);
        }
#pragma unroll
        for (int q = 0; q < kVecGroups1d; ++q) tile[K + t + q * kVecThreads1d] = v[q];
        if (t < 2 * K) tile[halo] = hv;
    } else {
        // Float c of the tile is x[start - 4K + c]: each thread takes every 256th float, 0 outside.
        float *cells = reinterpret_cast<float *>(tile);
        constexpr int kCells = 4 * (K + kTile4 + K);
#pragma unroll
        for (int i = 0; i < (kCells + kVecThreads1d - 1) / kVecThreads1d; ++i) {
            const int c = t + i * kVecThreads1d;
            const long long k = start - 4 * K + c;
            if (c < kCells) cells[c] = (k >= 0 && k < n) ? x[k] : 0.0f;
        }
    }
    __syncthreads();

#pragma unroll
    for (int q = 0; q < kVecGroups1d; ++q) {
        // This float4 of outputs is tile[K + m]; its inputs, R either side, lie in tile[m .. m + 2K]:
        // in[i] = x[first - 4K + i] for the first output `first`, so output first + c is the sum of
        // tap j times in[4K - R + c + j].
        const int m = t + q * kVecThreads1d;
        float in[4 * (2 * K + 1)];
#pragma unroll
        for (int k = 0; k <= 2 * K; ++k) {
            const float4 v = tile[m + k];
            in[4 * k] = v.x;
            in[4 * k + 1] = v.y;
            in[4 * k + 2] = v.z;
            in[4 * k + 3] = v.w;
        }
        float acc[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            acc[c] = 0.0f;
#pragma unroll
            for (int j = 0; j <= 2 * R; ++j) acc[c] += c_filter_1d[R][j] * in[4 * K - R + c + j];
        }
        const long long first = start + 4LL * m;
        if (kVec && first + 4 <= n) {
            *reinterpret_cast<float4 *>(out + first) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        } else {  // past the end of the array, or the scalar form
#pragma unroll
            for (int c = 0; c < 4; ++c)
                if (first + c < n) out[first + c] = acc[c];
        }
    }
}

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

// 08: 06's scheme (a tile and its halo in shared memory, one barrier, every input read from shared
// memory feeding each of the thread's outputs whose filter covers it) on a tile 4 times as wide, moved
// in float4s. 06's tile is 32 + 2R floats wide and starts R floats left of a 128-byte line: each warp
// load of it straddles lines and rows, and finding a cell's row and column costs a division (a
// multiply and shifts) per load. Here each warp loads whole tile rows, one float4 a lane, 512
// contiguous aligned bytes an instruction, and the halo is one float4 on either side (loaded by two
// threads a row), so the tile stays on the 16-byte grid; stores are float4s too. With the wider tile
// the halo, read again by the neighbouring tiles, is a smaller share: (64 + 2R) x (128 + 8) floats
// read for 64 x 128 outputs, against 06's (64 + 2R) x (32 + 2R) for 64 x 32. Each thread computes a
// float4 of outputs in each of 8 rows: per input row it reads 3 float4s (consecutive lanes consecutive
// float4s: no bank conflicts) and uses each float in up to (2R + 1) x 4 sums. What this measured
// against 06, and the ncu counters that say why: bench/results/h200/NOTES-convolution.md.
// The float4s need every image row on the 16-byte grid: w a multiple of 4 and x and out 16-byte
// aligned. Otherwise kVec is false: the same tile, filled one float at a time (zeros outside the image)
// and stored one float at a time where the column is inside the image.
template <int R, bool kVec>
__global__ void __launch_bounds__(kVecThreads2d) conv2d_08_vec(const float *__restrict__ x,
                                                               float *__restrict__ out, int h, int w) {
    constexpr int kSide = 2 * R + 1;
    constexpr int kInH = kVecTileH2d + 2 * R;  // the tile's rows and R more above and below
    // tile[r * kVecRow4 + i] = the float4 of input row row0 - R + r, columns col0 - 4 + 4i .. +3
    __shared__ float4 tile[kInH * kVecRow4];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int col0 = blockIdx.x * kVecTileW2d, row0 = blockIdx.y * kVecTileH2d;
    if (kVec) {
        // Warp `warp` loads the tile's rows warp, warp + 8, ..., lane `lane` their float4 1 + lane; the
        // 2 kInH halo float4s go to threads 0 .. 2 kInH - 1, left (even) and right (odd) of each row.
        // All into registers first, all in flight together; float4s outside the image are zeros (with
        // w a multiple of 4, a float4 is wholly inside the image or wholly outside it).
        constexpr int kRounds = (kInH + kVecWarps2d - 1) / kVecWarps2d;
        constexpr int kHaloRounds = (2 * kInH + kVecThreads2d - 1) / kVecThreads2d;
        float4 v[kRounds], hv[kHaloRounds];
#pragma unroll
        for (int i = 0; i < kRounds; ++i) {
            const int r = warp + i * kVecWarps2d, gy = row0 - R + r, gx = col0 + 4 * lane;
            v[i] = zero4();
            if (r < kInH && gy >= 0 && gy < h && gx < w)
                v[i] = __ldg(reinterpret_cast<const float4 *>(x + (long long)gy * w + gx));
        }
#pragma unroll
        for (int i = 0; i < kHaloRounds; ++i) {
            const int k = tid + i * kVecThreads2d, gy = row0 - R + k / 2;
            const int gx = k % 2 ? col0 + kVecTileW2d : col0 - 4;
            hv[i] = zero4();
            if (R > 0 && k < 2 * kInH && gy >= 0 && gy < h && gx >= 0 && gx < w)  // R = 0 reads no halo
                hv[i] = __ldg(reinterpret_cast<const float4 *>(x + (long long)gy * w + gx));
        }
#pragma unroll
        for (int i = 0; i < kRounds; ++i) {
            const int r = warp + i * kVecWarps2d;
            if (r < kInH) tile[r * kVecRow4 + 1 + lane] = v[i];
        }
#pragma unroll
        for (int i = 0; i < kHaloRounds; ++i) {
            const int k = tid + i * kVecThreads2d;
            if (k < 2 * kInH) tile[k / 2 * kVecRow4 + (k % 2 ? kVecRow4 - 1 : 0)] = hv[i];
        }
    } else {
        // Float c of a shared row is column col0 - 4 + c: each thread takes every 256th float of the
        // tile, 0 outside the image.
        float *cells = reinterpret_cast<float *>(tile);
        constexpr int kRowF = 4 * kVecRow4, kCells = kInH * kRowF;
#pragma unroll
        for (int i = 0; i < (kCells + kVecThreads2d - 1) / kVecThreads2d; ++i) {
            const int c = tid + i * kVecThreads2d;
            const int gy = row0 - R + c / kRowF, gx = col0 - 4 + c % kRowF;
            if (c < kCells) cells[c] = (gy >= 0 && gy < h && gx >= 0 && gx < w) ? x[(long long)gy * w + gx] : 0.0f;
        }
    }
    __syncthreads();

    // This thread's outputs: rows row0 + 8 warp + oy (oy = 0..7), columns col0 + 4 lane + c (c = 0..3).
    // Input row iy under them (shared row 8 warp + iy) is read as the float4s lane .. lane + 2 of its
    // shared row: in[i] = column col0 - 4 + 4 lane + i, so output column c under tap column fx reads
    // in[4 - R + c + fx]. As in 06, input row iy feeds output row oy through filter row iy - oy.
    float acc[kVecRows2d][4];
#pragma unroll
    for (int oy = 0; oy < kVecRows2d; ++oy)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[oy][c] = 0.0f;
#pragma unroll
    for (int iy = 0; iy < kVecRows2d + 2 * R; ++iy) {
        const float4 *row = tile + (warp * kVecRows2d + iy) * kVecRow4 + lane;
        const float4 q0 = row[0], q1 = row[1], q2 = row[2];
        const float in[12] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w, q2.x, q2.y, q2.z, q2.w};
#pragma unroll
        for (int oy = 0; oy < kVecRows2d; ++oy) {
            const int fy = iy - oy;
            if (fy < 0 || fy >= kSide) continue;
#pragma unroll
            for (int fx = 0; fx < kSide; ++fx) {
                const float tap = c_filter_2d[R][fy * kSide + fx];
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[oy][c] += tap * in[4 - R + c + fx];
            }
        }
    }
    const int col = col0 + 4 * lane;
#pragma unroll
    for (int oy = 0; oy < kVecRows2d; ++oy) {
        const int row = row0 + warp * kVecRows2d + oy;
        if (row >= h) continue;
        const long long p = (long long)row * w + col;
        if (kVec) {  // w a multiple of 4: the float4 is wholly inside the row or wholly outside
            if (col < w)
                *reinterpret_cast<float4 *>(out + p) = make_float4(acc[oy][0], acc[oy][1], acc[oy][2], acc[oy][3]);
        } else {
#pragma unroll
            for (int c = 0; c < 4; ++c)
                if (col + c < w) out[p + c] = acc[oy][c];
        }
    }
}

// ---- the launchers --------------------------------------------------------------------------------

namespace {

// The run-time radius r as the compile-time R a launcher is instantiated with: one instantiation per
// radius from 0 to kMax, and cudaErrorInvalidValue past it. `launch` is called as launch(Radius<R>{}).
template <int R>
using Radius = std::integral_constant<int, R>;

template <int kMax, int R = 0, class Launch>
int with_radius(int r, Launch &&launch) {
    if (r == R) return launch(Radius<R>{});
    if constexpr (R < kMax) return with_radius<kMax, R + 1>(r, launch);
    else return (int)cudaErrorInvalidValue;
}

template <int R>
int launch_03(const float *d_x, float *d_out, long long n, cudaStream_t s) {
    const long long blocks = cdiv(n, kTile1d);
    conv1d_03_tiled<R><<<(unsigned)blocks, kTiledThreads1d, 0, s>>>(d_x, d_out, n);
    CUDA_TRY_LAUNCH();
    return 0;
}


template <int R>
int launch_06(const float *d_x, float *d_out, int h, int w, cudaStream_t s) {
    const dim3 grid((unsigned)cdiv(w, kTileW2d), (unsigned)cdiv(h, kTileH2d));
    conv2d_06_tiled<R><<<grid, dim3(kTiledX2d, kTiledY2d), 0, s>>>(d_x, d_out, h, w);
    CUDA_TRY_LAUNCH();
    return 0;
}


// 07 and 08 run their float4 form only where every float4 they touch is 16-byte aligned; a pointer
// off that grid (a view that starts inside an allocation) or, in 2-D, rows whose length is not a
// multiple of 4 floats take the scalar form of the same kernel.
bool on_16_byte_grid(const float *a, const float *b) { return (((uintptr_t)a | (uintptr_t)b) & 15) == 0; }

template <int R>
int launch_07(const float *d_x, float *d_out, long long n, cudaStream_t s) {
    const unsigned blocks = (unsigned)cdiv(n, kVecTile1d);
    if (on_16_byte_grid(d_x, d_out))
        conv1d_07_vec<R, true><<<blocks, kVecThreads1d, 0, s>>>(d_x, d_out, n);
    else
        conv1d_07_vec<R, false><<<blocks, kVecThreads1d, 0, s>>>(d_x, d_out, n);
    CUDA_TRY_LAUNCH();
    return 0;
}


template <int R>
int launch_08(const float *d_x, float *d_out, int h, int w, cudaStream_t s) {
    const dim3 grid((unsigned)cdiv(w, kVecTileW2d), (unsigned)cdiv(h, kVecTileH2d));
    if (w % 4 == 0 && on_16_byte_grid(d_x, d_out))
        conv2d_08_vec<R, true><<<grid, kVecThreads2d, 0, s>>>(d_x, d_out, h, w);
    else
        conv2d_08_vec<R, false><<<grid, kVecThreads2d, 0, s>>>(d_x, d_out, h, w);
    CUDA_TRY_LAUNCH();
    return 0;
}


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

// 03_tiled_1d's and 06_tiled_2d's block shapes, which their Python twins and the picture copy. 07 and
// 08 have no twin and are not drawn: nothing outside this file needs their shapes.
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
        case 2:
            if ((uintptr_t)d_out % 16 != 0) return (int)cudaErrorInvalidValue;  // its float4 stores
            return with_radius<kMaxR1>(r, [&](auto R) { return launch_03<decltype(R)::value>(d_x, d_out, n, s); });
        case 6:  // any alignment: see launch_07
            return with_radius<kMaxR1>(r, [&](auto R) { return launch_07<decltype(R)::value>(d_x, d_out, n, s); });
        default: return (int)cudaErrorInvalidValue;        // not reached: kDims[v] is 1
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
        case 5: return with_radius<kMaxR2>(r, [&](auto R) { return launch_06<decltype(R)::value>(d_x, d_out, h, w, s); });
        case 7:  // any w, any alignment: see launch_08
            return with_radius<kMaxR2>(r, [&](auto R) { return launch_08<decltype(R)::value>(d_x, d_out, h, w, s); });
        default: return (int)cudaErrorInvalidValue;           // not reached: kDims[v] is 2
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
