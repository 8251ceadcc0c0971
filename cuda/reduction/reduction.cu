// reduction: the sum of a float32 array, four ways, and CUB's as the yardstick. See reduction.h for the
// contract of each entry point, and README.md beside it for why each rung is faster than the last.
#include <climits>
#include <cstdint>
#include <cstring>

#include <cub/device/device_reduce.cuh>

#include "reduction.h"
#include "check.cuh"

namespace {

// EXERCISE reduce_tree: copy
// EXERCISE reduce_atomic: copy
// EXERCISE reduce_grid_stride: copy
// Every variant launches blocks of 256 threads: 8 warps, a power of two (the trees halve it), and small
// enough that 8 blocks fit on an SM together (2048 threads: full occupancy on sm_80 and sm_90).
constexpr int kThreads = 256;
constexpr int kWarp = 32;
// EXERCISE reduce_grid_stride: end copy
// EXERCISE reduce_atomic: end copy
// EXERCISE reduce_tree: end copy
// 04 writes one partial per block: a full wave is at most (SMs x 8) blocks, 1056 on an H100 or H200.
// 4096 leaves room for larger GPUs; a bigger grid would only add blocks that wait for a slot.
constexpr int kMaxPartials = 4096;
constexpr long long kMaxN = INT_MAX;

const char *const kVariants[] = {"01_atomic_naive", "02_shared_tree", "03_warp_shuffle", "04_grid_stride"};
const int kNumVariants = (int)(sizeof(kVariants) / sizeof(kVariants[0]));
enum { kAtomicNaive, kSharedTree, kWarpShuffle, kGridStride };

int variant_id(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < kNumVariants; ++i)
        if (strcmp(name, kVariants[i]) == 0) return i;
    return -1;
}

int log2_int(long long v) {
    int k = 0;
    while ((1LL << (k + 1)) <= v) ++k;
    return k;
}

}  // namespace

// The kernels live outside the anonymous namespace, so that profilers show their plain names.

// 01: one thread per element, and every thread adds into the same float. Correct, but each atomicAdd
// on one address is a read-modify-write that the L2 must finish before the next one to that address
// starts: n additions in a single line, whatever the grid. Their order is whatever order the threads
// arrive in, so the float32 result may change from run to run; and one long chain of float32 additions
// is the least accurate way to add (past 2^24 a running total of ones stops growing: 2^24 + 1 rounds
// back to 2^24).
__global__ void reduction_01_atomic_naive(const float *x, long long n, float *out) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}

// 02: PMPP's tree. Each block sums its own 2 * blockDim.x elements in shared memory, halving the number
// of active threads at every step, so a block needs log2(blockDim.x) steps instead of blockDim.x, and
// only one atomicAdd per block reaches the result. The active threads are always the low ones
// (t < stride): whole warps retire together instead of every other thread idling inside each warp,
// and consecutive threads touch consecutive words, so the shared-memory accesses have no bank conflicts.
// Requires blockDim.x = kThreads (a power of two).
// EXERCISE reduce_tree: copy
// EXERCISE reduce_atomic: copy
// One block's tree: the sum of its 2 * blockDim.x elements of x (those below n), returned to thread 0
// (the other threads get a value they must not use). `partial` is blockDim.x floats of shared memory;
// blockDim.x is a power of two.
__device__ float reduction_02_block_sum(const float *x, long long n, float *partial) {
    const unsigned t = threadIdx.x;
// EXERCISE reduce_tree: begin load: i = blockIdx.x * (2 * blockDim.x) + t (as long long); v = x[i] plus
// EXERCISE reduce_tree: todo x[i + blockDim.x], each only when its index is below n (0, the identity of the
// EXERCISE reduce_tree: todo sum, in its place: the last block is partial); partial[t] = v; then wait until every
// EXERCISE reduce_tree: todo thread of the block has stored its value.
    const long long i = (long long)blockIdx.x * (2 * blockDim.x) + t;
    // The first addition happens on the way in: every thread loads two elements, one blockDim apart,
    // so no thread is idle in the first step of the tree and half as many blocks are needed.
    float v = 0.0f;
    if (i < n) v = x[i];
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    partial[t] = v;
    __syncthreads();  // every partial written before anyone reads a neighbour's
// EXERCISE reduce_tree: end
// EXERCISE reduce_tree: begin the tree: for stride = blockDim.x / 2, halving down to 1, threads t < stride add
// EXERCISE reduce_tree: todo partial[t + stride] into partial[t]; every thread waits after each step (the next
// EXERCISE reduce_tree: todo step reads what this one wrote), so the barrier is outside the `if`.
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (t < stride) partial[t] += partial[t + stride];
        __syncthreads();  // this level finished before the next one reads it
    }
