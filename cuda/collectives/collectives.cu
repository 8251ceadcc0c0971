// collectives: the rungs (the table below) and the communicator they run on (collectives.h).
//
// 01_p2p_copy / 01_memcpy_peer: rank r's output receives the other rank's input, read by a copy kernel
//   straight from the peer's memory (peer access enabled), against cudaMemcpyPeerAsync; either or both
//   directions at once. The first rung because every later one is built from such loads and stores.
// 02_ring_allreduce: reduce-scatter then all-gather around the ring r -> r+1, in chunks. Each step
//   stores into the right neighbour's receive buffer and then raises a flag in the neighbour's memory;
//   the neighbour spins on its own (local) flag, adds its input, and stores on. Every chunk of every
//   segment has its own flag, and a rank's blocks take different chunks, so the link carries chunk c+1
//   while chunk c is being added: the transfer and the adds overlap. Each rank sends 2(n-1)/n of the
//   data, the least an all-reduce can (what busbw counts), which makes it the large-message algorithm.
// 03_oneshot_allreduce: for small messages latency, not bandwidth, is the cost: one step instead of
//   2(n-1). Each rank reads every rank's input and adds them in rank order 0..n-1, so every rank gets
//   the same bits. A device barrier before (every peer's input is ready) and after (nobody reuses its
//   input while a peer still reads it), with flags that hold the call's number (the epoch): a flag left
//   by an earlier call is always smaller than the one awaited, so back-to-back calls cannot be confused
//   (the design of vLLM's and TensorRT-LLM's custom all-reduce).
// nccl_*: ncclAllReduce / ncclAllGather / ncclReduceScatter on non-blocking communicators: the ceiling.
// tp_mlp / tp_mlp_overlap: y = gelu(x W1^T) W2^T with W1 split by rows (column-parallel) and W2 by
//   columns (row-parallel), so each rank's partial y needs one all-reduce; the overlapped form splits the
//   tokens into blocks and all-reduces block i on a second stream while block i+1's GEMMs run. The GEMMs
//   are the lab's fastest (cuda/shared/gemm_tc/wgmma_launch.cuh, gemm_tc::launch_fastest): gemm_tc's
//   wgmma rung where this build has sm_90a and the GPU is a Hopper, its 02_mma_sync elsewhere; either
//   can be named (kTpGemms) to time one against the other. The all-reduce is 02, 03 or copy_engine
//   (kTpAllreduces: the copy engines carry the bytes, a few SMs add; tp_copy_allreduce).
//
// One kernel body, two launches. Each collective kernel takes the table of every rank's pointers. With
// a.rank >= 0 it is launched on rank a.rank's GPU, one block per chunk lane; with a.rank < 0 it is ONE
// cooperative launch of world x blocks_per_rank blocks on one GPU, block i serving virtual rank
// i / blocks_per_rank. Both go through cudaLaunchCooperativeKernel, so every block is resident.
//
// No hang: spin_until bounds every wait by %globaltimer and records the first expiry (rank, step,
// chunk, phase) in the launch's error record; the other spinning threads see the record and leave too.
#include "collectives.h"
#include "nvtx_range.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "check.cuh"
#include "gemm_tc/wgmma_launch.cuh"

#ifdef CUDALAB_HAVE_NCCL
#include <nccl.h>
#endif

// The one check (check.cuh's CUDALAB_CHECK) for the helpers here, which return cudaError_t.
#define COLL_TRY(call) CUDALAB_CHECK(call, return cudalab_err_)

