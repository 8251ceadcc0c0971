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
//   are gemm_tc's 02_mma_sync (cuda/shared/gemm_tc/k02_mma_sync.cuh: the rung and its launch function,
//   gemm_tc::launch_mma_sync).
//
// One kernel body, two launches. Each collective kernel takes the table of every rank's pointers. With
// a.rank >= 0 it is launched on rank a.rank's GPU, one block per chunk lane; with a.rank < 0 it is ONE
// cooperative launch of world x blocks_per_rank blocks on one GPU, block i serving virtual rank
// i / blocks_per_rank. Both go through cudaLaunchCooperativeKernel, so every block is resident.
//
// No hang: spin_until bounds every wait by %globaltimer and records the first expiry (rank, step,
// chunk, phase) in the launch's error record; the other spinning threads see the record and leave too.
#include "collectives.h"

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
#include "gemm_tc/k02_mma_sync.cuh"

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
    VCOUNT = 9
};
const char *const kNames[VCOUNT] = {"01_p2p_copy",     "01_memcpy_peer", "02_ring_allreduce",
                                    "03_oneshot_allreduce", "nccl_allreduce", "nccl_allgather",
                                    "nccl_reducescatter",   "tp_mlp",         "tp_mlp_overlap"};
bool needs_nccl(int v) { return v == VNCCL_AR || v == VNCCL_AG || v == VNCCL_RS; }

constexpr int kThreads = 512;
// The ring cuts each rank's segment into at most this many chunks (its flags: 2 x world x kCpsMax per
// rank); the one-shot barrier uses 2 x blocks x world of the same flags, so blocks <= kCpsMax.
constexpr int kCpsMax = 256;
constexpr int kMaxBlocksPerRank = 64;
constexpr long long kChunkBytesMax = 512 << 10;  // a chunk in flight per block: enough to fill a link
enum Phase { PH_RS = 0, PH_AG = 1, PH_START = 2, PH_END = 3, PH_NCCL = 4 };

