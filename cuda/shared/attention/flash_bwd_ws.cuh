// 09_flash_bwd_ws: 08_flash_bwd_wgmma with FlashAttention-3's warp specialisation (sm_90a). Included
// by attention_kernels.cuh after flash_bwd_wgmma.cuh, whose mathematics, fragment layouts and
// descriptors it keeps; what moves is who does what.
//
// 08 is one warpgroup that computes and also issues the loads, waits on them, copies each tile's
// LSE and Di and adds its dQ to global memory with float4 atomics (a shuffle and an atomic per four
// floats): every one of those sits in the chain of the warpgroup that feeds the tensor cores. Here a
// block of (NC + 1) warpgroups splits the work:
//   - Warpgroup 0 produces and gives its registers away (setmaxnreg 24). Its warp 0 loads: K and V
//     of each consumer's 64 keys once by TMA, then the query tiles (BR = 64 rows of Q and dO by TMA,
//     and the tile's 64 LSE and 64 Di by ordinary loads into shared memory, zeros past S) through
//     two stages, each with a *full* mbarrier (the warp's 32 arrivals and TMA's bytes) and an
//     *empty* one (every consumer thread arrives once its wgmmas have read the stage). Its warp 1
//     adds the dQ tiles to global memory: one TMA reduce (cp.reduce.async.bulk.tensor .add, FP32)
//     per 32-column box, from a tile the consumer wrote to shared memory; the adds happen in L2,
//     element-atomic, so no consumer thread issues an atomic.
//   - Warpgroups 1..NC consume. Each owns 64 keys (the block 64·NC) and runs 08's chain on them:
//     Sᵀ and dPᵀ (SS wgmma), the element-wise step, dV += Pᵀ·dO and dK += dSᵀ·Q (RS wgmma), dSᵀ to
//     its own shared tile and back as dS fragments (ldmatrix .trans), dQ_i = dS·K_j (RS wgmma) over
//     its 64 keys, scaled into its FP32 dQ tile (the 128-byte swizzle the reduce's map reads), then
//     one arrival on its dq_full barrier. The consumers never wait for each other: each has its own
//     dS tiles (two, alternating, so one named barrier of its 128 threads an iteration suffices) and
//     its own dQ tile (reused once the producer's reduce has read it: the dq_empty barrier).
//   - At D = 64 a consumer also issues the next tile's Sᵀ and dPᵀ before it stores this tile's dQ
//     (FbwWsCfg::PIPELINED), so the tensor cores have work while it stores and hands the tile over.
// Registers: setmaxnreg moves the producer's to the consumers (NC = 2: 240 each, where dK and dV
// alone are 128 at D = 128). Shared memory at D = 128: K, V 64 KB, two query stages 64 KB, dS 32 KB,
// dQ 64 KB, statistics 1 KB: 225 KB of the 227 KB a block may have.
// Causal: as 08, the block starts at the query tile of its first key; every consumer walks the same
// tiles (the barriers count on it), the masked ones giving zeros.
#pragma once

#include <cstdint>

#include "check.cuh"
#include "cudalab.h"
#include "flash_bwd_wgmma.cuh"
#include "tc_ptx.cuh"
#include "tma_host.cuh"

// Consumer warpgroups at D = 64: two (240 registers each) by default; a build with
// -DFBW_WS_NC_D64=3 runs three of 160 registers each, where ptxas serialises some wgmmas for want of
// registers: the two were timed against each other in NOTES-attention-backward.md.
#ifndef FBW_WS_NC_D64
#define FBW_WS_NC_D64 2
#endif