namespace {

enum Variant {
    V01_P2P = 0,
    V01_MEMCPY = 1,
    V02_RING = 2,
    V03_ONESHOT = 3,
    VNCCL_AR = 4,
    VNCCL_AG = 5,
    VNCCL_RS = 6,
    VTP = 7,
    VTP_OVERLAP = 8,
    V04_ONESHOT_SIGNAL = 9,
    V05_TWOSHOT = 10,
    V06_ONESHOT_LL = 11,
    VAUTO = 12,
    VCOUNT = 13
};
const char *const kNames[VCOUNT] = {"01_p2p_copy",     "01_memcpy_peer", "02_ring_allreduce",
                                    "03_oneshot_allreduce", "nccl_allreduce", "nccl_allgather",
                                    "nccl_reducescatter",   "tp_mlp",         "tp_mlp_overlap",
                                    "04_oneshot_signal",    "05_twoshot_allreduce", "06_oneshot_ll",
                                    "auto_allreduce"};
// The rungs whose epoch lives on the device (a CUDA graph can replay them): 04, 05 and 06.
bool device_epoch(int v) { return v == V04_ONESHOT_SIGNAL || v == V05_TWOSHOT || v == V06_ONESHOT_LL; }
bool needs_nccl(int v) { return v == VNCCL_AR || v == VNCCL_AG || v == VNCCL_RS; }
bool is_allreduce(int v) {
    return v == V02_RING || v == V03_ONESHOT || v == VNCCL_AR || v == V04_ONESHOT_SIGNAL || v == V05_TWOSHOT ||
           v == V06_ONESHOT_LL || v == VAUTO;
}

constexpr int kThreads = 512;
// The ring cuts each rank's segment into at most this many chunks (its flags: 2 x world x kCpsMax per
// rank); the one-shot barrier uses 2 x blocks x world of the same flags, so blocks <= kCpsMax.
constexpr int kCpsMax = 256;
constexpr int kMaxBlocksPerRank = 64;
constexpr long long kChunkBytesMax = 512 << 10;  // a chunk in flight per block: enough to fill a link
// The largest messages 04 (every rank's whole buffer lands in every rank's scratch) and 05 (one
// buffer's worth of scratch per rank) take; the scratch holds two of each (double buffering).
constexpr long long kOneshotMaxBytes = 2LL << 20;
constexpr long long kTwoshotMaxBytes = 64LL << 20;
// 06 sends each 8 bytes as a 16-byte line (the data and the call's epoch twice): its scratch holds
// W lines of twice the message, so its cap is half of 04's.
constexpr long long kLLMaxBytes = 1LL << 20;
constexpr int kSmallMaxWorld = 8;  // 04, 05 and 06 keep a store target per rank in registers

// The largest message (bytes per rank) a variant takes on a communicator sized for `in_bytes`.
long long variant_cap(int v, long long in_bytes) {
    if (v == V04_ONESHOT_SIGNAL) return std::min(in_bytes, kOneshotMaxBytes);
    if (v == V05_TWOSHOT) return std::min(in_bytes, kTwoshotMaxBytes);
    if (v == V06_ONESHOT_LL) return std::min(in_bytes, kLLMaxBytes);
    return in_bytes;
}
enum Phase { PH_RS = 0, PH_AG = 1, PH_START = 2, PH_END = 3, PH_NCCL = 4, PH_SIGNAL = 5, PH_GATHER = 6, PH_COUNT = 7 };
// Where a rank gave up waiting, by Phase: the messages and collectives_phase_name spell them from here.
const char *const kPhases[PH_COUNT] = {"reduce-scatter", "all-gather", "start barrier", "end barrier",
                                       "NCCL", "signal", "gather"};

struct RankPtrs {
    unsigned char *in, *out, *recv, *scratch;
    unsigned long long *flags;
};
struct ErrRec {
    unsigned int code;
    int rank, step, chunk, phase, peer;  // peer: the rank whose flag never came (-1: not known)
};
struct CollArgs {
    const RankPtrs *ranks;
    ErrRec *err;
    int world, rank, blocks_per_rank, dtype, stall_rank, direction, cps;
    long long n, base, seg_len, chunk, half, small_flags, ll_half;  // 06's lines start at 2 * half
    unsigned long long epoch, timeout_ns;
};

// ---- device: flags, the timer, bounded waits -----------------------------------------------------
__device__ __forceinline__ unsigned long long ld_acquire(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(unsigned long long *p, unsigned long long v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// A wait's deadline passed: the first thread of the launch to get here records where. Always false.
__device__ bool give_up(const CollArgs &a, int rank, int step, int chunk, int phase, int peer) {
    if (atomicCAS(&a.err->code, 0u, 1u) == 0u) {
        a.err->rank = rank;
        a.err->step = step;
        a.err->chunk = chunk;
        a.err->phase = phase;
        a.err->peer = peer;
        __threadfence();
    }
    return false;
}

// One thread waits until *f reaches the call's epoch. False when the deadline passed (the first such
// thread of the launch records where) or another thread of the launch already gave up.
__device__ bool spin_until(const CollArgs &a, const unsigned long long *f, int rank, int step, int chunk,
                           int phase, int peer = -1, unsigned long long target = 0) {
    if (!target) target = a.epoch;
    if (ld_acquire(f) >= target) return true;
    const unsigned long long t0 = now_ns();
    for (;;) {
        if (ld_acquire(f) >= target) return true;
        if (*(volatile unsigned int *)&a.err->code != 0u) return false;
        if (now_ns() - t0 > a.timeout_ns) return give_up(a, rank, step, chunk, phase, peer);
    }
}
// The whole block waits on one flag (thread 0 spins); the answer reaches every thread.
__device__ bool block_wait(const CollArgs &a, const unsigned long long *f, int rank, int step, int chunk, int phase,
                           int peer) {
    int ok = 1;
    if (threadIdx.x == 0) ok = spin_until(a, f, rank, step, chunk, phase, peer);
    return __syncthreads_and(ok) != 0;
}
// Every thread's stores of this step are done (the barrier), then one release store makes them
// visible, at system scope, before the flag.
__device__ void block_signal(unsigned long long *f, unsigned long long epoch) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        st_release(f, epoch);
    }
}

// ---- device: element arithmetic, 16 bytes at a time ------------------------------------------------
template <class T>
struct Elt;
template <>
struct Elt<float> {
    using Acc = float;
    __device__ static Acc up(float v) { return v; }
    __device__ static float down(Acc v) { return v; }
};
template <>
struct Elt<__nv_bfloat16> {
    using Acc = float;  // each add rounds once to bf16 (the ring's steps) or once at the end (one-shot)
    __device__ static Acc up(__nv_bfloat16 v) { return __bfloat162float(v); }
    __device__ static __nv_bfloat16 down(Acc v) { return __float2bfloat16_rn(v); }
};
template <>
struct Elt<int> {
    using Acc = unsigned int;  // wraps modulo 2^32 like numpy's int32 (signed overflow is undefined)
    __device__ static Acc up(int v) { return (unsigned int)v; }
    __device__ static int down(Acc v) { return (int)v; }
};

template <class T>
struct Pack {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};
// Loads of what another rank wrote in this launch bypass L1 (ld.cg): L1 is not coherent across SMs.
template <class T>
__device__ __forceinline__ Pack<T> ld_pack(const T *p) {
    uint4 u = __ldcg(reinterpret_cast<const uint4 *>(p));
    Pack<T> out;
    memcpy(&out, &u, 16);
    return out;
}
template <class T>
__device__ __forceinline__ void st_pack(T *p, const Pack<T> &v) {
    uint4 u;
    memcpy(&u, &v, 16);
    *reinterpret_cast<uint4 *>(p) = u;
}

// d1[i] (and d2[i] when given) = a[i] + b[i] (or a[i] alone when b is null) for i in [lo, hi), the
// block's threads striding 16 bytes each; lo is a multiple of the pack (16-byte aligned), the tail
// element by element.
template <class T>
__device__ void range_add(long long lo, long long hi, const T *a, const T *b, T *d1, T *d2) {
    using E = Elt<T>;
    constexpr int N = Pack<T>::N;
    const long long nv = (hi - lo) / N;
    for (long long v = threadIdx.x; v < nv; v += blockDim.x) {
        const long long i = lo + v * N;
        Pack<T> x = ld_pack(a + i);
        if (b) {
            const Pack<T> y = ld_pack(b + i);
#pragma unroll
            for (int k = 0; k < N; ++k) x.v[k] = E::down(E::up(x.v[k]) + E::up(y.v[k]));
        }
        st_pack(d1 + i, x);
        if (d2) st_pack(d2 + i, x);
    }
    for (long long i = lo + nv * N + threadIdx.x; i < hi; i += blockDim.x) {
        T x = __ldcg(a + i);
        if (b) x = E::down(E::up(x) + E::up(__ldcg(b + i)));
        d1[i] = x;
        if (d2) d2[i] = x;
    }
}

__device__ __forceinline__ int wrap(int i, int w) { return ((i % w) + w) % w; }

// ---- 02_ring_allreduce -----------------------------------------------------------------------------
// Chunk c of segment `seg`: [lo, hi) in elements (empty past n; both sides of a flag agree on it).
__device__ __forceinline__ void chunk_range(const CollArgs &a, int seg, int c, long long *lo, long long *hi) {
    const long long s0 = (long long)seg * a.seg_len;
    *lo = s0 + (long long)c * a.chunk;
    *hi = min(min(*lo + a.chunk, s0 + a.seg_len), a.n);
}

template <class T>
__device__ void ring_body(const CollArgs &a, int r, int b) {
    const int W = a.world;
    const RankPtrs me = a.ranks[r], right = a.ranks[(r + 1) % W];
    const T *in = reinterpret_cast<const T *>(me.in) + a.base;
    const T *recv = reinterpret_cast<const T *>(me.recv) + a.base;
    T *out = reinterpret_cast<T *>(me.out) + a.base;
    T *rrecv = reinterpret_cast<T *>(right.recv) + a.base;
    T *rout = reinterpret_cast<T *>(right.out) + a.base;
    const int ag = W * a.cps;  // the all-gather flags follow the reduce-scatter ones
    for (int c = b; c < a.cps; c += a.blocks_per_rank) {
        long long lo, hi;
        // Reduce-scatter: at step s, send segment r-s-1 (the partial sum received at step s-1 plus
        // this rank's input) to the right; after W-1 steps rank r holds segment r's full sum.
        for (int s = 0; s < W - 1; ++s) {
            const int seg = wrap(r - s - 1, W);
            chunk_range(a, seg, c, &lo, &hi);
            if (lo >= hi) continue;
            const int f = seg * a.cps + c;
            if (s > 0 && !block_wait(a, me.flags + f, r, s, c, PH_RS, wrap(r - 1, W))) return;
            range_add(lo, hi, in, s > 0 ? recv : (const T *)nullptr, rrecv, (T *)nullptr);
            block_signal(right.flags + f, a.epoch);
        }
        // Segment r: the last partial plus this rank's input is the answer; it goes to this rank's
        // output and, as the all-gather's first step, to the right neighbour's.
        chunk_range(a, r, c, &lo, &hi);
        if (lo < hi) {
            const int f = r * a.cps + c;
            if (W > 1 && !block_wait(a, me.flags + f, r, W - 1, c, PH_RS, wrap(r - 1, W))) return;
            range_add(lo, hi, in, W > 1 ? recv : (const T *)nullptr, out, W > 1 ? rout : (T *)nullptr);
            if (W > 1) block_signal(right.flags + ag + f, a.epoch);
        }
        // All-gather: segment r-t arrives from the left at step t and is passed on, except the last
        // one (r+1's own).
        for (int t = 1; t < W; ++t) {
            const int seg = wrap(r - t, W);
            chunk_range(a, seg, c, &lo, &hi);
            if (lo >= hi) continue;
            const int f = ag + seg * a.cps + c;
            if (!block_wait(a, me.flags + f, r, W - 1 + t, c, PH_AG, wrap(r - 1, W))) return;
            if (t < W - 1) {
                range_add(lo, hi, (const T *)out, (const T *)nullptr, rout, (T *)nullptr);
                block_signal(right.flags + f, a.epoch);
            }
        }
    }
}

__global__ void __launch_bounds__(kThreads) ring_allreduce_kernel(CollArgs a) {
    const int r = a.rank >= 0 ? a.rank : (int)(blockIdx.x / a.blocks_per_rank);
    const int b = a.rank >= 0 ? (int)blockIdx.x : (int)(blockIdx.x % a.blocks_per_rank);
#ifdef CUDALAB_FAULTS
    if (r == a.stall_rank) return;  // the fault build's stalled rank: it never sends
#endif
    if (a.dtype == 0) ring_body<float>(a, r, b);
    else if (a.dtype == 1) ring_body<__nv_bfloat16>(a, r, b);
    else ring_body<int>(a, r, b);
}

// ---- 03_oneshot_allreduce --------------------------------------------------------------------------
// Barrier `which` (0 start, 1 end) between block b of every rank: raise this rank's flag in each
// peer's memory, then wait for every peer's flag in this rank's memory. Flags are per (barrier, block,
// source rank) and hold the epoch.
__device__ bool oneshot_barrier(const CollArgs &a, int r, int b, int which) {
    const int W = a.world, B = a.blocks_per_rank;
    const long long slot = ((long long)which * B + b) * W;
    __syncthreads();
    if (which == 1) __threadfence_system();
    for (int p = threadIdx.x; p < W; p += blockDim.x) st_release(a.ranks[p].flags + slot + r, a.epoch);
    int ok = 1;
    for (int p = threadIdx.x; p < W && ok; p += blockDim.x)
        ok = spin_until(a, a.ranks[r].flags + slot + p, r, which, b, which == 0 ? PH_START : PH_END, p);
    return __syncthreads_and(ok) != 0;
}

template <class T>
__device__ void oneshot_body(const CollArgs &a, int r, int b) {
    using E = Elt<T>;
    constexpr int N = Pack<T>::N;
    const int W = a.world, B = a.blocks_per_rank;
    if (!oneshot_barrier(a, r, b, 0)) return;
    T *out = reinterpret_cast<T *>(a.ranks[r].out) + a.base;
    const long long nv = a.n / N;
    for (long long v = (long long)b * blockDim.x + threadIdx.x; v < nv; v += (long long)B * blockDim.x) {
        typename E::Acc acc[N];
#pragma unroll
        for (int k = 0; k < N; ++k) acc[k] = 0;
        for (int p = 0; p < W; ++p) {  // rank order: the same sum, bit for bit, on every rank
            const Pack<T> x = ld_pack(reinterpret_cast<const T *>(a.ranks[p].in) + a.base + v * N);
#pragma unroll
            for (int k = 0; k < N; ++k) acc[k] += E::up(x.v[k]);
        }
        Pack<T> o;
#pragma unroll
        for (int k = 0; k < N; ++k) o.v[k] = E::down(acc[k]);
        st_pack(out + v * N, o);
    }
    if (b == 0) {
        for (long long i = nv * N + threadIdx.x; i < a.n; i += blockDim.x) {
            typename E::Acc acc = 0;
            for (int p = 0; p < W; ++p) acc += E::up(__ldcg(reinterpret_cast<const T *>(a.ranks[p].in) + a.base + i));
            out[i] = E::down(acc);
        }
    }
    oneshot_barrier(a, r, b, 1);
}

__global__ void __launch_bounds__(kThreads) oneshot_allreduce_kernel(CollArgs a) {
    const int r = a.rank >= 0 ? a.rank : (int)(blockIdx.x / a.blocks_per_rank);
    const int b = a.rank >= 0 ? (int)blockIdx.x : (int)(blockIdx.x % a.blocks_per_rank);
#ifdef CUDALAB_FAULTS
    if (r == a.stall_rank) return;
#endif
    if (a.dtype == 0) oneshot_body<float>(a, r, b);
    else if (a.dtype == 1) oneshot_body<__nv_bfloat16>(a, r, b);
    else oneshot_body<int>(a, r, b);
}

// ---- 04_oneshot_signal and 05_twoshot_allreduce ---------------------------------------------------
// Push, not pull: a rank stores its data into its peers' scratch (a store over NVLink does not wait
// for an answer; a load does), raises ONE flag per peer (st.release.sys of the call's epoch, in the
// peer's memory) and spins on its own, local flags. No barrier kernel and no end barrier: the scratch
// is double-buffered by the epoch's parity. A rank writes parity P at call k+2 only after it saw every
// peer's flag of call k+1, which a peer raises only once its call k (the last reader of parity P) has
// finished, in stream order. The epoch is a per-block counter in the rank's own flag memory, read at
// the start and written back at the end, so it needs no host (a CUDA graph replays the same launch)
// and never needs a reset; every call launches the communicator's fixed number of blocks, so the
// counters of one rank's blocks stay equal and the parity is the same for the whole call.
// Flag layout after the ring's and 03's (small_flags): [signal|gather][block][source rank], then
// [block] epoch counters.
__device__ __forceinline__ unsigned long long *sig_flag(const CollArgs &a, int q, int which, int b, int src) {
    return a.ranks[q].flags + a.small_flags + ((long long)which * kMaxBlocksPerRank + b) * a.world + src;
}
__device__ __forceinline__ unsigned long long *epoch_counter(const CollArgs &a, int r, int b) {
    return a.ranks[r].flags + a.small_flags + 2LL * kMaxBlocksPerRank * a.world + b;
}
// The block's epoch: this call's number for block b of rank r (the same on every rank).
__device__ unsigned long long block_epoch(const CollArgs &a, int r, int b) {
    __shared__ unsigned long long e;
    if (threadIdx.x == 0) e = *(volatile unsigned long long *)epoch_counter(a, r, b) + 1;
    __syncthreads();
    return e;
}
// Every thread's stores of this step are done; then thread q raises rank q's flag `which` (source r).
__device__ void signal_all(const CollArgs &a, int r, int b, int which, unsigned long long e) {
    __syncthreads();
    for (int q = threadIdx.x; q < a.world; q += blockDim.x) {
        __threadfence_system();
        st_release(sig_flag(a, q, which, b, r), e);
    }
}
// Thread p waits for source p's flag `which` in rank r's own memory; the verdict reaches every thread.
__device__ bool wait_all(const CollArgs &a, int r, int b, int which, unsigned long long e) {
    int ok = 1;
    for (int p = threadIdx.x; p < a.world && ok; p += blockDim.x)
        ok = spin_until(a, sig_flag(a, r, which, b, p), r, which, b, which ? PH_GATHER : PH_SIGNAL, p, e);
    return __syncthreads_and(ok) != 0;
}
__device__ __forceinline__ void end_epoch(const CollArgs &a, int r, int b, unsigned long long e) {
    __syncthreads();
    if (threadIdx.x == 0) *(volatile unsigned long long *)epoch_counter(a, r, b) = e;
}

// Elements [lo, hi) of a range whose lo is a whole pack: block b's share is every B-th pack, and
// block 0 takes the tail past the last whole pack. f(i, k) handles k elements from i (k = pack or 1).
template <class T, class F>
__device__ __forceinline__ void block_share(long long lo, long long hi, int b, int B, F f) {
    constexpr int N = Pack<T>::N;
    const long long nv = (hi - lo) / N;
    for (long long v = (long long)b * blockDim.x + threadIdx.x; v < nv; v += (long long)B * blockDim.x)
        f(lo + v * N, N);
    if (b == 0)
        for (long long i = lo + nv * N + threadIdx.x; i < hi; i += blockDim.x) f(i, 1);
}
template <class T>
__device__ __forceinline__ void copy_elems(T *dst, const T *src, int k) {
    if (k == Pack<T>::N) st_pack(dst, ld_pack(src));
    else *dst = __ldcg(src);
}
// The sum of base[p * stride + 0..k) over p = 0..W-1, in rank order (every rank gets the same bits),
// stored at dst[q][0..k) for q < D.
template <class T>
__device__ __forceinline__ void sum_elems(T *const *dst, int D, long long i, const T *base, long long stride, int W,
                                          int k) {
    using E = Elt<T>;
    constexpr int N = Pack<T>::N;
    if (k == N) {
        typename E::Acc acc[N];
#pragma unroll
        for (int j = 0; j < N; ++j) acc[j] = 0;
        for (int p = 0; p < W; ++p) {
            const Pack<T> x = ld_pack(base + i + p * stride);
#pragma unroll
            for (int j = 0; j < N; ++j) acc[j] += E::up(x.v[j]);
        }
        Pack<T> o;
#pragma unroll
        for (int j = 0; j < N; ++j) o.v[j] = E::down(acc[j]);
        for (int q = 0; q < D; ++q) st_pack(dst[q] + i, o);
    } else {
        typename E::Acc acc = 0;
        for (int p = 0; p < W; ++p) acc += E::up(__ldcg(base + i + p * stride));
        for (int q = 0; q < D; ++q) dst[q][i] = E::down(acc);
    }
}
__device__ __forceinline__ long long round_pack(long long n, int N) { return (n + N - 1) / N * N; }

// 04: rank r's input goes to slot r of every rank's scratch; then each rank sums its W local slots.
template <class T>
__device__ void oneshot_signal_body(const CollArgs &a, int r, int b, unsigned long long e) {
    const int W = a.world, B = a.blocks_per_rank;
    const long long stride = round_pack(a.n, Pack<T>::N);
    const long long par = (long long)(e & 1) * a.half;
    const T *in = reinterpret_cast<const T *>(a.ranks[r].in);
    block_share<T>(0, a.n, b, B, [&](long long i, int k) {
        for (int q = 0; q < W; ++q)
            copy_elems(reinterpret_cast<T *>(a.ranks[q].scratch + par) + r * stride + i, in + i, k);
    });
    signal_all(a, r, b, 0, e);
    if (!wait_all(a, r, b, 0, e)) return;
    const T *mine = reinterpret_cast<const T *>(a.ranks[r].scratch + par);
    T *out = reinterpret_cast<T *>(a.ranks[r].out);
    block_share<T>(0, a.n, b, B, [&](long long i, int k) { sum_elems(&out, 1, i, mine, stride, W, k); });
}

// 05: chunk j of every rank's input goes to slot (source) of rank j's scratch (reduce-scatter's
// traffic); rank j sums chunk j and stores the sum into chunk j of every rank's output (all-gather's).
template <class T>
__device__ void twoshot_body(const CollArgs &a, int r, int b, unsigned long long e) {
    const int W = a.world, B = a.blocks_per_rank;
    const long long cs = round_pack((a.n + W - 1) / W, Pack<T>::N);
    const long long par = (long long)(e & 1) * a.half;
    const T *in = reinterpret_cast<const T *>(a.ranks[r].in);
    for (int j = 0; j < W; ++j) {
        const long long lo = min(a.n, j * cs), hi = min(a.n, lo + cs);
        T *dst = reinterpret_cast<T *>(a.ranks[j].scratch + par) + r * cs - lo;
        block_share<T>(lo, hi, b, B, [&](long long i, int k) { copy_elems(dst + i, in + i, k); });
    }
    signal_all(a, r, b, 0, e);
    if (!wait_all(a, r, b, 0, e)) return;
    const long long lo = min(a.n, r * cs), hi = min(a.n, lo + cs);
    const T *mine = reinterpret_cast<const T *>(a.ranks[r].scratch + par) - lo;
    // Each rank's list starts with itself and goes round, so the ranks' stores spread over the links.
    T *outs[kSmallMaxWorld];
    for (int q0 = 0; q0 < W; ++q0) outs[q0] = reinterpret_cast<T *>(a.ranks[(r + q0) % W].out);
    block_share<T>(lo, hi, b, B, [&](long long i, int k) { sum_elems(outs, W, i, mine, cs, W, k); });
    signal_all(a, r, b, 1, e);
    wait_all(a, r, b, 1, e);
}

// 06: 04's traffic in the shape of NCCL's low-latency (LL) protocol. Each 16-byte line {w0, e, w1, e}
// carries two 4-byte words of the message and the call's epoch (low 32 bits) twice, written by one
// 16-byte volatile store: a reader that finds the epoch in both 8-byte halves has both words (each
// aligned 8-byte half arrives whole, as NCCL's LL relies on). So no fence and no flag of its own: one
// trip over the link where 04 makes two (the data, then after a system fence the flag). The cost is
// twice the bytes on the wire and a spin per line: for small messages, where the trip is the time.
// Its lines have a region of the scratch of their own (comm_alloc), slots and parity as 04's: a stale
// line holds an earlier call's epoch, or 0 when never written, never the one a reader waits for.
struct alignas(16) LLLine {
    unsigned int w0, f0, w1, f1;
};
__device__ __forceinline__ void st_ll(LLLine *p, unsigned int w0, unsigned int w1, unsigned int f) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w0), "r"(f), "r"(w1), "r"(f)
                 : "memory");
}
__device__ __forceinline__ bool ld_ll(const LLLine *p, unsigned int f, unsigned int &w0, unsigned int &w1) {
    unsigned int x0, f0, x1, f1;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(x0), "=r"(f0), "=r"(x1), "=r"(f1)
                 : "l"(p)
                 : "memory");
    w0 = x0;
    w1 = x1;
    return f0 == f && f1 == f;
}
// One thread waits for line p to carry epoch f (peer: the rank that writes it), within the deadline.
__device__ bool spin_ll(const CollArgs &a, const LLLine *p, unsigned int f, int rank, int b, int peer,
                        unsigned int &w0, unsigned int &w1) {
    if (ld_ll(p, f, w0, w1)) return true;
    const unsigned long long t0 = now_ns();
    for (;;) {
        if (ld_ll(p, f, w0, w1)) return true;
        if (*(volatile unsigned int *)&a.err->code != 0u) return false;
        if (now_ns() - t0 > a.timeout_ns) return give_up(a, rank, 0, b, PH_SIGNAL, peer);
    }
}
// Bytes [8 i, 8 i + 8) of the message as two words; past its end (a bf16 message of odd length, or
// a last line of 4 bytes), zeros, never a read past the buffer.
__device__ __forceinline__ void message_words(const unsigned char *in, long long nb, long long i, unsigned int &w0,
                                              unsigned int &w1) {
    if (8 * i + 8 <= nb) {
        const uint2 u = *reinterpret_cast<const uint2 *>(in + 8 * i);
        w0 = u.x;
        w1 = u.y;
        return;
    }
    unsigned char b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (long long j = 8 * i; j < nb; ++j) b[j - 8 * i] = in[j];
    memcpy(&w0, b, 4);
    memcpy(&w1, b + 4, 4);
}
// Returns the call's epoch (block_epoch's), which it reads itself: see the first line's load below.
template <class T>
__device__ unsigned long long oneshot_ll_body(const CollArgs &a, int r, int b) {
    using E = Elt<T>;
    constexpr int K = 8 / (int)sizeof(T);  // elements in a line
    const int W = a.world, B = a.blocks_per_rank;
    const long long nb = a.n * (long long)sizeof(T), lines = (nb + 7) / 8;
    // Each block takes a contiguous run of lines, a multiple of 32 so that a warp's stores stay one
    // run. Striding whole blocks over the message would leave most blocks idle at these sizes (a
    // 32 KiB message is 4096 lines: 8 of 32 blocks of 512 threads), and the stores that cross the
    // link leave at a rate per SM, so the busy SMs would bound the call.
    const long long per = ((lines + B - 1) / B + 31) / 32 * 32;
    const long long lo = (long long)b * per, hi = min(lines, lo + per);
    // The thread's first line is loaded before the epoch: it does not depend on it, so the two loads
    // are in flight together and the first stores leave one load latency sooner (at <= 64 KiB a
    // thread has no second line, so this is the whole send).
    unsigned int w0 = 0, w1 = 0;
    if (lo + threadIdx.x < hi) message_words(a.ranks[r].in, nb, lo + threadIdx.x, w0, w1);
    const unsigned long long e = block_epoch(a, r, b);
    const long long par = 2 * a.half + (long long)(e & 1) * a.ll_half;
    const unsigned int f = (unsigned int)e;
    // Send: line i of this rank's message into slot r of every rank's scratch (its own included).
    for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        if (i != lo + threadIdx.x) message_words(a.ranks[r].in, nb, i, w0, w1);
        for (int q = 0; q < W; ++q)
            st_ll(reinterpret_cast<LLLine *>(a.ranks[q].scratch + par) + (long long)r * lines + i, w0, w1, f);
    }
    // Receive: the same lines of every slot, summed in rank order (every rank gets the same bits).
    const LLLine *mine = reinterpret_cast<const LLLine *>(a.ranks[r].scratch + par);
    unsigned char *out = a.ranks[r].out;
    for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        typename E::Acc acc[K];
#pragma unroll
        for (int j = 0; j < K; ++j) acc[j] = 0;
        for (int p = 0; p < W; ++p) {
            unsigned int w[2];
            if (!spin_ll(a, mine + (long long)p * lines + i, f, r, b, p, w[0], w[1])) return e;
            T x[K];
            memcpy(x, w, 8);
#pragma unroll
            for (int j = 0; j < K; ++j) acc[j] += E::up(x[j]);
        }
        T o[K];
#pragma unroll
        for (int j = 0; j < K; ++j) o[j] = E::down(acc[j]);
        const long long valid = min(8LL, nb - 8 * i);
        if (valid == 8) {
            uint2 u;  // o is only as aligned as T: assemble the 8-byte store in a register
            memcpy(&u, o, 8);
            *reinterpret_cast<uint2 *>(out + 8 * i) = u;
        } else {
            memcpy(out + 8 * i, o, (size_t)valid);
        }
    }
    return e;
}

// mode: 0 04's one-shot, 1 05's two-shot, 2 06's LL one-shot.
__global__ void __launch_bounds__(kThreads) small_allreduce_kernel(CollArgs a, int mode) {
    const int r = a.rank >= 0 ? a.rank : (int)(blockIdx.x / a.blocks_per_rank);
    const int b = a.rank >= 0 ? (int)blockIdx.x : (int)(blockIdx.x % a.blocks_per_rank);
#ifdef CUDALAB_FAULTS
    // The stalled rank sends nothing, but keeps its epoch in step (the next call works again).
    if (r == a.stall_rank) {
        end_epoch(a, r, b, block_epoch(a, r, b));
        return;
    }
#endif
    if (mode == 2) {  // 06 reads its epoch itself, beside its first loads of the message (oneshot_ll_body says why)
        end_epoch(a, r, b,
                  a.dtype == 0   ? oneshot_ll_body<float>(a, r, b)
                  : a.dtype == 1 ? oneshot_ll_body<__nv_bfloat16>(a, r, b)
                                 : oneshot_ll_body<int>(a, r, b));
        return;
    }
    const unsigned long long e = block_epoch(a, r, b);
    if (mode == 1) {
        if (a.dtype == 0) twoshot_body<float>(a, r, b, e);
        else if (a.dtype == 1) twoshot_body<__nv_bfloat16>(a, r, b, e);
        else twoshot_body<int>(a, r, b, e);
    } else {
        if (a.dtype == 0) oneshot_signal_body<float>(a, r, b, e);
        else if (a.dtype == 1) oneshot_signal_body<__nv_bfloat16>(a, r, b, e);
        else oneshot_signal_body<int>(a, r, b, e);
    }
    end_epoch(a, r, b, e);
}

