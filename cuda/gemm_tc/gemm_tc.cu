// gemm_tc: the library entry points. The hand-written kernels live in dispatch.cuh and its rungs (02 shared
// with transformer_block's bf16 path); the cuBLAS baselines live here.
#include <cstring>

#include "gemm_tc.h"
#include "dispatch.cuh"

using gemm_tc::kVariantNames;
using gemm_tc::VCOUNT;

#ifdef CUDALAB_FAULTS
static int g_drop_k_tiles = 0;  // gemm_tc_set_fault_drop_k_tiles: the fault build only (faults.cuh)
#endif

extern "C" int gemm_tc_variant_count(void) { return VCOUNT; }
extern "C" const char *gemm_tc_variant_name(int i) { return i >= 0 && i < VCOUNT ? kVariantNames[i] : nullptr; }
extern "C" const char *gemm_tc_variant_tags(int i) {
    if (i < 0 || i >= VCOUNT) return nullptr;
    if (i == gemm_tc::VCUBLAS_BF16 || i == gemm_tc::VCUBLAS_TF32) return "cublas";
    return gemm_tc::is_wgmma(i) ? "kernel wgmma" : "kernel";
}

extern "C" int gemm_tc_config_count(void) { return gemm_tc::kWgmmaConfigCount; }
extern "C" const char *gemm_tc_config_name(int i) {
    return i >= 0 && i < gemm_tc::kWgmmaConfigCount ? gemm_tc::kWgmmaConfigs[i].name : nullptr;
}
extern "C" int gemm_tc_config_index(const char *name) { return gemm_tc::config_index(name); }
extern "C" int gemm_tc_variant_config(const char *variant) {
    return gemm_tc::variant_config(gemm_tc::variant_index(variant));
}
extern "C" int gemm_tc_set_tuned(int i) {
    return gemm_tc::set_tuned_config(i) ? 0 : (int)cudaErrorInvalidValue;
}
extern "C" int gemm_tc_tuned_config(void) { return gemm_tc::tuned_config(); }
extern "C" int gemm_tc_tuned_is_set(void) { return gemm_tc::tuned_config_is_set() ? 1 : 0; }

extern "C" int gemm_tc_have_cublas(void) {
#ifdef CUDALAB_HAVE_CUBLAS
    return 1;
#else
    return 0;
#endif
}

#ifdef CUDALAB_HAVE_CUBLAS
#include "cublas_check.cuh"

// Row-major C (m x n) = A (m x k) . B^T (B: n x k) through column-major cuBLAS: the same memory read
// column-major is C^T (n x m) = B . A^T. B row-major n x k is, column-major, the k x n matrix B^T
// (ld k): transpose it back (OP_T). A row-major m x k is, column-major, A^T (k x m, ld k): OP_N.
// This is cuBLAS's "TN" case, its fastest.
static int cublas_gemm(bool tf32, int m, int n, int k, const void *A, const void *B, float *C, cudaStream_t stream) {
    cublasHandle_t h;
    CUDA_TRY((cudaError_t)cublas_handle(&h));
    CUDA_TRY(cublas_status(cublasSetStream(h, stream), "cublasSetStream"));
    const float alpha = 1.0f, beta = 0.0f;
    const cudaDataType_t in = tf32 ? CUDA_R_32F : CUDA_R_16BF;
    const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUDA_TRY(cublas_status(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, B, in, k, A, in, k, &beta, C,
                                        CUDA_R_32F, n, compute, CUBLAS_GEMM_DEFAULT),
                           "cublasGemmEx"));
    return 0;
}
#endif

extern "C" const char *gemm_tc_unsupported_reason(const char *variant) {
    const int v = gemm_tc::variant_index(variant);
    if (v < 0) return "unknown variant";
    if (v == gemm_tc::VCUBLAS_BF16 || v == gemm_tc::VCUBLAS_TF32)
        return gemm_tc_have_cublas() ? nullptr : "built without cuBLAS (not found beside nvcc; see `invoke doctor`)";
    if (gemm_tc::is_wgmma(v)) return gemm_tc::wgmma_unsupported_reason();
    return gemm_tc::sm80_unsupported_reason();
}

extern "C" const char *gemm_tc_requirement(const char *variant, int m, int n, int k) {
    const int v = gemm_tc::variant_index(variant);
    if (v < 0) return "unknown variant";
    return gemm_tc::requirement(v, m, n, k);
}

static __global__ void widen_bf16(const uint16_t *__restrict__ in, float *__restrict__ out, size_t count) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __uint_as_float((uint32_t)in[i] << 16);  // bf16 is a float's top half: exact
}

extern "C" int gemm_tc_tf32_device(int m, int n, int k, const float *a, const float *b, float *c, void *stream) {
    if (m < 0 || n < 0 || k < 0) return (int)cudaErrorInvalidValue;
#ifdef CUDALAB_HAVE_CUBLAS
    if (m == 0 || n == 0) return 0;
    if (k == 0) {  // cuBLAS leaves C alone when k = 0
        CUDA_TRY(cudaMemsetAsync(c, 0, (size_t)m * n * sizeof(float), (cudaStream_t)stream));
        return 0;
    }
    return cublas_gemm(true, m, n, k, a, b, c, (cudaStream_t)stream);
#else
    (void)a, (void)b, (void)c, (void)stream;
    return (int)cudaErrorNotSupported;
#endif
}

