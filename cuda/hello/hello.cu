// hello: launch shapes. Each thread prints one tagged line; the harness counts them.
#include "hello.h"
#include "check.cuh"

__global__ void helloGPU() {
    printf("hello kernel=helloGPU block=%d thread=%d global=%d msg=\"Hello World from the GPU!\"\n",
           blockIdx.x, threadIdx.x, blockIdx.x * blockDim.x + threadIdx.x);
}

__global__ void printInts() {
    for (int i = 0; i < 10; ++i)
        printf("hello kernel=printInts block=%d thread=%d global=%d value=%d\n", blockIdx.x, threadIdx.x,
               blockIdx.x * blockDim.x + threadIdx.x, i);
}

// The four shapes differ only in their launch configuration; one body keeps the lines comparable.
#define SHAPE_KERNEL(NAME)                                                                      \
    __global__ void NAME() {                                                                    \
        printf("hello kernel=" #NAME " block=%d thread=%d global=%d\n", blockIdx.x, threadIdx.x, \
               blockIdx.x * blockDim.x + threadIdx.x);                                          \
    }
SHAPE_KERNEL(kernelA)
SHAPE_KERNEL(kernelB)
SHAPE_KERNEL(kernelC)
SHAPE_KERNEL(kernelD)

__global__ void loop() {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    printf("hello kernel=loop block=%d thread=%d global=%d\n", blockIdx.x, threadIdx.x, i);
}

// Upper bound of one printed line, used to size the printf FIFO.
static const long long kLineBytes = 96;

extern "C" cudalab_status hello_gpu(void) {
    helloGPU<<<1, 1>>>();
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaDeviceSynchronize());
    return 0;
}

extern "C" cudalab_status hello_ints(void) {
    printInts<<<1, 1>>>();
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaDeviceSynchronize());
    return 0;
}

extern "C" cudalab_status hello_shapes(void) {
    // Synchronise after each launch so the four kernels' lines come out in order.
    kernelA<<<1, 1>>>();
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaDeviceSynchronize());
    kernelB<<<1, 10>>>();
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaDeviceSynchronize());
    kernelC<<<10, 1>>>();
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaDeviceSynchronize());
    kernelD<<<10, 10>>>();
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaDeviceSynchronize());
    return 0;
}

extern "C" cudalab_status hello_loop(int blocks, int threads) {
    if (blocks <= 0 || threads <= 0) return (int)cudaErrorInvalidConfiguration;
    CUDA_TRY(cudalab_reserve_printf((long long)blocks * threads, kLineBytes));
    loop<<<blocks, threads>>>();
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaDeviceSynchronize());
    return 0;
}
