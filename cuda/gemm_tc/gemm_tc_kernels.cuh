// gemm_tc kernels: C (M x N, float32, row-major) = A (M x K, bf16, row-major) . B^T, with B given as
// N x K bf16 row-major (the "TN" layout: both operands K-contiguous, like nn.Linear's weight).
// FP32 accumulation on the tensor cores. Shared with transformer_block's `--dtype bf16` path:
// include this header and call gemm_tc::launch(...). No cuBLAS here (that lives in gemm_tc.cu).
//
// Rungs (the names come from the one table kVariantNames below):
//   01_wmma      nvcuda::wmma, one warp per 16x16 output fragment, tiles staged in shared memory.
//   02_mma_sync  mma.sync m16n8k16 + ldmatrix, 128x256x64 block tile, 8 warps of 64x64, a multi-stage
//                cp.async pipeline (4 stages) into a 128-byte-swizzled (conflict-free) shared layout.
//   03_wgmma     sm_90a: TMA (cp.async.bulk.tensor) into 128B-swizzled shared memory, an mbarrier
//                pipeline, one producer warpgroup and two consumer warpgroups issuing wgmma.
//   04_wgmma_persistent, 05_wgmma_cluster, 06_wgmma_tuned: 03's body under another schedule; each of
//                03-06 runs one entry of kWgmmaConfigs (schedule, stages, raster; 06: the tuned one).
//   07_wgmma_pingpong  sm_90a: CUTLASS's "ping-pong" schedule. Persistent, one block per SM;
//                each consumer warpgroup owns whole 128x128 tiles, the two take alternate tiles and
//                take turns on the tensor cores (named barriers), so one's epilogue runs under the
//                other's mainloop.
//   08_wgmma_tma_store  sm_90a: 04 with the epilogue off the global-store path (registers ->
//                swizzled shared memory -> TMA store, drained under the next tile's mainloop) and a
//                balanced persistent grid (as few blocks as keep the same number of rounds).
//
// Ragged shapes: 01 takes any M, N, K. 02 takes any M, N, K (K a multiple of 8 uses 16-byte
// cp.async; any other K takes a slower element-wise load path with the same layout). 03-08 take any
// M, N (TMA's out-of-bounds boxes read as zeros, stores are masked) and any K: TMA needs 16-byte
// global row strides, so a K that is not a multiple of 8 runs on zero-padded copies
// (launch_03_padded). `requirement()` names any rule before a launch.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include <cstdint>
#include <cstring>

#include "arch.cuh"
#include "check.cuh"
#include "tc_ptx.cuh"
#include "tma_host.cuh"

namespace gemm_tc {

enum Variant {
    V01_WMMA = 0,
    V02_MMA_SYNC = 1,
    V03_WGMMA = 2,
    V04_WGMMA_PERSISTENT = 3,
    V05_WGMMA_CLUSTER = 4,
    V06_WGMMA_TUNED = 5,
    V07_WGMMA_PINGPONG = 6,
    V08_WGMMA_TMA_STORE = 7,
    VCUBLAS_BF16 = 8,
    VCUBLAS_TF32 = 9,
    VCOUNT = 10
};
// THE variant table: gemm_tc_variant_name(i) and the executable read it; order = the learner's order.
static const char *const kVariantNames[VCOUNT] = {"01_wmma",          "02_mma_sync",    "03_wgmma",
                                                  "04_wgmma_persistent", "05_wgmma_cluster", "06_wgmma_tuned",
                                                  "07_wgmma_pingpong", "08_wgmma_tma_store", "cublas_bf16",
                                                  "cublas_tf32"};

// The sm_90a rungs (TMA + mbarrier + wgmma): 03's kernel body under 03, 04, 05 (and 06 with whichever
// configuration it runs), and 07's ping-pong kernel. All of them run one entry of kWgmmaConfigs.
static inline bool is_wgmma(int v) {
    return v == V03_WGMMA || v == V04_WGMMA_PERSISTENT || v == V05_WGMMA_CLUSTER || v == V06_WGMMA_TUNED ||
           v == V07_WGMMA_PINGPONG || v == V08_WGMMA_TMA_STORE;
}

static inline int variant_index(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < VCOUNT; ++i)
        if (strcmp(name, kVariantNames[i]) == 0) return i;
    return -1;
}

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

// ================================================================================================
// 02_mma_sync: Ampere-style warp-tiled kernel
// ================================================================================================
constexpr int S_BM = 128, S_BN = 256, S_BK = 64, S_STAGES = 4, S_THREADS = 256;
// Warp tile 64x64: 2 warps along M x 4 along N. Per 16-deep step a warp issues 8 ldmatrix.x4 for
// 32 mma.sync; a 64x32 warp tile (6 for 16) measured 327 TFLOP/s at 4096^3 on an H100, bound by
// shared-memory bandwidth (an x4 moves 512 bytes: 4 cycles of the SM's 128 B/clk).
constexpr int S_WM = 64, S_WN = 64;
constexpr int S_MI = S_WM / 16, S_NI = S_WN / 8;  // m16 and n8 MMA tiles per warp
constexpr int S_TILE_A = S_BM * S_BK * 2, S_TILE_B = S_BN * S_BK * 2;  // bytes
constexpr int S_SMEM = S_STAGES * (S_TILE_A + S_TILE_B);                // 192 KiB: needs the opt-in
constexpr int S_GROUP_M = 8;  // block raster: 8 M-tiles share each B panel while it is in L2

#if CUDALAB_SM80_CODE  // cp.async: sm_80 (02's kernel body, its only caller, is compiled out below it)
// One ROWS x 64 bf16 tile (rows of 128 bytes = 8 chunks of 16 bytes) from a K-contiguous matrix
// with `rows` rows into shared memory at `dst`, chunk c of row r stored at swizzle_128b(r, c).
// kAligned (K % 8 == 0): 16-byte cp.async, out-of-range chunks zero-filled. Otherwise rows are not
// 16-byte aligned, so each thread gathers its 8 elements with bounds checks and stores them.
template <int ROWS, bool kAligned>
__device__ __forceinline__ void load_tile_x64(unsigned char *smem_tile, const uint16_t *__restrict__ G, int rows,
                                                 int K, int row0, int k0, int tid) {
    const uint32_t dst0 = tc::smem_u32(smem_tile);
#pragma unroll
    for (int i = 0; i < (ROWS * 8) / S_THREADS; ++i) {
        const int c = tid + i * S_THREADS, r = c / 8, ch = c % 8;
        const int gr = row0 + r, gk = k0 + ch * 8;
        const uint32_t off = tc::swizzle_128b(r, ch);
        if constexpr (kAligned) {
            const bool ok = gr < rows && gk < K;
            tc::cp_async_16_zfill(dst0 + off, ok ? G + (size_t)gr * K + gk : G, ok ? 16 : 0);
        } else {
            uint32_t v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int ka = gk + 2 * j, kb = ka + 1;
                const uint32_t lo = (gr < rows && ka < K) ? G[(size_t)gr * K + ka] : 0u;
                const uint32_t hi = (gr < rows && kb < K) ? G[(size_t)gr * K + kb] : 0u;
                v[j] = lo | (hi << 16);
            }
            *reinterpret_cast<uint4 *>(smem_tile + off) = make_uint4(v[0], v[1], v[2], v[3]);
        }
    }
}
#endif

