// 05_flash_wgmma: FlashAttention-3's forward design on Hopper (sm_90a). Included by attention_kernels.cuh.
//
// What changes against 03_flash_bf16 (FlashAttention-2 on mma.sync), and why:
//   - The operands come to the tensor cores from shared memory through wgmma descriptors, for a
//     warpgroup (4 warps, 64 query rows) at a time: no ldmatrix, no per-warp fragment loads. One
//     m64nBCk16 wgmma does what 03 needs 2·BC/8 mma.sync and their ldmatrix for.
//   - Q, K and V arrive by TMA (cp.async.bulk.tensor, 3-D maps {D, S, B·H}: rows past S read as
//     zeros) into 128-byte-swizzled tiles, issued by one producer thread. The consumers never
//     compute an address to load: the copy engine runs ahead by STAGES key tiles, guarded by
//     mbarriers (full: the bytes landed; empty: both consumer warpgroups are done with the stage).
//   - Warp specialisation: warpgroup 0 produces (and gives its registers away with setmaxnreg),
//     warpgroups 1 and 2 each own 64 query rows, so a block holds 128 rows.
//   - S = Q·Kᵀ is an SS wgmma (both from shared memory, K-major). O += P·V is an RS wgmma: P stays
//     in registers, where the softmax left it (the accumulator layout of S, packed to bf16, is the
//     register A fragment), and V is read "transposed" (MN-major) straight from its TMA tile.
//   - Two scheduling ideas of FlashAttention-3, each a template flag so each is measured on its own:
//       FW_PINGPONG: the two consumer warpgroups take turns at the tensor cores (two named
//         barriers): one issues its GEMMs while the other does its softmax, whose exp2 runs on the
//         MUFU unit, 16 ops/clk/SM against the tensor cores' 1024 bf16 FMA/clk.
//       FW_INTRA: within a warpgroup, S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1} are issued together and
//         the softmax of tile j runs while the P·V of tile j-1 is still on the tensor cores; O is
//         rescaled afterwards (flash_softmax_tile returns the factor).
//   - Causal: a block visits key tiles up to its last query row only (heavy blocks are launched
//     first); the tiles that cross the diagonal are masked, the others are not.
//
// Per consumer thread: S is BC/2 FP32 registers, O D/2, P BC/4 (BC/2 under FW_INTRA: P_{j-1} is in
// flight while P_j is made). The compiled default is FwDefault; `invoke tune attention` picks per GPU.
#pragma once

#include <cstdint>

#include "check.cuh"
#include "cudalab.h"
#include "flash_bf16.cuh"
#include "tc_ptx.cuh"
#include "tma_host.cuh"

#define FW_PINGPONG 1
#define FW_INTRA 2

template <int D, int BC_, int STAGES_, int SCHED_>
struct FwCfg {
    static constexpr int BC = BC_, STAGES = STAGES_, SCHED = SCHED_;
    static_assert(D == 64 || D == 128, "05_flash_wgmma: D = 64 or 128");
    static_assert(BC == 64 || BC == 128, "05_flash_wgmma: key tiles of 64 or 128");
    static constexpr int BR = 128;        // two consumer warpgroups of 64 query rows
    static constexpr int THREADS = 384;   // + the producer warpgroup
    static constexpr int PANELS = D / 64;  // 64-column TMA boxes (128 bytes, the swizzle's width) per row
    static constexpr int Q_BYTES = BR * D * 2, TILE_BYTES = BC * D * 2;
    static constexpr int OFF_K = Q_BYTES, OFF_V = OFF_K + STAGES * TILE_BYTES, OFF_BAR = OFF_V + STAGES * TILE_BYTES;
    static constexpr int NBAR = 1 + 4 * STAGES;  // fullQ, fullK[], fullV[], emptyK[], emptyV[]
    static constexpr size_t SMEM = (size_t)OFF_BAR + NBAR * 8 + 1024 /* alignment slack */;
    static_assert(SMEM <= 227 * 1024, "more shared memory than an H100 block may have");
};

// The compiled default: FlashAttention-3's choice at both head sizes (128-key tiles, 2 stages, both
// scheduling ideas on).
struct FwDefault {
    static constexpr int BC = 128, STAGES = 2, SCHED = FW_PINGPONG | FW_INTRA;
};

