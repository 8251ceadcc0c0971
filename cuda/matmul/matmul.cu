// matmul: the library entry points. The kernels live in matmul_kernels.cuh, shared with attention.
#include <cstring>

#include "matmul.h"
#include "matmul_kernels.cuh"

#ifdef CUDALAB_HAVE_CUBLAS
#include <cublas_v2.h>

// cuBLAS reports cublasStatus_t, not cudaError_t. Turn a failure into a CUDA code so it goes
// through the one CUDA_TRY macro (which prints the call); the cuBLAS status is printed here.
static cudaError_t cublas_status(cublasStatus_t s, const char *what) {
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

// One handle per process, made on first use: cublasCreate costs milliseconds and allocates, so it
// must not sit inside a timed call. Never destroyed: the process owns it until exit.
// Returns a cudaError_t as int, like the entry points (CUDA_TRY returns that way).
static int cublas_handle(cublasHandle_t *out) {
    static cublasHandle_t handle = nullptr;
    if (handle == nullptr) {
        CUDA_TRY(cublas_status(cublasCreate(&handle), "cublasCreate"));
        // Plain FP32 (no TF32 tensor cores): the same arithmetic the hand-written kernels do.
        CUDA_TRY(cublas_status(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
    }
    *out = handle;
    return 0;
}

// cuBLAS is column-major. A row-major m×n matrix is the same memory as a column-major n×m one,
// its transpose, so row-major C = A·op(B) is computed as column-major Cᵀ = op(B)ᵀ·Aᵀ: swap the
// operands and the roles of m and n. With trans_b, B (n×k row-major) read column-major is the k×n
// Bᵀ, and op(B)ᵀ = B asks cuBLAS to transpose it back.
static int cublas_sgemm(bool trans_b, int m, int n, int k, const float *A, const float *B, float *C,
                                float alpha, int batch, long long sa, long long sb, long long sc,
                                cudaStream_t stream) {
    if (m == 0 || n == 0 || batch == 0) return 0;
    if (k == 0) {  // cuBLAS leaves C alone when k = 0 (beta·C with beta = 0 is not guaranteed to write)
        for (int z = 0; z < batch; ++z)
            CUDA_TRY(cudaMemsetAsync(C + z * sc, 0, (size_t)m * n * sizeof(float), stream));
        return 0;
    }
    cublasHandle_t h;
    CUDA_TRY((cudaError_t)cublas_handle(&h));
    CUDA_TRY(cublas_status(cublasSetStream(h, stream), "cublasSetStream"));
    const float beta = 0.0f;
    const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int ldb = trans_b ? k : n;
    CUDA_TRY(cublas_status(cublasSgemmStridedBatched(h, opb, CUBLAS_OP_N, n, m, k, &alpha, B, ldb, sb, A, k, sa,
                                                     &beta, C, n, sc, batch),
                           "cublasSgemmStridedBatched"));
    return 0;
}
#endif

extern "C" int matmul_have_cublas(void) {
#ifdef CUDALAB_HAVE_CUBLAS
    return 1;
#else
    return 0;
#endif
}

static bool is_cublas(const char *variant) { return variant != nullptr && strcmp(variant, "cublas") == 0; }

extern "C" int matmul_check(const char *variant, int tile, int trans_b) {
    if (is_cublas(variant)) return matmul_have_cublas() ? 0 : (int)cudaErrorNotSupported;
    return (int)matmul_check_tile(variant, tile, trans_b != 0);
}

// The one dispatcher: every entry point comes through here.
static cudaError_t dispatch(const char *variant, int tile, bool trans_b, int batch, int m, int n, int k,
                            float alpha, const float *A, const float *B, float *C, cudaStream_t stream) {
    const long long sa = (long long)m * k, sb = (long long)k * n, sc = (long long)m * n;
    if (is_cublas(variant)) {
#ifdef CUDALAB_HAVE_CUBLAS
        if (m < 0 || n < 0 || k < 0 || batch < 0) return cudaErrorInvalidValue;
        return (cudaError_t)cublas_sgemm(trans_b, m, n, k, A, B, C, alpha, batch, sa, sb, sc, stream);
#else
        return cudaErrorNotSupported;
#endif
    }
    return matmul_launch(variant, tile, trans_b, m, n, k, A, B, C, alpha, batch, sa, sb, sc, stream);
}

extern "C" int matmul_device(const char *variant, int tile, int m, int n, int k, const float *a, const float *b,
                             float *c, void *stream) {
    CUDA_TRY(dispatch(variant, tile, false, 1, m, n, k, 1.0f, a, b, c, (cudaStream_t)stream));
    return 0;
}

extern "C" int matmul_host_batched(const char *variant, int tile, int trans_b, int batch, int m, int n, int k,
                                   float alpha, const float *a, const float *b, float *c) {
    if (m < 0 || n < 0 || k < 0 || batch < 0) return (int)cudaErrorInvalidValue;
    // Refuse bad variants and tiles before allocating anything.
    const int ok = matmul_check(variant, tile, trans_b);
    if (ok != 0) return ok;
    const size_t na = (size_t)batch * m * k, nb = (size_t)batch * k * n, nc = (size_t)batch * m * n;
    if (nc == 0) return 0;
    float *dA = nullptr, *dB = nullptr, *dC = nullptr;
    // The body returns at its first failure; the buffers are freed after it on every path.
    // (cudaMalloc of 0 bytes gives NULL, which is fine: with k = 0 nothing reads A or B.)
    auto body = [&]() -> int {
        CUDA_TRY(cudaMalloc(&dA, na * sizeof(float)));
        CUDA_TRY(cudaMalloc(&dB, nb * sizeof(float)));
        CUDA_TRY(cudaMalloc(&dC, nc * sizeof(float)));
        if (na) CUDA_TRY(cudaMemcpy(dA, a, na * sizeof(float), cudaMemcpyHostToDevice));
        if (nb) CUDA_TRY(cudaMemcpy(dB, b, nb * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_TRY(dispatch(variant, tile, trans_b != 0, batch, m, n, k, alpha, dA, dB, dC, 0));
        CUDA_TRY(cudaMemcpy(c, dC, nc * sizeof(float), cudaMemcpyDeviceToHost));
        return 0;
    };
    const int rc = body();
    // The first error is the one reported; a failing free after a success is still reported.
    const cudaError_t fa = cudaFree(dA), fb = cudaFree(dB), fc = cudaFree(dC);
    if (rc != 0) return rc;
    CUDA_TRY(fa);
    CUDA_TRY(fb);
    CUDA_TRY(fc);
    return 0;
}

extern "C" int matmul_host(const char *variant, int tile, int m, int n, int k, const float *a, const float *b,
                           float *c) {
    return matmul_host_batched(variant, tile, 0, 1, m, n, k, 1.0f, a, b, c);
}
