// attention kernels, shared by every program that needs attention (attention itself and
// transformer_block). Include as "attention/attention_kernels.cuh" (the Makefile passes -Icuda/shared).
//
// Q, K, V and O are float32, B×H×S×D row-major: batch·head index bh owns the S×D slab at bh·S·D.
//   O = softmax(scale · Q·Kᵀ, row-wise; with `causal`, key j > query i is masked) · V
//
// Variants, in the order a learner meets them:
//   01_naive  three kernels: S = scale·Q·Kᵀ (matmul_kernels.cuh), attn_naive_softmax (row-wise,
//             stable), O = P·V (matmul_kernels.cuh). The BH×S×S score matrix lives in a workspace.
//   02_flash  one kernel, attn_flash_fwd<D>: a block owns 64 query rows; it walks the keys in tiles
//             of 64, keeps a running max and sum per row (online softmax) and never writes a score.
//             D must be 32, 64 or 128.
//   03_flash_bf16  FlashAttention-2 forward on the tensor cores, bf16 in and out (flash_bf16.cuh).
//   04_flash_3xtf32  float32 on the tensor cores with 3xTF32 error compensation (flash_3xtf32.cuh).
//   05_flash_wgmma  sm_90a: FlashAttention-3's design, bf16: TMA, wgmma, warp specialisation,
//             ping-pong and intra-warpgroup pipelining (flash_wgmma.cuh).
// The backward rungs (flash_bwd.cuh) follow in the same table. Each names a training pair: its
// forward is the rung it differentiates, which also saves the log-sum-exp the backward needs.
//   06_flash_bwd       FP32: forward 02_flash; backward the recurrence on the CUDA cores, dK and dV
//             in one pass over the query tiles, dQ in a second pass over the key tiles.
//   07_flash_bwd_bf16  bf16: forward 03_flash_bf16; backward FlashAttention-2's on mma.sync, dK and
//             dV in registers, dQ by FP32 atomics.
//   08_flash_bwd_wgmma sm_90a, bf16: forward 03_flash_bf16; backward 07's pass on wgmma and TMA,
//             the products transposed so each result is the next one's register operand
//             (flash_bwd_wgmma.cuh).
//   09_flash_bwd_ws    sm_90a, bf16: forward 03_flash_bf16; backward 08's chain with FlashAttention-3's
//             warp specialisation: a producer warpgroup loads by TMA and adds dQ by TMA reduce, two
//             or three consumer warpgroups of 64 keys each compute (flash_bwd_ws.cuh).
// Both forwards (02, 03 and its tuning choices) take an optional `lse` output (B×H×S float32,
// ln Σ_j exp(scale·q·k_j)); NULL saves nothing. The other forwards refuse one.
// The fault build alone (-DCUDALAB_FAULTS, cuda/common/faults.cuh; only the tests build it) knows three
// more variants, wrong answers that the checkers must reject: "flash_skip_last_tile" runs 02_flash
// without its last key tile; "flash_bf16_skip_last_tile" and "flash_bf16_no_causal_mask" sabotage
// 03_flash_bf16 the same way and by leaving the diagonal tiles unmasked. In the product their names
// are unknown variants and the kernels' fault paths are compiled out (CUDALAB_FAULT is 0).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "attention_limits.h"
#include "check.cuh"
#include "cudalab.h"
#include "faults.cuh"
#include "matmul/matmul_kernels.cuh"
#include "flash_bf16.cuh"
#include "flash_3xtf32.cuh"
#include "flash_wgmma.cuh"
#include "flash_bwd.cuh"
#include "flash_bwd_wgmma.cuh"
#include "flash_bwd_ws.cuh"

// The matmul variant and tile width the naive attention uses for its two products.
#define ATTN_NAIVE_MATMUL "02_tiled"
#define ATTN_NAIVE_MATMUL_TILE 32

enum attn_variant_id_t {
    ATTN_01_NAIVE = 1,
    ATTN_02_FLASH = 2,
    ATTN_03_FLASH_BF16 = 3,
    ATTN_04_FLASH_3XTF32 = 4,
    ATTN_05_FLASH_WGMMA = 5,
    ATTN_06_FLASH_BWD = 6,
    ATTN_07_FLASH_BWD_BF16 = 7,
    ATTN_08_FLASH_BWD_WGMMA = 8,
    ATTN_09_FLASH_BWD_WS = 9,
    ATTN_FLASH_WGMMA_FIRST = 60,  // tuning: 05_flash_wgmma's choices, ATTN_WGMMA_CONFIGS below
    ATTN_FLASH_WGMMA_LAST = 79,
    ATTN_FLASH_BF16_W8S2 = 80,  // tuning: 03_flash_bf16 with (warps, stages) fixed, any D
    ATTN_FLASH_BF16_W8S3 = 81,
    ATTN_FLASH_BF16_W4S2 = 82,
    ATTN_FLASH_BF16_W4S3 = 83,
    ATTN_FLASH_BF16_W4K32S2 = 84,    // ... with 32-key tiles (fewer registers: 3 blocks of 4 warps at D=128)
    ATTN_FLASH_BF16_W4K32S3 = 85,
    ATTN_FLASH_BF16_W4M2S2 = 86,     // ... with 32 query rows a warp (two m16 tiles), FlashAttention-2's split
    ATTN_FLASH_BF16_W4M2K32S2 = 87,  // ... and 32-key tiles (room in the registers for 32 rows of O at D=128)
    ATTN_FLASH_BF16_W4M2K32S3 = 88,
    ATTN_FLASH_BWD_BF16_NO_DI = 95,       // the fault build's (attn_variant_id names them only there)
    ATTN_FLASH_BWD_NO_DI = 96,
    ATTN_FLASH_BF16_NO_CAUSAL_MASK = 97,
    ATTN_FLASH_BF16_SKIP_LAST_TILE = 98,
    ATTN_FLASH_SKIP_LAST_TILE = 99
};

