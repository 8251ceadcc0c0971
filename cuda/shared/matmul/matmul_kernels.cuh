// matmul kernels, shared by every program that multiplies matrices (matmul itself, attention,
// transformer_block): include as "matmul/matmul_kernels.cuh" (the Makefile passes -Icuda/shared).
//
// Every kernel computes, for each batch index z = blockIdx.z,
//     C_z = alpha * A_z · op(B_z)        all row-major, float32
// with A_z = A + z*stride_a (m×k), C_z = C + z*stride_c (m×n) and
//     op(B) = B   : B_z = B + z*stride_b is k×n   (TRANS_B = false)
//     op(B) = Bᵀ  : B_z = B + z*stride_b is n×k   (TRANS_B = true; S = Q·Kᵀ with K stored row-major)
// Strides are in elements; a stride of 0 broadcasts that operand over the batch.
//
// Variants, in the order a learner meets them (GPU MODE lectures 3 and 5):
//   01_naive          one thread per output, 16×16 blocks; every operand read from global memory
//   02_tiled<TILE>    TILE×TILE tiles of A and op(B) staged in static shared memory (TILE 16 or 32)
//   03_tiled_dynamic  the same with the tile width chosen at run time; dynamic shared memory
//                     of 2·tw·tw·4 bytes (tw·(tw+1) for the B tile when TRANS_B, see below)
// All of them handle any m, n, k (including k = 0, which writes zeros): partial tiles are zero-filled.
//
// Host helpers at the end (static inline, cudaError_t, never exit): matmul_launch() picks a variant
// by name; matmul_variant_id(), matmul_smem_bytes() and matmul_check_tile() let callers validate first.
#pragma once

#include <cstring>

#include "check.cuh"

// ---------------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------------

// EXERCISE matmul: copy
// op(B)[kk][col] for the naive kernel.
template <bool TRANS_B>
__device__ __forceinline__ float matmul_op_b(const float *__restrict__ B, int kk, int col, int n, int k) {
    return TRANS_B ? B[(size_t)col * k + kk] : B[(size_t)kk * n + col];
}

// The lectures' matmul_k: thread (row, col) walks row `row` of A and column `col` of op(B).
// threadIdx.x runs along the columns of C so that a warp's loads of B (and its stores to C) are
// contiguous; its loads of A are all the same address (a broadcast).
template <bool TRANS_B>
__global__ void matmul_01_naive(int m, int n, int k, const float *__restrict__ A, const float *__restrict__ B,
                                float *__restrict__ C, float alpha, long long stride_a, long long stride_b,
                                long long stride_c) {
// EXERCISE matmul: begin row = this thread's row of C (y: block and thread), col = its column (x); return when
// EXERCISE matmul: todo (row, col) is outside the m x n matrix C (the grid is rounded up to whole blocks).
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n) return;  // ragged edge: the grid is rounded up with cdiv
// EXERCISE matmul: end
    A += blockIdx.z * stride_a;
    B += blockIdx.z * stride_b;
    C += blockIdx.z * stride_c;
// EXERCISE matmul: begin acc = the dot product of row `row` of A (m x k, row-major) and column `col` of op(B)
// EXERCISE matmul: todo (matmul_op_b<TRANS_B>(B, kk, col, n, k)), summed in float over kk = 0..k-1; then
// EXERCISE matmul: todo C[row][col] (row-major, n columns; index as size_t) = alpha * acc.
    float acc = 0.0f;
    for (int kk = 0; kk < k; ++kk) acc += A[(size_t)row * k + kk] * matmul_op_b<TRANS_B>(B, kk, col, n, k);
    C[(size_t)row * n + col] = alpha * acc;
// EXERCISE matmul: end
}
// EXERCISE matmul: end copy

// EXERCISE matmul_tiled: copy
// Stage one TILE-wide slice of A and of op(B) into shared memory. Shared by the static and the
// dynamic kernel; `tw` is the tile width and `bs_ld` the row length of the B tile.
//   As[ty][tx] = A[row][k0 + tx]             row = blockIdx.y*tw + ty
//   Bs[kk][tx] = op(B)[k0 + kk][col]         col = blockIdx.x*tw + tx
// Out-of-range elements are stored as 0 so that the inner product over the whole tile needs no
// bounds test: a zero contributes nothing to the sum, whatever sits in the other operand.
// With TRANS_B the B tile is read along B's rows (k), which is contiguous in memory, so thread
// (ty, tx) reads B[blockIdx.x*tw + ty][k0 + tx] and stores it transposed, at Bs[tx][ty]. That
// store walks a column of Bs; the B tile's rows are padded by one float (bs_ld = tw + 1) so the
// 32 lanes of a warp land in 32 different banks instead of one.
template <bool TRANS_B>
__device__ __forceinline__ void matmul_fetch_tiles(int m, int n, int k, const float *__restrict__ A,
                                                   const float *__restrict__ B, int tw, int k0, float &a,
                                                   float &b) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * tw + ty;
    const int a_k = k0 + tx;