struct RankPtrs {
    unsigned char *in, *out, *recv;
    unsigned long long *flags;
};
struct ErrRec {
    unsigned int code;
    int rank, step, chunk, phase;
};
struct CollArgs {
    const RankPtrs *ranks;
    ErrRec *err;
    int world, rank, blocks_per_rank, dtype, stall_rank, direction, cps;
    long long n, base, seg_len, chunk;
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

// One thread waits until *f reaches the call's epoch. False when the deadline passed (the first such
// thread of the launch records where) or another thread of the launch already gave up.
__device__ bool spin_until(const CollArgs &a, const unsigned long long *f, int rank, int step, int chunk,
                           int phase) {
    if (ld_acquire(f) >= a.epoch) return true;
    const unsigned long long t0 = now_ns();
    for (;;) {
        __nanosleep(128);
        if (ld_acquire(f) >= a.epoch) return true;
        if (*(volatile unsigned int *)&a.err->code != 0u) return false;
        if (now_ns() - t0 > a.timeout_ns) {
            if (atomicCAS(&a.err->code, 0u, 1u) == 0u) {
                a.err->rank = rank;
                a.err->step = step;
                a.err->chunk = chunk;
                a.err->phase = phase;
                __threadfence();
            }
            return false;
        }
    }
}
// The whole block waits on one flag (thread 0 spins); the answer reaches every thread.
__device__ bool block_wait(const CollArgs &a, const unsigned long long *f, int rank, int step, int chunk, int phase) {
    int ok = 1;
    if (threadIdx.x == 0) ok = spin_until(a, f, rank, step, chunk, phase);
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
            if (s > 0 && !block_wait(a, me.flags + f, r, s, c, PH_RS)) return;
            range_add(lo, hi, in, s > 0 ? recv : (const T *)nullptr, rrecv, (T *)nullptr);
            block_signal(right.flags + f, a.epoch);
        }
        // Segment r: the last partial plus this rank's input is the answer; it goes to this rank's
        // output and, as the all-gather's first step, to the right neighbour's.
        chunk_range(a, r, c, &lo, &hi);
        if (lo < hi) {
            const int f = r * a.cps + c;
            if (W > 1 && !block_wait(a, me.flags + f, r, W - 1, c, PH_RS)) return;
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
            if (!block_wait(a, me.flags + f, r, W - 1 + t, c, PH_AG)) return;
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
        ok = spin_until(a, a.ranks[r].flags + slot + p, r, which, b, which == 0 ? PH_START : PH_END);
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

struct TpBuffers {
    std::vector<cudalab_bf16 *> x, w1, w2, g;
    std::vector<float *> h;
};

struct Comm {
    int world = 0, use_devices = 0, blocks = 1;
    long long in_bytes = 0, out_bytes = 0, flag_count = 0;
    unsigned long long timeout_ns = 0, epoch = 0;
    std::vector<int> dev;  // each rank's device (virtual ranks: all the same)
    std::vector<unsigned char *> in, out, recv;
    std::vector<unsigned long long *> flags;
    std::vector<RankPtrs *> table;  // the rank table, one copy on each launching device
    std::vector<ErrRec *> err;      // one error record per launch (virtual: 1, devices: world)
    std::vector<cudaStream_t> stream, stream2;
    std::vector<cudaEvent_t> ev_fork, ev_done;
    ErrRec last{};
    int launches() const { return use_devices ? world : 1; }
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
                             (const void *)p2p_copy_kernel};
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
        for (void *p : {(void *)c->in[r], (void *)c->out[r], (void *)c->recv[r], (void *)c->flags[r]})
            if (p) (void)cudaFree(p);
    }
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
cudaStream_t rank_stream(const Comm &c, int r) { return c.stream[c.use_devices ? r : 0]; }

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
            static const char *const phase[] = {"reduce-scatter", "all-gather", "start barrier", "end barrier",
                                                "NCCL"};
            char buf[256];
            snprintf(buf, sizeof buf,
                     "rank %d gave up waiting at %s step %d (chunk or block %d): a peer never reached that "
                     "step within the deadline",
                     e.rank, phase[e.phase < 5 ? e.phase : 0], e.step, e.chunk);
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
    const void *kernel = variant == V02_RING      ? (const void *)ring_allreduce_kernel
                         : variant == V03_ONESHOT ? (const void *)oneshot_allreduce_kernel
                                                  : (const void *)p2p_copy_kernel;
    if (variant == V02_RING) ring_geometry(c, dtype, n, &a);
    if (variant == V01_P2P) a.n = n * elt_size(dtype);  // the copy counts bytes
    for (int l = 0; l < c.launches(); ++l) {
        COLL_TRY(cudaSetDevice(launch_device(c, l)));
        a.rank = c.use_devices ? l : -1;
        a.ranks = c.table[l];
        a.err = c.err[l];
        void *args[] = {&a};
        const unsigned grid = (unsigned)(c.use_devices ? c.blocks : c.blocks * c.world);
        COLL_TRY(cudaLaunchCooperativeKernel(kernel, dim3(grid), dim3(kThreads), args, 0, streams[l]));
    }
    COLL_TRY(cudaSetDevice(c.dev[0]));
    return cudaSuccess;
}

