// transformer_block: linear Q/K/V with bias, multi-head attention, residual add + LayerNorm.
// The products are the matmul program's kernels and attention is the attention program's
// (both through their shared headers); the two small kernels here do what neither has: the bias
// and head split, and the residual LayerNorm. Kernel names are plain so that an nsys kernel table
// reads like the course's: matmul_02_tiled<16, true> (the Q/K/V projection), qkv_bias_split_heads,
// matmul_02_tiled<32, ...> + attn_naive_softmax (naive) or attn_flash_fwd<D> (flash),
// residual_layernorm.
#include "transformer_block.h"
#include "../attention/attention_kernels.cuh"

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

// One warp per token: y = A + x (A read back from head-major layout), then
// out = (y - mean) / sqrt(var + eps) * gamma + beta. Two passes over y (mean, then the variance
// about it) avoid the cancellation of E[y²] - E[y]².
__global__ void __launch_bounds__(256)
    residual_layernorm(const float *__restrict__ attn, const float *__restrict__ x, const float *__restrict__ gamma,
                       const float *__restrict__ beta, float *__restrict__ out, int B, int S, int E, int H) {
    const long long tok = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (tok >= (long long)B * S) return;  // whole warps leave together
    const int b = (int)(tok / S), s = (int)(tok % S), D = E / H;
    const float *xr = x + tok * E;
    float *orow = out + tok * E;
    auto y_at = [&](int e) {
        const int h = e / D, d = e % D;
        return attn[(((long long)b * H + h) * S + s) * D + d] + xr[e];
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
    if (id == 0 || B <= 0 || S <= 0 || E <= 0 || H <= 0 || E % H != 0) return cudaErrorInvalidValue;
    return attn_check_args(id, B, H, S, E / H);
}

// Workspace layout (floats): qkv (B·S·3E) | q | k | v | attn (B·S·E each) | attention's own.
extern "C" long long transformer_block_workspace_bytes(const char *attn_variant, int B, int S, int E, int H) {
    if (tb_check(attn_variant, B, S, E, H) != cudaSuccess) return -1;
    const long long n = (long long)B * S * E;
    return (3 * n + 4 * n) * (long long)sizeof(float) +
           attn_workspace_bytes(attn_variant_id(attn_variant), B, H, S, E / H);
}

extern "C" int transformer_block_forward_device(const char *attn_variant, int B, int S, int E, int H, int causal,
                                                const float *x, const float *w_qkv, const float *b_qkv,
                                                const float *gamma, const float *beta, float *out, float *workspace,
                                                void *stream) {
    CUDA_TRY(tb_check(attn_variant, B, S, E, H));
    if (!x || !w_qkv || !b_qkv || !gamma || !beta || !out || !workspace) return (int)cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    const long long n = (long long)B * S * E;
    float *qkv = workspace, *q = qkv + 3 * n, *k = q + n, *v = k + n, *attn = v + n, *attn_ws = attn + n;
    CUDA_TRY(matmul_launch(TB_LINEAR_MATMUL, TB_LINEAR_TILE, true, B * S, 3 * E, E, x, w_qkv, qkv, 1.0f, 1, 0, 0, 0,
                           st));
    qkv_bias_split_heads<<<(unsigned)cdiv(3 * n, 256), 256, 0, st>>>(qkv, b_qkv, q, k, v, B, S, E, H);
    CUDA_TRY_LAUNCH();
    const int D = E / H;
    CUDA_TRY(attention_launch(attn_variant, B, H, S, D, causal, 1.0f / sqrtf((float)D), q, k, v, attn, attn_ws, st));
    residual_layernorm<<<(unsigned)cdiv((long long)B * S, 8), 256, 0, st>>>(attn, x, gamma, beta, out, B, S, E, H);
    CUDA_TRY_LAUNCH();
    return 0;
}

extern "C" int transformer_block_forward(const char *attn_variant, int B, int S, int E, int H, int causal,
                                         const float *x, const float *w_qkv, const float *b_qkv, const float *gamma,
                                         const float *beta, float *out) {
    CUDA_TRY(tb_check(attn_variant, B, S, E, H));
    if (!x || !w_qkv || !b_qkv || !gamma || !beta || !out) return (int)cudaErrorInvalidValue;
    const size_t xb = (size_t)B * S * E * sizeof(float);
    const size_t wb = (size_t)3 * E * E * sizeof(float), bb = (size_t)3 * E * sizeof(float);
    const size_t eb = (size_t)E * sizeof(float);
    const size_t ws = (size_t)transformer_block_workspace_bytes(attn_variant, B, S, E, H);
    float *d[7] = {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};  // x w b gamma beta out ws
    auto run = [&]() -> int {
        CUDA_TRY(cudaMalloc(&d[0], xb));
        CUDA_TRY(cudaMalloc(&d[1], wb));
        CUDA_TRY(cudaMalloc(&d[2], bb));
        CUDA_TRY(cudaMalloc(&d[3], eb));
        CUDA_TRY(cudaMalloc(&d[4], eb));
        CUDA_TRY(cudaMalloc(&d[5], xb));
        CUDA_TRY(cudaMalloc(&d[6], ws));
        CUDA_TRY(cudaMemcpy(d[0], x, xb, cudaMemcpyHostToDevice));
        CUDA_TRY(cudaMemcpy(d[1], w_qkv, wb, cudaMemcpyHostToDevice));
        CUDA_TRY(cudaMemcpy(d[2], b_qkv, bb, cudaMemcpyHostToDevice));
        CUDA_TRY(cudaMemcpy(d[3], gamma, eb, cudaMemcpyHostToDevice));
        CUDA_TRY(cudaMemcpy(d[4], beta, eb, cudaMemcpyHostToDevice));
        const int e = transformer_block_forward_device(attn_variant, B, S, E, H, causal, d[0], d[1], d[2], d[3], d[4],
                                                       d[5], d[6], nullptr);
        if (e != 0) return e;
        CUDA_TRY(cudaMemcpy(out, d[5], xb, cudaMemcpyDeviceToHost));
        return 0;
    };
    int err = run();
    // Free whatever was allocated, also after a failure; report the first error.
    for (float *p : d)
        if (p) CUDALAB_CHECK(cudaFree(p), if (err == 0) err = (int)cudalab_err_);
    return err;
}
