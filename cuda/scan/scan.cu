// scan: inclusive and exclusive prefix sums of 32-bit integers. See scan.h for the contract of each
// entry point, and README.md for the ideas.
//
// The elements are `unsigned int`: unsigned addition wraps modulo 2^32 by definition, so a sum that
// overflows is still exact (int32 data has the same bits; the Python side passes it viewed as uint32).
// An exclusive scan is the inclusive one minus the element itself (out[i] = in[0] + ... + in[i-1]):
// exact in modular arithmetic, so every kernel computes the inclusive sum and subtracts on the way out.
#include <cstdint>
#include <cstring>

#include <cub/device/device_scan.cuh>
#include <cuda/atomic>

#include "scan.h"
#include "check.cuh"

namespace {

// The one variant table, in the order a learner meets them.
const char *const kVariants[] = {"01_kogge_stone", "02_brent_kung", "03_decoupled_lookback"};
const int kNumVariants = (int)(sizeof(kVariants) / sizeof(kVariants[0]));

int variant_id(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < kNumVariants; ++i)
        if (strcmp(name, kVariants[i]) == 0) return i;
    return -1;
}

const long long kMaxN = 2147483647LL;  // INT_MAX: CUB's item count is an int (scan.h says the same)

// EXERCISE scan_kogge_stone: copy
const int kKoggeStoneThreads = 1024;  // one element per thread: a tile of 1024
// EXERCISE scan_kogge_stone: end copy
// EXERCISE scan_brent_kung: copy
const int kBrentKungThreads = 1024;   // two elements per thread: a tile of 2048
// EXERCISE scan_brent_kung: end copy
const int kPropagateThreads = 256;

const int kLookbackThreads = 256;
const int kLookbackItems = 16;  // per thread, as 4 uint4s: 64 bytes in and out, enough loads in flight per SM
const int kLookbackTile = kLookbackThreads * kLookbackItems;  // 4096 elements
const int kLookbackWarps = kLookbackThreads / 32;
static_assert(kLookbackItems % 4 == 0, "03 moves its items as uint4s");
// 03's look-back waits (ns): before the first poll, and between polls that found a predecessor not ready.
const unsigned kFirstWaitNs = 1000, kPollWaitNs = 600;

}  // namespace

// ---- 01: Kogge-Stone, one tile per block --------------------------------------------------------------

// EXERCISE scan_kogge_stone: copy
// Each block scans its own tile of blockDim.x = 1024 elements, one per thread. In step k every thread
// adds the value `stride` = 2^k places to its left, so after log2(1024) = 10 steps each holds the sum of
// its whole prefix in the tile. That is n log n additions, but every thread is busy in every step.
// Double buffering: a step reads buffer `in` and writes the other one, so a thread never overwrites a
// value a neighbour has yet to read -- one barrier per step instead of two.
// block_sums (when not null) receives each tile's total, for the pass that scans the totals.
__global__ void scan_01_kogge_stone(const unsigned *x, unsigned *out, long long n, int exclusive,
                                    unsigned *block_sums) {
    __shared__ unsigned buf[2][kKoggeStoneThreads];
    const int t = threadIdx.x;
    const long long i = (long long)blockIdx.x * blockDim.x + t;
// EXERCISE scan_kogge_stone: begin mine = x[i], or 0 past the end of x (the last tile is ragged; 0 changes no sum);
// EXERCISE scan_kogge_stone: todo put it in buf[0][t] and wait for the whole tile (__syncthreads). Then for stride =
// EXERCISE scan_kogge_stone: todo 1, 2, 4, ... below blockDim.x: each thread reads its own value and, when t >= stride,
// EXERCISE scan_kogge_stone: todo adds the one `stride` places to its left, from one buffer, and writes the sum into
// EXERCISE scan_kogge_stone: todo the other (so no thread overwrites a value a neighbour has yet to read); the buffers
// EXERCISE scan_kogge_stone: todo swap roles, and every thread waits before the next step reads. Leave the tile's
// EXERCISE scan_kogge_stone: todo inclusive sum up to t in `inclusive` (the tile total below reads it), and when i < n
// EXERCISE scan_kogge_stone: todo store out[i] = inclusive, or, when `exclusive` is set, the sum of the elements
// EXERCISE scan_kogge_stone: todo before i alone (unsigned sums wrap modulo 2^32: that is exact).
    const unsigned mine = i < n ? x[i] : 0u;  // past the end: 0, which changes no sum
    int in = 0;
    buf[in][t] = mine;
    __syncthreads();
    for (int stride = 1; stride < (int)blockDim.x; stride *= 2) {
        unsigned v = buf[in][t];
        if (t >= stride) v += buf[in][t - stride];
        buf[1 - in][t] = v;
        in = 1 - in;
        __syncthreads();  // the whole step is written before anyone reads it
    }
    const unsigned inclusive = buf[in][t];
    if (i < n) out[i] = exclusive ? inclusive - mine : inclusive;
// EXERCISE scan_kogge_stone: stub const unsigned inclusive = 0u; (void)x; (void)out; (void)n; (void)exclusive;
// EXERCISE scan_kogge_stone: end
    if (block_sums != nullptr && t == blockDim.x - 1) block_sums[blockIdx.x] = inclusive;
}
// EXERCISE scan_kogge_stone: end copy