template <int D>
struct FbwWsCfg {
    static_assert(D == 64 || D == 128, "09_flash_bwd_ws: D = 64 or 128");
    static constexpr int NC = D == 64 ? FBW_WS_NC_D64 : 2;  // consumer warpgroups, 64 keys each
    static constexpr int BC = 64, BR = 64;      // keys a consumer (the wgmma M), queries a tile
    static constexpr int KEYS = NC * BC;        // keys a block
    // The next tile's Sᵀ and dPᵀ issued before this tile's dQ is stored: a second pair of
    // accumulators in flight, which only D = 64 has the registers for (NOTES-attention-backward
    // sec. 12-14); a build with -DFBW_WS_PIPE_D64=0 runs D = 64 without it, to time the two.
#ifndef FBW_WS_PIPE_D64
#define FBW_WS_PIPE_D64 1
#endif
    static constexpr bool PIPELINED = D == 64 && FBW_WS_PIPE_D64 && NC == 2;
    static constexpr int THREADS = 128 * (NC + 1);
    static constexpr int PROD_REGS = 24;
    // The launch gives each thread 65536 / THREADS (168 or 128); the producer's surplus goes to the consumers.
    static constexpr int CONS_REGS = ((65536 - 128 * PROD_REGS) / (128 * NC)) / 8 * 8;
    static constexpr int PANELS = D / 64;       // 64-column (128-byte) bf16 TMA boxes per row
    static constexpr int QBOXES = D / 32;       // 32-column (128-byte) FP32 boxes of a dQ row
    static constexpr int KV_BYTES = BC * D * 2, QT_BYTES = BR * D * 2, DS_BYTES = BC * BR * 2, DQ_BYTES = BR * D * 4;
    // Consumer c: K at OFF_K + c·KV, V at OFF_V + c·KV, dS tiles at OFF_DS + (2c + i)·DS, dQ at OFF_DQ + c·DQ.
    static constexpr int OFF_K = 0, OFF_V = NC * KV_BYTES, OFF_Q = 2 * NC * KV_BYTES;  // stage s: Q, then dO
    static constexpr int OFF_DS = OFF_Q + 4 * QT_BYTES;
    static constexpr int OFF_DQ = OFF_DS + 2 * NC * DS_BYTES;
    static constexpr int OFF_ST = OFF_DQ + NC * DQ_BYTES;  // stage s: the tile's 64 LSE, then its 64 Di
    static constexpr int OFF_BAR = OFF_ST + 2 * 2 * BR * 4;
    static constexpr int NBAR = 1 + 2 + 2 + 2 * NC;  // K/V; full[2]; empty[2]; dq_full[NC]; dq_empty[NC]
    static constexpr size_t SMEM = (size_t)OFF_BAR + NBAR * 8 + 1024 /* alignment slack */;
    static_assert(SMEM <= 227 * 1024, "more shared memory than a Hopper block may have");
    static_assert(OFF_Q % 1024 == 0 && OFF_DS % 1024 == 0 && OFF_DQ % 1024 == 0, "128B-swizzled tiles: 1024-aligned");
    static_assert(CONS_REGS >= 160 && CONS_REGS <= 256, "consumer register budget");
};