// drop_last_k_tiles: a test-only fault (0 in every real call): skip the last K tiles, so the tests
// can show that the checker rejects a kernel that forgets part of the reduction.
template <bool kAligned>
__global__ void __launch_bounds__(S_THREADS) k02_mma_sync(int M, int N, int K, const uint16_t *__restrict__ A,
                                                          const uint16_t *__restrict__ B, float *__restrict__ C,
                                                          int drop_last_k_tiles) {
#if CUDALAB_SM80_CODE  // mma.sync bf16, ldmatrix, cp.async: sm_80 (needs_sm80 below refuses older targets)
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / 4, wn = warp % 4;

    // Grouped raster: consecutive blocks walk down S_GROUP_M tiles of M before moving along N, so
    // the blocks resident together share B panels (and A panels) in L2.
    const int tiles_m = (int)cdiv(M, S_BM), tiles_n = (int)cdiv(N, S_BN);
    const int per_group = S_GROUP_M * tiles_n, group = blockIdx.x / per_group;
    const int first_m = group * S_GROUP_M, group_m = min(tiles_m - first_m, S_GROUP_M);
    const int in_group = blockIdx.x % per_group;
    const int m0 = (first_m + in_group % group_m) * S_BM, n0 = (in_group / group_m) * S_BN;

    auto tileA = [&](int s) { return smem + s * (S_TILE_A + S_TILE_B); };
    auto tileB = [&](int s) { return smem + s * (S_TILE_A + S_TILE_B) + S_TILE_A; };
    const int KT = (int)cdiv(K, S_BK) - drop_last_k_tiles;

    float acc[S_MI][S_NI][4];
#pragma unroll
    for (int i = 0; i < S_MI; ++i)
#pragma unroll
        for (int j = 0; j < S_NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // Prologue: fill STAGES-1 stages. Every stage commits a group, even an empty one, so that
    // wait_group<STAGES-2> below always means "the stage about to be read has landed".
#pragma unroll
    for (int s = 0; s < S_STAGES - 1; ++s) {
        if (s < KT) {
            load_tile_x64<S_BM, kAligned>(tileA(s), A, M, K, m0, s * S_BK, tid);
            load_tile_x64<S_BN, kAligned>(tileB(s), B, N, K, n0, s * S_BK, tid);
        }
        tc::cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        tc::cp_async_wait<S_STAGES - 2>();  // this thread's copies for stage kt are done...
        __syncthreads();  // ...and everyone's; also: all warps finished reading stage kt-1
        {  // refill the stage freed by iteration kt-1 with tile kt + STAGES-1
            const int nk = kt + S_STAGES - 1, s = nk % S_STAGES;
            if (nk < KT) {
                load_tile_x64<S_BM, kAligned>(tileA(s), A, M, K, m0, nk * S_BK, tid);
                load_tile_x64<S_BN, kAligned>(tileB(s), B, N, K, n0, nk * S_BK, tid);
            }
            tc::cp_async_commit();
        }
        const uint32_t a_s = tc::smem_u32(tileA(kt % S_STAGES)), b_s = tc::smem_u32(tileB(kt % S_STAGES));
#pragma unroll
        for (int kk = 0; kk < S_BK / 16; ++kk) {
            uint32_t af[S_MI][4], bf[S_NI][2];
            // A: four 16x16 fragments; lane l addresses row (l % 16), chunk 2kk + l / 16.
#pragma unroll
            for (int mi = 0; mi < S_MI; ++mi)
                tc::ldmatrix_x4(af[mi], a_s + tc::swizzle_128b(wm * S_WM + mi * 16 + lane % 16, kk * 2 + lane / 16));
            // B (N x K): one x4 gives two n8 fragments: matrices (n 0-7, k 0-7), (n 0-7, k 8-15),
            // (n 8-15, k 0-7), (n 8-15, k 8-15) = b0, b1 of n-tile 2p, then b0, b1 of 2p+1.
#pragma unroll
            for (int p = 0; p < S_NI / 2; ++p) {
                uint32_t r[4];
                tc::ldmatrix_x4(r, b_s + tc::swizzle_128b(wn * S_WN + p * 16 + (lane / 16) * 8 + lane % 8,
                                                          kk * 2 + (lane / 8) % 2));
                bf[2 * p][0] = r[0];
                bf[2 * p][1] = r[1];
                bf[2 * p + 1][0] = r[2];
                bf[2 * p + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < S_MI; ++mi)
#pragma unroll
                for (int ni = 0; ni < S_NI; ++ni) tc::mma_m16n8k16_bf16(acc[mi][ni], af[mi], bf[ni], acc[mi][ni]);
        }
    }
    tc::cp_async_wait<0>();  // no copy may still target shared memory when the block exits

    // Epilogue: c[0..1] at (row g, cols 2t, 2t+1), c[2..3] at row g+8 (tc_ptx.cuh's layout).
    const int g = lane / 4, t = lane % 4;
    const bool pairs = (N % 2) == 0;  // float2 stores need 8-byte aligned rows
#pragma unroll
    for (int mi = 0; mi < S_MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < S_NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = m0 + wm * S_WM + mi * 16 + g + 8 * h, c = n0 + wn * S_WN + ni * 8 + 2 * t;
                if (r >= M) continue;
                float *dst = C + (size_t)r * N + c;
                if (pairs && c + 1 < N) {
                    *reinterpret_cast<float2 *>(dst) = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
                } else {
                    if (c < N) dst[0] = acc[mi][ni][2 * h];
                    if (c + 1 < N) dst[1] = acc[mi][ni][2 * h + 1];
                }
            }
#endif
}

template <bool kAligned>
static cudaError_t launch_02(int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C, cudaStream_t s,
                             int drop_last_k_tiles) {
    const cudaError_t e = cudalab_allow_dynamic_smem(k02_mma_sync<kAligned>, S_SMEM);
    if (e != cudaSuccess) return e;
    const long long blocks = cdiv(M, S_BM) * cdiv(N, S_BN);
    k02_mma_sync<kAligned><<<(unsigned)blocks, S_THREADS, S_SMEM, s>>>(M, N, K, A, B, C, drop_last_k_tiles);
    return cudaGetLastError();
}

// Why 01_wmma and 02_mma_sync (bf16 tensor cores, cp.async, ldmatrix: sm_80) cannot run on this GPU
// with this build, or nullptr (cuda/common/arch.cuh). Every kernel of this file shares one target,
// so 02's kernel answers for both.
static inline const char *sm80_unsupported_reason() {
    return cudalab_arch::needs_sm(80, (const void *)k02_mma_sync<true>);
}

// ================================================================================================
// 03_wgmma (sm_90a only)
// ================================================================================================
// Block tile 128 x 256 x 64, three warpgroups (384 threads):
//   warpgroup 0, the producer: one thread issues the TMA copies of each stage (A: 128 x 64, B:
//   256 x 64, 48 KiB) into a 4-deep ring of 128B-swizzled stages, counted on that stage's `full`
//   mbarrier; it then waits on the stage's `empty` barrier before refilling it.
//   warpgroups 1 and 2, the consumers: each owns 64 rows of C (128 FP32 accumulators per thread)
//   and, per stage, issues four wgmma m64n256k16 (K = 64) straight from shared memory.
// setmaxnreg moves registers from the producer (40) to the consumers (232). The tiles are walked in
// the same grouped order as 02, so resident blocks share A and B panels in L2.
//
// 04_wgmma_persistent is the same body launched with one block per SM instead of one per tile: each
// block takes tiles blockIdx.x, blockIdx.x + gridDim.x, ... The ring's stage counter (`it`) runs on
// across tiles, so while the consumers store tile i (the epilogue, tensor cores idle) the producer is
// already loading tile i+1's first stages: the pipeline fill hides behind the epilogue. (03, one
// tile per block, runs the loop once.)
//
// The tuner's choices (`invoke tune gemm_tc`): the schedule (03's one block per tile, 04's
// persistent blocks, 05's clusters), the ring's depth kStages (4 by default; 3 also fits, 5 would need
// 240 KiB of the 227 the SM gives a block) and the raster (below). 03, 04 and 05 run their defaults;
// 06_wgmma_tuned runs whichever configuration the tuner cached for this GPU (kWgmmaConfigs).
constexpr int H_BM = 128, H_BN = 256, H_BK = 64, H_STAGES = 4 /* the rungs' default */, H_THREADS = 384;
constexpr int H_TILE_A = H_BM * H_BK * 2, H_TILE_B = H_BN * H_BK * 2, H_STAGE = H_TILE_A + H_TILE_B;
// 08's TMA-store epilogue stages C through shared memory: per consumer warpgroup two boxes of 64 rows x
// 32 floats (8 KiB each, 128B-swizzled), one being filled while the TMA engine reads the other.
constexpr int H_EPI_BOX_COLS = 32, H_EPI_BOX = 64 * H_EPI_BOX_COLS * 4, H_EPI = 2 /* consumers */ * 2 * H_EPI_BOX;
__host__ __device__ constexpr int h_smem(int stages, bool tma_store = false) {
    return stages * H_STAGE + (tma_store ? H_EPI : 0) + 1024 /* alignment slack */ + 2 * stages * 8 /* barriers */;
}
constexpr int H_SMEM = h_smem(H_STAGES);
static_assert(h_smem(4) <= 227 * 1024 && h_smem(5) > 227 * 1024, "4 stages is the deepest ring that fits");
static_assert(h_smem(4, true) <= 227 * 1024, "08's 32 KiB of C staging fits beside a 4-stage ring");

// The order in which output tiles are handed out (to blocks under 03, to a persistent block's walk
// under 04 and 05): groups of `group` tiles along one axis, walked fastest along that axis, the
// groups one after another along the other. n_major = 0 groups down M: the blocks resident together
// share a few A panels and every B panel of a stripe; n_major = 1 groups along N, the other way round.
// Under 05 a unit is a cluster's pair of vertically adjacent tiles, so a group down M holds group / 2
// units. The default, 8 down M, is 02's raster.
struct Raster {
    int group;    // tiles per group: 4, 8 or 16 in the configuration table
    int n_major;  // 0: groups down M; 1: groups along N
};
constexpr Raster kDefaultRaster = {8, 0};

// The walk itself (corner() in 03-05, and 07's tile order): units_m rows of units (a unit is
// `cluster` vertically adjacent tiles; 1 under 03, 04 and 07) by tiles_n columns. harness/programs/
// gemm_tc.py's raster_twin is its Python twin, tested to cover every tile once.
struct RasterWalk {
    bool n_major;
    int per, along, per_group;  // units to a group, units along the grouped axis, units to a whole group
    __device__ __forceinline__ RasterWalk(Raster r, int units_m, int tiles_n, int cluster)
        : n_major(r.n_major != 0) {
        per = n_major ? r.group : max(1, r.group / cluster);
        along = n_major ? tiles_n : units_m;
        per_group = per * (n_major ? units_m : tiles_n);
    }
    // Unit number `unit` of the walk: its unit row um and tile column tn.
    __device__ __forceinline__ void at(int unit, int &um, int &tn) const {
        const int group = unit / per_group, first = group * per;
        const int width = min(along - first, per), in_group = unit % per_group;  // the last group may be narrower
        const int a = first + in_group % width, b = in_group / width;
        um = n_major ? b : a;
        tn = n_major ? a : b;
    }
};

// kCluster = 2 (05_wgmma_cluster): the two CTAs of a cluster take vertically adjacent tiles, which
// need the same 256 x 64 B tile each stage. Each CTA's producer loads its own A and one 128-row half
// of B, multicast into both CTAs, so each B byte leaves L2 once per cluster instead of twice (a stage
// reads 32 KiB from L2 per CTA instead of 48). A stage may be refilled only when the consumers of
// both CTAs have released it (the peer writes into it too), so each consumer arrives on the `empty`
// barrier of both CTAs, and nobody leaves the kernel before the cluster's last barrier.
//
// kTmaStore (08_wgmma_tma_store): the epilogue goes registers -> shared memory -> TMA store instead of
// straight to global memory. A consumer warpgroup writes its 64 x 256 accumulators as eight boxes of
// 64 x 32 floats, alternating between two 8 KiB buffers in the 128-byte swizzle, and one thread hands
// each box to the TMA engine. It waits only until the store two boxes back has READ its buffer, never
// for a write to reach global memory: the stores drain while the warpgroup runs the next tile's
// mainloop. A store past M or N writes nothing there, so ragged tiles need no masks.
// Bank conflicts: a warp's float2 store (rows g = 0..7 x 32 bytes) is issued as two half-warps, and in
// this swizzle rows g and g ^ 1 of a half would share their chunk positions: 2 wavefronts per half
// instead of 1 (ncu at 4096^3: 705 K store conflicts). Boxes of 64 x 8 floats in the 32-byte swizzle
// removed them, but four times as many narrow TMA stores made 08 3.7% SLOWER (185.0 -> 191.8 us under
// ncu; NOTES-gemm_tc.md): the TMA engine's rows cost more than the banks. So the boxes stay 128-byte
// and the lanes of odd g store the box's n8 blocks in another order (the epilogue's comment says how).
template <int kCluster, int kStages, bool kTmaStore = false>
__global__ void __launch_bounds__(H_THREADS, 1)
    k03_wgmma(int M, int N, int K, const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
              const __grid_constant__ CUtensorMap tmC, float *__restrict__ C, Raster raster, int drop_last_k_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs");
    static_assert(kStages >= 2 && h_smem(kStages, kTmaStore) <= 227 * 1024, "the ring must fit the SM's shared memory");
    extern __shared__ unsigned char smem_raw[];
    // 128B-swizzled TMA destinations must be 1024-byte aligned (the swizzle is on address bits 4-9).
    // The dynamic shared window starts at the same offset in every CTA, so `base` is the same
    // CTA-relative offset in both CTAs of a cluster, as multicast needs.
    const uint32_t raw = tc::smem_u32(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    const uint32_t epi = base + kStages * H_STAGE;               // 08: the C staging boxes (1024-aligned)
    const uint32_t bars = epi + (kTmaStore ? H_EPI : 0);          // full[0..S), then empty[0..S)
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (kStages + s); };
    auto tileA = [&](int s) { return base + (uint32_t)(s * H_STAGE); };
    auto tileB = [&](int s) { return base + (uint32_t)(s * H_STAGE + H_TILE_A); };

    const int wg = threadIdx.x / 128, tid_in_wg = threadIdx.x % 128;
    const int rank = kCluster == 1 ? 0 : (int)tc::cluster_rank();
    if (threadIdx.x == 0) {
        tc::tma_prefetch_map(&tmA);
        tc::tma_prefetch_map(&tmB);
        if constexpr (kTmaStore) tc::tma_prefetch_map(&tmC);
        for (int s = 0; s < kStages; ++s) {
            tc::mbar_init(full(s), 1);              // the producer's arrive.expect_tx (+ the stage's bytes)
            tc::mbar_init(empty(s), 2 * kCluster);  // each consumer warpgroup of each CTA of the cluster
        }
        tc::mbar_fence_init();
    }
    // Barriers initialised before anyone (a peer's multicast included) uses them.
    if constexpr (kCluster == 1) __syncthreads();
    else tc::cluster_sync();

    // Units of work: clusters of kCluster vertically adjacent tiles, in the grouped (L2-friendly)
    // order of `raster`; this CTA computes the tile at rank `rank` of its cluster's unit.
    const int tiles_m = (int)cdiv(M, H_BM), tiles_n = (int)cdiv(N, H_BN);
    const int units_m = (int)cdiv(tiles_m, kCluster), units = units_m * tiles_n;
    const RasterWalk walk(raster, units_m, tiles_n, kCluster);
    auto corner = [&](int unit, int &m0, int &n0) {
        int um, tn;
        walk.at(unit, um, tn);
        m0 = (um * kCluster + rank) * H_BM;  // past M for a ragged last unit: TMA fills 0
        n0 = tn * H_BN;
    };
    const int unit0 = blockIdx.x / kCluster, unit_step = gridDim.x / kCluster;
    const int KT = (int)cdiv(K, H_BK) - drop_last_k_tiles;

    if (KT > 0 && wg == 0) {
        tc::setmaxnreg_dec<40>();
        if (tid_in_wg == 0) {
            int it = 0;  // stage uses so far, over every unit of this block
            for (int unit = unit0; unit < units; unit += unit_step) {
                int m0, n0;
                corner(unit, m0, n0);
                for (int kt = 0; kt < KT; ++kt, ++it) {
                    const int s = it % kStages;
                    // Stage s was used STAGES uses ago: wait until every consumer that reads it released it.
                    if (it >= kStages) tc::mbar_wait(empty(s), ((it / kStages) - 1) & 1);
                    tc::mbar_arrive_expect_tx(full(s), H_STAGE);  // A, and all of B (both halves under multicast)
                    tc::tma_load_2d(tileA(s), &tmA, kt * H_BK, m0, full(s));
                    if constexpr (kCluster == 1) {
                        tc::tma_load_2d(tileB(s), &tmB, kt * H_BK, n0, full(s));
                    } else {
                        constexpr int half = H_BN / kCluster;  // rows of B this CTA fetches for the cluster
                        tc::tma_load_2d_multicast(tileB(s) + rank * half * H_BK * 2, &tmB, kt * H_BK, n0 + rank * half,
                                                  full(s), (uint16_t)((1u << kCluster) - 1));
                    }
                }
            }
        }
    } else if (KT > 0) {
        tc::setmaxnreg_inc<232>();
        const int c = wg - 1;  // this consumer's 64 rows: m0 + 64c ...
        const int w = tid_in_wg / 32, lane = tid_in_wg % 32, g = lane / 4, t = lane % 4;
        const bool pairs = (N % 2) == 0;
        auto release = [&](int s) {  // one arrival per consumer warpgroup on stage s's `empty`, in every CTA
            if (tid_in_wg != 0) return;
            if constexpr (kCluster == 1) {
                tc::mbar_arrive(empty(s));
            } else {
#pragma unroll
                for (int r = 0; r < kCluster; ++r) tc::mbar_arrive_cluster(tc::cluster_map(empty(s), r));
            }
        };
        float acc[128];
        int it = 0;
        for (int unit = unit0; unit < units; unit += unit_step) {
            int m0, n0;
            corner(unit, m0, n0);
#pragma unroll
            for (int i = 0; i < 128; ++i) acc[i] = 0.0f;

            for (int kt = 0; kt < KT; ++kt, ++it) {
                const int s = it % kStages;
                tc::mbar_wait(full(s), (it / kStages) & 1);  // the stage's bytes have landed
                const uint64_t da = tc::wgmma_desc_sw128(tileA(s) + c * 64 * 128), db = tc::wgmma_desc_sw128(tileB(s));
                tc::wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < H_BK / 16; ++kk) tc::wgmma_m64n256k16_bf16(acc, da + 2 * kk, db + 2 * kk);
                tc::wgmma_commit();
                // Keep one group in flight: once the previous stage's wgmmas are done, hand it back.
                tc::wgmma_wait<1>();
                if (kt > 0) release((it - 1) % kStages);
            }
            tc::wgmma_wait<0>();
            // The tile's last stage is free too: the producer may refill it for the next tile while
            // this warpgroup stores.
            release((it - 1) % kStages);

            // Epilogue: warp w of this warpgroup holds rows 16w + g (+8); n8 block j holds cols 8j + 2t (+1).
            if constexpr (kTmaStore) {
                const int r0 = m0 + 64 * c;
                if (r0 >= M) continue;  // the whole warpgroup's rows are past M (a ragged last tile): next unit
                const uint32_t mine = epi + (uint32_t)(c * 2 * H_EPI_BOX);
                const bool odd_g = (g & 1) != 0;
                constexpr uint32_t kEpiBar = 1;  // named barriers 1 and 2: one per consumer warpgroup
#pragma unroll
                for (int bx = 0; bx < H_BN / H_EPI_BOX_COLS; ++bx) {
                    if (n0 + bx * H_EPI_BOX_COLS >= N) break;  // uniform over the warpgroup
                    const uint32_t buf = mine + (uint32_t)((bx & 1) * H_EPI_BOX);
                    // The store issued two boxes ago (this tile's or the previous one's) read this buffer.
                    if (tid_in_wg == 0) tc::bulk_wait_read<1>();
                    tc::named_bar_sync(kEpiBar + c, 128);
#pragma unroll
                    for (int q = 0; q < H_EPI_BOX_COLS / 8; ++q)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            // The lanes of odd g store n8 block q ^ 2 of the box, the others block q:
                            // a row's 16-byte pair in the swizzle is then b ^ (g / 2), distinct over
                            // the 4 rows of each half-warp, so each half-warp's 128 bytes take one
                            // wavefront instead of two (NOTES-gemm_tc.md, seventh session). The block is
                            // a lane-dependent choice between two registers: selects, not indexing.
                            const int j = bx * (H_EPI_BOX_COLS / 8) + q, j2 = bx * (H_EPI_BOX_COLS / 8) + (q ^ 2);
                            const int b = odd_g ? (q ^ 2) : q, r = 16 * w + g + 8 * h;  // n8 block, row in the box
                            // 16-byte chunk (2b + t/2) of the row's 128 bytes, in TMA's 128B swizzle.
                            const uint32_t at = buf + tc::swizzle_128b((uint32_t)r, (uint32_t)(2 * b + (t >> 1))) + 8u * (t & 1);
                            const float v0 = odd_g ? acc[4 * j2 + 2 * h] : acc[4 * j + 2 * h];
                            const float v1 = odd_g ? acc[4 * j2 + 2 * h + 1] : acc[4 * j + 2 * h + 1];
                            tc::st_shared_f32x2(at, v0, v1);
                        }
                    tc::fence_proxy_async();  // the generic-proxy writes, before the TMA engine reads them
                    tc::named_bar_sync(kEpiBar + c, 128);
                    if (tid_in_wg == 0) {
                        tc::tma_store_2d(&tmC, buf, n0 + bx * H_EPI_BOX_COLS, r0);
                        tc::bulk_commit();
                    }
                }
            } else {
#pragma unroll
                for (int j = 0; j < 32; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int r = m0 + 64 * c + 16 * w + g + 8 * h, col = n0 + 8 * j + 2 * t;
                        if (r >= M || col >= N) continue;
                        float *dst = C + (size_t)r * N + col;
                        const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
                        if (pairs && col + 1 < N) {
                            *reinterpret_cast<float2 *>(dst) = make_float2(v0, v1);
                        } else {
                            dst[0] = v0;
                            if (col + 1 < N) dst[1] = v1;
                        }
                    }
            }
        }
        // 08: no store may outlive the block (its source is this block's shared memory).
        if constexpr (kTmaStore)
            if (tid_in_wg == 0) tc::bulk_wait<0>();
    }
    // No CTA of a cluster leaves while its peer may still multicast into it or arrive on its barriers.
    if constexpr (kCluster > 1) tc::cluster_sync();
#else
    // Built without sm_90a: the host never launches this (wgmma_unsupported_reason says why).
    (void)M, (void)N, (void)K, (void)tmA, (void)tmB, (void)tmC, (void)C, (void)raster, (void)drop_last_k_tiles;
#endif
}

