// 03_flash_bf16: FlashAttention-2 forward on the tensor cores. Included by attention_kernels.cuh.
//
// Q, K, V, O are bf16 (cudalab_bf16 = uint16_t storage), B×H×S×D row-major, D = 64 or 128.
// Products on mma.sync m16n8k16 (bf16 in, FP32 accumulate); softmax statistics in FP32.
//
// Block: NW warps, 16·MT query rows per warp (MT = 1 or 2 m16 tiles; the compiled default per D is
// FlashBf16Default below, `invoke tune attention` picks per GPU). Each warp keeps its Q slice in
// registers as MMA A fragments where they fit (else it re-reads them with ldmatrix each k16 step),
// so the shared-memory reads in the loop are the K and V tiles (ldmatrix), each fragment feeding MT
// MMAs. K and V stream through STAGES stages of BC-key tiles (64 or 32) filled by cp.async: while
// the warps work on tile t the copies of tiles t+1.. are in flight, one __syncthreads per tile.
//
// Shared-memory layout of a tile (64 rows × D bf16): split into D/64 "panels" of 64 columns, each
// panel 64 rows × 128 B in the 128-byte swizzle (tc::swizzle_128b): ldmatrix reads 8 rows of one
// logical 16-byte chunk, which the XOR spreads over 8 different bank groups; the 16-byte cp.async
// writes use the same function.
//
// Per tile and warp: S = Q·Kᵀ (16×64, 8 n8 accumulators), mask (ragged tail, causal diagonal),
// online softmax in base 2 (scores times scale·log2(e), exp2), P packed to bf16 in registers
// (the C fragment of two n8 tiles is exactly the A fragment of one k16 step), O += P·V.
#pragma once

#include <cstdint>

#include "check.cuh"
#include "arch.cuh"
#include "cudalab.h"
#include "faults.cuh"
#include "tc_ptx.cuh"

#define FB_WARPS 8             // the 3xTF32 kernel's block: 8 warps, 128 query rows
#define FB_NT (FB_WARPS * 32)
#define FB_BR (FB_WARPS * 16)
#define FB_BC 64               // keys per tile (both kernels)

// softmax(x) = 2^(x·log2 e) / Σ: the launchers fold CUDALAB_LOG2E into the score scale so that
// exp2 (one MUFU) does the exp.

template <int D, int NW, int STAGES_, int MT_ = 1, int BC_ = FB_BC>
struct FlashBf16Cfg {
    static constexpr int STAGES = STAGES_;
    static constexpr int MT = MT_;       // m16 tiles of query rows per warp (FlashAttention-2 uses 2)
    static constexpr int RW = 16 * MT;   // query rows per warp
    static constexpr int BC = BC_;       // keys per tile: 64, or 32 to make room for 32 rows of O at D=128
    static_assert(BC == 32 || BC == 64, "key tiles of 32 or 64");
    static constexpr int NT = NW * 32, BR = NW * RW;
    // Q stays in registers as A fragments unless that no longer fits beside O (32 rows at D=128:
    // 64 registers of Q, 128 of O, 64 of scores); then each k16 step reads it again with ldmatrix.
    static constexpr bool Q_IN_REGS = MT == 1 || D == 64;
    static constexpr int TILE_BYTES = BC * D * 2;  // one K or V tile
    static constexpr int Q_BYTES = BR * D * 2;
    static constexpr size_t SMEM = (size_t)Q_BYTES + (size_t)STAGES * 2 * TILE_BYTES;
    // The warps per SM the registers must leave room for (__launch_bounds__'s blocks = that / NW):
    // 16 rows a warp and 64-key tiles take ~128 registers a thread at D=64 (16 warps), ~210 at D=128
    // (8); 32-key tiles ~117 and ~168 (16 and 12 warps); 32 rows a warp up to 255 (8 warps).
    static constexpr int WARPS_PER_SM = MT == 1 ? (D == 64 ? 16 : (BC == 32 ? 12 : 8)) : 8;
    static constexpr int MIN_BLOCKS = WARPS_PER_SM / NW > 0 ? WARPS_PER_SM / NW : 1;
};
// The compiled default per D: the H100's `invoke tune attention` winner at both head sizes,
// flash_bf16_w4m2s2 (4 warps of 32 query rows, 2 stages of 64-key tiles): +12% over 8 warps of 16
// rows at D=128, +6% at D=64 (bench/results/h100/NOTES-attention.md, section 6).
template <int D>
struct FlashBf16Default {
    static constexpr int NW = 4, STAGES = 2, MT = 2;
};