// ---- 02: Brent-Kung, work-efficient ------------------------------------------------------------------

// EXERCISE scan_brent_kung: copy
// Each block scans a tile of 2 * blockDim.x = 2048 elements, two per thread, in about 2n additions
// instead of n log n. The up-sweep builds a tree of partial sums in place (after it, s[2^k * j - 1]
// holds the sum of the 2^k elements ending there); the down-sweep walks back down the tree and adds
// each finished prefix into the middle of the span to its right. Fewer additions, but twice the steps,
// and fewer threads busy in each: on a memory-bound scan the two cost about the same.
// Loads and stores are coalesced: thread t handles elements t and t + blockDim.x of the tile.
__global__ void scan_02_brent_kung(const unsigned *x, unsigned *out, long long n, int exclusive,
                                   unsigned *block_sums) {
    __shared__ unsigned s[2 * kBrentKungThreads];
    const int t = threadIdx.x;
    const int tile = 2 * (int)blockDim.x;
    const long long base = (long long)blockIdx.x * tile;
    const long long i0 = base + t, i1 = base + t + blockDim.x;
// EXERCISE scan_brent_kung: begin load mine0 = x[i0] and mine1 = x[i1] (0 past the end of x: the last tile is
// EXERCISE scan_brent_kung: todo ragged) into s[t] and s[t + blockDim.x]. Up-sweep, for stride = 1, 2, 4, ... below
// EXERCISE scan_brent_kung: todo `tile`: wait for the level before (__syncthreads), then thread t adds s[idx - stride]
// EXERCISE scan_brent_kung: todo into s[idx], idx = (t + 1) * 2 * stride - 1, when idx < tile. Down-sweep, for stride =
// EXERCISE scan_brent_kung: todo tile / 4, tile / 8, ..., 1: wait, then add s[idx] (a finished prefix) into
// EXERCISE scan_brent_kung: todo s[idx + stride], same idx, when idx + stride < tile. Wait once more, then store
// EXERCISE scan_brent_kung: todo out[i0] and out[i1] (each only inside x): s[t] and s[t + blockDim.x], or, when
// EXERCISE scan_brent_kung: todo `exclusive` is set, the sum of the elements before each alone (unsigned sums wrap
// EXERCISE scan_brent_kung: todo modulo 2^32: that is exact). s[tile - 1] must end as the tile's total (read below).
    const unsigned mine0 = i0 < n ? x[i0] : 0u;
    const unsigned mine1 = i1 < n ? x[i1] : 0u;
    s[t] = mine0;
    s[t + blockDim.x] = mine1;
    // Up-sweep: at stride d, thread t adds the left half of span t (2d elements) into its right end.
    for (int stride = 1; stride < tile; stride *= 2) {
        __syncthreads();  // the previous level is complete
        const int idx = (t + 1) * 2 * stride - 1;
        if (idx < tile) s[idx] += s[idx - stride];
    }
    // Down-sweep: the right end of each span now holds a finished prefix; hand it to the middle of
    // the next span, halving the stride each time.
    for (int stride = tile / 4; stride > 0; stride /= 2) {
        __syncthreads();
        const int idx = (t + 1) * 2 * stride - 1;
        if (idx + stride < tile) s[idx + stride] += s[idx];
    }
    __syncthreads();
    if (i0 < n) out[i0] = exclusive ? s[t] - mine0 : s[t];
    if (i1 < n) out[i1] = exclusive ? s[t + blockDim.x] - mine1 : s[t + blockDim.x];
// EXERCISE scan_brent_kung: stub (void)x; (void)out; (void)n; (void)exclusive; (void)i0; (void)i1;
// EXERCISE scan_brent_kung: end
    if (block_sums != nullptr && t == 0) block_sums[blockIdx.x] = s[tile - 1];
}
// EXERCISE scan_brent_kung: end copy