// 05_flash_wgmma's tuning choices: (name, id, keys per tile, stages, schedule). "plain" issues
// S = Q·Kᵀ and waits for it before the softmax, then P·V; "pp" adds the ping-pong of the two consumer
// warpgroups, "ip" the intra-warpgroup overlap of softmax_j with P_{j-1}·V_{j-1}, "ppip" both.
// attention.cu's config table lists the same names (a test checks the two agree).
#define ATTN_WGMMA_CONFIGS(X)                                               \
    X("flash_wgmma_plain_k128s2", 60, 128, 2, 0)                            \
    X("flash_wgmma_pp_k128s2", 61, 128, 2, FW_PINGPONG)                     \
    X("flash_wgmma_ip_k128s2", 62, 128, 2, FW_INTRA)                        \
    X("flash_wgmma_ppip_k128s2", 63, 128, 2, FW_PINGPONG | FW_INTRA)        \
    X("flash_wgmma_ppip_k128s3", 64, 128, 3, FW_PINGPONG | FW_INTRA)        \
    X("flash_wgmma_ppip_k64s2", 65, 64, 2, FW_PINGPONG | FW_INTRA)          \
    X("flash_wgmma_ppip_k64s3", 66, 64, 3, FW_PINGPONG | FW_INTRA)

static inline int attn_variant_id(const char *variant) {
    if (variant == nullptr) return 0;
#define ATTN_WGMMA_ID(NAME, ID, BC, ST, SCHED) \
    if (strcmp(variant, NAME) == 0) return ID;
    ATTN_WGMMA_CONFIGS(ATTN_WGMMA_ID)
#undef ATTN_WGMMA_ID
    if (strcmp(variant, "05_flash_wgmma") == 0) return ATTN_05_FLASH_WGMMA;
    if (strcmp(variant, "01_naive") == 0) return ATTN_01_NAIVE;
    if (strcmp(variant, "02_flash") == 0) return ATTN_02_FLASH;
    if (strcmp(variant, "03_flash_bf16") == 0) return ATTN_03_FLASH_BF16;
    if (strcmp(variant, "04_flash_3xtf32") == 0) return ATTN_04_FLASH_3XTF32;
    if (strcmp(variant, "06_flash_bwd") == 0) return ATTN_06_FLASH_BWD;
    if (strcmp(variant, "07_flash_bwd_bf16") == 0) return ATTN_07_FLASH_BWD_BF16;
    if (strcmp(variant, "08_flash_bwd_wgmma") == 0) return ATTN_08_FLASH_BWD_WGMMA;
    if (strcmp(variant, "09_flash_bwd_ws") == 0) return ATTN_09_FLASH_BWD_WS;
#ifdef CUDALAB_FAULTS
    if (strcmp(variant, "flash_skip_last_tile") == 0) return ATTN_FLASH_SKIP_LAST_TILE;
    if (strcmp(variant, "flash_bf16_skip_last_tile") == 0) return ATTN_FLASH_BF16_SKIP_LAST_TILE;
    if (strcmp(variant, "flash_bf16_no_causal_mask") == 0) return ATTN_FLASH_BF16_NO_CAUSAL_MASK;
    if (strcmp(variant, "flash_bwd_no_di") == 0) return ATTN_FLASH_BWD_NO_DI;
    if (strcmp(variant, "flash_bwd_bf16_no_di") == 0) return ATTN_FLASH_BWD_BF16_NO_DI;
#endif
    if (strcmp(variant, "flash_bf16_w8s2") == 0) return ATTN_FLASH_BF16_W8S2;
    if (strcmp(variant, "flash_bf16_w8s3") == 0) return ATTN_FLASH_BF16_W8S3;
    if (strcmp(variant, "flash_bf16_w4s2") == 0) return ATTN_FLASH_BF16_W4S2;
    if (strcmp(variant, "flash_bf16_w4s3") == 0) return ATTN_FLASH_BF16_W4S3;
    if (strcmp(variant, "flash_bf16_w4k32s2") == 0) return ATTN_FLASH_BF16_W4K32S2;
    if (strcmp(variant, "flash_bf16_w4k32s3") == 0) return ATTN_FLASH_BF16_W4K32S3;
    if (strcmp(variant, "flash_bf16_w4m2s2") == 0) return ATTN_FLASH_BF16_W4M2S2;
    if (strcmp(variant, "flash_bf16_w4m2k32s2") == 0) return ATTN_FLASH_BF16_W4M2K32S2;
    if (strcmp(variant, "flash_bf16_w4m2k32s3") == 0) return ATTN_FLASH_BF16_W4M2K32S3;
    return 0;
}

// 05_flash_wgmma and its tuning choices: the sm_90a kernel.
static inline bool attn_is_wgmma(int id) {
    return id == ATTN_05_FLASH_WGMMA || (id >= ATTN_FLASH_WGMMA_FIRST && id <= ATTN_FLASH_WGMMA_LAST);
}