// Byte offset of (row, 16-byte chunk c) in a tile of `rows` rows stored as D/64 swizzled panels.
__device__ __forceinline__ uint32_t fb_off(int rows, int row, int c) {
    return (uint32_t)(c >> 3) * (uint32_t)rows * 128u + tc::swizzle_128b((uint32_t)row, (uint32_t)(c & 7));
}

// The device helpers below use sm_80 instructions (cp.async, bf16 packing); they serve only kernel
// bodies that are compiled out below sm_80.
#if CUDALAB_SM80_CODE
// Copy rows [r0, r0+rows) of an S×D bf16 slab into a swizzled tile, 16 bytes per cp.async; rows
// at or past S are zero-filled (they are masked out of the softmax, and zero V rows add nothing).
template <int D, int ROWS, int NT>
__device__ __forceinline__ void fb_load_tile(uint32_t dst, const cudalab_bf16 *__restrict__ src, int r0, int S) {
    constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
    static_assert((ROWS * CHUNKS) % NT == 0, "tile copy must divide evenly over the block");
    const cudalab_bf16 *base = src + (size_t)r0 * D;  // one 64-bit address a tile; the rest is 32-bit
#pragma unroll
    for (int i = 0; i < ROWS * CHUNKS / NT; ++i) {
        const int idx = threadIdx.x + i * NT;
        const int r = idx / CHUNKS, c = idx % CHUNKS;
        const bool in = r0 + r < S;
        tc::cp_async_16_zfill(dst + fb_off(ROWS, r, c), in ? base + (r * D + c * 8) : src, in ? 16 : 0);
    }
}

// ---- shared by the tensor-core flash kernels (03_flash_bf16, 04_flash_3xtf32) --------------------
// A warp owns 16 query rows (from qw); its score tile s[j] is the m16n8 accumulator of keys
// k0+8j..k0+8j+7: s[j][0..1] = row g, keys 2t, 2t+1; s[j][2..3] = row g+8, the same keys.

// Keys at or past S (the ragged last tile) and, with `causal`, keys after the query get -inf.
template <int NJ>
__device__ __forceinline__ void flash_mask_tile(float (&s)[NJ][4], int k0, int qw, int S, bool causal) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int key = k0 + 8 * j + 2 * t + (e & 1);
            const int row = qw + g + 8 * (e >> 1);
            if (key >= S || (causal && key > row)) s[j][e] = -INFINITY;
        }
}

// Online softmax over one tile (the algebra is at 02_flash in attention_kernels.cuh), in base 2: a
// score x weighs 2^((x - m)·scale·log2 e), m the running max in raw score units. Replaces s by the
// weights p, updates the running max m and sum l of rows g (h = 0) and g+8 (h = 1), and returns in
// alpha the factor 2^((m_old - m_new)·scale·log2 e) by which the output accumulators of those rows
// must be rescaled (05_flash_wgmma applies it later, once its P·V in flight has finished).
// A row lives on the 4 lanes of a group: xor-shuffles 1 and 2 reduce it.
template <int NJ>
__device__ __forceinline__ void flash_softmax_tile(float (&s)[NJ][4], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                                   float scale_log2e) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mt = m[h];
#pragma unroll
        for (int j = 0; j < NJ; ++j) mt = fmaxf(mt, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        // A row that has seen only masked keys keeps m = -inf; 0 as the offset then makes
        // exp2(-inf - offset) = 0 instead of NaN (only the fault build's sabotage can get here).
        const float mo = mt == -INFINITY ? 0.0f : mt * scale_log2e;
        alpha[h] = tc::exp2_approx(m[h] * scale_log2e - mo);  // 0 on the first tile
        m[h] = mt;
        float rs = 0.0f;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            s[j][2 * h] = tc::exp2_approx(fmaf(s[j][2 * h], scale_log2e, -mo));
            s[j][2 * h + 1] = tc::exp2_approx(fmaf(s[j][2 * h + 1], scale_log2e, -mo));
            rs += s[j][2 * h] + s[j][2 * h + 1];
        }
        rs += __shfl_xor_sync(0xffffffffu, rs, 1);
        rs += __shfl_xor_sync(0xffffffffu, rs, 2);
        l[h] = l[h] * alpha[h] + rs;
    }
}