// ---- 01 and 02 across blocks: scan-then-propagate ------------------------------------------------------

// After every tile is scanned and the tile totals scanned in their turn, tile b + 1 still lacks the sum
// of all tiles before it: scanned_sums[b]. One block per tile (tile 0 needs nothing) adds it.
__global__ void scan_propagate(unsigned *out, long long n, const unsigned *scanned_sums, int tile) {
    const long long b = (long long)blockIdx.x + 1;
    const unsigned add = scanned_sums[b - 1];
    const long long end = (b + 1) * tile < n ? (b + 1) * tile : n;
    for (long long i = b * tile + threadIdx.x; i < end; i += blockDim.x) out[i] += add;
}

// ---- 03: single pass, decoupled look-back --------------------------------------------------------------

// A tile's status word packs a flag (high 32 bits) and a value (low 32) into one 64-bit word, so that
// a reader sees the flag and its value together from one load: no fence is needed between them.
// (With the two in separate words the writer would need value; __threadfence(); flag, and the reader
// flag; __threadfence(); value.) Status words start at 0 = not ready (the launcher zeroes them).
enum : unsigned { kNotReady = 0, kAggregate = 1, kPrefix = 2 };

__device__ __forceinline__ unsigned long long status_word(unsigned flag, unsigned value) {
    return ((unsigned long long)flag << 32) | value;
}

// Relaxed device-scope atomics: every load sees a whole word some block stored (never a stale cached
// copy: the load goes to L2, where other SMs' stores land). Relaxed suffices because the word carries
// everything the reader needs, and a block's two stores (aggregate, then prefix) go to the same address,
// which every reader observes in that order.
__device__ __forceinline__ void store_status(unsigned long long *status, unsigned tile, unsigned long long w) {
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(status[tile]).store(w, cuda::memory_order_relaxed);
}

__device__ __forceinline__ unsigned long long load_status(unsigned long long *status, long long tile) {
    return cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(status[tile]).load(cuda::memory_order_relaxed);
}