// ---- 01_p2p_copy -------------------------------------------------------------------------------------
// Rank r's output = the other rank's input, read across the link. direction: bit 0 rank 1 reads rank 0
// ("0to1"), bit 1 rank 0 reads rank 1 ("1to0"); 3 both at once. Bytes, 16 at a time.
__global__ void __launch_bounds__(kThreads) p2p_copy_kernel(CollArgs a) {
    const int r = a.rank >= 0 ? a.rank : (int)(blockIdx.x / a.blocks_per_rank);
    const int b = a.rank >= 0 ? (int)blockIdx.x : (int)(blockIdx.x % a.blocks_per_rank);
    if (!(a.direction & (r == 1 ? 1 : 2))) return;
    const unsigned char *src = a.ranks[1 - r].in;
    unsigned char *dst = a.ranks[r].out;
    const long long bytes = a.n, nv = bytes / 16, B = a.blocks_per_rank;
    for (long long v = (long long)b * blockDim.x + threadIdx.x; v < nv; v += B * blockDim.x)
        reinterpret_cast<uint4 *>(dst)[v] = __ldcg(reinterpret_cast<const uint4 *>(src) + v);
    if (b == 0)
        for (long long i = nv * 16 + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
}

// ---- the tensor-parallel block's own kernel ---------------------------------------------------------
// g = gelu(h) rounded to bf16 (tanh form, as torch's approximate="tanh").
__global__ void gelu_to_bf16_kernel(const float *__restrict__ h, cudalab_bf16 *__restrict__ g, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float x = h[i];
        const float y = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
        g[i] = __bfloat16_as_ushort(__float2bfloat16_rn(y));
    }
}
// copy_engine's adds: part p of a token block's y, summed in rank order (0 + y_0 + y_1 + ...), every
// value once, so each rank's copy of the part is the same bits. `own` is this rank's partial, slot q of
// `slots` (stride `slot` floats) rank q's, copied in by the copy engines. Few blocks run it (the SMs the
// GEMMs leave), so each thread keeps kReduceUnroll 16-byte loads of every rank in flight: an SM's
// share of HBM bandwidth needs tens of kilobytes in flight, not one load a thread.
constexpr int kReduceThreads = 1024, kReduceUnroll = 4;
__global__ void __launch_bounds__(kReduceThreads) tp_reduce_part_kernel(float *__restrict__ out,
                                                                        const float *__restrict__ own,
                                                                        const float *__restrict__ slots, long long slot,
                                                                        int W, int self, long long n) {
    const long long n4 = n / 4, stride = (long long)gridDim.x * blockDim.x;
    const float4 *own4 = reinterpret_cast<const float4 *>(own);
    float4 *out4 = reinterpret_cast<float4 *>(out);
    for (long long base = (long long)blockIdx.x * blockDim.x + threadIdx.x; base < n4; base += stride * kReduceUnroll) {
        float4 acc[kReduceUnroll];
#pragma unroll
        for (int u = 0; u < kReduceUnroll; ++u) acc[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int q = 0; q < W; ++q) {
            const float4 *src = q == self ? own4 : reinterpret_cast<const float4 *>(slots + (long long)q * slot);
            float4 v[kReduceUnroll];
#pragma unroll
            for (int u = 0; u < kReduceUnroll; ++u) {
                const long long i = base + u * stride;
                v[u] = i < n4 ? __ldcs(src + i) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int u = 0; u < kReduceUnroll; ++u) {
                acc[u].x += v[u].x;
                acc[u].y += v[u].y;
                acc[u].z += v[u].z;
                acc[u].w += v[u].w;
            }
        }
#pragma unroll
        for (int u = 0; u < kReduceUnroll; ++u)
            if (base + u * stride < n4) out4[base + u * stride] = acc[u];
    }
    if (blockIdx.x == 0)  // the last n % 4 values
        for (long long i = n4 * 4 + threadIdx.x; i < n; i += blockDim.x) {
            float acc = 0.f;
            for (int q = 0; q < W; ++q) acc += q == self ? own[i] : slots[(long long)q * slot + i];
            out[i] = acc;
        }
}

// Reproducible values in [-scale, scale), bf16: the timed block's weights and inputs.
__global__ void fill_bf16_kernel(cudalab_bf16 *p, long long n, unsigned long long seed, float scale) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned long long z = (unsigned long long)i * 0x9E3779B97F4A7C15ull + seed;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const float u = (float)(z >> 40) / (float)(1ull << 24) * 2.0f - 1.0f;
        p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(u * scale));
    }
}

// ================================================================================================
// Host side: the communicator
// ================================================================================================
int elt_size(int dtype) { return dtype == 1 ? 2 : 4; }

// The GEMM the tensor-parallel block runs: the fastest that takes each product (wgmma, else 02), or
// one of them by name. THE table: collectives_tp_gemm_name reads it, the executable's --gemm and
// the Python side's `gemm` take these names.
enum TpGemm { TP_AUTO = 0, TP_MMA_SYNC = 1, TP_WGMMA = 2, TP_GEMM_COUNT = 3 };
const char *const kTpGemms[TP_GEMM_COUNT] = {"auto", "mma_sync", "wgmma"};
// The all-reduce the block runs: two of the lab's kernels by their variant names, or "copy_engine"
// (tp_copy_allreduce: the copy engines move the bytes, a few SMs add). THE table of the block's
// all-reduces: collectives_tp_allreduce_name reads it, the executable's --allreduce and the Python
// side's ar_variant take these names.
enum TpAllreduce { TP_AR_RING = 0, TP_AR_ONESHOT = 1, TP_AR_COPY = 2, TP_AR_COUNT = 3 };
const char *const kTpAllreduces[TP_AR_COUNT] = {"02_ring_allreduce", "03_oneshot_allreduce", "copy_engine"};

struct TpBuffers {
    std::vector<cudalab_bf16 *> x, w1, w2, g;
    std::vector<float *> h;
    // The overlapped form's GEMM streams (one per launch), at the device's highest priority, and the
    // event that orders them after the communicator's streams (tp_forward says why).
    std::vector<cudaStream_t> gemm;
    std::vector<cudaEvent_t> ev;
    // copy_engine only (tp_copy_allreduce): each rank's slots (world x slot floats: slot q holds rank
    // q's copy of this rank's part), a copy stream per (rank, peer) pair (index r * world + p, on rank r's
    // device: the copies rank r pushes to p), a stream per rank for its adds, and the events that
    // order them: y written (per launch), part sent (per pair), part reduced (per rank), part gathered (per pair).
    std::vector<float *> slots;
    long long slot = 0;
    std::vector<cudaStream_t> copy, add;
    std::vector<cudaEvent_t> ev_y, ev_sent, ev_reduced, ev_gathered;
};

struct Comm {
    int world = 0, use_devices = 0, blocks = 1;
    bool blocks_given = false;  // blocks named by the caller (else the default): tp_split keeps them
    // One process per rank: this process's rank (its buffers are its own; the peers' are mapped
    // through CUDA IPC), -1 when one process holds every rank.
    int self = -1;
    long long in_bytes = 0, out_bytes = 0, flag_count = 0, scratch_bytes = 0, small_flags = 0, ll_bytes = 0;
    unsigned long long timeout_ns = 0, epoch = 0;
    std::vector<int> dev;  // each rank's device (virtual ranks: all the same; one process per rank: its own)
    std::vector<unsigned char *> in, out, recv, scratch;
    std::vector<unsigned long long *> flags;
    std::vector<char> mapped;  // 1 where the rank's buffers are a peer process's, opened by handle
    int *sync_buf = nullptr;   // one process per rank: the barrier's NCCL all-reduce operand
    std::vector<RankPtrs *> table;  // the rank table, one copy on each launching device
    std::vector<ErrRec *> err;      // one error record per launch (virtual: 1, devices: world)
    std::vector<cudaStream_t> stream, stream2;
    std::vector<cudaEvent_t> ev_fork, ev_done;
    ErrRec last{};
    int launches() const { return use_devices && self < 0 ? world : 1; }
    // The rank that launch l serves: -1 for the one launch of every virtual rank.
    int launch_rank(int l) const { return self >= 0 ? self : use_devices ? l : -1; }
#ifdef CUDALAB_HAVE_NCCL
    std::vector<ncclComm_t> nccl;
#endif
};

std::vector<Comm *> g_comms;
std::string g_message;  // the last failure in words, for collectives_last_message

Comm *get(int h) { return (h >= 0 && h < (int)g_comms.size()) ? g_comms[h] : nullptr; }

// Kernel properties that bound the virtual world: every block of one cooperative launch must be
// resident at once, so world x blocks_per_rank <= SMs x (blocks per SM of the tightest kernel).
cudaError_t resident_blocks(int *out) {
    int dev = 0, sms = 0, coop = 0;
    COLL_TRY(cudaGetDevice(&dev));
    COLL_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    COLL_TRY(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop) return cudaErrorNotSupported;
    int per_sm = 1 << 30, k = 0;
    const void *kernels[] = {(const void *)ring_allreduce_kernel, (const void *)oneshot_allreduce_kernel,
                             (const void *)p2p_copy_kernel, (const void *)small_allreduce_kernel};
    for (const void *f : kernels) {
        COLL_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&k, f, kThreads, 0));
        per_sm = std::min(per_sm, k);
    }
    *out = per_sm * sms;
    return cudaSuccess;
}

void free_comm(Comm *c) {
    if (!c) return;
#ifdef CUDALAB_HAVE_NCCL
    for (ncclComm_t n : c->nccl)
        if (n) (void)ncclCommDestroy(n);
#endif
    for (int r = 0; r < (int)c->in.size(); ++r) {
        (void)cudaSetDevice(c->dev[r]);
        const bool peer = r < (int)c->mapped.size() && c->mapped[r];
        for (void *p : {(void *)c->in[r], (void *)c->out[r], (void *)c->recv[r], (void *)c->scratch[r],
                        (void *)c->flags[r]})
            if (p) (void)(peer ? cudaIpcCloseMemHandle(p) : cudaFree(p));
    }
    if (c->sync_buf) (void)cudaFree(c->sync_buf);
    for (int l = 0; l < (int)c->table.size(); ++l) {
        (void)cudaSetDevice(c->dev[l]);
        if (c->table[l]) (void)cudaFree(c->table[l]);
        if (c->err[l]) (void)cudaFree(c->err[l]);
        if (c->stream[l]) (void)cudaStreamDestroy(c->stream[l]);
        if (c->stream2[l]) (void)cudaStreamDestroy(c->stream2[l]);
        if (c->ev_fork[l]) (void)cudaEventDestroy(c->ev_fork[l]);
        if (c->ev_done[l]) (void)cudaEventDestroy(c->ev_done[l]);
    }
    if (!c->dev.empty()) (void)cudaSetDevice(c->dev[0]);
    delete c;
}

// Where a launch of rank `l` (or the one virtual launch) runs.
int launch_device(const Comm &c, int l) { return c.dev[l]; }

// Host-side work on a communicator's buffers (create's zeroing, upload, poison, download, the error
// records, the tensor-parallel block's weights) goes on the stream that the rank's kernels run on, and
// is waited for there. The communicator's streams are non-blocking: they never wait for the legacy
// default stream, where a plain cudaMemset or cudaMemcpy goes. Both of those may return before the
// device has done them (a memset of device memory always; a copy from pageable memory once the data is
// staged), so on the default stream a poison memset could land AFTER the kernel wrote its output, and
// an upload or a flag reset after the kernel read it: wrong answers with no error, seen whenever other
// work (another process's kernels, time-sliced on the same GPU) delays the default stream's queue.
cudaStream_t rank_stream(const Comm &c, int r) { return c.stream[c.launches() > 1 ? r : 0]; }

cudaError_t h2d(const Comm &c, int r, void *dst, const void *src, size_t bytes) {
    COLL_TRY(cudaSetDevice(c.dev[r]));
    COLL_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, rank_stream(c, r)));
    COLL_TRY(cudaStreamSynchronize(rank_stream(c, r)));  // the caller's pageable source may go now
    return cudaSuccess;
}
cudaError_t d2h(const Comm &c, int r, void *dst, const void *src, size_t bytes) {
    COLL_TRY(cudaSetDevice(c.dev[r]));
    COLL_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, rank_stream(c, r)));
    COLL_TRY(cudaStreamSynchronize(rank_stream(c, r)));
    return cudaSuccess;
}
cudaError_t fill(const Comm &c, int r, void *dst, int byte, size_t bytes) {
    COLL_TRY(cudaSetDevice(c.dev[r]));
    COLL_TRY(cudaMemsetAsync(dst, byte, bytes, rank_stream(c, r)));
    COLL_TRY(cudaStreamSynchronize(rank_stream(c, r)));
    return cudaSuccess;
}
// Every buffer of a communicator starts defined (initcheck) and at 0: the flags' memory may be a
// freed communicator's, holding its epochs, so the reset is done here, before any launch.
template <class T>
cudaError_t alloc_zeroed(const Comm &c, int r, T **p, size_t bytes) {
    COLL_TRY(cudaSetDevice(c.dev[r]));
    COLL_TRY(cudaMalloc(p, bytes));
    return fill(c, r, *p, 0, bytes);
}
// Sizes each per-launch or per-rank array to n, every entry null: what destroy frees is what was made.
template <class... V>
void size_null(int n, V &...vectors) {
    (vectors.assign(n, nullptr), ...);
}

cudaError_t check_records(Comm &c) {
    for (int l = 0; l < c.launches(); ++l) {
        ErrRec e{};
        COLL_TRY(d2h(c, l, &e, c.err[l], sizeof e));
        if (e.code) {
            c.last = e;
            char buf[256];
            if (e.peer >= 0)
                snprintf(buf, sizeof buf,
                         "rank %d gave up waiting at %s step %d (chunk or block %d): rank %d's flag never came "
                         "within the deadline",
                         e.rank, kPhases[e.phase >= 0 && e.phase < PH_COUNT ? e.phase : 0], e.step, e.chunk, e.peer);
            else
                snprintf(buf, sizeof buf,
                         "rank %d gave up waiting at %s step %d (chunk or block %d): a peer never reached that "
                         "step within the deadline",
                         e.rank, kPhases[e.phase >= 0 && e.phase < PH_COUNT ? e.phase : 0], e.step, e.chunk);
            g_message = buf;
            // Clear the records so that the communicator can be used (or destroyed) afterwards.
            for (int m = 0; m < c.launches(); ++m) COLL_TRY(fill(c, m, c.err[m], 0, sizeof(ErrRec)));
            COLL_TRY(cudaSetDevice(c.dev[0]));
            return cudaErrorTimeout;
        }
    }
    COLL_TRY(cudaSetDevice(c.dev[0]));
    return cudaSuccess;
}

cudaError_t sync_all(Comm &c) {
    for (int l = 0; l < c.launches(); ++l) {
        COLL_TRY(cudaSetDevice(launch_device(c, l)));
        COLL_TRY(cudaStreamSynchronize(c.stream[l]));
        COLL_TRY(cudaStreamSynchronize(c.stream2[l]));
    }
    COLL_TRY(cudaSetDevice(c.dev[0]));
    return cudaSuccess;
}

// Ring geometry: segments of ceil(n / world) elements rounded up to whole 16-byte packs, chunks of at
// most kChunkBytesMax bytes, at least one chunk per block when there is data for it, at most kCpsMax.
void ring_geometry(const Comm &c, int dtype, long long n, CollArgs *a) {
    const long long pack = 16 / elt_size(dtype);
    long long seg = (n + c.world - 1) / c.world;
    seg = std::max(pack, (seg + pack - 1) / pack * pack);
    long long chunk = (seg + c.blocks - 1) / c.blocks;
    chunk = std::min(chunk, kChunkBytesMax / elt_size(dtype));
    chunk = std::max(chunk, (seg + kCpsMax - 1) / kCpsMax);
    chunk = std::max(pack, (chunk + pack - 1) / pack * pack);
    a->seg_len = seg;
    a->chunk = chunk;
    a->cps = (int)((seg + chunk - 1) / chunk);
}

// The lab kernels: each rank's launch on streams[l] (virtual: one launch on streams[0]).
cudaError_t enqueue_lab(Comm &c, int variant, int dtype, long long n, long long base, int stall_rank, int direction,
                        const std::vector<cudaStream_t> &streams) {
    CollArgs a{};
    a.world = c.world;
    a.blocks_per_rank = c.blocks;
    a.dtype = dtype;
    a.stall_rank = stall_rank;
    a.direction = direction;
    a.n = n;
    a.base = base;
    a.epoch = ++c.epoch;
    a.timeout_ns = c.timeout_ns;
    a.half = (c.scratch_bytes - c.ll_bytes) / 2;
    a.ll_half = c.ll_bytes / 2;
    a.small_flags = c.small_flags;
    const bool small = device_epoch(variant);
    int mode = variant == V05_TWOSHOT ? 1 : variant == V06_ONESHOT_LL ? 2 : 0;
    const void *kernel = variant == V02_RING      ? (const void *)ring_allreduce_kernel
                         : variant == V03_ONESHOT ? (const void *)oneshot_allreduce_kernel
                         : small                  ? (const void *)small_allreduce_kernel
                                                  : (const void *)p2p_copy_kernel;
    if (variant == V02_RING) ring_geometry(c, dtype, n, &a);
    if (variant == V01_P2P) a.n = n * elt_size(dtype);  // the copy counts bytes
    for (int l = 0; l < c.launches(); ++l) {
        COLL_TRY(cudaSetDevice(launch_device(c, l)));
        a.rank = c.launch_rank(l);
        a.ranks = c.table[l];
        a.err = c.err[l];
        void *args[] = {&a, &mode};
        const bool one_gpu = a.rank < 0;
        const unsigned grid = (unsigned)(one_gpu ? c.blocks * c.world : c.blocks);
        // 04 and 05 wait only on blocks of other GPUs when each rank has its own, so a plain launch
        // (cheaper to start) does; virtual ranks wait on blocks of the same launch: cooperative.
        if (small && !one_gpu) COLL_TRY(cudaLaunchKernel(kernel, dim3(grid), dim3(kThreads), args, 0, streams[l]));
        else COLL_TRY(cudaLaunchCooperativeKernel(kernel, dim3(grid), dim3(kThreads), args, 0, streams[l]));
    }
    COLL_TRY(cudaSetDevice(c.dev[0]));
    return cudaSuccess;
}

