// grid_stride: squareElements with a grid-stride loop, printing which thread handled which element.
#include <climits>

#include "grid_stride.h"
#include "check.cuh"

// An upper bound on one printed line: six ints of at most 11 characters plus the fixed text (~90).
static const long long kLineBytes = 160;

// The course's kernel. Each thread starts at its global index and jumps by the size of the whole
// grid, so any grid covers any n: element i is handled by global thread i % (gridDim.x * blockDim.x).
__global__ void squareElements(int *a, int n) {
    int index = blockIdx.x * blockDim.x + threadIdx.x;
    int stride = blockDim.x * gridDim.x;
    for (int i = index; i < n; i += stride) {
        int old = a[i];
        // Unsigned multiply: overflow wraps modulo 2^32 (as numpy int32 does) rather than being undefined.
        a[i] = (int)((unsigned)old * (unsigned)i);
        printf("Thread %d (Block %d, Thread in Block %d) processing element %d. Old value: %d, New value: %d\n",
               index, blockIdx.x, threadIdx.x, i, old, a[i]);
    }
}

extern "C" cudalab_status grid_stride_square_dev(int *d_a, int n, int blocks, int threads, void *stream_) {
    cudaStream_t stream = (cudaStream_t)stream_;
    if (d_a == nullptr || n <= 0 || n > GRID_STRIDE_MAX_N || blocks <= 0 || threads <= 0)
        return (int)cudaErrorInvalidValue;
    // The kernel's int index and stride must not overflow.
    if ((long long)blocks * threads > INT_MAX) return (int)cudaErrorInvalidValue;
    int dev = 0, max_threads = 0, max_grid = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerBlock, dev));
    CUDA_TRY(cudaDeviceGetAttribute(&max_grid, cudaDevAttrMaxGridDimX, dev));
    if (threads > max_threads || blocks > max_grid) return (int)cudaErrorInvalidValue;
    // Lines that do not fit the FIFO are dropped without an error: make room for all n first.
    CUDA_TRY(cudalab_reserve_printf(n, kLineBytes));
    squareElements<<<blocks, threads, 0, stream>>>(d_a, n);
    CUDA_TRY_LAUNCH();
    // The FIFO is drained to stdout at synchronisation; return only once the whole trace is out.
    CUDA_TRY(cudaStreamSynchronize(stream));
    return 0;
}

extern "C" cudalab_status grid_stride_square(int *a, int n, int blocks, int threads) {
    if (a == nullptr || n <= 0 || n > GRID_STRIDE_MAX_N) return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)n * sizeof(int);
    // Freed on every path: by release() after a success, by the destructor after an early return.
    cudalab::DeviceAlloc d;
    if (int err = d.upload(a, bytes)) return err;
    if (int err = grid_stride_square_dev(d.as<int>(), n, blocks, threads, nullptr)) return err;
    CUDA_TRY(cudaMemcpy(a, d.p, bytes, cudaMemcpyDeviceToHost));
    return d.release();
}
