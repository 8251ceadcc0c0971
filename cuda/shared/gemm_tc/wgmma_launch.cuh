// The host launch of gemm_tc's sm_90a rungs, shared: any entry of configs.cuh on any shape
// (launch_config: gemm_tc's variants 03-08 and its tuner), and launch_fastest, the lab's fastest GEMM
// for the programs that borrow it (collectives' tensor-parallel block): the wgmma rung gemm_tc's
// tuning picks for a large GEMM where this build and GPU have sm_90a, gemm_tc's 02_mma_sync elsewhere.
// C (M x N, float32, row-major) = A (M x K, bf16) . B^T (B: N x K bf16), both K-contiguous.
// Include as "gemm_tc/wgmma_launch.cuh" (the Makefile passes -Icuda/shared); a program that wants the
// wgmma path compiles sm_90a the way cuda/gemm_tc/build.mk does (GENCODE_SM90A, CUDALAB_HAVE_SM90A).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "check.cuh"
#include "gemm_tc/configs.cuh"
#include "gemm_tc/k02_mma_sync.cuh"
#include "gemm_tc/k03_wgmma.cuh"
#include "gemm_tc/k07_wgmma_pingpong.cuh"

namespace gemm_tc {

// Any wgmma configuration (03's body under 03-05, 07's ping-pong kernel) on K a multiple of 8.
static inline cudaError_t launch_03(int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                                    cudaStream_t stream, int drop_last_k_tiles, const WgmmaConfig &cf, int max_sms) {
    if (((uintptr_t)A | (uintptr_t)B) % 16 != 0) return cudaErrorInvalidValue;  // TMA: 16-byte aligned bases
    if (cf.how == Schedule::PingPong) {  // 128-row boxes of A and of B: maps of their own
        static MapCache pa, pb;
        const CUtensorMap *ma = nullptr, *mb = nullptr;
        cudaError_t e = cached_map(pa, &ma, A, M, K, P_BM);
        if (e == cudaSuccess) e = cached_map(pb, &mb, B, N, K, P_BN);
        if (e != cudaSuccess) return e;
        return cf.stages == 4 ? launch_pingpong<4>(M, N, K, *ma, *mb, C, stream, drop_last_k_tiles, cf.raster, max_sms)
                              : launch_pingpong<P_STAGES>(M, N, K, *ma, *mb, C, stream, drop_last_k_tiles, cf.raster, max_sms);
    }
    const bool cluster = cf.how == Schedule::Cluster2 || cf.how == Schedule::Cluster2Store;
    // One cached map pair per box shape: 05 fetches B in 128-row halves.
    static MapCache ca, cb, cb_half, cc;
    const CUtensorMap *pa = nullptr, *pb = nullptr, *pc = nullptr;
    cudaError_t e = cached_map(ca, &pa, A, M, K, H_BM);
    if (e != cudaSuccess) return e;
    e = cached_map(cluster ? cb_half : cb, &pb, B, N, K, cluster ? H_BN / 2 : H_BN);
    if (e != cudaSuccess) return e;
    const CUtensorMap &ma = *pa, &mb = *pb;
    // The kernels without a TMA store never read their C map: they get A's.
    if (cf.how == Schedule::PersistentStore || cf.how == Schedule::Cluster2Store) {
        // TMA stores need a 16-byte row pitch and base: any other N (or C) keeps 08's grid with 04's
        // (05's) direct stores.
        if (N % 4 != 0 || (uintptr_t)C % 16 != 0)
            return cluster ? launch_wgmma<2, 4, false>(M, N, K, ma, mb, ma, C, stream, drop_last_k_tiles, cf.how, cf.raster, max_sms)
                           : launch_wgmma<1, 4, false>(M, N, K, ma, mb, ma, C, stream, drop_last_k_tiles, cf.how, cf.raster, max_sms);
        e = cached_map_c(cc, &pc, C, M, N);
        if (e != cudaSuccess) return e;
        return cluster ? launch_wgmma<2, 4, true>(M, N, K, ma, mb, *pc, C, stream, drop_last_k_tiles, cf.how, cf.raster, max_sms)
                       : launch_wgmma<1, 4, true>(M, N, K, ma, mb, *pc, C, stream, drop_last_k_tiles, cf.how, cf.raster, max_sms);
    }
    if (cluster)
        return cf.stages == 3 ? launch_wgmma<2, 3, false>(M, N, K, ma, mb, ma, C, stream, drop_last_k_tiles, cf.how, cf.raster, max_sms)
                              : launch_wgmma<2, 4, false>(M, N, K, ma, mb, ma, C, stream, drop_last_k_tiles, cf.how, cf.raster, max_sms);
    return cf.stages == 3 ? launch_wgmma<1, 3, false>(M, N, K, ma, mb, ma, C, stream, drop_last_k_tiles, cf.how, cf.raster, max_sms)
                          : launch_wgmma<1, 4, false>(M, N, K, ma, mb, ma, C, stream, drop_last_k_tiles, cf.how, cf.raster, max_sms);
}

// k not a multiple of 8: TMA needs 16-byte row strides, so A and B are copied, stream-ordered, into
// zero-padded (rows x k8) buffers, k8 = k rounded up to 8; the zero columns add nothing to C. It is
// the fallback, not a fast path: on the H100, 4096 x 4096 x 4095 took 0.372 ms against 0.193 ms at
// k = 4096 (the memset and the two odd-pitch 2-D copies cost as much as the product).
static inline cudaError_t launch_03_padded(int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                                           cudaStream_t stream, int drop_last_k_tiles, const WgmmaConfig &cf,
                                           int max_sms) {
    const int K8 = (int)cdiv(K, 8) * 8;
    const size_t bytes_a = (size_t)M * K8 * 2, bytes_b = (size_t)N * K8 * 2;
    void *pa = nullptr, *pb = nullptr;
    cudaError_t e = cudaMallocAsync(&pa, bytes_a + bytes_b, stream);
    if (e != cudaSuccess) return e;
    pb = (char *)pa + bytes_a;  // 256-byte aligned pool allocation; bytes_a is a multiple of 16
    e = cudaMemsetAsync(pa, 0, bytes_a + bytes_b, stream);
    if (e == cudaSuccess)
        e = cudaMemcpy2DAsync(pa, (size_t)K8 * 2, A, (size_t)K * 2, (size_t)K * 2, M, cudaMemcpyDeviceToDevice, stream);
    if (e == cudaSuccess)
        e = cudaMemcpy2DAsync(pb, (size_t)K8 * 2, B, (size_t)K * 2, (size_t)K * 2, N, cudaMemcpyDeviceToDevice, stream);
    if (e == cudaSuccess)
        e = launch_03(M, N, K8, (const uint16_t *)pa, (const uint16_t *)pb, C, stream, drop_last_k_tiles, cf, max_sms);
    const cudaError_t f = cudaFreeAsync(pa, stream);
    return e != cudaSuccess ? e : f;
}

// Enqueue C = A . B^T with tuning configuration `config` (an index into kWgmmaConfigs). k = 0 writes
// zeros; k not a multiple of 8 takes the padded copy. cudaErrorInvalidValue for an unknown index,
// cudaErrorNotSupported where there is no sm_90a. max_sms > 0: a persistent schedule's grid uses at
// most that many SMs (sm_count); gemm_tc's own launches pass 0, every SM.
static inline cudaError_t launch_config(int config, int M, int N, int K, const uint16_t *A, const uint16_t *B,
                                        float *C, cudaStream_t stream, int drop_last_k_tiles = 0, int max_sms = 0) {
    if (config < 0 || config >= kWgmmaConfigCount || M < 0 || N < 0 || K < 0) return cudaErrorInvalidValue;
    if (!wgmma_available()) return cudaErrorNotSupported;
    if (M == 0 || N == 0) return cudaSuccess;
    if (K == 0) return cudaMemsetAsync(C, 0, (size_t)M * N * sizeof(float), stream);
    const WgmmaConfig &cf = kWgmmaConfigs[config];
    return K % 8 == 0 ? launch_03(M, N, K, A, B, C, stream, drop_last_k_tiles, cf, max_sms)
                      : launch_03_padded(M, N, K, A, B, C, stream, drop_last_k_tiles, cf, max_sms);
}


// ================================================================================================
// The fastest GEMM, for other programs
// ================================================================================================
// The configuration launch_fastest runs: 08_wgmma_tma_store's compiled default. On both GPUs the
// tuner's winner at 4096^3 is an 08 configuration (H100: -s4-gm16, bench/results/h100/gemm_tc-tune.json,
// 1% above this one; H200: -c2-s4-gn8, bench/results/h200/NOTES-gemm_tc.md), and at 8192^3 08 is the
// rung at cuBLAS's level on both (the NOTES). The C side never reads the tuner's cache (the Python
// side hands it to gemm_tc alone), so the borrowers run this fixed choice. Its grid is persistent
// (one block per SM at most, balanced rounds), which is what lets max_sms leave SMs to another kernel.
static const char *const kFastest = kDefault08;
static inline int fastest_config() {
    static const int i = config_index(kFastest);
    return i;
}

// Why the fastest wgmma rung cannot take this GEMM here, or nullptr when it can: sm_90a first (build
// and GPU, arch.cuh's sentence), then TMA's rules: 16-byte aligned bases and rows of K x 2 bytes a
// multiple of 16 (K % 8 == 0). gemm_tc's own variants pad such a K (launch_03_padded); a borrower
// takes 02 instead, which reads any K and any alignment in place.
static inline const char *fastest_wgmma_refusal(int K, const void *A, const void *B) {
    if (const char *why = wgmma_unsupported_reason()) return why;
    if (K % 8 != 0) return "the wgmma GEMM needs K a multiple of 8 (TMA: rows of a multiple of 16 bytes)";
    if (((uintptr_t)A | (uintptr_t)B) % 16 != 0) return "the wgmma GEMM needs 16-byte aligned A and B (TMA)";
    return nullptr;
}

// The wgmma rung alone: cudaErrorNotSupported / cudaErrorInvalidValue where fastest_wgmma_refusal
// says why not (nothing launched). max_sms as in launch_config.
static inline cudaError_t launch_fastest_wgmma(int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                                               cudaStream_t stream, int max_sms = 0) {
    if (M < 0 || N < 0 || K < 0) return cudaErrorInvalidValue;
    if (wgmma_unsupported_reason() != nullptr) return cudaErrorNotSupported;
    if (fastest_wgmma_refusal(K, A, B) != nullptr) return cudaErrorInvalidValue;
    return launch_config(fastest_config(), M, N, K, A, B, C, stream, 0, max_sms);
}

// Enqueue C = A . B^T on `stream` with the fastest GEMM that takes it: the wgmma rung above, else 02
// (no sm_90a here, K not a multiple of 8, or a base off 16 bytes). No synchronisation; k = 0 writes
// zeros. cudaErrorNotSupported below sm_80 (sm80_unsupported_reason says why). max_sms caps the wgmma
// rung's persistent grid (02 launches one block per tile and takes no cap).
static inline cudaError_t launch_fastest(int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                                         cudaStream_t stream, int max_sms = 0) {
    if (M >= 0 && N >= 0 && K >= 0 && fastest_wgmma_refusal(K, A, B) == nullptr)
        return launch_config(fastest_config(), M, N, K, A, B, C, stream, 0, max_sms);
    return launch_mma_sync(M, N, K, A, B, C, stream);
}

}  // namespace gemm_tc