// The driver's tensor-map encoder and the sentence that says why sm_90a code cannot run here are
// shared with attention's 05_flash_wgmma (cuda/common/tma_host.cuh).
static inline const char *wgmma_unsupported_reason() { return tma_host::sm90a_unsupported_reason(); }
static inline bool wgmma_available() { return wgmma_unsupported_reason() == nullptr; }
static inline const char *wgmma_requirement(int, int, int) { return nullptr; }

// A 2-D bf16 tensor map over a K-contiguous rows x K matrix, box = box_rows x 64 (128 bytes), 128B swizzle.
static inline cudaError_t make_map(CUtensorMap *map, const uint16_t *ptr, int rows, int K, int box_rows) {
    static_assert(H_BK == 64, "tma_host's boxes are 64 elements wide");
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)K * 2};  // bytes between rows (dimension 1)
    return tma_host::encode_bf16_sw128(map, ptr, 2, dims, strides, box_rows);
}

// One cached map per operand: encoding costs host time, and the bench launches the same buffers.
struct MapCache {
    const void *ptr = nullptr;
    int rows = -1, cols = -1;  // the matrix the map covers (A, B: cols = K; C: cols = N)
    CUtensorMap map;
};

static inline cudaError_t cached_map(MapCache &c, const uint16_t *ptr, int rows, int K, int box_rows) {
    if (c.ptr == ptr && c.rows == rows && c.cols == K) return cudaSuccess;
    cudaError_t e = make_map(&c.map, ptr, rows, K, box_rows);
    if (e != cudaSuccess) return e;
    c.ptr = ptr, c.rows = rows, c.cols = K;
    return cudaSuccess;
}
// 08's C map: M x N floats, boxes of 64 rows x 32 floats in the 128-byte swizzle (the epilogue's
// staging layout). Needs N % 4 == 0 and a 16-byte aligned C (TMA's row pitch and base rules).
static inline cudaError_t cached_map_c(MapCache &c, const float *C, int M, int N) {
    if (c.ptr == C && c.rows == M && c.cols == N) return cudaSuccess;
    const cuuint64_t dims[2] = {(cuuint64_t)N, (cuuint64_t)M};
    const cuuint64_t strides[1] = {(cuuint64_t)N * 4};
    cudaError_t e = tma_host::encode_f32_sw128(&c.map, C, 2, dims, strides, 64);
    if (e != cudaSuccess) return e;
    c.ptr = C, c.rows = M, c.cols = N;
    return cudaSuccess;
}