// EXERCISE reduce_tree: stub (void)x; (void)n; (void)t;
// EXERCISE reduce_tree: end
    return partial[0];
}
// EXERCISE reduce_atomic: end copy
// EXERCISE reduce_tree: end copy

// 02's per-block sums, before any atomic: the same tree, each block writing its sum to partials[blockIdx.x].
// The total of 02 depends on the order the blocks' atomicAdds arrive in; these do not, so the tests compare
// them bit for bit with the Python twin's.
// EXERCISE reduce_tree: copy
__global__ void reduction_02_block_sums(const float *x, long long n, float *partials) {
    __shared__ float partial[kThreads];
    const float s = reduction_02_block_sum(x, n, partial);
// EXERCISE reduce_tree: begin thread 0 (and only it) writes the block's sum s to partials[blockIdx.x].
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
// EXERCISE reduce_tree: stub (void)s; (void)partials;
// EXERCISE reduce_tree: end
}
// EXERCISE reduce_tree: end copy

// EXERCISE reduce_atomic: copy
__global__ void reduction_02_shared_tree(const float *x, long long n, float *out) {
    __shared__ float partial[kThreads];
    const float s = reduction_02_block_sum(x, n, partial);
// EXERCISE reduce_atomic: begin thread 0 alone adds its block's sum s into *out, atomically (the blocks run in
// EXERCISE reduce_atomic: todo any order and at the same time: a plain += would lose other blocks' additions).
    if (threadIdx.x == 0) atomicAdd(out, s);
// EXERCISE reduce_atomic: stub (void)s; (void)out;
// EXERCISE reduce_atomic: end
}

// 02's launch on stream s: the blocks add into *out, so it starts at 0, queued before them on the same
// stream (the memset is part of the work, and of its time). Returns the first CUDA error.
cudaError_t reduction_02_launch(const float *x, long long n, float *out, unsigned blocks, cudaStream_t s) {
// EXERCISE reduce_atomic: begin set *out (one float) to 0 on stream s (cudaMemsetAsync), then launch
// EXERCISE reduce_atomic: todo reduction_02_shared_tree on `blocks` blocks of kThreads threads on s; return the first
// EXERCISE reduce_atomic: todo error (the memset's, else the launch's: cudaGetLastError).
    const cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), s);
    if (err != cudaSuccess) return err;
    reduction_02_shared_tree<<<blocks, kThreads, 0, s>>>(x, n, out);
    return cudaGetLastError();
// EXERCISE reduce_atomic: stub (void)x; (void)n; (void)out; (void)blocks; (void)s;
// EXERCISE reduce_atomic: stub return cudaSuccess;
// EXERCISE reduce_atomic: end
}
// EXERCISE reduce_atomic: end copy

// 03: the same tree, but the first five levels (within a warp) go through registers: __shfl_down_sync
// hands each lane the value of the lane `offset` above it, with no shared memory and no __syncthreads
// (a warp's lanes move in step). Shared memory is left for the one hand-over between warps: each warp's
// lane 0 writes its warp's sum, and warp 0 adds those eight with shuffles again.
__global__ void reduction_03_warp_shuffle(const float *x, long long n, float *out) {
    __shared__ float warp_sums[kThreads / kWarp];
    const unsigned t = threadIdx.x, lane = t % kWarp, warp = t / kWarp;
    const long long i = (long long)blockIdx.x * (2 * blockDim.x) + t;
    float v = 0.0f;
    if (i < n) v = x[i];
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    // All 32 lanes take part (the full mask): lanes past n carry 0, which adds nothing.
    for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) warp_sums[warp] = v;  // lane 0 now holds its warp's sum
    __syncthreads();  // every warp's sum written before warp 0 reads them
    if (warp == 0) {
        v = lane < blockDim.x / kWarp ? warp_sums[lane] : 0.0f;
        for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (lane == 0) atomicAdd(out, v);
    }
}

