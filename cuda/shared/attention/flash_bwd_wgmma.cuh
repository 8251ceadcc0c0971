// 08_flash_bwd_wgmma: FlashAttention-3's backward on Hopper (sm_90a), simplified. Included by
// attention_kernels.cuh after flash_wgmma.cuh (its tensor maps) and flash_bwd.cuh (the Di
// preprocessing, the dQ accumulator's rounding, the launch around the main kernel).
//
// The same mathematics and the same pass as 07_flash_bwd_bf16 (a block owns a block of keys, walks
// the query tiles, accumulates dK and dV in FP32 registers and adds its share of dQ into an FP32
// buffer with atomics); what changes is how the products reach the tensor cores:
//   - One warpgroup (4 warps, 128 threads) owns BC = 64 keys, the M side of every wgmma m64nNk16 but
//     the last: the products are computed transposed so that their results are the next product's
//     register operand, as P is in the forward (05):
//       Sᵀ  = K_j·Q_iᵀ     SS wgmma: K and Q both K-major (D contiguous) straight from their TMA tiles
//       dPᵀ = V_j·dO_iᵀ    the same with V and dO
//       Pᵀ  = exp2(Sᵀ·scale·log2e − LSE_i·log2e),  dSᵀ = Pᵀ ∘ (dPᵀ − Di)   (in registers, masked)
//       dV += Pᵀ·dO_i      RS wgmma: Pᵀ's accumulator, packed to bf16, is the A fragment; dO_i is
//                          read MN-major ("transposed": stored queries × D, the layout V has in 05)
//       dK += dSᵀ·Q_i      the same with dSᵀ and Q_i
//       dQ_i += dS·K_j     M = the 64 queries: dSᵀ goes to shared memory ([key][query], 4-byte
//                          stores), comes back as dS's A fragments by transposed ldmatrix, and K_j
//                          is read MN-major; one N = 64 slice of D at a time, added to the FP32 dQ
//                          with float4 atomics (red.global.add.v4.f32 on sm_90)
//   - Loads by TMA (cp.async.bulk.tensor, the 3-D maps of 05: rows past S arrive as zeros): K and V
//     once, the query tiles (BR = 64 rows of Q and dO) double-buffered, each stage guarded by an
//     mbarrier. One thread issues them; the next-but-one tile goes into a stage once every thread
//     has passed the barrier that ends the iteration that read it. The next tile's LSE and Di go
//     to shared memory by cp.async (a float a thread) while this tile's products run.
//   - No warp specialisation, no ping-pong, no overlap of the elementwise step with the products
//     beyond wgmma's own asynchrony (dK/dV run while dSᵀ is stored and dS loaded back): the simple
//     form first. Several blocks share an SM, so one block's elementwise step, waits and atomics hide
//     behind another's products: two at D=128 (104 KB of shared memory, 252 registers), three at
//     D=64 (56 KB; the launch bound caps the registers at 168, which ptxas meets without spilling,
//     and the third block ran D=64 5-10% faster on an H100).
// Causal: a key block starts at the query tile of its first key (BR = BC, so tile k0/64); only the
// tiles crossing the diagonal or S are masked element by element.
// Registers per thread: dK and dV D/2 each, Sᵀ and dPᵀ 32 each, the bf16 fragments 16 each, dQ 32.
#pragma once

#include <cstdint>

#include "check.cuh"
#include "cudalab.h"
#include "flash_bf16.cuh"
#include "flash_bwd.cuh"
#include "flash_wgmma.cuh"
#include "tc_ptx.cuh"
#include "tma_host.cuh"

// The chain a 64-key warpgroup runs on each query tile, shared by 08 (one warpgroup a block) and
// 09 (flash_bwd_ws.cuh: two consumer warpgroups of a warp-specialised block). Fragment layout: warp w
// of the warpgroup holds keys 16w+g and 16w+g+8 (g = lane/4, t = lane%4); element e = 2h + c of n8
// block j of an accumulator is key 16w + g + 8h, query (or column) 8j + 2t + c.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace fbw {

