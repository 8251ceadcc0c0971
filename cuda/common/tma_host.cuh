// tma_host.cuh: the host side of the Hopper (sm_90a) kernels, shared by every program that has one
// (attention's 05_flash_wgmma; gemm_tc's wgmma rungs): the driver's tensor-map encoder, fetched at
// run time, and the one sentence that says why an sm_90a kernel cannot run here.
//
// A program that compiles sm_90a code sets CUDALAB_HAVE_SM90A in its build.mk (only on ARCH=90,
// where it builds for compute_90a): without it the reason is "this build has no sm_90a code".
#pragma once

#include "arch.cuh"

#include <cuda.h>  // CUtensorMap and its enums (the driver function itself is fetched at run time)
#include <cuda_runtime.h>

namespace tma_host {

// cuTensorMapEncodeTiled is a driver-API function. It is fetched through the runtime
// (cudaGetDriverEntryPointByVersion) instead of linking -lcuda: the runtime has already loaded the
// driver, and the build (on a machine with no GPU, CI's) then needs no libcuda stub.
typedef CUresult (*EncodeTiledFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                  const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static inline EncodeTiledFn encode_tiled_fn() {
    static EncodeTiledFn fn = nullptr;
    static bool tried = false;
    if (!tried) {
        tried = true;
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (EncodeTiledFn)p;
        else
            cudaGetLastError();
    }
    return fn;
}

// Why an sm_90a kernel of this build cannot run on the current device, or nullptr when it can
// (cuda/common/arch.cuh, the one place that says why a kernel cannot run here): the GPU and build
// first, then the driver's tensor-map encoder.
static inline const char *no_encoder_reason() {
    return encode_tiled_fn() == nullptr ? "needs sm_90a: the driver has no cuTensorMapEncodeTiled" : nullptr;
}
static inline const char *sm90a_unsupported_reason() { return cudalab_arch::sm90a_reason(no_encoder_reason); }

// A tensor map of `rank` (2 or 3) dimensions, dims[0] contiguous, byte strides of the outer
// dimensions in strides[0..rank-2], a box of box_cols elements (box_cols x the element size = the
// swizzle's span) by box_rows (by 1 ...). The one encoder call.
static inline cudaError_t encode_swizzled(CUtensorMap *map, CUtensorMapDataType type, CUtensorMapSwizzle swizzle,
                                          const void *ptr, int rank, const cuuint64_t *dims, const cuuint64_t *strides,
                                          int box_cols, int box_rows) {
    const cuuint32_t box[3] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows, 1u};
    const cuuint32_t elem[3] = {1u, 1u, 1u};
    const CUresult r = encode_tiled_fn()(map, type, (cuuint32_t)rank, (void *)ptr, dims, strides, box, elem,
                                         CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// bf16 operands: boxes of 64 elements (128 bytes) by box_rows in the 128-byte swizzle, the layout
// wgmma's K-major and MN-major descriptors read.
static inline cudaError_t encode_bf16_sw128(CUtensorMap *map, const void *ptr, int rank, const cuuint64_t *dims,
                                            const cuuint64_t *strides, int box_rows) {
    return encode_swizzled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_SWIZZLE_128B, ptr, rank, dims,
                           strides, 64, box_rows);
}

// FP32 results (gemm_tc's TMA-store epilogue): boxes of 32 floats (128 bytes) by box_rows in the
// 128-byte swizzle.
static inline cudaError_t encode_f32_sw128(CUtensorMap *map, const void *ptr, int rank, const cuuint64_t *dims,
                                           const cuuint64_t *strides, int box_rows) {
    return encode_swizzled(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_SWIZZLE_128B, ptr, rank, dims, strides,
                           32, box_rows);
}

}  // namespace tma_host
