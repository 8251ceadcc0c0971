// transformer_block: linear Q/K/V with bias, multi-head attention, residual add + LayerNorm.
// The products are the matmul program's kernels and attention is the attention program's
// (both through their shared headers); the two small kernels here do what neither has: the bias
// and head split, and the residual LayerNorm. Kernel names are plain so that an nsys kernel table
// reads like the course's: matmul_02_tiled<16, true> (the Q/K/V projection), qkv_bias_split_heads,
// matmul_02_tiled<32, ...> + attn_naive_softmax (naive) or attn_flash_fwd<D> (flash),
// residual_layernorm.
// The bf16 path (attn_variant "03_flash_bf16" or "05_flash_wgmma"; the executable's --dtype bf16 takes
// transformer_block_bf16_variant(), the fastest that runs on the GPU) runs the same block on
// the tensor cores: x and the weights are rounded to bf16 (f32_to_bf16), the projection is the
// gemm_tc program's 02_mma_sync (bf16 in, FP32 out, cuda/shared/gemm_tc/k02_mma_sync.cuh), the bias
// and head split write bf16 Q/K/V (qkv_bias_split_heads_bf16), attention is attn_flash_bf16_fwd
// (03) or attn_flash_wgmma_fwd (05, Hopper),
// and residual_layernorm<bf16> adds the bf16 attention output to the float32 x. Input and output
// stay float32 in both paths.
#include "transformer_block.h"
#include "attention/attention_kernels.cuh"
#include "gemm_tc/k02_mma_sync.cuh"

// The variant table (attention variants the block runs), read through transformer_block_variant_*.
static const char *const kTbVariants[] = {"01_naive", "02_flash", "03_flash_bf16", "05_flash_wgmma"};
static const int kTbNumVariants = (int)(sizeof(kTbVariants) / sizeof(kTbVariants[0]));
extern "C" int transformer_block_variant_count(void) { return kTbNumVariants; }
extern "C" const char *transformer_block_variant_name(int i) {
    return (i >= 0 && i < kTbNumVariants) ? kTbVariants[i] : nullptr;
}

// Why the block cannot run `variant` with this build on this GPU, or NULL (cuda/common/arch.cuh): the
// bf16 path needs its attention (03: sm_80, 05: sm_90a) and gemm_tc's 02_mma_sync (sm_80).
extern "C" const char *transformer_block_unsupported_reason(const char *variant) {
    const int id = attn_variant_id(variant);
    bool listed = false;
    for (const char *v : kTbVariants) listed = listed || (variant != nullptr && strcmp(variant, v) == 0);
    if (!listed) return "unknown variant";
    if (const char *why = attn_unsupported_reason(id)) return why;
    return attn_is_bf16(id) ? gemm_tc::sm80_unsupported_reason() : nullptr;
}

// 05_flash_wgmma where this build and GPU run it (sm_90a), else 03_flash_bf16 where it runs (sm_80):
// on an H100 at B=4 H=16 S=4096 05 runs 2.0x faster than 03 (bench/results/h100/NOTES-attention.md,
// section 8). NULL where neither runs (a T4, or a build for sm_75).
extern "C" const char *transformer_block_bf16_variant(void) {
    if (transformer_block_unsupported_reason("05_flash_wgmma") == nullptr) return "05_flash_wgmma";
    return transformer_block_unsupported_reason("03_flash_bf16") == nullptr ? "03_flash_bf16" : nullptr;
}

// The projection uses 16-wide tiles so that it has its own row in a kernel table instead of
// merging with the attention's Q·Kᵀ (32-wide tiles, same operand layout).
#define TB_LINEAR_MATMUL "02_tiled"
#define TB_LINEAR_TILE 16
#define TB_LN_EPS 1e-5f

// qkv is (B·S) x 3E, the projection without bias. Add the bias and scatter into head-major
// Q, K, V (each B x H x S x D), the layout the attention kernels read.
__global__ void qkv_bias_split_heads(const float *__restrict__ qkv, const float *__restrict__ b_qkv,
                                     float *__restrict__ q, float *__restrict__ k, float *__restrict__ v, int B,
                                     int S, int E, int H) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long total = (long long)B * S * 3 * E;
    if (idx >= total) return;
    const int col = (int)(idx % (3 * E));  // which of Q/K/V, head and d
    const long long tok = idx / (3 * E);   // b*S + s
    const int which = col / E, e = col % E;
    const int D = E / H, h = e / D, d = e % D;
    const int b = (int)(tok / S), s = (int)(tok % S);
    float *dst = which == 0 ? q : which == 1 ? k : v;
    dst[(((long long)b * H + h) * S + s) * D + d] = qkv[idx] + b_qkv[col];
}

// float32 -> bf16 bits, round to nearest even (the bf16 path's inputs to the tensor cores).
__global__ void f32_to_bf16(const float *__restrict__ in, cudalab_bf16 *__restrict__ out, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
}