// EXERCISE matmul_tiled: begin a = A[row][a_k] (row-major, k columns; index as size_t), or 0.0f when (row, a_k)
// EXERCISE matmul_tiled: todo is outside A: the ragged edges of the last tiles are zero-filled, so the dot product
// EXERCISE matmul_tiled: todo over a whole tile needs no bounds test.
    a = (row < m && a_k < k) ? A[(size_t)row * k + a_k] : 0.0f;
// EXERCISE matmul_tiled: stub a = 0.0f;
// EXERCISE matmul_tiled: end
    if (TRANS_B) {
        const int b_row = blockIdx.x * tw + ty;  // a column of C, a row of B
        const int b_k = k0 + tx;
        b = (b_row < n && b_k < k) ? B[(size_t)b_row * k + b_k] : 0.0f;
    } else {
// EXERCISE matmul_tiled: begin b = B[k0 + ty][col] with col = blockIdx.x * tw + tx (B is k x n, row-major), or
// EXERCISE matmul_tiled: todo 0.0f when that element is outside B (the ragged edges again).
        const int b_k = k0 + ty;
        const int col = blockIdx.x * tw + tx;
        b = (b_k < k && col < n) ? B[(size_t)b_k * n + col] : 0.0f;
// EXERCISE matmul_tiled: stub b = 0.0f;
// EXERCISE matmul_tiled: end
    }
}

template <bool TRANS_B>
__device__ __forceinline__ void matmul_store_tiles(float *As, float *Bs, int tw, int bs_ld, float a, float b) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    As[ty * tw + tx] = a;
    if (TRANS_B)
        Bs[tx * bs_ld + ty] = b;
    else
        Bs[ty * bs_ld + tx] = b;
}

// Fetch (global -> registers) and store (registers -> shared) in one step, for the kernels that
// do not overlap the two.
template <bool TRANS_B>
__device__ __forceinline__ void matmul_load_tiles(int m, int n, int k, const float *__restrict__ A,
                                                  const float *__restrict__ B, float *As, float *Bs, int tw,
                                                  int bs_ld, int k0) {
    float a, b;
    matmul_fetch_tiles<TRANS_B>(m, n, k, A, B, tw, k0, a, b);
    matmul_store_tiles<TRANS_B>(As, Bs, tw, bs_ld, a, b);
}

// EXERCISE matmul_tiled: end copy

// Lecture 5's tiled kernel with a compile-time tile width: each block owns a TILE×TILE tile of C,
// and every element of A and op(B) it needs is read from global memory once per block instead of
// once per thread (a TILE-fold cut in global traffic).
template <int TILE, bool TRANS_B>
__global__ void __launch_bounds__(TILE *TILE)
    matmul_02_tiled(int m, int n, int k, const float *__restrict__ A, const float *__restrict__ B,
                    float *__restrict__ C, float alpha, long long stride_a, long long stride_b,
                    long long stride_c) {
    constexpr int BS_LD = TILE + (TRANS_B ? 1 : 0);
    static_assert(TILE % 4 == 0, "the A row is read as float4");
    // 16-byte alignment lets a row of As be read as float4 (see the inner loop).
    __shared__ __align__(16) float As[TILE * TILE];
    __shared__ __align__(16) float Bs[TILE * BS_LD];
    A += blockIdx.z * stride_a;
    B += blockIdx.z * stride_b;
    C += blockIdx.z * stride_c;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    // No early return for threads outside C: they still load their share of the tiles and must
    // reach every barrier below.
    float acc = 0.0f;
    // The next tile's two elements are fetched into registers before this tile's FMAs, so their
    // global-memory latency overlaps the arithmetic instead of stalling the block at the top of
    // each step (one register each; the shared tiles are not doubled).
    float a_next, b_next;
    matmul_fetch_tiles<TRANS_B>(m, n, k, A, B, TILE, 0, a_next, b_next);
    for (int k0 = 0; k0 < k; k0 += TILE) {
        matmul_store_tiles<TRANS_B>(As, Bs, TILE, BS_LD, a_next, b_next);
        // Each thread reads a whole row of As and a whole column of Bs, written by other threads:
        // wait until the entire tile is in shared memory.
        __syncthreads();
        if (k0 + TILE < k) matmul_fetch_tiles<TRANS_B>(m, n, k, A, B, TILE, k0 + TILE, a_next, b_next);
        // Every FMA needs its own element of Bs (one shared load each), but the thread's row of As
        // is the same for the whole warp row: read it four floats at a time (one 16-byte broadcast
        // load instead of four), 1.25 shared loads per FMA instead of 2.
        // The sum is still taken in order kk = 0, 1, 2, ...
        const float4 *a_row = reinterpret_cast<const float4 *>(As + ty * TILE);
#pragma unroll
        for (int q = 0; q < TILE / 4; ++q) {
            const float4 a = a_row[q];
            acc += a.x * Bs[(4 * q + 0) * BS_LD + tx];
            acc += a.y * Bs[(4 * q + 1) * BS_LD + tx];
            acc += a.z * Bs[(4 * q + 2) * BS_LD + tx];
            acc += a.w * Bs[(4 * q + 3) * BS_LD + tx];
        }
        // The next iteration overwrites As and Bs: wait until every thread is done reading this tile.
        __syncthreads();
    }
    if (row < m && col < n) C[(size_t)row * n + col] = alpha * acc;
}