// Descriptors (flash_wgmma.cuh explains the fields): K-major operands, k16 step kk in panel kk/4 at
// 32·(kk%4) bytes; MN-major ones, k16 step kk 16 rows (2048 bytes) on, 64-column panels apart.
__device__ __forceinline__ uint64_t kmaj(uint32_t tile, int rows, int kk) {
    return tc::wgmma_desc_sw128(tile + (kk / 4) * rows * 128) + 2 * (kk % 4);
}
__device__ __forceinline__ uint64_t mnmaj(uint32_t tile, int rows, int kk) {
    return tc::wgmma_desc_sw128_mn(tile + kk * 2048, rows * 128);
}

// Sᵀ = K_j·Q_iᵀ and dPᵀ = V_j·dO_iᵀ (64 keys × BR queries, SS wgmma, K-major tiles as TMA wrote them),
// two commit groups so the element-wise step can start on Sᵀ while dPᵀ is still computed.
template <int D, int BR>
__device__ __forceinline__ void issue_sdp(float (&st)[BR / 2], float (&dpt)[BR / 2], uint32_t sK, uint32_t sV,
                                          uint32_t sQ, uint32_t sdO) {
    tc::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) tc::wgmma_ss<BR>(st, kmaj(sK, 64, kk), kmaj(sQ, BR, kk), kk > 0);
    tc::wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) tc::wgmma_ss<BR>(dpt, kmaj(sV, 64, kk), kmaj(sdO, BR, kk), kk > 0);
    tc::wgmma_commit();
}

// Pᵀ in place of Sᵀ from the tile's log-sum-exp; Masked zeroes what lies past S or above the diagonal.
template <int BR, bool Masked>
__device__ __forceinline__ void probs(float (&st)[BR / 2], const float *lse_s, int k_first, int q0, int S, int causal,
                                      float scale_log2e, int w, int g, int t) {
#pragma unroll
    for (int j = 0; j < BR / 8; ++j) {
        const float2 lv = *reinterpret_cast<const float2 *>(lse_s + 8 * j + 2 * t);
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int qi = q0 + 8 * j + 2 * t + c;
            const float l2 = (c ? lv.y : lv.x) * CUDALAB_LOG2E;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int kj = k_first + 16 * w + g + 8 * h;
                float p = tc::exp2_approx(fmaf(st[4 * j + 2 * h + c], scale_log2e, -l2));
                if constexpr (Masked)
                    if (qi >= S || kj >= S || (causal && kj > qi)) p = 0.0f;
                st[4 * j + 2 * h + c] = p;
            }
        }
    }
}

// Pᵀ = exp2(Sᵀ·scale·log2e − LSE_i·log2e) and dSᵀ = Pᵀ ∘ (dPᵀ − Di), masked (keys from k_first, queries
// from q0; past S, and above the diagonal when causal), once the last two commit groups (issue_sdp's)
// land; then both as bf16 A fragments, k16 step kk = queries 16kk..16kk+15 (05's packing of P).
// lse_s and di_s: the tile's BR statistics in shared memory.
template <int BR>
__device__ __forceinline__ void p_and_ds(float (&st)[BR / 2], float (&dpt)[BR / 2], uint32_t (&pa)[BR / 16][4],
                                         uint32_t (&da)[BR / 16][4], const float *lse_s, const float *di_s,
                                         int k_first, int q0, int S, int causal, float scale_log2e, int w, int g,
                                         int t) {
    const bool edge = k_first + 64 > S || q0 + BR > S || (causal && q0 < k_first + 64 - 1);
    tc::wgmma_wait<1>();
    tc::reg_fence(st);
    // Two instantiations, so that interior tiles run none of the mask arithmetic.
    if (edge)
        probs<BR, true>(st, lse_s, k_first, q0, S, causal, scale_log2e, w, g, t);
    else
        probs<BR, false>(st, lse_s, k_first, q0, S, causal, scale_log2e, w, g, t);
    tc::wgmma_wait<0>();
    tc::reg_fence(dpt);
#pragma unroll
    for (int j = 0; j < BR / 8; ++j) {
        const float2 dv2 = *reinterpret_cast<const float2 *>(di_s + 8 * j + 2 * t);
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const float di = c ? dv2.y : dv2.x;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int e = 4 * j + 2 * h + c;
                dpt[e] = st[e] * (dpt[e] - di);  // Pᵀ is 0 where masked, so dSᵀ is too
            }
        }
    }
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int e = 4 * (2 * kk + r / 2) + 2 * (r % 2);  // r: (block 2kk, row g), (2kk, g+8), (2kk+1, g), ...
            pa[kk][r] = tc::pack_bf16x2(st[e], st[e + 1]);
            da[kk][r] = tc::pack_bf16x2(dpt[e], dpt[e + 1]);
        }
    }
}

