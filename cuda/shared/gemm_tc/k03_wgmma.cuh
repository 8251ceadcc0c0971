// gemm_tc's wgmma kernel (sm_90a) and its launcher: one body, k03_wgmma, under the schedules of
// 03_wgmma, 04_wgmma_persistent, 05_wgmma_cluster, 06_wgmma_tuned and 08_wgmma_tma_store; the TMA
// tensor maps it reads (cached per operand) and the raster both it and 07 walk. Launched with one
// entry of configs.cuh through wgmma_launch.cuh (gemm_tc's variants, and launch_fastest for the
// programs that borrow the lab's fastest GEMM). Include as "gemm_tc/k03_wgmma.cuh".
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "arch.cuh"
#include "check.cuh"
#include "faults.cuh"
#include "tc_ptx.cuh"
#include "tma_host.cuh"

namespace gemm_tc {

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
    const int KT = (int)cdiv(K, H_BK) - CUDALAB_FAULT(drop_last_k_tiles);

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

// The maps already encoded, one cache per box shape. Encoding is a driver call on the host for every
// launch that misses, and callers come back to a few buffers: the bench launches the same A, B and C
// again and again; collectives' tensor-parallel block launches two GEMMs per token chunk per rank, each
// at its own offsets (world x chunks x 2 pointers per operand). A map holds only the key (pointer,
// rows, cols; the box is the cache's), nothing of the allocation, so a hit is right even after the
// memory under the pointer was freed and allocated again: an entry cannot go stale. kMapCacheWays
// entries, replaced in turn; a larger working set costs host time (re-encodes), never a wrong map.
constexpr int kMapCacheWays = 128;
struct MapCache {
    struct Entry {
        const void *ptr = nullptr;
        int rows = -1, cols = -1;  // the matrix the map covers (A, B: cols = K; C: cols = N)
        CUtensorMap map;
    };
    Entry e[kMapCacheWays];
    int used = 0, next = 0, last = 0;  // entries filled, the next to replace, the last hit
    const CUtensorMap *find(const void *ptr, int rows, int cols) {
        if (used > 0 && e[last].ptr == ptr && e[last].rows == rows && e[last].cols == cols) return &e[last].map;
        for (int i = 0; i < used; ++i)
            if (e[i].ptr == ptr && e[i].rows == rows && e[i].cols == cols) return &e[last = i].map;
        return nullptr;
    }
    // The entry to (re)encode; its key is set by keep() only once the encoder succeeded.
    Entry &victim() { return e[next]; }
    const CUtensorMap *keep(const void *ptr, int rows, int cols) {
        Entry &v = e[next];
        v.ptr = ptr, v.rows = rows, v.cols = cols;
        last = next;
        if (used < kMapCacheWays) ++used;
        next = (next + 1) % kMapCacheWays;
        return &v.map;
    }
};

static inline cudaError_t cached_map(MapCache &c, const CUtensorMap **out, const uint16_t *ptr, int rows, int K,
                                     int box_rows) {
    if ((*out = c.find(ptr, rows, K)) != nullptr) return cudaSuccess;
    MapCache::Entry &v = c.victim();
    v.ptr = nullptr;  // a failed encode leaves no entry behind
    cudaError_t e = make_map(&v.map, ptr, rows, K, box_rows);
    if (e != cudaSuccess) return e;
    *out = c.keep(ptr, rows, K);
    return cudaSuccess;
}
// 08's C map: M x N floats, boxes of 64 rows x 32 floats in the 128-byte swizzle (the epilogue's
// staging layout). Needs N % 4 == 0 and a 16-byte aligned C (TMA's row pitch and base rules).
static inline cudaError_t cached_map_c(MapCache &c, const CUtensorMap **out, const float *C, int M, int N) {
    if ((*out = c.find(C, M, N)) != nullptr) return cudaSuccess;
    MapCache::Entry &v = c.victim();
    v.ptr = nullptr;
    const cuuint64_t dims[2] = {(cuuint64_t)N, (cuuint64_t)M};
    const cuuint64_t strides[1] = {(cuuint64_t)N * 4};
    cudaError_t e = tma_host::encode_f32_sw128(&v.map, C, 2, dims, strides, 64);
    if (e != cudaSuccess) return e;
    *out = c.keep(C, M, N);
    return cudaSuccess;
}

// How the wgmma kernels are launched: 03 one block per tile; 04 (persistent) one block per SM, at
// most one per tile; 05 persistent clusters of two CTAs sharing B by multicast, as many as fit at
// once; 07 (PingPong) k07_wgmma_pingpong, persistent, one block per SM.
// 08 (PersistentStore) is 04 with the TMA-store epilogue and the balanced persistent grid; its
// tuning twin Cluster2Store is 05's clusters with the same epilogue and grid rule.
enum class Schedule { PerTile, Persistent, Cluster2, PingPong, PersistentStore, Cluster2Store };

// The SM count, asked once: the attribute query costs host time on every launch. max_sms > 0 caps it:
// a persistent grid then leaves the other SMs to a kernel that runs beside it (collectives'
// all-reduce beside the tensor-parallel block's GEMMs). gemm_tc's own launches pass 0.
static inline cudaError_t sm_count(int *out, int max_sms = 0) {
    static int sms = 0;
    if (sms == 0) {
        int dev = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return e;
    }
    *out = max_sms > 0 && max_sms < sms ? max_sms : sms;
    return cudaSuccess;
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
                                       Schedule how, Raster raster, int max_sms = 0) {
    constexpr int smem = h_smem(kStages, kTmaStore);
    auto kernel = k03_wgmma<kCluster, kStages, kTmaStore>;
    cudaError_t e = cudalab_allow_dynamic_smem(kernel, smem);
    if (e != cudaSuccess) return e;
    long long blocks = cdiv(M, H_BM) * cdiv(N, H_BN);
    if constexpr (kCluster == 1) {
        if (how != Schedule::PerTile) {
            int sms = 0;
            e = sm_count(&sms, max_sms);
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
        const int slots = max_sms >= kCluster && max_sms / kCluster < fit ? max_sms / kCluster : fit;
        cfg.gridDim = dim3((unsigned)(kCluster * persistent_grid(units, slots, how)));
        e = cudaLaunchKernelEx(&cfg, kernel, M, N, K, mapA, mapB, mapC, C, raster, drop_last_k_tiles);
        return e != cudaSuccess ? e : cudaGetLastError();
    }
}

}  // namespace gemm_tc