// Rows g (h = 0) and g+8 (h = 1) of the output accumulators times alpha[h].
template <int NO>
__device__ __forceinline__ void flash_rescale_o(float (&o)[NO][4], const float (&alpha)[2]) {
#pragma unroll
    for (int n = 0; n < NO; ++n) {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
    }
}

// The two together: the mma.sync kernels (03, 04) rescale O at once.
template <int NJ, int NO>
__device__ __forceinline__ void flash_online_softmax(float (&s)[NJ][4], float (&m)[2], float (&l)[2],
                                                     float (&o)[NO][4], float scale_log2e) {
    float alpha[2];
    flash_softmax_tile(s, m, l, alpha, scale_log2e);
    flash_rescale_o(o, alpha);
}

// One element pair (row, 8n+2t .. 8n+2t+1) of O, stored together: a float2, or two bf16 in 32 bits.
__device__ __forceinline__ void flash_store_pair(float *p, float a, float b) {
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
}
__device__ __forceinline__ void flash_store_pair(cudalab_bf16 *p, float a, float b) {
    *reinterpret_cast<uint32_t *>(p) = tc::pack_bf16x2(a, b);
}

// The epilogue: O = o / l for rows g and g+8 of the warp's 16 (from qw), rows at or past S dropped.
template <int D, typename T>
__device__ __forceinline__ void flash_store_o(T *__restrict__ O, const float (&o)[D / 8][4], const float (&l)[2],
                                              int qw, int S) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = qw + g + 8 * h;
        if (row >= S) continue;
        const float inv = 1.0f / l[h];
        T *orow = O + (size_t)row * D;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) flash_store_pair(orow + 8 * n + 2 * t, o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
    }
}
#endif  // CUDALAB_SM80_CODE

// flags: the fault build's sabotage (faults.cuh; compiled out of the product), so the tests can show
// the checker rejects a wrong kernel.
#define FB_FLAG_SKIP_LAST_TILE 1  // leave out the last key tile
#define FB_FLAG_NO_CAUSAL_MASK 2  // causal tile range, but no mask inside the diagonal tiles

