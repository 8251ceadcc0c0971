// gemm_tc kernels: C (M x N, float32, row-major) = A (M x K, bf16, row-major) . B^T, with B given as
// N x K bf16 row-major (the "TN" layout: both operands K-contiguous, like nn.Linear's weight).
// FP32 accumulation on the tensor cores. Shared with transformer_block's `--dtype bf16` path:
// include this header and call gemm_tc::launch(...). No cuBLAS here (that lives in gemm_tc.cu).
//
// Rungs (the names come from the one table kVariantNames below):
//   01_wmma      nvcuda::wmma, one warp per 16x16 output fragment, tiles staged in shared memory.
//   02_mma_sync  mma.sync m16n8k16 + ldmatrix, 128x128x64 block tile, 8 warps of 64x32, a multi-stage
//                cp.async pipeline (4 stages) into a 128-byte-swizzled (conflict-free) shared layout.
//   03_wgmma     sm_90a: TMA (cp.async.bulk.tensor) into 128B-swizzled shared memory, an mbarrier
//                pipeline, one producer warpgroup and two consumer warpgroups issuing wgmma.
//
// Ragged shapes: 01 takes any M, N, K. 02 takes any M, N, K (K a multiple of 8 uses 16-byte
// cp.async; any other K takes a slower element-wise load path with the same layout). 03 takes any
// M, N with K a multiple of 8 (TMA needs 16-byte global row strides; its out-of-bounds boxes read as
// zeros); `requirement()` names the rule before any launch.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (the driver function itself is fetched at run time)
#include <cuda_bf16.h>
#include <mma.h>

#include <cstdint>
#include <cstring>

#include "check.cuh"
#include "tc_ptx.cuh"

namespace gemm_tc {

enum Variant { V01_WMMA = 0, V02_MMA_SYNC = 1, V03_WGMMA = 2, VCUBLAS_BF16 = 3, VCUBLAS_TF32 = 4, VCOUNT = 5 };
// THE variant table: gemm_tc_variant_name(i) and the executable read it; order = the learner's order.
static const char *const kVariantNames[VCOUNT] = {"01_wmma", "02_mma_sync", "03_wgmma", "cublas_bf16", "cublas_tf32"};

static inline int variant_index(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < VCOUNT; ++i)
        if (strcmp(name, kVariantNames[i]) == 0) return i;
    return -1;
}

// ================================================================================================
// 01_wmma: the first tensor-core kernel
// ================================================================================================
// A block of 4 warps computes a 32x32 tile of C; warp w owns the 16x16 fragment at (w / 2, w % 2).
// Each step stages a 32x16 slice of A and a 32x16 slice of B (N x K) in shared memory, zero-filling
// what lies outside the matrices, so ragged edges need no special case in the MMA itself.
constexpr int W_BM = 32, W_BN = 32, W_BK = 16;
constexpr int W_LD = W_BK + 8;  // row stride in elements: wmma wants a multiple of 8 (16 bytes)