// dV += Pᵀ·dO_i, dK += dSᵀ·Q_i (N = D; RS wgmma, dO and Q read MN-major from their tiles), one commit group.
template <int D, int BR>
__device__ __forceinline__ void issue_dkdv(float (&dv)[D / 2], float (&dk)[D / 2], const uint32_t (&pa)[BR / 16][4],
                                           const uint32_t (&da)[BR / 16][4], uint32_t sQ, uint32_t sdO) {
    tc::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk) {
        tc::wgmma_rs_tb<D>(dv, pa[kk], mnmaj(sdO, BR, kk), 1);
        tc::wgmma_rs_tb<D>(dk, da[kk], mnmaj(sQ, BR, kk), 1);
    }
    tc::wgmma_commit();
}

// dSᵀ into shared memory as [key][query] (rows of 64 queries = 128 bytes, swizzled): each fragment
// register is two queries of one key, one 4-byte store, the 32 lanes of a store on 32 distinct banks
// (8 keys × 4 query pairs, the XOR spreading the keys' chunks).
template <int BR>
__device__ __forceinline__ void store_dst(unsigned char *tile, const uint32_t (&da)[BR / 16][4], int w, int g, int t) {
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int key = 16 * w + g + 8 * (r % 2), qr = 16 * kk + 8 * (r / 2) + 2 * t;
            *reinterpret_cast<uint32_t *>(tile + fb_off(64, key, qr / 8) + (qr % 8) * 2) = da[kk][r];
        }
}

// dS as the A fragments of dQ_i = dS·K_j: warp w's 16 queries (16w..) as rows, keys 16kk.. at k16
// step kk, by transposed ldmatrix of the [key][query] tile (matrix m: keys +8(m/2), queries +8(m%2)).
__device__ __forceinline__ void load_ds(uint32_t (&a)[4][4], uint32_t tile, int w, int lane) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
        tc::ldmatrix_x4_trans(a[kk], tile + fb_off(64, 16 * kk + lane % 8 + 8 * (lane / 16), 2 * w + (lane / 8) % 2));
}

