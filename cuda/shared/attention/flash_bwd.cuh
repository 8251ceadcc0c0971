// The attention backward: 06_flash_bwd (FP32, the recurrence as a learner reads it) and
// 07_flash_bwd_bf16 (FlashAttention-2's backward on mma.sync). Included by attention_kernels.cuh.
//
// With S = scale·Q·Kᵀ (masked), P = softmax(S) row-wise, O = P·V and the upstream gradient dO:
//   dV = Pᵀ·dO                      (V enters O linearly)
//   dP = dO·Vᵀ
//   dS = P ∘ (dP − Di),  Di = Σ_j P_ij·dP_ij = rowsum(dO ∘ O)   (the softmax's Jacobian)
//   dQ = scale · dS·K,   dK = scale · dSᵀ·Q
// Nothing of size S×S is stored: the forward saved one number per query row, the log-sum-exp
// LSE_i = ln Σ_j exp(S_ij) (natural log, float32, B×H×S), and P_ij = exp(S_ij − LSE_i) is
// recomputed tile by tile from Q, K and it. Di is computed once per row before the main pass
// (attn_bwd_rowdot), because every key block needs it and it costs one read of O and dO.
#pragma once

#include <cstdint>

#include "arch.cuh"
#include "check.cuh"
#include "cudalab.h"
#include "faults.cuh"
#include "flash_bf16.cuh"
#include "tc_ptx.cuh"

// The fault build's sabotage of both backward rungs (compiled out of the product): dS = P ∘ dP,
// the Di term dropped, so the tests can show their checks reject it.
#define FBW_FLAG_NO_DI 1

// ---- preprocessing: Di = rowsum(dO ∘ O), one warp per row, FP32 sums --------------------------
__device__ __forceinline__ float fbw_to_float(float x) { return x; }
__device__ __forceinline__ float fbw_to_float(cudalab_bf16 x) { return __uint_as_float((uint32_t)x << 16); }

template <typename T>
__global__ void __launch_bounds__(256) attn_bwd_rowdot(const T *__restrict__ dO, const T *__restrict__ O,
                                                       float *__restrict__ Di, long long rows, int D) {
    const long long row = (long long)blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;  // whole warps leave together
    const T *a = dO + row * D, *b = O + row * D;
    float acc = 0.0f;
    for (int d = lane; d < D; d += 32) acc = fmaf(fbw_to_float(a[d]), fbw_to_float(b[d]), acc);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) Di[row] = acc;
}

// =============================================================================================
// 06_flash_bwd: FP32 on the CUDA cores, two kernels that share one tile step.
//   attn_flash_bwd_kv: a block owns 32 keys; it walks the query tiles and accumulates its dK and
//     dV rows in registers (dV += Pᵀ·dO, dK += dSᵀ·Q).
//   attn_flash_bwd_q:  a block owns 32 queries; it walks the key tiles and accumulates its dQ
//     rows (dQ += dS·K). A separate pass instead of atomics: every element is written once, by
//     one thread, and the result does not depend on the order the blocks ran in.
// The second pass recomputes P and dP (2 of its 3 products): the price of having no atomics.
// Block: 256 threads. Shared memory: the four 32-row tiles Q, dO, K, V as [32][D+1] floats (the
// +1 puts the 32 rows of one column in 32 banks) and P, dS as [32][33].
// =============================================================================================
#define FBW_T 32    // rows of every tile (queries or keys)
#define FBW_NT 256  // threads of a block

template <int D>
struct FlashBwdLayout {
    static constexpr int LD = D + 1;
    static constexpr int TILE = FBW_T * LD;
    static constexpr int PLD = FBW_T + 1;
    static constexpr size_t BYTES = (size_t)(4 * TILE + 2 * FBW_T * PLD) * sizeof(float);
};

// Rows [r0, r0+32) of an S×D slab into a [32][D+1] tile, zeros past S.
template <int D>
__device__ __forceinline__ void fbw_load(float *dst, const float *__restrict__ src, int r0, int S) {
    for (int idx = threadIdx.x; idx < FBW_T * D; idx += FBW_NT) {
        const int r = idx / D, c = idx % D;
        dst[r * (D + 1) + c] = r0 + r < S ? src[(size_t)(r0 + r) * D + c] : 0.0f;
    }
}