__global__ void __launch_bounds__(128) k01_wmma(int M, int N, int K, const uint16_t *__restrict__ A,
                                                const uint16_t *__restrict__ B, float *__restrict__ C) {
    using namespace nvcuda;
    __shared__ __align__(32) __nv_bfloat16 sA[W_BM * W_LD];
    __shared__ __align__(32) __nv_bfloat16 sB[W_BN * W_LD];
    __shared__ __align__(32) float sC[4][16 * 16];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / 2, wn = warp % 2;
    const int m0 = blockIdx.y * W_BM, n0 = blockIdx.x * W_BN;

    // The accumulator fragment lives in registers, spread over the warp in a layout wmma hides.
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < K; k0 += W_BK) {
        // 512 elements of each slice, 4 per thread; outside the matrix they are 0 and add nothing.
        for (int i = tid; i < W_BM * W_BK; i += blockDim.x) {
            const int r = i / W_BK, c = i % W_BK, gk = k0 + c;
            const uint16_t av = (m0 + r < M && gk < K) ? A[(size_t)(m0 + r) * K + gk] : 0;
            const uint16_t bv = (n0 + r < N && gk < K) ? B[(size_t)(n0 + r) * K + gk] : 0;
            sA[r * W_LD + c] = __ushort_as_bfloat16(av);
            sB[r * W_LD + c] = __ushort_as_bfloat16(bv);
        }
        __syncthreads();  // the slices are whole before any warp reads them
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        // B is N x K in memory: element (k, n) at n * ld + k, which wmma calls column-major.
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
        wmma::load_matrix_sync(a, sA + wm * 16 * W_LD, W_LD);
        wmma::load_matrix_sync(b, sB + wn * 16 * W_LD, W_LD);
        wmma::mma_sync(acc, a, b, acc);  // one tensor-core 16x16x16 step (several HMMA in SASS)
        __syncthreads();  // everyone has read the slices before the next step overwrites them
    }
    // The fragment's layout is opaque: store it to shared memory, then write what lies inside C.
    wmma::store_matrix_sync(sC[warp], acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 256; i += 32) {
        const int r = m0 + wm * 16 + i / 16, c = n0 + wn * 16 + i % 16;
        if (r < M && c < N) C[(size_t)r * N + c] = sC[warp][i];
    }
}

// ================================================================================================
// 02_mma_sync: Ampere-style warp-tiled kernel
// ================================================================================================
constexpr int S_BM = 128, S_BN = 128, S_BK = 64, S_STAGES = 4, S_THREADS = 256;
constexpr int S_WM = 64, S_WN = 32;  // warp tile: 2 warps along M x 4 along N
constexpr int S_TILE_A = S_BM * S_BK * 2, S_TILE_B = S_BN * S_BK * 2;  // bytes
constexpr int S_SMEM = S_STAGES * (S_TILE_A + S_TILE_B);                // 128 KiB: needs the opt-in
constexpr int S_GROUP_M = 8;  // block raster: 8 M-tiles share each B panel while it is in L2

// One 128 x 64 bf16 tile (rows of 128 bytes = 8 chunks of 16 bytes) from a K-contiguous matrix
// with `rows` rows into shared memory at `dst`, chunk c of row r stored at swizzle_128b(r, c).
// kAligned (K % 8 == 0): 16-byte cp.async, out-of-range chunks zero-filled. Otherwise rows are not
// 16-byte aligned, so each thread gathers its 8 elements with bounds checks and stores them.
template <bool kAligned>
__device__ __forceinline__ void load_tile_128x64(unsigned char *smem_tile, const uint16_t *__restrict__ G, int rows,
                                                 int K, int row0, int k0, int tid) {
    const uint32_t dst0 = tc::smem_u32(smem_tile);
#pragma unroll
    for (int i = 0; i < (128 * 8) / S_THREADS; ++i) {
        const int c = tid + i * S_THREADS, r = c / 8, ch = c % 8;
        const int gr = row0 + r, gk = k0 + ch * 8;
        const uint32_t off = tc::swizzle_128b(r, ch);
        if constexpr (kAligned) {
            const bool ok = gr < rows && gk < K;
            tc::cp_async_16_zfill(dst0 + off, ok ? G + (size_t)gr * K + gk : G, ok ? 16 : 0);
        } else {
            uint32_t v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int ka = gk + 2 * j, kb = ka + 1;
                const uint32_t lo = (gr < rows && ka < K) ? G[(size_t)gr * K + ka] : 0u;
                const uint32_t hi = (gr < rows && kb < K) ? G[(size_t)gr * K + kb] : 0u;
                v[j] = lo | (hi << 16);
            }
            *reinterpret_cast<uint4 *>(smem_tile + off) = make_uint4(v[0], v[1], v[2], v[3]);
        }
    }
}

