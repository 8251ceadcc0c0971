// arch.cuh: the one sentence that says why a kernel of this build cannot run on this GPU, for every
// kernel that needs a newer chip than the oldest CUDA 13 supports (sm_75): mma.sync bf16/tf32,
// cp.async and ldmatrix need sm_80; wgmma, TMA and setmaxnreg need sm_90a (tma_host.cuh asks here).
//
// Two things must hold before such a kernel is launched:
//   - the GPU has the feature: its compute capability is at least the one the kernel needs;
//   - the code that will run was compiled for it. A build targets one architecture (or several, in a
//     fat binary), and the driver runs the best match for the GPU: SASS of the same major version, or
//     else the newest PTX it can JIT. Device code for an older target than the kernel needs is compiled
//     out (`#if CUDALAB_SM80_CODE` below), so launching it would compute nothing. cudaFuncGetAttributes
//     names the PTX target of the very code the driver picked for this GPU (ptxVersion: 75 for
//     compute_75), which is what both questions need; a compile-time macro cannot know it, since the
//     choice depends on the GPU the program runs on.
// The reasons read "needs sm_80: this GPU is sm_75" or "needs sm_80: this build targets sm_75 (build
// with ARCH=80 or newer)"; the Python side and the executables print them before any launch.
#pragma once

#include <cstdio>
#include <cuda_runtime.h>

// 1 in the host pass and in device passes for sm_80 or newer: guards device code that uses sm_80
// instructions (a kernel keeps its declaration in every pass and an empty body below sm_80).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define CUDALAB_SM80_CODE 1
#else
#define CUDALAB_SM80_CODE 0
#endif

namespace cudalab_arch {

// The current device's compute capability as 10*major + minor (75 for a T4), or -1 without a usable GPU.
static inline int device_sm() {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return 10 * major + minor;
}

// The architecture the kernel's code on this GPU was compiled for (10*major + minor, the
// __CUDA_ARCH__ / 10 of its device pass), or -1 when the binary has no code this GPU can run.
static inline int kernel_sm(const void *kernel) {
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, kernel) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return a.ptxVersion;
}

// Why `kernel`, which needs sm_<need> (e.g. 80), cannot run here, or nullptr when it can. Without a
// usable GPU it says nothing (nullptr): the launch itself then fails with the runtime's own error
// (no device, or a driver too old), which is the more useful message. The text lives in a per-thread
// buffer, valid until this thread's next call.
static inline const char *needs_sm(int need, const void *kernel) {
    static thread_local char why[160];
    const int dev = device_sm();
    if (dev < 0) return nullptr;
    if (dev < need) {
        snprintf(why, sizeof why, "needs sm_%d: this GPU is sm_%d", need, dev);
        return why;
    }
    const int built = kernel_sm(kernel);
    if (built < 0) {
        snprintf(why, sizeof why, "needs sm_%d: this build has no code for this GPU (sm_%d); rebuild with `invoke build`",
                 need, dev);
        return why;
    }
    if (built < need) {
        snprintf(why, sizeof why, "needs sm_%d: this build targets sm_%d (build with ARCH=%d or newer)", need, built,
                 need);
        return why;
    }
    return nullptr;
}

// Why an sm_90a kernel of this build cannot run on the current device, or nullptr when it can.
// sm_90a code runs on compute capability 9.0 only. A program that compiles sm_90a code sets
// CUDALAB_HAVE_SM90A in its build.mk (only on ARCH=90, where it builds for compute_90a): without it
// the reason is "this build has no sm_90a code". `extra` (may be nullptr) is asked last, for what
// else the kernel needs from the driver (tma_host.cuh: the tensor-map encoder).
static inline const char *sm90a_reason(const char *(*extra)()) {
#if defined(CUDALAB_HAVE_SM90A)
    static thread_local char why[160];
    const int dev = device_sm();
    if (dev < 0) return "needs sm_90a: no usable GPU";
    if (dev != 90) {
        snprintf(why, sizeof why, "needs sm_90a: this GPU is sm_%d, not compute capability 9.0 (Hopper)", dev);
        return why;
    }
    return extra != nullptr ? extra() : nullptr;
#else
    (void)extra;
    return "needs sm_90a: this build has no sm_90a code (build with ARCH=90)";
#endif
}

}  // namespace cudalab_arch
