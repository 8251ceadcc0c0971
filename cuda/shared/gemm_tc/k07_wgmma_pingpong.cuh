// gemm_tc's 07_wgmma_pingpong rung (sm_90a) and its launcher. Shares the raster, the TMA maps and
// the SM count with k03_wgmma.cuh. Launched through wgmma_launch.cuh with one entry of configs.cuh.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "check.cuh"
#include "faults.cuh"
#include "gemm_tc/k03_wgmma.cuh"
#include "tc_ptx.cuh"

namespace gemm_tc {

// ================================================================================================
// 07_wgmma_pingpong (sm_90a only)
// ================================================================================================
// 04 leaves the tensor cores idle while its two consumer warpgroups store their 128 x 256 FP32 tile
// (and the NOTES put most of its 5% gap to cuBLAS at 4096^3 there). Ping-pong, CUTLASS's other
// Hopper schedule: each consumer warpgroup owns WHOLE tiles, the two take alternate tiles of the
// block's persistent walk (consumer 0 the block's tiles 0, 2, 4, ..., consumer 1 tiles 1, 3, ...),
// and they take turns on the tensor cores: consumer A issues its whole mainloop, hands the turn to
// B, and stores its tile while B's mainloop runs. Only the block's last epilogue is exposed.
//
// The tile: a warpgroup's accumulator must stay at 128 FP32 per thread (16384 per warpgroup, 04's
// budget under setmaxnreg 232), which allows 64 x 256 (one m64n256k16 per k16) or 128 x 128 (two
// m64n128k16, rows 0-63 and 64-127, sharing B). We take 128 x 128:
//   - L2 -> shared bytes per 2.1 MFLOP (a 64-deep k step of 128 x 128 or 64 x 256 outputs):
//     128 x 128 loads (128 + 128) rows x 128 B = 32 KiB, 64 x 256 loads (64 + 256) x 128 B = 40 KiB.
//     Either is more than 04's 128 x 256 block (24 KiB per 2.1 MFLOP): at 4096^3, 2.1 GB from L2
//     (+33%) against 2.7 GB (+67%). That traffic is ping-pong's price; the smaller one wins.
//   - shared -> tensor core bytes per k16: 2 x (A 64x16 + B 128x16) = 12 KiB per 128 clocks of
//     tensor work (96 B/clk) against m64n256k16's 10 KiB (80 B/clk): both under the SM's 128 B/clk.
//   - a stage is 32 KiB instead of 40: 6 stages fit (192 KiB of 227), against 5.
// Synchronisation: the ring is shared and filled in the block's tile order (tile j's K steps are
// stage uses j*KT .. j*KT + KT-1, whoever consumes them), so each `empty` barrier counts ONE
// consumer's release. The turn is two named barriers: consumer c waits on barrier kTurnBar + c before
// its mainloop and arrives on the other's once its last wgmma is issued (not finished: the other's
// wgmmas queue behind it). Consumer 1 opens consumer 0's barrier once at the start, and the
// arrival after the block's last tile is skipped, so with n tiles (consumer 0: ceil(n/2), consumer
// 1: floor(n/2)) each barrier completes exactly as often as it is waited on:
//   barrier of 0: waited ceil(n/2) times; arrivals 1 + floor(n/2), minus 1 when n is even.
//   barrier of 1: waited floor(n/2) times; arrivals ceil(n/2), minus 1 when n is odd.
constexpr int P_BM = 128, P_BN = 128, P_BK = 64, P_THREADS = 384;
constexpr int P_STAGES = 6;  // the rung's default ring depth (4 is the other tuning choice)
constexpr int P_TILE_A = P_BM * P_BK * 2, P_TILE_B = P_BN * P_BK * 2, P_STAGE = P_TILE_A + P_TILE_B;
__host__ __device__ constexpr int p_smem(int stages) { return stages * P_STAGE + 1024 /* alignment slack */ + 2 * stages * 8 /* barriers */; }
static_assert(p_smem(7) <= 227 * 1024 && p_smem(8) > 227 * 1024, "7 stages is the deepest ring that fits");
constexpr uint32_t kTurnBar = 1;  // named barriers 1 (consumer 0's turn) and 2 (consumer 1's); 0 is __syncthreads

template <int kStages>
__global__ void __launch_bounds__(P_THREADS, 1)
    k07_wgmma_pingpong(int M, int N, int K, const __grid_constant__ CUtensorMap tmA,
                       const __grid_constant__ CUtensorMap tmB, float *__restrict__ C, Raster raster,
                       int drop_last_k_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(kStages >= 2 && p_smem(kStages) <= 227 * 1024, "the ring must fit the SM's shared memory");
    extern __shared__ unsigned char smem_raw[];
    // 128B-swizzled TMA destinations must be 1024-byte aligned (the swizzle is on address bits 4-9).
    const uint32_t base = (tc::smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t bars = base + kStages * P_STAGE;  // full[0..S), then empty[0..S)
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (kStages + s); };
    auto tileA = [&](int s) { return base + (uint32_t)(s * P_STAGE); };
    auto tileB = [&](int s) { return base + (uint32_t)(s * P_STAGE + P_TILE_A); };

    const int wg = threadIdx.x / 128, tid_in_wg = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        tc::tma_prefetch_map(&tmA);
        tc::tma_prefetch_map(&tmB);
        for (int s = 0; s < kStages; ++s) {
            tc::mbar_init(full(s), 1);   // the producer's arrive.expect_tx (+ the stage's bytes)
            tc::mbar_init(empty(s), 1);  // the one consumer warpgroup whose tile the stage holds
        }
        tc::mbar_fence_init();
    }
    __syncthreads();  // barriers initialised before anyone uses them