template <int D>
__global__ void __launch_bounds__(FbwWsCfg<D>::THREADS, 1)
    attn_flash_bwd_ws(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                      const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO,
                      const __grid_constant__ CUtensorMap tmdQ, const float *__restrict__ lse,
                      const float *__restrict__ Di, cudalab_bf16 *__restrict__ dK, cudalab_bf16 *__restrict__ dV,
                      int S, float scale, int causal) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using C = FbwWsCfg<D>;
    constexpr int BC = C::BC, BR = C::BR, NC = C::NC;
    constexpr bool kPipe = C::PIPELINED;
    extern __shared__ unsigned char fbw_ws_smem[];
    const uint32_t raw = tc::smem_u32(fbw_ws_smem);
    const uint32_t base = (raw + 1023u) & ~1023u;
    unsigned char *gbase = fbw_ws_smem + (base - raw);  // the same bytes, generic
    auto sK = [&](int c) { return base + (uint32_t)(C::OFF_K + c * C::KV_BYTES); };
    auto sV = [&](int c) { return base + (uint32_t)(C::OFF_V + c * C::KV_BYTES); };
    auto sQ = [&](int s) { return base + (uint32_t)(C::OFF_Q + 2 * s * C::QT_BYTES); };
    auto sdO = [&](int s) { return base + (uint32_t)(C::OFF_Q + (2 * s + 1) * C::QT_BYTES); };
    auto sdS = [&](int c, int i) { return base + (uint32_t)(C::OFF_DS + (2 * c + i) * C::DS_BYTES); };
    auto sdQ = [&](int c) { return base + (uint32_t)(C::OFF_DQ + c * C::DQ_BYTES); };
    float *stats = reinterpret_cast<float *>(gbase + C::OFF_ST);  // [stage][LSE 64 | Di 64]
    const uint32_t bars = base + C::OFF_BAR;
    const uint32_t barKV = bars;
    auto full = [&](int s) { return bars + 8u * (1 + s); };
    auto empty = [&](int s) { return bars + 8u * (3 + s); };
    auto dq_full = [&](int c) { return bars + 8u * (5 + c); };
    auto dq_empty = [&](int c) { return bars + 8u * (5 + NC + c); };

    const int bh = blockIdx.y, k0 = blockIdx.x * C::KEYS;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int first = causal ? k0 : 0;  // k0 is a multiple of BR: the first query tile with a query >= k0
    const int n_tiles = (int)cdiv(S - first, BR);

    if (threadIdx.x == 0) {
        tc::tma_prefetch_map(&tmQ);
        tc::tma_prefetch_map(&tmK);
        tc::tma_prefetch_map(&tmV);
        tc::tma_prefetch_map(&tmdO);
        tc::tma_prefetch_map(&tmdQ);
        tc::mbar_init(barKV, 1);
        for (int s = 0; s < 2; ++s) {
            tc::mbar_init(full(s), 32);        // the loading warp's lanes (lane 0's carries the bytes)
            tc::mbar_init(empty(s), 128 * NC);  // every consumer thread
        }
        for (int c = 0; c < NC; ++c) {
            tc::mbar_init(dq_full(c), 128);  // consumer c's threads, once their share of the tile is written
            tc::mbar_init(dq_empty(c), 1);   // the reducing thread, once TMA has read the tile
        }
        tc::mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {
        tc::setmaxnreg_dec<C::PROD_REGS>();
        const int warp = tid / 32, lane = tid % 32;
        if (warp == 0) {
            // The loads. K and V of the block's keys once, then the query tiles two stages ahead.
            if (lane == 0) {
                tc::mbar_arrive_expect_tx(barKV, 2 * NC * C::KV_BYTES);
                for (int c = 0; c < NC; ++c)
#pragma unroll
                    for (int p = 0; p < C::PANELS; ++p) {
                        tc::tma_load_3d(sK(c) + p * BC * 128, &tmK, 64 * p, k0 + BC * c, bh, barKV);
                        tc::tma_load_3d(sV(c) + p * BC * 128, &tmV, 64 * p, k0 + BC * c, bh, barKV);
                    }
            }
            const float *lse_bh = lse + (size_t)bh * S, *di_bh = Di + (size_t)bh * S;
            for (int it = 0; it < n_tiles; ++it) {
                const int s = it % 2, q0 = first + it * BR;
                if (it >= 2) tc::mbar_wait(empty(s), ((it / 2) - 1) & 1);  // the consumers are done with tile it-2
                float *st = stats + 2 * BR * s;
#pragma unroll
                for (int r = 0; r < BR / 32; ++r) {
                    const int q = q0 + lane + 32 * r;
                    st[lane + 32 * r] = q < S ? lse_bh[q] : 0.0f;
                    st[BR + lane + 32 * r] = q < S ? di_bh[q] : 0.0f;
                }
                if (lane == 0) {
                    tc::mbar_arrive_expect_tx(full(s), 2 * C::QT_BYTES);
#pragma unroll
                    for (int p = 0; p < C::PANELS; ++p) {
                        tc::tma_load_3d(sQ(s) + p * BR * 128, &tmQ, 64 * p, q0, bh, full(s));
                        tc::tma_load_3d(sdO(s) + p * BR * 128, &tmdO, 64 * p, q0, bh, full(s));
                    }
                } else {
                    tc::mbar_arrive(full(s));  // releases this lane's statistics to the consumers
                }
            }
        } else if (warp == 1 && lane == 0) {
            // The dQ adds: each consumer's tile into the FP32 accumulator, one TMA reduce per box.
            for (int it = 0; it < n_tiles; ++it) {
                const int q0 = first + it * BR;
                for (int c = 0; c < NC; ++c) {
                    tc::mbar_wait(dq_full(c), it & 1);
#pragma unroll
                    for (int b = 0; b < C::QBOXES; ++b) tc::tma_reduce_add_3d(&tmdQ, sdQ(c) + b * BR * 128, 32 * b, q0, bh);
                    tc::bulk_commit();
                }
                tc::bulk_wait_read<0>();  // the tiles may be written again
                for (int c = 0; c < NC; ++c) tc::mbar_arrive(dq_empty(c));
            }
            tc::bulk_wait<0>();  // every add has landed before the block's shared memory goes
        }
        return;
    }

    // ---- the consumers ----
    tc::setmaxnreg_inc<C::CONS_REGS>();
    const int c = wg - 1, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int kc = k0 + BC * c;  // this consumer's first key
    const float scale_log2e = scale * CUDALAB_LOG2E;
    const uint32_t sKc = sK(c), sVc = sV(c), sdQc = sdQ(c);
    unsigned char *dq_tile = gbase + (sdQc - base);

    float dk[D / 2], dv[D / 2];  // rows (keys) 16w+g, 16w+g+8; n8 block j at [4j .. 4j+3]
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.0f;

    // Tile it's Sᵀ and dPᵀ (its stage waited for), then its Pᵀ and dSᵀ fragments (pa, da) from them
    // and the tile's statistics (flash_bwd_wgmma.cuh, fbw::, the chain 08 runs too).
    float st[BR / 2], dpt[BR / 2];
    uint32_t pa[BR / 16][4], da[BR / 16][4];
    auto issue_sdp = [&](int it) { fbw::issue_sdp<D, BR>(st, dpt, sKc, sVc, sQ(it % 2), sdO(it % 2)); };
    auto elementwise = [&](int it) {
        const float *lse_s = stats + 2 * BR * (it % 2);
        fbw::p_and_ds<BR>(st, dpt, pa, da, lse_s, lse_s + BR, kc, first + it * BR, S, causal, scale_log2e, w, g, t);
    };

    // Pipelined (kPipe), tile it+1's Sᵀ and dPᵀ are issued behind tile it's dV, dK and dQ and its
    // element-wise step runs at the end of iteration it, after this tile's dQ is stored: the tensor
    // cores compute them while the consumer stores and hands over its dQ tile. Each iteration then
    // ends with every wgmma waited for (nothing in flight across the loop's back edge, which ptxas
    // would answer by serialising the wgmmas). After the last tile they are issued all the same, on
    // the other stage's old tile (nothing writes it any more; the results are not used): a wgmma
    // under a branch also makes ptxas serialise every wgmma of the kernel.
    tc::mbar_wait(barKV, 0);
    if constexpr (kPipe) {
        tc::mbar_wait(full(0), 0);
        issue_sdp(0);
        elementwise(0);
    }
    for (int it = 0; it < n_tiles; ++it) {
        const int s = it % 2;
        const uint32_t dS = sdS(c, it % 2);
        unsigned char *dS_tile = gbase + (dS - base);
        if constexpr (!kPipe) {
            tc::mbar_wait(full(s), (it / 2) & 1);
            issue_sdp(it);
            elementwise(it);
        }
        fbw::issue_dkdv<D, BR>(dv, dk, pa, da, sQ(s), sdO(s));
        fbw::store_dst<BR>(dS_tile, da, w, g, t);
        // This consumer's 128 threads only: its dS tile is its own, and the other tile (last
        // iteration's) was read by every one of them before they reached this barrier.
        tc::named_bar_sync(1 + c, 128);
        uint32_t a[BC / 16][4];
        fbw::load_ds(a, dS, w, lane);
#pragma unroll
        for (int p = 0; p < C::PANELS; ++p) {
            float dq[32];
            tc::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BC / 16; ++kk)
                tc::wgmma_rs_tb<64>(dq, a[kk], fbw::mnmaj(sKc + p * BC * 128, BC, kk), kk > 0);
            tc::wgmma_commit();
            if constexpr (kPipe) {
                if (it + 1 < n_tiles) tc::mbar_wait(full((it + 1) % 2), ((it + 1) / 2) & 1);
                issue_sdp(it + 1);
                tc::wgmma_wait<2>();  // dV, dK and dQ: the next tile's Sᵀ and dPᵀ stay in flight
            } else {
                tc::wgmma_wait<0>();  // (the first time also dK and dV: the stage and the fragments are free)
            }
            tc::reg_fence(dq);
            if (p == 0) {
                tc::reg_fence(pa);
                tc::reg_fence(da);
                tc::mbar_arrive(empty(s));  // this thread is done with the stage's tiles and statistics
                if (it > 0) tc::mbar_wait(dq_empty(c), (it - 1) & 1);  // the last tile's reduce has read it
            }
            // Row (query) 16w+g+8h, columns 64p+8j+2t..+1: FP32 box 2p + j/4, 128-byte rows swizzled
            // as TMA reads them (16-byte chunk ^ row % 8). A half-warp's float2 stores (rows g..g+3,
            // the same n8 block) would land two rows on each pair of chunks, g and g^1 XOR-ing to the
            // same pair: 2-way conflicts, which ncu counted (69M at D=128, S=4096). Lanes of odd g
            // store block j^2 instead (a select of two registers), so the four rows take four pairs.
            const bool odd_g = g & 1;
#pragma unroll
            for (int jq = 0; jq < 2; ++jq)
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int ja = 4 * jq + i, jb = 4 * jq + (i ^ 2), j = odd_g ? jb : ja;
                        const float x = odd_g ? dq[4 * jb + 2 * h] : dq[4 * ja + 2 * h];
                        const float y = odd_g ? dq[4 * jb + 2 * h + 1] : dq[4 * ja + 2 * h + 1];
                        const int row = 16 * w + g + 8 * h, box = 2 * p + jq, byte = 32 * (j % 4) + 8 * t;
                        const uint32_t off = (uint32_t)box * BR * 128 + (uint32_t)row * 128 +
                                             ((((uint32_t)byte >> 4) ^ ((uint32_t)row & 7u)) << 4) + (byte & 15);
                        *reinterpret_cast<float2 *>(dq_tile + off) = make_float2(x * scale, y * scale);
                    }
        }
        tc::reg_fence(a);
        tc::fence_proxy_async();   // the tile's generic stores before the TMA reduce reads it
        tc::mbar_arrive(dq_full(c));
        if constexpr (kPipe) elementwise(it + 1);  // (past the last tile: on the spare products, unused)
    }

    fbw::store_dkdv<D>(dK + (size_t)bh * S * D, dV + (size_t)bh * S * D, dk, dv, kc, S, scale, w, g, t);