// dK = scale·Σ dSᵀ·Q and dV = Σ Pᵀ·dO of the warpgroup's keys (from k_first), bf16 pairs; keys past S skipped.
template <int D>
__device__ __forceinline__ void store_dkdv(cudalab_bf16 *dK, cudalab_bf16 *dV, const float (&dk)[D / 2],
                                           const float (&dv)[D / 2], int k_first, int S, float scale, int w, int g,
                                           int t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int kj = k_first + 16 * w + g + 8 * h;
        if (kj >= S) continue;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
            flash_store_pair(dK + (size_t)kj * D + 8 * j + 2 * t, dk[4 * j + 2 * h] * scale, dk[4 * j + 2 * h + 1] * scale);
            flash_store_pair(dV + (size_t)kj * D + 8 * j + 2 * t, dv[4 * j + 2 * h], dv[4 * j + 2 * h + 1]);
        }
    }
}

}  // namespace fbw
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <int D>
struct FbwWgCfg {
    static_assert(D == 64 || D == 128, "08_flash_bwd_wgmma: D = 64 or 128");
    static constexpr int BC = 64, BR = 64;  // keys a block (the wgmma M), queries a tile
    static constexpr int THREADS = 128;     // one warpgroup
    static constexpr int BLOCKS_PER_SM = D == 64 ? 3 : 2;  // the launch bound: registers <= 65536 / (128·this)
    static constexpr int PANELS = D / 64;   // 64-column (128-byte) TMA boxes per row
    static constexpr int KV_BYTES = BC * D * 2, QT_BYTES = BR * D * 2, DS_BYTES = BC * BR * 2;
    static constexpr int OFF_V = KV_BYTES, OFF_Q = 2 * KV_BYTES;  // stage s: Q at OFF_Q + 2s·QT, dO after it
    static constexpr int OFF_DS = OFF_Q + 4 * QT_BYTES;
    static constexpr int OFF_ST = OFF_DS + DS_BYTES;      // stage s: the tile's 64 LSE, then its 64 Di (floats)
    static constexpr int OFF_BAR = OFF_ST + 2 * 2 * BR * 4;
    static constexpr int NBAR = 3;  // K and V; the two query stages
    static constexpr size_t SMEM = (size_t)OFF_BAR + NBAR * 8 + 1024 /* alignment slack */;
    static_assert(OFF_DS % 1024 == 0 && OFF_Q % 1024 == 0, "tiles must stay 1024-byte aligned (128B swizzle)");
};

