// attention: the library entry points around cuda/shared/attention/attention_kernels.cuh
// (shared with transformer_block).
#include "attention.h"
#include "attention/attention_kernels.cuh"

// The forward rungs, then the backward ones (each of those names a training pair: the forward it
// differentiates, 02 or 03, saving the log-sum-exp, and its backward kernels).
static const char *const kVariants[] = {"01_naive",       "02_flash",     "03_flash_bf16",    "04_flash_3xtf32",
                                        "05_flash_wgmma", "06_flash_bwd", "07_flash_bwd_bf16",
                                        "08_flash_bwd_wgmma", "09_flash_bwd_ws"};
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

extern "C" int attention_variant_is_backward(const char *variant) {
    const int id = attn_variant_id(variant);
    return id == 0 ? -1 : attn_is_backward(id) ? 1 : 0;
}

extern "C" const char *attention_variant_tags(int i) {
    if (i < 0 || i >= kNumVariants) return nullptr;
    const int id = attn_variant_id(kVariants[i]);
    static const char *const kTags[4] = {"", "bf16", "backward", "bf16 backward"};
    return kTags[(attn_is_bf16(id) ? 1 : 0) | (attn_is_backward(id) ? 2 : 0)];
}

extern "C" long long attention_workspace_bytes(const char *variant, int B, int H, int S, int D) {
    const int id = attn_variant_id(variant);
    if (attn_check_args(id, B, H, S, D) != cudaSuccess) return -1;
    return attn_workspace_bytes(id, B, H, S, D);
}

extern "C" long long attention_backward_workspace_bytes(const char *variant, int B, int H, int S, int D) {
    const int id = attn_variant_id(variant);
    if (attn_check_args(id, B, H, S, D) != cudaSuccess) return -1;
    return attn_backward_workspace_bytes(id, B, H, S, D);
}

extern "C" cudalab_status attention_forward_device(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                        const float *q, const float *k, const float *v, float *o, float *lse,
                                        float *workspace, void *stream) {
    CUDA_TRY(attention_launch(variant, B, H, S, D, causal, scale, q, k, v, o, workspace, (cudaStream_t)stream, lse));
    return 0;
}

extern "C" cudalab_status attention_forward(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                 const float *q, const float *k, const float *v, float *o, float *lse) {
    const int id = attn_variant_id(variant);
    CUDA_TRY(attn_check_args(id, B, H, S, D));
    if (attn_is_bf16(id)) return (int)cudaErrorInvalidValue;
    if (q == nullptr || k == nullptr || v == nullptr || o == nullptr) return (int)cudaErrorInvalidValue;
    if (lse != nullptr && !attn_saves_lse(id)) return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)B * H * S * D * sizeof(float);
    const size_t lse_bytes = (size_t)B * H * S * sizeof(float);
    const size_t ws_bytes = (size_t)attn_workspace_bytes(id, B, H, S, D);
    // Freed on every path: by release_all after a success, by the destructors after an early return.
    cudalab::DeviceAlloc dq, dk, dv, dout, dws, dlse;
    if (int err = dq.upload(q, bytes)) return err;
    if (int err = dk.upload(k, bytes)) return err;
    if (int err = dv.upload(v, bytes)) return err;
    if (int err = dout.alloc(bytes)) return err;
    if (ws_bytes != 0) {
        if (int err = dws.alloc(ws_bytes)) return err;
    }
    if (lse != nullptr) {
        if (int err = dlse.alloc(lse_bytes)) return err;
    }
    CUDA_TRY(attention_launch(variant, B, H, S, D, causal, scale, dq.as<float>(), dk.as<float>(), dv.as<float>(),
                              dout.as<float>(), dws.as<float>(), nullptr, dlse.as<float>()));
    CUDA_TRY(cudaMemcpy(o, dout.p, bytes, cudaMemcpyDeviceToHost));
    if (lse != nullptr) CUDA_TRY(cudaMemcpy(lse, dlse.p, lse_bytes, cudaMemcpyDeviceToHost));
    return cudalab::release_all(dq, dk, dv, dout, dws, dlse);
}

extern "C" cudalab_status attention_forward_bf16_device(const char *variant, int B, int H, int S, int D, int causal,
                                                        float scale, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                        const cudalab_bf16 *v, cudalab_bf16 *o, float *lse,
                                                        void *stream) {
    CUDA_TRY(attention_launch_bf16(variant, B, H, S, D, causal, scale, q, k, v, o, (cudaStream_t)stream, lse));
    return 0;
}

extern "C" cudalab_status attention_forward_bf16(const char *variant, int B, int H, int S, int D, int causal,
                                                 float scale, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                 const cudalab_bf16 *v, cudalab_bf16 *o, float *lse) {
    const int id = attn_variant_id(variant);
    CUDA_TRY(attn_check_args(id, B, H, S, D));
    if (!attn_is_bf16(id) || q == nullptr || k == nullptr || v == nullptr || o == nullptr)
        return (int)cudaErrorInvalidValue;
    if (lse != nullptr && !attn_saves_lse(id)) return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)B * H * S * D * sizeof(cudalab_bf16);
    const size_t lse_bytes = (size_t)B * H * S * sizeof(float);
    cudalab::DeviceAlloc dq, dk, dv, dout, dlse;
    if (int err = dq.upload(q, bytes)) return err;
    if (int err = dk.upload(k, bytes)) return err;
    if (int err = dv.upload(v, bytes)) return err;
    if (int err = dout.alloc(bytes)) return err;
    if (lse != nullptr) {
        if (int err = dlse.alloc(lse_bytes)) return err;
    }
    CUDA_TRY(attention_launch_bf16(variant, B, H, S, D, causal, scale, dq.as<cudalab_bf16>(), dk.as<cudalab_bf16>(),
                                   dv.as<cudalab_bf16>(), dout.as<cudalab_bf16>(), nullptr, dlse.as<float>()));
    CUDA_TRY(cudaMemcpy(o, dout.p, bytes, cudaMemcpyDeviceToHost));
    if (lse != nullptr) CUDA_TRY(cudaMemcpy(lse, dlse.p, lse_bytes, cudaMemcpyDeviceToHost));
    return cudalab::release_all(dq, dk, dv, dout, dlse);
}