template <int D, int BC, int STAGES, int SCHED>
__global__ void __launch_bounds__(384, 1)
    attn_flash_wgmma_fwd(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                         const __grid_constant__ CUtensorMap tmV, cudalab_bf16 *__restrict__ O, int S,
                         float scale_log2e, int causal) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using C = FwCfg<D, BC, STAGES, SCHED>;
    constexpr bool kPingPong = (SCHED & FW_PINGPONG) != 0, kIntra = (SCHED & FW_INTRA) != 0;
    extern __shared__ unsigned char fw_smem[];
    // 128B-swizzled TMA destinations (and wgmma's swizzled descriptors) need 1024-byte alignment.
    const uint32_t base = (tc::smem_u32(fw_smem) + 1023u) & ~1023u;
    const uint32_t sQ = base, bars = base + C::OFF_BAR;
    auto sK = [&](int s) { return base + (uint32_t)(C::OFF_K + s * C::TILE_BYTES); };
    auto sV = [&](int s) { return base + (uint32_t)(C::OFF_V + s * C::TILE_BYTES); };
    const uint32_t fullQ = bars;
    auto fullK = [&](int s) { return bars + 8u * (1 + s); };
    auto fullV = [&](int s) { return bars + 8u * (1 + STAGES + s); };
    auto emptyK = [&](int s) { return bars + 8u * (1 + 2 * STAGES + s); };
    auto emptyV = [&](int s) { return bars + 8u * (1 + 3 * STAGES + s); };

    const int bh = blockIdx.y;
    // Heavy query tiles first: under the causal mask the last tiles have the most keys.
    const int q0 = (gridDim.x - 1 - blockIdx.x) * C::BR;
    const int kv_end = causal ? min(S, q0 + C::BR) : S;
    const int n_tiles = (int)cdiv(kv_end, BC);  // >= 1: q0 < S
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;

    if (threadIdx.x == 0) {
        tc::tma_prefetch_map(&tmQ);
        tc::tma_prefetch_map(&tmK);
        tc::tma_prefetch_map(&tmV);
        tc::mbar_init(fullQ, 1);
        for (int s = 0; s < STAGES; ++s) {
            tc::mbar_init(fullK(s), 1);   // the producer's arrive.expect_tx (+ the tile's bytes)
            tc::mbar_init(fullV(s), 1);
            tc::mbar_init(emptyK(s), 2);  // one arrival per consumer warpgroup
            tc::mbar_init(emptyV(s), 2);
        }
        tc::mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {
        // The producer: 24 registers are plenty for one thread's loop of TMA issues.
        tc::setmaxnreg_dec<24>();
        if (tid == 0) {
            tc::mbar_arrive_expect_tx(fullQ, C::Q_BYTES);
#pragma unroll
            for (int p = 0; p < C::PANELS; ++p) tc::tma_load_3d(sQ + p * C::BR * 128, &tmQ, 64 * p, q0, bh, fullQ);
            for (int j = 0; j < n_tiles; ++j) {
                const int s = j % STAGES;
                const uint32_t ph = ((j / STAGES) - 1) & 1;  // the phase of the stage's previous use
                if (j >= STAGES) tc::mbar_wait(emptyK(s), ph);
                tc::mbar_arrive_expect_tx(fullK(s), C::TILE_BYTES);
#pragma unroll
                for (int p = 0; p < C::PANELS; ++p) tc::tma_load_3d(sK(s) + p * BC * 128, &tmK, 64 * p, j * BC, bh, fullK(s));
                if (j >= STAGES) tc::mbar_wait(emptyV(s), ph);
                tc::mbar_arrive_expect_tx(fullV(s), C::TILE_BYTES);
#pragma unroll
                for (int p = 0; p < C::PANELS; ++p) tc::tma_load_3d(sV(s) + p * BC * 128, &tmV, 64 * p, j * BC, bh, fullV(s));
            }
        }
        return;
    }

    // ---- the consumers ----
    tc::setmaxnreg_inc<240>();
    const int c = wg - 1, w = tid / 32;
    const int qw = q0 + 64 * c + 16 * w;  // this warp's first query row (rows qw + g, qw + g + 8)
    O += (size_t)bh * S * D;

    float o[D / 2];   // O: 64 x D per warpgroup, n8 block j at o[4j .. 4j+3] (flash_store_o's layout)
    float sc[BC / 2];  // S, then P in FP32
    uint32_t pa[BC / 16][4];  // P as bf16 A fragments, one per k16 step over the keys
    uint32_t pb[BC / 16][4];  // kIntra: P_j while P_{j-1} (pa) is still read by the tensor cores
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
    auto& s4 = reinterpret_cast<float(&)[BC / 8][4]>(sc);
    auto& o4 = reinterpret_cast<float(&)[D / 8][4]>(o);

    // Descriptors. Q (this warpgroup's 64 rows) and K: K-major, k16 step kk in panel kk/4 at 32·(kk%4)
    // bytes (+2 in the descriptor's 16-byte units). V: MN-major, k16 step kk 16 rows = 2048 bytes on.
    auto q_desc = [&](int kk) {
        return tc::wgmma_desc_sw128(sQ + (kk / 4) * C::BR * 128 + c * 64 * 128) + 2 * (kk % 4);
    };
    auto k_desc = [&](int s, int kk) { return tc::wgmma_desc_sw128(sK(s) + (kk / 4) * BC * 128) + 2 * (kk % 4); };
    auto v_desc = [&](int s, int kk) { return tc::wgmma_desc_sw128_mn(sV(s) + kk * 2048, BC * 128); };

    // The GEMMs of a stage whose bytes have landed (the waits come before the wgmma fence, so no
    // spin loop sits between a fence and its wgmmas).
    auto issue_qk = [&](int s) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) tc::wgmma_ss<BC>(sc, q_desc(kk), k_desc(s, kk), kk > 0);
        tc::wgmma_commit();
    };
    auto issue_pv = [&](int s, const uint32_t(&p)[BC / 16][4]) {
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) tc::wgmma_rs_tb<D>(o, p[kk], v_desc(s, kk), 1);
        tc::wgmma_commit();
    };
    auto release = [&](uint32_t bar) {  // one arrival per warpgroup, once its wgmmas read the stage
        if (tid == 0) tc::mbar_arrive(bar);
    };
    // Mask (ragged last tile; causal tiles crossing this warp's diagonal), softmax, P to bf16.
    auto softmax = [&](int j, uint32_t(&p)[BC / 16][4]) {
        const int k0 = j * BC;
        if (k0 + BC > S || (causal && k0 + BC - 1 > qw)) flash_mask_tile(s4, k0, qw, S, causal != 0);
        flash_softmax_tile(s4, m, l, alpha, scale_log2e);
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
            p[kk][0] = tc::pack_bf16x2(s4[2 * kk][0], s4[2 * kk][1]);
            p[kk][1] = tc::pack_bf16x2(s4[2 * kk][2], s4[2 * kk][3]);
            p[kk][2] = tc::pack_bf16x2(s4[2 * kk + 1][0], s4[2 * kk + 1][1]);
            p[kk][3] = tc::pack_bf16x2(s4[2 * kk + 1][2], s4[2 * kk + 1][3]);
        }
    };
    // Ping-pong: warpgroup c waits on named barrier 1+c before it issues GEMMs and, once they are
    // issued, arrives on the other's. Each warpgroup issues n_tiles+1 GEMM blocks ({QK_0},
    // {QK_j, PV_j-1}..., {PV_last}); warpgroup 1 opens barrier 1 once at the start and skips its last
    // arrival, so every barrier completes as often as it is waited on.
    auto turn_begin = [&]() {
        if constexpr (kPingPong) tc::named_bar_sync(1 + c, 256);
    };
    auto turn_end = [&](bool last) {
        if constexpr (kPingPong)
            if (!(c == 1 && last)) tc::named_bar_arrive(2 - c, 256);
    };
    if constexpr (kPingPong)
        if (c == 1) tc::named_bar_arrive(1, 256);

    // Tile 0: S only.
    tc::mbar_wait(fullQ, 0);
    tc::mbar_wait(fullK(0), 0);
    turn_begin();
    tc::wgmma_fence();
    issue_qk(0);
    turn_end(false);
    tc::wgmma_wait<0>();
    tc::reg_fence(sc);
    release(emptyK(0));
    softmax(0, pa);  // O is still zero: no rescale

    // Tile j: S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1}; P_{j-1} in pin, P_j made into pout.
    auto step = [&](int j, uint32_t(&pin)[BC / 16][4], uint32_t(&pout)[BC / 16][4]) {
        const int s = j % STAGES, sp = (j - 1) % STAGES;
        tc::mbar_wait(fullK(s), (j / STAGES) & 1);
        tc::mbar_wait(fullV(sp), ((j - 1) / STAGES) & 1);
        turn_begin();
        tc::wgmma_fence();  // O (rescaled) and P (packed) were written by ordinary instructions
        if constexpr (kIntra) {
            issue_qk(s);
            issue_pv(sp, pin);
        } else {
            issue_pv(sp, pin);
            issue_qk(s);
        }
        turn_end(false);
        if constexpr (kIntra) {
            tc::wgmma_wait<1>();  // S_j is in; P_{j-1}·V_{j-1} may still run
            tc::reg_fence(sc);
            release(emptyK(s));
            softmax(j, pout);
            tc::wgmma_wait<0>();
            tc::reg_fence(o);
            tc::reg_fence(pin);  // P_{j-1}'s registers stay live until the tensor cores have read them
        } else {
            tc::wgmma_wait<0>();
            tc::reg_fence(sc);
            tc::reg_fence(o);
            release(emptyK(s));
            softmax(j, pout);
        }
        release(emptyV(sp));
        flash_rescale_o(o4, alpha);
    };
    // Under kIntra P alternates between pa and pb (no copy between them, which would sit between a
    // wgmma's issue and its wait); otherwise P_j overwrites P_{j-1}, whose P·V has finished.
    int j = 1;
    for (; j + 1 < n_tiles; j += 2) {
        step(j, pa, kIntra ? pb : pa);
        step(j + 1, kIntra ? pb : pa, pa);
    }
    const bool last_in_b = kIntra && j < n_tiles;  // one odd tile left: P_j goes to pb
    if (j < n_tiles) step(j, pa, kIntra ? pb : pa);

    // The last P·V.
    const int sl = (n_tiles - 1) % STAGES;
    tc::mbar_wait(fullV(sl), ((n_tiles - 1) / STAGES) & 1);
    turn_begin();
    tc::wgmma_fence();
    if (last_in_b) issue_pv(sl, pb);
    else issue_pv(sl, pa);
    turn_end(true);
    tc::wgmma_wait<0>();
    tc::reg_fence(o);
    release(emptyV(sl));
    flash_store_o<D>(O, o4, l, qw, S);  // O / l, rounded to bf16; rows at or past S dropped
