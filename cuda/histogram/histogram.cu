// histogram: counts of uint8 values into 256 bins (PMPP chapter 9). See histogram.h for the contract
// of each entry point.
//
// Counting is a scatter: where a byte goes depends on its value, so threads collide on the same
// counter and must use atomics. The three kernels below differ only in where those atomics land:
//   01 every byte's atomic goes to the 256 global counters (L2): few addresses, many threads;
//   02 each block counts into its own copy in shared memory, then adds each bin to global once;
//   03 each thread handles many 16-byte chunks, and each lane of a warp has its own interleaved copy
//      of the bins in shared memory, so the atomics of one warp instruction never collide.
#include <climits>
#include <cstdint>
#include <cstring>

#include <cub/device/device_histogram.cuh>

#include "check.cuh"
#include "histogram.h"

namespace {

// EXERCISE histogram_private: copy
const int kBins = 256;             // one bin per uint8 value
// EXERCISE histogram_private: end copy
const int kLanes = 32;             // threads in a warp, and banks in shared memory
const int kDefaultThreads = 256;   // 01 and 02: one thread per byte
const int kCoarsenedThreads = 512; // 03: 4 blocks of 512 (32 KiB of copies each) fill an SM's 2048 threads

const char *const kVariants[] = {"01_global_atomics", "02_shared_private", "03_coarsened"};
const int kNumVariants = (int)(sizeof(kVariants) / sizeof(kVariants[0]));

int variant_id(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < kNumVariants; ++i)
        if (strcmp(name, kVariants[i]) == 0) return i;
    return -1;
}

}  // namespace

// Outside the anonymous namespace, so that profilers show the kernels' plain names.

// EXERCISE histogram_atomic: copy
// 01: one thread per byte, one atomicAdd on the global bins per byte. Correct, and the simplest thing
// that is: the hardware makes each read-modify-write whole. But all n atomics go to 256 counters that
// sit in 8 cache lines of the L2, so the L2's atomic units for those lines do all the work one after
// the other, and the lanes of a warp that hold the same value are serialised on one counter.
__global__ void histogram_01_global_atomics(const unsigned char *__restrict__ in, long long n,
                                            unsigned int *__restrict__ bins) {
// EXERCISE histogram_atomic: begin i = this thread's global index (block index times block size plus the thread
// EXERCISE histogram_atomic: todo index, as long long); only when i < n (the last block is partial), add 1 to the bin
// EXERCISE histogram_atomic: todo of the byte in[i], with atomicAdd: threads of the whole grid add to the same bin
// EXERCISE histogram_atomic: todo at once, and a plain ++ (read, add, write) loses the adds that overlap it.
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&bins[in[i]], 1u);
// EXERCISE histogram_atomic: end
}
// EXERCISE histogram_atomic: end copy

// EXERCISE histogram_private: copy
// 02: privatisation. Each block counts its bytes into its own 256 counters in shared memory, whose
// atomics are handled inside the SM, next to the threads, instead of crossing to the L2; then it adds
// each non-zero bin to the global counters with one atomic. The contention of 01 moves from the L2 into
// the block, and the global atomics drop from one per byte to at most 256 per block.
__global__ void histogram_02_shared_private(const unsigned char *__restrict__ in, long long n,
                                            unsigned int *__restrict__ bins) {
    __shared__ unsigned int local[kBins];
// EXERCISE histogram_private: begin set the block's kBins counters in `local` to 0 (shared memory starts with
// EXERCISE histogram_private: todo whatever the last block left there), in a loop strided by blockDim.x (the block
// EXERCISE histogram_private: todo may have fewer threads than bins, or more); then wait until every counter is 0.
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) local[b] = 0;
    __syncthreads();  // every counter zeroed before any thread adds to one
// EXERCISE histogram_private: end

// EXERCISE histogram_private: begin i = this thread's global index (long long); only when i < n, add 1 to local's
// EXERCISE histogram_private: todo counter of the byte in[i] (atomicAdd: the block's threads share the counters).
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&local[in[i]], 1u);
// EXERCISE histogram_private: end
// EXERCISE histogram_private: begin wait until every byte of the block is counted; then add each non-zero counter
// EXERCISE histogram_private: todo local[b] to bins[b], one atomicAdd per counter (every block adds to the same
// EXERCISE histogram_private: todo global bins), over the same loop strided by blockDim.x.
    __syncthreads();  // every byte of the block counted before the counters are read

    for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
        const unsigned int c = local[b];
        if (c != 0) atomicAdd(&bins[b], c);  // an empty bin adds nothing: skip its atomic
    }
// EXERCISE histogram_private: end
}
// EXERCISE histogram_private: end copy

