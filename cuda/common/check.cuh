// cudalab's one error macro, one cdiv and one printf-FIFO helper.
// Every program includes this file; nothing here is copied elsewhere.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "faults.cuh"  // CUDALAB_FAULT: what only the tests' fault build does, 0 in every other build

// A driver older than the CUDA runtime these programs were built with: the runtime says only "CUDA
// driver version is insufficient" (cudaErrorInsufficientDriver). This sentence, the same as
// harness/base/errors.py's DRIVER_TOO_OLD (a test compares them), says which versions and the two ways out.
#define CUDALAB_DRIVER_TOO_OLD                                                                            \
    "the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d these programs are built with (%s): " \
    "update the NVIDIA driver, or use a CUDA toolkit the driver supports (%d.%d or older)"

// The message of a failed call: the runtime's, except for a driver that is there but too old.
static inline void cudalab_print_error(cudaError_t err, const char *file, int line, const char *call) {
    int drv = 0;
    if (err == cudaErrorInsufficientDriver && cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0 &&
        drv / 10 < CUDART_VERSION / 10) {
        const int dmaj = drv / 1000, dmin = (drv % 1000) / 10;
        const int rmaj = CUDART_VERSION / 1000, rmin = (CUDART_VERSION % 1000) / 10;
        // The oldest driver branch per toolkit (NVIDIA's compatibility table), as in harness/base/errors.py.
        char need[64];
        if (rmaj == 13 && rmin == 0) snprintf(need, sizeof need, "CUDA 13.0 needs driver 580 or newer");
        else snprintf(need, sizeof need, "CUDA %d.%d needs a newer driver", rmaj, rmin);
        fprintf(stderr, "%s:%d: %s failed: " CUDALAB_DRIVER_TOO_OLD "\n", file, line, call, dmaj, dmin, rmaj, rmin, need,
                dmaj, dmin);
        return;
    }
    fprintf(stderr, "%s:%d: %s failed: %s: %s\n", file, line, call, cudaGetErrorName(err), cudaGetErrorString(err));
}