// The tile step both kernels share: for queries q0.. (tiles Qs, dOs, with lse and Di) and keys
// k0.. (tiles Ks, Vs), P and dS into Ps and dSs ([query][key]); zero where masked (key or query
// past S, or key after query under the causal mask). Each thread does 4 of the 32×32 pairs.
template <int D>
__device__ __forceinline__ void fbw_p_ds(const float *Qs, const float *dOs, const float *Ks, const float *Vs,
                                         float *Ps, float *dSs, const float *__restrict__ lse,
                                         const float *__restrict__ Di, int q0, int k0, int S, float scale, int causal,
                                         int flags) {
    constexpr int LD = D + 1, PLD = FBW_T + 1;
    for (int idx = threadIdx.x; idx < FBW_T * FBW_T; idx += FBW_NT) {
        const int i = idx / FBW_T, j = idx % FBW_T;  // a warp: one query, 32 keys
        const int qi = q0 + i, kj = k0 + j;
        float p = 0.0f, ds = 0.0f;
        if (qi < S && kj < S && !(causal && kj > qi)) {
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < D; ++d) {
                s = fmaf(Qs[i * LD + d], Ks[j * LD + d], s);
                dp = fmaf(dOs[i * LD + d], Vs[j * LD + d], dp);
            }
            p = expf(s * scale - lse[qi]);  // P_ij = exp(S_ij - LSE_i): the softmax, without the sum
            const float di = CUDALAB_FAULT(flags & FBW_FLAG_NO_DI) ? 0.0f : Di[qi];
            ds = p * (dp - di);
        }
        Ps[i * PLD + j] = p;
        dSs[i * PLD + j] = ds;
    }
}

template <int D>
__global__ void __launch_bounds__(FBW_NT)
    attn_flash_bwd_kv(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
                      const float *__restrict__ dO, const float *__restrict__ lse, const float *__restrict__ Di,
                      float *__restrict__ dK, float *__restrict__ dV, int S, float scale, int causal, int flags) {
    using L = FlashBwdLayout<D>;
    constexpr int LD = L::LD, PLD = L::PLD, C = D / 8;  // columns per thread
    extern __shared__ float4 fbw_smem4[];
    float *Qs = reinterpret_cast<float *>(fbw_smem4), *dOs = Qs + L::TILE, *Ks = dOs + L::TILE, *Vs = Ks + L::TILE;
    float *Ps = Vs + L::TILE, *dSs = Ps + FBW_T * PLD;
    const size_t slab = (size_t)blockIdx.y * S * D;
    Q += slab, K += slab, V += slab, dO += slab, dK += slab, dV += slab;
    lse += (size_t)blockIdx.y * S, Di += (size_t)blockIdx.y * S;
    const int k0 = blockIdx.x * FBW_T;
    // Thread: key row r of the block, columns c0 + 8u (u < D/8) of its dK and dV rows.
    const int r = threadIdx.x / 8, c0 = threadIdx.x % 8;
    float dk[C], dv[C];
#pragma unroll
    for (int u = 0; u < C; ++u) dk[u] = dv[u] = 0.0f;

    fbw_load<D>(Ks, K, k0, S);
    fbw_load<D>(Vs, V, k0, S);
    // Under the causal mask, queries before k0 see none of these keys.
    const int first = causal ? k0 : 0;
    for (int q0 = first; q0 < S; q0 += FBW_T) {
        __syncthreads();  // the previous step's readers of Qs, dOs, Ps, dSs are done
        fbw_load<D>(Qs, Q, q0, S);
        fbw_load<D>(dOs, dO, q0, S);
        __syncthreads();
        fbw_p_ds<D>(Qs, dOs, Ks, Vs, Ps, dSs, lse, Di, q0, k0, S, scale, causal, flags);
        __syncthreads();
        // dV[r] += Σ_i P[i][r]·dO[i];  dK[r] += Σ_i dS[i][r]·Q[i]  (scale applied once, at the end)
        for (int i = 0; i < FBW_T; ++i) {
            const float p = Ps[i * PLD + r], ds = dSs[i * PLD + r];
#pragma unroll
            for (int u = 0; u < C; ++u) {
                dv[u] = fmaf(p, dOs[i * LD + c0 + 8 * u], dv[u]);
                dk[u] = fmaf(ds, Qs[i * LD + c0 + 8 * u], dk[u]);
            }
        }
    }
    if (k0 + r < S) {
#pragma unroll
        for (int u = 0; u < C; ++u) {
            dK[(size_t)(k0 + r) * D + c0 + 8 * u] = dk[u] * scale;
            dV[(size_t)(k0 + r) * D + c0 + 8 * u] = dv[u];
        }
    }
}