// EXERCISE matmul_tiled: copy
// Lecture 5's dynamic version: the tile width tw = blockDim.x = blockDim.y is known only at run
// time, so the two tiles live in one dynamically sized shared array (launch with
// matmul_smem_bytes(...) bytes), As first, then Bs. The inner loop can't be unrolled by the
// compiler, which is the price of the flexibility.
template <bool TRANS_B>
__global__ void matmul_03_tiled_dynamic(int m, int n, int k, const float *__restrict__ A,
                                        const float *__restrict__ B, float *__restrict__ C, float alpha,
                                        long long stride_a, long long stride_b, long long stride_c) {
    extern __shared__ float matmul_smem[];
    const int tw = blockDim.x;
    const int bs_ld = tw + (TRANS_B ? 1 : 0);
    float *As = matmul_smem;
    float *Bs = matmul_smem + tw * tw;
    A += blockIdx.z * stride_a;
    B += blockIdx.z * stride_b;
    C += blockIdx.z * stride_c;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * tw + ty;
    const int col = blockIdx.x * tw + tx;
    // As in 02: threads outside C stay to help load tiles and to reach the barriers.
    float acc = 0.0f;
    for (int k0 = 0; k0 < k; k0 += tw) {
// EXERCISE matmul_tiled: begin load this step's tiles (matmul_load_tiles<TRANS_B>(m, n, k, A, B, As, Bs, tw, bs_ld,
// EXERCISE matmul_tiled: todo k0): each thread stores one element of each); wait until the whole tile is in shared
// EXERCISE matmul_tiled: todo memory (other threads loaded most of it); add the tw products As[ty][kk] * Bs[kk][tx]
// EXERCISE matmul_tiled: todo (row length tw for As, bs_ld for Bs) to acc; wait again before the next step overwrites
// EXERCISE matmul_tiled: todo the tiles.
        matmul_load_tiles<TRANS_B>(m, n, k, A, B, As, Bs, tw, bs_ld, k0);
        // Rows of As and columns of Bs come from other threads' loads: wait for the whole tile.
        __syncthreads();
        for (int kk = 0; kk < tw; ++kk) acc += As[ty * tw + kk] * Bs[kk * bs_ld + tx];
        // The next iteration overwrites the tiles: wait until everyone has finished reading them.
        __syncthreads();
// EXERCISE matmul_tiled: end
    }
    if (row < m && col < n) C[(size_t)row * n + col] = alpha * acc;
}
// EXERCISE matmul_tiled: end copy

// ---------------------------------------------------------------------------------------------
// Host helpers
// ---------------------------------------------------------------------------------------------

enum matmul_variant_id_t { MATMUL_01_NAIVE = 1, MATMUL_02_TILED = 2, MATMUL_03_TILED_DYNAMIC = 3 };

// "01_naive" -> 1, "02_tiled" -> 2, "03_tiled_dynamic" -> 3; anything else (or NULL) -> 0.
static inline int matmul_variant_id(const char *variant) {
    if (variant == nullptr) return 0;
    if (strcmp(variant, "01_naive") == 0) return MATMUL_01_NAIVE;
    if (strcmp(variant, "02_tiled") == 0) return MATMUL_02_TILED;
    if (strcmp(variant, "03_tiled_dynamic") == 0) return MATMUL_03_TILED_DYNAMIC;
    return 0;
}

// Block edge a variant launches with: 16 for the naive kernel (the tile argument is ignored
// there), the tile width otherwise.
static inline int matmul_block_edge(int variant_id, int tile) {
    return variant_id == MATMUL_01_NAIVE ? 16 : tile;
}

