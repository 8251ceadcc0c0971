// transpose: out = in^T for a row-major float32 matrix. See transpose.h for the contract of each entry point.
//
// A transpose does no arithmetic: it is a copy whose destination index is the source's with its two
// coordinates swapped. Its speed is entirely how well the reads and the writes use DRAM's bandwidth,
// and the four variants are the four steps of NVIDIA's "efficient matrix transpose" lesson.
#include <cstdint>
#include <cstring>

#include "check.cuh"
#include "transpose.h"

// EXERCISE transpose_naive: copy
// EXERCISE transpose_tiled: copy
// EXERCISE transpose_padded: copy
// The tile 01-04 work in (05 doubles it): 32 is a warp's width, so one warp covers one row of a tile, and
// 32 floats of a row are 128 bytes, four whole 32-byte DRAM sectors.
constexpr int kTile = 32;
// EXERCISE transpose_naive: end copy
// EXERCISE transpose_tiled: end copy
// EXERCISE transpose_padded: end copy
// 04_coarsened's block is 32 x 8 threads: each thread moves kTile / kBlockRows = 4 elements.
constexpr int kBlockRows = 8;
// 05_wide_tile's tile is kWide x kWide, moved by a kTile x kWideRows block: 8 elements a thread.
constexpr int kWide = 2 * kTile;
constexpr int kWideRows = kTile / 2;

namespace {

const char *const kVariants[] = {"01_naive", "02_shared_tile", "03_padded", "04_coarsened", "05_wide_tile"};
const int kNumVariants = (int)(sizeof(kVariants) / sizeof(kVariants[0]));

int variant_id(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < kNumVariants; ++i)
        if (strcmp(name, kVariants[i]) == 0) return i;
    return -1;
}

}  // namespace

// The kernels sit outside the anonymous namespace, so that profilers show their plain names.
// Each is self-contained (only kTile and kBlockRows come from above): its guards are its own.

// EXERCISE transpose_naive: copy
// 01_naive: one thread per element. threadIdx.x runs along a row of `in`, so a warp reads 32
// neighbouring floats (one 128-byte line: coalesced). But those 32 elements land in one COLUMN of
// `out`, `rows` floats apart: every thread of the warp writes its own 32-byte sector, of which it
// uses 4 bytes. One store instruction becomes 32 memory transactions instead of 4; the L2 may merge
// the partial sectors before DRAM sees them, but the transactions themselves are the cost, and that
// is what the next variants remove.
__global__ void transpose_01_naive(const float *__restrict__ in, float *__restrict__ out, int rows, int cols) {
// EXERCISE transpose_naive: begin col = this thread's column of in (x: its block's tile times kTile, plus its thread),
// EXERCISE transpose_naive: todo row = its row (y). The grid is rounded up to whole tiles: only when (row, col) lies
// EXERCISE transpose_naive: todo inside the rows x cols matrix, out[col][row] = in[row][col] (both row-major: in has cols
// EXERCISE transpose_naive: todo columns, out has rows; index as long long).
    const int col = blockIdx.x * kTile + threadIdx.x;  // column of in = row of out
    const int row = blockIdx.y * kTile + threadIdx.y;  // row of in = column of out
    // The grid is rounded up to whole tiles: threads past a ragged edge have no element.
    if (row < rows && col < cols) out[(long long)col * rows + row] = in[(long long)row * cols + col];
// EXERCISE transpose_naive: end
}
// EXERCISE transpose_naive: end copy