template <int D>
__global__ void __launch_bounds__(FBW_NT)
    attn_flash_bwd_q(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
                     const float *__restrict__ dO, const float *__restrict__ lse, const float *__restrict__ Di,
                     float *__restrict__ dQ, int S, float scale, int causal, int flags) {
    using L = FlashBwdLayout<D>;
    constexpr int LD = L::LD, PLD = L::PLD, C = D / 8;
    extern __shared__ float4 fbw_smem4[];
    float *Qs = reinterpret_cast<float *>(fbw_smem4), *dOs = Qs + L::TILE, *Ks = dOs + L::TILE, *Vs = Ks + L::TILE;
    float *Ps = Vs + L::TILE, *dSs = Ps + FBW_T * PLD;
    const size_t slab = (size_t)blockIdx.y * S * D;
    Q += slab, K += slab, V += slab, dO += slab, dQ += slab;
    lse += (size_t)blockIdx.y * S, Di += (size_t)blockIdx.y * S;
    const int q0 = blockIdx.x * FBW_T;
    const int r = threadIdx.x / 8, c0 = threadIdx.x % 8;  // query row r, columns c0 + 8u of dQ
    float dq[C];
#pragma unroll
    for (int u = 0; u < C; ++u) dq[u] = 0.0f;

    fbw_load<D>(Qs, Q, q0, S);
    fbw_load<D>(dOs, dO, q0, S);
    // Under the causal mask, keys past the block's last query are masked for all of its rows.
    const int kv_end = causal ? min(S, q0 + FBW_T) : S;
    for (int k0 = 0; k0 < kv_end; k0 += FBW_T) {
        __syncthreads();
        fbw_load<D>(Ks, K, k0, S);
        fbw_load<D>(Vs, V, k0, S);
        __syncthreads();
        fbw_p_ds<D>(Qs, dOs, Ks, Vs, Ps, dSs, lse, Di, q0, k0, S, scale, causal, flags);
        __syncthreads();
        // dQ[r] += Σ_j dS[r][j]·K[j]
        for (int j = 0; j < FBW_T; ++j) {
            const float ds = dSs[r * PLD + j];
#pragma unroll
            for (int u = 0; u < C; ++u) dq[u] = fmaf(ds, Ks[j * LD + c0 + 8 * u], dq[u]);
        }
    }
    if (q0 + r < S) {
#pragma unroll
        for (int u = 0; u < C; ++u) dQ[(size_t)(q0 + r) * D + c0 + 8 * u] = dq[u] * scale;
    }
}

// Enqueue 06_flash_bwd: Di into `ws` (BH·S floats), then the two passes.
template <int D>
static inline cudaError_t attn_flash_bwd_launch(int BH, int S, const float *q, const float *k, const float *v,
                                                const float *o, const float *dout, const float *lse, float *dq,
                                                float *dk, float *dv, float *ws, float scale, int causal, int flags,
                                                cudaStream_t stream) {
    const size_t smem = FlashBwdLayout<D>::BYTES;
    cudaError_t e = cudalab_allow_dynamic_smem(attn_flash_bwd_kv<D>, smem);
    if (e != cudaSuccess) return e;
    e = cudalab_allow_dynamic_smem(attn_flash_bwd_q<D>, smem);
    if (e != cudaSuccess) return e;
    const long long rows = (long long)BH * S;
    attn_bwd_rowdot<float><<<(unsigned)cdiv(rows, 8), 256, 0, stream>>>(dout, o, ws, rows, D);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)cdiv(S, FBW_T), (unsigned)BH);
    attn_flash_bwd_kv<D><<<grid, FBW_NT, smem, stream>>>(q, k, v, dout, lse, ws, dk, dv, S, scale, causal, flags);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    attn_flash_bwd_q<D><<<grid, FBW_NT, smem, stream>>>(q, k, v, dout, lse, ws, dq, S, scale, causal, flags);
    return cudaGetLastError();
}