// 04, first pass: a grid that fills the GPU once (not one block per 512 elements), so each thread has
// many elements to add in its own register before any tree: the tree, the barriers and the write per
// block are paid about a thousand times per array instead of n / 512 times. The loads are float4 (one
// 16-byte instruction instead of four), four of them issued before their sums are needed, so each
// thread keeps 64 bytes in flight: enough outstanding reads, over the whole GPU, to cover DRAM's latency
// at full bandwidth. x + head is 16-byte aligned; the head (up to 3 elements before that boundary) and
// the tail (up to 3 after the last whole float4) are added by the first threads. Each block writes its
// sum to partials[blockIdx.x]: no atomics, so the result does not depend on the blocks' order.
// EXERCISE reduce_grid_stride: copy
__global__ void reduction_04_grid_stride(const float *__restrict__ x, long long n, long long head,
                                         float *__restrict__ partials) {
    __shared__ float warp_sums[kThreads / kWarp];
// EXERCISE reduce_grid_stride: begin tid = this thread's global index; stride = the number of threads in the whole
// EXERCISE reduce_grid_stride: todo grid (both long long).
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
// EXERCISE reduce_grid_stride: stub const long long tid = 0, stride = 1;
// EXERCISE reduce_grid_stride: end
    const float4 *x4 = reinterpret_cast<const float4 *>(x + head);
    const long long n4 = (n - head) / 4;
    float sum = 0.0f;
// EXERCISE reduce_grid_stride: begin add this thread's elements into sum: the float4s x4[i] for i = tid, tid +
// EXERCISE reduce_grid_stride: todo stride, ... below n4 (each as (a.x + a.y) + (a.z + a.w); four a trip, a stride
// EXERCISE reduce_grid_stride: todo apart, while four remain, is faster); then the head x[tid] when tid < head (the
// EXERCISE reduce_grid_stride: todo elements before the 16-byte boundary) and the tail x[head + 4 * n4 + tid] when
// EXERCISE reduce_grid_stride: todo tid < 4 and that index is below n (those after the last whole float4).
    long long i = tid;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        const float4 a = x4[i], b = x4[i + stride], c = x4[i + 2 * stride], d = x4[i + 3 * stride];
        sum += ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w)) + ((c.x + c.y) + (c.z + c.w)) +
               ((d.x + d.y) + (d.z + d.w));
    }
    for (; i < n4; i += stride) {
        const float4 a = x4[i];
        sum += (a.x + a.y) + (a.z + a.w);
    }
    if (tid < head) sum += x[tid];
    const long long t = head + 4 * n4 + tid;
    if (tid < 4 && t < n) sum += x[t];
// EXERCISE reduce_grid_stride: stub (void)x4; (void)n4; (void)tid; (void)stride;
// EXERCISE reduce_grid_stride: end

    const unsigned lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        sum = lane < blockDim.x / kWarp ? warp_sums[lane] : 0.0f;
        for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
// EXERCISE reduce_grid_stride: begin lane 0 (warp 0's, so thread 0) now holds the block's sum: write it to the
// EXERCISE reduce_grid_stride: todo block's partial.
        if (lane == 0) partials[blockIdx.x] = sum;
// EXERCISE reduce_grid_stride: stub (void)partials;
// EXERCISE reduce_grid_stride: end
    }
}
// EXERCISE reduce_grid_stride: end copy

// 04, second pass: one block adds the first pass's partials (about a thousand floats: microseconds) and
// writes the result, so it overwrites *out rather than adding to it, and nothing needs zeroing first.
__global__ void reduction_04_finish(const float *__restrict__ partials, int count, float *__restrict__ out) {
    __shared__ float warp_sums[kThreads / kWarp];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
    const unsigned lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        sum = lane < blockDim.x / kWarp ? warp_sums[lane] : 0.0f;
        for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
        if (lane == 0) *out = sum;
    }
}

extern "C" int reduction_variant_count(void) { return kNumVariants; }

extern "C" const char *reduction_variant_name(int i) { return (i >= 0 && i < kNumVariants) ? kVariants[i] : nullptr; }

extern "C" long long reduction_max_n(void) { return kMaxN; }

extern "C" long long reduction_scratch_floats(void) { return kMaxPartials; }

// The error bound's D, counted from the kernels above (a generous count where a path may be shorter:
// adding a zero is exact, but it is counted as a step).
extern "C" long long reduction_chain(const char *variant, long long n, long long blocks, int threads) {
    const int v = variant_id(variant);
    if (v < 0 || n < 0 || blocks < 0 || threads < 1) return -1;
    if (n <= 1) return 0;
    const long long warp_tree = log2_int(kWarp);            // 5 shuffle levels in a warp
    const long long block_tree = 2 * warp_tree;              // within the warps, then across them
    switch (v) {
    case kAtomicNaive:
        return n - 1;  // one chain through every element
    case kSharedTree:  // the pair on load, the block's tree, then one atomicAdd per block
        return 1 + log2_int(threads) + blocks;
    case kWarpShuffle:
        return 1 + block_tree + blocks;
    default: {  // 04: a thread's float4s one after another, the trees, then the finishing block's share
        const long long per_thread = cdiv(cdiv(n, 4), blocks * (long long)threads);
        return per_thread + 6 + block_tree + cdiv(blocks, kThreads) + block_tree;
    }
    }
}