// The backward rungs (and the fault build's sabotaged ones): attention_backward* take them.
static inline bool attn_is_backward(int id) {
    return id == ATTN_06_FLASH_BWD || id == ATTN_07_FLASH_BWD_BF16 || id == ATTN_08_FLASH_BWD_WGMMA ||
           id == ATTN_09_FLASH_BWD_WS || id == ATTN_FLASH_BWD_NO_DI || id == ATTN_FLASH_BWD_BF16_NO_DI;
}

// Variants whose Q, K, V and O are bf16 (the others are float32).
static inline bool attn_is_bf16(int id) {
    return id == ATTN_03_FLASH_BF16 || attn_is_wgmma(id) || id == ATTN_FLASH_BF16_SKIP_LAST_TILE || id == ATTN_FLASH_BF16_NO_CAUSAL_MASK ||
           (id >= ATTN_FLASH_BF16_W8S2 && id <= ATTN_FLASH_BF16_W4M2K32S3) || id == ATTN_07_FLASH_BWD_BF16 ||
           id == ATTN_08_FLASH_BWD_WGMMA || id == ATTN_09_FLASH_BWD_WS || id == ATTN_FLASH_BWD_BF16_NO_DI;
}

// The forward a backward rung pairs with (it saves the log-sum-exp): 02_flash or 03_flash_bf16; any
// other variant is its own forward.
static inline int attn_forward_id(int id) {
    if (!attn_is_backward(id)) return id;
    return attn_is_bf16(id) ? ATTN_03_FLASH_BF16 : ATTN_02_FLASH;
}

// The forwards that can save the log-sum-exp: 02_flash, 03_flash_bf16 and its tuning choices.
static inline bool attn_saves_lse(int id) {
    const int f = attn_forward_id(id);
    return f == ATTN_02_FLASH || f == ATTN_03_FLASH_BF16 || (f >= ATTN_FLASH_BF16_W8S2 && f <= ATTN_FLASH_BF16_W4M2K32S3);
}

// Why a variant cannot run on this GPU with this build, or nullptr (cuda/common/arch.cuh): the
// sm_90a kernels (05 and its choices, 08's and 09's backwards) need sm_90a; the other tensor-core variants (03 and its
// choices, 04, the sabotaged bf16 ones) need sm_80 (mma.sync, ldmatrix, cp.async); 01 and 02 run
// everywhere. Every kernel of this file shares one target, so 03's default answers for the sm_80 ones.
static inline const char *attn_unsupported_reason(int id) {
    if (attn_is_wgmma(id) || id == ATTN_08_FLASH_BWD_WGMMA || id == ATTN_09_FLASH_BWD_WS) return tma_host::sm90a_unsupported_reason();
    if (attn_is_bf16(id) || id == ATTN_04_FLASH_3XTF32) {
        using Dflt = FlashBf16Default<64>;
        return cudalab_arch::needs_sm(80, (const void *)attn_flash_bf16_fwd<64, Dflt::NW, Dflt::STAGES, Dflt::MT, FB_BC>);
    }
    return nullptr;
}

// ---------------------------------------------------------------------------------------------
// 01_naive: the softmax between the two matmuls.
// One warp per row of the score matrix. Pass 1 keeps a running (max, sum of exp) per lane and
// merges the 32 lanes; pass 2 rewrites the row as probabilities, zero where the mask applies.
// Subtracting the row max keeps exp() from overflowing whatever the scores are.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void attn_merge(float &m, float &l, float m2, float l2) {
    const float mn = fmaxf(m, m2);
    // -inf on both sides (a lane that saw no valid column) must not produce exp(-inf + inf) = NaN.
    const float a = (m == -INFINITY) ? 0.0f : expf(m - mn);
    const float b = (m2 == -INFINITY) ? 0.0f : expf(m2 - mn);
    l = l * a + l2 * b;
    m = mn;
}