cudaError_t enqueue_memcpy_peer(Comm &c, int dtype, long long n, int direction, const std::vector<cudaStream_t> &streams) {
    const size_t bytes = (size_t)n * elt_size(dtype);
    for (int r = 0; r < 2; ++r) {
        if (!(direction & (r == 1 ? 1 : 2))) continue;
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
    if (c) c->last = ErrRec{1u, rank, 0, 0, PH_NCCL};
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
            if (c) c->last = ErrRec{1u, rank0, 0, 0, PH_NCCL};
            nccl_abort_all(comms);
            return cudaErrorTimeout;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
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

// One process, every rank's GPU: what ncclCommInitAll does, with non-blocking communicators (InitAll
// takes no config): one unique id, then ncclCommInitRankConfig for each rank inside one group.
cudaError_t nccl_init_all(Comm &c) {
    if (!c.nccl.empty()) return cudaSuccess;
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
    for (int i = 0; i < c.world; ++i) {
        COLL_TRY(cudaSetDevice(c.dev[i]));
        if (variant == VNCCL_AR)
            r = ncclAllReduce(c.in[i], c.out[i], (size_t)n, nccl_type(dtype), ncclSum, c.nccl[i], streams[i]);
        else if (variant == VNCCL_AG)
            r = ncclAllGather(c.in[i], c.out[i], (size_t)n, nccl_type(dtype), c.nccl[i], streams[i]);
        else
            r = ncclReduceScatter(c.in[i], c.out[i], (size_t)(n / c.world), nccl_type(dtype), ncclSum, c.nccl[i],
                                  streams[i]);
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

// Where a run's launches go: the communicator's own streams, after `ext` (when given) and before what
// follows on it, through events (several GPUs: each rank's stream on its own device).
cudaError_t enqueue(Comm &c, int variant, int dtype, long long n, int stall_rank, int direction, cudaStream_t ext,
                    bool has_ext) {
    std::vector<cudaStream_t> streams(c.stream);
    if (has_ext && !c.use_devices) {
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
    if (has_ext && c.use_devices) {
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

cudaError_t run_sync(Comm &c, int variant) {
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
cudaError_t tp_alloc(Comm &c, TpBuffers &t, int T, int H, int Fr) {
    const int R = c.world;
    size_null(R, t.x, t.w1, t.w2, t.g, t.h);
    for (int r = 0; r < R; ++r) {
        COLL_TRY(cudaSetDevice(c.dev[r]));
        // Virtual ranks share the one x; each rank still has its own weights and activations.
        if (c.use_devices || r == 0) COLL_TRY(cudaMalloc(&t.x[r], (size_t)T * H * 2));
        else t.x[r] = t.x[0];
        COLL_TRY(cudaMalloc(&t.w1[r], (size_t)Fr * H * 2));
        COLL_TRY(cudaMalloc(&t.w2[r], (size_t)H * Fr * 2));
        COLL_TRY(cudaMalloc(&t.g[r], (size_t)T * Fr * 2));
        COLL_TRY(cudaMalloc(&t.h[r], (size_t)T * Fr * 4));
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
    (void)cudaSetDevice(c.dev[0]);
}

// Token blocks of the overlapped form: boundaries on multiples of 4 rows, so that every block's
// offset (rows x H floats) stays on a 16-byte boundary for the all-reduce's packs.
std::vector<int> tp_blocks(int T, int chunks) {
    std::vector<int> b{0};
    for (int i = 1; i < chunks; ++i) {
        int t = (int)((long long)T * i / chunks) / 4 * 4;
        if (t > b.back() && t < T) b.push_back(t);
    }
    b.push_back(T);
    return b;
}

// Enqueue one forward; y_r lands in rank r's output buffer (its partial in the input buffer).
cudaError_t tp_forward(Comm &c, TpBuffers &t, int ar_variant, int overlap, int chunks, int T, int H, int Fr) {
    const std::vector<int> bl = tp_blocks(T, overlap ? std::max(1, chunks) : 1);
    const int L = c.launches();
    std::vector<cudaStream_t> comm_streams(overlap ? c.stream2 : c.stream);
    comm_streams.resize(L);
    for (size_t k = 0; k + 1 < bl.size(); ++k) {
        const int t0 = bl[k], rows = bl[k + 1] - bl[k];
        for (int r = 0; r < c.world; ++r) {
            const int l = c.use_devices ? r : 0;
            COLL_TRY(cudaSetDevice(c.dev[r]));
            cudaStream_t s = c.stream[l];
            float *h = t.h[r] + (size_t)t0 * Fr;
            cudalab_bf16 *g = t.g[r] + (size_t)t0 * Fr;
            float *y = reinterpret_cast<float *>(c.in[r]) + (size_t)t0 * H;
            COLL_TRY(gemm_tc::launch_mma_sync(rows, Fr, H, t.x[r] + (size_t)t0 * H, t.w1[r], h, s));
            const long long n = (long long)rows * Fr;
            gelu_to_bf16_kernel<<<(unsigned)std::min<long long>(cdiv(n, 256), 4096), 256, 0, s>>>(h, g, n);
            COLL_TRY(cudaGetLastError());
            COLL_TRY(gemm_tc::launch_mma_sync(rows, H, Fr, g, t.w2[r], y, s));
        }
        if (overlap) {
            for (int l = 0; l < L; ++l) {
                COLL_TRY(cudaSetDevice(c.dev[l]));
                COLL_TRY(cudaEventRecord(c.ev_done[l], c.stream[l]));
                COLL_TRY(cudaStreamWaitEvent(c.stream2[l], c.ev_done[l], 0));
            }
        }
        COLL_TRY(enqueue_lab(c, ar_variant, 0, (long long)rows * H, (long long)t0 * H, -1, 0, comm_streams));
    }
    COLL_TRY(cudaSetDevice(c.dev[0]));
    return cudaSuccess;
}

cudaError_t tp_check(const Comm &c, int ar_variant, int chunks, int T, int H, int F) {
    if (ar_variant != V02_RING && ar_variant != V03_ONESHOT) return cudaErrorInvalidValue;
    if (T < 1 || H < 1 || F < 1 || chunks < 1 || F % c.world != 0) return cudaErrorInvalidValue;
    if ((long long)T * H * 4 > std::min(c.in_bytes, c.out_bytes)) return cudaErrorInvalidValue;
    return cudaSuccess;
}

// The start of both TP entry points: the arguments checked, then each rank's buffers (all freed
// again when one allocation fails, so the caller frees only after a success).
cudaError_t tp_open(Comm &c, TpBuffers &t, int ar_variant, int chunks, int T, int H, int F) {
    COLL_TRY(tp_check(c, ar_variant, chunks, T, H, F));
    if (gemm_tc::sm80_unsupported_reason() != nullptr) return cudaErrorNotSupported;
    const cudaError_t e = tp_alloc(c, t, T, H, F / c.world);
    if (e != cudaSuccess) tp_free(c, t);
    return e;
}

}  // namespace

// ================================================================================================
// Entry points
// ================================================================================================
extern "C" int collectives_variant_count(void) { return VCOUNT; }
extern "C" const char *collectives_variant_name(int i) { return (i >= 0 && i < VCOUNT) ? kNames[i] : nullptr; }
extern "C" int collectives_variant_needs_nccl(int v) { return (v < 0 || v >= VCOUNT) ? -1 : needs_nccl(v) ? 1 : 0; }

// The tensor-parallel variants run gemm_tc's 02_mma_sync (sm_80), so they are refused with arch.cuh's
// reason on an older GPU or build; the rest run on any GPU CUDA 13 supports.
extern "C" const char *collectives_unsupported_reason(int v) {
    if (v < 0 || v >= VCOUNT) return "unknown variant";
    if (std::strcmp(kNames[v], "tp_mlp") == 0 || std::strcmp(kNames[v], "tp_mlp_overlap") == 0)
        return gemm_tc::sm80_unsupported_reason();
    return nullptr;
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
    c->flag_count = 2LL * world * std::max(kCpsMax, kMaxBlocksPerRank);
    // The streams first: everything below is done on them (rank_stream says why).
    const int L = c->launches();
    size_null(L, c->table, c->err, c->stream, c->stream2, c->ev_fork, c->ev_done);
    for (int l = 0; l < L; ++l) {
        if (cudaError_t e = cudaSetDevice(c->dev[l]); e != cudaSuccess) return fail(e);
        cudaError_t e = cudaStreamCreateWithFlags(&c->stream[l], cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->stream2[l], cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->ev_fork[l], cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->ev_done[l], cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaMalloc(&c->table[l], sizeof(RankPtrs) * world);
        if (e == cudaSuccess) e = alloc_zeroed(*c, l, &c->err[l], sizeof(ErrRec));
        if (e != cudaSuccess) return fail(e);
    }
    size_null(world, c->in, c->out, c->recv, c->flags);
    for (int r = 0; r < world; ++r) {
        cudaError_t e = alloc_zeroed(*c, r, &c->in[r], (size_t)in_bytes);
        if (e == cudaSuccess) e = alloc_zeroed(*c, r, &c->out[r], (size_t)out_bytes);
        if (e == cudaSuccess) e = alloc_zeroed(*c, r, &c->recv[r], (size_t)in_bytes);
        if (e == cudaSuccess) e = alloc_zeroed(*c, r, &c->flags[r], (size_t)c->flag_count * 8);
        if (e != cudaSuccess) return fail(e);
    }
    std::vector<RankPtrs> host(world);
    for (int r = 0; r < world; ++r) host[r] = RankPtrs{c->in[r], c->out[r], c->recv[r], c->flags[r]};
    for (int l = 0; l < L; ++l)
        if (cudaError_t e = h2d(*c, l, c->table[l], host.data(), sizeof(RankPtrs) * world); e != cudaSuccess)
            return fail(e);
    COLL_TRY(cudaSetDevice(c->dev[0]));
    g_comms.push_back(c);
    handle[0] = (int)g_comms.size() - 1;
    return 0;
}

extern "C" cudalab_status collectives_comm_destroy(int handle) {
    Comm *c = get(handle);
    if (!c) return cudaErrorInvalidValue;
    g_comms[handle] = nullptr;
    (void)sync_all(*c);
    free_comm(c);
    return 0;
}

extern "C" cudalab_status collectives_upload(int handle, int rank, const uint8_t *src, long long bytes) {
    Comm *c = get(handle);
    if (!c || rank < 0 || rank >= c->world || bytes < 0 || bytes > c->in_bytes || (!src && bytes)) return cudaErrorInvalidValue;
    COLL_TRY(h2d(*c, rank, c->in[rank], src, (size_t)bytes));
    COLL_TRY(cudaSetDevice(c->dev[0]));
    return 0;
}

extern "C" cudalab_status collectives_download(int handle, int rank, uint8_t *dst, long long bytes) {
    Comm *c = get(handle);
    if (!c || rank < 0 || rank >= c->world || bytes < 0 || bytes > c->out_bytes || (!dst && bytes)) return cudaErrorInvalidValue;
    COLL_TRY(d2h(*c, rank, dst, c->out[rank], (size_t)bytes));
    COLL_TRY(cudaSetDevice(c->dev[0]));
    return 0;
}

extern "C" cudalab_status collectives_poison(int handle, int byte) {
    Comm *c = get(handle);
    if (!c || byte < 0 || byte > 255) return cudaErrorInvalidValue;
    for (int r = 0; r < c->world; ++r) {
        COLL_TRY(fill(*c, r, c->out[r], byte, (size_t)c->out_bytes));
        COLL_TRY(fill(*c, r, c->recv[r], byte, (size_t)c->in_bytes));
    }
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

extern "C" cudalab_status collectives_run(int handle, int variant, int dtype, long long n) {
    Comm *c = get(handle);
    if (!c) return cudaErrorInvalidValue;
    COLL_TRY(check_run(*c, variant, dtype, n));
#ifdef CUDALAB_FAULTS
    const int stall_rank = g_fault_stall_rank;
    if (stall_rank >= c->world) return cudaErrorInvalidValue;
#else
    const int stall_rank = -1;
#endif
    COLL_TRY(enqueue(*c, variant, dtype, n, stall_rank, 3, nullptr, false));
    return run_sync(*c, variant);
}

extern "C" cudalab_status collectives_run_direction(int handle, int variant, int dtype, long long n, int direction) {
    Comm *c = get(handle);
    if (!c || direction < 1 || direction > 3) return cudaErrorInvalidValue;
    COLL_TRY(check_run(*c, variant, dtype, n));
    COLL_TRY(enqueue(*c, variant, dtype, n, -1, direction, nullptr, false));
    return run_sync(*c, variant);
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
    return 0;
}

extern "C" cudalab_status collectives_tp_mlp(int handle, int ar_variant, int overlap, int chunks, int T, int H, int F,
                                             const cudalab_bf16 *x, const cudalab_bf16 *w1, const cudalab_bf16 *w2,
                                             float *y) {
    Comm *c = get(handle);
    if (!c || !x || !w1 || !w2 || !y) return cudaErrorInvalidValue;
    TpBuffers t;
    COLL_TRY(tp_open(*c, t, ar_variant, chunks, T, H, F));
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
    if (e == cudaSuccess) e = tp_forward(*c, t, ar_variant, overlap, chunks, T, H, Fr);
    if (e == cudaSuccess) e = sync_all(*c);
    if (e == cudaSuccess) e = check_records(*c);
    for (int r = 0; r < c->world && e == cudaSuccess; ++r) e = d2h(*c, r, y + (size_t)r * T * H, c->out[r], (size_t)T * H * 4);
    tp_free(*c, t);
    COLL_TRY(e);
    return 0;
}

extern "C" cudalab_status collectives_tp_mlp_time(int handle, int ar_variant, int overlap, int chunks, int T, int H,
                                                  int F, int iters, float *ms) {
    Comm *c = get(handle);
    if (!c || !ms || iters < 1) return cudaErrorInvalidValue;
    TpBuffers t;
    COLL_TRY(tp_open(*c, t, ar_variant, chunks, T, H, F));
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
        e = tp_forward(*c, t, ar_variant, overlap, chunks, T, H, Fr);
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
    // The unique id: from NCCL_COMM_ID on every rank, else rank 0 writes it to id_file (a temporary name,
    // then rename: a reader never sees half of it) and the others wait for the file.
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
    const std::vector<int> devs{local_rank};
    cudaError_t e = nccl_wait(nullptr, comm, devs, nullptr, deadline, "ncclCommInitRankConfig", rank);
    if (e != cudaSuccess) return e;

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
        for (int it = 0; it < iters + 1 && e == cudaSuccess; ++it) {  // call 0 is checked, the rest timed
            if (it == 1) e = cudaEventRecord(e0, s);
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