// The one dispatcher for bf16 operands: variant v, or (v < 0) tuning configuration cfg.
static int dispatch(int v, int cfg, int m, int n, int k, const uint16_t *a, const uint16_t *b, float *c,
                    cudaStream_t s) {
    if (v < 0) {
        CUDA_TRY(gemm_tc::launch_config(cfg, m, n, k, a, b, c, s, CUDALAB_FAULT(g_drop_k_tiles)));
        return 0;
    }
    if (v == gemm_tc::VCUBLAS_BF16) {
#ifdef CUDALAB_HAVE_CUBLAS
        if (m == 0 || n == 0) return 0;
        if (k == 0) {
            CUDA_TRY(cudaMemsetAsync(c, 0, (size_t)m * n * sizeof(float), s));
            return 0;
        }
        return cublas_gemm(false, m, n, k, a, b, c, s);
#else
        return (int)cudaErrorNotSupported;
#endif
    }
    if (v == gemm_tc::VCUBLAS_TF32) return (int)cudaErrorInvalidValue;  // float operands: gemm_tc_tf32_device
    CUDA_TRY(gemm_tc::launch(v, m, n, k, a, b, c, s, CUDALAB_FAULT(g_drop_k_tiles)));
    return 0;
}

extern "C" int gemm_tc_device(const char *variant, int m, int n, int k, const cudalab_bf16 *a, const cudalab_bf16 *b,
                              float *c, void *stream) {
    const int v = gemm_tc::variant_index(variant);
    if (v < 0 || gemm_tc_requirement(variant, m, n, k) != nullptr) return (int)cudaErrorInvalidValue;
    return dispatch(v, -1, m, n, k, a, b, c, (cudaStream_t)stream);
}

extern "C" int gemm_tc_config_device(int i, int m, int n, int k, const cudalab_bf16 *a, const cudalab_bf16 *b,
                                     float *c, void *stream) {
    return dispatch(-1, i, m, n, k, a, b, c, (cudaStream_t)stream);
}

// Copy in, run variant v (or configuration cfg when v < 0), copy out; C poisoned first.
static int host_roundtrip(int v, int cfg, int m, int n, int k, const uint16_t *a, const uint16_t *b, float *c) {
    const size_t na = (size_t)m * k, nb = (size_t)n * k, nc = (size_t)m * n;
    if (nc == 0) return 0;
    // Freed on every path: by release_all after a success, by the destructors after an early return.
    cudalab::DeviceAlloc dA, dB, dC, fA, fB;
    if (int err = dA.upload(a, na * sizeof(uint16_t))) return err;
    if (int err = dB.upload(b, nb * sizeof(uint16_t))) return err;
    if (int err = dC.alloc(nc * sizeof(float))) return err;
    // Poison C (0xFF bytes are NaN): an element no kernel writes comes back NaN and fails the check.
    CUDA_TRY(cudaMemset(dC.p, 0xFF, nc * sizeof(float)));
    if (v == gemm_tc::VCUBLAS_TF32) {
        if (int err = fA.alloc(na * sizeof(float))) return err;
        if (int err = fB.alloc(nb * sizeof(float))) return err;
        if (na) widen_bf16<<<256, 256>>>(dA.as<uint16_t>(), fA.as<float>(), na);
        CUDA_TRY_LAUNCH();
        if (nb) widen_bf16<<<256, 256>>>(dB.as<uint16_t>(), fB.as<float>(), nb);
        CUDA_TRY_LAUNCH();
        CUDA_TRY((cudaError_t)gemm_tc_tf32_device(m, n, k, fA.as<float>(), fB.as<float>(), dC.as<float>(), nullptr));
    } else {
        CUDA_TRY((cudaError_t)dispatch(v, cfg, m, n, k, dA.as<uint16_t>(), dB.as<uint16_t>(), dC.as<float>(), 0));
    }
    CUDA_TRY(cudaMemcpy(c, dC.p, nc * sizeof(float), cudaMemcpyDeviceToHost));
    return cudalab::release_all(dA, dB, dC, fA, fB);
}

extern "C" int gemm_tc_host(const char *variant, int m, int n, int k, const cudalab_bf16 *a, const cudalab_bf16 *b,
                            float *c) {
    const int v = gemm_tc::variant_index(variant);
    if (v < 0 || gemm_tc_requirement(variant, m, n, k) != nullptr) return (int)cudaErrorInvalidValue;
    if (gemm_tc_unsupported_reason(variant) != nullptr) return (int)cudaErrorNotSupported;
    return host_roundtrip(v, -1, m, n, k, a, b, c);
}

extern "C" int gemm_tc_config_host(int i, int m, int n, int k, const cudalab_bf16 *a, const cudalab_bf16 *b,
                                   float *c) {
    if (i < 0 || i >= gemm_tc::kWgmmaConfigCount || m < 0 || n < 0 || k < 0) return (int)cudaErrorInvalidValue;
    if (gemm_tc::wgmma_unsupported_reason() != nullptr) return (int)cudaErrorNotSupported;
    return host_roundtrip(-1, i, m, n, k, a, b, c);
}

#ifdef CUDALAB_FAULTS
extern "C" int gemm_tc_set_fault_drop_k_tiles(int t) {
    if (t < 0) return (int)cudaErrorInvalidValue;
    g_drop_k_tiles = t;
    return 0;
}
#endif