__global__ void __launch_bounds__(256) attn_naive_softmax(float *__restrict__ P, long long rows, int S, int causal) {
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;  // whole warps leave together: the grid is rounded up to 8 rows a block
    float *p = P + row * S;
    const int i = (int)(row % S);           // the query index of this row
    const int valid = causal ? i + 1 : S;   // columns j < valid take part
    float m = -INFINITY, l = 0.0f;
    for (int j = lane; j < valid; j += 32) {
        const float s = p[j];
        if (s > m) {
            l = l * expf(m - s) + 1.0f;
            m = s;
        } else {
            l += expf(s - m);
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float l2 = __shfl_xor_sync(0xffffffffu, l, off);
        attn_merge(m, l, m2, l2);
    }
    const float inv = 1.0f / l;
    for (int j = lane; j < S; j += 32) p[j] = (j < valid) ? expf(p[j] - m) * inv : 0.0f;
}

// ---------------------------------------------------------------------------------------------
// 02_flash
// Block: 128 threads, 64 query rows. Threads form 8 groups of 16 lanes (half-warps); group g owns
// rows 8g..8g+7 of the block. For a 64-key tile, lane lg of the group computes the scores of its
// 8 rows against keys lg, lg+16, lg+32, lg+48 (an 8×4 register tile), and for the output it owns
// columns lg*4..lg*4+3 of every 64-column chunk of D (D/16 columns: a float2 for D = 32).
// Row statistics are shared by the 16 lanes of a group through xor-shuffles (offsets < 16 stay
// inside the half-warp).
// Shared memory (floats): Qs, the query tile transposed and pre-scaled, [D][64+4]; one tile
// buffer for K and then V, [64][D+4]; Ps, the probabilities of the tile, [64][64+4] (+4).
// Padding: K rows of D+4 floats put the 8 lanes of a quarter-warp reading rows lg..lg+7 into 8
// different bank quads; Ps rows of group pairs are offset by 4 floats for the same reason.
// ---------------------------------------------------------------------------------------------
// EXERCISE flash_softmax: copy
#define FA_BR 64
#define FA_BC 64
#define FA_NT 128
#define FA_TM 8

template <int D>
struct FlashLayout {
    static constexpr int QS_LD = FA_BR + 4;
    static constexpr int KV_LD = D + 4;
    static constexpr int PS_LD = FA_BC + 4;
    static constexpr int QS_SIZE = D * QS_LD;
    static constexpr int KV_SIZE = FA_BC * KV_LD;
    static constexpr int PS_SIZE = FA_BR * PS_LD + 4;
    static constexpr size_t BYTES = (size_t)(QS_SIZE + KV_SIZE + PS_SIZE) * sizeof(float);
    static constexpr int OC = D / 16;  // output columns per thread
};

__device__ __forceinline__ float f4_get(const float4 &v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Ps offset of (row, col): rows of odd 8-row groups shifted by one bank quad.
__device__ __forceinline__ int ps_index(int row, int col) { return row * (FA_BC + 4) + ((row >> 3) & 1) * 4 + col; }

// Copy rows [r0, r0+64) of a S×D slab into a [64][ld] shared tile; rows past S become zeros
// (they are masked out of the softmax, and a zero V row adds nothing).
template <int D>
__device__ __forceinline__ void flash_load_rows(float *dst, int ld, const float *__restrict__ src, int r0, int S) {
    constexpr int C4 = D / 4;
    for (int idx = threadIdx.x; idx < FA_BC * C4; idx += FA_NT) {
        const int r = idx / C4, c4 = idx % C4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r0 + r < S) v = __ldg(reinterpret_cast<const float4 *>(src + (size_t)(r0 + r) * D) + c4);
        *reinterpret_cast<float4 *>(dst + r * ld + c4 * 4) = v;
    }
}

template <int D>
__global__ void __launch_bounds__(FA_NT)
    attn_flash_fwd(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
                   float *__restrict__ O, int S, float scale_log2e, int causal, int skip_last,
                   float *__restrict__ lse = nullptr) {
    using L = FlashLayout<D>;
    constexpr int OC = L::OC;
    extern __shared__ float4 attn_smem4[];
    float *Qs = reinterpret_cast<float *>(attn_smem4);
    float *KVs = Qs + L::QS_SIZE;
    float *Ps = KVs + L::KV_SIZE;

    const size_t slab = (size_t)blockIdx.y * S * D;
    Q += slab;
    K += slab;
    V += slab;
    O += slab;
    const int q0 = blockIdx.x * FA_BR;
    const int tid = threadIdx.x;
    const int lg = tid % 16;            // lane in the 16-lane group
    const int r0 = (tid / 16) * FA_TM;  // the group's first row in the block

    // Q tile, transposed so that a thread's 8 rows at one d are two float4s, and multiplied by
    // scale·log2(e) once here: scores then come out in base-2 units and exp2 replaces exp.
    {
        constexpr int C4 = D / 4;
        for (int idx = tid; idx < FA_BR * C4; idx += FA_NT) {
            const int r = idx / C4, c4 = idx % C4;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (q0 + r < S) v = __ldg(reinterpret_cast<const float4 *>(Q + (size_t)(q0 + r) * D) + c4);
            Qs[(c4 * 4 + 0) * L::QS_LD + r] = v.x * scale_log2e;
            Qs[(c4 * 4 + 1) * L::QS_LD + r] = v.y * scale_log2e;
            Qs[(c4 * 4 + 2) * L::QS_LD + r] = v.z * scale_log2e;
            Qs[(c4 * 4 + 3) * L::QS_LD + r] = v.w * scale_log2e;
        }
    }

    float o[FA_TM][OC];
    float m[FA_TM], l[FA_TM];
#pragma unroll
    for (int r = 0; r < FA_TM; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < OC; ++c) o[r][c] = 0.0f;
    }

    // Keys past the block's last row can't be seen by any of its rows under the causal mask.
    const int kv_end = causal ? min(S, q0 + FA_BR) : S;
    const int n_tiles = (int)cdiv(kv_end, FA_BC) - CUDALAB_FAULT(skip_last);

    for (int t = 0; t < n_tiles; ++t) {
        const int k0 = t * FA_BC;
        // The previous tile's P·V still reads KVs and Ps (and, at t = 0, Qs is being written):
        // everyone must be past it before K overwrites the buffer.
        __syncthreads();
        flash_load_rows<D>(KVs, L::KV_LD, K, k0, S);
        // Scores read every row of the K tile and every column of Qs, loaded by other threads.
        __syncthreads();

        // s = Q_tile · K_tileᵀ for this thread's 8 rows × 4 keys.
        float s[FA_TM][4];
#pragma unroll
        for (int r = 0; r < FA_TM; ++r)
#pragma unroll
            for (int c = 0; c < 4; ++c) s[r][c] = 0.0f;
#pragma unroll 2
        for (int k = 0; k < D; k += 4) {
            float4 kv[4];
#pragma unroll
            for (int c = 0; c < 4; ++c) kv[c] = *reinterpret_cast<const float4 *>(KVs + (lg + 16 * c) * L::KV_LD + k);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float4 qa = *reinterpret_cast<const float4 *>(Qs + (k + i) * L::QS_LD + r0);
                const float4 qb = *reinterpret_cast<const float4 *>(Qs + (k + i) * L::QS_LD + r0 + 4);
                const float q[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
                for (int r = 0; r < FA_TM; ++r)
#pragma unroll
                    for (int c = 0; c < 4; ++c) s[r][c] = fmaf(q[r], f4_get(kv[c], i), s[r][c]);
            }
        }

        // Mask keys past S (the ragged last tile) and, under the causal mask, keys after the query.
        // Only tiles that straddle S or the diagonal need it.
        if (k0 + FA_BC > S || (causal && k0 + FA_BC - 1 > q0)) {
#pragma unroll
            for (int r = 0; r < FA_TM; ++r) {
                const int i = q0 + r0 + r;
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int j = k0 + lg + 16 * c;
                    if (j >= S || (causal && j > i)) s[r][c] = -INFINITY;
                }
            }
        }

        // Online softmax. With m the running max of a row and l the running sum of exp2(s - m)
        // over the keys seen so far, and O the running sum of exp2(s - m)·v:
        //   m' = max(m, max of this tile);  alpha = exp2(m - m')
        //   l' = alpha·l + Σ exp2(s - m');  O' = alpha·O + Σ exp2(s - m')·v
        // Every old term exp2(s - m) becomes exp2(s - m') after the multiplication by alpha, so
        // O'/l' is the softmax over all keys so far, and no exponent is ever positive (no overflow).
        // The first tile always holds key 0, which no mask removes, so m' is finite from then on;
        // alpha = exp2(-inf - m') = 0 on the first tile wipes the zero-initialised O and l anyway.
#pragma unroll
        for (int r = 0; r < FA_TM; ++r) {
            float mt = fmaxf(fmaxf(s[r][0], s[r][1]), fmaxf(s[r][2], s[r][3]));
#pragma unroll
            for (int off = 8; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
// EXERCISE flash_softmax: begin row r's update (mt, the tile's max over the group, is computed above; scores are in
// EXERCISE flash_softmax: todo base 2): m_new = the larger of m[r] and mt; alpha = exp2f(m[r] - m_new), the factor that
// EXERCISE flash_softmax: todo rescales what was summed under the old max; for c = 0..3, p = exp2f(s[r][c] - m_new),
// EXERCISE flash_softmax: todo stored at Ps[ps_index(r0 + r, lg + 16 * c)] and added to this lane's sum rs; rs summed over
// EXERCISE flash_softmax: todo the 16 lanes of the group (__shfl_xor_sync with offsets 8, 4, 2, 1); then l[r] = alpha * l[r] +
// EXERCISE flash_softmax: todo rs, m[r] = m_new, and every o[r][c] (c < OC) multiplied by alpha.
            const float m_new = fmaxf(m[r], mt);
            const float alpha = exp2f(m[r] - m_new);
            float rs = 0.0f;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const float p = exp2f(s[r][c] - m_new);
                rs += p;
                Ps[ps_index(r0 + r, lg + 16 * c)] = p;
            }
#pragma unroll
            for (int off = 8; off > 0; off >>= 1) rs += __shfl_xor_sync(0xffffffffu, rs, off);
            l[r] = l[r] * alpha + rs;
            m[r] = m_new;
#pragma unroll
            for (int c = 0; c < OC; ++c) o[r][c] *= alpha;
// EXERCISE flash_softmax: end
        }
        // All threads must be done reading K before V replaces it, and P·V reads whole rows of Ps
        // written by the other 15 lanes of the group.
        __syncthreads();
        flash_load_rows<D>(KVs, L::KV_LD, V, k0, S);
        // The V tile comes from every thread's loads.
        __syncthreads();

        // O += P · V for this thread's 8 rows × D/16 columns.
#pragma unroll 2
        for (int j = 0; j < FA_BC; j += 4) {
            float4 p[FA_TM];
#pragma unroll
            for (int r = 0; r < FA_TM; ++r) p[r] = *reinterpret_cast<const float4 *>(Ps + ps_index(r0 + r, j));
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float *vrow = KVs + (j + i) * L::KV_LD;
                float v[OC];
                if constexpr (OC >= 4) {
#pragma unroll
                    for (int ch = 0; ch < OC / 4; ++ch) {
                        const float4 t4 = *reinterpret_cast<const float4 *>(vrow + ch * 64 + lg * 4);
                        v[ch * 4 + 0] = t4.x;
                        v[ch * 4 + 1] = t4.y;
                        v[ch * 4 + 2] = t4.z;
                        v[ch * 4 + 3] = t4.w;
                    }
                } else {
                    const float2 t2 = *reinterpret_cast<const float2 *>(vrow + lg * 2);
                    v[0] = t2.x;
                    v[1] = t2.y;
                }
#pragma unroll
                for (int r = 0; r < FA_TM; ++r) {
                    const float pr = f4_get(p[r], i);
#pragma unroll
                    for (int c = 0; c < OC; ++c) o[r][c] = fmaf(pr, v[c], o[r][c]);
                }
            }
        }
    }

    // O / l, rows past S dropped. A row with l = 0 only happens when tiles were skipped on purpose.
    // With `lse`, the backward's saved statistic: ln Σ_j exp(scale·q·k_j). m and l are in base 2
    // (the scores carry log2 e), so it is (m + log2 l) / log2 e.