namespace {

// The launch of each variant at n: the only place its grid is decided (the dispatcher and
// reduction_plan both ask here).
int plan(int v, long long n, long long *blocks) {
    if (v == kAtomicNaive) {
        *blocks = cdiv(n, kThreads);
    } else if (v == kSharedTree || v == kWarpShuffle) {
        *blocks = cdiv(n, 2 * kThreads);
    } else {  // one full wave of blocks, but no more than have a float4 to read, and at least one
        int dev = 0, sms = 0, per_sm = 0;
        CUDA_TRY(cudaGetDevice(&dev));
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reduction_04_grid_stride, kThreads, 0));
        long long g = (long long)sms * (per_sm > 0 ? per_sm : 1);
        const long long useful = cdiv(n / 4, kThreads);
        if (g > useful) g = useful;
        if (g > kMaxPartials) g = kMaxPartials;
        *blocks = g < 1 ? 1 : g;
    }
    if (*blocks < 1) *blocks = 1;
    return 0;
}

}  // namespace

extern "C" cudalab_status reduction_plan(const char *variant, long long n, long long *blocks, int *threads) {
    const int v = variant_id(variant);
    if (v < 0 || n < 0 || n > kMaxN || blocks == nullptr || threads == nullptr) return (int)cudaErrorInvalidValue;
    if (int err = plan(v, n, blocks)) return err;
    *threads = kThreads;
    return 0;
}

extern "C" cudalab_status reduction_sum_f32_dev(const char *variant, const float *d_x, long long n, float *d_out,
                                                float *d_scratch, void *stream) {
    const int v = variant_id(variant);
    if (v < 0 || n < 0 || n > kMaxN || d_out == nullptr) return (int)cudaErrorInvalidValue;
    const cudaStream_t s = (cudaStream_t)stream;
    if (n == 0) {  // the empty sum
        CUDA_TRY(cudaMemsetAsync(d_out, 0, sizeof(float), s));
        return 0;
    }
    if (d_x == nullptr || ((uintptr_t)d_x % sizeof(float)) != 0) return (int)cudaErrorInvalidValue;
    if (v == kGridStride && d_scratch == nullptr) return (int)cudaErrorInvalidValue;
    long long blocks = 0;
    if (int err = plan(v, n, &blocks)) return err;
    if (blocks > INT_MAX) return (int)cudaErrorInvalidValue;
    const unsigned g = (unsigned)blocks;
    switch (v) {
    case kSharedTree:
        return (int)reduction_02_launch(d_x, n, d_out, g, s);
    case kAtomicNaive:
    case kWarpShuffle:
        // The atomic variants add into *d_out: it starts at zero, as part of the work.
        CUDA_TRY(cudaMemsetAsync(d_out, 0, sizeof(float), s));
        if (v == kAtomicNaive) reduction_01_atomic_naive<<<g, kThreads, 0, s>>>(d_x, n, d_out);
        else reduction_03_warp_shuffle<<<g, kThreads, 0, s>>>(d_x, n, d_out);
        CUDA_TRY_LAUNCH();
        return 0;
    default: {
        // Floats before the first 16-byte boundary of x (cudaMalloc's pointers have none).
        long long head = (long long)(((16 - ((uintptr_t)d_x % 16)) % 16) / sizeof(float));
        if (head > n) head = n;
        reduction_04_grid_stride<<<g, kThreads, 0, s>>>(d_x, n, head, d_scratch);
        CUDA_TRY_LAUNCH();
        reduction_04_finish<<<1, kThreads, 0, s>>>(d_scratch, (int)g, d_out);
        CUDA_TRY_LAUNCH();
        return 0;
    }
    }
}

extern "C" cudalab_status reduction_02_block_sums_f32(const float *x, long long n, float *partials) {
    if (n < 1 || n > kMaxN || x == nullptr || partials == nullptr) return (int)cudaErrorInvalidValue;
    long long blocks = 0;
    if (int err = plan(kSharedTree, n, &blocks)) return err;
    cudalab::DeviceAlloc dx, dp;
    if (int err = dx.upload(x, (size_t)n * sizeof(float))) return err;
    if (int err = dp.alloc((size_t)blocks * sizeof(float))) return err;
    CUDA_TRY(cudaMemset(dp.p, 0xFF, (size_t)blocks * sizeof(float)));  // NaN: a sum never written shows
    reduction_02_block_sums<<<(unsigned)blocks, kThreads>>>(dx.as<float>(), n, dp.as<float>());
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaDeviceSynchronize());
    CUDA_TRY(cudaMemcpy(partials, dp.p, (size_t)blocks * sizeof(float), cudaMemcpyDeviceToHost));
    return cudalab::release_all(dx, dp);
}