// drop_last_k_tiles: a test-only fault (0 in every real call): skip the last K tiles, so the tests
// can show that the checker rejects a kernel that forgets part of the reduction.
template <bool kAligned>
__global__ void __launch_bounds__(S_THREADS) k02_mma_sync(int M, int N, int K, const uint16_t *__restrict__ A,
                                                          const uint16_t *__restrict__ B, float *__restrict__ C,
                                                          int drop_last_k_tiles) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / 4, wn = warp % 4;

    // Grouped raster: consecutive blocks walk down S_GROUP_M tiles of M before moving along N, so
    // the blocks resident together share B panels (and A panels) in L2.
    const int tiles_m = (int)cdiv(M, S_BM), tiles_n = (int)cdiv(N, S_BN);
    const int per_group = S_GROUP_M * tiles_n, group = blockIdx.x / per_group;
    const int first_m = group * S_GROUP_M, group_m = min(tiles_m - first_m, S_GROUP_M);
    const int in_group = blockIdx.x % per_group;
    const int m0 = (first_m + in_group % group_m) * S_BM, n0 = (in_group / group_m) * S_BN;

    auto tileA = [&](int s) { return smem + s * (S_TILE_A + S_TILE_B); };
    auto tileB = [&](int s) { return smem + s * (S_TILE_A + S_TILE_B) + S_TILE_A; };
    const int KT = (int)cdiv(K, S_BK) - drop_last_k_tiles;

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // Prologue: fill STAGES-1 stages. Every stage commits a group, even an empty one, so that
    // wait_group<STAGES-2> below always means "the stage about to be read has landed".
#pragma unroll
    for (int s = 0; s < S_STAGES - 1; ++s) {
        if (s < KT) {
            load_tile_128x64<kAligned>(tileA(s), A, M, K, m0, s * S_BK, tid);
            load_tile_128x64<kAligned>(tileB(s), B, N, K, n0, s * S_BK, tid);
        }
        tc::cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        tc::cp_async_wait<S_STAGES - 2>();  // this thread's copies for stage kt are done...
        __syncthreads();  // ...and everyone's; also: all warps finished reading stage kt-1
        {  // refill the stage freed by iteration kt-1 with tile kt + STAGES-1
            const int nk = kt + S_STAGES - 1, s = nk % S_STAGES;
            if (nk < KT) {
                load_tile_128x64<kAligned>(tileA(s), A, M, K, m0, nk * S_BK, tid);
                load_tile_128x64<kAligned>(tileB(s), B, N, K, n0, nk * S_BK, tid);
            }
            tc::cp_async_commit();
        }
        const uint32_t a_s = tc::smem_u32(tileA(kt % S_STAGES)), b_s = tc::smem_u32(tileB(kt % S_STAGES));
#pragma unroll
        for (int kk = 0; kk < S_BK / 16; ++kk) {
            uint32_t af[4][4], bf[4][2];
            // A: four 16x16 fragments; lane l addresses row (l % 16), chunk 2kk + l / 16.
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
                tc::ldmatrix_x4(af[mi], a_s + tc::swizzle_128b(wm * S_WM + mi * 16 + lane % 16, kk * 2 + lane / 16));
            // B (N x K): one x4 gives two n8 fragments: matrices (n 0-7, k 0-7), (n 0-7, k 8-15),
            // (n 8-15, k 0-7), (n 8-15, k 8-15) = b0, b1 of n-tile 2p, then b0, b1 of 2p+1.
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                uint32_t r[4];
                tc::ldmatrix_x4(r, b_s + tc::swizzle_128b(wn * S_WN + p * 16 + (lane / 16) * 8 + lane % 8,
                                                          kk * 2 + (lane / 8) % 2));
                bf[2 * p][0] = r[0];
                bf[2 * p][1] = r[1];
                bf[2 * p + 1][0] = r[2];
                bf[2 * p + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) tc::mma_m16n8k16_bf16(acc[mi][ni], af[mi], bf[ni], acc[mi][ni]);
        }
    }
    tc::cp_async_wait<0>();  // no copy may still target shared memory when the block exits

    // Epilogue: c[0..1] at (row g, cols 2t, 2t+1), c[2..3] at row g+8 (tc_ptx.cuh's layout).
    const int g = lane / 4, t = lane % 4;
    const bool pairs = (N % 2) == 0;  // float2 stores need 8-byte aligned rows
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = m0 + wm * S_WM + mi * 16 + g + 8 * h, c = n0 + wn * S_WN + ni * 8 + 2 * t;
                if (r >= M) continue;
                float *dst = C + (size_t)r * N + c;
                if (pairs && c + 1 < N) {
                    *reinterpret_cast<float2 *>(dst) = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
                } else {
                    if (c < N) dst[0] = acc[mi][ni][2 * h];
                    if (c + 1 < N) dst[1] = acc[mi][ni][2 * h + 1];
                }
            }
}