// As qkv_bias_split_heads, into bf16 Q, K, V (the FP32 projection plus bias, rounded once).
__global__ void qkv_bias_split_heads_bf16(const float *__restrict__ qkv, const float *__restrict__ b_qkv,
                                          cudalab_bf16 *__restrict__ q, cudalab_bf16 *__restrict__ k,
                                          cudalab_bf16 *__restrict__ v, int B, int S, int E, int H) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long total = (long long)B * S * 3 * E;
    if (idx >= total) return;
    const int col = (int)(idx % (3 * E));
    const long long tok = idx / (3 * E);
    const int which = col / E, e = col % E;
    const int D = E / H, h = e / D, d = e % D;
    const int b = (int)(tok / S), s = (int)(tok % S);
    cudalab_bf16 *dst = which == 0 ? q : which == 1 ? k : v;
    dst[(((long long)b * H + h) * S + s) * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(qkv[idx] + b_qkv[col]));
}

__device__ __forceinline__ float tb_load(const float *p, long long i) { return p[i]; }
__device__ __forceinline__ float tb_load(const cudalab_bf16 *p, long long i) {
    return __bfloat162float(__ushort_as_bfloat16(p[i]));
}

// One warp per token: y = A + x (A read back from head-major layout), then
// out = (y - mean) / sqrt(var + eps) * gamma + beta. Two passes over y (mean, then the variance
// about it) avoid the cancellation of E[y²] - E[y]².
template <typename AT>
__global__ void __launch_bounds__(256)
    residual_layernorm(const AT *__restrict__ attn, const float *__restrict__ x, const float *__restrict__ gamma,
                       const float *__restrict__ beta, float *__restrict__ out, int B, int S, int E, int H) {
    const long long tok = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (tok >= (long long)B * S) return;  // whole warps leave together
    const int b = (int)(tok / S), s = (int)(tok % S), D = E / H;
    const float *xr = x + tok * E;
    float *orow = out + tok * E;
    auto y_at = [&](int e) {
        const int h = e / D, d = e % D;
        return tb_load(attn, (((long long)b * H + h) * S + s) * D + d) + xr[e];
    };
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += y_at(e);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float mean = sum / (float)E;
    float sq = 0.0f;
    for (int e = lane; e < E; e += 32) {
        const float t = y_at(e) - mean;
        sq += t * t;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off);
    const float rstd = rsqrtf(sq / (float)E + TB_LN_EPS);
    for (int e = lane; e < E; e += 32) orow[e] = (y_at(e) - mean) * rstd * gamma[e] + beta[e];
}

static cudaError_t tb_check(const char *variant, int B, int S, int E, int H) {
    const int id = attn_variant_id(variant);
    bool listed = false;
    for (int i = 0; i < kTbNumVariants; ++i) listed = listed || (variant && strcmp(variant, kTbVariants[i]) == 0);
    if (!listed || B <= 0 || S <= 0 || E <= 0 || H <= 0 || E % H != 0) return cudaErrorInvalidValue;
    return attn_check_args(id, B, H, S, E / H);
}

// Workspace layouts. float32: qkv (B·S·3E) | q | k | v | attn (B·S·E each) | attention's own.
// bf16: qkv float32 (B·S·3E) | x bf16 (B·S·E) | W bf16 (3E·E) | q | k | v | attn bf16 (B·S·E each),
// each part rounded up to 256 bytes.
static inline long long tb_round(long long b) { return (b + 255) / 256 * 256; }

extern "C" long long transformer_block_workspace_bytes(const char *attn_variant, int B, int S, int E, int H) {
    if (tb_check(attn_variant, B, S, E, H) != cudaSuccess) return -1;
    const long long n = (long long)B * S * E;
    if (attn_is_bf16(attn_variant_id(attn_variant)))
        return tb_round(3 * n * 4) + tb_round(n * 2) + tb_round(3LL * E * E * 2) + 4 * tb_round(n * 2);
    return (3 * n + 4 * n) * (long long)sizeof(float) +
           attn_workspace_bytes(attn_variant_id(attn_variant), B, H, S, E / H);
}