// CUDALAB_CHECK(call, on_error) is the single mechanism: evaluate the call once, and on failure
// report file:line, the call's text and the CUDA error name and message, then run `on_error`.
// The two spellings below pick `on_error` for executables and for library entry points.
#define CUDALAB_CHECK(call, on_error)                                                          \
    do {                                                                                      \
        cudaError_t cudalab_err_ = (call);                                                    \
        if (cudalab_err_ != cudaSuccess) {                                                    \
            cudalab_print_error(cudalab_err_, __FILE__, __LINE__, #call);                     \
            on_error;                                                                         \
        }                                                                                     \
    } while (0)

// Executables: a CUDA failure ends the process with status 1 (status 2 is kept for bad argv).
// Where the failure means there is no usable GPU at all, say what to do about it.
static inline void cudalab_exit_cuda(cudaError_t err) {
    int drv = 0;
    const bool too_old = err == cudaErrorInsufficientDriver && cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0;
    if ((err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) && !too_old)
        fprintf(stderr, "no usable GPU here: run `invoke doctor` to see what is missing and how to fix it\n");
    exit(1);
}
#define CUDA_CHECK(call) CUDALAB_CHECK(call, cudalab_exit_cuda(cudalab_err_))
// Library entry points (extern "C" int f(...)): hand the code back to Python, which raises CudaError.
// The message still goes to stderr so a C caller sees where it failed.
#define CUDA_TRY(call) CUDALAB_CHECK(call, return (int)cudalab_err_)

// A launch reports configuration errors only through cudaGetLastError(); check after every launch.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
#define CUDA_TRY_LAUNCH() CUDA_TRY(cudaGetLastError())

// Ceiling division: the number of blocks (or tiles) needed to cover n items, b at a time.
// Grids are sized with this everywhere so that sizes that don't divide evenly are still covered.
__host__ __device__ constexpr inline long long cdiv(long long n, long long b) { return (n + b - 1) / b; }

// Named limits and constants, instead of numbers repeated across programs.
// gridDim.y and gridDim.z are at most 65535 on every GPU CUDA 13 supports (x goes to 2^31 - 1,
// which cudaDevAttrMaxGridDimX reports).
constexpr int CUDALAB_MAX_GRID_YZ = 65535;
// log2(e): exp(x) = exp2(x * log2 e), which softmax-style kernels fold into one multiply.
constexpr float CUDALAB_LOG2E = 1.4426950408889634f;

// A kernel that takes more than 48 KiB of dynamic shared memory must opt in before its launch.
// The attribute belongs to the kernel on the current device, so it is set before each such launch
// (a cheap host call) rather than remembered in a static flag, which a cudaSetDevice would outdate.
template <class Kernel>
static inline cudaError_t cudalab_allow_dynamic_smem(Kernel *kernel, size_t bytes) {
    if (bytes <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

#ifdef __cplusplus
namespace cudalab {
// RAII for device memory in the host-pointer entry points: a cudaMalloc that an early CUDA_TRY
// return cannot leak. `release()` frees it on the success path and reports cudaFree's status;
// the destructor frees only on an error path, where the first error is what gets reported.
struct DeviceAlloc {
    void *p = nullptr;
    DeviceAlloc() = default;
    DeviceAlloc(const DeviceAlloc &) = delete;
    DeviceAlloc &operator=(const DeviceAlloc &) = delete;
    ~DeviceAlloc() {
        if (p) (void)cudaFree(p);
    }
    int alloc(size_t bytes) {
        CUDA_TRY(cudaMalloc(&p, bytes > 0 ? bytes : 1));
        return 0;
    }
    // Allocates and fills from the host: the inputs of a host-pointer entry point. Nothing to copy
    // from an empty array (its host pointer may be null).
    int upload(const void *host, size_t bytes) {
        if (int err = alloc(bytes)) return err;
        if (bytes > 0) CUDA_TRY(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
        return 0;
    }
    template <class T>
    T *as() const { return static_cast<T *>(p); }
    int release() {
        void *q = p;
        p = nullptr;
        CUDA_TRY(cudaFree(q));
        return 0;
    }
};
// The success path's end: frees every allocation, in order, and returns the first error (0 when
// every free succeeded). Each one is freed whatever the others return.
template <class... Allocs>
static inline int release_all(Allocs &...allocs) {
    const int errs[] = {allocs.release()...};  // a braced list runs left to right
    for (int e : errs)
        if (e != 0) return e;
    return 0;
}
}  // namespace cudalab
#endif

// Device printf writes records (format pointer, arguments, metadata -- not rendered text) into a
// FIFO (1 MiB by default) that is drained only at synchronisation points; records that don't fit
// are lost. Programs that print a trace size the FIFO before their first launch. On an H200 a
// 3-int record took about 256 bytes of FIFO (65536 lines lost 12288 of them in 13.6 MB), so the
// helper reserves 8x the rendered line bound per line, plus slack: the trace must never be partial.
static inline cudaError_t cudalab_reserve_printf(long long lines, long long bytes_per_line) {
    if (bytes_per_line < 64) bytes_per_line = 64;
    size_t need = (size_t)(lines * bytes_per_line * 8) + ((size_t)8 << 20);
    size_t have = 0;
    cudaError_t err = cudaDeviceGetLimit(&have, cudaLimitPrintfFifoSize);
    if (err != cudaSuccess) return err;
    if (need <= have) return cudaSuccess;
    return cudaDeviceSetLimit(cudaLimitPrintfFifoSize, need);
}

// Argument checks in executables: a bad argv is the user's mistake, not a crash. Status 2.
#define CUDALAB_USAGE_ERROR(...)                                                              \
    do {                                                                                      \
        fprintf(stderr, "error: " __VA_ARGS__);                                               \
        fputc('\n', stderr);                                                                  \
        exit(2);                                                                              \
    } while (0)