#else
    // Built without sm_90a: the host never launches this (tma_host::sm90a_unsupported_reason says why).
    (void)tmQ, (void)tmK, (void)tmV, (void)O, (void)S, (void)scale_log2e, (void)causal;
#endif
}

// One cached tensor map per (operand, launch shape): encoding costs host time on every launch,
// and the bench launches the same buffers again and again.
struct FwMapCache {
    const void *ptr = nullptr;
    int S = -1, BH = -1, D = -1, rows = -1;
    CUtensorMap map;
};

// Q, K or V (B·H slabs of S x D bf16) as a 3-D map {D, S, B·H}, box {64, rows, 1}.
static inline cudaError_t fw_map(FwMapCache &c, const cudalab_bf16 *ptr, int BH, int S, int D, int rows) {
    if (c.ptr == ptr && c.S == S && c.BH == BH && c.D == D && c.rows == rows) return cudaSuccess;
    const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)S, (cuuint64_t)BH};
    const cuuint64_t strides[2] = {(cuuint64_t)D * 2, (cuuint64_t)S * D * 2};  // bytes, dimensions 1 and 2
    const cudaError_t e = tma_host::encode_bf16_sw128(&c.map, ptr, 3, dims, strides, rows);
    if (e != cudaSuccess) return e;
    c.ptr = ptr, c.S = S, c.BH = BH, c.D = D, c.rows = rows;
    return cudaSuccess;
}