// =============================================================================================
// 07_flash_bwd_bf16: FlashAttention-2's backward on the tensor cores (mma.sync m16n8k16, bf16 in,
// FP32 accumulate). Q, K, V, O, dO, dQ, dK, dV bf16; LSE and Di FP32.
//
// A block owns BC = 64 keys, 4 warps, warp w keys 16w..16w+15 of them. K and V stay in shared
// memory for the whole block; the query tiles (BR rows of Q and dO: 64 at D=64, 32 at D=128, so
// that dK and dV fit in the registers beside the tile's scores) stream through two cp.async
// stages. Per query tile, each warp computes the transposed products, so that its 16 keys are the
// rows (the M side of the MMA) throughout:
//   Sᵀ = K_w·Qᵀ  and  dPᵀ = V_w·dOᵀ        (16 × BR, K and V fragments by ldmatrix, Q and dO as
//                                            the "col" operand, stored N×K: plain ldmatrix)
//   Pᵀ = exp2(Sᵀ·scale·log2e − LSE·log2e),  dSᵀ = Pᵀ ∘ (dPᵀ − Di)   (masked to 0)
//   dV_w += Pᵀ·dO,  dK_w += dSᵀ·Q           (the accumulator of two n8 tiles of Pᵀ or dSᵀ is the A
//                                            fragment of one k16 step, as P in the forward; dO and
//                                            Q stored K×N: transposed ldmatrix, as V in the forward)
// dQ needs the sum over all 64 keys of the block: every warp writes its dSᵀ, transposed, into a
// shared [query][key] bf16 tile, and then each warp takes 16 query rows × 64 columns of
// dQ += scale·dS·K and adds them into an FP32 copy of dQ in the workspace with atomicAdd (red.add:
// no return value); a last kernel rounds that to bf16. dK and dV are written once, at the end.
// Causal: a key block skips the query tiles before its first key; the tiles that straddle the
// diagonal or S are masked element by element.
// Shared memory (bf16, the 128-byte swizzle of flash_bf16.cuh, fb_off): K, V (64×D each), two
// stages of Q and dO (BR×D each), dS (BR×64); then, as floats, two stages of the query tile's LSE
// and Di (BR each), copied with the tile: read from global memory right where the element-wise
// step needs them, their L2 latency sat in every tile's critical path (ncu on 08, which had the
// same pattern: 45% of its stall samples).
// =============================================================================================
#define FBW16_BC 64
#define FBW16_NW 4
#define FBW16_NT (FBW16_NW * 32)

template <int D>
struct FlashBwdBf16Cfg {
    static constexpr int BC = FBW16_BC;
    static constexpr int BR = D == 64 ? 64 : 32;  // query rows per tile
    static constexpr int KV_BYTES = BC * D * 2;   // one of K, V
    static constexpr int QT_BYTES = BR * D * 2;   // one of Q, dO in one stage
    static constexpr int DS_BYTES = BR * BC * 2;
    static constexpr int ST_OFF = 2 * KV_BYTES + 4 * QT_BYTES + DS_BYTES;  // stage s: LSE, then Di, BR floats each
    static constexpr size_t SMEM = (size_t)ST_OFF + 2 * 2 * BR * 4;
    static_assert(2 * BR <= FBW16_NT, "one thread a float of a tile's LSE and Di");
};