#else
    // Built without sm_90a: the host never launches this (tma_host::sm90a_unsupported_reason says why).
    (void)tmQ, (void)tmK, (void)tmV, (void)tmdO, (void)tmdQ, (void)lse, (void)Di, (void)dK, (void)dV, (void)S,
        (void)scale, (void)causal;
#endif
}

// The FP32 dQ accumulator (B·H slabs of S x D) as a 3-D map {D, S, B·H}, boxes of 32 columns by BR
// rows: rows past S of a head are outside the tensor, so a ragged tile's reduce leaves the next head alone.
struct FbwDqMapCache {
    const float *ptr = nullptr;
    int S = -1, BH = -1, D = -1;
    CUtensorMap map;
};
static inline cudaError_t fbw_dq_map(FbwDqMapCache &c, const float *acc, int BH, int S, int D, int rows) {
    if (c.ptr == acc && c.S == S && c.BH == BH && c.D == D) return cudaSuccess;
    const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)S, (cuuint64_t)BH};
    const cuuint64_t strides[2] = {(cuuint64_t)D * 4, (cuuint64_t)S * D * 4};
    const cudaError_t e = tma_host::encode_f32_sw128(&c.map, acc, 3, dims, strides, rows);
    if (e != cudaSuccess) return e;
    c.ptr = acc, c.S = S, c.BH = BH, c.D = D;
    return cudaSuccess;
}