#pragma unroll
    for (int r = 0; r < FA_TM; ++r) {
        const int i = q0 + r0 + r;
        if (i >= S) continue;
        if (lse != nullptr && lg == 0) lse[(size_t)blockIdx.y * S + i] = (m[r] + log2f(l[r])) / CUDALAB_LOG2E;
        const float inv = 1.0f / l[r];
        float *orow = O + (size_t)i * D;
        if constexpr (OC >= 4) {
#pragma unroll
            for (int ch = 0; ch < OC / 4; ++ch)
                *reinterpret_cast<float4 *>(orow + ch * 64 + lg * 4) =
                    make_float4(o[r][ch * 4] * inv, o[r][ch * 4 + 1] * inv, o[r][ch * 4 + 2] * inv,
                                o[r][ch * 4 + 3] * inv);
        } else {
            *reinterpret_cast<float2 *>(orow + lg * 2) = make_float2(o[r][0] * inv, o[r][1] * inv);
        }
    }
}

// EXERCISE flash_softmax: end copy

// ---------------------------------------------------------------------------------------------
// Host helpers (static inline, cudaError_t, never exit)
// ---------------------------------------------------------------------------------------------

// Workspace bytes a variant needs (the naive score matrix), or -1 for invalid arguments.
static inline long long attn_workspace_bytes(int id, int B, int H, int S, int D) {
    if (id == 0 || B <= 0 || H <= 0 || S <= 0 || D <= 0) return -1;
    if (id == ATTN_01_NAIVE) return (long long)B * H * S * S * (long long)sizeof(float);
    return 0;
}