template <int D>
__global__ void __launch_bounds__(FBW16_NT, 2)
    attn_flash_bwd_bf16(const cudalab_bf16 *__restrict__ Q, const cudalab_bf16 *__restrict__ K,
                        const cudalab_bf16 *__restrict__ V, const cudalab_bf16 *__restrict__ dO,
                        const float *__restrict__ lse, const float *__restrict__ Di, float *__restrict__ dQacc,
                        cudalab_bf16 *__restrict__ dK, cudalab_bf16 *__restrict__ dV, int S, float scale,
                        int causal, int flags) {
#if CUDALAB_SM80_CODE  // mma.sync bf16, ldmatrix, cp.async; the host refuses sm_75 (cudalab_arch::needs_sm)
    using C = FlashBwdBf16Cfg<D>;
    constexpr int BC = C::BC, BR = C::BR;
    constexpr int KD = D / 16;   // k16 steps over D; n8-tile pairs over D
    constexpr int NQ = BR / 8;   // n8 tiles of queries in Sᵀ
    constexpr int KQ = BR / 16;  // k16 steps over the queries (dV, dK)
    extern __shared__ __align__(128) unsigned char fbw16_smem[];
    const uint32_t sK = tc::smem_u32(fbw16_smem), sV = sK + C::KV_BYTES;
    const uint32_t sQ0 = sV + C::KV_BYTES;  // stage s: Q at sQ0 + 2s·QT, dO at sQ0 + (2s+1)·QT
    const uint32_t sdS = sQ0 + 4 * C::QT_BYTES;
    cudalab_bf16 *dS_tile = reinterpret_cast<cudalab_bf16 *>(fbw16_smem + 2 * C::KV_BYTES + 4 * C::QT_BYTES);

    const size_t slab = (size_t)blockIdx.y * S * D;
    Q += slab, K += slab, V += slab, dO += slab, dQacc += slab, dK += slab, dV += slab;
    lse += (size_t)blockIdx.y * S, Di += (size_t)blockIdx.y * S;
    const int k0 = blockIdx.x * BC;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int kw = 16 * warp;  // this warp's first key in the block
    const float scale_log2e = scale * CUDALAB_LOG2E;

    const int first = causal ? (k0 / BR) * BR : 0;  // the first query tile with a query >= k0
    const int n_tiles = (int)cdiv(S - first, BR);

    const float *stats = reinterpret_cast<const float *>(fbw16_smem + C::ST_OFF);
    auto load_q_tile = [&](int it) {
        const int st = it % 2, q0 = first + it * BR;
        fb_load_tile<D, BR, FBW16_NT>(sQ0 + (2 * st) * C::QT_BYTES, Q, q0, S);
        fb_load_tile<D, BR, FBW16_NT>(sQ0 + (2 * st + 1) * C::QT_BYTES, dO, q0, S);
        if ((int)threadIdx.x < 2 * BR) {  // LSE (threads 0..BR-1) and Di (BR..2BR-1), zero past S
            const int q = q0 + (int)threadIdx.x % BR;
            const float *src = (int)threadIdx.x < BR ? lse : Di;
            tc::cp_async_4_zfill(sK + (uint32_t)(C::ST_OFF + 4 * (2 * BR * st + (int)threadIdx.x)), q < S ? src + q : src,
                                 q < S ? 4 : 0);
        }
    };
    // K and V with the first query tile: one commit group.
    fb_load_tile<D, BC, FBW16_NT>(sK, K, k0, S);
    fb_load_tile<D, BC, FBW16_NT>(sV, V, k0, S);
    load_q_tile(0);
    tc::cp_async_commit();

    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;

    for (int it = 0; it < n_tiles; ++it) {
        // The next tile's copy goes into the stage the last iteration read (every warp is past it:
        // the __syncthreads that ends an iteration); an empty group at the end keeps the count.
        if (it + 1 < n_tiles) load_q_tile(it + 1);
        tc::cp_async_commit();
        tc::cp_async_wait<1>();  // this tile (and K, V) landed, for this thread's copies ...
        __syncthreads();         // ... and for everyone's
        const int q0 = first + it * BR;
        const uint32_t sQ = sQ0 + (2 * (it % 2)) * C::QT_BYTES, sdO = sQ + C::QT_BYTES;
        const float *lse_s = stats + 2 * BR * (it % 2), *di_s = lse_s + BR;

        // Sᵀ = K_w·Qᵀ and dPᵀ = V_w·dOᵀ, 16 keys × BR queries each.
        float st[NQ][4], dpt[NQ][4];
#pragma unroll
        for (int n = 0; n < NQ; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            uint32_t ak[4], av[4];
            tc::ldmatrix_x4(ak, sK + fb_off(BC, kw + (lane % 16), 2 * kk + lane / 16));
            tc::ldmatrix_x4(av, sV + fb_off(BC, kw + (lane % 16), 2 * kk + lane / 16));
#pragma unroll
            for (int jp = 0; jp < BR / 16; ++jp) {
                // Queries 16jp+0..7 at d chunk 2kk, the same at 2kk+1, queries 16jp+8..15 at 2kk, 2kk+1.
                const int row = 16 * jp + (lane % 8) + 8 * (lane / 16), ch = 2 * kk + (lane / 8) % 2;
                uint32_t bq[4], bo[4];
                tc::ldmatrix_x4(bq, sQ + fb_off(BR, row, ch));
                tc::ldmatrix_x4(bo, sdO + fb_off(BR, row, ch));
                const uint32_t bq0[2] = {bq[0], bq[1]}, bq1[2] = {bq[2], bq[3]};
                const uint32_t bo0[2] = {bo[0], bo[1]}, bo1[2] = {bo[2], bo[3]};
                tc::mma_m16n8k16_bf16(st[2 * jp], ak, bq0, st[2 * jp]);
                tc::mma_m16n8k16_bf16(st[2 * jp + 1], ak, bq1, st[2 * jp + 1]);
                tc::mma_m16n8k16_bf16(dpt[2 * jp], av, bo0, dpt[2 * jp]);
                tc::mma_m16n8k16_bf16(dpt[2 * jp + 1], av, bo1, dpt[2 * jp + 1]);
            }
        }

        // Pᵀ and dSᵀ in place of Sᵀ and dPᵀ. Element e of n8 tile n: key kw + g + 8(e/2), query
        // 8n + 2t + e%2. Masked where the key or query is past S, or the key after the query.
        const bool edge = k0 + BC > S || q0 + BR > S || (causal && q0 < k0 + BC - 1);
        const bool no_di = CUDALAB_FAULT(flags & FBW_FLAG_NO_DI) != 0;
#pragma unroll
        for (int n = 0; n < NQ; ++n) {
            const float2 lv = *reinterpret_cast<const float2 *>(lse_s + 8 * n + 2 * t);
            const float2 dv2 = *reinterpret_cast<const float2 *>(di_s + 8 * n + 2 * t);
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int qi = q0 + 8 * n + 2 * t + c;
                const bool qin = qi < S;
                const float l2 = (c ? lv.y : lv.x) * CUDALAB_LOG2E;  // 0 past S (zero-filled)
                const float di = no_di ? 0.0f : (c ? dv2.y : dv2.x);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int e = 2 * h + c, kj = k0 + kw + g + 8 * h;
                    float p = tc::exp2_approx(fmaf(st[n][e], scale_log2e, -l2));
                    if (edge && (!qin || kj >= S || (causal && kj > qi))) p = 0.0f;
                    st[n][e] = p;
                    dpt[n][e] = p * (dpt[n][e] - di);
                }
            }
        }

        // dV_w += Pᵀ·dO and dK_w += dSᵀ·Q: A fragments of k16 step kk (queries 16kk..16kk+15) are
        // n8 tiles 2kk and 2kk+1 of Pᵀ / dSᵀ; B by transposed ldmatrix of dO / Q (queries × d).