__device__ __forceinline__ unsigned warp_sum(unsigned v) {
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

// Called by a whole warp: the sum of every tile before `tile`. Lane l reads the status of tile - 1 - l,
// so one round covers 32 predecessors. A round waits until none of its 32 is still not ready; then the
// nearest predecessor with a finished prefix ends the walk: the aggregates of the tiles between it and
// us, plus its prefix, are the answer. With none, all 32 aggregates count and the walk moves 32 back.
// Every predecessor took its tile number before we took ours (the counter), so it is running or done
// and will publish: the wait always ends, whatever order the hardware schedules blocks in.
// The waits sleep (__nanosleep) instead of spinning: hundreds of resident tiles look back at once, and
// a warp that polls the L2 flat out takes bandwidth from the loads and stores the whole scan waits on.
// Measured on an H200 at 2^28 (NOTES-scan): a first sleep about as long as a predecessor needs to publish,
// then a fixed one, beat both spinning and a short doubling back-off by 15%.
__device__ unsigned look_back(unsigned long long *status, unsigned tile, int lane) {
    unsigned prefix = 0;
    long long pred = (long long)tile - 1 - lane;
    __nanosleep(kFirstWaitNs);
    while (true) {
        unsigned long long w;
        while (true) {
            // Before tile 0 there is nothing: a finished prefix of 0.
            w = pred >= 0 ? load_status(status, pred) : status_word(kPrefix, 0u);
            if (!__any_sync(0xffffffffu, (unsigned)(w >> 32) == kNotReady)) break;
            __nanosleep(kPollWaitNs);
        }
        const unsigned done = __ballot_sync(0xffffffffu, (unsigned)(w >> 32) == kPrefix);
        const int stop = done ? __ffs(done) - 1 : 31;  // lanes past the nearest prefix are counted in it
        prefix += warp_sum(lane <= stop ? (unsigned)w : 0u);
        if (done) return prefix;
        pred -= 32;
    }
}

// One pass over the data: 4 bytes read and 4 written per element, as a copy. Each block takes the next
// tile number from a counter (not blockIdx.x: a block may start before a lower-numbered one, and
// waiting on a block that has not started could wait forever), reduces its 4096 elements, publishes that
// aggregate at once, then looks back for the sum of all earlier tiles and publishes its own inclusive
// prefix, so later tiles rarely walk far. Only then does it write its scanned tile.
// Memory: 16-byte accesses straight between DRAM and registers. Thread (warp w, lane l) holds 4 uint4s;
// its j-th is uint4 number w*128 + 32j + l of the tile, so each warp instruction moves 512 contiguous
// bytes and warp w owns the 512 consecutive elements from w*512, in the order (j, lane, component). The
// scan follows that order: per j, each lane adds its 4, a shuffle scan over the lanes gives the lanes
// before it, and the slices j' < j come before slice j. Four times fewer load and store instructions than
// one element a lane, and no shared-memory transpose (measured: 0.70 -> 0.80 of CUB before the sleeps).
// A tile that runs past n, or pointers not 16-byte aligned (an offset view), takes the same elements one
// at a time with a bounds check: the same order, so the same sums.
__global__ void __launch_bounds__(kLookbackThreads, 4)
scan_03_decoupled_lookback(const unsigned *x, unsigned *out, long long n, int exclusive,
                           unsigned long long *tile_status, unsigned *tile_counter) {
    constexpr int kVec = kLookbackItems / 4;  // uint4s a thread
    __shared__ unsigned warp_totals[kLookbackWarps];
    __shared__ unsigned tile_id, tile_prefix;
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    if (t == 0) tile_id = atomicAdd(tile_counter, 1u);
    __syncthreads();
    const unsigned tile = tile_id;
    const long long base = (long long)tile * kLookbackTile;
    const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
    const bool whole = aligned && base + kLookbackTile <= n;
    const int q0 = warp * 32 * kVec + lane;  // this thread's first uint4 in the tile

    uint4 v[kVec];
    if (whole) {
        const uint4 *src = reinterpret_cast<const uint4 *>(x + base) + q0;
#pragma unroll
        for (int j = 0; j < kVec; ++j) v[j] = src[32 * j];
    } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
            const long long e = base + 4LL * (q0 + 32 * j);
            v[j].x = e < n ? x[e] : 0u;
            v[j].y = e + 1 < n ? x[e + 1] : 0u;
            v[j].z = e + 2 < n ? x[e + 2] : 0u;
            v[j].w = e + 3 < n ? x[e + 3] : 0u;
        }
    }
    // off[j]: the sum of this warp's elements before v[j].x (whole slices j' < j, then the lanes below
    // this one in slice j); the four shuffle scans are independent, so they interleave.
    unsigned own[kVec], incl[kVec], off[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) incl[j] = own[j] = v[j].x + v[j].y + v[j].z + v[j].w;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
            const unsigned y = __shfl_up_sync(0xffffffffu, incl[j], d);
            if (lane >= d) incl[j] += y;
        }
    }
    unsigned warp_total = 0;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
        off[j] = warp_total + (incl[j] - own[j]);
        warp_total += __shfl_sync(0xffffffffu, incl[j], 31);
    }
    if (lane == 0) warp_totals[warp] = warp_total;
    __syncthreads();
    unsigned before_warp = 0, aggregate = 0;
    for (int w = 0; w < kLookbackWarps; ++w) {
        if (w < warp) before_warp += warp_totals[w];
        aggregate += warp_totals[w];
    }

    if (warp == 0) {
        unsigned prefix = 0;
        if (tile == 0) {
            if (lane == 0) store_status(tile_status, 0, status_word(kPrefix, aggregate));
        } else {
            if (lane == 0) store_status(tile_status, tile, status_word(kAggregate, aggregate));
            prefix = look_back(tile_status, tile, lane);
            if (lane == 0) store_status(tile_status, tile, status_word(kPrefix, prefix + aggregate));
        }
        if (lane == 0) tile_prefix = prefix;
    }
    __syncthreads();

    const unsigned start = tile_prefix + before_warp;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
        const unsigned b0 = start + off[j], i0 = b0 + v[j].x, i1 = i0 + v[j].y, i2 = i1 + v[j].z, i3 = i2 + v[j].w;
        const uint4 o = exclusive ? make_uint4(b0, i0, i1, i2) : make_uint4(i0, i1, i2, i3);
        if (whole) {
            reinterpret_cast<uint4 *>(out + base)[q0 + 32 * j] = o;
        } else {
            const long long e = base + 4LL * (q0 + 32 * j);
            if (e < n) out[e] = o.x;
            if (e + 1 < n) out[e + 1] = o.y;
            if (e + 2 < n) out[e + 2] = o.z;
            if (e + 3 < n) out[e + 3] = o.w;
        }
    }
}

