// gemm_tc's 01_wmma rung (nvcuda::wmma, bf16 in, FP32 out; sm_80). Launched by dispatch.cuh.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include <cstdint>

#include "arch.cuh"
#include "check.cuh"

namespace gemm_tc {

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
#if CUDALAB_SM80_CODE  // wmma on bf16 needs sm_80; the host refuses older targets (needs_sm80 below)
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
#endif
}

}  // namespace gemm_tc