// EXERCISE transpose_tiled: copy
// 02_shared_tile: a block copies a 32x32 tile of `in` into shared memory row by row (coalesced
// reads), waits until the whole tile is there, then writes it out row by row of `out` (coalesced
// writes). The swap of the two coordinates happens in shared memory, where any order is cheap...
// almost: a warp writing out row by row READS a column of the tile, tile[0..31][ty], whose 32
// addresses are 32 floats apart. Shared memory has 32 banks of 4-byte words (bank = word index mod
// 32), so all 32 lie in the same bank and the read is served one word at a time (a 32-way conflict).
__global__ void transpose_02_shared_tile(const float *__restrict__ in, float *__restrict__ out, int rows,
                                         int cols) {
    __shared__ float tile[kTile][kTile];
// EXERCISE transpose_tiled: begin load: col and row = this thread's element of in (x and y: block times kTile plus
// EXERCISE transpose_tiled: todo thread); when it lies inside the rows x cols matrix, tile[threadIdx.y][threadIdx.x] =
// EXERCISE transpose_tiled: todo in[row][col] (row-major, cols columns; index as long long). Then wait until the whole
// EXERCISE transpose_tiled: todo tile is loaded: every thread stores an element another thread loaded.
    int col = blockIdx.x * kTile + threadIdx.x;
    int row = blockIdx.y * kTile + threadIdx.y;
    if (row < rows && col < cols) tile[threadIdx.y][threadIdx.x] = in[(long long)row * cols + col];
    // Every thread writes out an element that ANOTHER thread loaded: all loads must be done first.
    // The barrier is outside the guard, so threads past a ragged edge reach it too.
    __syncthreads();
// EXERCISE transpose_tiled: end
// EXERCISE transpose_tiled: begin store: in out (cols x rows) this block's tile sits at block row blockIdx.x, block
// EXERCISE transpose_tiled: todo column blockIdx.y; threadIdx.x runs along a row of out (coalesced writes). When the
// EXERCISE transpose_tiled: todo element lies inside out, out[row][col] = the tile's cell holding in's element (col, row).
    // In `out` this block's tile sits at block row blockIdx.x, block column blockIdx.y. threadIdx.x
    // again runs along a row, now a row of out, so the warp's writes are 32 neighbouring floats.
    col = blockIdx.y * kTile + threadIdx.x;  // column of out = row of in
    row = blockIdx.x * kTile + threadIdx.y;  // row of out = column of in
    if (row < cols && col < rows) out[(long long)row * rows + col] = tile[threadIdx.x][threadIdx.y];
// EXERCISE transpose_tiled: end
}
// EXERCISE transpose_tiled: end copy

// 03_padded: 02 with one unused float at the end of each tile row. Row r of the tile now starts at
// word 33 r, so the column read tile[0..31][ty] touches words 33 r + ty, whose banks (r + ty) mod 32
// are all different: one shared-memory access instead of 32. The global side is 02's exactly.
// EXERCISE transpose_padded: copy
// 03_padded: 02_shared_tile (a tile of in through shared memory, both global sides coalesced) with its
// tile laid out so that the warp's column read after the barrier is free of bank conflicts.
__global__ void transpose_03_padded(const float *__restrict__ in, float *__restrict__ out, int rows, int cols) {
// EXERCISE transpose_padded: begin declare the shared tile (kTile x kTile cells) so that a warp's read of one of its COLUMNS
// EXERCISE transpose_padded: todo hits 32 different banks (32 banks of 4-byte words, bank = word index mod 32: in a
// EXERCISE transpose_padded: todo tile[kTile][kTile] a column's 32 words are 32 apart, all in one bank). Then the load:
// EXERCISE transpose_padded: todo col and row = this thread's element of in (x and y: block times kTile plus thread);
// EXERCISE transpose_padded: todo when it lies inside the rows x cols matrix, tile[threadIdx.y][threadIdx.x] = in[row][col]
// EXERCISE transpose_padded: todo (row-major, cols columns; index as long long).
    __shared__ float tile[kTile][kTile + 1];
    int col = blockIdx.x * kTile + threadIdx.x;
    int row = blockIdx.y * kTile + threadIdx.y;
    if (row < rows && col < cols) tile[threadIdx.y][threadIdx.x] = in[(long long)row * cols + col];
// EXERCISE transpose_padded: end
// EXERCISE transpose_padded: begin the store: wait until the whole tile is loaded; then this thread's element of out
// EXERCISE transpose_padded: todo (cols x rows; the block's tile sits at block row blockIdx.x, block column blockIdx.y of
// EXERCISE transpose_padded: todo out, threadIdx.x along its row), when it lies inside out, from the tile's column:
// EXERCISE transpose_padded: todo tile[threadIdx.x][threadIdx.y].
    __syncthreads();
    col = blockIdx.y * kTile + threadIdx.x;
    row = blockIdx.x * kTile + threadIdx.y;
    if (row < cols && col < rows) out[(long long)row * rows + col] = tile[threadIdx.x][threadIdx.y];
// EXERCISE transpose_padded: end
}
// EXERCISE transpose_padded: end copy