    // The block's tiles: blockIdx.x, blockIdx.x + gridDim.x, ... of the raster walk (03-05's order,
    // one tile to a unit); `n_tiles` of them (the launch gives every block at least one).
    const int tiles_m = (int)cdiv(M, P_BM), tiles_n = (int)cdiv(N, P_BN), tiles = tiles_m * tiles_n;
    const RasterWalk walk(raster, tiles_m, tiles_n, 1);
    auto corner = [&](int j, int &m0, int &n0) {  // the block's j-th tile
        int tm, tn;
        walk.at((int)blockIdx.x + j * (int)gridDim.x, tm, tn);
        m0 = tm * P_BM;
        n0 = tn * P_BN;
    };
    const int n_tiles = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int KT = (int)cdiv(K, P_BK) - CUDALAB_FAULT(drop_last_k_tiles);
    if (KT <= 0 || n_tiles == 0) return;  // the whole block, before any named barrier

    if (wg == 0) {
        tc::setmaxnreg_dec<40>();
        if (tid_in_wg == 0) {
            int s = 0;
            uint32_t phase = 0;  // parity of the ring's current lap
            bool lapped = false;  // past the first lap: a stage must be released before its refill
            for (int j = 0; j < n_tiles; ++j) {
                int m0, n0;
                corner(j, m0, n0);
                for (int kt = 0; kt < KT; ++kt) {
                    // Stage s was filled one lap ago: wait until its consumer released it.
                    if (lapped) tc::mbar_wait(empty(s), phase ^ 1);
                    tc::mbar_arrive_expect_tx(full(s), P_STAGE);
                    tc::tma_load_2d(tileA(s), &tmA, kt * P_BK, m0, full(s));  // past M or K: zeros
                    tc::tma_load_2d(tileB(s), &tmB, kt * P_BK, n0, full(s));
                    if (++s == kStages) s = 0, phase ^= 1, lapped = true;
                }
            }
        }
    } else {
        tc::setmaxnreg_inc<232>();
        const int c = wg - 1;
        const int w = tid_in_wg / 32, lane = tid_in_wg % 32, g = lane / 4, t = lane % 4;
        const bool pairs = (N % 2) == 0;  // float2 stores need 8-byte aligned rows
        auto release = [&](int s) {  // one arrival on the stage's `empty`, once its wgmmas have read it
            if (tid_in_wg == 0) tc::mbar_arrive(empty(s));
        };
        if (c == 1) tc::named_bar_arrive(kTurnBar, 256);  // consumer 0 (tile 0) goes first
        float acc[2][64];  // rows 0-63 and 64-127 of the tile, each a m64n128 accumulator
        for (int j = c; j < n_tiles; j += 2) {
            int m0, n0;
            corner(j, m0, n0);
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;
            const int it = j * KT;  // the ring's use number of this tile's first K step
            int s = it % kStages;
            uint32_t phase = (uint32_t)(it / kStages) & 1u;
            int prev = s;

            tc::named_bar_sync(kTurnBar + c, 256);  // this warpgroup's turn on the tensor cores
            for (int kt = 0; kt < KT; ++kt) {
                tc::mbar_wait(full(s), phase);  // the stage's bytes have landed (waited before the fence)
                const uint64_t da0 = tc::wgmma_desc_sw128(tileA(s)), da1 = tc::wgmma_desc_sw128(tileA(s) + 64 * 128);
                const uint64_t db = tc::wgmma_desc_sw128(tileB(s));
                tc::wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < P_BK / 16; ++kk) {
                    tc::wgmma_ss<P_BN>(acc[0], da0 + 2 * kk, db + 2 * kk, 1);
                    tc::wgmma_ss<P_BN>(acc[1], da1 + 2 * kk, db + 2 * kk, 1);
                }
                tc::wgmma_commit();
                // Keep one group in flight: once the previous stage's wgmmas are done, hand it back.
                tc::wgmma_wait<1>();
                if (kt > 0) release(prev);
                prev = s;
                if (++s == kStages) s = 0, phase ^= 1u;
            }
            // Every wgmma of this tile is issued: the other consumer may queue its mainloop behind
            // them (none left after the block's last tile: that arrival would never be waited on).
            if (j + 1 < n_tiles) tc::named_bar_arrive(kTurnBar + (1 - c), 256);
            tc::wgmma_wait<0>();
            tc::reg_fence(acc[0]);
            tc::reg_fence(acc[1]);
            release(prev);  // the producer may refill it while this warpgroup stores

            // Epilogue, under the other consumer's mainloop: warp w holds rows 16w + g (+8) of each
            // 64-row half h; n8 block jn holds cols 8jn + 2t (+1).
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int jn = 0; jn < P_BN / 8; ++jn)
#pragma unroll
                    for (int hr = 0; hr < 2; ++hr) {
                        const int r = m0 + 64 * h + 16 * w + g + 8 * hr, col = n0 + 8 * jn + 2 * t;
                        if (r >= M || col >= N) continue;
                        float *dst = C + (size_t)r * N + col;
                        const float v0 = acc[h][4 * jn + 2 * hr], v1 = acc[h][4 * jn + 2 * hr + 1];
                        if (pairs && col + 1 < N) {
                            *reinterpret_cast<float2 *>(dst) = make_float2(v0, v1);
                        } else {
                            dst[0] = v0;
                            if (col + 1 < N) dst[1] = v1;
                        }
                    }
        }
    }
