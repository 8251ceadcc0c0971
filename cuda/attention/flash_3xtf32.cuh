// 04_flash_3xtf32: FP32 attention on the tensor cores, with FP32 accuracy. Included by
// attention_kernels.cuh after flash_bf16.cuh (whose mask and online-softmax helpers it shares).
//
// Q, K, V, O are float32, B×H×S×D, D = 64 or 128. Every product a·b of the two matrix products is
// done as ahi·bhi + ahi·blo + alo·bhi on mma.sync m16n8k8 TF32 (tc::split_tf32: hi = a rounded to
// tf32, lo = a - hi), which keeps ~21 bits of each product: the "3xTF32" that torch's own FP32
// attention kernel uses. Softmax and accumulation are FP32.
//
// Same skeleton as 03_flash_bf16: 8 warps × 16 query rows, 64-key tiles of K and V in a cp.async
// pipeline, one barrier per tile. Differences, all from the 32-bit operands:
// - Q stays in shared memory (rows of D+8 floats, like K) and is re-read and split at each use:
//   its raw A fragments alone would take 64 registers at D=128, which with the 64 of O and the 32
//   of S spills (255 registers, measured with ptxas); hi and lo would take 128.
// - No ldmatrix (it moves 16-bit pairs); fragments come from plain shared loads. Inside each k8
//   step the k index is permuted, logical k = t ↔ element 2t, k = t+4 ↔ element 2t+1, for both
//   operands: a dot product does not care about the order of its terms, and then
//     Q·Kᵀ: a[0], a[2] = Q(g, 2t), Q(g, 2t+1) and b[0], b[1] = K(key g, 2t), K(key g, 2t+1) are
//           8-byte pairs (one LDS.64 for b);
//     P·V:  a[0..3] = p(g, 2t), p(g+8, 2t), p(g, 2t+1), p(g+8, 2t+1) are the S accumulators of
//           the same key tile as they stand, and b[0], b[1] = V(key 2t, n = g), V(key 2t+1, g).
// - Shared-memory rows padded, not swizzled: K rows of D+8 floats (the 16 lanes of a half-warp
//   reading 8-byte pairs at g·(D+8) + 2t cover all 32 banks once), V rows of D+4 floats (the 32
//   lanes reading (2t)·(D+4) + g hit 32 different banks).
#pragma once

#include "flash_bf16.cuh"

template <int D>
struct Flash3xTf32Cfg {
    static constexpr int STAGES = 2;
    static constexpr int K_LD = D + 8, V_LD = D + 4;  // floats per shared row
    static constexpr int K_BYTES = FB_BC * K_LD * 4, V_BYTES = FB_BC * V_LD * 4;
    static constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
    static constexpr int Q_BYTES = FB_BR * K_LD * 4;
    static constexpr size_t SMEM = (size_t)Q_BYTES + (size_t)STAGES * STAGE_BYTES;  // 207 KB at D=128
};

#if CUDALAB_SM80_CODE  // cp.async and mma.sync tf32: sm_80 (the kernel body is compiled out below it)
// Copy rows [r0, r0+ROWS) of an S×D float slab into a [ROWS][LD] shared tile, 16 bytes per
// cp.async; rows at or past S are zero-filled.
template <int D, int LD, int ROWS = FB_BC>
__device__ __forceinline__ void ft_load_tile(uint32_t dst, const float *__restrict__ src, int r0, int S) {
    constexpr int CHUNKS = D / 4;
    static_assert((ROWS * CHUNKS) % FB_NT == 0, "tile copy must divide evenly over the block");
    const float *base = src + (size_t)r0 * D;
#pragma unroll
    for (int i = 0; i < ROWS * CHUNKS / FB_NT; ++i) {
        const int idx = threadIdx.x + i * FB_NT;
        const int r = idx / CHUNKS, c = idx % CHUNKS;
        const bool in = r0 + r < S;
        tc::cp_async_16_zfill(dst + (uint32_t)(r * LD + c * 4) * 4u, in ? base + (r * D + c * 4) : src, in ? 16 : 0);
    }
}