// The bf16 path, on the workspace layout above.
static int tb_forward_bf16(const char *attn_variant, int B, int S, int E, int H, int causal, const float *x,
                                   const float *w_qkv, const float *b_qkv, const float *gamma, const float *beta,
                                   float *out, void *workspace, cudaStream_t st) {
    // Refused before the first launch (the projection and attention would each refuse anyway).
    if (transformer_block_unsupported_reason(attn_variant) != nullptr) return (int)cudaErrorNotSupported;
    const long long n = (long long)B * S * E;
    char *p = static_cast<char *>(workspace);
    float *qkv = reinterpret_cast<float *>(p);
    p += tb_round(3 * n * 4);
    cudalab_bf16 *xb = reinterpret_cast<cudalab_bf16 *>(p);
    p += tb_round(n * 2);
    cudalab_bf16 *wb = reinterpret_cast<cudalab_bf16 *>(p);
    p += tb_round(3LL * E * E * 2);
    cudalab_bf16 *qkvh[4];  // q, k, v, attn
    for (auto &h : qkvh) {
        h = reinterpret_cast<cudalab_bf16 *>(p);
        p += tb_round(n * 2);
    }
    f32_to_bf16<<<(unsigned)std::min<long long>(cdiv(n, 256), 4096), 256, 0, st>>>(x, xb, n);
    CUDA_TRY(cudaGetLastError());
    f32_to_bf16<<<(unsigned)std::min<long long>(cdiv(3LL * E * E, 256), 4096), 256, 0, st>>>(w_qkv, wb, 3LL * E * E);
    CUDA_TRY(cudaGetLastError());
    // qkv (B·S x 3E) = x (B·S x E) · Wᵀ, W being 3E x E: gemm_tc's "TN" layout as it stands.
    CUDA_TRY(gemm_tc::launch_mma_sync(B * S, 3 * E, E, xb, wb, qkv, st));
    qkv_bias_split_heads_bf16<<<(unsigned)cdiv(3 * n, 256), 256, 0, st>>>(qkv, b_qkv, qkvh[0], qkvh[1], qkvh[2], B,
                                                                          S, E, H);
    CUDA_TRY(cudaGetLastError());
    const int D = E / H;
    CUDA_TRY(attention_launch_bf16(attn_variant, B, H, S, D, causal, 1.0f / sqrtf((float)D), qkvh[0], qkvh[1],
                                   qkvh[2], qkvh[3], st));
    residual_layernorm<cudalab_bf16>
        <<<(unsigned)cdiv((long long)B * S, 8), 256, 0, st>>>(qkvh[3], x, gamma, beta, out, B, S, E, H);
    return (int)cudaGetLastError();
}

extern "C" cudalab_status transformer_block_forward_device(const char *attn_variant, int B, int S, int E, int H, int causal,
                                                const float *x, const float *w_qkv, const float *b_qkv,
                                                const float *gamma, const float *beta, float *out, float *workspace,
                                                void *stream) {
    CUDA_TRY(tb_check(attn_variant, B, S, E, H));
    if (!x || !w_qkv || !b_qkv || !gamma || !beta || !out || !workspace) return (int)cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    if (attn_is_bf16(attn_variant_id(attn_variant)))
        return tb_forward_bf16(attn_variant, B, S, E, H, causal, x, w_qkv, b_qkv, gamma, beta, out, workspace, st);
    const long long n = (long long)B * S * E;
    float *qkv = workspace, *q = qkv + 3 * n, *k = q + n, *v = k + n, *attn = v + n, *attn_ws = attn + n;
    CUDA_TRY(matmul_launch(TB_LINEAR_MATMUL, TB_LINEAR_TILE, true, B * S, 3 * E, E, x, w_qkv, qkv, 1.0f, 1, 0, 0, 0,
                           st));
    qkv_bias_split_heads<<<(unsigned)cdiv(3 * n, 256), 256, 0, st>>>(qkv, b_qkv, q, k, v, B, S, E, H);
    CUDA_TRY_LAUNCH();
    const int D = E / H;
    CUDA_TRY(attention_launch(attn_variant, B, H, S, D, causal, 1.0f / sqrtf((float)D), q, k, v, attn, attn_ws, st));
    residual_layernorm<float><<<(unsigned)cdiv((long long)B * S, 8), 256, 0, st>>>(attn, x, gamma, beta, out, B, S, E, H);
    CUDA_TRY_LAUNCH();
    return 0;
}

extern "C" cudalab_status transformer_block_forward(const char *attn_variant, int B, int S, int E, int H, int causal,
                                         const float *x, const float *w_qkv, const float *b_qkv, const float *gamma,
                                         const float *beta, float *out) {
    CUDA_TRY(tb_check(attn_variant, B, S, E, H));
    if (!x || !w_qkv || !b_qkv || !gamma || !beta || !out) return (int)cudaErrorInvalidValue;
    const size_t xb = (size_t)B * S * E * sizeof(float);
    const size_t wb = (size_t)3 * E * E * sizeof(float), bb = (size_t)3 * E * sizeof(float);
    const size_t eb = (size_t)E * sizeof(float);
    const size_t ws = (size_t)transformer_block_workspace_bytes(attn_variant, B, S, E, H);
    // Freed on every path: by release_all after a success, by the destructors after an early return.
    cudalab::DeviceAlloc dx, dw, db, dgamma, dbeta, dout, dws;
    if (int err = dx.upload(x, xb)) return err;
    if (int err = dw.upload(w_qkv, wb)) return err;
    if (int err = db.upload(b_qkv, bb)) return err;
    if (int err = dgamma.upload(gamma, eb)) return err;
    if (int err = dbeta.upload(beta, eb)) return err;
    if (int err = dout.alloc(xb)) return err;
    if (int err = dws.alloc(ws)) return err;
    const int e = transformer_block_forward_device(attn_variant, B, S, E, H, causal, dx.as<float>(), dw.as<float>(),
                                                   db.as<float>(), dgamma.as<float>(), dbeta.as<float>(),
                                                   dout.as<float>(), dws.as<float>(), nullptr);
    if (e != 0) return e;
    CUDA_TRY(cudaMemcpy(out, dout.p, xb, cudaMemcpyDeviceToHost));
    return cudalab::release_all(dx, dw, db, dgamma, dbeta, dout, dws);
}