#pragma unroll
        for (int kk = 0; kk < KQ; ++kk) {
            const uint32_t ap[4] = {tc::pack_bf16x2(st[2 * kk][0], st[2 * kk][1]),
                                    tc::pack_bf16x2(st[2 * kk][2], st[2 * kk][3]),
                                    tc::pack_bf16x2(st[2 * kk + 1][0], st[2 * kk + 1][1]),
                                    tc::pack_bf16x2(st[2 * kk + 1][2], st[2 * kk + 1][3])};
            const uint32_t as[4] = {tc::pack_bf16x2(dpt[2 * kk][0], dpt[2 * kk][1]),
                                    tc::pack_bf16x2(dpt[2 * kk][2], dpt[2 * kk][3]),
                                    tc::pack_bf16x2(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                                    tc::pack_bf16x2(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
            for (int np = 0; np < KD; ++np) {
                const int row = 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2), ch = 2 * np + lane / 16;
                uint32_t bo[4], bq[4];
                tc::ldmatrix_x4_trans(bo, sdO + fb_off(BR, row, ch));
                tc::ldmatrix_x4_trans(bq, sQ + fb_off(BR, row, ch));
                const uint32_t bo0[2] = {bo[0], bo[1]}, bo1[2] = {bo[2], bo[3]};
                const uint32_t bq0[2] = {bq[0], bq[1]}, bq1[2] = {bq[2], bq[3]};
                tc::mma_m16n8k16_bf16(dv[2 * np], ap, bo0, dv[2 * np]);
                tc::mma_m16n8k16_bf16(dv[2 * np + 1], ap, bo1, dv[2 * np + 1]);
                tc::mma_m16n8k16_bf16(dk[2 * np], as, bq0, dk[2 * np]);
                tc::mma_m16n8k16_bf16(dk[2 * np + 1], as, bq1, dk[2 * np + 1]);
            }
        }

        // dSᵀ into the shared tile as dS ([query][key], keys the 64 columns of one swizzled panel).
#pragma unroll
        for (int n = 0; n < NQ; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int qr = 8 * n + 2 * t + (e & 1), key = kw + g + 8 * (e >> 1);
                const uint32_t off = fb_off(BR, qr, key / 8) + (key % 8) * 2;
                dS_tile[off / 2] = (cudalab_bf16)(tc::pack_bf16x2(dpt[n][e], 0.0f) & 0xffffu);
            }
        __syncthreads();

        // dQ += scale·dS·K: warp w takes m-tile w % KQ (16 queries) and columns (w / KQ)·D/(4/KQ)..,
        // 16 columns (one ldmatrix_x4_trans of K, two n8 tiles) at a time, added to dQacc.
        {
            constexpr int SPLIT = FBW16_NW / KQ;  // warps per m-tile: 1 (BR = 64) or 2 (BR = 32)
            constexpr int NP = KD / SPLIT;        // 16-column steps per warp
            const int mq = warp % KQ, np0 = (warp / KQ) * NP;
            uint32_t a[BC / 16][4];
#pragma unroll
            for (int kk = 0; kk < BC / 16; ++kk)
                tc::ldmatrix_x4(a[kk], sdS + fb_off(BR, 16 * mq + (lane % 16), 2 * kk + lane / 16));
#pragma unroll
            for (int np = np0; np < np0 + NP; ++np) {
                float acc[2][4] = {};
#pragma unroll
                for (int kk = 0; kk < BC / 16; ++kk) {
                    uint32_t b[4];
                    tc::ldmatrix_x4_trans(b, sK + fb_off(BC, 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2),
                                                         2 * np + lane / 16));
                    const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
                    tc::mma_m16n8k16_bf16(acc[0], a[kk], b0, acc[0]);
                    tc::mma_m16n8k16_bf16(acc[1], a[kk], b1, acc[1]);
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int qi = q0 + 16 * mq + g + 8 * h;
                    if (qi >= S) continue;
                    float *row = dQacc + (size_t)qi * D + 16 * np + 2 * t;
#pragma unroll
                    for (int x = 0; x < 2; ++x) {
                        atomicAdd(row + 8 * x, acc[x][2 * h] * scale);
                        atomicAdd(row + 8 * x + 1, acc[x][2 * h + 1] * scale);
                    }
                }
            }
        }
        __syncthreads();  // dS and this stage are free for the next iteration
    }
    tc::cp_async_wait<0>();  // only empty groups can be pending; drained before the block exits

    // dK = scale·Σ dSᵀ·Q, dV = Σ Pᵀ·dO: rows kw + g and kw + g + 8 of the block, bf16 pairs.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int kj = k0 + kw + g + 8 * h;
        if (kj >= S) continue;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            flash_store_pair(dK + (size_t)kj * D + 8 * n + 2 * t, dk[n][2 * h] * scale, dk[n][2 * h + 1] * scale);
            flash_store_pair(dV + (size_t)kj * D + 8 * n + 2 * t, dv[n][2 * h], dv[n][2 * h + 1]);
        }
    }