cudaError_t enqueue_memcpy_peer(Comm &c, int dtype, long long n, int direction, const std::vector<cudaStream_t> &streams) {
    const size_t bytes = (size_t)n * elt_size(dtype);
    for (int r = 0; r < 2; ++r) {
        if (!(direction & (r == 1 ? 1 : 2))) continue;
        if (c.self >= 0) {  // the peer's input is mapped into this process: a plain copy reads it
            if (r == c.self) COLL_TRY(cudaMemcpyAsync(c.out[r], c.in[1 - r], bytes, cudaMemcpyDeviceToDevice, streams[0]));
            continue;
        }
        const int l = c.use_devices ? r : 0;
        COLL_TRY(cudaSetDevice(launch_device(c, l)));
        COLL_TRY(cudaMemcpyPeerAsync(c.out[r], c.dev[r], c.in[1 - r], c.dev[1 - r], bytes, streams[l]));
    }
    COLL_TRY(cudaSetDevice(c.dev[0]));
    return cudaSuccess;
}

// ---- NCCL ----------------------------------------------------------------------------------------------
#ifdef CUDALAB_HAVE_NCCL
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

cudaError_t nccl_failed(Comm *c, const char *what, ncclResult_t r, int rank) {
    char buf[512];
    snprintf(buf, sizeof buf, "rank %d: %s failed: %s (%s)", rank, what, ncclGetErrorString(r),
             c && rank >= 0 && rank < (int)c->nccl.size() && c->nccl[rank] ? ncclGetLastError(c->nccl[rank]) : "");
    g_message = buf;
    if (c) c->last = ErrRec{1u, rank, 0, 0, PH_NCCL, -1};
    return cudaErrorUnknown;
}

void nccl_abort_all(std::vector<ncclComm_t> &comms) {
    for (ncclComm_t &n : comms)
        if (n) {
            (void)ncclCommAbort(n);
            n = nullptr;
        }
}

// Wait until every communicator has left ncclInProgress (non-blocking init, or a group's enqueue), and
// optionally until `streams` are done, all before `deadline_s`; past it, abort every communicator.
cudaError_t nccl_wait(Comm *c, std::vector<ncclComm_t> &comms, const std::vector<int> &devs,
                      const std::vector<cudaStream_t> *streams, double deadline_s, const char *what, int rank0) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        bool pending = false;
        for (size_t i = 0; i < comms.size(); ++i) {
            ncclResult_t st = ncclSuccess;
            const ncclResult_t q = ncclCommGetAsyncError(comms[i], &st);
            if (q != ncclSuccess) return nccl_failed(c, "ncclCommGetAsyncError", q, rank0 + (int)i);
            if (st == ncclInProgress) pending = true;
            else if (st != ncclSuccess) {
                cudaError_t e = nccl_failed(c, what, st, rank0 + (int)i);
                nccl_abort_all(comms);
                return e;
            }
        }
        if (!pending && streams) {
            for (size_t i = 0; i < streams->size(); ++i) {
                COLL_TRY(cudaSetDevice(devs[i]));
                const cudaError_t q = cudaStreamQuery((*streams)[i]);
                if (q == cudaErrorNotReady) pending = true;
                else if (q != cudaSuccess) return q;
            }
        }
        if (!pending) return cudaSuccess;
        if (seconds_since(t0) > deadline_s) {
            char buf[256];
            snprintf(buf, sizeof buf, "rank %d: %s did not finish within %.1f s: every communicator was aborted",
                     rank0, what, deadline_s);
            g_message = buf;
            if (c) c->last = ErrRec{1u, rank0, 0, 0, PH_NCCL, -1};
            nccl_abort_all(comms);
            return cudaErrorTimeout;
        }
        // Poll without sleeping for the first 2 ms: a small collective finishes in microseconds, and a
        // 200 us sleep would time the host's nap instead of NCCL.
        if (seconds_since(t0) < 2e-3) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

ncclDataType_t nccl_type(int dtype) { return dtype == 0 ? ncclFloat32 : dtype == 1 ? ncclBfloat16 : ncclInt32; }

void no_multicast() {
    // NVLink SHARP (multicast objects) is never used by this lab: on shared multi-GPU hosts a program
    // that creates multicast objects can take the GPUs out of service. Forced off, whatever the caller set.
    setenv("NCCL_NVLS_ENABLE", "0", 1);
}

ncclConfig_t nonblocking_config() {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    return cfg;
}

