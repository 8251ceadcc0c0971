// gemm_tc's 02_mma_sync rung: C (M x N, float32) = A (M x K, bf16) . B^T (B: N x K bf16), both
// K-contiguous, FP32 accumulation on the tensor cores with mma.sync m16n8k16 + ldmatrix and a
// 4-stage cp.async pipeline (sm_80). Shared: gemm_tc runs it among its rungs (cuda/gemm_tc/dispatch.cuh),
// transformer_block's bf16 projection calls launch_mma_sync, and collectives' tensor-parallel MLP
// reaches it through launch_fastest (wgmma_launch.cuh) where there is no sm_90a.
// Include as "gemm_tc/k02_mma_sync.cuh" (the Makefile passes -Icuda/shared).
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "arch.cuh"
#include "check.cuh"
#include "faults.cuh"
#include "tc_ptx.cuh"

namespace gemm_tc {

// ================================================================================================
// 02_mma_sync: Ampere-style warp-tiled kernel
// ================================================================================================
constexpr int S_BM = 128, S_BN = 256, S_BK = 64, S_STAGES = 4, S_THREADS = 256;
// Warp tile 64x64: 2 warps along M x 4 along N. Per 16-deep step a warp issues 8 ldmatrix.x4 for
// 32 mma.sync; a 64x32 warp tile (6 for 16) measured 327 TFLOP/s at 4096^3 on an H100, bound by
// shared-memory bandwidth (an x4 moves 512 bytes: 4 cycles of the SM's 128 B/clk).
constexpr int S_WM = 64, S_WN = 64;
constexpr int S_MI = S_WM / 16, S_NI = S_WN / 8;  // m16 and n8 MMA tiles per warp
constexpr int S_TILE_A = S_BM * S_BK * 2, S_TILE_B = S_BN * S_BK * 2;  // bytes
constexpr int S_SMEM = S_STAGES * (S_TILE_A + S_TILE_B);                // 192 KiB: needs the opt-in
constexpr int S_GROUP_M = 8;  // block raster: 8 M-tiles share each B panel while it is in L2

#if CUDALAB_SM80_CODE  // cp.async: sm_80 (02's kernel body, its only caller, is compiled out below it)
// One ROWS x 64 bf16 tile (rows of 128 bytes = 8 chunks of 16 bytes) from a K-contiguous matrix
// with `rows` rows into shared memory at `dst`, chunk c of row r stored at swizzle_128b(r, c).
// kAligned (K % 8 == 0): 16-byte cp.async, out-of-range chunks zero-filled. Otherwise rows are not
// 16-byte aligned, so each thread gathers its 8 elements with bounds checks and stores them.
template <int ROWS, bool kAligned>
__device__ __forceinline__ void load_tile_x64(unsigned char *smem_tile, const uint16_t *__restrict__ G, int rows,
                                                 int K, int row0, int k0, int tid) {
    const uint32_t dst0 = tc::smem_u32(smem_tile);
#pragma unroll
    for (int i = 0; i < (ROWS * 8) / S_THREADS; ++i) {
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
#endif

// drop_last_k_tiles: the fault build's (faults.cuh; the product compiles it to 0): skip the last K
// tiles, so the tests can show that the checker rejects a kernel that forgets part of the reduction.
// Split K (gridDim.y > 1): block row y takes K tiles [y·kt_per_split, (y+1)·kt_per_split) and writes
// its partial product to C + y·part_stride (launch_mma_sync_split_k sums them). kt_per_split <= 0:
// the whole K, into C.
template <bool kAligned>
__global__ void __launch_bounds__(S_THREADS) k02_mma_sync(int M, int N, int K, const uint16_t *__restrict__ A,
                                                          const uint16_t *__restrict__ B, float *__restrict__ C,
                                                          int drop_last_k_tiles, int kt_per_split, size_t part_stride) {
#if CUDALAB_SM80_CODE  // mma.sync bf16, ldmatrix, cp.async: sm_80 (needs_sm80 below refuses older targets)
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
    const int KT_all = (int)cdiv(K, S_BK) - CUDALAB_FAULT(drop_last_k_tiles);
    const int kt0 = kt_per_split > 0 ? min(KT_all, (int)blockIdx.y * kt_per_split) : 0;
    const int KT = kt_per_split > 0 ? min(KT_all - kt0, kt_per_split) : KT_all;  // this block's K tiles
    C += (size_t)blockIdx.y * part_stride;

    float acc[S_MI][S_NI][4];
#pragma unroll
    for (int i = 0; i < S_MI; ++i)
#pragma unroll
        for (int j = 0; j < S_NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // Prologue: fill STAGES-1 stages. Every stage commits a group, even an empty one, so that
    // wait_group<STAGES-2> below always means "the stage about to be read has landed".
#pragma unroll
    for (int s = 0; s < S_STAGES - 1; ++s) {
        if (s < KT) {
            load_tile_x64<S_BM, kAligned>(tileA(s), A, M, K, m0, (kt0 + s) * S_BK, tid);
            load_tile_x64<S_BN, kAligned>(tileB(s), B, N, K, n0, (kt0 + s) * S_BK, tid);
        }
        tc::cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        tc::cp_async_wait<S_STAGES - 2>();  // this thread's copies for stage kt are done...
        __syncthreads();  // ...and everyone's; also: all warps finished reading stage kt-1
        {  // refill the stage freed by iteration kt-1 with tile kt + STAGES-1
            const int nk = kt + S_STAGES - 1, s = nk % S_STAGES;
            if (nk < KT) {
                load_tile_x64<S_BM, kAligned>(tileA(s), A, M, K, m0, (kt0 + nk) * S_BK, tid);
                load_tile_x64<S_BN, kAligned>(tileB(s), B, N, K, n0, (kt0 + nk) * S_BK, tid);
            }
            tc::cp_async_commit();
        }
        const uint32_t a_s = tc::smem_u32(tileA(kt % S_STAGES)), b_s = tc::smem_u32(tileB(kt % S_STAGES));
#pragma unroll
        for (int kk = 0; kk < S_BK / 16; ++kk) {
            uint32_t af[S_MI][4], bf[S_NI][2];
            // A: four 16x16 fragments; lane l addresses row (l % 16), chunk 2kk + l / 16.
#pragma unroll
            for (int mi = 0; mi < S_MI; ++mi)
                tc::ldmatrix_x4(af[mi], a_s + tc::swizzle_128b(wm * S_WM + mi * 16 + lane % 16, kk * 2 + lane / 16));
            // B (N x K): one x4 gives two n8 fragments: matrices (n 0-7, k 0-7), (n 0-7, k 8-15),
            // (n 8-15, k 0-7), (n 8-15, k 8-15) = b0, b1 of n-tile 2p, then b0, b1 of 2p+1.
#pragma unroll
            for (int p = 0; p < S_NI / 2; ++p) {
                uint32_t r[4];
                tc::ldmatrix_x4(r, b_s + tc::swizzle_128b(wn * S_WN + p * 16 + (lane / 16) * 8 + lane % 8,
                                                          kk * 2 + (lane / 8) % 2));
                bf[2 * p][0] = r[0];
                bf[2 * p][1] = r[1];
                bf[2 * p + 1][0] = r[2];
                bf[2 * p + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < S_MI; ++mi)
#pragma unroll
                for (int ni = 0; ni < S_NI; ++ni) tc::mma_m16n8k16_bf16(acc[mi][ni], af[mi], bf[ni], acc[mi][ni]);
        }
    }
    tc::cp_async_wait<0>();  // no copy may still target shared memory when the block exits

    // Epilogue: c[0..1] at (row g, cols 2t, 2t+1), c[2..3] at row g+8 (tc_ptx.cuh's layout).
    const int g = lane / 4, t = lane % 4;
    const bool pairs = (N % 2) == 0;  // float2 stores need 8-byte aligned rows
#pragma unroll
    for (int mi = 0; mi < S_MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < S_NI; ++ni)
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
#endif
}

template <bool kAligned>
static cudaError_t launch_02(int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C, cudaStream_t s,
                             int drop_last_k_tiles) {
    const cudaError_t e = cudalab_allow_dynamic_smem(k02_mma_sync<kAligned>, S_SMEM);
    if (e != cudaSuccess) return e;
    const long long blocks = cdiv(M, S_BM) * cdiv(N, S_BN);
    k02_mma_sync<kAligned><<<(unsigned)blocks, S_THREADS, S_SMEM, s>>>(M, N, K, A, B, C, drop_last_k_tiles, 0, 0);
    return cudaGetLastError();
}

// C[i] = Σ_p parts[p·n + i], the partials in order (the same bits every run, unlike atomics).
static __global__ void k02_sum_parts(const float *__restrict__ parts, int splits, long long n, float *__restrict__ C) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int p = 0; p < splits; ++p) acc += parts[(size_t)p * n + i];
        C[i] = acc;
    }
}

// Why 01_wmma and 02_mma_sync (bf16 tensor cores, cp.async, ldmatrix: sm_80) cannot run on this GPU
// with this build, or nullptr (cuda/common/arch.cuh). 01's and 02's kernels are built for one target,
// so 02's kernel answers for both.
static inline const char *sm80_unsupported_reason() {
    return cudalab_arch::needs_sm(80, (const void *)k02_mma_sync<true>);
}

// 02 on its own, for the programs that run only this rung (transformer_block, collectives) and for
// gemm_tc::launch: the arguments checked, k = 0 writes zeros, then the launch (16-byte cp.async when
// K is a multiple of 8). cudaErrorNotSupported below sm_80 (sm80_unsupported_reason says why),
// cudaErrorInvalidValue for a negative size. No synchronisation.
static inline cudaError_t launch_mma_sync(int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                                          cudaStream_t stream, int drop_last_k_tiles = 0) {
    if (sm80_unsupported_reason() != nullptr) return cudaErrorNotSupported;
    if (M < 0 || N < 0 || K < 0) return cudaErrorInvalidValue;
    if (M == 0 || N == 0) return cudaSuccess;
    if (K == 0) return cudaMemsetAsync(C, 0, (size_t)M * N * sizeof(float), stream);
    return K % 8 == 0 ? launch_02<true>(M, N, K, A, B, C, stream, drop_last_k_tiles)
                      : launch_02<false>(M, N, K, A, B, C, stream, drop_last_k_tiles);
}

// How many ways to split K so that a product with few output tiles and a long K (a weight gradient:
// a small matrix summed over every token) fills `sms` SMs: 1 when the tiles already fill half of
// them, else up to sms / tiles, each split keeping at least 8 K tiles (512), never above max_splits.
static inline int split_k_count(int M, int N, int K, int sms, int max_splits) {
    const long long tiles = cdiv(M, S_BM) * cdiv(N, S_BN);
    if (M <= 0 || N <= 0 || K <= 0 || sms <= 0 || tiles * 2 >= sms) return 1;
    const long long by_k = cdiv(K, S_BK) / 8;
    return (int)std::max<long long>(1, std::min<long long>({(long long)max_splits, sms / tiles, by_k}));
}

// launch_mma_sync with K split `splits` ways: partial products into `parts` (splits·M·N floats,
// 16-byte aligned), then summed into C in a fixed order. splits <= 1 is launch_mma_sync itself.
static inline cudaError_t launch_mma_sync_split_k(int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                                                  float *parts, int splits, cudaStream_t stream) {
    if (splits <= 1 || K <= 0 || M <= 0 || N <= 0) return launch_mma_sync(M, N, K, A, B, C, stream);
    if (sm80_unsupported_reason() != nullptr) return cudaErrorNotSupported;
    if (parts == nullptr || splits > 65535) return cudaErrorInvalidValue;
    const int KT = (int)cdiv(K, S_BK), per = (int)cdiv(KT, splits), used = (int)cdiv(KT, per);
    const size_t n = (size_t)M * N;
    const dim3 grid((unsigned)(cdiv(M, S_BM) * cdiv(N, S_BN)), (unsigned)used);
    if (K % 8 == 0) {
        if (cudaError_t e = cudalab_allow_dynamic_smem(k02_mma_sync<true>, S_SMEM)) return e;
        k02_mma_sync<true><<<grid, S_THREADS, S_SMEM, stream>>>(M, N, K, A, B, parts, 0, per, n);
    } else {
        if (cudaError_t e = cudalab_allow_dynamic_smem(k02_mma_sync<false>, S_SMEM)) return e;
        k02_mma_sync<false><<<grid, S_THREADS, S_SMEM, stream>>>(M, N, K, A, B, parts, 0, per, n);
    }
    if (cudaError_t e = cudaGetLastError()) return e;
    k02_sum_parts<<<(unsigned)std::min<long long>(cdiv((long long)n, 256), 4096), 256, 0, stream>>>(parts, used,
                                                                                                    (long long)n, C);
    return cudaGetLastError();
}

}  // namespace gemm_tc