// Enqueue 09_flash_bwd_ws: Di, the zeroed FP32 dQ and its rounding as 07 and 08
// (attn_bwd_bf16_around), the main kernel on five tensor maps (cached: encoding costs host time).
template <int D>
static inline cudaError_t attn_flash_bwd_ws_launch(int BH, int S, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                   const cudalab_bf16 *v, const cudalab_bf16 *o,
                                                   const cudalab_bf16 *dout, const float *lse, cudalab_bf16 *dq,
                                                   cudalab_bf16 *dk, cudalab_bf16 *dv, float *ws, float scale,
                                                   int causal, cudaStream_t stream) {
    using C = FbwWsCfg<D>;
    if (tma_host::sm90a_unsupported_reason() != nullptr) return cudaErrorNotSupported;
    const auto kernel = attn_flash_bwd_ws<D>;
    cudaError_t e = cudalab_allow_dynamic_smem(kernel, C::SMEM);
    if (e != cudaSuccess) return e;
    static FwMapCache mq, mk, mv, mdo;
    static FbwDqMapCache mdq;
    if ((e = fw_map(mq, q, BH, S, D, C::BR)) != cudaSuccess) return e;
    if ((e = fw_map(mk, k, BH, S, D, C::BC)) != cudaSuccess) return e;
    if ((e = fw_map(mv, v, BH, S, D, C::BC)) != cudaSuccess) return e;
    if ((e = fw_map(mdo, dout, BH, S, D, C::BR)) != cudaSuccess) return e;
    return attn_bwd_bf16_around(BH, S, D, o, dout, dq, ws, stream, [&](const float *di, float *acc) {
        const cudaError_t me = fbw_dq_map(mdq, acc, BH, S, D, C::BR);
        if (me != cudaSuccess) return me;
        const dim3 grid((unsigned)cdiv(S, C::KEYS), (unsigned)BH);
        kernel<<<grid, C::THREADS, C::SMEM, stream>>>(mq.map, mk.map, mv.map, mdo.map, mdq.map, lse, di, dk, dv, S,
                                                      scale, causal);
        return cudaGetLastError();
    });
}