// ---- the launchers ----------------------------------------------------------------------------------

namespace {

int tile_of(int v) { return v == 0 ? kKoggeStoneThreads : v == 1 ? 2 * kBrentKungThreads : kLookbackTile; }

// 01 and 02 keep one array of tile totals per level: n/tile totals, then (n/tile)/tile, ... until one
// tile holds them all.
long long hierarchy_bytes(long long n, int tile) {
    const long long blocks = cdiv(n, tile);
    return blocks <= 1 ? 0 : blocks * (long long)sizeof(unsigned) + hierarchy_bytes(blocks, tile);
}

// 03: one status word per tile, then the tile counter.
long long lookback_bytes(long long n) {
    return cdiv(n, kLookbackTile) * (long long)sizeof(unsigned long long) + (long long)sizeof(unsigned long long);
}

long long workspace_for(int v, long long n) {
    return v == 2 ? lookback_bytes(n) : hierarchy_bytes(n, tile_of(v));
}

// Scan-then-propagate: scan every tile (keeping the tile totals), scan the totals the same way (a
// recursion, one level per factor of `tile`), then add to each tile the sum of the tiles before it.
int scan_hierarchy(int v, const unsigned *x, unsigned *out, long long n, int exclusive, unsigned *work,
                   cudaStream_t stream) {
    const int tile = tile_of(v);
    const long long blocks = cdiv(n, tile);
    unsigned *sums = blocks > 1 ? work : nullptr;
    if (v == 0)
        scan_01_kogge_stone<<<(unsigned)blocks, kKoggeStoneThreads, 0, stream>>>(x, out, n, exclusive, sums);
    else
        scan_02_brent_kung<<<(unsigned)blocks, kBrentKungThreads, 0, stream>>>(x, out, n, exclusive, sums);
    CUDA_TRY_LAUNCH();
    if (blocks == 1) return 0;
    // The totals are scanned in place and inclusive: entry b then holds the sum of tiles 0..b.
    if (int err = scan_hierarchy(v, sums, sums, blocks, 0, work + blocks, stream)) return err;
    scan_propagate<<<(unsigned)(blocks - 1), kPropagateThreads, 0, stream>>>(out, n, sums, tile);
    CUDA_TRY_LAUNCH();
    return 0;
}

int scan_lookback(const unsigned *x, unsigned *out, long long n, int exclusive, void *work, cudaStream_t stream) {
    const long long tiles = cdiv(n, kLookbackTile);
    unsigned long long *status = (unsigned long long *)work;
    unsigned *counter = (unsigned *)(status + tiles);
    // Every status "not ready" and the counter at 0: in stream order, before the kernel reads them.
    CUDA_TRY(cudaMemsetAsync(work, 0, (size_t)lookback_bytes(n), stream));
    scan_03_decoupled_lookback<<<(unsigned)tiles, kLookbackThreads, 0, stream>>>(x, out, n, exclusive, status,
                                                                                 counter);
    CUDA_TRY_LAUNCH();
    return 0;
}

}  // namespace

extern "C" int scan_variant_count(void) { return kNumVariants; }

extern "C" const char *scan_variant_name(int i) { return (i >= 0 && i < kNumVariants) ? kVariants[i] : nullptr; }