// ---- the backward ----------------------------------------------------------------------------

extern "C" cudalab_status attention_backward_device(const char *variant, int B, int H, int S, int D, int causal,
                                                    float scale, const float *q, const float *k, const float *v,
                                                    const float *o, const float *dout, const float *lse, float *dq,
                                                    float *dk, float *dv, float *workspace, void *stream) {
    CUDA_TRY(attention_backward_launch(variant, B, H, S, D, causal, scale, q, k, v, o, dout, lse, dq, dk, dv,
                                       workspace, (cudaStream_t)stream));
    return 0;
}

extern "C" cudalab_status attention_backward_bf16_device(const char *variant, int B, int H, int S, int D, int causal,
                                                         float scale, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                         const cudalab_bf16 *v, const cudalab_bf16 *o,
                                                         const cudalab_bf16 *dout, const float *lse, cudalab_bf16 *dq,
                                                         cudalab_bf16 *dk, cudalab_bf16 *dv, float *workspace,
                                                         void *stream) {
    CUDA_TRY(attention_backward_launch_bf16(variant, B, H, S, D, causal, scale, q, k, v, o, dout, lse, dq, dk, dv,
                                            workspace, (cudaStream_t)stream));
    return 0;
}

// The host-pointer forms: the same checks as the device forms first (on stand-in pointers, so a
// bad argument allocates nothing), then copy in, run, copy out.
template <typename T>
static int attn_backward_host(const char *variant, int B, int H, int S, int D, int causal, float scale, const T *q,
                              const T *k, const T *v, const T *o, const T *dout, const float *lse, T *dq, T *dk,
                              T *dv) {
    const int id = attn_variant_id(variant);
    const void *host[] = {q, k, v, o, dout, lse, dq, dk, dv};
    for (const void *p : host)
        if (p == nullptr) return (int)cudaErrorInvalidValue;
    const void *fake = reinterpret_cast<const void *>(uintptr_t{256});
    CUDA_TRY(attn_backward_check(id, B, H, S, D, scale, fake, fake, fake, fake, fake, (const float *)fake, fake, fake,
                                 fake, (const float *)fake));
    if (attn_is_bf16(id) != (sizeof(T) == 2)) return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)B * H * S * D * sizeof(T), lse_bytes = (size_t)B * H * S * sizeof(float);
    cudalab::DeviceAlloc a[5], dl, g[3], ws;
    const T *in[5] = {q, k, v, o, dout};
    for (int i = 0; i < 5; ++i)
        if (int err = a[i].upload(in[i], bytes)) return err;
    if (int err = dl.upload(lse, lse_bytes)) return err;
    for (auto &x : g)
        if (int err = x.alloc(bytes)) return err;
    if (int err = ws.alloc((size_t)attn_backward_workspace_bytes(id, B, H, S, D))) return err;
    if constexpr (sizeof(T) == 2)
        CUDA_TRY(attention_backward_launch_bf16(variant, B, H, S, D, causal, scale, a[0].as<T>(), a[1].as<T>(),
                                                a[2].as<T>(), a[3].as<T>(), a[4].as<T>(), dl.as<float>(), g[0].as<T>(),
                                                g[1].as<T>(), g[2].as<T>(), ws.as<float>(), nullptr));
    else
        CUDA_TRY(attention_backward_launch(variant, B, H, S, D, causal, scale, a[0].as<T>(), a[1].as<T>(),
                                           a[2].as<T>(), a[3].as<T>(), a[4].as<T>(), dl.as<float>(), g[0].as<T>(),
                                           g[1].as<T>(), g[2].as<T>(), ws.as<float>(), nullptr));
    T *out[3] = {dq, dk, dv};
    for (int i = 0; i < 3; ++i) CUDA_TRY(cudaMemcpy(out[i], g[i].p, bytes, cudaMemcpyDeviceToHost));
    return cudalab::release_all(a[0], a[1], a[2], a[3], a[4], dl, g[0], g[1], g[2], ws);
}

extern "C" cudalab_status attention_backward(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                             const float *q, const float *k, const float *v, const float *o,
                                             const float *dout, const float *lse, float *dq, float *dk, float *dv) {
    return attn_backward_host<float>(variant, B, H, S, D, causal, scale, q, k, v, o, dout, lse, dq, dk, dv);
}

extern "C" cudalab_status attention_backward_bf16(const char *variant, int B, int H, int S, int D, int causal,
                                                  float scale, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                                  const cudalab_bf16 *v, const cudalab_bf16 *o,
                                                  const cudalab_bf16 *dout, const float *lse, cudalab_bf16 *dq,
                                                  cudalab_bf16 *dk, cudalab_bf16 *dv) {
    return attn_backward_host<cudalab_bf16>(variant, B, H, S, D, causal, scale, q, k, v, o, dout, lse, dq, dk, dv);
}