// How the wgmma kernels are launched: 03 one block per tile; 04 (persistent) one block per SM, at
// most one per tile; 05 persistent clusters of two CTAs sharing B by multicast, as many as fit at
// once; 07 (PingPong) k07_wgmma_pingpong, persistent, one block per SM.
// 08 (PersistentStore) is 04 with the TMA-store epilogue and the balanced persistent grid; its
// tuning twin Cluster2Store is 05's clusters with the same epilogue and grid rule.
enum class Schedule { PerTile, Persistent, Cluster2, PingPong, PersistentStore, Cluster2Store };

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
    const int KT = (int)cdiv(K, P_BK) - drop_last_k_tiles;
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

// The SM count, asked once: the attribute query costs host time on every launch.
static inline cudaError_t sm_count(int *out) {
    static int sms = 0;
    if (sms == 0) {
        int dev = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return e;
    }
    *out = sms;
    return cudaSuccess;
}

// One block per SM, at most one per tile (a block with no tile would only wait).
template <int kStages>
static inline cudaError_t launch_pingpong(int M, int N, int K, const CUtensorMap &mapA, const CUtensorMap &mapB,
                                          float *C, cudaStream_t stream, int drop_last_k_tiles, Raster raster) {
    constexpr int smem = p_smem(kStages);
    cudaError_t e = cudalab_allow_dynamic_smem(k07_wgmma_pingpong<kStages>, smem);
    if (e != cudaSuccess) return e;
    int sms = 0;
    e = sm_count(&sms);
    if (e != cudaSuccess) return e;
    const long long tiles = cdiv(M, P_BM) * cdiv(N, P_BN);
    const long long blocks = tiles < sms ? tiles : sms;
    k07_wgmma_pingpong<kStages><<<(unsigned)blocks, P_THREADS, smem, stream>>>(M, N, K, mapA, mapB, C, raster,
                                                                               drop_last_k_tiles);
    return cudaGetLastError();
}