// 03: coarsening, wide loads and one copy of the bins per lane.
// - A grid that fills the GPU once, each thread striding over the input: a block's private bins are
//   zeroed and merged once for millions of bytes instead of once per 256 (02's cost).
// - 16-byte loads (uint4): one load instruction brings 16 bytes, so the memory system sees few, large
//   requests and each thread has 16 bytes of work per load to hide the next one's latency.
// - 32 copies of the 256 bins, interleaved so that counter (bin, lane) sits at copies[bin * 32 + lane]:
//   shared memory has 32 banks of 4-byte words, and word w is in bank w % 32 = lane. So in one warp
//   instruction the 32 lanes always hit 32 different banks (no bank conflict) and 32 different
//   counters (no two lanes serialised on one), whatever the bytes are: 90% of them equal costs the
//   same as random ones. Warps of the block share the copies; their atomics are separate instructions.
// - The bytes before the first 16-byte boundary (the pointer may start anywhere) and after the last
//   whole chunk (fewer than 16 each) are counted one per thread by the grid's first threads.
__global__ void histogram_03_coarsened(const unsigned char *__restrict__ in, long long n,
                                       unsigned int *__restrict__ bins) {
    __shared__ unsigned int copies[kBins * kLanes];  // 32 KiB
    for (int i = threadIdx.x; i < kBins * kLanes; i += blockDim.x) copies[i] = 0;
    __syncthreads();  // all copies zeroed before any thread counts

    unsigned int *mine = copies + threadIdx.x % kLanes;  // this lane's copy: mine[bin * 32]
    const long long head = min(n, (long long)((16 - ((uintptr_t)in & 15)) & 15));
    const long long chunks = (n - head) / 16;
    const uint4 *vec = reinterpret_cast<const uint4 *>(in + head);  // 16-byte aligned by the head
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long c = tid; c < chunks; c += stride) {
        const uint4 v = vec[c];
        const unsigned int words[4] = {v.x, v.y, v.z, v.w};  // unrolled below: stays in registers
#pragma unroll
        for (int w = 0; w < 4; ++w) {
#pragma unroll
            for (int k = 0; k < 4; ++k) atomicAdd(&mine[((words[w] >> (8 * k)) & 0xFF) * kLanes], 1u);
        }
    }
    const long long tail = head + chunks * 16;
    // The head and the tail (up to 15 bytes each) one byte a thread, grid-stride: a grid of fewer than
    // 15 threads still counts them all.
    for (long long k = tid; k < head; k += stride) atomicAdd(&mine[in[k] * kLanes], 1u);
    for (long long k = tail + tid; k < n; k += stride) atomicAdd(&mine[in[k] * kLanes], 1u);
    __syncthreads();  // every byte of the block counted before the copies are summed

    for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
        unsigned int sum = 0;
        // Thread b reads its row starting at column b % 32 (then wrapping round): the 32 threads of a
        // warp read 32 different banks at each step, where reading column j together would hit one.
        for (int j = 0; j < kLanes; ++j) sum += copies[b * kLanes + (j + b) % kLanes];
        if (sum != 0) atomicAdd(&bins[b], sum);
    }
}

extern "C" int histogram_variant_count(void) { return kNumVariants; }

extern "C" const char *histogram_variant_name(int i) { return (i >= 0 && i < kNumVariants) ? kVariants[i] : nullptr; }

extern "C" cudalab_status histogram_u8_dev(const char *variant, const unsigned char *d_in, long long n,
                                           unsigned int *d_bins, int blocks, int threads, void *stream) {
    const int v = variant_id(variant);
    if (v < 0 || n < 0 || n > INT_MAX || blocks < 0 || threads < 0) return (int)cudaErrorInvalidValue;
    if (v != 2 && blocks != 0) return (int)cudaErrorInvalidValue;  // 01 and 02: one thread per byte
    if (d_bins == nullptr || (n > 0 && d_in == nullptr)) return (int)cudaErrorInvalidValue;
    const cudaStream_t s = (cudaStream_t)stream;
    // The kernels add to the bins, so they start from zero: part of every run, as in CUB's.
    CUDA_TRY(cudaMemsetAsync(d_bins, 0, kBins * sizeof(unsigned int), s));
    if (n == 0) return 0;
    if (threads == 0) threads = v == 2 ? kCoarsenedThreads : kDefaultThreads;
    int dev = 0, max_threads = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerBlock, dev));
    if (threads > max_threads) return (int)cudaErrorInvalidValue;
    if (v == 0 || v == 1) {
        const long long g = cdiv(n, threads);  // n <= INT_MAX: fits gridDim.x
        if (v == 0)
            histogram_01_global_atomics<<<(unsigned)g, threads, 0, s>>>(d_in, n, d_bins);
        else
            histogram_02_shared_private<<<(unsigned)g, threads, 0, s>>>(d_in, n, d_bins);
        CUDA_TRY_LAUNCH();
        return 0;
    }
    long long g = blocks;
    if (g == 0) {  // one full wave: as many blocks as all SMs hold at once
        int sms = 0, per_sm = 0;
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, histogram_03_coarsened, threads, 0));
        g = (long long)sms * (per_sm > 0 ? per_sm : 1);
    }
    // No more blocks than there is work for: a block with no chunk would only zero and merge.
    const long long useful = cdiv(cdiv(n, 16), threads);
    if (g > useful) g = useful;
    histogram_03_coarsened<<<(unsigned)g, threads, 0, s>>>(d_in, n, d_bins);
    CUDA_TRY_LAUNCH();
    return 0;
}