extern "C" long long scan_max_n(void) { return kMaxN; }

extern "C" long long scan_workspace_bytes(const char *variant, long long n) {
    const int v = variant_id(variant);
    if (v < 0 || n < 0 || n > kMaxN) return -1;
    return n == 0 ? 0 : workspace_for(v, n);
}

extern "C" cudalab_status scan_u32_dev(const char *variant, const unsigned *d_x, unsigned *d_out, long long n,
                                       int exclusive, void *d_work, long long work_bytes, void *stream_) {
    const int v = variant_id(variant);
    if (v < 0 || n < 0 || n > kMaxN || work_bytes < 0) return (int)cudaErrorInvalidValue;
    if (n == 0) return 0;
    if (d_x == nullptr || d_out == nullptr) return (int)cudaErrorInvalidValue;
    const long long need = workspace_for(v, n);
    if (work_bytes < need || (need > 0 && d_work == nullptr)) return (int)cudaErrorInvalidValue;
    if ((uintptr_t)d_work % sizeof(unsigned long long) != 0) return (int)cudaErrorMisalignedAddress;
    cudaStream_t stream = (cudaStream_t)stream_;
    if (v == 2) return scan_lookback(d_x, d_out, n, exclusive != 0, d_work, stream);
    return scan_hierarchy(v, d_x, d_out, n, exclusive != 0, (unsigned *)d_work, stream);
}

extern "C" cudalab_status scan_u32(const char *variant, const unsigned *x, unsigned *out, long long n,
                                   int exclusive) {
    const int v = variant_id(variant);
    if (v < 0 || n < 0 || n > kMaxN) return (int)cudaErrorInvalidValue;
    if (n == 0) return 0;
    if (x == nullptr || out == nullptr) return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)n * sizeof(unsigned);
    const long long work_bytes = workspace_for(v, n);
    cudalab::DeviceAlloc dx, dout, dwork;
    if (int err = dx.upload(x, bytes)) return err;
    if (int err = dout.alloc(bytes)) return err;
    // A byte pattern, so that an element the kernel never writes cannot hold what an earlier call left here.
    CUDA_TRY(cudaMemset(dout.p, 0xAB, bytes));
    if (int err = dwork.alloc((size_t)work_bytes)) return err;
    if (int err = scan_u32_dev(variant, dx.as<unsigned>(), dout.as<unsigned>(), n, exclusive, dwork.p, work_bytes,
                               nullptr))
        return err;
    CUDA_TRY(cudaDeviceSynchronize());
    CUDA_TRY(cudaMemcpy(out, dout.p, bytes, cudaMemcpyDeviceToHost));
    return cudalab::release_all(dx, dout, dwork);
}

// ---- the ceiling: CUB's scan ----------------------------------------------------------------------------

extern "C" cudalab_status scan_cub_workspace_bytes(long long n, int exclusive, long long *bytes) {
    if (n < 0 || n > kMaxN || bytes == nullptr) return (int)cudaErrorInvalidValue;
    size_t need = 0;
    const unsigned *none = nullptr;
    unsigned *none_out = nullptr;
    // With no temporary storage, CUB only reports how much it needs.
    if (exclusive)
        CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, need, none, none_out, (int)n));
    else
        CUDA_TRY(cub::DeviceScan::InclusiveSum(nullptr, need, none, none_out, (int)n));
    *bytes = (long long)need;
    return 0;
}

extern "C" cudalab_status scan_cub_dev(const unsigned *d_x, unsigned *d_out, long long n, int exclusive,
                                       void *d_work, long long work_bytes, void *stream) {
    if (n < 0 || n > kMaxN || work_bytes < 0) return (int)cudaErrorInvalidValue;
    if (n == 0) return 0;
    if (d_x == nullptr || d_out == nullptr || d_work == nullptr) return (int)cudaErrorInvalidValue;
    size_t have = (size_t)work_bytes;
    if (exclusive)
        CUDA_TRY(cub::DeviceScan::ExclusiveSum(d_work, have, d_x, d_out, (int)n, (cudaStream_t)stream));
    else
        CUDA_TRY(cub::DeviceScan::InclusiveSum(d_work, have, d_x, d_out, (int)n, (cudaStream_t)stream));
    return 0;
}