// ================================================================================================
// The tuning configurations: every (schedule, stages, raster) the tuner times
// ================================================================================================
// One named entry per choice, "<rung>-<tile>-s<stages>-g<m|n><group>": the rung whose schedule it
// uses, its block tile (fixed per kernel: 128x256x64 for 03's body, 128x128x64 per consumer for 07),
// the ring's depth, and the raster (groups of `group` tiles down M or along N). gemm_tc_config_name(i)
// reads this table; 03, 04 and 05 run their "-s4-gm8" entries, 07 its "-s6-gm8" one, 06_wgmma_tuned
// the one set by gemm_tc_set_tuned (the Python side passes the cached winner: the C side never reads
// the cache). New entries go at the end: the indices of the old ones stay put.
struct WgmmaConfig {
    const char *name;
    Schedule how;
    int stages;
    Raster raster;
};
#define GEMM_TC_CFG(rung, tile, how, s, o, g) \
    {rung "-" tile "-s" #s "-g" #o #g, Schedule::how, s, {g, (#o)[0] == 'n' ? 1 : 0}}
#define GEMM_TC_CFG_RASTERS_T(rung, tile, how, s)                                                      \
    GEMM_TC_CFG(rung, tile, how, s, m, 4), GEMM_TC_CFG(rung, tile, how, s, m, 8),                        \
        GEMM_TC_CFG(rung, tile, how, s, m, 16), GEMM_TC_CFG(rung, tile, how, s, n, 4),                   \
        GEMM_TC_CFG(rung, tile, how, s, n, 8), GEMM_TC_CFG(rung, tile, how, s, n, 16)
#define GEMM_TC_CFG_RASTERS(rung, how, s) GEMM_TC_CFG_RASTERS_T(rung, "128x256x64", how, s)
static const WgmmaConfig kWgmmaConfigs[] = {
    GEMM_TC_CFG_RASTERS("03_wgmma", PerTile, 4),           GEMM_TC_CFG_RASTERS("03_wgmma", PerTile, 3),
    GEMM_TC_CFG_RASTERS("04_wgmma_persistent", Persistent, 4), GEMM_TC_CFG_RASTERS("04_wgmma_persistent", Persistent, 3),
    GEMM_TC_CFG_RASTERS("05_wgmma_cluster", Cluster2, 4),  GEMM_TC_CFG_RASTERS("05_wgmma_cluster", Cluster2, 3),
    // 07's ring holds 32 KiB stages: 6 (its default) or 4 deep.
    GEMM_TC_CFG_RASTERS_T("07_wgmma_pingpong", "128x128x64", PingPong, 6),
    GEMM_TC_CFG_RASTERS_T("07_wgmma_pingpong", "128x128x64", PingPong, 4),
    // 08: 04's body with the TMA-store epilogue; its 32 KiB of C staging leaves room for 4 stages only.
    GEMM_TC_CFG_RASTERS("08_wgmma_tma_store", PersistentStore, 4),
    // ... and under 05's clusters of two (B multicast): "-c2" after the tile.
    GEMM_TC_CFG_RASTERS_T("08_wgmma_tma_store", "128x256x64-c2", Cluster2Store, 4),
};
#undef GEMM_TC_CFG_RASTERS_T
#undef GEMM_TC_CFG_RASTERS
#undef GEMM_TC_CFG
constexpr int kWgmmaConfigCount = (int)(sizeof(kWgmmaConfigs) / sizeof(kWgmmaConfigs[0]));

static inline int config_index(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < kWgmmaConfigCount; ++i)
        if (strcmp(name, kWgmmaConfigs[i].name) == 0) return i;
    return -1;
}