#endif
}

// dQ: the FP32 accumulator rounded to bf16, two elements a thread.
__global__ void __launch_bounds__(256) attn_bwd_dq_to_bf16(const float *__restrict__ acc, cudalab_bf16 *__restrict__ dq,
                                                           long long n2) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n2) return;
    const float2 x = reinterpret_cast<const float2 *>(acc)[i];
#if CUDALAB_SM80_CODE
    reinterpret_cast<uint32_t *>(dq)[i] = tc::pack_bf16x2(x.x, x.y);
#else
    (void)x, (void)dq;
#endif
}

// What both bf16 backward rungs (07, 08) enqueue around their main kernel. ws: Di (BH·S floats),
// then the FP32 dQ accumulator (BH·S·D floats): the accumulator zeroed, Di = rowsum(dO ∘ O), the
// main kernel (main(di, acc) launches it and returns cudaGetLastError()), dQ rounded to bf16.
template <typename Main>
static inline cudaError_t attn_bwd_bf16_around(int BH, int S, int D, const cudalab_bf16 *o, const cudalab_bf16 *dout,
                                               cudalab_bf16 *dq, float *ws, cudaStream_t stream, Main main) {
    const long long rows = (long long)BH * S;
    // Di first, rounded up to 4 floats (attn_backward_workspace_bytes): the accumulator after it
    // stays 16-byte aligned for the float2 reads of the last kernel whatever B·H·S is.
    float *di = ws, *acc = ws + (rows + 3) / 4 * 4;
    cudaError_t e = cudaMemsetAsync(acc, 0, (size_t)rows * D * sizeof(float), stream);
    if (e != cudaSuccess) return e;
    attn_bwd_rowdot<cudalab_bf16><<<(unsigned)cdiv(rows, 8), 256, 0, stream>>>(dout, o, di, rows, D);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    e = main((const float *)di, acc);
    if (e != cudaSuccess) return e;
    const long long n2 = rows * D / 2;
    attn_bwd_dq_to_bf16<<<(unsigned)cdiv(n2, 256), 256, 0, stream>>>(acc, dq, n2);
    return cudaGetLastError();
}