template <bool kAligned>
static cudaError_t launch_02(int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C, cudaStream_t s,
                             int drop_last_k_tiles) {
    static bool opted_in = false;  // raising the dynamic shared-memory limit once per kernel
    if (!opted_in) {
        cudaError_t e = cudaFuncSetAttribute(k02_mma_sync<kAligned>, cudaFuncAttributeMaxDynamicSharedMemorySize, S_SMEM);
        if (e != cudaSuccess) return e;
        opted_in = true;
    }
    const long long blocks = cdiv(M, S_BM) * cdiv(N, S_BN);
    k02_mma_sync<kAligned><<<(unsigned)blocks, S_THREADS, S_SMEM, s>>>(M, N, K, A, B, C, drop_last_k_tiles);
    return cudaGetLastError();
}

// ================================================================================================
// 03_wgmma (sm_90a only)
// ================================================================================================
// WGMMA_STUB_BEGIN (replaced by the real kernel)
static inline const char *wgmma_unsupported_reason() { return "needs sm_90a: this build has no sm_90a code"; }
static inline bool wgmma_available() { return wgmma_unsupported_reason() == nullptr; }
static inline const char *wgmma_requirement(int, int, int K) {
    return K % 8 != 0 ? "03_wgmma needs k to be a multiple of 8 (TMA: 16-byte row strides)" : nullptr;
}
static inline cudaError_t launch_03(int, int, int, const uint16_t *, const uint16_t *, float *, cudaStream_t, int) {
    return cudaErrorNotSupported;
}
// WGMMA_STUB_END

// ================================================================================================
// The plain launch function
// ================================================================================================
// Why a variant cannot take (M, N, K) on this device, or nullptr when it can. Nothing is launched.
static inline const char *requirement(int variant, int M, int N, int K) {
    if (M < 0 || N < 0 || K < 0) return "m, n and k must be >= 0";
    if (variant == V03_WGMMA) return wgmma_requirement(M, N, K);
    return nullptr;
}

// Enqueue C = A . B^T (A: M x K, B: N x K, bf16 bits; C: M x N float32) on `stream` with variant
// 01_wmma, 02_mma_sync or 03_wgmma. No synchronisation. k = 0 writes zeros. Returns
// cudaErrorInvalidValue for another variant or a shape `requirement` refuses, and
// cudaErrorNotSupported for 03 where it was not built for (or cannot run on) sm_90a.
static inline cudaError_t launch(int variant, int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                                 cudaStream_t stream, int drop_last_k_tiles = 0) {
    if (variant == V03_WGMMA && !wgmma_available()) return cudaErrorNotSupported;
    if (requirement(variant, M, N, K) != nullptr) return cudaErrorInvalidValue;
    if (M == 0 || N == 0) return cudaSuccess;
    if (K == 0) return cudaMemsetAsync(C, 0, (size_t)M * N * sizeof(float), stream);
    switch (variant) {
        case V01_WMMA: {
            dim3 grid((unsigned)cdiv(N, W_BN), (unsigned)cdiv(M, W_BM));
            k01_wmma<<<grid, 128, 0, stream>>>(M, N, K, A, B, C);
            return cudaGetLastError();
        }
        case V02_MMA_SYNC:
            return K % 8 == 0 ? launch_02<true>(M, N, K, A, B, C, stream, drop_last_k_tiles)
                              : launch_02<false>(M, N, K, A, B, C, stream, drop_last_k_tiles);
        case V03_WGMMA:
            return launch_03(M, N, K, A, B, C, stream, drop_last_k_tiles);
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace gemm_tc