// The compiled defaults: what 03, 04 and 05 always run, and what 06 runs until set_tuned_config.
static const char *const kDefault03 = "03_wgmma-128x256x64-s4-gm8";
static const char *const kDefault04 = "04_wgmma_persistent-128x256x64-s4-gm8";
static const char *const kDefault05 = "05_wgmma_cluster-128x256x64-s4-gm8";
static const char *const kDefault07 = "07_wgmma_pingpong-128x128x64-s6-gm8";
static const char *const kDefault08 = "08_wgmma_tma_store-128x256x64-s4-gm8";
static const char *const kDefaultTuned = kDefault04;  // 04 and 05 measured equal (0.952 / 0.949 of cuBLAS at 4096^3)

// 06_wgmma_tuned's configuration (per process; gemm_tc_set_tuned).
static inline int &tuned_config_slot() {
    static int slot = config_index(kDefaultTuned);
    return slot;
}
static inline int tuned_config() { return tuned_config_slot(); }
static inline bool set_tuned_config(int i) {
    if (i < 0 || i >= kWgmmaConfigCount) return false;
    tuned_config_slot() = i;
    return true;
}

// The configuration a wgmma variant runs, -1 for the others.
static inline int variant_config(int v) {
    static const int c03 = config_index(kDefault03), c04 = config_index(kDefault04), c05 = config_index(kDefault05),
                     c07 = config_index(kDefault07), c08 = config_index(kDefault08);
    switch (v) {
        case V03_WGMMA: return c03;
        case V04_WGMMA_PERSISTENT: return c04;
        case V05_WGMMA_CLUSTER: return c05;
        case V07_WGMMA_PINGPONG: return c07;
        case V08_WGMMA_TMA_STORE: return c08;
        case V06_WGMMA_TUNED: return tuned_config();
        default: return -1;
    }
}

