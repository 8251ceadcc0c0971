// attention: the library entry points around cuda/shared/attention/attention_kernels.cuh
// (shared with transformer_block).
#include "attention.h"
#include "attention/attention_kernels.cuh"

static const char *const kVariants[] = {"01_naive", "02_flash", "03_flash_bf16", "04_flash_3xtf32", "05_flash_wgmma"};
static const int kNumVariants = (int)(sizeof(kVariants) / sizeof(kVariants[0]));

// The search space of `invoke tune attention` (attn_variant_id knows each name): 03_flash_bf16's
// choices of warps per block, query rows per warp, keys per tile and pipeline stages, then
// 05_flash_wgmma's of keys per tile, stages and schedule (ATTN_WGMMA_CONFIGS).
#define ATTN_WGMMA_NAME(NAME, ID, BC, ST, SCHED) NAME,
static const char *const kConfigs[] = {"flash_bf16_w8s2",      "flash_bf16_w8s3",      "flash_bf16_w4s2",
                                       "flash_bf16_w4s3",      "flash_bf16_w4k32s2",   "flash_bf16_w4k32s3",
                                       "flash_bf16_w4m2s2",    "flash_bf16_w4m2k32s2", "flash_bf16_w4m2k32s3",
                                       ATTN_WGMMA_CONFIGS(ATTN_WGMMA_NAME)};
#undef ATTN_WGMMA_NAME
static const int kNumConfigs = (int)(sizeof(kConfigs) / sizeof(kConfigs[0]));

extern "C" int attention_config_count(void) { return kNumConfigs; }
extern "C" const char *attention_config_name(int i) { return (i >= 0 && i < kNumConfigs) ? kConfigs[i] : nullptr; }

extern "C" const char *attention_config_variant(const char *config) {
    const int id = attn_variant_id(config);
    bool listed = false;
    for (const char *c : kConfigs) listed = listed || (config != nullptr && strcmp(c, config) == 0);
    if (!listed) return nullptr;
    return attn_is_wgmma(id) ? "05_flash_wgmma" : "03_flash_bf16";
}

extern "C" const char *attention_unsupported_reason(const char *variant) {
    const int id = attn_variant_id(variant);
    if (id == 0) return "unknown variant";
    return attn_unsupported_reason(id);
}

extern "C" int attention_variant_count(void) { return kNumVariants; }
extern "C" const char *attention_variant_name(int i) { return (i >= 0 && i < kNumVariants) ? kVariants[i] : nullptr; }

extern "C" int attention_variant_is_bf16(const char *variant) {
    const int id = attn_variant_id(variant);
    return id == 0 ? -1 : attn_is_bf16(id) ? 1 : 0;
}

extern "C" long long attention_workspace_bytes(const char *variant, int B, int H, int S, int D) {
    const int id = attn_variant_id(variant);
    if (attn_check_args(id, B, H, S, D) != cudaSuccess) return -1;
    return attn_workspace_bytes(id, B, H, S, D);
}

extern "C" cudalab_status attention_forward_device(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                        const float *q, const float *k, const float *v, float *o, float *workspace,
                                        void *stream) {
    CUDA_TRY(attention_launch(variant, B, H, S, D, causal, scale, q, k, v, o, workspace, (cudaStream_t)stream));
    return 0;
}

extern "C" cudalab_status attention_forward(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                 const float *q, const float *k, const float *v, float *o) {
    const int id = attn_variant_id(variant);
    CUDA_TRY(attn_check_args(id, B, H, S, D));
    if (attn_is_bf16(id)) return (int)cudaErrorInvalidValue;
    if (q == nullptr || k == nullptr || v == nullptr || o == nullptr) return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)B * H * S * D * sizeof(float);
    const size_t ws_bytes = (size_t)attn_workspace_bytes(id, B, H, S, D);
    // Freed on every path: by release_all after a success, by the destructors after an early return.
    cudalab::DeviceAlloc dq, dk, dv, dout, dws;
    if (int err = dq.upload(q, bytes)) return err;
    if (int err = dk.upload(k, bytes)) return err;
    if (int err = dv.upload(v, bytes)) return err;
    if (int err = dout.alloc(bytes)) return err;
    if (ws_bytes != 0) {
        if (int err = dws.alloc(ws_bytes)) return err;
    }
    CUDA_TRY(attention_launch(variant, B, H, S, D, causal, scale, dq.as<float>(), dk.as<float>(), dv.as<float>(),
                              dout.as<float>(), dws.as<float>(), nullptr));
    CUDA_TRY(cudaMemcpy(o, dout.p, bytes, cudaMemcpyDeviceToHost));
    return cudalab::release_all(dq, dk, dv, dout, dws);
}

extern "C" cudalab_status attention_forward_bf16_device(const char *variant, int B, int H, int S, int D, int causal,
                                                        float scale, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                        const cudalab_bf16 *v, cudalab_bf16 *o, void *stream) {
    CUDA_TRY(attention_launch_bf16(variant, B, H, S, D, causal, scale, q, k, v, o, (cudaStream_t)stream));
    return 0;
}

extern "C" cudalab_status attention_forward_bf16(const char *variant, int B, int H, int S, int D, int causal,
                                                 float scale, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                 const cudalab_bf16 *v, cudalab_bf16 *o) {
    const int id = attn_variant_id(variant);
    CUDA_TRY(attn_check_args(id, B, H, S, D));
    if (!attn_is_bf16(id) || q == nullptr || k == nullptr || v == nullptr || o == nullptr)
        return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)B * H * S * D * sizeof(cudalab_bf16);
    cudalab::DeviceAlloc dq, dk, dv, dout;
    if (int err = dq.upload(q, bytes)) return err;
    if (int err = dk.upload(k, bytes)) return err;
    if (int err = dv.upload(v, bytes)) return err;
    if (int err = dout.alloc(bytes)) return err;
    CUDA_TRY(attention_launch_bf16(variant, B, H, S, D, causal, scale, dq.as<cudalab_bf16>(), dk.as<cudalab_bf16>(),
                                   dv.as<cudalab_bf16>(), dout.as<cudalab_bf16>(), nullptr));
    CUDA_TRY(cudaMemcpy(o, dout.p, bytes, cudaMemcpyDeviceToHost));
    return cudalab::release_all(dq, dk, dv, dout);
}
