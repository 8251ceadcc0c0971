// cuBLAS through the one CUDA error path: the programs that link cuBLAS for a baseline (matmul,
// gemm_tc) include this file when their build.mk found it (CUDALAB_HAVE_CUBLAS).
#pragma once

#include <cstdio>
#include <cublas_v2.h>

#include "check.cuh"

// cuBLAS reports cublasStatus_t, not cudaError_t. Turn a failure into a CUDA code so it goes
// through the one CUDA_TRY macro (which prints the call); the cuBLAS status is printed here.
static inline cudaError_t cublas_status(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return cudaSuccess;
    fprintf(stderr, "%s: cuBLAS status %d (%s)\n", what, (int)s, cublasGetStatusString(s));
    switch (s) {
        case CUBLAS_STATUS_ALLOC_FAILED: return cudaErrorMemoryAllocation;
        case CUBLAS_STATUS_INVALID_VALUE: return cudaErrorInvalidValue;
        case CUBLAS_STATUS_NOT_SUPPORTED: case CUBLAS_STATUS_ARCH_MISMATCH: return cudaErrorNotSupported;
        case CUBLAS_STATUS_NOT_INITIALIZED: return cudaErrorInitializationError;
        default: return cudaErrorUnknown;
    }
}

// One handle per library, made on first use: cublasCreate costs milliseconds and allocates, so it
// must not sit inside a timed call. Never destroyed: the process owns it until exit. Default math
// mode: FP32 stays FP32 unless a call asks for TF32 itself (gemm_tc's cublas_tf32 compute type).
// Returns a cudaError_t as int, like the entry points (CUDA_TRY returns that way).
static inline int cublas_handle(cublasHandle_t *out) {
    static cublasHandle_t handle = nullptr;
    if (handle == nullptr) {
        CUDA_TRY(cublas_status(cublasCreate(&handle), "cublasCreate"));
        CUDA_TRY(cublas_status(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
    }
    *out = handle;
    return 0;
}