// Workspace bytes the backward of a backward rung needs, or -1 (invalid arguments, not a backward
// rung): Di (B·H·S floats, rounded up to 4 so what follows stays 16-byte aligned), and for the bf16
// rung the FP32 accumulator of dQ (B·H·S·D floats).
static inline long long attn_backward_workspace_bytes(int id, int B, int H, int S, int D) {
    if (!attn_is_backward(id) || B <= 0 || H <= 0 || S <= 0 || D <= 0) return -1;
    const long long rows = (long long)B * H * S, di = (rows + 3) / 4 * 4;
    return (di + (attn_is_bf16(id) ? rows * D : 0)) * (long long)sizeof(float);
}

static inline cudaError_t attn_check_args(int id, int B, int H, int S, int D) {
    if (id == 0) return cudaErrorInvalidValue;
    if (B <= 0 || H <= 0 || S <= 0 || D <= 0) return cudaErrorInvalidValue;
    if ((long long)B * H > CUDALAB_MAX_GRID_YZ) return cudaErrorInvalidValue;  // grid y (flash) / z (matmul)
    if (S > ATTN_MAX_S) return cudaErrorInvalidValue;
    if (attn_is_bf16(id) || id == ATTN_04_FLASH_3XTF32) return (D == 64 || D == 128) ? cudaSuccess : cudaErrorInvalidValue;
    // 06_flash_bwd: D as 02_flash, its forward.
    if (id != ATTN_01_NAIVE && D != 32 && D != 64 && D != 128) return cudaErrorInvalidValue;
    return cudaSuccess;
}

template <int D>
static inline cudaError_t attn_flash_launch(int BH, int S, const float *q, const float *k, const float *v, float *o,
                                            float scale, int causal, int skip_last, cudaStream_t stream,
                                            float *lse = nullptr) {
    const size_t smem = FlashLayout<D>::BYTES;
    const cudaError_t e = cudalab_allow_dynamic_smem(attn_flash_fwd<D>, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)cdiv(S, FA_BR), (unsigned)BH);
    attn_flash_fwd<D><<<grid, FA_NT, smem, stream>>>(q, k, v, o, S, scale * CUDALAB_LOG2E, causal, skip_last, lse);
    return cudaGetLastError();
}

