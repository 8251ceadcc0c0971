// reduction: out = a * x + y with a grid-stride loop. See reduction.h for the contract of each entry point.
#include <cstring>

#include "reduction.h"
#include "check.cuh"

namespace {

const int kDefaultThreads = 256;

const char *const kVariants[] = {"01_grid_stride"};
const int kNumVariants = (int)(sizeof(kVariants) / sizeof(kVariants[0]));

int variant_id(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < kNumVariants; ++i)
        if (strcmp(name, kVariants[i]) == 0) return i;
    return -1;
}

}  // namespace

// Outside the anonymous namespace, so that profilers show the kernel's plain name.
// Each thread starts at its global index and steps by the whole grid: any n runs on a fixed grid,
// and in every round consecutive threads touch consecutive elements (coalesced).
__global__ void reduction_01_grid_stride(float a, const float *__restrict__ x, const float *__restrict__ y,
                                      float *__restrict__ out, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = a * x[i] + y[i];
}

extern "C" int reduction_variant_count(void) { return kNumVariants; }

extern "C" const char *reduction_variant_name(int i) { return (i >= 0 && i < kNumVariants) ? kVariants[i] : nullptr; }

extern "C" cudalab_status reduction_f32_dev(const char *variant, float a, const float *d_x, const float *d_y,
                                         float *d_out, long long n, int blocks, int threads, void *stream) {
    if (variant_id(variant) < 0 || n < 0 || blocks < 0 || threads < 0) return (int)cudaErrorInvalidValue;
    if (n == 0) return 0;
    if (d_x == nullptr || d_y == nullptr || d_out == nullptr) return (int)cudaErrorInvalidValue;
    if (threads == 0) threads = kDefaultThreads;
    int dev = 0, max_threads = 0, sms = 0, per_sm = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerBlock, dev));
    if (threads > max_threads) return (int)cudaErrorInvalidValue;
    long long g = blocks;
    if (g == 0) {  // one full wave: as many blocks as all SMs hold at once
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reduction_01_grid_stride, threads, 0));
        g = (long long)sms * (per_sm > 0 ? per_sm : 1);
    }
    const long long useful = cdiv(n, threads);
    if (g > useful) g = useful;
    if (g > 0x7fffffffLL) return (int)cudaErrorInvalidValue;
    reduction_01_grid_stride<<<(unsigned)g, threads, 0, (cudaStream_t)stream>>>(a, d_x, d_y, d_out, n);
    CUDA_TRY_LAUNCH();
    return 0;
}

extern "C" cudalab_status reduction_f32(const char *variant, float a, const float *x, const float *y, float *out,
                                     long long n) {
    if (variant_id(variant) < 0 || n < 0) return (int)cudaErrorInvalidValue;
    if (n == 0) return 0;
    if (x == nullptr || y == nullptr || out == nullptr) return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)n * sizeof(float);
    cudalab::DeviceAlloc dx, dy, dout;
    if (int err = dx.upload(x, bytes)) return err;
    if (int err = dy.upload(y, bytes)) return err;
    if (int err = dout.alloc(bytes)) return err;
    if (int err = reduction_f32_dev(variant, a, (const float *)dx.p, (const float *)dy.p, (float *)dout.p, n, 0, 0,
                                 nullptr))
        return err;
    CUDA_TRY(cudaDeviceSynchronize());
    CUDA_TRY(cudaMemcpy(out, dout.p, bytes, cudaMemcpyDeviceToHost));
    if (int err = dx.release()) return err;
    if (int err = dy.release()) return err;
    return dout.release();
}