// Persistent grids: `slots` blocks (or clusters) fit at once and there are `units` units of work.
// 04 and 05 launch min(units, slots). 08 launches the fewest that keep the same number of rounds:
// ceil(units / rounds) with rounds = ceil(units / slots) (4096^3: 512 tiles on 132 SMs -> 4 rounds ->
// 128 blocks, each with 4 tiles, instead of 116 blocks with 4 and 16 with 3). The makespan in tiles is
// the same; the SMs left idle draw no power for it, and under the H100's power cap the rest clock higher.
static inline long long persistent_grid(long long units, long long slots, Schedule how) {
    if (units <= slots) return units;
    if (how != Schedule::PersistentStore && how != Schedule::Cluster2Store) return slots;
    const long long rounds = cdiv(units, slots);
    return cdiv(units, rounds);
}

template <int kCluster, int kStages, bool kTmaStore>
static inline cudaError_t launch_wgmma(int M, int N, int K, const CUtensorMap &mapA, const CUtensorMap &mapB,
                                       const CUtensorMap &mapC, float *C, cudaStream_t stream, int drop_last_k_tiles,
                                       Schedule how, Raster raster) {
    constexpr int smem = h_smem(kStages, kTmaStore);
    auto kernel = k03_wgmma<kCluster, kStages, kTmaStore>;
    cudaError_t e = cudalab_allow_dynamic_smem(kernel, smem);
    if (e != cudaSuccess) return e;
    long long blocks = cdiv(M, H_BM) * cdiv(N, H_BN);
    if constexpr (kCluster == 1) {
        if (how != Schedule::PerTile) {
            int sms = 0;
            e = sm_count(&sms);
            if (e != cudaSuccess) return e;
            blocks = persistent_grid(blocks, sms, how);
        }
        kernel<<<(unsigned)blocks, H_THREADS, smem, stream>>>(M, N, K, mapA, mapB, mapC, C, raster, drop_last_k_tiles);
        return cudaGetLastError();
    } else {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = kCluster, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
        cfg.blockDim = dim3(H_THREADS);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = stream;
        cfg.attrs = attr, cfg.numAttrs = 1;
        // As many clusters as can be resident at once (a GPC's SM count may be odd, so fewer than SMs / 2).
        // One answer per instantiation: the ring's depth changes the shared memory it asks about.
        static int fit = 0;
        if (fit == 0) {
            cfg.gridDim = dim3(kCluster * 66);
            e = cudaOccupancyMaxActiveClusters(&fit, kernel, &cfg);
            if (e != cudaSuccess) return e;
            if (fit < 1) return cudaErrorInvalidConfiguration;
        }
        const long long units = cdiv(cdiv(M, H_BM), kCluster) * cdiv(N, H_BN);
        cfg.gridDim = dim3((unsigned)(kCluster * persistent_grid(units, fit, how)));
        e = cudaLaunchKernelEx(&cfg, kernel, M, N, K, mapA, mapB, mapC, C, raster, drop_last_k_tiles);
        return e != cudaSuccess ? e : cudaGetLastError();
    }
}

// Any wgmma configuration (03's body under 03-05, 07's ping-pong kernel) on K a multiple of 8.
static inline cudaError_t launch_03(int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                                    cudaStream_t stream, int drop_last_k_tiles, const WgmmaConfig &cf) {
    if (((uintptr_t)A | (uintptr_t)B) % 16 != 0) return cudaErrorInvalidValue;  // TMA: 16-byte aligned bases
    if (cf.how == Schedule::PingPong) {  // 128-row boxes of A and of B: maps of their own
        static MapCache pa, pb;
        cudaError_t e = cached_map(pa, A, M, K, P_BM);
        if (e == cudaSuccess) e = cached_map(pb, B, N, K, P_BN);
        if (e != cudaSuccess) return e;
        return cf.stages == 4 ? launch_pingpong<4>(M, N, K, pa.map, pb.map, C, stream, drop_last_k_tiles, cf.raster)
                              : launch_pingpong<P_STAGES>(M, N, K, pa.map, pb.map, C, stream, drop_last_k_tiles, cf.raster);
    }
    const bool cluster = cf.how == Schedule::Cluster2 || cf.how == Schedule::Cluster2Store;
    // One cached map pair per box shape: 05 fetches B in 128-row halves.
    static MapCache ca, cb, cb_half, cc;
    cudaError_t e = cached_map(ca, A, M, K, H_BM);
    if (e != cudaSuccess) return e;
    MapCache &mb = cluster ? cb_half : cb;
    e = cached_map(mb, B, N, K, cluster ? H_BN / 2 : H_BN);
    if (e != cudaSuccess) return e;
    // The kernels without a TMA store never read their C map: they get A's.
    if (cf.how == Schedule::PersistentStore || cf.how == Schedule::Cluster2Store) {
        // TMA stores need a 16-byte row pitch and base: any other N (or C) keeps 08's grid with 04's
        // (05's) direct stores.
        if (N % 4 != 0 || (uintptr_t)C % 16 != 0)
            return cluster ? launch_wgmma<2, 4, false>(M, N, K, ca.map, mb.map, ca.map, C, stream, drop_last_k_tiles, cf.how, cf.raster)
                           : launch_wgmma<1, 4, false>(M, N, K, ca.map, mb.map, ca.map, C, stream, drop_last_k_tiles, cf.how, cf.raster);
        e = cached_map_c(cc, C, M, N);
        if (e != cudaSuccess) return e;
        return cluster ? launch_wgmma<2, 4, true>(M, N, K, ca.map, mb.map, cc.map, C, stream, drop_last_k_tiles, cf.how, cf.raster)
                       : launch_wgmma<1, 4, true>(M, N, K, ca.map, mb.map, cc.map, C, stream, drop_last_k_tiles, cf.how, cf.raster);
    }
    if (cluster)
        return cf.stages == 3 ? launch_wgmma<2, 3, false>(M, N, K, ca.map, mb.map, ca.map, C, stream, drop_last_k_tiles, cf.how, cf.raster)
                              : launch_wgmma<2, 4, false>(M, N, K, ca.map, mb.map, ca.map, C, stream, drop_last_k_tiles, cf.how, cf.raster);
    return cf.stages == 3 ? launch_wgmma<1, 3, false>(M, N, K, ca.map, mb.map, ca.map, C, stream, drop_last_k_tiles, cf.how, cf.raster)
                          : launch_wgmma<1, 4, false>(M, N, K, ca.map, mb.map, ca.map, C, stream, drop_last_k_tiles, cf.how, cf.raster);
}