#else
    // Built without sm_90a: the host never launches this (wgmma_unsupported_reason says why).
    (void)M, (void)N, (void)K, (void)tmA, (void)tmB, (void)C, (void)raster, (void)drop_last_k_tiles;
#endif
}

// One block per SM, at most one per tile (a block with no tile would only wait).
template <int kStages>
static inline cudaError_t launch_pingpong(int M, int N, int K, const CUtensorMap &mapA, const CUtensorMap &mapB,
                                          float *C, cudaStream_t stream, int drop_last_k_tiles, Raster raster,
                                          int max_sms = 0) {
    constexpr int smem = p_smem(kStages);
    cudaError_t e = cudalab_allow_dynamic_smem(k07_wgmma_pingpong<kStages>, smem);
    if (e != cudaSuccess) return e;
    int sms = 0;
    e = sm_count(&sms, max_sms);
    if (e != cudaSuccess) return e;
    const long long tiles = cdiv(M, P_BM) * cdiv(N, P_BN);
    const long long blocks = tiles < sms ? tiles : sms;
    k07_wgmma_pingpong<kStages><<<(unsigned)blocks, P_THREADS, smem, stream>>>(M, N, K, mapA, mapB, C, raster,
                                                                               drop_last_k_tiles);
    return cudaGetLastError();
}

}  // namespace gemm_tc