// Shared memory a launch needs, in bytes: 0 for 01, the tiles of A and B otherwise. The B tile
// has rows of tile+1 floats when B is transposed (bank-conflict padding, see matmul_load_tiles).
static inline size_t matmul_smem_bytes(int variant_id, int tile, bool trans_b) {
    if (variant_id == MATMUL_01_NAIVE) return 0;
    return ((size_t)tile * tile + (size_t)tile * (tile + (trans_b ? 1 : 0))) * sizeof(float);
}

// Can the current device run this variant with this tile width? cudaErrorInvalidValue when the
// variant is unknown, when 02_tiled gets a tile other than 16 or 32, or when tile < 1;
// cudaErrorInvalidConfiguration when tile² threads exceed the device's threads per block or the
// tiles exceed its shared memory per block. Callers (Python) query the same attributes first to
// explain which limit was hit.
static inline cudaError_t matmul_check_tile(const char *variant, int tile, bool trans_b) {
    const int id = matmul_variant_id(variant);
    if (id == 0) return cudaErrorInvalidValue;
    if (id == MATMUL_01_NAIVE) return cudaSuccess;
    if (tile < 1) return cudaErrorInvalidValue;
    if (id == MATMUL_02_TILED && tile != 16 && tile != 32) return cudaErrorInvalidValue;
    int dev = 0, max_threads = 0, max_smem = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerBlock, dev);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlock, dev);
    if (err != cudaSuccess) return err;
    if ((long long)tile * tile > max_threads) return cudaErrorInvalidConfiguration;
    if (matmul_smem_bytes(id, tile, trans_b) > (size_t)max_smem) return cudaErrorInvalidConfiguration;
    return cudaSuccess;
}

// Enqueue one batched C = alpha·A·op(B) on `stream`. Device pointers. Nothing to do (m, n or
// batch is 0) returns success without launching; k = 0 launches and writes zeros.
// Sizes beyond the grid's limits (cdiv(m, edge) or batch above CUDALAB_MAX_GRID_YZ) give cudaErrorInvalidValue.
// The launch error, if any, is returned (cudaGetLastError); the kernel runs asynchronously.
static inline cudaError_t matmul_launch(const char *variant, int tile, bool trans_b, int m, int n, int k,
                                        const float *A, const float *B, float *C, float alpha, int batch,
                                        long long stride_a, long long stride_b, long long stride_c,
                                        cudaStream_t stream) {
    if (m < 0 || n < 0 || k < 0 || batch < 0) return cudaErrorInvalidValue;
    cudaError_t err = matmul_check_tile(variant, tile, trans_b);
    if (err != cudaSuccess) return err;
    if (m == 0 || n == 0 || batch == 0) return cudaSuccess;
    const int id = matmul_variant_id(variant);
    const int edge = matmul_block_edge(id, tile);
    const long long gy = cdiv(m, edge);
    if (gy > CUDALAB_MAX_GRID_YZ || batch > CUDALAB_MAX_GRID_YZ) return cudaErrorInvalidValue;
    const dim3 block(edge, edge);
    const dim3 grid((unsigned)cdiv(n, edge), (unsigned)gy, (unsigned)batch);
    if (id == MATMUL_01_NAIVE) {
        if (trans_b)
            matmul_01_naive<true><<<grid, block, 0, stream>>>(m, n, k, A, B, C, alpha, stride_a, stride_b, stride_c);
        else
            matmul_01_naive<false><<<grid, block, 0, stream>>>(m, n, k, A, B, C, alpha, stride_a, stride_b, stride_c);
    } else if (id == MATMUL_02_TILED) {
        if (tile == 16 && trans_b)
            matmul_02_tiled<16, true><<<grid, block, 0, stream>>>(m, n, k, A, B, C, alpha, stride_a, stride_b,
                                                                  stride_c);
        else if (tile == 16)
            matmul_02_tiled<16, false><<<grid, block, 0, stream>>>(m, n, k, A, B, C, alpha, stride_a, stride_b,
                                                                   stride_c);
        else if (trans_b)
            matmul_02_tiled<32, true><<<grid, block, 0, stream>>>(m, n, k, A, B, C, alpha, stride_a, stride_b,
                                                                  stride_c);
        else
            matmul_02_tiled<32, false><<<grid, block, 0, stream>>>(m, n, k, A, B, C, alpha, stride_a, stride_b,
                                                                   stride_c);
    } else {
        const size_t smem = matmul_smem_bytes(id, tile, trans_b);
        if (trans_b)
            matmul_03_tiled_dynamic<true><<<grid, block, smem, stream>>>(m, n, k, A, B, C, alpha, stride_a, stride_b,
                                                                         stride_c);
        else
            matmul_03_tiled_dynamic<false><<<grid, block, smem, stream>>>(m, n, k, A, B, C, alpha, stride_a,
                                                                          stride_b, stride_c);
    }
    return cudaGetLastError();
}