template <int D, int NW, int STAGES, int MT, int BC>
__global__ void __launch_bounds__(NW * 32, FlashBf16Cfg<D, NW, STAGES, MT, BC>::MIN_BLOCKS)
    attn_flash_bf16_fwd(const cudalab_bf16 *__restrict__ Q, const cudalab_bf16 *__restrict__ K,
                        const cudalab_bf16 *__restrict__ V, cudalab_bf16 *__restrict__ O, int S, float scale_log2e,
                        int causal, int flags, float *__restrict__ lse) {
#if CUDALAB_SM80_CODE  // mma.sync bf16, ldmatrix, cp.async; the host refuses sm_75 (cudalab_arch::needs_sm)
    using C = FlashBf16Cfg<D, NW, STAGES, MT, BC>;
    constexpr int KD = D / 16;  // k16 steps over D (Q·Kᵀ) and n8-tile pairs over D (P·V)
    extern __shared__ __align__(128) unsigned char fb_smem[];
    const uint32_t sQ = tc::smem_u32(fb_smem);
    const uint32_t sKV = sQ + C::Q_BYTES;  // stage s: K at sKV + 2s·TILE, V at sKV + (2s+1)·TILE

    const size_t slab = (size_t)blockIdx.y * S * D;
    Q += slab;
    K += slab;
    V += slab;
    O += slab;
    // Heavy query tiles first: under the causal mask the last tiles have the most keys.
    const int q0 = (gridDim.x - 1 - blockIdx.x) * C::BR;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int qw = q0 + warp * C::RW;  // this warp's first query row; m-tile mt starts at qw + 16·mt

    // Key tiles this block visits: under the causal mask none past its last row.
    const int kv_end = causal ? min(S, q0 + C::BR) : S;
    const int n_tiles = (int)cdiv(kv_end, BC) - CUDALAB_FAULT((flags & FB_FLAG_SKIP_LAST_TILE) ? 1 : 0);

    // Prologue: Q, then the first STAGES-1 K/V tiles, one commit group each (empty groups past the
    // end keep the group count uniform for the waits below).
    fb_load_tile<D, C::BR, C::NT>(sQ, Q, q0, S);
    tc::cp_async_commit();
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; ++s) {
        if (s < n_tiles) {
            fb_load_tile<D, BC, C::NT>(sKV + (2 * s) * C::TILE_BYTES, K, s * BC, S);
            fb_load_tile<D, BC, C::NT>(sKV + (2 * s + 1) * C::TILE_BYTES, V, s * BC, S);
        }
        tc::cp_async_commit();
    }
    // Q (the oldest group) has landed once at most STAGES-1 groups are pending.
    tc::cp_async_wait<C::STAGES - 1>();
    __syncthreads();  // every thread's part of Q is visible

    // Q fragments of m-tile mt, k16 step kk: lane l addresses row (l % 16) of the m-tile, chunk
    // 2·kk + l / 16. Kept in registers for the whole kernel where they fit (C::Q_IN_REGS).
    auto load_q = [&](uint32_t(&a)[4], int mt, int kk) {
        tc::ldmatrix_x4(a, sQ + fb_off(C::BR, warp * C::RW + 16 * mt + (lane % 16), 2 * kk + lane / 16));
    };
    uint32_t qf[C::Q_IN_REGS ? MT : 1][C::Q_IN_REGS ? KD : 1][4];
    if constexpr (C::Q_IN_REGS) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kk = 0; kk < KD; ++kk) load_q(qf[mt][kk], mt, kk);
    }

    float o[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < D / 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    // Rows g and g+8 of each m-tile: running max (raw score units) and running sum.
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;

    for (int tile = 0; tile < n_tiles; ++tile) {
        // Tile `tile` has landed (STAGES-2 younger groups may still be in flight) ...
        tc::cp_async_wait<C::STAGES - 2>();
        // ... in every thread's part, and every warp is done with the stage the next copy reuses.
        __syncthreads();
        {
            const int nt = tile + C::STAGES - 1;
            const int st = nt % C::STAGES;
            if (nt < n_tiles) {
                fb_load_tile<D, BC, C::NT>(sKV + (2 * st) * C::TILE_BYTES, K, nt * BC, S);
                fb_load_tile<D, BC, C::NT>(sKV + (2 * st + 1) * C::TILE_BYTES, V, nt * BC, S);
            }
            tc::cp_async_commit();
        }
        const int k0 = tile * BC;
        // A tile wholly above the diagonal for this warp's rows: nothing to do (warp-uniform).
        if (causal && k0 > qw + C::RW - 1) continue;
        const uint32_t sK = sKV + (2 * (tile % C::STAGES)) * C::TILE_BYTES;
        const uint32_t sV = sK + C::TILE_BYTES;

        // S = Q·Kᵀ: s[mt][j] is the 16×8 block of m-tile mt and keys k0+8j..k0+8j+7. Each K
        // fragment read from shared memory feeds MT MMAs.
        float s[MT][BC / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < BC / 8; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            uint32_t qa[C::Q_IN_REGS ? 1 : MT][4];
            if constexpr (!C::Q_IN_REGS) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) load_q(qa[mt], mt, kk);
            }
#pragma unroll
            for (int jp = 0; jp < BC / 16; ++jp) {
                // K is N×K (keys × d, d contiguous): non-transposed ldmatrix. Matrices: keys
                // 16jp+0..7 at d chunk 2kk, same keys at 2kk+1, keys 16jp+8..15 at 2kk, at 2kk+1.
                uint32_t b[4];
                tc::ldmatrix_x4(b, sK + fb_off(BC, 16 * jp + (lane % 8) + 8 * (lane / 16), 2 * kk + (lane / 8) % 2));
                const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const uint32_t(&a)[4] = C::Q_IN_REGS ? qf[C::Q_IN_REGS ? mt : 0][C::Q_IN_REGS ? kk : 0]
                                                         : qa[C::Q_IN_REGS ? 0 : mt];
                    tc::mma_m16n8k16_bf16(s[mt][2 * jp], a, b0, s[mt][2 * jp]);
                    tc::mma_m16n8k16_bf16(s[mt][2 * jp + 1], a, b1, s[mt][2 * jp + 1]);
                }
            }
        }

        const bool mask_causal = causal && !CUDALAB_FAULT(flags & FB_FLAG_NO_CAUSAL_MASK);
        // P as bf16 A fragments, one per k16 step over the keys: the C fragments of n8 tiles 2kk
        // and 2kk+1 (rows g and g+8, keys 2t, 2t+1 and 8+2t, 8+2t+1) are a0..a3 as they stand.
        uint32_t pf[MT][BC / 16][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int qm = qw + 16 * mt;
            if (k0 + BC > S || (mask_causal && k0 + BC - 1 > qm)) flash_mask_tile(s[mt], k0, qm, S, mask_causal);
            flash_online_softmax(s[mt], m[mt], l[mt], o[mt], scale_log2e);  // s now holds the weights p
#pragma unroll
            for (int kk = 0; kk < BC / 16; ++kk) {
                pf[mt][kk][0] = tc::pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pf[mt][kk][1] = tc::pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pf[mt][kk][2] = tc::pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pf[mt][kk][3] = tc::pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
        }

        // O += P·V. V is K×N (keys × d, d contiguous): transposed ldmatrix. Matrices: keys
        // 16kk+0..7 at d chunk 2np, keys 16kk+8..15 at 2np, keys 0..7 at 2np+1, keys 8..15 at 2np+1.
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
#pragma unroll
            for (int np = 0; np < KD; ++np) {
                uint32_t b[4];
                tc::ldmatrix_x4_trans(b, sV + fb_off(BC, 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2), 2 * np + lane / 16));
                const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    tc::mma_m16n8k16_bf16(o[mt][2 * np], pf[mt][kk], b0, o[mt][2 * np]);
                    tc::mma_m16n8k16_bf16(o[mt][2 * np + 1], pf[mt][kk], b1, o[mt][2 * np + 1]);
                }
            }
        }
    }
    // No copy may still be writing shared memory when the block exits (empty groups only, but
    // compute-sanitizer and the next block's reuse of the SM's shared memory want it drained).
    tc::cp_async_wait<0>();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) flash_store_o<D>(O, o[mt], l[mt], qw + 16 * mt, S);  // O / l, rounded to bf16
    // With `lse`, the backward's saved statistic ln Σ_j exp(scale·q·k_j) = m·scale + ln l (m in raw
    // score units, l the sum of 2^((x - m)·scale·log2 e)): one lane of each row's four writes it.
    if (lse != nullptr && lane % 4 == 0) {
        const float scale = scale_log2e / CUDALAB_LOG2E;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = qw + 16 * mt + lane / 4 + 8 * h;
                if (row < S) lse[(size_t)blockIdx.y * S + row] = m[mt][h] * scale + log2f(l[mt][h]) / CUDALAB_LOG2E;
            }
    }
#endif
}

template <int D, int NW = FlashBf16Default<D>::NW, int STAGES = FlashBf16Default<D>::STAGES,
          int MT = FlashBf16Default<D>::MT, int BC = FB_BC>
static inline cudaError_t attn_flash_bf16_launch(int BH, int S, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                 const cudalab_bf16 *v, cudalab_bf16 *o, float scale, int causal,
                                                 int flags, cudaStream_t stream, float *lse = nullptr) {
    using C = FlashBf16Cfg<D, NW, STAGES, MT, BC>;
    const auto kernel = attn_flash_bf16_fwd<D, NW, STAGES, MT, BC>;
    if (cudalab_arch::needs_sm(80, (const void *)kernel) != nullptr) return cudaErrorNotSupported;
    const cudaError_t e = cudalab_allow_dynamic_smem(kernel, C::SMEM);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)cdiv(S, C::BR), (unsigned)BH);
    kernel<<<grid, C::NT, C::SMEM, stream>>>(q, k, v, o, S, scale * CUDALAB_LOG2E, causal, flags, lse);
    return cudaGetLastError();
}