// 04_coarsened: 03's padded tile moved by a 32 x 8 block, each thread taking rows ty, ty+8, ty+16,
// ty+24 of the tile. A quarter of the threads do the same work: the index arithmetic and the barrier
// are paid once per four elements, and each thread has four independent loads in flight before it
// waits, which is what keeps enough bytes on the way to DRAM to cover its latency.
__global__ void transpose_04_coarsened(const float *__restrict__ in, float *__restrict__ out, int rows,
                                       int cols) {
    __shared__ float tile[kTile][kTile + 1];
    const int col = blockIdx.x * kTile + threadIdx.x;
    const int row0 = blockIdx.y * kTile + threadIdx.y;
#pragma unroll
    for (int j = 0; j < kTile; j += kBlockRows) {
        if (row0 + j < rows && col < cols) tile[threadIdx.y + j][threadIdx.x] = in[(long long)(row0 + j) * cols + col];
    }
    __syncthreads();
    const int out_col = blockIdx.y * kTile + threadIdx.x;
    const int out_row0 = blockIdx.x * kTile + threadIdx.y;
#pragma unroll
    for (int j = 0; j < kTile; j += kBlockRows) {
        if (out_row0 + j < cols && out_col < rows)
            out[(long long)(out_row0 + j) * rows + out_col] = tile[threadIdx.x][threadIdx.y + j];
    }
}

// 05_wide_tile: a 64 x 64 tile, twice 04's edge, moved by 32 x 16 threads. Each thread takes two
// neighbouring columns (one 8-byte float2 load, and one float2 store on the way out) in every 16th row:
// 8 elements, all 4 loads in flight before the barrier. A warp instruction now moves 256 contiguous bytes
// of a row instead of 128, and a block 16 KiB instead of 4, so each SM keeps about twice the bytes on
// their way to DRAM that 04 does; on an H200 at 8192 x 8192 that was what 04 lacked (NOTES-transpose).
// The float2 accesses need the tile inside the matrix and both row pitches even (8-byte aligned rows);
// a tile on a ragged edge moves the same elements one at a time, bounds-checked. The padded row (65
// words) leaves a 2-way bank conflict on the pairs (lanes tx and tx + 16 share a bank): measured cheaper
// than the extra instructions a conflict-free layout needs.
__global__ void __launch_bounds__(kTile * kWideRows) transpose_05_wide_tile(const float *__restrict__ in,
                                                                           float *__restrict__ out, int rows,
                                                                           int cols) {
    __shared__ float tile[kWide][kWide + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = blockIdx.x * kWide, r0 = blockIdx.y * kWide;
    const bool paired = ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 7) == 0;
    const bool whole = paired && rows % 2 == 0 && cols % 2 == 0 && r0 + kWide <= rows && c0 + kWide <= cols;
#pragma unroll
    for (int i = 0; i < kWide; i += kWideRows) {
        const int r = r0 + ty + i, c = c0 + 2 * tx;
        float a = 0.0f, b = 0.0f;
        if (whole) {
            const float2 v = *reinterpret_cast<const float2 *>(in + (long long)r * cols + c);
            a = v.x;
            b = v.y;
        } else if (r < rows) {
            if (c < cols) a = in[(long long)r * cols + c];
            if (c + 1 < cols) b = in[(long long)r * cols + c + 1];
        }
        tile[ty + i][2 * tx] = a;
        tile[ty + i][2 * tx + 1] = b;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kWide; i += kWideRows) {
        const int orow = c0 + ty + i, ocol = r0 + 2 * tx;  // out is cols x rows: x's column c0 + ty + i
        const float a = tile[2 * tx][ty + i], b = tile[2 * tx + 1][ty + i];
        if (whole) {
            *reinterpret_cast<float2 *>(out + (long long)orow * rows + ocol) = make_float2(a, b);
        } else if (orow < cols) {
            if (ocol < rows) out[(long long)orow * rows + ocol] = a;
            if (ocol + 1 < rows) out[(long long)orow * rows + ocol + 1] = b;
        }
    }
}