// k not a multiple of 8: TMA needs 16-byte row strides, so A and B are copied, stream-ordered, into
// zero-padded (rows x k8) buffers, k8 = k rounded up to 8; the zero columns add nothing to C. It is
// the fallback, not a fast path: on the H100, 4096 x 4096 x 4095 took 0.372 ms against 0.193 ms at
// k = 4096 (the memset and the two odd-pitch 2-D copies cost as much as the product).
static inline cudaError_t launch_03_padded(int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                                           cudaStream_t stream, int drop_last_k_tiles, const WgmmaConfig &cf) {
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
        e = launch_03(M, N, K8, (const uint16_t *)pa, (const uint16_t *)pb, C, stream, drop_last_k_tiles, cf);
    const cudaError_t f = cudaFreeAsync(pa, stream);
    return e != cudaSuccess ? e : f;
}

// ================================================================================================
// The plain launch function
// ================================================================================================
// Why a variant cannot take (M, N, K) on this device, or nullptr when it can. Nothing is launched.
static inline const char *requirement(int variant, int M, int N, int K) {
    if (M < 0 || N < 0 || K < 0) return "m, n and k must be >= 0";
    // 01's 2-D grid puts row blocks on y, which holds at most CUDALAB_MAX_GRID_YZ of them (02 and 03
    // number their tiles on x, which holds 2^31 - 1).
    static_assert(CUDALAB_MAX_GRID_YZ * W_BM == 2097120, "the sentence below names this limit");
    if (variant == V01_WMMA && cdiv(M, W_BM) > CUDALAB_MAX_GRID_YZ)
        return "01_wmma takes m at most 2097120 (the grid's y limit: 65535 blocks of 32 rows)";
    if (is_wgmma(variant)) return wgmma_requirement(M, N, K);
    return nullptr;
}

// Enqueue C = A . B^T with tuning configuration `config` (an index into kWgmmaConfigs). k = 0 writes
// zeros; k not a multiple of 8 takes the padded copy. cudaErrorInvalidValue for an unknown index,
// cudaErrorNotSupported where there is no sm_90a.
static inline cudaError_t launch_config(int config, int M, int N, int K, const uint16_t *A, const uint16_t *B,
                                        float *C, cudaStream_t stream, int drop_last_k_tiles = 0) {
    if (config < 0 || config >= kWgmmaConfigCount || M < 0 || N < 0 || K < 0) return cudaErrorInvalidValue;
    if (!wgmma_available()) return cudaErrorNotSupported;
    if (M == 0 || N == 0) return cudaSuccess;
    if (K == 0) return cudaMemsetAsync(C, 0, (size_t)M * N * sizeof(float), stream);
    const WgmmaConfig &cf = kWgmmaConfigs[config];
    return K % 8 == 0 ? launch_03(M, N, K, A, B, C, stream, drop_last_k_tiles, cf)
                      : launch_03_padded(M, N, K, A, B, C, stream, drop_last_k_tiles, cf);
}

// Enqueue C = A . B^T (A: M x K, B: N x K, bf16 bits; C: M x N float32) on `stream` with variant
// 01_wmma, 02_mma_sync, 03_wgmma, 04_wgmma_persistent, 05_wgmma_cluster, 06_wgmma_tuned,
// 07_wgmma_pingpong or 08_wgmma_tma_store. No synchronisation. k = 0 writes zeros. Returns cudaErrorInvalidValue for another
// variant or a shape `requirement` refuses, cudaErrorNotSupported for 03-08 where it was not built
// for (or cannot run on) sm_90a, and for 01-02 below sm_80 (sm80_unsupported_reason says why).
static inline cudaError_t launch(int variant, int M, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                                 cudaStream_t stream, int drop_last_k_tiles = 0) {
    if (is_wgmma(variant) && !wgmma_available()) return cudaErrorNotSupported;
    if ((variant == V01_WMMA || variant == V02_MMA_SYNC) && sm80_unsupported_reason() != nullptr)
        return cudaErrorNotSupported;
    if (requirement(variant, M, N, K) != nullptr) return cudaErrorInvalidValue;
    if (is_wgmma(variant)) return launch_config(variant_config(variant), M, N, K, A, B, C, stream, drop_last_k_tiles);
    if (M == 0 || N == 0) return cudaSuccess;
    if (K == 0) return cudaMemsetAsync(C, 0, (size_t)M * N * sizeof(float), stream);
    switch (variant) {
        case V01_WMMA: {
            dim3 grid((unsigned)cdiv(N, W_BN), (unsigned)cdiv(M, W_BM));
            k01_wmma<<<grid, 128, 0, stream>>>(M, N, K, A, B, C);
            return cudaGetLastError();
        }
        case V02_MMA_SYNC:
            return K % 8 == 0 ? launch_02<true>(M, N, K, A, B, C, stream, drop_last_k_tiles)
                              : launch_02<false>(M, N, K, A, B, C, stream, drop_last_k_tiles);
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace gemm_tc