// Enqueue O = attention(Q, K, V) on `stream`. Device pointers, 16-byte aligned for flash.
// `workspace` must hold attn_workspace_bytes() bytes for 01_naive (may be NULL otherwise).
// `lse` (B·H·S floats, may be NULL): the log-sum-exp the backward needs, from 02_flash (and the
// backward rungs' forward); any other variant refuses a non-NULL one.
static inline cudaError_t attention_launch(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                           const float *q, const float *k, const float *v, float *o,
                                           float *workspace, cudaStream_t stream, float *lse = nullptr) {
    const int given = attn_variant_id(variant);
    cudaError_t err = attn_check_args(given, B, H, S, D);
    if (err != cudaSuccess) return err;
    if (attn_is_bf16(given)) return cudaErrorInvalidValue;  // float32 buffers: see attention_launch_bf16
    if (q == nullptr || k == nullptr || v == nullptr || o == nullptr) return cudaErrorInvalidValue;
    if (lse != nullptr && !attn_saves_lse(given)) return cudaErrorInvalidValue;
    const int id = attn_forward_id(given);
    const int BH = B * H;
    const long long sd = (long long)S * D, ss = (long long)S * S;
    if (id == ATTN_01_NAIVE) {
        if (workspace == nullptr) return cudaErrorInvalidValue;
        err = matmul_launch(ATTN_NAIVE_MATMUL, ATTN_NAIVE_MATMUL_TILE, true, S, S, D, q, k, workspace, scale, BH, sd,
                            sd, ss, stream);
        if (err != cudaSuccess) return err;
        const long long rows = (long long)BH * S;
        attn_naive_softmax<<<(unsigned)cdiv(rows, 8), 256, 0, stream>>>(workspace, rows, S, causal);
        err = cudaGetLastError();
        if (err != cudaSuccess) return err;
        return matmul_launch(ATTN_NAIVE_MATMUL, ATTN_NAIVE_MATMUL_TILE, false, S, D, S, workspace, v, o, 1.0f, BH, ss,
                             sd, sd, stream);
    }
    if ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v) |
         reinterpret_cast<uintptr_t>(o)) % 16 != 0)
        return cudaErrorMisalignedAddress;
    if (id == ATTN_04_FLASH_3XTF32) {
        // The running max is kept in raw score units and scaled after: a negative scale would flip it,
        // and 0 would make the masked keys' -inf times 0 a NaN (flash_online_softmax).
        if (!(scale > 0.0f) || isinf(scale)) return cudaErrorInvalidValue;
        if (D == 64) return attn_flash_3xtf32_launch<64>(BH, S, q, k, v, o, scale, causal, stream);
        return attn_flash_3xtf32_launch<128>(BH, S, q, k, v, o, scale, causal, stream);
    }
    const int skip = id == ATTN_FLASH_SKIP_LAST_TILE ? 1 : 0;
    switch (D) {
        case 32: return attn_flash_launch<32>(BH, S, q, k, v, o, scale, causal, skip, stream, lse);
        case 64: return attn_flash_launch<64>(BH, S, q, k, v, o, scale, causal, skip, stream, lse);
        default: return attn_flash_launch<128>(BH, S, q, k, v, o, scale, causal, skip, stream, lse);
    }
}

// Enqueue the bf16 attention on `stream`. Device pointers, 16-byte aligned. The scale must be
// positive: the kernel keeps its running max in raw score units and multiplies by the scale after
// (a negative scale would flip the max), and masked scores are -inf (times 0 is NaN).
// `lse` as attention_launch's: 03_flash_bf16, its tuning choices, 07_flash_bwd_bf16, 08_flash_bwd_wgmma and 09_flash_bwd_ws save it.
static inline cudaError_t attention_launch_bf16(const char *variant, int B, int H, int S, int D, int causal,
                                                float scale, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                const cudalab_bf16 *v, cudalab_bf16 *o, cudaStream_t stream,
                                                float *lse = nullptr) {
    const int given = attn_variant_id(variant);
    cudaError_t err = attn_check_args(given, B, H, S, D);
    if (err != cudaSuccess) return err;
    if (!attn_is_bf16(given) || !(scale > 0.0f) || isinf(scale)) return cudaErrorInvalidValue;
    if (q == nullptr || k == nullptr || v == nullptr || o == nullptr) return cudaErrorInvalidValue;
    if (lse != nullptr && !attn_saves_lse(given)) return cudaErrorInvalidValue;
    const int id = attn_forward_id(given);
    if ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v) |
         reinterpret_cast<uintptr_t>(o)) % 16 != 0)
        return cudaErrorMisalignedAddress;
    const int flags = id == ATTN_FLASH_BF16_SKIP_LAST_TILE   ? FB_FLAG_SKIP_LAST_TILE
                      : id == ATTN_FLASH_BF16_NO_CAUSAL_MASK ? FB_FLAG_NO_CAUSAL_MASK
                                                             : 0;
    const int BH = B * H;
    if (attn_is_wgmma(id)) {
#define ATTN_WGMMA_LAUNCH(NAME, ID, BC, ST, SCHED)                                                              \
    if (id == ID)                                                                                               \
        return D == 64 ? attn_flash_wgmma_launch<64, BC, ST, SCHED>(BH, S, q, k, v, o, scale, causal, stream)   \
                       : attn_flash_wgmma_launch<128, BC, ST, SCHED>(BH, S, q, k, v, o, scale, causal, stream);
        ATTN_WGMMA_CONFIGS(ATTN_WGMMA_LAUNCH)
#undef ATTN_WGMMA_LAUNCH
        if (D == 64) return attn_flash_wgmma_launch<64>(BH, S, q, k, v, o, scale, causal, stream);
        return attn_flash_wgmma_launch<128>(BH, S, q, k, v, o, scale, causal, stream);
    }
#define ATTN_BF16_TUNED(ID, NW, ST, MT, BC)                                                                        \
    if (id == ID)                                                                                                  \
        return D == 64 ? attn_flash_bf16_launch<64, NW, ST, MT, BC>(BH, S, q, k, v, o, scale, causal, flags, stream, lse) \
                       : attn_flash_bf16_launch<128, NW, ST, MT, BC>(BH, S, q, k, v, o, scale, causal, flags, stream, lse);
    ATTN_BF16_TUNED(ATTN_FLASH_BF16_W8S2, 8, 2, 1, 64)
    ATTN_BF16_TUNED(ATTN_FLASH_BF16_W8S3, 8, 3, 1, 64)
    ATTN_BF16_TUNED(ATTN_FLASH_BF16_W4S2, 4, 2, 1, 64)
    ATTN_BF16_TUNED(ATTN_FLASH_BF16_W4S3, 4, 3, 1, 64)
    ATTN_BF16_TUNED(ATTN_FLASH_BF16_W4K32S2, 4, 2, 1, 32)
    ATTN_BF16_TUNED(ATTN_FLASH_BF16_W4K32S3, 4, 3, 1, 32)
    ATTN_BF16_TUNED(ATTN_FLASH_BF16_W4M2S2, 4, 2, 2, 64)
    ATTN_BF16_TUNED(ATTN_FLASH_BF16_W4M2K32S2, 4, 2, 2, 32)
    ATTN_BF16_TUNED(ATTN_FLASH_BF16_W4M2K32S3, 4, 3, 2, 32)