// Enqueue 07_flash_bwd_bf16.
template <int D>
static inline cudaError_t attn_flash_bwd_bf16_launch(int BH, int S, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                     const cudalab_bf16 *v, const cudalab_bf16 *o,
                                                     const cudalab_bf16 *dout, const float *lse, cudalab_bf16 *dq,
                                                     cudalab_bf16 *dk, cudalab_bf16 *dv, float *ws, float scale,
                                                     int causal, int flags, cudaStream_t stream) {
    using C = FlashBwdBf16Cfg<D>;
    const auto kernel = attn_flash_bwd_bf16<D>;
    if (cudalab_arch::needs_sm(80, (const void *)kernel) != nullptr) return cudaErrorNotSupported;
    const cudaError_t e = cudalab_allow_dynamic_smem(kernel, C::SMEM);
    if (e != cudaSuccess) return e;
    return attn_bwd_bf16_around(BH, S, D, o, dout, dq, ws, stream, [&](const float *di, float *acc) {
        const dim3 grid((unsigned)cdiv(S, C::BC), (unsigned)BH);
        kernel<<<grid, FBW16_NT, C::SMEM, stream>>>(q, k, v, dout, lse, di, acc, dk, dv, S, scale, causal, flags);
        return cudaGetLastError();
    });
}
