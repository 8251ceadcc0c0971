// gemm_tc's dispatch: the variant table, which rung and configuration each variant runs, and the
// launch function the library (gemm_tc.cu) calls. Each rung is a header of its own: k01_wmma.cuh here,
// and under cuda/shared/gemm_tc/ (other programs run them too) k02_mma_sync.cuh (transformer_block,
// collectives), k03_wgmma.cuh (03-06, 08) and k07_wgmma_pingpong.cuh; the tuning table is
// cuda/shared/gemm_tc/configs.cuh and the wgmma rungs' host launch (launch_config, and the
// launch_fastest that collectives' tensor-parallel block calls) cuda/shared/gemm_tc/wgmma_launch.cuh.
//
// gemm_tc kernels: C (M x N, float32, row-major) = A (M x K, bf16, row-major) . B^T, with B given as
// N x K bf16 row-major (the "TN" layout: both operands K-contiguous, like nn.Linear's weight).
// FP32 accumulation on the tensor cores. No cuBLAS here (that lives in gemm_tc.cu).
//
// Rungs (the names come from the one table kVariantNames below):
//   01_wmma      nvcuda::wmma, one warp per 16x16 output fragment, tiles staged in shared memory.
//   02_mma_sync  mma.sync m16n8k16 + ldmatrix, 128x256x64 block tile, 8 warps of 64x64, a multi-stage
//                cp.async pipeline (4 stages) into a 128-byte-swizzled (conflict-free) shared layout.
//   03_wgmma     sm_90a: TMA (cp.async.bulk.tensor) into 128B-swizzled shared memory, an mbarrier
//                pipeline, one producer warpgroup and two consumer warpgroups issuing wgmma.
//   04_wgmma_persistent, 05_wgmma_cluster, 06_wgmma_tuned: 03's body under another schedule; each of
//                03-06 runs one entry of kWgmmaConfigs (schedule, stages, raster; 06: the tuned one).
//   07_wgmma_pingpong  sm_90a: CUTLASS's "ping-pong" schedule. Persistent, one block per SM;
//                each consumer warpgroup owns whole 128x128 tiles, the two take alternate tiles and
//                take turns on the tensor cores (named barriers), so one's epilogue runs under the
//                other's mainloop.
//   08_wgmma_tma_store  sm_90a: 04 with the epilogue off the global-store path (registers ->
//                swizzled shared memory -> TMA store, drained under the next tile's mainloop) and a
//                balanced persistent grid (as few blocks as keep the same number of rounds).
//
// Ragged shapes: 01 takes any M, N, K. 02 takes any M, N, K (K a multiple of 8 uses 16-byte
// cp.async; any other K takes a slower element-wise load path with the same layout). 03-08 take any
// M, N (TMA's out-of-bounds boxes read as zeros, stores are masked) and any K: TMA needs 16-byte
// global row strides, so a K that is not a multiple of 8 runs on zero-padded copies
// (launch_03_padded). `requirement()` names any rule before a launch.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

#include "check.cuh"
#include "gemm_tc/configs.cuh"
#include "gemm_tc/k02_mma_sync.cuh"
#include "gemm_tc/wgmma_launch.cuh"
#include "k01_wmma.cuh"

namespace gemm_tc {

enum Variant {
    V01_WMMA = 0,
    V02_MMA_SYNC = 1,
    V03_WGMMA = 2,
    V04_WGMMA_PERSISTENT = 3,
    V05_WGMMA_CLUSTER = 4,
    V06_WGMMA_TUNED = 5,
    V07_WGMMA_PINGPONG = 6,
    V08_WGMMA_TMA_STORE = 7,
    VCUBLAS_BF16 = 8,
    VCUBLAS_TF32 = 9,
    VCOUNT = 10
};
// THE variant table: gemm_tc_variant_name(i) and the executable read it; order = the learner's order.
static const char *const kVariantNames[VCOUNT] = {"01_wmma",          "02_mma_sync",    "03_wgmma",
                                                  "04_wgmma_persistent", "05_wgmma_cluster", "06_wgmma_tuned",
                                                  "07_wgmma_pingpong", "08_wgmma_tma_store", "cublas_bf16",
                                                  "cublas_tf32"};

// The sm_90a rungs (TMA + mbarrier + wgmma): 03's kernel body under 03, 04, 05 (and 06 with whichever
// configuration it runs), and 07's ping-pong kernel. All of them run one entry of kWgmmaConfigs.
static inline bool is_wgmma(int v) {
    return v == V03_WGMMA || v == V04_WGMMA_PERSISTENT || v == V05_WGMMA_CLUSTER || v == V06_WGMMA_TUNED ||
           v == V07_WGMMA_PINGPONG || v == V08_WGMMA_TMA_STORE;
}

static inline int variant_index(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < VCOUNT; ++i)
        if (strcmp(name, kVariantNames[i]) == 0) return i;
    return -1;
}