template <int D>
__global__ void __launch_bounds__(FbwWgCfg<D>::THREADS, FbwWgCfg<D>::BLOCKS_PER_SM)
    attn_flash_bwd_wgmma(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                         const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO,
                         const float *__restrict__ lse, const float *__restrict__ Di, float *__restrict__ dQacc,
                         cudalab_bf16 *__restrict__ dK, cudalab_bf16 *__restrict__ dV, int S, float scale,
                         int causal) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using C = FbwWgCfg<D>;
    constexpr int BC = C::BC, BR = C::BR;
    extern __shared__ unsigned char fbw_wg_smem[];
    const uint32_t base = (tc::smem_u32(fbw_wg_smem) + 1023u) & ~1023u;
    const uint32_t sK = base, sV = base + C::OFF_V, sdS = base + C::OFF_DS;
    const uint32_t barKV = base + C::OFF_BAR;
    unsigned char *dS_tile = fbw_wg_smem + (sdS - tc::smem_u32(fbw_wg_smem));  // the same bytes, generic
    auto sQ = [&](int s) { return base + (uint32_t)(C::OFF_Q + 2 * s * C::QT_BYTES); };
    auto sdO = [&](int s) { return base + (uint32_t)(C::OFF_Q + (2 * s + 1) * C::QT_BYTES); };
    auto barQ = [&](int s) { return barKV + 8u * (1 + s); };
    const float *stats = reinterpret_cast<const float *>(fbw_wg_smem + (base + C::OFF_ST - tc::smem_u32(fbw_wg_smem)));

    const int bh = blockIdx.y, k0 = blockIdx.x * BC;
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int first = causal ? k0 : 0;  // BR = BC: the query tile holding key k0 is the first with a query >= k0
    const int n_tiles = (int)cdiv(S - first, BR);
    const float scale_log2e = scale * CUDALAB_LOG2E;
    lse += (size_t)bh * S, Di += (size_t)bh * S;
    dQacc += (size_t)bh * S * D, dK += (size_t)bh * S * D, dV += (size_t)bh * S * D;

    auto load_q_tile = [&](int it) {  // thread 0 only
        const int s = it % 2, q0 = first + it * BR;
        tc::mbar_arrive_expect_tx(barQ(s), 2 * C::QT_BYTES);
#pragma unroll
        for (int p = 0; p < C::PANELS; ++p) {
            tc::tma_load_3d(sQ(s) + p * BR * 128, &tmQ, 64 * p, q0, bh, barQ(s));
            tc::tma_load_3d(sdO(s) + p * BR * 128, &tmdO, 64 * p, q0, bh, barQ(s));
        }
    };
    // A query tile's LSE and Di reach shared memory one iteration ahead of their use, one float a
    // thread by cp.async (zero past S): read from global memory where they are needed, right after
    // a wgmma wait, their L2 latency stood in the one warpgroup's way (ncu: long-scoreboard stalls
    // were 45% of the samples at D=128).
    auto load_stats = [&](int it) {  // every thread
        const int q = first + it * BR + tid % BR;
        const float *src = tid < BR ? lse : Di;
        tc::cp_async_4_zfill(base + (uint32_t)(C::OFF_ST + 4 * (2 * BR * (it % 2) + tid)), q < S ? src + q : src,
                             q < S ? 4 : 0);
        tc::cp_async_commit();
    };
    load_stats(0);
    tc::cp_async_wait<0>();
    if (tid == 0) {
        tc::tma_prefetch_map(&tmQ);
        tc::tma_prefetch_map(&tmK);
        tc::tma_prefetch_map(&tmV);
        tc::tma_prefetch_map(&tmdO);
        tc::mbar_init(barKV, 1);
        tc::mbar_init(barQ(0), 1);
        tc::mbar_init(barQ(1), 1);
        tc::mbar_fence_init();
        tc::mbar_arrive_expect_tx(barKV, 2 * C::KV_BYTES);
#pragma unroll
        for (int p = 0; p < C::PANELS; ++p) {
            tc::tma_load_3d(sK + p * BC * 128, &tmK, 64 * p, k0, bh, barKV);
            tc::tma_load_3d(sV + p * BC * 128, &tmV, 64 * p, k0, bh, barKV);
        }
        load_q_tile(0);
        if (n_tiles > 1) load_q_tile(1);
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them; tile 0's LSE and Di are in

    float dk[D / 2], dv[D / 2];  // rows (keys) 16w+g, 16w+g+8; n8 block j at [4j .. 4j+3]
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.0f;

    tc::mbar_wait(barKV, 0);
    for (int it = 0; it < n_tiles; ++it) {
        const int s = it % 2, q0 = first + it * BR;
        tc::mbar_wait(barQ(s), (it / 2) & 1);

        float st[BR / 2], dpt[BR / 2];  // (st and dpt were read by ordinary code in the last iteration)
        fbw::issue_sdp<D, BR>(st, dpt, sK, sV, sQ(s), sdO(s));
        if (it + 1 < n_tiles) load_stats(it + 1);  // its stage was last read before the previous iteration's end
        const float *lse_s = stats + 2 * BR * s, *di_s = lse_s + BR;
        uint32_t pa[BR / 16][4], da[BR / 16][4];
        fbw::p_and_ds<BR>(st, dpt, pa, da, lse_s, di_s, k0, q0, S, causal, scale_log2e, w, g, t);
        fbw::issue_dkdv<D, BR>(dv, dk, pa, da, sQ(s), sdO(s));  // left running while dS goes through shared memory
        fbw::store_dst<BR>(dS_tile, da, w, g, t);
        __syncthreads();

        // dQ_i += scale·dS·K_j, one N = 64 slice of D at a time.
        uint32_t a[BC / 16][4];
        fbw::load_ds(a, sdS, w, lane);
#pragma unroll
        for (int p = 0; p < C::PANELS; ++p) {
            float dq[32];
            tc::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BC / 16; ++kk)
                tc::wgmma_rs_tb<64>(dq, a[kk], fbw::mnmaj(sK + p * BC * 128, BC, kk), kk > 0);
            tc::wgmma_commit();
            tc::wgmma_wait<0>();  // (the first time also dK and dV: the fragments below may then go)
            tc::reg_fence(dq);
            if (p == 0) {
                tc::reg_fence(pa);
                tc::reg_fence(da);
            }
            // Four floats an atomic (red.global.add.v4.f32), half as many as pairs: lanes t and t^1
            // swap a pair, so the even one holds four columns of row g and the odd one four of g+8.
            const bool odd = t & 1;
            const int qi = q0 + 16 * w + g + 8 * odd;
            float *row = dQacc + (size_t)qi * D + 64 * p + 2 * (t & ~1);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float s0 = odd ? dq[4 * j] : dq[4 * j + 2], s1 = odd ? dq[4 * j + 1] : dq[4 * j + 3];
                const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
                const float4 v = odd ? make_float4(r0, r1, dq[4 * j + 2], dq[4 * j + 3])
                                     : make_float4(dq[4 * j], dq[4 * j + 1], r0, r1);
                if (qi < S)
                    atomicAdd(reinterpret_cast<float4 *>(row + 8 * j),
                              make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale));
            }
        }
        tc::reg_fence(a);
        tc::cp_async_wait<0>();  // this thread's share of the next tile's LSE and Di has landed
        // Every thread's wgmmas on stage s and its ldmatrix of dS are done: the stage takes the
        // tile after next, and dS may be overwritten; the next tile's LSE and Di are published.
        __syncthreads();
        if (tid == 0 && it + 2 < n_tiles) load_q_tile(it + 2);
    }
    fbw::store_dkdv<D>(dK, dV, dk, dv, k0, S, scale, w, g, t);