template <int D, int BC = FwDefault::BC, int STAGES = FwDefault::STAGES, int SCHED = FwDefault::SCHED>
static inline cudaError_t attn_flash_wgmma_launch(int BH, int S, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                  const cudalab_bf16 *v, cudalab_bf16 *o, float scale, int causal,
                                                  cudaStream_t stream) {
    using C = FwCfg<D, BC, STAGES, SCHED>;
    if (tma_host::sm90a_unsupported_reason() != nullptr) return cudaErrorNotSupported;
    const auto kernel = attn_flash_wgmma_fwd<D, BC, STAGES, SCHED>;
    cudaError_t e = cudalab_allow_dynamic_smem(kernel, C::SMEM);
    if (e != cudaSuccess) return e;
    static FwMapCache mq, mk, mv;
    if ((e = fw_map(mq, q, BH, S, D, C::BR)) != cudaSuccess) return e;
    if ((e = fw_map(mk, k, BH, S, D, BC)) != cudaSuccess) return e;
    if ((e = fw_map(mv, v, BH, S, D, BC)) != cudaSuccess) return e;
    const dim3 grid((unsigned)cdiv(S, C::BR), (unsigned)BH);
    kernel<<<grid, C::THREADS, C::SMEM, stream>>>(mq.map, mk.map, mv.map, o, S, scale * CUDALAB_LOG2E, causal);
    return cudaGetLastError();
}