#undef ATTN_BF16_TUNED
    if (D == 64) return attn_flash_bf16_launch<64>(BH, S, q, k, v, o, scale, causal, flags, stream, lse);
    return attn_flash_bf16_launch<128>(BH, S, q, k, v, o, scale, causal, flags, stream, lse);
}

// ---------------------------------------------------------------------------------------------
// The backward: dQ, dK, dV from Q, K, V, the forward's O and LSE, and dO (flash_bwd.cuh).
// Device pointers, 16-byte aligned; `workspace` holds attn_backward_workspace_bytes(). The same
// rules as the forward (sizes, scale > 0 for the bf16 rung), and a variant that is no backward rung
// is refused, all before any launch.
// ---------------------------------------------------------------------------------------------
static inline cudaError_t attn_backward_check(int id, int B, int H, int S, int D, float scale, const void *q,
                                              const void *k, const void *v, const void *o, const void *dout,
                                              const float *lse, const void *dq, const void *dk, const void *dv,
                                              const float *workspace) {
    cudaError_t err = attn_check_args(id, B, H, S, D);
    if (err != cudaSuccess) return err;
    if (!attn_is_backward(id) || !(scale > 0.0f) || isinf(scale)) return cudaErrorInvalidValue;
    const void *ptrs[] = {q, k, v, o, dout, lse, dq, dk, dv, workspace};
    uintptr_t bits = 0;
    for (const void *p : ptrs) {
        if (p == nullptr) return cudaErrorInvalidValue;
        bits |= reinterpret_cast<uintptr_t>(p);
    }
    return bits % 16 != 0 ? cudaErrorMisalignedAddress : cudaSuccess;
}

static inline cudaError_t attention_backward_launch(const char *variant, int B, int H, int S, int D, int causal,
                                                    float scale, const float *q, const float *k, const float *v,
                                                    const float *o, const float *dout, const float *lse, float *dq,
                                                    float *dk, float *dv, float *workspace, cudaStream_t stream) {
    const int id = attn_variant_id(variant);
    cudaError_t err = attn_backward_check(id, B, H, S, D, scale, q, k, v, o, dout, lse, dq, dk, dv, workspace);
    if (err != cudaSuccess) return err;
    if (attn_is_bf16(id)) return cudaErrorInvalidValue;  // bf16 buffers: attention_backward_launch_bf16
    const int flags = id == ATTN_FLASH_BWD_NO_DI ? FBW_FLAG_NO_DI : 0;
    const int BH = B * H;
    switch (D) {
        case 32: return attn_flash_bwd_launch<32>(BH, S, q, k, v, o, dout, lse, dq, dk, dv, workspace, scale, causal, flags, stream);
        case 64: return attn_flash_bwd_launch<64>(BH, S, q, k, v, o, dout, lse, dq, dk, dv, workspace, scale, causal, flags, stream);
        default: return attn_flash_bwd_launch<128>(BH, S, q, k, v, o, dout, lse, dq, dk, dv, workspace, scale, causal, flags, stream);
    }
}

static inline cudaError_t attention_backward_launch_bf16(const char *variant, int B, int H, int S, int D, int causal,
                                                         float scale, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                         const cudalab_bf16 *v, const cudalab_bf16 *o,
                                                         const cudalab_bf16 *dout, const float *lse, cudalab_bf16 *dq,
                                                         cudalab_bf16 *dk, cudalab_bf16 *dv, float *workspace,
                                                         cudaStream_t stream) {
    const int id = attn_variant_id(variant);
    cudaError_t err = attn_backward_check(id, B, H, S, D, scale, q, k, v, o, dout, lse, dq, dk, dv, workspace);
    if (err != cudaSuccess) return err;
    if (!attn_is_bf16(id)) return cudaErrorInvalidValue;
    const int flags = id == ATTN_FLASH_BWD_BF16_NO_DI ? FBW_FLAG_NO_DI : 0;
    const int BH = B * H;
    if (id == ATTN_08_FLASH_BWD_WGMMA)
        return D == 64 ? attn_flash_bwd_wgmma_launch<64>(BH, S, q, k, v, o, dout, lse, dq, dk, dv, workspace, scale, causal, stream)
                       : attn_flash_bwd_wgmma_launch<128>(BH, S, q, k, v, o, dout, lse, dq, dk, dv, workspace, scale, causal, stream);
    if (id == ATTN_09_FLASH_BWD_WS)
        return D == 64 ? attn_flash_bwd_ws_launch<64>(BH, S, q, k, v, o, dout, lse, dq, dk, dv, workspace, scale, causal, stream)
                       : attn_flash_bwd_ws_launch<128>(BH, S, q, k, v, o, dout, lse, dq, dk, dv, workspace, scale, causal, stream);
    if (D == 64)
        return attn_flash_bwd_bf16_launch<64>(BH, S, q, k, v, o, dout, lse, dq, dk, dv, workspace, scale, causal, flags, stream);
    return attn_flash_bwd_bf16_launch<128>(BH, S, q, k, v, o, dout, lse, dq, dk, dv, workspace, scale, causal, flags, stream);
}