// This process's rank of a `world`-rank NCCL communicator (non-blocking, under `deadline`). The unique
// id: from NCCL_COMM_ID on every rank; else, under torchrun (MASTER_ADDR / MASTER_PORT and no id file),
// NCCL_COMM_ID is set to MASTER_ADDR:MASTER_PORT+1 (torchrun's own store holds MASTER_PORT) and rank 0
// runs NCCL's bootstrap root there; else rank 0 writes it to id_file (a temporary name, then rename: a
// reader never sees half of it) and the others wait for the file. token: a hash of the id, the run's.
cudaError_t nccl_rank_comm(int rank, int world, const char *id_file, double deadline, ncclComm_t *out,
                           unsigned long long *token) {
    const char *maddr = getenv("MASTER_ADDR"), *mport = getenv("MASTER_PORT");
    if (!getenv("NCCL_COMM_ID") && (!id_file || !*id_file) && maddr && *maddr && mport && *mport && world > 1) {
        const long port = strtol(mport, nullptr, 10);
        if (port < 1 || port > 65534) {
            g_message = "MASTER_PORT must be a port number below 65535, got '" + std::string(mport) + "'";
            return cudaErrorInvalidValue;
        }
        setenv("NCCL_COMM_ID", (std::string(maddr) + ":" + std::to_string(port + 1)).c_str(), 1);
    }
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (getenv("NCCL_COMM_ID") || world == 1) {
        r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) return nccl_failed(nullptr, "ncclGetUniqueId", r, rank);
    } else if (!id_file || !*id_file) {
        g_message = "with several ranks, give --id-file PATH (on a file system every rank sees) or set NCCL_COMM_ID";
        return cudaErrorInvalidValue;
    } else if (rank == 0) {
        r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) return nccl_failed(nullptr, "ncclGetUniqueId", r, rank);
        const std::string tmp = std::string(id_file) + ".tmp." + std::to_string((long long)getpid());
        FILE *f = fopen(tmp.c_str(), "wb");
        bool ok = f && fwrite(&id, sizeof id, 1, f) == 1;
        if (f) ok = (fclose(f) == 0) && ok;
        if (!ok || rename(tmp.c_str(), id_file) != 0) {
            g_message = "rank 0: cannot write the unique id to " + std::string(id_file);
            remove(tmp.c_str());
            return cudaErrorInvalidValue;
        }
    } else {
        const auto t0 = std::chrono::steady_clock::now();
        for (;;) {
            FILE *f = fopen(id_file, "rb");
            if (f) {
                const bool ok = fread(&id, sizeof id, 1, f) == 1;
                fclose(f);
                if (ok) break;
            }
            if (seconds_since(t0) > deadline) {
                g_message = "rank " + std::to_string(rank) + ": no unique id in " + id_file + " within the deadline (rank 0 writes it)";
                return cudaErrorTimeout;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }
    std::vector<ncclComm_t> comm(1, nullptr);
    ncclConfig_t cfg = nonblocking_config();
    r = ncclCommInitRankConfig(&comm[0], world, id, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_failed(nullptr, "ncclCommInitRankConfig", r, rank);
    const cudaError_t e = nccl_wait(nullptr, comm, {}, nullptr, deadline, "ncclCommInitRankConfig", rank);
    if (e != cudaSuccess) return e;
    *out = comm[0];
    if (token) {  // FNV-1a of the unique id: the same on every rank of this run
        unsigned long long h = 1469598103934665603ull;
        for (size_t i = 0; i < sizeof id; ++i) h = (h ^ (unsigned char)id.internal[i]) * 1099511628211ull;
        *token = h;
    }
    return cudaSuccess;
}

// One process, every rank's GPU: what ncclCommInitAll does, with non-blocking communicators (InitAll
// takes no config): one unique id, then ncclCommInitRankConfig for each rank inside one group.
cudaError_t nccl_init_all(Comm &c) {
    if (!c.nccl.empty()) return cudaSuccess;
    if (c.self >= 0) {  // one process per rank: its communicator came with the IPC exchange
        g_message = "rank " + std::to_string(c.self) + ": the NCCL communicator was aborted by an earlier failure";
        return cudaErrorUnknown;
    }
    no_multicast();
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return nccl_failed(&c, "ncclGetUniqueId", r, 0);
    c.nccl.assign(c.world, nullptr);
    ncclConfig_t cfg = nonblocking_config();
    r = ncclGroupStart();
    if (r != ncclSuccess) return nccl_failed(&c, "ncclGroupStart", r, 0);
    for (int i = 0; i < c.world; ++i) {
        COLL_TRY(cudaSetDevice(c.dev[i]));
        r = ncclCommInitRankConfig(&c.nccl[i], c.world, id, i, &cfg);
        if (r != ncclSuccess && r != ncclInProgress) {
            (void)ncclGroupEnd();
            return nccl_failed(&c, "ncclCommInitRankConfig", r, i);
        }
    }
    r = ncclGroupEnd();
    if (r != ncclSuccess && r != ncclInProgress) return nccl_failed(&c, "ncclGroupEnd (init)", r, 0);
    const cudaError_t e = nccl_wait(&c, c.nccl, c.dev, nullptr, (double)c.timeout_ns * 1e-9, "ncclCommInitRankConfig", 0);
    if (e != cudaSuccess) c.nccl.clear();
    COLL_TRY(cudaSetDevice(c.dev[0]));
    return e;
}

cudaError_t enqueue_nccl(Comm &c, int variant, int dtype, long long n, const std::vector<cudaStream_t> &streams) {
    cudaError_t e = nccl_init_all(c);
    if (e != cudaSuccess) return e;
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return nccl_failed(&c, "ncclGroupStart", r, 0);
    for (int l = 0; l < c.launches(); ++l) {
        const int i = c.self >= 0 ? c.self : l;
        COLL_TRY(cudaSetDevice(c.dev[i]));
        if (variant == VNCCL_AR)
            r = ncclAllReduce(c.in[i], c.out[i], (size_t)n, nccl_type(dtype), ncclSum, c.nccl[l], streams[l]);
        else if (variant == VNCCL_AG)
            r = ncclAllGather(c.in[i], c.out[i], (size_t)n, nccl_type(dtype), c.nccl[l], streams[l]);
        else
            r = ncclReduceScatter(c.in[i], c.out[i], (size_t)(n / c.world), nccl_type(dtype), ncclSum, c.nccl[l],
                                  streams[l]);
        if (r != ncclSuccess && r != ncclInProgress) {
            (void)ncclGroupEnd();
            return nccl_failed(&c, kNames[variant], r, i);
        }
    }
    r = ncclGroupEnd();
    COLL_TRY(cudaSetDevice(c.dev[0]));
    if (r != ncclSuccess && r != ncclInProgress) return nccl_failed(&c, "ncclGroupEnd", r, 0);
    // The enqueue itself may still be in progress on a non-blocking communicator: wait for that part.
    e = nccl_wait(&c, c.nccl, c.dev, nullptr, (double)c.timeout_ns * 1e-9, kNames[variant], 0);
    if (e != cudaSuccess) c.nccl.clear();
    return e;
}
#endif

// The largest message 04, 05 or 06 takes on this communicator (its scratch, the kernels' caps).
long long small_cap(const Comm &c, int variant) { return variant_cap(variant, c.in_bytes); }

// The crossovers of auto_allreduce, from the curves measured one process per GPU on two and on four GPUs
// (bench/results/NOTES-collectives.md). The one-shot kernels store the whole message into each of the
// world - 1 peers, so theirs are in bytes sent per rank: 06 (one trip over the link, each line carrying
// its epoch) to 256 KiB sent, 04 (the data, then a flag) to 1 MiB sent. Then on two ranks the ring to
// 64 MiB (05 moves 04's bytes in two steps there and never won), NCCL above; on more ranks 05 to 4 MiB
// and the ring to 16 MiB (both measured on four), NCCL above.
constexpr long long kAutoLLSentMax = 256LL << 10;
constexpr long long kAutoOneshotSentMax = 1LL << 20;
constexpr long long kAutoRingMax2 = 64LL << 20;
constexpr long long kAutoTwoshotMax = 4LL << 20;
constexpr long long kAutoRingMax = 16LL << 20;

int auto_variant(const Comm &c, int dtype, long long n) {
    const long long bytes = n * elt_size(dtype);
    const long long sent = bytes * std::max(c.world - 1, 1);
    const bool small_ok = c.world <= kSmallMaxWorld;
    if (small_ok && sent <= kAutoLLSentMax && bytes <= small_cap(c, V06_ONESHOT_LL)) return V06_ONESHOT_LL;
    if (small_ok && sent <= kAutoOneshotSentMax && bytes <= small_cap(c, V04_ONESHOT_SIGNAL)) return V04_ONESHOT_SIGNAL;
    if (c.world == 2 && bytes <= kAutoRingMax2) return V02_RING;
    if (small_ok && bytes <= std::min(kAutoTwoshotMax, small_cap(c, V05_TWOSHOT))) return V05_TWOSHOT;
    if (small_ok && bytes <= kAutoRingMax) return V02_RING;
#ifdef CUDALAB_HAVE_NCCL
    if (c.use_devices) return VNCCL_AR;
#endif
    return V02_RING;
}

// Where a run's launches go: the communicator's own streams, after `ext` (when given) and before what
// follows on it, through events (several GPUs: each rank's stream on its own device).
cudaError_t enqueue(Comm &c, int variant, int dtype, long long n, int stall_rank, int direction, cudaStream_t ext,
                    bool has_ext) {
    if (variant == VAUTO) variant = auto_variant(c, dtype, n);
    std::vector<cudaStream_t> streams(c.stream);
    if (has_ext && c.launches() == 1 && c.self < 0) {
        streams[0] = ext;
    } else if (has_ext) {
        COLL_TRY(cudaSetDevice(c.dev[0]));
        COLL_TRY(cudaEventRecord(c.ev_fork[0], ext));
        for (int l = 0; l < c.launches(); ++l) {
            COLL_TRY(cudaSetDevice(c.dev[l]));
            COLL_TRY(cudaStreamWaitEvent(c.stream[l], c.ev_fork[0], 0));
        }
    }
    cudaError_t e = cudaSuccess;
    if (variant == V01_MEMCPY) e = enqueue_memcpy_peer(c, dtype, n, direction, streams);
    else if (needs_nccl(variant)) {
#ifdef CUDALAB_HAVE_NCCL
        e = enqueue_nccl(c, variant, dtype, n, streams);
#else
        g_message = std::string(kNames[variant]) + " needs NCCL, and this library was built without it";
        e = cudaErrorNotSupported;
#endif
    } else e = enqueue_lab(c, variant, dtype, n, 0, stall_rank, direction, streams);
    if (e != cudaSuccess) return e;
    if (has_ext && !(c.launches() == 1 && c.self < 0)) {
        for (int l = 0; l < c.launches(); ++l) {
            COLL_TRY(cudaSetDevice(c.dev[l]));
            COLL_TRY(cudaEventRecord(c.ev_done[l], c.stream[l]));
        }
        COLL_TRY(cudaSetDevice(c.dev[0]));
        for (int l = 0; l < c.launches(); ++l) COLL_TRY(cudaStreamWaitEvent(ext, c.ev_done[l], 0));
    }
    return cudaSuccess;
}

// The arguments of a run, checked before anything is enqueued.
cudaError_t check_run(const Comm &c, int variant, int dtype, long long n) {
    if (variant < 0 || variant >= VCOUNT || variant == VTP || variant == VTP_OVERLAP || dtype < 0 || dtype > 2 || n < 1)
        return cudaErrorInvalidValue;
    const long long bytes = n * elt_size(dtype);
    if (device_epoch(variant) && c.world > kSmallMaxWorld) {
        g_message = std::string(kNames[variant]) + " runs at most " + std::to_string(kSmallMaxWorld) + " ranks";
        return cudaErrorInvalidValue;
    }
    if (device_epoch(variant) && bytes > small_cap(c, variant)) {
        g_message = std::string(kNames[variant]) + " takes at most " + std::to_string(small_cap(c, variant)) +
                    " bytes per rank on this communicator, got " + std::to_string(bytes);
        return cudaErrorInvalidValue;
    }
    if (bytes > c.in_bytes) return cudaErrorInvalidValue;
    if (variant == VNCCL_AG ? bytes * c.world > c.out_bytes : bytes > c.out_bytes) return cudaErrorInvalidValue;
    if (variant == VNCCL_RS && n % c.world != 0) return cudaErrorInvalidValue;
    if ((variant == V01_P2P || variant == V01_MEMCPY) && c.world != 2) return cudaErrorInvalidValue;
    if (needs_nccl(variant) && !c.use_devices && c.world > 1) {
        g_message = "NCCL runs one rank per GPU (2.28 refuses two ranks on one device): virtual ranks run the lab's kernels only";
        return cudaErrorNotSupported;
    }
    return cudaSuccess;
}

cudaError_t run_sync(Comm &c, int variant, int dtype, long long n) {
    if (variant == VAUTO) variant = auto_variant(c, dtype, n);
#ifdef CUDALAB_HAVE_NCCL
    if (needs_nccl(variant)) {
        std::vector<int> devs(c.dev.begin(), c.dev.begin() + c.launches());
        std::vector<cudaStream_t> st(c.stream.begin(), c.stream.begin() + c.launches());
        const cudaError_t e = nccl_wait(&c, c.nccl, devs, &st, (double)c.timeout_ns * 1e-9, kNames[variant], 0);
        if (e != cudaSuccess) c.nccl.clear();
        COLL_TRY(cudaSetDevice(c.dev[0]));
        return e;
    }
#else
    (void)variant;
#endif
    COLL_TRY(sync_all(c));
    return check_records(c);
}

// ---- the tensor-parallel block -----------------------------------------------------------------------
cudaError_t tp_alloc(Comm &c, TpBuffers &t, int ar, int T, int H, int Fr) {
    const int R = c.world, L = c.launches();
    size_null(R, t.x, t.w1, t.w2, t.g, t.h);
    size_null(L, t.gemm, t.ev);
    if (ar == TP_AR_COPY) {
        // A slot holds one part of the tallest token block: the plain form's one block of T rows at most.
        t.slot = (cdiv((long long)T * H, R) + 3) / 4 * 4 + 4;
        size_null(R, t.slots, t.add, t.ev_reduced);
        size_null(R * R, t.copy, t.ev_sent, t.ev_gathered);
        size_null(L, t.ev_y);
        for (int r = 0; r < R; ++r) {
            COLL_TRY(cudaSetDevice(c.dev[r]));
            COLL_TRY(cudaMalloc(&t.slots[r], (size_t)t.slot * R * 4));
            COLL_TRY(cudaStreamCreateWithFlags(&t.add[r], cudaStreamNonBlocking));
            COLL_TRY(cudaEventCreateWithFlags(&t.ev_reduced[r], cudaEventDisableTiming));
            for (int p = 0; p < R; ++p) {
                COLL_TRY(cudaStreamCreateWithFlags(&t.copy[r * R + p], cudaStreamNonBlocking));
                COLL_TRY(cudaEventCreateWithFlags(&t.ev_sent[r * R + p], cudaEventDisableTiming));
                COLL_TRY(cudaEventCreateWithFlags(&t.ev_gathered[r * R + p], cudaEventDisableTiming));
            }
        }
        for (int l = 0; l < L; ++l) {
            COLL_TRY(cudaSetDevice(c.dev[l]));
            COLL_TRY(cudaEventCreateWithFlags(&t.ev_y[l], cudaEventDisableTiming));
        }
    }
    for (int r = 0; r < R; ++r) {
        COLL_TRY(cudaSetDevice(c.dev[r]));
        // Virtual ranks share the one x; each rank still has its own weights and activations.
        if (c.use_devices || r == 0) COLL_TRY(cudaMalloc(&t.x[r], (size_t)T * H * 2));
        else t.x[r] = t.x[0];
        COLL_TRY(cudaMalloc(&t.w1[r], (size_t)Fr * H * 2));
        COLL_TRY(cudaMalloc(&t.w2[r], (size_t)H * Fr * 2));
        COLL_TRY(cudaMalloc(&t.g[r], (size_t)T * Fr * 2));
        // Zeroed once, though the first GEMM writes every value of h before the GELU reads it: the wgmma
        // rung writes h through TMA bulk stores, which compute-sanitizer's initcheck does not see, so it
        // would call every GELU read uninitialized.
        COLL_TRY(alloc_zeroed(c, r, &t.h[r], (size_t)T * Fr * 4));
    }
    for (int l = 0; l < L; ++l) {
        COLL_TRY(cudaSetDevice(c.dev[l]));
        int least = 0, greatest = 0;
        COLL_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        COLL_TRY(cudaStreamCreateWithPriority(&t.gemm[l], cudaStreamNonBlocking, greatest));
        COLL_TRY(cudaEventCreateWithFlags(&t.ev[l], cudaEventDisableTiming));
    }
    COLL_TRY(cudaSetDevice(c.dev[0]));
    return cudaSuccess;
}

void tp_free(Comm &c, TpBuffers &t) {
    for (int r = 0; r < (int)t.w1.size(); ++r) {
        (void)cudaSetDevice(c.dev[r]);
        if (c.use_devices || r == 0) (void)cudaFree(t.x[r]);
        (void)cudaFree(t.w1[r]);
        (void)cudaFree(t.w2[r]);
        (void)cudaFree(t.g[r]);
        (void)cudaFree(t.h[r]);
    }
    for (int l = 0; l < (int)t.gemm.size(); ++l) {
        (void)cudaSetDevice(c.dev[l]);
        if (t.gemm[l]) (void)cudaStreamDestroy(t.gemm[l]);
        if (t.ev[l]) (void)cudaEventDestroy(t.ev[l]);
    }
    const int R = (int)t.slots.size();
    for (int r = 0; r < R; ++r) {
        (void)cudaSetDevice(c.dev[r]);
        (void)cudaFree(t.slots[r]);
        if (t.add[r]) (void)cudaStreamDestroy(t.add[r]);
        if (t.ev_reduced[r]) (void)cudaEventDestroy(t.ev_reduced[r]);
        for (int p = 0; p < R; ++p) {
            if (t.copy[r * R + p]) (void)cudaStreamDestroy(t.copy[r * R + p]);
            if (t.ev_sent[r * R + p]) (void)cudaEventDestroy(t.ev_sent[r * R + p]);
            if (t.ev_gathered[r * R + p]) (void)cudaEventDestroy(t.ev_gathered[r * R + p]);
        }
    }
    for (int l = 0; l < (int)t.ev_y.size(); ++l) {
        (void)cudaSetDevice(c.dev[l]);
        if (t.ev_y[l]) (void)cudaEventDestroy(t.ev_y[l]);
    }
    (void)cudaSetDevice(c.dev[0]);
}

// Token blocks of the overlapped form. Every boundary is a multiple of 8 rows, so each block's
// offsets stay on 16-byte boundaries whatever H and F/world are: x + t0 H and g + t0 F/world (bf16) are
// the wgmma GEMM's A operands, which TMA reads only from 16-byte aligned bases, and y + t0 H (float32)
// is the all-reduce's packs and the TMA store's base. Where every block can have a whole 128-row tile
// (the GEMMs' block height) the boundaries are multiples of 128: only the last block has a ragged tile.
std::vector<int> tp_blocks(int T, int chunks) {
    const int step = (long long)T >= 128LL * chunks ? 128 : 8;
    std::vector<int> b{0};
    for (int i = 1; i < chunks; ++i) {
        int t = (int)((long long)T * i / chunks) / step * step;
        if (t > b.back() && t < T) b.push_back(t);
    }
    b.push_back(T);
    return b;
}

// One GEMM of the block, C = A . B^T, with the chosen TpGemm (tp_check has refused a shape the named
// one cannot take); max_sms caps the wgmma rung's persistent grid.
cudaError_t tp_gemm(int gemm, int M, int N, int K, const cudalab_bf16 *A, const cudalab_bf16 *B, float *C,
                    cudaStream_t s, int max_sms) {
    if (gemm == TP_MMA_SYNC) return gemm_tc::launch_mma_sync(M, N, K, A, B, C, s);
    if (gemm == TP_WGMMA) return gemm_tc::launch_fastest_wgmma(M, N, K, A, B, C, s, max_sms);
    return gemm_tc::launch_fastest(M, N, K, A, B, C, s, max_sms);
}

// Whether a GEMM of the block runs on the wgmma rung (a persistent grid) with this choice.
bool tp_runs_wgmma(int gemm, int K) {
    return gemm == TP_WGMMA || (gemm == TP_AUTO && gemm_tc::fastest_wgmma_refusal(K, nullptr, nullptr) == nullptr);
}

// The overlapped form's split of each GPU's SMs between the GEMMs and the all-reduce beside them.
//
// Why a split: the wgmma GEMM is persistent (one 384-thread block per SM that holds the whole register
// file and most of shared memory, and walks its tiles until the product is done), so a kernel that
// arrives while it runs finds no SM that frees up before the GEMM ends; 02's one-block-per-tile grid
// handed SMs back as its tiles finished. An all-reduce that waits for the whole GEMM overlaps
// nothing. So the GEMMs' grids are capped and the all-reduce gets the SMs left over: `blocks` blocks
// per rank (at most the communicator's), one SM each.
// How many: the all-reduce is a few SMs' worth of loads and stores on NVLink, the GEMMs are compute.
// The 08 rung's grid is balanced (cdiv(tiles, rounds) blocks, gemm_tc's persistent_grid), so it often
// leaves SMs idle at no cost: 256, 512 or 1024 tiles of 128 x 256 (the block's chunks at H = 8192)
// take 2, 4 or 8 rounds on 128 of an H100's or H200's 132 SMs. The all-reduce takes those and no more, so that no
// GEMM needs an extra round, and at least kTpCommSmsMin, so that it always has SMs of its own.
// Why one SM a block: the GEMM streams have the device's highest priority, and when chunk i's last
// GEMM ends, chunk i's all-reduce and chunk i+1's first GEMM become ready together. If the GEMM
// reaches the GPU first, its blocks are placed first and the all-reduce's queue on the SMs the cap left
// free. But the all-reduce may reach it a microsecond earlier; then the block scheduler spreads its
// blocks over the idle SMs one each, an SM with one all-reduce block has no room for a GEMM block, and
// the GEMM blocks left without an SM run as a second wave: that GEMM takes twice its time. Blocks
// counted one to an SM fit in the SMs the cap frees whichever kernel comes first, however many of them
// an SM could hold.
// Blocks named by the caller (the executable's --blocks) are kept, and the cap leaves them the SMs they
// fill: the way to time another split. Virtual ranks (one GPU, one cooperative launch of world x
// blocks) take the same rules with the launch's blocks (at least one a rank, so more virtual ranks
// than free SMs take SMs from the GEMMs), and no cap where it would leave the GEMMs less than half of
// the SMs.
constexpr int kTpCommSmsMin = 4;
struct TpSplit {
    int gemm_sms = 0;  // the wgmma GEMMs' cap (0: every SM)
    int blocks = 0;    // the all-reduce's blocks per rank
};
cudaError_t tp_split(const Comm &c, int gemm, int rows, int H, int Fr, TpSplit *out) {
    *out = TpSplit{0, c.blocks};
    if (!tp_runs_wgmma(gemm, H) && !tp_runs_wgmma(gemm, Fr)) return cudaSuccess;  // 02 only: no persistent grid
    int dev = 0, sms = 0;
    COLL_TRY(cudaGetDevice(&dev));
    COLL_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    auto balanced = [&](long long tiles) { return tiles <= sms ? tiles : cdiv(tiles, cdiv(tiles, sms)); };
    const long long tiles_m = cdiv(rows, gemm_tc::H_BM);
    const long long busy = std::max(balanced(tiles_m * cdiv(Fr, gemm_tc::H_BN)), balanced(tiles_m * cdiv(H, gemm_tc::H_BN)));
    const int free_sms = std::max(kTpCommSmsMin, sms - (int)busy);
    const int launch_ranks = c.launches() == 1 ? c.world : 1;  // blocks of one launch: virtual ranks share it
    const int blocks = c.blocks_given ? c.blocks : std::max(1, std::min(c.blocks, free_sms / launch_ranks));
    const long long comm_sms = (long long)blocks * launch_ranks;  // one SM a block
    if (2 * comm_sms > sms) return cudaSuccess;  // a cap would cost the GEMMs more than it gives
    *out = TpSplit{sms - (int)comm_sms, blocks};
    return cudaSuccess;
}

// The split of the overlapped form for token blocks `bl` (the tallest block sets the tile counts);
// none with one rank, which has no all-reduce to hide.
cudaError_t tp_forward_split(const Comm &c, int gemm, const std::vector<int> &bl, int H, int Fr, TpSplit *out) {
    *out = TpSplit{0, c.blocks};
    if (c.world < 2) return cudaSuccess;
    int rows = 0;
    for (size_t k = 0; k + 1 < bl.size(); ++k) rows = std::max(rows, bl[k + 1] - bl[k]);
    return tp_split(c, gemm, rows, H, Fr, out);
}

// copy_engine: the all-reduce of token block [t0, t0 + rows) with the copy engines carrying every byte
// between GPUs and `blocks` blocks a rank adding. Why: beside a persistent GEMM the all-reduce gets a
// few SMs, and an SM's own loads and stores move a few tens of GB/s over NVLink (the ring on 4 SMs,
// NOTES-collectives), while a copy engine needs no SM. The block's rows x H floats split into `world`
// parts of whole 16-byte packs; rank p owns part p.
//   1. reduce-scatter by copy: rank r pushes its part p into slot r of rank p (stream copy[r][p], after
//      its GEMMs wrote y and after rank p's adds of the previous block read that slot);
//   2. rank p adds its own part and the world - 1 slots, in rank order, into its output (stream add[p],
//      once every copy into it has landed);
//   3. all-gather by copy: rank p pushes its reduced part into every peer's output (stream copy[p][q]).
// Each rank's output is whole when its own adds and the world - 1 gathers into it are done: the
// communicator's stream `into[l]` waits for those events, so whatever waits for it (the next block's
// GEMMs in the plain form, sync_all at the end) sees the whole block. An event waited on is the last one
// recorded when the wait is enqueued, so the per-rank and per-pair events serve every block in turn.
cudaError_t tp_copy_allreduce(Comm &c, TpBuffers &t, long long t0, long long rows, int H, int blocks,
                              const std::vector<cudaStream_t> &into) {
    const int W = c.world;
    const long long n = rows * H, off = t0 * H;
    auto lo = [&](int p) { return p == W ? n : n * p / W / 4 * 4; };
    auto y = [&](int r) { return reinterpret_cast<float *>(c.in[r]) + off; };
    auto out = [&](int r) { return reinterpret_cast<float *>(c.out[r]) + off; };
    auto launch = [&](int r) { return c.use_devices ? r : 0; };
    for (int r = 0; r < W; ++r)
        for (int p = 0; p < W; ++p) {
            if (p == r || lo(p + 1) == lo(p)) continue;
            cudaStream_t s = t.copy[r * W + p];
            COLL_TRY(cudaSetDevice(c.dev[r]));
            COLL_TRY(cudaStreamWaitEvent(s, t.ev_y[launch(r)], 0));
            COLL_TRY(cudaStreamWaitEvent(s, t.ev_reduced[p], 0));
            COLL_TRY(cudaMemcpyPeerAsync(t.slots[p] + (long long)r * t.slot, c.dev[p], y(r) + lo(p), c.dev[r],
                                         (size_t)(lo(p + 1) - lo(p)) * 4, s));
            COLL_TRY(cudaEventRecord(t.ev_sent[r * W + p], s));
        }
    for (int p = 0; p < W; ++p) {
        const long long np = lo(p + 1) - lo(p);
        if (np == 0) continue;
        cudaStream_t s = t.add[p];
        COLL_TRY(cudaSetDevice(c.dev[p]));
        COLL_TRY(cudaStreamWaitEvent(s, t.ev_y[launch(p)], 0));
        for (int q = 0; q < W; ++q)
            if (q != p) COLL_TRY(cudaStreamWaitEvent(s, t.ev_sent[q * W + p], 0));
        const unsigned grid = (unsigned)std::max<long long>(1, std::min<long long>(blocks, cdiv(np, 4LL * kReduceThreads)));
        tp_reduce_part_kernel<<<grid, kReduceThreads, 0, s>>>(out(p) + lo(p), y(p) + lo(p), t.slots[p], t.slot, W, p, np);
        COLL_TRY(cudaGetLastError());
        COLL_TRY(cudaEventRecord(t.ev_reduced[p], s));
        for (int q = 0; q < W; ++q) {
            if (q == p) continue;
            cudaStream_t g = t.copy[p * W + q];
            COLL_TRY(cudaStreamWaitEvent(g, t.ev_reduced[p], 0));
            COLL_TRY(cudaMemcpyPeerAsync(out(q) + lo(p), c.dev[q], out(p) + lo(p), c.dev[p], (size_t)np * 4, g));
            COLL_TRY(cudaEventRecord(t.ev_gathered[p * W + q], g));
        }
    }
    for (int r = 0; r < W; ++r) {
        const int l = launch(r);
        COLL_TRY(cudaSetDevice(c.dev[l]));
        for (int p = 0; p < W; ++p) {
            if (lo(p + 1) == lo(p)) continue;
            COLL_TRY(cudaStreamWaitEvent(into[l], p == r ? t.ev_reduced[r] : t.ev_gathered[p * W + r], 0));
        }
    }
    COLL_TRY(cudaSetDevice(c.dev[0]));
    return cudaSuccess;
}

// Enqueue one forward; y_r lands in rank r's output buffer (its partial in the input buffer).
// Plain: every kernel on the communicator's stream, in order. Overlapped: the GEMMs (and GELU) on the
// block's high-priority GEMM stream, each block's all-reduce on the second stream after an event that
// says the block's y is written; the all-reduce of block i then runs beside the GEMMs of block i+1 on
// the SMs tp_split leaves it. The last all-reduce waits for every GEMM, so the communicator's
// sync_all (its two streams) waits for the whole forward.
cudaError_t tp_forward(Comm &c, TpBuffers &t, int ar, int gemm, int overlap, int chunks, int T, int H, int Fr) {
    // NVTX ranges around what the host enqueues (the forward, each chunk's GEMMs, its all-reduce): an
    // nsys trace then names every kernel's part, and `invoke plot trace --by stream` shows the overlap.
    CudalabNvtxRange whole("tp_forward");
    const std::vector<int> bl = tp_blocks(T, overlap ? std::max(1, chunks) : 1);
    const int L = c.launches();
    std::vector<cudaStream_t> comm_streams(overlap ? c.stream2 : c.stream);
    comm_streams.resize(L);
    TpSplit split{0, c.blocks};
    if (overlap) COLL_TRY(tp_forward_split(c, gemm, bl, H, Fr, &split));
    if (overlap) {
        // The GEMM stream starts after whatever the communicator's streams hold: the inputs' uploads, and
        // an earlier forward's all-reduce, which still reads the y this forward overwrites.
        for (int l = 0; l < L; ++l) {
            COLL_TRY(cudaSetDevice(c.dev[l]));
            COLL_TRY(cudaEventRecord(t.ev[l], c.stream[l]));
            COLL_TRY(cudaStreamWaitEvent(t.gemm[l], t.ev[l], 0));
            COLL_TRY(cudaEventRecord(t.ev[l], c.stream2[l]));
            COLL_TRY(cudaStreamWaitEvent(t.gemm[l], t.ev[l], 0));
        }
    }
    for (size_t k = 0; k + 1 < bl.size(); ++k) {
        const int t0 = bl[k], rows = bl[k + 1] - bl[k];
        {
            CudalabNvtxRange gemms("gemm");
            for (int r = 0; r < c.world; ++r) {
                const int l = c.use_devices ? r : 0;
                COLL_TRY(cudaSetDevice(c.dev[r]));
                cudaStream_t s = overlap ? t.gemm[l] : c.stream[l];
                float *h = t.h[r] + (size_t)t0 * Fr;
                cudalab_bf16 *g = t.g[r] + (size_t)t0 * Fr;
                float *y = reinterpret_cast<float *>(c.in[r]) + (size_t)t0 * H;
                COLL_TRY(tp_gemm(gemm, rows, Fr, H, t.x[r] + (size_t)t0 * H, t.w1[r], h, s, split.gemm_sms));
                const long long n = (long long)rows * Fr;
                gelu_to_bf16_kernel<<<(unsigned)std::min<long long>(cdiv(n, 256), 4096), 256, 0, s>>>(h, g, n);
                COLL_TRY(cudaGetLastError());
                COLL_TRY(tp_gemm(gemm, rows, H, Fr, g, t.w2[r], y, s, split.gemm_sms));
            }
        }
        CudalabNvtxRange allreduce("allreduce");
        // The last block's all-reduce has no GEMM beside it (it waits for the last GEMMs, and nothing is
        // enqueued after it), so it takes the communicator's blocks, not the few the split leaves: on the
        // free SMs alone it would be the whole exposed tail of the forward.
        const int ar_blocks = k + 2 == bl.size() ? c.blocks : split.blocks;
        if (ar == TP_AR_COPY) {
            for (int l = 0; l < L; ++l) {
                COLL_TRY(cudaSetDevice(c.dev[l]));
                COLL_TRY(cudaEventRecord(t.ev_y[l], overlap ? t.gemm[l] : c.stream[l]));
            }
            COLL_TRY(tp_copy_allreduce(c, t, t0, rows, H, ar_blocks, comm_streams));
            continue;
        }
        if (overlap) {
            for (int l = 0; l < L; ++l) {
                COLL_TRY(cudaSetDevice(c.dev[l]));
                COLL_TRY(cudaEventRecord(c.ev_done[l], t.gemm[l]));
                COLL_TRY(cudaStreamWaitEvent(c.stream2[l], c.ev_done[l], 0));
            }
        }
        // The lab's kernel with ar_blocks blocks per rank (the ring's chunking follows c.blocks).
        const int blocks = c.blocks;
        c.blocks = ar_blocks;
        const cudaError_t e = enqueue_lab(c, ar == TP_AR_RING ? V02_RING : V03_ONESHOT, 0, (long long)rows * H,
                                          (long long)t0 * H, -1, 0, comm_streams);
        c.blocks = blocks;
        COLL_TRY(e);
    }
    COLL_TRY(cudaSetDevice(c.dev[0]));
    return cudaSuccess;
}

// Why the block cannot run with this GEMM, these shapes and this world here (one sentence), or nullptr.
const char *tp_gemm_refusal(int gemm, int world, int H, int F) {
    if (gemm < 0 || gemm >= TP_GEMM_COUNT) return "unknown GEMM";
    // auto falls back to 02 wherever the wgmma rung cannot run, so 02's sm_80 is its only need.
    if (gemm != TP_WGMMA) return gemm_tc::sm80_unsupported_reason();
    if (const char *why = gemm_tc::wgmma_unsupported_reason()) return why;
    if (H % 8 != 0) return "the wgmma GEMM needs hidden a multiple of 8 (TMA reads rows of a multiple of 16 bytes)";
    if (world >= 1 && F % world == 0 && (F / world) % 8 != 0)
        return "the wgmma GEMM needs ffn/world a multiple of 8 (TMA reads rows of a multiple of 16 bytes)";
    return nullptr;
}

cudaError_t tp_check(const Comm &c, int ar, int gemm, int chunks, int T, int H, int F) {
    if (ar < 0 || ar >= TP_AR_COUNT) return cudaErrorInvalidValue;
    if (c.self >= 0) {
        g_message = "the tensor-parallel block runs in one process (every rank's GEMMs from one host thread)";
        return cudaErrorNotSupported;
    }
    if (T < 1 || H < 1 || F < 1 || chunks < 1 || F % c.world != 0) return cudaErrorInvalidValue;
    if ((long long)T * H * 4 > std::min(c.in_bytes, c.out_bytes)) return cudaErrorInvalidValue;
    if (gemm < 0 || gemm >= TP_GEMM_COUNT) return cudaErrorInvalidValue;
    if (const char *why = tp_gemm_refusal(gemm, c.world, H, F)) {
        g_message = std::string("the tensor-parallel block's GEMM ") + kTpGemms[gemm] + ": " + why;
        // Not this GPU or build: NotSupported, as every refused variant; a shape the GEMM cannot take: InvalidValue.
        const bool arch = gemm == TP_WGMMA ? gemm_tc::wgmma_unsupported_reason() != nullptr
                                           : gemm_tc::sm80_unsupported_reason() != nullptr;
        return arch ? cudaErrorNotSupported : cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

// The start of both TP entry points: the arguments checked, then each rank's buffers (all freed
// again when one allocation fails, so the caller frees only after a success).
cudaError_t tp_open(Comm &c, TpBuffers &t, int ar, int gemm, int chunks, int T, int H, int F) {
    COLL_TRY(tp_check(c, ar, gemm, chunks, T, H, F));
    const cudaError_t e = tp_alloc(c, t, ar, T, H, F / c.world);
    if (e != cudaSuccess) tp_free(c, t);
    return e;
}

// The streams, the launch tables and error records, and the buffers of rank `only` (-1: every rank),
// each zeroed. The flags: the ring's and 03's, then 04/05's signal flags and epoch counters, then
// one word for the IPC canary. The scratch: two halves (the epoch's parity), each the larger of 04's
// W slots and 05's W chunks; then 06's own two halves of W slots of lines. Only 06 writes there: a
// line's epoch words never hold another rung's data, which could equal the epoch a reader waits for.
cudaError_t comm_alloc(Comm &c, int only) {
    const int W = c.world;
    c.small_flags = 2LL * W * std::max(kCpsMax, kMaxBlocksPerRank);
    c.flag_count = c.small_flags + 2LL * kMaxBlocksPerRank * W + kMaxBlocksPerRank + W + 1;
    const long long one = (std::min(c.in_bytes, kOneshotMaxBytes) + 15) / 16 * 16;
    const long long two = (std::min(c.in_bytes, kTwoshotMaxBytes) + W * 16 - 1) / (W * 16) * 16;
    const long long ll = (std::min(c.in_bytes, kLLMaxBytes) + 7) / 8 * 16;  // 06: a 16-byte line per 8 bytes
    c.ll_bytes = 2 * W * ll;
    c.scratch_bytes = 2 * W * std::max(one, two) + c.ll_bytes;
    // The streams first: everything below is done on them (rank_stream says why).
    const int L = c.launches();
    size_null(L, c.table, c.err, c.stream, c.stream2, c.ev_fork, c.ev_done);
    for (int l = 0; l < L; ++l) {
        COLL_TRY(cudaSetDevice(c.dev[l]));
        COLL_TRY(cudaStreamCreateWithFlags(&c.stream[l], cudaStreamNonBlocking));
        COLL_TRY(cudaStreamCreateWithFlags(&c.stream2[l], cudaStreamNonBlocking));
        COLL_TRY(cudaEventCreateWithFlags(&c.ev_fork[l], cudaEventDisableTiming));
        COLL_TRY(cudaEventCreateWithFlags(&c.ev_done[l], cudaEventDisableTiming));
        COLL_TRY(cudaMalloc(&c.table[l], sizeof(RankPtrs) * W));
        COLL_TRY(alloc_zeroed(c, l, &c.err[l], sizeof(ErrRec)));
    }
    size_null(W, c.in, c.out, c.recv, c.scratch, c.flags);
    c.mapped.assign(W, 0);
    for (int r = 0; r < W; ++r) {
        if (only >= 0 && r != only) continue;
        COLL_TRY(alloc_zeroed(c, r, &c.in[r], (size_t)c.in_bytes));
        COLL_TRY(alloc_zeroed(c, r, &c.out[r], (size_t)c.out_bytes));
        COLL_TRY(alloc_zeroed(c, r, &c.recv[r], (size_t)c.in_bytes));
        COLL_TRY(alloc_zeroed(c, r, &c.scratch[r], (size_t)c.scratch_bytes));
        COLL_TRY(alloc_zeroed(c, r, &c.flags[r], (size_t)c.flag_count * 8));
    }
    return cudaSuccess;
}

// Every launch's table of the ranks' pointers (own and, one process per rank, the mapped peers').
cudaError_t comm_table(Comm &c) {
    std::vector<RankPtrs> host(c.world);
    for (int r = 0; r < c.world; ++r) host[r] = RankPtrs{c.in[r], c.out[r], c.recv[r], c.scratch[r], c.flags[r]};
    for (int l = 0; l < c.launches(); ++l) COLL_TRY(h2d(c, l, c.table[l], host.data(), sizeof(RankPtrs) * c.world));
    COLL_TRY(cudaSetDevice(c.dev[0]));
    return cudaSuccess;
}

}  // namespace

// ================================================================================================
// Entry points
// ================================================================================================
extern "C" int collectives_variant_count(void) { return VCOUNT; }
extern "C" const char *collectives_variant_name(int i) { return (i >= 0 && i < VCOUNT) ? kNames[i] : nullptr; }
extern "C" int collectives_variant_needs_nccl(int v) { return (v < 0 || v >= VCOUNT) ? -1 : needs_nccl(v) ? 1 : 0; }
extern "C" long long collectives_max_bytes(int v, long long in_bytes) {
    return (v < 0 || v >= VCOUNT || in_bytes < 0) ? -1 : variant_cap(v, in_bytes);
}
extern "C" int collectives_small_max_world(void) { return kSmallMaxWorld; }
extern "C" const char *collectives_phase_name(int p) { return (p >= 0 && p < PH_COUNT) ? kPhases[p] : nullptr; }
extern "C" const char *collectives_variant_tags(int v) {
    // The words, each from its predicate: "allreduce" (takes the all-reduce's arguments), "graph" (a
    // CUDA graph can replay it: a device-side epoch, or NCCL's, as collectives_time allows), "nccl", "small" (a device-side epoch:
    // at most kSmallMaxWorld ranks, and a cap on the message, collectives_max_bytes).
    static const char *const kWords[4] = {"allreduce", "graph", "nccl", "small"};
    static char tags[VCOUNT][40];
    if (v < 0 || v >= VCOUNT) return nullptr;
    const bool has[4] = {is_allreduce(v), device_epoch(v) || needs_nccl(v), needs_nccl(v), device_epoch(v)};
    tags[v][0] = '\0';
    for (int w = 0; w < 4; ++w)
        if (has[w]) {
            if (tags[v][0]) strcat(tags[v], " ");
            strcat(tags[v], kWords[w]);
        }
    return tags[v];
}

// The tensor-parallel variants need at least gemm_tc's 02_mma_sync (sm_80: their GEMM where the wgmma
// rung cannot run), so they are refused with arch.cuh's reason on an older GPU or build; the rest run
// on any GPU CUDA 13 supports. Naming the wgmma GEMM needs more: collectives_tp_gemm_refusal.
extern "C" const char *collectives_unsupported_reason(int v) {
    if (v < 0 || v >= VCOUNT) return "unknown variant";
    if (std::strcmp(kNames[v], "tp_mlp") == 0 || std::strcmp(kNames[v], "tp_mlp_overlap") == 0)
        return gemm_tc::sm80_unsupported_reason();
    return nullptr;
}

extern "C" int collectives_tp_gemm_count(void) { return TP_GEMM_COUNT; }
extern "C" const char *collectives_tp_gemm_name(int i) { return i >= 0 && i < TP_GEMM_COUNT ? kTpGemms[i] : nullptr; }
extern "C" int collectives_tp_allreduce_count(void) { return TP_AR_COUNT; }
extern "C" const char *collectives_tp_allreduce_name(int i) {
    return i >= 0 && i < TP_AR_COUNT ? kTpAllreduces[i] : nullptr;
}
extern "C" const char *collectives_tp_gemm_refusal(int gemm, int world, int H, int F) {
    return tp_gemm_refusal(gemm, world, H, F);
}

extern "C" int collectives_have_nccl(void) {
#ifdef CUDALAB_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
}

extern "C" int collectives_nccl_version(void) {
#ifdef CUDALAB_HAVE_NCCL
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
#else
    return 0;
#endif
}

extern "C" const char *collectives_last_message(void) { return g_message.c_str(); }

extern "C" int collectives_peer_access(int a, int b) {
    int ok = 0;
    const cudaError_t e = cudaDeviceCanAccessPeer(&ok, a, b);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return -(int)e;
    }
    return ok;
}

extern "C" int collectives_max_virtual_world(int blocks_per_rank) {
    if (blocks_per_rank < 1) return -(int)cudaErrorInvalidValue;
    int resident = 0;
    const cudaError_t e = resident_blocks(&resident);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return -(int)e;
    }
    return resident / blocks_per_rank;
}

extern "C" cudalab_status collectives_comm_create(int world, int use_devices, long long in_bytes, long long out_bytes,
                                                  int blocks_per_rank, long long timeout_ms, int *handle) {
    if (world < 1 || in_bytes < 1 || out_bytes < 1 || blocks_per_rank < 0 || blocks_per_rank > kMaxBlocksPerRank ||
        timeout_ms < 1 || !handle)
        return cudaErrorInvalidValue;
    int ndev = 0, cur = 0;
    COLL_TRY(cudaGetDeviceCount(&ndev));
    COLL_TRY(cudaGetDevice(&cur));
    if (use_devices && world > ndev) return cudaErrorInvalidDevice;
    Comm *c = new Comm();
    c->world = world;
    c->use_devices = use_devices ? 1 : 0;
    c->blocks_given = blocks_per_rank > 0;
    c->in_bytes = in_bytes;
    c->out_bytes = out_bytes;
    c->timeout_ns = (unsigned long long)timeout_ms * 1000000ull;
    for (int r = 0; r < world; ++r) c->dev.push_back(use_devices ? r : cur);
    auto fail = [&](cudaError_t e) {
        free_comm(c);
        (void)cudaSetDevice(cur);
        return (int)e;
    };
    int resident = 0;
    if (cudaError_t e = resident_blocks(&resident); e != cudaSuccess) return fail(e);
    if (use_devices) {
        c->blocks = blocks_per_rank ? blocks_per_rank : std::min(32, resident);
        if (c->blocks > resident) return fail(cudaErrorCooperativeLaunchTooLarge);
    } else {
        c->blocks = blocks_per_rank ? blocks_per_rank : std::max(1, std::min(16, resident / world));
        if ((long long)c->blocks * world > resident) return fail(cudaErrorCooperativeLaunchTooLarge);
    }
    // Peer access between every pair of ranks' GPUs, both ways.
    if (use_devices) {
        for (int a = 0; a < world; ++a)
            for (int b = 0; b < world; ++b) {
                if (a == b) continue;
                int ok = 0;
                if (cudaError_t e = cudaDeviceCanAccessPeer(&ok, a, b); e != cudaSuccess) return fail(e);
                if (!ok) return fail(cudaErrorPeerAccessUnsupported);
                if (cudaError_t e = cudaSetDevice(a); e != cudaSuccess) return fail(e);
                cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
                if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
                else if (e != cudaSuccess) return fail(e);
            }
    }
    if (cudaError_t e = comm_alloc(*c, -1); e != cudaSuccess) return fail(e);
    if (cudaError_t e = comm_table(*c); e != cudaSuccess) return fail(e);
    g_comms.push_back(c);
    handle[0] = (int)g_comms.size() - 1;
    return 0;
}

#ifdef CUDALAB_HAVE_NCCL
namespace {
cudaError_t ipc_barrier(Comm &c, cudaStream_t s);
}
#endif

extern "C" cudalab_status collectives_comm_destroy(int handle) {
    Comm *c = get(handle);
    if (!c) return cudaErrorInvalidValue;
    g_comms[handle] = nullptr;
    (void)sync_all(*c);
#ifdef CUDALAB_HAVE_NCCL
    // One process per rank: no rank frees its buffers while a peer's kernel may still write into them.
    // A dead or aborted peer ends the wait at the deadline (or at once); the buffers go either way.
    if (c->self >= 0 && !c->nccl.empty()) (void)ipc_barrier(*c, c->stream[0]);
#endif
    free_comm(c);
    return 0;
}

extern "C" cudalab_status collectives_upload(int handle, int rank, const uint8_t *src, long long bytes) {
    Comm *c = get(handle);
    if (!c || rank < 0 || rank >= c->world || bytes < 0 || bytes > c->in_bytes || (!src && bytes) ||
        (c->self >= 0 && rank != c->self))
        return cudaErrorInvalidValue;
    COLL_TRY(h2d(*c, rank, c->in[rank], src, (size_t)bytes));
    COLL_TRY(cudaSetDevice(c->dev[0]));
    return 0;
}

extern "C" cudalab_status collectives_download(int handle, int rank, uint8_t *dst, long long bytes) {
    Comm *c = get(handle);
    if (!c || rank < 0 || rank >= c->world || bytes < 0 || bytes > c->out_bytes || (!dst && bytes) ||
        (c->self >= 0 && rank != c->self))
        return cudaErrorInvalidValue;
    COLL_TRY(d2h(*c, rank, dst, c->out[rank], (size_t)bytes));
    COLL_TRY(cudaSetDevice(c->dev[0]));
    return 0;
}

extern "C" cudalab_status collectives_poison(int handle, int byte) {
    Comm *c = get(handle);
    if (!c || byte < 0 || byte > 255) return cudaErrorInvalidValue;
    for (int r = 0; r < c->world; ++r) {
        if (c->self >= 0 && r != c->self) continue;  // a peer process poisons its own
        COLL_TRY(fill(*c, r, c->out[r], byte, (size_t)c->out_bytes));
        COLL_TRY(fill(*c, r, c->recv[r], byte, (size_t)c->in_bytes));
    }
#ifdef CUDALAB_HAVE_NCCL
    // One process per rank: no rank's kernel may store into a peer's output or receive buffer, or read
    // its input, before that peer has uploaded and poisoned (the ring's first step and the peer copy
    // wait for nothing): every rank waits here for every other.
    if (c->self >= 0) COLL_TRY(ipc_barrier(*c, c->stream[0]));
#endif
    COLL_TRY(cudaSetDevice(c->dev[0]));
    return 0;
}

#ifdef CUDALAB_FAULTS
// The fault build's stalled rank (collectives_set_fault_stall_rank), -1 for none. In the product there
// is none: the kernels have no stall check at all.
static int g_fault_stall_rank = -1;

extern "C" cudalab_status collectives_set_fault_stall_rank(int rank) {
    if (rank < -1) return cudaErrorInvalidValue;
    g_fault_stall_rank = rank;
    return 0;
}
#endif

#ifdef CUDALAB_HAVE_NCCL
namespace {
int fault_ipc(const char *kind, int rank);
}
#endif

extern "C" cudalab_status collectives_run(int handle, int variant, int dtype, long long n) {
    Comm *c = get(handle);
    if (!c) return cudaErrorInvalidValue;
#if defined(CUDALAB_FAULTS) && defined(CUDALAB_HAVE_NCCL)
    if (c->self >= 0 && fault_ipc("hang", c->self)) std::this_thread::sleep_for(std::chrono::hours(1));
#endif
    COLL_TRY(check_run(*c, variant, dtype, n));
#ifdef CUDALAB_FAULTS
    const int stall_rank = g_fault_stall_rank;
    if (stall_rank >= c->world) return cudaErrorInvalidValue;
#else
    const int stall_rank = -1;
#endif
    COLL_TRY(enqueue(*c, variant, dtype, n, stall_rank, 3, nullptr, false));
    return run_sync(*c, variant, dtype, n);
}

extern "C" cudalab_status collectives_run_direction(int handle, int variant, int dtype, long long n, int direction) {
    Comm *c = get(handle);
    if (!c || direction < 1 || direction > 3) return cudaErrorInvalidValue;
    COLL_TRY(check_run(*c, variant, dtype, n));
    COLL_TRY(enqueue(*c, variant, dtype, n, -1, direction, nullptr, false));
    return run_sync(*c, variant, dtype, n);
}

extern "C" cudalab_status collectives_enqueue(int handle, int variant, int dtype, long long n, void *stream) {
    Comm *c = get(handle);
    if (!c) return cudaErrorInvalidValue;
    COLL_TRY(check_run(*c, variant, dtype, n));
    return enqueue(*c, variant, dtype, n, -1, 3, (cudaStream_t)stream, true);
}

extern "C" cudalab_status collectives_check(int handle) {
    Comm *c = get(handle);
    if (!c) return cudaErrorInvalidValue;
    COLL_TRY(sync_all(*c));
    COLL_TRY(cudaDeviceSynchronize());
    return check_records(*c);
}

extern "C" cudalab_status collectives_last_failure(int handle, int *info) {
    Comm *c = get(handle);
    if (!c || !info) return cudaErrorInvalidValue;
    info[0] = c->last.rank;
    info[1] = c->last.step;
    info[2] = c->last.chunk;
    info[3] = c->last.phase;
    info[4] = c->last.peer;
    return 0;
}

extern "C" cudalab_status collectives_tp_mlp(int handle, int ar, int gemm, int overlap, int chunks, int T, int H,
                                             int F, const cudalab_bf16 *x, const cudalab_bf16 *w1,
                                             const cudalab_bf16 *w2, float *y) {
    Comm *c = get(handle);
    if (!c || !x || !w1 || !w2 || !y) return cudaErrorInvalidValue;
    TpBuffers t;
    COLL_TRY(tp_open(*c, t, ar, gemm, chunks, T, H, F));
    const int Fr = F / c->world;
    cudaError_t e = cudaSuccess;
    for (int r = 0; r < c->world && e == cudaSuccess; ++r) {
        if (c->use_devices || r == 0) e = h2d(*c, r, t.x[r], x, (size_t)T * H * 2);
        if (e == cudaSuccess)  // rows r*Fr .. of W1 (F x H): contiguous
            e = h2d(*c, r, t.w1[r], w1 + (size_t)r * Fr * H, (size_t)Fr * H * 2);
        if (e == cudaSuccess)  // columns r*Fr .. of W2 (H x F): a pitched copy into H x Fr, on the rank's stream
            e = cudaMemcpy2DAsync(t.w2[r], (size_t)Fr * 2, w2 + (size_t)r * Fr, (size_t)F * 2, (size_t)Fr * 2, H,
                                  cudaMemcpyHostToDevice, rank_stream(*c, r));
        if (e == cudaSuccess) e = cudaStreamSynchronize(rank_stream(*c, r));
    }
    if (e == cudaSuccess) e = tp_forward(*c, t, ar, gemm, overlap, chunks, T, H, Fr);
    if (e == cudaSuccess) e = sync_all(*c);
    if (e == cudaSuccess) e = check_records(*c);
    for (int r = 0; r < c->world && e == cudaSuccess; ++r) e = d2h(*c, r, y + (size_t)r * T * H, c->out[r], (size_t)T * H * 4);
    tp_free(*c, t);
    COLL_TRY(e);
    return 0;
}

extern "C" cudalab_status collectives_tp_split(int handle, int ar, int gemm, int overlap, int chunks, int T,
                                               int H, int F, int *split) {
    Comm *c = get(handle);
    if (!c || !split) return cudaErrorInvalidValue;
    COLL_TRY(tp_check(*c, ar, gemm, chunks, T, H, F));
    TpSplit sp{0, c->blocks};
    COLL_TRY(cudaSetDevice(c->dev[0]));
    if (overlap) COLL_TRY(tp_forward_split(*c, gemm, tp_blocks(T, chunks), H, F / c->world, &sp));
    split[0] = sp.gemm_sms;
    split[1] = sp.blocks;
    return 0;
}

extern "C" cudalab_status collectives_tp_mlp_time(int handle, int ar, int gemm, int overlap, int chunks, int T,
                                                  int H, int F, int iters, float *ms) {
    Comm *c = get(handle);
    if (!c || !ms || iters < 1) return cudaErrorInvalidValue;
    TpBuffers t;
    COLL_TRY(tp_open(*c, t, ar, gemm, chunks, T, H, F));
    const int Fr = F / c->world;
    cudaError_t e = cudaSuccess;
    for (int r = 0; r < c->world && e == cudaSuccess; ++r) {
        e = cudaSetDevice(c->dev[r]);
        // Scales that keep the activations near 1 (sums of H and F/world products).
        cudaStream_t s = rank_stream(*c, r);
        if (e == cudaSuccess && (c->use_devices || r == 0)) {
            fill_bf16_kernel<<<1024, 256, 0, s>>>(t.x[r], (long long)T * H, 1, 1.0f);
            e = cudaGetLastError();
        }
        if (e == cudaSuccess) {
            fill_bf16_kernel<<<1024, 256, 0, s>>>(t.w1[r], (long long)Fr * H, 100 + r, 1.0f / sqrtf((float)H));
            fill_bf16_kernel<<<1024, 256, 0, s>>>(t.w2[r], (long long)H * Fr, 200 + r, 1.0f / sqrtf((float)F));
            e = cudaGetLastError();
        }
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    }
    std::vector<float> times;
    for (int i = 0; i < iters + 1 && e == cudaSuccess; ++i) {  // one warm-up
        const auto t0 = std::chrono::steady_clock::now();
        e = tp_forward(*c, t, ar, gemm, overlap, chunks, T, H, Fr);
        if (e == cudaSuccess) e = sync_all(*c);
        const auto t1 = std::chrono::steady_clock::now();
        if (i > 0) times.push_back((float)std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    if (e == cudaSuccess) e = check_records(*c);
    tp_free(*c, t);
    COLL_TRY(e);
    std::sort(times.begin(), times.end());
    ms[0] = times[times.size() / 2];
    return 0;
}

// ================================================================================================
// One process per rank (the executable under `invoke run --ranks`, mpirun or srun): NCCL only.
// ================================================================================================
// results[3 * op + k]: op 0 all-reduce, 1 all-gather, 2 reduce-scatter; k 0 = ms per call,
// 1 = mismatching elements, 2 = elements per rank. Returns 0, or a cudaError_t (message in
// collectives_last_message).
extern "C" int collectives_rank_run(int rank, int world, int local_rank, const char *id_file, long long n, int dtype,
                                    int iters, long long timeout_ms, double *results) {
#ifndef CUDALAB_HAVE_NCCL
    (void)rank, (void)world, (void)local_rank, (void)id_file, (void)n, (void)dtype, (void)iters, (void)timeout_ms,
        (void)results;
    g_message = "the process-per-rank path runs NCCL, and this build has no NCCL (pip install -e '.[nccl]', then rebuild)";
    return cudaErrorNotSupported;
#else
    no_multicast();
    const double deadline = (double)timeout_ms * 1e-3;
    int ndev = 0;
    COLL_TRY(cudaGetDeviceCount(&ndev));
    if (local_rank < 0 || local_rank >= ndev) {
        char buf[200];
        snprintf(buf, sizeof buf, "rank %d: local rank %d has no GPU (%d visible)", rank, local_rank, ndev);
        g_message = buf;
        return cudaErrorInvalidDevice;
    }
    COLL_TRY(cudaSetDevice(local_rank));
    std::vector<ncclComm_t> comm(1, nullptr);
    const std::vector<int> devs{local_rank};
    cudaError_t e = nccl_rank_comm(rank, world, id_file, deadline, &comm[0], nullptr);
    if (e != cudaSuccess) return e;
    ncclResult_t r = ncclSuccess;
    const int es = elt_size(dtype);
    const long long nrs = std::max<long long>(world, n - n % world);  // reduce-scatter: a multiple of world
    const long long cap = std::max(n, nrs) * world;
    cudaStream_t s = nullptr;
    void *in = nullptr, *out = nullptr;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    auto cleanup = [&]() {
        if (comm[0]) (void)ncclCommDestroy(comm[0]);
        if (in) (void)cudaFree(in);
        if (out) (void)cudaFree(out);
        if (s) (void)cudaStreamDestroy(s);
        if (e0) (void)cudaEventDestroy(e0);
        if (e1) (void)cudaEventDestroy(e1);
    };
    e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(&in, (size_t)std::max(n, nrs) * es);
    if (e == cudaSuccess) e = cudaMalloc(&out, (size_t)cap * es);
    if (e == cudaSuccess) e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    // Integer-valued inputs, exact in every dtype for world <= 8: element i of rank q is (q+1)*(i%7+1).
    std::vector<unsigned char> host((size_t)cap * es);
    auto value = [&](long long i, int q) { return (double)(q + 1) * (double)(i % 7 + 1); };
    auto put = [&](std::vector<unsigned char> &buf, long long i, double v) {
        if (dtype == 0) { float f = (float)v; memcpy(&buf[(size_t)i * 4], &f, 4); }
        else if (dtype == 2) { int k = (int)v; memcpy(&buf[(size_t)i * 4], &k, 4); }
        else { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); uint16_t h = (uint16_t)(u >> 16); memcpy(&buf[(size_t)i * 2], &h, 2); }
    };
    auto get_v = [&](const std::vector<unsigned char> &buf, long long i) -> double {
        if (dtype == 0) { float f; memcpy(&f, &buf[(size_t)i * 4], 4); return f; }
        if (dtype == 2) { int k; memcpy(&k, &buf[(size_t)i * 4], 4); return k; }
        uint16_t h; memcpy(&h, &buf[(size_t)i * 2], 2); uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
    };
    const double tri = (double)world * (world + 1) / 2;
    for (int op = 0; op < 3 && e == cudaSuccess; ++op) {
        const long long cnt = op == 2 ? nrs : n;
        for (long long i = 0; i < cnt; ++i) put(host, i, value(i, rank));
        // On NCCL's stream s (non-blocking, so unordered with the default stream): a default-stream
        // memset could land after the collective wrote out, a pageable copy's DMA after it read in.
        e = cudaMemcpyAsync(in, host.data(), (size_t)cnt * es, cudaMemcpyHostToDevice, s);
        if (e == cudaSuccess) e = cudaMemsetAsync(out, 0xAB, (size_t)cap * es, s);  // poisoned
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) break;
        float total_ms = 0.f;
        // Call 0 is checked on the host, which takes each rank its own time (seconds at 256 MiB), so
        // the ranks leave it apart; the first timed call would wait on the GPU for the last rank and
        // count that skew as the collective's time. Calls 1 and 2, each waited to completion, line
        // the ranks up again: a collective ends on every rank only once all have joined it, and the
        // second one's wait is short enough to be polled without sleeping. The rest are timed.
        constexpr int kAlign = 2;
        for (int it = 0; it < iters + 1 + kAlign && e == cudaSuccess; ++it) {
            if (it == 1 + kAlign) e = cudaEventRecord(e0, s);
            if (e != cudaSuccess) break;
            if (op == 0) r = ncclAllReduce(in, out, (size_t)cnt, nccl_type(dtype), ncclSum, comm[0], s);
            else if (op == 1) r = ncclAllGather(in, out, (size_t)cnt, nccl_type(dtype), comm[0], s);
            else r = ncclReduceScatter(in, out, (size_t)(cnt / world), nccl_type(dtype), ncclSum, comm[0], s);
            if (r != ncclSuccess && r != ncclInProgress) {
                e = nccl_failed(nullptr, kNames[VNCCL_AR + op], r, rank);
                break;
            }
            e = nccl_wait(nullptr, comm, devs, nullptr, deadline, kNames[VNCCL_AR + op], rank);
            if (e == cudaSuccess && it == 0) {
                const std::vector<cudaStream_t> ss{s};
                e = nccl_wait(nullptr, comm, devs, &ss, deadline, kNames[VNCCL_AR + op], rank);
                const long long outn = op == 0 ? cnt : op == 1 ? cnt * world : cnt / world;
                if (e == cudaSuccess) e = cudaMemcpyAsync(host.data(), out, (size_t)outn * es, cudaMemcpyDeviceToHost, s);
                if (e == cudaSuccess) e = cudaStreamSynchronize(s);
                long long bad = 0;
                for (long long i = 0; i < outn && e == cudaSuccess; ++i) {
                    double want = op == 0 ? tri * (double)(i % 7 + 1)
                                  : op == 1 ? value(i % cnt, (int)(i / cnt))
                                            : tri * (double)(((long long)rank * (cnt / world) + i) % 7 + 1);
                    if (get_v(host, i) != want) ++bad;
                }
                results[3 * op + 1] = (double)bad;
                results[3 * op + 2] = (double)cnt;
            } else if (e == cudaSuccess && it <= kAlign) {
                const std::vector<cudaStream_t> ss{s};
                e = nccl_wait(nullptr, comm, devs, &ss, deadline, kNames[VNCCL_AR + op], rank);
            }
        }
        if (e == cudaSuccess) e = cudaEventRecord(e1, s);
        if (e == cudaSuccess) {
            const std::vector<cudaStream_t> ss{s};
            e = nccl_wait(nullptr, comm, devs, &ss, deadline, kNames[VNCCL_AR + op], rank);
        }
        if (e == cudaSuccess) e = cudaEventElapsedTime(&total_ms, e0, e1);
        if (e == cudaSuccess) results[3 * op + 0] = iters > 0 ? total_ms / iters : 0.0;
    }
    if (e != cudaSuccess && comm[0]) {
        (void)ncclCommAbort(comm[0]);
        comm[0] = nullptr;
    }
    cleanup();
    return (int)e;
#endif
}

// ================================================================================================
// One process per rank with the lab's kernels: buffers mapped through CUDA IPC
// ================================================================================================
#ifdef CUDALAB_HAVE_NCCL
namespace {
// What each rank hands every other once: its buffers' IPC handles and what they must match.
struct IpcRecord {
    unsigned long long magic, token;
    int rank, world, pid, blocks;
    long long in_bytes, out_bytes, scratch_bytes, flag_count;
    cudaIpcMemHandle_t h[5];  // in, out, recv, scratch, flags
};
constexpr unsigned long long kIpcMagic = 0x636f6c6c69706331ull;  // "collipc1"
// The canary in the last word of each rank's flags: proves a mapped buffer is that rank's, of this run.
unsigned long long canary(unsigned long long token, int rank) { return token ^ (0x9E3779B97F4A7C15ull * (rank + 1)); }

// Progress marks beside the id file (when there is one), so that a rank which waited in vain can say
// which peers never reached a stage: "<id file>.<stage>.<rank>".
std::string mark_path(const char *id_file, const char *stage, int rank) {
    return std::string(id_file) + "." + stage + "." + std::to_string(rank);
}
void mark(const char *id_file, const char *stage, int rank) {
    if (!id_file || !*id_file) return;
    if (FILE *f = fopen(mark_path(id_file, stage, rank).c_str(), "wb")) fclose(f);
}
void unmark(const char *id_file, const char *stage, int rank) {
    if (id_file && *id_file) remove(mark_path(id_file, stage, rank).c_str());
}
std::string missing(const char *id_file, const char *stage, int world) {
    if (!id_file || !*id_file) return "";
    std::string out;
    for (int q = 0; q < world; ++q)
        if (FILE *f = fopen(mark_path(id_file, stage, q).c_str(), "rb")) fclose(f);
        else out += (out.empty() ? "" : ", ") + std::to_string(q);
    return out;
}

// An NCCL all-gather of `bytes` per rank from host `mine` into host `all`, waited for under the deadline.
cudaError_t host_allgather(Comm &c, const void *mine, void *all, size_t bytes, const char *what) {
    unsigned char *d = nullptr;
    COLL_TRY(cudaMalloc(&d, bytes * (c.world + 1)));
    cudaStream_t s = c.stream[0];
    cudaError_t e = cudaMemcpyAsync(d, mine, bytes, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e == cudaSuccess) {
        const ncclResult_t r = ncclAllGather(d, d + bytes, bytes, ncclUint8, c.nccl[0], s);
        if (r != ncclSuccess && r != ncclInProgress) e = nccl_failed(&c, what, r, c.self);
    }
    if (e == cudaSuccess) {
        const std::vector<cudaStream_t> ss{s};
        e = nccl_wait(&c, c.nccl, c.dev, &ss, (double)c.timeout_ns * 1e-9, what, c.self);
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(all, d + bytes, bytes * c.world, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    (void)cudaFree(d);
    return e;
}

// Every rank reaches this point (the ranks' kernels are done with each other's buffers): an NCCL
// all-reduce of one word, on `s`, waited for under the deadline.
cudaError_t ipc_barrier(Comm &c, cudaStream_t s) {
    if (c.nccl.empty()) return nccl_init_all(c);  // aborted earlier: says so
    const ncclResult_t r = ncclAllReduce(c.sync_buf, c.sync_buf, 1, ncclInt32, ncclSum, c.nccl[0], s);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_failed(&c, "barrier (ncclAllReduce)", r, c.self);
    const std::vector<cudaStream_t> ss{s};
    const cudaError_t e = nccl_wait(&c, c.nccl, c.dev, &ss, (double)c.timeout_ns * 1e-9, "barrier", c.self);
    if (e != cudaSuccess) c.nccl.clear();
    return e;
}

#ifdef CUDALAB_FAULTS
// The fault build's rank faults for the process-per-rank tests: CUDALAB_FAULT_IPC=KIND:RANK, KIND one of
// foreign (its record claims another run), freed (its flags buffer is freed after its handle was
// taken), noopen (it never opens its peers' handles: sleeps), exit (it dies after the exchange),
// hang (it sleeps in its first collectives_run, after every rank's upload and poison).
int fault_ipc(const char *kind, int rank) {
    const char *v = getenv("CUDALAB_FAULT_IPC");
    const size_t k = strlen(kind);
    return v && strncmp(v, kind, k) == 0 && v[k] == ':' && atoi(v + k + 1) == rank;
}
#else
int fault_ipc(const char *, int) { return 0; }
#endif
}  // namespace
#endif

extern "C" cudalab_status collectives_comm_create_rank(int rank, int world, int local_rank, const char *id_file,
                                                       long long in_bytes, long long out_bytes, int blocks_per_rank,
                                                       long long timeout_ms, int *handle) {
#ifndef CUDALAB_HAVE_NCCL
    (void)rank, (void)world, (void)local_rank, (void)id_file, (void)in_bytes, (void)out_bytes, (void)blocks_per_rank,
        (void)timeout_ms, (void)handle;
    g_message = "one process per rank exchanges its buffers through NCCL, and this build has no NCCL "
                "(pip install -e '.[nccl]', then rebuild)";
    return cudaErrorNotSupported;
#else
    if (world < 1 || rank < 0 || rank >= world || in_bytes < 1 || out_bytes < 1 || blocks_per_rank < 0 ||
        blocks_per_rank > kMaxBlocksPerRank || timeout_ms < 1 || !handle)
        return cudaErrorInvalidValue;
    no_multicast();
    int ndev = 0;
    COLL_TRY(cudaGetDeviceCount(&ndev));
    if (local_rank < 0 || local_rank >= ndev) {
        g_message = "rank " + std::to_string(rank) + ": local rank " + std::to_string(local_rank) + " has no GPU (" +
                    std::to_string(ndev) + " visible)";
        return cudaErrorInvalidDevice;
    }
    COLL_TRY(cudaSetDevice(local_rank));
    Comm *c = new Comm();
    c->world = world;
    c->use_devices = 1;
    c->self = rank;
    c->in_bytes = in_bytes;
    c->out_bytes = out_bytes;
    c->timeout_ns = (unsigned long long)timeout_ms * 1000000ull;
    c->dev.assign(world, local_rank);
    const std::string me = "rank " + std::to_string(rank) + ": ";
    auto fail = [&](cudaError_t e) {
        free_comm(c);
        return (int)e;
    };
    int resident = 0;
    if (cudaError_t e = resident_blocks(&resident); e != cudaSuccess) return fail(e);
    c->blocks = blocks_per_rank ? blocks_per_rank : std::min(32, resident);
    if (c->blocks > resident) return fail(cudaErrorCooperativeLaunchTooLarge);
    if (cudaError_t e = comm_alloc(*c, rank); e != cudaSuccess) return fail(e);
    if (cudaError_t e = cudaMalloc(&c->sync_buf, 16); e != cudaSuccess) return fail(e);
    const double deadline = (double)timeout_ms * 1e-3;
    unsigned long long token = 0;
    c->nccl.assign(1, nullptr);
    if (cudaError_t e = nccl_rank_comm(rank, world, id_file, deadline, &c->nccl[0], &token); e != cudaSuccess) {
        c->nccl.clear();
        return fail(e);
    }
    // This rank's record; its canary goes into its own flags before anyone can map them.
    IpcRecord mine{};
    mine.magic = kIpcMagic;
    mine.token = token ^ (fault_ipc("foreign", rank) ? 1ull : 0ull);
    mine.rank = rank;
    mine.world = world;
    mine.pid = (int)getpid();
    mine.blocks = c->blocks;
    mine.in_bytes = in_bytes;
    mine.out_bytes = out_bytes;
    mine.scratch_bytes = c->scratch_bytes;
    mine.flag_count = c->flag_count;
    const unsigned long long can = canary(token, rank);
    if (cudaError_t e = h2d(*c, rank, c->flags[rank] + c->flag_count - 1, &can, 8); e != cudaSuccess) return fail(e);
    unsigned char *own[5] = {c->in[rank], c->out[rank], c->recv[rank], c->scratch[rank],
                             (unsigned char *)c->flags[rank]};
    for (int k = 0; k < 5; ++k)
        if (cudaError_t e = cudaIpcGetMemHandle(&mine.h[k], own[k]); e != cudaSuccess) return fail(e);
    if (fault_ipc("freed", rank)) {  // the handle now names a freed buffer
        (void)cudaFree(c->flags[rank]);
        c->flags[rank] = nullptr;
    }
    mark(id_file, "joined", rank);
    std::vector<IpcRecord> all(world);
    if (cudaError_t e = host_allgather(*c, &mine, all.data(), sizeof mine, "the IPC handle exchange"); e != cudaSuccess) {
        const std::string who = missing(id_file, "joined", world);
        if (!who.empty()) g_message = me + "the IPC handle exchange did not finish: rank(s) " + who + " never joined it";
        return fail(e);
    }
    if (fault_ipc("noopen", rank)) std::this_thread::sleep_for(std::chrono::hours(1));
    // Open every peer's buffers; the first refusal is this rank's verdict: {code, peer} (0 = all opened).
    int verdict[2] = {0, -1};
    std::string why;
    for (int p = 0; p < world && !verdict[0]; ++p) {
        if (p == rank) continue;
        const IpcRecord &R = all[p];
        if (R.magic != kIpcMagic || R.token != token || R.rank != p || R.world != world) {
            verdict[0] = -1, verdict[1] = p;
            break;
        }
        if (R.in_bytes != in_bytes || R.out_bytes != out_bytes || R.scratch_bytes != c->scratch_bytes ||
            R.flag_count != c->flag_count || R.blocks != c->blocks) {
            verdict[0] = -2, verdict[1] = p;
            break;
        }
        c->mapped[p] = 1;
        void **dst[5] = {(void **)&c->in[p], (void **)&c->out[p], (void **)&c->recv[p], (void **)&c->scratch[p],
                         (void **)&c->flags[p]};
        for (int k = 0; k < 5 && !verdict[0]; ++k) {
            const cudaError_t e = cudaIpcOpenMemHandle(dst[k], R.h[k], cudaIpcMemLazyEnablePeerAccess);
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                *dst[k] = nullptr;
                verdict[0] = (int)e, verdict[1] = p;
            }
        }
        unsigned long long seen = 0;
        if (!verdict[0] && (d2h(*c, rank, &seen, c->flags[p] + c->flag_count - 1, 8) != cudaSuccess ||
                            seen != canary(token, p)))
            verdict[0] = -3, verdict[1] = p;
        // A hello in the owner's flags (slot `rank`), which the owner looks for in its own live buffer
        // below: a handle of a buffer freed after it was taken still opens, and still holds the canary.
        const unsigned long long hello = canary(token, rank) ^ 0x5a5a5a5a5a5a5a5aull;
        if (!verdict[0] && h2d(*c, rank, c->flags[p] + c->flag_count - 1 - world + rank, &hello, 8) != cudaSuccess)
            verdict[0] = -3, verdict[1] = p;
    }
    mark(id_file, "opened", rank);
    std::vector<int> verdicts(2 * world);
    if (cudaError_t e = host_allgather(*c, verdict, verdicts.data(), sizeof verdict, "the IPC open check");
        e != cudaSuccess) {
        const std::string who = missing(id_file, "opened", world);
        if (!who.empty()) g_message = me + "rank(s) " + who + " never opened their peers' IPC handles within the deadline";
        return fail(e);
    }
    // Every peer's hello must be in this rank's own flags (the all-gather above ordered them before).
    bool clean = true;
    for (int q = 0; q < world; ++q) clean = clean && verdicts[2 * q] == 0;
    if (clean) {
        int own[2] = {0, -1};
        std::vector<unsigned long long> hellos(world, 0);
        if (!c->flags[rank] ||
            d2h(*c, rank, hellos.data(), c->flags[rank] + c->flag_count - 1 - world, 8 * world) != cudaSuccess)
            own[0] = -4, own[1] = rank;
        for (int p = 0; p < world && !own[0]; ++p)
            if (p != rank && hellos[p] != (canary(token, p) ^ 0x5a5a5a5a5a5a5a5aull)) own[0] = -4, own[1] = rank;
        std::vector<int> second(2 * world);
        if (cudaError_t e = host_allgather(*c, own, second.data(), sizeof own, "the IPC hello check"); e != cudaSuccess)
            return fail(e);
        verdicts = second;
    }
    for (int q = 0; q < world; ++q) {
        const int code = verdicts[2 * q], p = verdicts[2 * q + 1];
        if (!code) continue;
        const std::string what =
            code == -1   ? "its record belongs to another run (or is not one)"
            : code == -2 ? "its buffers' sizes differ from this rank's"
            : code == -3 ? "the mapped flags are not that rank's of this run"
            : code == -4 ? "its handles name buffers it no longer holds (freed after the handle was taken)"
                         : std::string("cudaIpcOpenMemHandle failed with ") + cudaGetErrorName((cudaError_t)code) +
                               " (a freed buffer, or another process's)";
        g_message = me + "rank " + std::to_string(q) + " refused rank " + std::to_string(p) + "'s IPC handles: " + what;
        return fail(cudaErrorInvalidResourceHandle);
    }
    unmark(id_file, "joined", rank);
    unmark(id_file, "opened", rank);
    if (cudaError_t e = comm_table(*c); e != cudaSuccess) return fail(e);
#ifdef CUDALAB_FAULTS
    if (fault_ipc("exit", rank)) _exit(3);
#endif
    g_comms.push_back(c);
    handle[0] = (int)g_comms.size() - 1;
    return 0;
#endif
}

extern "C" int collectives_comm_rank(int handle) {
    Comm *c = get(handle);
    return c ? c->self : -2;
}

extern "C" int collectives_auto_variant(int handle, int dtype, long long n) {
    Comm *c = get(handle);
    if (!c || dtype < 0 || dtype > 2 || n < 1) return -1;
    return auto_variant(*c, dtype, n);
}

// iters calls, back to back, eager or as one CUDA graph of iters calls; ms = milliseconds per call.
extern "C" cudalab_status collectives_time(int handle, int variant, int dtype, long long n, int iters, int graph,
                                           float *ms) {
    Comm *c = get(handle);
    if (!c || !ms || iters < 1 || graph < 0 || graph > 1) return cudaErrorInvalidValue;
    COLL_TRY(check_run(*c, variant, dtype, n));
    const int v = variant == VAUTO ? auto_variant(*c, dtype, n) : variant;
    if (graph && !device_epoch(v) && !needs_nccl(v)) {
        g_message = std::string(kNames[v]) + " takes its epoch from the host at each launch, which a graph would "
                    "replay unchanged: graphs run 04_oneshot_signal, 05_twoshot_allreduce and NCCL";
        return cudaErrorNotSupported;
    }
    COLL_TRY(cudaSetDevice(c->dev[0]));
    cudaStream_t s = nullptr;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    auto done = [&](cudaError_t e) {
        if (ge) (void)cudaGraphExecDestroy(ge);
        if (g) (void)cudaGraphDestroy(g);
        if (e0) (void)cudaEventDestroy(e0);
        if (e1) (void)cudaEventDestroy(e1);
        if (s) (void)cudaStreamDestroy(s);
        return (int)e;
    };
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    for (int w = 0; w < 3 && e == cudaSuccess; ++w) e = enqueue(*c, v, dtype, n, -1, 3, s, true);  // warm-up
    if (e == cudaSuccess && graph) {
        e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        for (int i = 0; i < iters && e == cudaSuccess; ++i) e = enqueue(*c, v, dtype, n, -1, 3, s, true);
        const cudaError_t end = cudaStreamEndCapture(s, &g);
        if (e == cudaSuccess) e = end;
        if (e == cudaSuccess) e = cudaGraphInstantiate(&ge, g, 0);
        if (e == cudaSuccess) e = cudaGraphLaunch(ge, s);  // the first replay uploads the graph
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e == cudaSuccess) e = check_records(*c);
    // One process per rank: start the timed calls together (each rank times from its own start).
#ifdef CUDALAB_HAVE_NCCL
    if (e == cudaSuccess && c->self >= 0) e = ipc_barrier(*c, s);
#endif
    if (e == cudaSuccess) e = cudaEventRecord(e0, s);
    if (graph) {
        if (e == cudaSuccess) e = cudaGraphLaunch(ge, s);
    } else {
        for (int i = 0; i < iters && e == cudaSuccess; ++i) e = enqueue(*c, v, dtype, n, -1, 3, s, true);
    }
    if (e == cudaSuccess) e = cudaEventRecord(e1, s);
    if (e == cudaSuccess) e = cudaEventSynchronize(e1);
    if (e == cudaSuccess) e = check_records(*c);
    float total = 0.f;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&total, e0, e1);
    if (e == cudaSuccess) ms[0] = total / iters;
    return done(e);
}