extern "C" cudalab_status histogram_u8(const char *variant, const unsigned char *in, long long n,
                                       unsigned int *bins) {
    if (variant_id(variant) < 0 || n < 0 || n > INT_MAX) return (int)cudaErrorInvalidValue;
    if (bins == nullptr || (n > 0 && in == nullptr)) return (int)cudaErrorInvalidValue;
    cudalab::DeviceAlloc din, dbins;
    if (int err = din.upload(in, (size_t)n)) return err;
    if (int err = dbins.alloc(kBins * sizeof(unsigned int))) return err;
    if (int err = histogram_u8_dev(variant, din.as<unsigned char>(), n, dbins.as<unsigned int>(), 0, 0, nullptr))
        return err;
    CUDA_TRY(cudaDeviceSynchronize());
    CUDA_TRY(cudaMemcpy(bins, dbins.p, kBins * sizeof(unsigned int), cudaMemcpyDeviceToHost));
    return cudalab::release_all(din, dbins);
}

// --- the ceiling: CUB -------------------------------------------------------------------------------
// HistogramEven with 257 levels over [0, 256) gives bin v to the value v. n fits CUB's int offset.

extern "C" cudalab_status histogram_cub_temp_bytes(long long n, unsigned long long *bytes) {
    if (n < 0 || n > INT_MAX || bytes == nullptr) return (int)cudaErrorInvalidValue;
    size_t b = 0;
    CUDA_TRY(cub::DeviceHistogram::HistogramEven(nullptr, b, (const unsigned char *)nullptr, (unsigned int *)nullptr,
                                                 kBins + 1, 0, kBins, (int)n));
    *bytes = (unsigned long long)b;
    return 0;
}

extern "C" cudalab_status histogram_cub_u8_dev(const unsigned char *d_in, long long n, unsigned int *d_bins,
                                               void *d_temp, unsigned long long temp_bytes, void *stream) {
    if (n < 0 || n > INT_MAX || d_bins == nullptr || (n > 0 && d_in == nullptr)) return (int)cudaErrorInvalidValue;
    const cudaStream_t s = (cudaStream_t)stream;
    if (n == 0) {  // nothing to count: the bins are zero, whatever CUB does with an empty input
        CUDA_TRY(cudaMemsetAsync(d_bins, 0, kBins * sizeof(unsigned int), s));
        return 0;
    }
    if (d_temp == nullptr) return (int)cudaErrorInvalidValue;
    size_t b = (size_t)temp_bytes;
    CUDA_TRY(cub::DeviceHistogram::HistogramEven(d_temp, b, d_in, d_bins, kBins + 1, 0, kBins, (int)n, s));
    CUDA_TRY_LAUNCH();
    return 0;
}

extern "C" cudalab_status histogram_cub_u8(const unsigned char *in, long long n, unsigned int *bins) {
    if (n < 0 || n > INT_MAX || bins == nullptr || (n > 0 && in == nullptr)) return (int)cudaErrorInvalidValue;
    unsigned long long temp_bytes = 0;
    if (int err = histogram_cub_temp_bytes(n, &temp_bytes)) return err;
    cudalab::DeviceAlloc din, dbins, dtemp;
    if (int err = din.upload(in, (size_t)n)) return err;
    if (int err = dbins.alloc(kBins * sizeof(unsigned int))) return err;
    if (int err = dtemp.alloc((size_t)temp_bytes)) return err;
    if (int err = histogram_cub_u8_dev(din.as<unsigned char>(), n, dbins.as<unsigned int>(), dtemp.p, temp_bytes,
                                       nullptr))
        return err;
    CUDA_TRY(cudaDeviceSynchronize());
    CUDA_TRY(cudaMemcpy(bins, dbins.p, kBins * sizeof(unsigned int), cudaMemcpyDeviceToHost));
    return cudalab::release_all(din, dbins, dtemp);
}