extern "C" cudalab_status reduction_sum_f32(const char *variant, const float *x, long long n, float *out) {
    if (variant_id(variant) < 0 || n < 0 || n > kMaxN || out == nullptr) return (int)cudaErrorInvalidValue;
    if (n > 0 && x == nullptr) return (int)cudaErrorInvalidValue;
    cudalab::DeviceAlloc dx, dout, dscratch;
    if (int err = dx.upload(x, (size_t)n * sizeof(float))) return err;
    if (int err = dout.alloc(sizeof(float))) return err;
    if (int err = dscratch.alloc((size_t)kMaxPartials * sizeof(float))) return err;
    // NaN in the result and the scratch: a variant that forgets to write (or to zero) either shows it.
    CUDA_TRY(cudaMemset(dout.p, 0xFF, sizeof(float)));
    CUDA_TRY(cudaMemset(dscratch.p, 0xFF, (size_t)kMaxPartials * sizeof(float)));
    if (int err = reduction_sum_f32_dev(variant, dx.as<float>(), n, dout.as<float>(), dscratch.as<float>(), nullptr))
        return err;
    CUDA_TRY(cudaDeviceSynchronize());
    CUDA_TRY(cudaMemcpy(out, dout.p, sizeof(float), cudaMemcpyDeviceToHost));
    return cudalab::release_all(dx, dout, dscratch);
}

// ---- the yardstick: CUB ------------------------------------------------------------------------

extern "C" cudalab_status reduction_cub_temp_bytes(long long n, long long *bytes) {
    if (n < 0 || n > kMaxN || bytes == nullptr) return (int)cudaErrorInvalidValue;
    size_t need = 0;
    // With no storage given, CUB only says how much it needs; nothing runs.
    CUDA_TRY(cub::DeviceReduce::Sum(nullptr, need, (const float *)nullptr, (float *)nullptr, (int64_t)n));
    *bytes = (long long)need;
    return 0;
}

extern "C" cudalab_status reduction_cub_sum_f32_dev(const float *d_x, long long n, float *d_out, void *d_temp,
                                                    long long temp_bytes, void *stream) {
    if (n < 0 || n > kMaxN || d_out == nullptr || temp_bytes < 0) return (int)cudaErrorInvalidValue;
    if ((n > 0 && d_x == nullptr) || (d_temp == nullptr && temp_bytes > 0)) return (int)cudaErrorInvalidValue;
    size_t need = 0;
    CUDA_TRY(cub::DeviceReduce::Sum(nullptr, need, d_x, d_out, (int64_t)n));
    if ((long long)need > temp_bytes || (need > 0 && d_temp == nullptr)) return (int)cudaErrorInvalidValue;
    size_t have = (size_t)temp_bytes;
    CUDA_TRY(cub::DeviceReduce::Sum(d_temp, have, d_x, d_out, (int64_t)n, (cudaStream_t)stream));
    return 0;
}

extern "C" cudalab_status reduction_cub_sum_f32(const float *x, long long n, float *out) {
    if (n < 0 || n > kMaxN || out == nullptr || (n > 0 && x == nullptr)) return (int)cudaErrorInvalidValue;
    long long temp_bytes = 0;
    if (int err = reduction_cub_temp_bytes(n, &temp_bytes)) return err;
    cudalab::DeviceAlloc dx, dout, dtemp;
    if (int err = dx.upload(x, (size_t)n * sizeof(float))) return err;
    if (int err = dout.alloc(sizeof(float))) return err;
    if (int err = dtemp.alloc((size_t)temp_bytes)) return err;
    CUDA_TRY(cudaMemset(dout.p, 0xFF, sizeof(float)));
    if (int err = reduction_cub_sum_f32_dev(dx.as<float>(), n, dout.as<float>(), dtemp.p, temp_bytes, nullptr))
        return err;
    CUDA_TRY(cudaDeviceSynchronize());
    CUDA_TRY(cudaMemcpy(out, dout.p, sizeof(float), cudaMemcpyDeviceToHost));
    return cudalab::release_all(dx, dout, dtemp);
}