// The configuration a wgmma variant runs, -1 for the others.
static inline int variant_config(int v) {
    static const int c03 = config_index(kDefault03), c04 = config_index(kDefault04), c05 = config_index(kDefault05),
                     c07 = config_index(kDefault07), c08 = config_index(kDefault08);
    switch (v) {
        case V03_WGMMA: return c03;
        case V04_WGMMA_PERSISTENT: return c04;
        case V05_WGMMA_CLUSTER: return c05;
        case V07_WGMMA_PINGPONG: return c07;
        case V08_WGMMA_TMA_STORE: return c08;
        case V06_WGMMA_TUNED: return tuned_config();
        default: return -1;
    }
}

// ================================================================================================
// The plain launch function
// ================================================================================================
// Why a variant cannot take (M, N, K) on this device, or nullptr when it can. Nothing is launched.
static inline const char *requirement(int variant, int M, int N, int K) {
    if (M < 0 || N < 0 || K < 0) return "m, n and k must be >= 0";
    // 01's 2-D grid puts row blocks on y, which holds at most CUDALAB_MAX_GRID_YZ of them (02 and 03
    // number their tiles on x, which holds 2^31 - 1).
    static_assert(CUDALAB_MAX_GRID_YZ * W_BM == 2097120, "the sentence below names this limit");
    if (variant == V01_WMMA && cdiv(M, W_BM) > CUDALAB_MAX_GRID_YZ)
        return "01_wmma takes m at most 2097120 (the grid's y limit: 65535 blocks of 32 rows)";
    if (is_wgmma(variant)) return wgmma_requirement(M, N, K);
    return nullptr;
}

// Enqueue C = A . B^T (A: M x K, B: N x K, bf16 bits; C: M x N float32) on `stream` with variant
// 01_wmma, 02_mma_sync, 03_wgmma, 04_wgmma_persistent, 05_wgmma_cluster, 06_wgmma_tuned,
// 07_wgmma_pingpong or 08_wgmma_tma_store. No synchronisation. k = 0 writes zeros. Returns cudaErrorInvalidValue for another
// variant or a shape `requirement` refuses, cudaErrorNotSupported for 03-08 where it was not built
// for (or cannot run on) sm_90a, and for 01-02 below sm_80 (sm80_unsupported_reason says why).
static inline cudaError_t launch(int variant, int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                                 cudaStream_t stream, int drop_last_k_tiles = 0) {
    // 02 checks its own arguments (its header serves the programs that run only this rung).
    if (variant == V02_MMA_SYNC) return launch_mma_sync(M, N, K, A, B, C, stream, drop_last_k_tiles);
    if (is_wgmma(variant) && !wgmma_available()) return cudaErrorNotSupported;
    if (variant == V01_WMMA && sm80_unsupported_reason() != nullptr) return cudaErrorNotSupported;
    if (requirement(variant, M, N, K) != nullptr) return cudaErrorInvalidValue;
    if (is_wgmma(variant)) return launch_config(variant_config(variant), M, N, K, A, B, C, stream, drop_last_k_tiles);
    if (M == 0 || N == 0) return cudaSuccess;
    if (K == 0) return cudaMemsetAsync(C, 0, (size_t)M * N * sizeof(float), stream);
    switch (variant) {
        case V01_WMMA: {
            dim3 grid((unsigned)cdiv(N, W_BN), (unsigned)cdiv(M, W_BM));
            k01_wmma<<<grid, 128, 0, stream>>>(M, N, K, A, B, C);
            return cudaGetLastError();
        }
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace gemm_tc