extern "C" int transpose_variant_count(void) { return kNumVariants; }

extern "C" const char *transpose_variant_name(int i) { return (i >= 0 && i < kNumVariants) ? kVariants[i] : nullptr; }

extern "C" int transpose_tile(void) { return kTile; }

extern "C" long long transpose_max_rows(void) { return (long long)CUDALAB_MAX_GRID_YZ * kTile; }

extern "C" cudalab_status transpose_f32_dev(const char *variant, const float *d_in, float *d_out, int rows, int cols,
                                            void *stream_) {
    const int v = variant_id(variant);
    if (v < 0 || rows < 0 || cols < 0) return (int)cudaErrorInvalidValue;
    if (rows == 0 || cols == 0) return 0;
    if (d_in == nullptr || d_out == nullptr) return (int)cudaErrorInvalidValue;
    // One tile per block: the x axis walks the columns (up to 2^31 - 1 blocks), the y axis the rows,
    // whose 65535-block limit caps rows at transpose_max_rows().
    const long long gx = cdiv(cols, kTile), gy = cdiv(rows, kTile);
    if (gy > CUDALAB_MAX_GRID_YZ) return (int)cudaErrorInvalidValue;
    const dim3 grid((unsigned)gx, (unsigned)gy);
    const cudaStream_t stream = (cudaStream_t)stream_;
    switch (v) {
    case 0:
        transpose_01_naive<<<grid, dim3(kTile, kTile), 0, stream>>>(d_in, d_out, rows, cols);
        break;
    case 1:
        transpose_02_shared_tile<<<grid, dim3(kTile, kTile), 0, stream>>>(d_in, d_out, rows, cols);
        break;
    case 2:
        transpose_03_padded<<<grid, dim3(kTile, kTile), 0, stream>>>(d_in, d_out, rows, cols);
        break;
    case 3:
        transpose_04_coarsened<<<grid, dim3(kTile, kBlockRows), 0, stream>>>(d_in, d_out, rows, cols);
        break;
    default:
        transpose_05_wide_tile<<<dim3((unsigned)cdiv(cols, kWide), (unsigned)cdiv(rows, kWide)), dim3(kTile, kWideRows),
                                 0, stream>>>(d_in, d_out, rows, cols);
        break;
    }
    CUDA_TRY_LAUNCH();
    return 0;
}

extern "C" cudalab_status transpose_f32(const char *variant, const float *in, float *out, int rows, int cols) {
    if (variant_id(variant) < 0 || rows < 0 || cols < 0) return (int)cudaErrorInvalidValue;
    if (rows == 0 || cols == 0) return 0;
    if (in == nullptr || out == nullptr) return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
    cudalab::DeviceAlloc din, dout;
    if (int err = din.upload(in, bytes)) return err;
    // out goes down as well as up: an element no thread writes comes back as the caller left it (the
    // tests poison it first), not as whatever cudaMalloc's memory held.
    if (int err = dout.upload(out, bytes)) return err;
    if (int err = transpose_f32_dev(variant, din.as<const float>(), dout.as<float>(), rows, cols, nullptr)) return err;
    CUDA_TRY(cudaDeviceSynchronize());
    CUDA_TRY(cudaMemcpy(out, dout.p, bytes, cudaMemcpyDeviceToHost));
    return cudalab::release_all(din, dout);
}