#else
    // Built without sm_90a: the host never launches this (tma_host::sm90a_unsupported_reason says why).
    (void)tmQ, (void)tmK, (void)tmV, (void)tmdO, (void)lse, (void)Di, (void)dQacc, (void)dK, (void)dV, (void)S,
        (void)scale, (void)causal;
#endif
}

// Enqueue 08_flash_bwd_wgmma: Di, the zeroed FP32 dQ and its rounding as 07 (attn_bwd_bf16_around),
// the main kernel on four tensor maps (cached as 05's: encoding costs host time on every launch).
template <int D>
static inline cudaError_t attn_flash_bwd_wgmma_launch(int BH, int S, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                      const cudalab_bf16 *v, const cudalab_bf16 *o,
                                                      const cudalab_bf16 *dout, const float *lse, cudalab_bf16 *dq,
                                                      cudalab_bf16 *dk, cudalab_bf16 *dv, float *ws, float scale,
                                                      int causal, cudaStream_t stream) {
    using C = FbwWgCfg<D>;
    if (tma_host::sm90a_unsupported_reason() != nullptr) return cudaErrorNotSupported;
    const auto kernel = attn_flash_bwd_wgmma<D>;
    cudaError_t e = cudalab_allow_dynamic_smem(kernel, C::SMEM);
    if (e != cudaSuccess) return e;
    static FwMapCache mq, mk, mv, mdo;
    if ((e = fw_map(mq, q, BH, S, D, C::BR)) != cudaSuccess) return e;
    if ((e = fw_map(mk, k, BH, S, D, C::BC)) != cudaSuccess) return e;
    if ((e = fw_map(mv, v, BH, S, D, C::BC)) != cudaSuccess) return e;
    if ((e = fw_map(mdo, dout, BH, S, D, C::BR)) != cudaSuccess) return e;
    return attn_bwd_bf16_around(BH, S, D, o, dout, dq, ws, stream, [&](const float *di, float *acc) {
        const dim3 grid((unsigned)cdiv(S, C::BC), (unsigned)BH);
        kernel<<<grid, C::THREADS, C::SMEM, stream>>>(mq.map, mk.map, mv.map, mdo.map, lse, di, acc, dk, dv, S, scale,
                                                      causal);
        return cudaGetLastError();
    });
}