// acc += a·b in 3xTF32, small terms first.
__device__ __forceinline__ void mma_3xtf32(float (&acc)[4], const uint32_t (&ahi)[4], const uint32_t (&alo)[4],
                                           const uint32_t (&bhi)[2], const uint32_t (&blo)[2]) {
    tc::mma_m16n8k8_tf32(acc, alo, bhi, acc);
    tc::mma_m16n8k8_tf32(acc, ahi, blo, acc);
    tc::mma_m16n8k8_tf32(acc, ahi, bhi, acc);
}
#endif

template <int D>
__global__ void __launch_bounds__(FB_NT, 1)
    attn_flash_3xtf32_fwd(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
                          float *__restrict__ O, int S, float scale_log2e, int causal) {
#if CUDALAB_SM80_CODE  // the host refuses a build or GPU below sm_80 (cudalab_arch::needs_sm)
    using C = Flash3xTf32Cfg<D>;
    extern __shared__ __align__(128) unsigned char ft_smem[];
    const uint32_t sbase = tc::smem_u32(ft_smem);

    const size_t slab = (size_t)blockIdx.y * S * D;
    Q += slab;
    K += slab;
    V += slab;
    O += slab;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FB_BR;  // heavy (causal) query tiles first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int qw = q0 + warp * 16;
    const int kv_end = causal ? min(S, q0 + FB_BR) : S;
    const int n_tiles = (int)cdiv(kv_end, FB_BC);

    // Prologue: Q (read by this block only, so its own commit group), then STAGES-1 K/V tiles.
    const uint32_t sQ = sbase + C::STAGES * C::STAGE_BYTES;
    ft_load_tile<D, C::K_LD, FB_BR>(sQ, Q, q0, S);
    tc::cp_async_commit();
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; ++s) {
        if (s < n_tiles) {
            ft_load_tile<D, C::K_LD>(sbase + s * C::STAGE_BYTES, K, s * FB_BC, S);
            ft_load_tile<D, C::V_LD>(sbase + s * C::STAGE_BYTES + C::K_BYTES, V, s * FB_BC, S);
        }
        tc::cp_async_commit();
    }
    // This warp's Q rows g and g+8: A(g, k = t) = Q(g, 8kk + 2t), A(g, k = t+4) = Q(g, 8kk + 2t + 1).
    const float *q_g = reinterpret_cast<const float *>(ft_smem + C::STAGES * C::STAGE_BYTES) +
                       (warp * 16 + g) * C::K_LD + 2 * t;
    const float *q_g8 = q_g + 8 * C::K_LD;

    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int tile = 0; tile < n_tiles; ++tile) {
        tc::cp_async_wait<C::STAGES - 2>();  // tile `tile` has landed (this thread's copies) ...
        __syncthreads();  // ... everyone's, and every warp is done with the stage reused below
        {
            const int nt = tile + C::STAGES - 1;
            const uint32_t st = sbase + (nt % C::STAGES) * C::STAGE_BYTES;
            if (nt < n_tiles) {
                ft_load_tile<D, C::K_LD>(st, K, nt * FB_BC, S);
                ft_load_tile<D, C::V_LD>(st + C::K_BYTES, V, nt * FB_BC, S);
            }
            tc::cp_async_commit();
        }
        const int k0 = tile * FB_BC;
        if (causal && k0 > qw + 15) continue;  // wholly above the diagonal for this warp
        const float *sK = reinterpret_cast<const float *>(ft_smem + (tile % C::STAGES) * C::STAGE_BYTES);
        const float *sV = reinterpret_cast<const float *>(ft_smem + (tile % C::STAGES) * C::STAGE_BYTES + C::K_BYTES);

        float s[FB_BC / 8][4];
#pragma unroll
        for (int j = 0; j < FB_BC / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 8; ++kk) {
            const float2 x0 = *reinterpret_cast<const float2 *>(q_g + 8 * kk);
            const float2 x1 = *reinterpret_cast<const float2 *>(q_g8 + 8 * kk);
            uint32_t ahi[4], alo[4];
            tc::split_tf32(x0.x, ahi[0], alo[0]);
            tc::split_tf32(x1.x, ahi[1], alo[1]);
            tc::split_tf32(x0.y, ahi[2], alo[2]);
            tc::split_tf32(x1.y, ahi[3], alo[3]);
#pragma unroll
            for (int j = 0; j < FB_BC / 8; ++j) {
                const float2 kv = *reinterpret_cast<const float2 *>(sK + (8 * j + g) * C::K_LD + 8 * kk + 2 * t);
                uint32_t bhi[2], blo[2];
                tc::split_tf32(kv.x, bhi[0], blo[0]);
                tc::split_tf32(kv.y, bhi[1], blo[1]);
                mma_3xtf32(s[j], ahi, alo, bhi, blo);
            }
        }

        if (k0 + FB_BC > S || (causal && k0 + FB_BC - 1 > qw)) flash_mask_tile(s, k0, qw, S, causal != 0);
        flash_online_softmax(s, m, l, o, scale_log2e);

        // O += P·V, one k8 step per key tile j (keys permuted as described at the top). Each group
        // of NG n8 tiles sums the whole key tile in a fresh accumulator, then adds it to O with an
        // FP32 add: the tensor core's own FP32 accumulation does not round to nearest, and summing
        // thousands of keys in it drifted to ~2e-5 relative at S=4097 (H100, first run); per tile the
        // drift stays at 64 keys' worth.
        constexpr int NG = 4;
#pragma unroll
        for (int n0 = 0; n0 < D / 8; n0 += NG) {
            float acc[NG][4];
#pragma unroll
            for (int n = 0; n < NG; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
            for (int j = 0; j < FB_BC / 8; ++j) {
                uint32_t ahi[4], alo[4];
                tc::split_tf32(s[j][0], ahi[0], alo[0]);
                tc::split_tf32(s[j][2], ahi[1], alo[1]);
                tc::split_tf32(s[j][1], ahi[2], alo[2]);
                tc::split_tf32(s[j][3], ahi[3], alo[3]);
                const float *v0 = sV + (8 * j + 2 * t) * C::V_LD + 8 * n0 + g;
#pragma unroll
                for (int n = 0; n < NG; ++n) {
                    uint32_t bhi[2], blo[2];
                    tc::split_tf32(v0[8 * n], bhi[0], blo[0]);
                    tc::split_tf32(v0[C::V_LD + 8 * n], bhi[1], blo[1]);
                    mma_3xtf32(acc[n], ahi, alo, bhi, blo);
                }
            }
#pragma unroll
            for (int n = 0; n < NG; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[n0 + n][e] += acc[n][e];
        }
    }
    tc::cp_async_wait<0>();
    flash_store_o<D>(O, o, l, qw, S);
#endif
}

template <int D>
static inline cudaError_t attn_flash_3xtf32_launch(int BH, int S, const float *q, const float *k, const float *v,
                                                   float *o, float scale, int causal, cudaStream_t stream) {
    const size_t smem = Flash3xTf32Cfg<D>::SMEM;
    if (cudalab_arch::needs_sm(80, (const void *)attn_flash_3xtf32_fwd<D>) != nullptr) return cudaErrorNotSupported;
    const cudaError_t e = cudalab_allow_dynamic_smem(attn_flash_3xtf32_fwd<D>, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)cdiv(S, FB_BR), (unsigned)BH);
    attn_flash_3xtf32_fwd<D><<<grid, FB_NT, smem, stream>>>(q, k, v, o, S, scale * CUDALAB_LOG2E, causal);
    return cudaGetLastError();
}
