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
// One training step (forward saving its activations, backward, SGD) is at the end of the file; its
// own comment names its kernels in timeline order.
#include "transformer_block.h"
#include "attention/attention_kernels.cuh"
#include "gemm_tc/k02_mma_sync.cuh"
#include "nvtx_range.cuh"

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

// The head split and its inverse visit every column col of every token (b, s) of a (B·S) x 3E
// matrix: f(i, col, which, off) with i = token·3E + col, which = 0, 1, 2 for Q, K, V, and off the
// element's place ((b·H + h)·S + s)·D + d in that head-major B x H x S x D array. One block per
// token (a grid-stride loop over tokens), its threads along the row: the token's index arithmetic
// is done once, and a column's in 32 bits. With one thread per element, four 64-bit divisions an
// element made these copies compute-bound, six times slower than memory (an H200 trace).
#define TB_TOKEN_THREADS 128
static inline unsigned tb_token_blocks(long long tokens) { return (unsigned)std::min<long long>(tokens, 1LL << 20); }

template <typename F>
__device__ __forceinline__ void tb_for_each_head_slot(long long tokens, int S, int E, int H, F &&f) {
    const int D = E / H;
    for (long long tok = blockIdx.x; tok < tokens; tok += gridDim.x) {
        const long long b = tok / S;
        const int s = (int)(tok - b * S);
        const long long head0 = (b * H * S + s) * D;  // (b, h = 0, s, d = 0)
        for (int col = threadIdx.x; col < 3 * E; col += blockDim.x) {
            const int which = col / E, e = col - which * E, h = e / D, d = e - h * D;
            f(tok * 3 * E + col, col, which, head0 + (long long)h * S * D + d);
        }
    }
}

// qkv is (B·S) x 3E, the projection without bias. Add the bias and scatter into head-major
// Q, K, V (each B x H x S x D), the layout the attention kernels read.
__global__ void qkv_bias_split_heads(const float *__restrict__ qkv, const float *__restrict__ b_qkv,
                                     float *__restrict__ q, float *__restrict__ k, float *__restrict__ v, int B,
                                     int S, int E, int H) {
    tb_for_each_head_slot((long long)B * S, S, E, H, [&](long long i, int col, int which, long long off) {
        float *dst = which == 0 ? q : which == 1 ? k : v;
        dst[off] = qkv[i] + b_qkv[col];
    });
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
    tb_for_each_head_slot((long long)B * S, S, E, H, [&](long long i, int col, int which, long long off) {
        cudalab_bf16 *dst = which == 0 ? q : which == 1 ? k : v;
        dst[off] = __bfloat16_as_ushort(__float2bfloat16_rn(qkv[i] + b_qkv[col]));
    });
}

__device__ __forceinline__ float tb_load(const float *p, long long i) { return p[i]; }
__device__ __forceinline__ float tb_load(const cudalab_bf16 *p, long long i) {
    return __bfloat162float(__ushort_as_bfloat16(p[i]));
}

// One warp per token: y = A + x (A read back from head-major layout), then
// out = (y - mean) / sqrt(var + eps) * gamma + beta; with mean_out and rstd_out (a training step's
// forward) the token's mean and 1/sqrt(var + eps) are saved for the backward. Two passes over y
// (mean, then the variance about it) avoid the cancellation of E[y²] - E[y]².
template <typename AT>
__global__ void __launch_bounds__(256)
    residual_layernorm(const AT *__restrict__ attn, const float *__restrict__ x, const float *__restrict__ gamma,
                       const float *__restrict__ beta, float *__restrict__ out, int B, int S, int E, int H,
                       float *__restrict__ mean_out, float *__restrict__ rstd_out) {
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
    // A training step keeps the two statistics: its backward then needs no second pass over y.
    if (mean_out != nullptr && lane == 0) mean_out[tok] = mean, rstd_out[tok] = rstd;
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

// The forward's launches on buffers the caller carved: one sequence for the forward alone and for
// a training step's forward, which also passes `lse` (then `attn` names a backward rung, whose
// forward saves it) and `mean`, `rstd` (the LayerNorm's statistics). q, k, v, o are float32 or,
// on the bf16 path, bf16 (then xb and wb receive the rounded x and W).
static int tb_forward_launches(const char *attn, int B, int S, int E, int H, int causal, const float *x,
                               const float *w_qkv, const float *b_qkv, const float *gamma, const float *beta,
                               float *out, float *qkv, cudalab_bf16 *xb, cudalab_bf16 *wb, void *q, void *k, void *v,
                               void *o, float *attn_ws, float *lse, float *mean, float *rstd, cudaStream_t st) {
    const long long n = (long long)B * S * E;
    const int D = E / H;
    const float scale = 1.0f / sqrtf((float)D);
    if (attn_is_bf16(attn_variant_id(attn))) {
        using bf = cudalab_bf16;
        f32_to_bf16<<<(unsigned)std::min<long long>(cdiv(n, 256), 4096), 256, 0, st>>>(x, xb, n);
        CUDA_TRY_LAUNCH();
        f32_to_bf16<<<(unsigned)std::min<long long>(cdiv(3LL * E * E, 256), 4096), 256, 0, st>>>(w_qkv, wb,
                                                                                               3LL * E * E);
        CUDA_TRY_LAUNCH();
        // qkv (B·S x 3E) = x (B·S x E) · Wᵀ, W being 3E x E: gemm_tc's "TN" layout as it stands.
        CUDA_TRY(gemm_tc::launch_mma_sync(B * S, 3 * E, E, xb, wb, qkv, st));
        qkv_bias_split_heads_bf16<<<tb_token_blocks((long long)B * S), TB_TOKEN_THREADS, 0, st>>>(
            qkv, b_qkv, static_cast<bf *>(q), static_cast<bf *>(k), static_cast<bf *>(v), B, S, E, H);
        CUDA_TRY_LAUNCH();
        CUDA_TRY(attention_launch_bf16(attn, B, H, S, D, causal, scale, static_cast<bf *>(q), static_cast<bf *>(k),
                                       static_cast<bf *>(v), static_cast<bf *>(o), st, lse));
        residual_layernorm<bf><<<(unsigned)cdiv((long long)B * S, 8), 256, 0, st>>>(
            static_cast<bf *>(o), x, gamma, beta, out, B, S, E, H, mean, rstd);
        CUDA_TRY_LAUNCH();
        return 0;
    }
    float *qf = static_cast<float *>(q), *kf = static_cast<float *>(k), *vf = static_cast<float *>(v);
    float *of = static_cast<float *>(o);
    CUDA_TRY(matmul_launch(TB_LINEAR_MATMUL, TB_LINEAR_TILE, true, B * S, 3 * E, E, x, w_qkv, qkv, 1.0f, 1, 0, 0, 0,
                           st));
    qkv_bias_split_heads<<<tb_token_blocks((long long)B * S), TB_TOKEN_THREADS, 0, st>>>(qkv, b_qkv, qf, kf, vf, B, S,
                                                                                      E, H);
    CUDA_TRY_LAUNCH();
    CUDA_TRY(attention_launch(attn, B, H, S, D, causal, scale, qf, kf, vf, of, attn_ws, st, lse));
    residual_layernorm<float>
        <<<(unsigned)cdiv((long long)B * S, 8), 256, 0, st>>>(of, x, gamma, beta, out, B, S, E, H, mean, rstd);
    CUDA_TRY_LAUNCH();
    return 0;
}

extern "C" cudalab_status transformer_block_forward_device(const char *attn_variant, int B, int S, int E, int H, int causal,
                                                const float *x, const float *w_qkv, const float *b_qkv,
                                                const float *gamma, const float *beta, float *out, float *workspace,
                                                void *stream) {
    CUDA_TRY(tb_check(attn_variant, B, S, E, H));
    if (!x || !w_qkv || !b_qkv || !gamma || !beta || !out || !workspace) return (int)cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    const long long n = (long long)B * S * E;
    if (attn_is_bf16(attn_variant_id(attn_variant))) {
        // Refused before the first launch (the projection and attention would each refuse anyway).
        if (transformer_block_unsupported_reason(attn_variant) != nullptr) return (int)cudaErrorNotSupported;
        char *p = reinterpret_cast<char *>(workspace);
        float *qkv = reinterpret_cast<float *>(p);
        p += tb_round(3 * n * 4);
        cudalab_bf16 *xb = reinterpret_cast<cudalab_bf16 *>(p);
        p += tb_round(n * 2);
        cudalab_bf16 *wb = reinterpret_cast<cudalab_bf16 *>(p);
        p += tb_round(3LL * E * E * 2);
        void *qkvo[4];  // q, k, v, attn
        for (auto &h : qkvo) {
            h = p;
            p += tb_round(n * 2);
        }
        return tb_forward_launches(attn_variant, B, S, E, H, causal, x, w_qkv, b_qkv, gamma, beta, out, qkv, xb, wb,
                                   qkvo[0], qkvo[1], qkvo[2], qkvo[3], nullptr, nullptr, nullptr, nullptr, st);
    }
    float *qkv = workspace, *q = qkv + 3 * n, *k = q + n, *v = k + n, *attn = v + n, *attn_ws = attn + n;
    return tb_forward_launches(attn_variant, B, S, E, H, causal, x, w_qkv, b_qkv, gamma, beta, out, qkv, nullptr,
                               nullptr, q, k, v, attn, attn_ws, nullptr, nullptr, nullptr, st);
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

// =============================================================================================
// One training step: the forward above, saving what the backward needs, then the backward, then
// (optionally) plain SGD on the parameters. With N = B·S tokens and dOut = ∂L/∂out given:
//   xhat = (y - mean)·rstd, y = A + x           (A: the attention output, merged over heads)
//   dgamma = Σ_tokens dOut ∘ xhat,  dbeta = Σ_tokens dOut
//   g = dOut ∘ gamma,  dy = rstd·(g - mean_e(g) - xhat·mean_e(g ∘ xhat))   (LayerNorm's Jacobian)
//   dA = dy (split into heads), dx starts as dy (the residual)
//   dQ, dK, dV = the attention's backward of dA (06_flash_bwd, 07_flash_bwd_bf16 or 09_flash_bwd_ws, from the
//                forward's O and log-sum-exp)
//   dQKV = [dQ | dK | dV] merged back to N x 3E,  db_qkv = Σ_tokens dQKV
//   dW_qkv = dQKVᵀ·x,  dx += dQKV·W_qkv
// Kernel names, in the order an nsys timeline shows them (the forward's as in the header comment):
//   residual_layernorm_bwd, column_sum (dgamma, dbeta), attn_bwd_rowdot + attn_flash_bwd_kv +
//   attn_flash_bwd_q (06) or attn_bwd_rowdot + attn_flash_bwd_bf16 (07) or attn_flash_bwd_ws (09)
//   + attn_bwd_dq_to_bf16,
//   merge_heads_grad, column_sum (db_qkv), transpose_tile (dQKVᵀ; on the bf16 path also xᵀ and
//   Wᵀ, gemm_tc's K-contiguous operands) + f32_to_bf16 (dQKV), matmul_02_tiled<16, false> (dW) and
//   matmul_02_tiled<32, false> (dx) or k02_mma_sync twice, residual_grad_add, sgd_update.
// The two float32 products use different tile widths so that each has its own row in a kernel
// table (and dW, 768 x 256 outputs at E = 256 summed over all N tokens, gets 4x the blocks of 32-wide tiles).
// =============================================================================================
#define TB_DW_TILE 16
#define TB_DX_TILE 32
#define TB_COLSUM_CHUNKS 128  // at most this many partial sums per column (the first of two passes)

__device__ __forceinline__ void tb_store(float *p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void tb_store(cudalab_bf16 *p, long long i, float v) {
    p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// One warp per token, like the forward: recompute y from A and x, xhat from the saved mean and
// rstd, and write dy (token-major, float32: dx's residual part), xhat (for dgamma) and dA
// (head-major, the attention's dtype: its backward's dO).
template <typename AT>
__global__ void __launch_bounds__(256)
    residual_layernorm_bwd(const AT *__restrict__ attn, const float *__restrict__ x, const float *__restrict__ gamma,
                           const float *__restrict__ mean, const float *__restrict__ rstd,
                           const float *__restrict__ dout, float *__restrict__ dy, float *__restrict__ xhat,
                           AT *__restrict__ dattn, int B, int S, int E, int H) {
    const long long tok = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (tok >= (long long)B * S) return;  // whole warps leave together
    const int b = (int)(tok / S), s = (int)(tok % S), D = E / H;
    const float m = mean[tok], r = rstd[tok];
    const float *xr = x + tok * E, *dr = dout + tok * E;
    auto head_index = [&](int e) { return (((long long)b * H + e / D) * S + s) * D + e % D; };
    auto xhat_at = [&](int e) { return (tb_load(attn, head_index(e)) + xr[e] - m) * r; };
    float sg = 0.0f, sgx = 0.0f;  // Σ g and Σ g·xhat over the token's E features
    for (int e = lane; e < E; e += 32) {
        const float g = dr[e] * gamma[e];
        sg += g;
        sgx = fmaf(g, xhat_at(e), sgx);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        sg += __shfl_xor_sync(0xffffffffu, sg, off);
        sgx += __shfl_xor_sync(0xffffffffu, sgx, off);
    }
    const float mg = sg / (float)E, mgx = sgx / (float)E;
    for (int e = lane; e < E; e += 32) {
        const float xh = xhat_at(e);
        const float d = r * (dr[e] * gamma[e] - mg - xh * mgx);
        dy[tok * E + e] = d;
        xhat[tok * E + e] = xh;
        tb_store(dattn, head_index(e), d);
    }
}

// Column sums over the rows of a rows x cols matrix: out[c] = Σ_r a[r][c]·(b ? b[r][c] : 1).
// A block owns 32 columns (threadIdx.x: one column each, so a warp reads 32 consecutive floats)
// and one chunk of rows (blockIdx.y), its 8 thread rows striding through it; the 8 partial sums
// meet in shared memory. Written to out[blockIdx.y][c]: with one chunk that is the answer, with
// several a second launch sums the chunks. Two passes in a fixed order instead of atomics: the
// gradients are the same bits on every run.
__global__ void __launch_bounds__(256) column_sum(const float *__restrict__ a, const float *__restrict__ b,
                                                  float *__restrict__ out, long long rows, int cols,
                                                  long long rows_per_chunk) {
    __shared__ float part[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const long long r0 = blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
    float acc = 0.0f;
    if (c < cols)
        for (long long r = r0 + threadIdx.y; r < r1; r += 8)
            acc = fmaf(a[r * cols + c], b != nullptr ? b[r * cols + c] : 1.0f, acc);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) sum += part[i][threadIdx.x];
        out[(long long)blockIdx.y * cols + c] = sum;
    }
}

// The inverse of qkv_bias_split_heads: dQ, dK, dV (head-major, the attention's dtype) into
// dQKV, N x 3E float32 (consecutive threads read consecutive d and write consecutive columns).
template <typename T>
__global__ void merge_heads_grad(const T *__restrict__ dq, const T *__restrict__ dk, const T *__restrict__ dv,
                                 float *__restrict__ dqkv, int B, int S, int E, int H) {
    tb_for_each_head_slot((long long)B * S, S, E, H, [&](long long i, int, int which, long long off) {
        const T *src = which == 0 ? dq : which == 1 ? dk : dv;
        dqkv[i] = tb_load(src, off);
    });
}

// out (cols x rows) = inᵀ (in: rows x cols, float32), converted to TO. A 32 x 32 tile through
// shared memory, so that both the reads (along a row of in) and the writes (along a row of out)
// are consecutive for a warp; the +1 column puts a tile's column in 32 banks. blockIdx.x walks
// the rows (the token axis, which can be longer than grid y allows).
__device__ __forceinline__ void tb_put(float *p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void tb_put(cudalab_bf16 *p, long long i, float v) { tb_store(p, i, v); }
template <typename TO>
__global__ void __launch_bounds__(256) transpose_tile(const float *__restrict__ in, TO *__restrict__ out,
                                                      long long rows, int cols) {
    __shared__ float t[32][33];
    const long long r0 = (long long)blockIdx.x * 32;
    const int c0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += 8) {
        const long long r = r0 + i;
        const int c = c0 + threadIdx.x;
        if (r < rows && c < cols) t[i][threadIdx.x] = in[r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int c = c0 + i;
        const long long r = r0 + threadIdx.x;
        if (r < rows && c < cols) tb_put(out, (long long)c * rows + r, t[threadIdx.x][i]);
    }
}

// dx += dy: the residual's gradient, added to the projection's dQKV·W.
__global__ void residual_grad_add(float *__restrict__ dx, const float *__restrict__ dy, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dx[i] += dy[i];
}

// Plain SGD, in place: p -= lr·g.
__global__ void sgd_update(float *__restrict__ p, const float *__restrict__ g, long long n, float lr) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        p[i] = fmaf(-lr, g[i], p[i]);
}

// The attention rung a block variant trains with: the float32 block with 06_flash_bwd (its forward
// is 02_flash, which saves the log-sum-exp; 01_naive's three kernels save none), 03_flash_bf16 with
// 07_flash_bwd_bf16, and the Hopper block 05_flash_wgmma with Hopper's fastest backward,
// 09_flash_bwd_ws (both bf16 rungs differentiate 03_flash_bf16's forward, since 05 saves no
// log-sum-exp). 05 and 09 need the same sm_90a and head sizes, so 09 runs wherever the block's 05 does.
static const char *tb_train_attn(const char *variant) {
    const int id = attn_variant_id(variant);
    if (!attn_is_bf16(id)) return "06_flash_bwd";
    return id == ATTN_05_FLASH_WGMMA ? "09_flash_bwd_ws" : "07_flash_bwd_bf16";
}

extern "C" const char *transformer_block_train_attention(const char *attn_variant) {
    if (tb_check(attn_variant, 1, 1, 64, 1) != cudaSuccess) return nullptr;
    return tb_train_attn(attn_variant);
}

// The training step's arguments: the block's rules, then the training rung's (06 takes D in
// {32, 64, 128}: 01_naive's D = 8 cannot train), the float32 products' grid (N/16 blocks in grid y).
static cudaError_t tb_train_check(const char *variant, int B, int S, int E, int H) {
    if (cudaError_t e = tb_check(variant, B, S, E, H)) return e;
    if (cudaError_t e = attn_check_args(attn_variant_id(tb_train_attn(variant)), B, H, S, E / H)) return e;
    if (cdiv((long long)B * S, TB_LINEAR_TILE) > CUDALAB_MAX_GRID_YZ) return cudaErrorInvalidValue;
    return cudaSuccess;
}

// The training workspace, carved in one order for its size (base NULL) and for its pointers; each
// part rounded up to 256 bytes (16-byte alignment for the attention kernels). "el" is the
// attention's element: 4 bytes, or 2 on the bf16 path.
struct TbTrainWs {
    float *qkv;                   // N x 3E: the projection; in the backward, dQKV
    cudalab_bf16 *xb, *wb;        // bf16: x and W rounded (the forward's operands)
    void *q, *k, *v, *o;          // B x H x S x D each, el: kept for the backward
    float *lse, *mean, *rstd;     // B·H·S; N; N
    float *dy, *xhat;             // N x E each
    void *dattn, *dq, *dk, *dv;   // B x H x S x D each, el
    float *attn_ws;               // the attention backward's (Di; the bf16 rung's dQ accumulator)
    void *dqkv_t;                 // 3E x N, el: dQKVᵀ
    cudalab_bf16 *dqkv_b, *xt, *wt;  // bf16: dQKV, xᵀ, Wᵀ
    float *partial;               // column sums' first pass, TB_COLSUM_CHUNKS x 3E
    long long bytes;
};

static TbTrainWs tb_train_layout(const char *variant, int B, int S, int E, int H, void *base) {
    const bool bf16 = attn_is_bf16(attn_variant_id(variant));
    TbTrainWs w{};
    long long used = 0;
    auto take = [&](long long bytes) -> void * {
        void *r = base != nullptr ? static_cast<char *>(base) + used : nullptr;
        used += tb_round(bytes);
        return r;
    };
    const long long N = (long long)B * S, n = N * E, el = bf16 ? 2 : 4;
    w.qkv = static_cast<float *>(take(3 * n * 4));
    if (bf16) {
        w.xb = static_cast<cudalab_bf16 *>(take(n * 2));
        w.wb = static_cast<cudalab_bf16 *>(take(3LL * E * E * 2));
    }
    w.q = take(n * el), w.k = take(n * el), w.v = take(n * el), w.o = take(n * el);
    w.lse = static_cast<float *>(take((long long)B * H * S * 4));
    w.mean = static_cast<float *>(take(N * 4));
    w.rstd = static_cast<float *>(take(N * 4));
    w.dy = static_cast<float *>(take(n * 4));
    w.xhat = static_cast<float *>(take(n * 4));
    w.dattn = take(n * el), w.dq = take(n * el), w.dk = take(n * el), w.dv = take(n * el);
    w.attn_ws = static_cast<float *>(
        take(attn_backward_workspace_bytes(attn_variant_id(tb_train_attn(variant)), B, H, S, E / H)));
    w.dqkv_t = take(3 * n * el);
    if (bf16) {
        w.dqkv_b = static_cast<cudalab_bf16 *>(take(3 * n * 2));
        w.xt = static_cast<cudalab_bf16 *>(take(n * 2));
        w.wt = static_cast<cudalab_bf16 *>(take(3LL * E * E * 2));
    }
    w.partial = static_cast<float *>(take((long long)TB_COLSUM_CHUNKS * 3 * E * 4));
    w.bytes = used;
    return w;
}

extern "C" long long transformer_block_train_workspace_bytes(const char *attn_variant, int B, int S, int E, int H) {
    if (tb_train_check(attn_variant, B, S, E, H) != cudaSuccess) return -1;
    return tb_train_layout(attn_variant, B, S, E, H, nullptr).bytes;
}

// out[c] = Σ_r a[r][c]·(b ? b[r][c] : 1): one launch of column_sum for up to 64 rows, else a
// first pass into `partial` (one row per chunk of rows) and a second over the chunks.
static cudaError_t tb_column_sum(const float *a, const float *b, float *out, long long rows, int cols, float *partial,
                                 cudaStream_t st) {
    const long long chunks = std::min<long long>(cdiv(rows, 64), TB_COLSUM_CHUNKS);
    const dim3 block(32, 8);
    if (chunks == 1) {
        column_sum<<<dim3((unsigned)cdiv(cols, 32), 1), block, 0, st>>>(a, b, out, rows, cols, rows);
        return cudaGetLastError();
    }
    column_sum<<<dim3((unsigned)cdiv(cols, 32), (unsigned)chunks), block, 0, st>>>(a, b, partial, rows, cols,
                                                                                   cdiv(rows, chunks));
    if (cudaError_t e = cudaGetLastError()) return e;
    column_sum<<<dim3((unsigned)cdiv(cols, 32), 1), block, 0, st>>>(partial, nullptr, out, chunks, cols, chunks);
    return cudaGetLastError();
}

template <typename TO>
static cudaError_t tb_transpose(const float *in, TO *out, long long rows, int cols, cudaStream_t st) {
    transpose_tile<TO><<<dim3((unsigned)cdiv(rows, 32), (unsigned)cdiv(cols, 32)), dim3(32, 8), 0, st>>>(in, out, rows,
                                                                                                         cols);
    return cudaGetLastError();
}

static bool tb_all(std::initializer_list<const void *> ptrs) {
    for (const void *p : ptrs)
        if (p == nullptr) return false;
    return true;
}

// Every part of the training workspace sits a multiple of 256 bytes from its base, and the attention
// kernels and gemm_tc's cp.async read their parts 16 bytes at a time: a base off that alignment is
// refused here, before the projection launches, rather than by the attention after it (float32) or
// by a misaligned copy fault that loses the context (bf16). As an invalid argument: the code
// cudaErrorMisalignedAddress is also the sticky fault's, which a caller cannot tell from a lost context.
static cudaError_t tb_train_ws_check(const void *workspace) {
    return reinterpret_cast<uintptr_t>(workspace) % 16 != 0 ? cudaErrorInvalidValue : cudaSuccess;
}

extern "C" cudalab_status transformer_block_train_forward_device(const char *attn_variant, int B, int S, int E, int H,
                                                                 int causal, const float *x, const float *w_qkv,
                                                                 const float *b_qkv, const float *gamma,
                                                                 const float *beta, float *out, void *workspace,
                                                                 void *stream) {
    CUDA_TRY(tb_train_check(attn_variant, B, S, E, H));
    if (!tb_all({x, w_qkv, b_qkv, gamma, beta, out, workspace})) return (int)cudaErrorInvalidValue;
    CUDA_TRY(tb_train_ws_check(workspace));
    const bool bf16 = attn_is_bf16(attn_variant_id(attn_variant));
    if (bf16 && transformer_block_unsupported_reason(attn_variant) != nullptr) return (int)cudaErrorNotSupported;
    const TbTrainWs w = tb_train_layout(attn_variant, B, S, E, H, workspace);
    return tb_forward_launches(tb_train_attn(attn_variant), B, S, E, H, causal, x, w_qkv, b_qkv, gamma, beta, out,
                               w.qkv, w.xb, w.wb, w.q, w.k, w.v, w.o, nullptr, w.lse, w.mean, w.rstd,
                               (cudaStream_t)stream);
}

extern "C" cudalab_status transformer_block_backward_device(const char *attn_variant, int B, int S, int E, int H,
                                                            int causal, const float *x, const float *w_qkv,
                                                            const float *gamma, const float *dout, float *dx,
                                                            float *dw_qkv, float *db_qkv, float *dgamma, float *dbeta,
                                                            void *workspace, void *stream) {
    CUDA_TRY(tb_train_check(attn_variant, B, S, E, H));
    if (!tb_all({x, w_qkv, gamma, dout, dx, dw_qkv, db_qkv, dgamma, dbeta, workspace})) return (int)cudaErrorInvalidValue;
    CUDA_TRY(tb_train_ws_check(workspace));
    const bool bf16 = attn_is_bf16(attn_variant_id(attn_variant));
    if (bf16 && transformer_block_unsupported_reason(attn_variant) != nullptr) return (int)cudaErrorNotSupported;
    cudaStream_t st = (cudaStream_t)stream;
    const TbTrainWs w = tb_train_layout(attn_variant, B, S, E, H, workspace);
    const char *attn = tb_train_attn(attn_variant);
    const long long N = (long long)B * S, n = N * E;
    const int D = E / H;
    const float scale = 1.0f / sqrtf((float)D);
    using bf = cudalab_bf16;
    const unsigned tok_blocks = (unsigned)cdiv(N, 8);
    // 1. LayerNorm and the residual: dy, xhat and dA.
    if (bf16)
        residual_layernorm_bwd<bf><<<tok_blocks, 256, 0, st>>>(static_cast<bf *>(w.o), x, gamma, w.mean, w.rstd, dout,
                                                               w.dy, w.xhat, static_cast<bf *>(w.dattn), B, S, E, H);
    else
        residual_layernorm_bwd<float><<<tok_blocks, 256, 0, st>>>(static_cast<float *>(w.o), x, gamma, w.mean, w.rstd,
                                                                  dout, w.dy, w.xhat, static_cast<float *>(w.dattn), B,
                                                                  S, E, H);
    CUDA_TRY_LAUNCH();
    // 2. dgamma, dbeta: column sums over the tokens.
    CUDA_TRY(tb_column_sum(dout, w.xhat, dgamma, N, E, w.partial, st));
    CUDA_TRY(tb_column_sum(dout, nullptr, dbeta, N, E, w.partial, st));
    // 3. The attention's backward, then dQ, dK, dV back into dQKV (the projection's buffer, free now).
    float *dqkv = w.qkv;
    if (bf16) {
        CUDA_TRY(attention_backward_launch_bf16(attn, B, H, S, D, causal, scale, static_cast<bf *>(w.q),
                                                static_cast<bf *>(w.k), static_cast<bf *>(w.v), static_cast<bf *>(w.o),
                                                static_cast<bf *>(w.dattn), w.lse, static_cast<bf *>(w.dq),
                                                static_cast<bf *>(w.dk), static_cast<bf *>(w.dv), w.attn_ws, st));
        merge_heads_grad<bf><<<tb_token_blocks(N), TB_TOKEN_THREADS, 0, st>>>(
            static_cast<bf *>(w.dq), static_cast<bf *>(w.dk), static_cast<bf *>(w.dv), dqkv, B, S, E, H);
    } else {
        CUDA_TRY(attention_backward_launch(attn, B, H, S, D, causal, scale, static_cast<float *>(w.q),
                                           static_cast<float *>(w.k), static_cast<float *>(w.v),
                                           static_cast<float *>(w.o), static_cast<float *>(w.dattn), w.lse,
                                           static_cast<float *>(w.dq), static_cast<float *>(w.dk),
                                           static_cast<float *>(w.dv), w.attn_ws, st));
        merge_heads_grad<float><<<tb_token_blocks(N), TB_TOKEN_THREADS, 0, st>>>(
            static_cast<float *>(w.dq), static_cast<float *>(w.dk), static_cast<float *>(w.dv), dqkv, B, S, E, H);
    }
    CUDA_TRY_LAUNCH();
    // 4. db_qkv: the bias's gradient is dQKV summed over the tokens.
    CUDA_TRY(tb_column_sum(dqkv, nullptr, db_qkv, N, 3 * E, w.partial, st));
    // 5. dW_qkv = dQKVᵀ·x and dx = dQKV·W_qkv (+ dy below). matmul computes A·B or A·Bᵀ with A
    //    row-major, so dW needs dQKVᵀ stored; gemm_tc computes A·Bᵀ with both K-contiguous, so it
    //    also needs xᵀ (the dW product's K is the token axis) and Wᵀ (the dx product's K is 3E).
    if (bf16) {
        bf *dqkv_t = static_cast<bf *>(w.dqkv_t);
        CUDA_TRY(tb_transpose<bf>(dqkv, dqkv_t, N, 3 * E, st));
        f32_to_bf16<<<(unsigned)std::min<long long>(cdiv(3 * n, 256), 4096), 256, 0, st>>>(dqkv, w.dqkv_b, 3 * n);
        CUDA_TRY_LAUNCH();
        CUDA_TRY(tb_transpose<bf>(x, w.xt, N, E, st));
        CUDA_TRY(tb_transpose<bf>(w_qkv, w.wt, 3 * E, E, st));
        // dW's output is 3E x E, a handful of 128 x 256 tiles, each summing over all N tokens: alone it
        // leaves most SMs idle (six tiles for 132 SMs at E = 256), so K is split across blocks. The
        // partial products go to xhat's N x E floats, dead since dgamma's sum above.
        int dev = 0, sms = 0;
        CUDA_TRY(cudaGetDevice(&dev));
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        const int splits = gemm_tc::split_k_count(3 * E, E, (int)N, sms, (int)std::min<long long>(N / (3LL * E), 64));
        CUDA_TRY(gemm_tc::launch_mma_sync_split_k(3 * E, E, (int)N, dqkv_t, w.xt, dw_qkv, w.xhat, splits, st));
        CUDA_TRY(gemm_tc::launch_mma_sync((int)N, E, 3 * E, w.dqkv_b, w.wt, dx, st));
    } else {
        float *dqkv_t = static_cast<float *>(w.dqkv_t);
        CUDA_TRY(tb_transpose<float>(dqkv, dqkv_t, N, 3 * E, st));
        CUDA_TRY(matmul_launch(TB_LINEAR_MATMUL, TB_DW_TILE, false, 3 * E, E, (int)N, dqkv_t, x, dw_qkv, 1.0f, 1, 0, 0,
                               0, st));
        CUDA_TRY(matmul_launch(TB_LINEAR_MATMUL, TB_DX_TILE, false, (int)N, E, 3 * E, dqkv, w_qkv, dx, 1.0f, 1, 0, 0,
                               0, st));
    }
    // 6. dx += dy, the residual's path.
    residual_grad_add<<<(unsigned)std::min<long long>(cdiv(n, 256), 4096), 256, 0, st>>>(dx, w.dy, n);
    CUDA_TRY_LAUNCH();
    return 0;
}

extern "C" cudalab_status transformer_block_sgd_device(int E, float lr, float *w_qkv, float *b_qkv, float *gamma,
                                                       float *beta, const float *dw_qkv, const float *db_qkv,
                                                       const float *dgamma, const float *dbeta, void *stream) {
    if (E <= 0 || !std::isfinite(lr) || lr < 0.0f) return (int)cudaErrorInvalidValue;
    if (!tb_all({w_qkv, b_qkv, gamma, beta, dw_qkv, db_qkv, dgamma, dbeta})) return (int)cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    float *p[4] = {w_qkv, b_qkv, gamma, beta};
    const float *g[4] = {dw_qkv, db_qkv, dgamma, dbeta};
    const long long len[4] = {3LL * E * E, 3LL * E, E, E};
    for (int i = 0; i < 4; ++i) {
        sgd_update<<<(unsigned)std::min<long long>(cdiv(len[i], 256), 1024), 256, 0, st>>>(p[i], g[i], len[i], lr);
        CUDA_TRY_LAUNCH();
    }
    return 0;
}

extern "C" cudalab_status transformer_block_train_step_device(const char *attn_variant, int B, int S, int E, int H,
                                                              int causal, float lr, const float *x, float *w_qkv,
                                                              float *b_qkv, float *gamma, float *beta,
                                                              const float *dout, float *out, float *dx, float *dw_qkv,
                                                              float *db_qkv, float *dgamma, float *dbeta,
                                                              void *workspace, void *stream) {
    // Every argument before the first launch: a bad lr, or a NULL that only the backward or SGD reads
    // (dout, a gradient), must not leave a forward half-done.
    CUDA_TRY(tb_train_check(attn_variant, B, S, E, H));
    if (!std::isfinite(lr) || lr < 0.0f) return (int)cudaErrorInvalidValue;
    if (!tb_all({x, w_qkv, b_qkv, gamma, beta, dout, out, dx, dw_qkv, db_qkv, dgamma, dbeta, workspace}))
        return (int)cudaErrorInvalidValue;
    CUDA_TRY(tb_train_ws_check(workspace));
    // The step and its phases as NVTX ranges: an nsys trace then tells forward, backward and SGD
    // kernels apart (`invoke plot trace`).
    CudalabNvtxRange whole("train_step");
    {
        CudalabNvtxRange phase("forward");
        if (int e = transformer_block_train_forward_device(attn_variant, B, S, E, H, causal, x, w_qkv, b_qkv, gamma,
                                                           beta, out, workspace, stream))
            return e;
    }
    {
        CudalabNvtxRange phase("backward");
        if (int e = transformer_block_backward_device(attn_variant, B, S, E, H, causal, x, w_qkv, gamma, dout, dx,
                                                      dw_qkv, db_qkv, dgamma, dbeta, workspace, stream))
            return e;
    }
    if (lr == 0.0f) return 0;
    CudalabNvtxRange phase("sgd");
    return transformer_block_sgd_device(E, lr, w_qkv, b_qkv, gamma, beta, dw_qkv, db_qkv, dgamma, dbeta, stream);
}

extern "C" cudalab_status transformer_block_train_step(const char *attn_variant, int B, int S, int E, int H, int causal,
                                                       float lr, const float *x, float *w_qkv, float *b_qkv,
                                                       float *gamma, float *beta, const float *dout, float *out,
                                                       float *dx, float *dw_qkv, float *db_qkv, float *dgamma,
                                                       float *dbeta) {
    CUDA_TRY(tb_train_check(attn_variant, B, S, E, H));
    if (!std::isfinite(lr) || lr < 0.0f) return (int)cudaErrorInvalidValue;
    if (!tb_all({x, w_qkv, b_qkv, gamma, beta, dout, out, dx, dw_qkv, db_qkv, dgamma, dbeta}))
        return (int)cudaErrorInvalidValue;
    const size_t xb = (size_t)B * S * E * sizeof(float);
    const size_t wb = (size_t)3 * E * E * sizeof(float), bb = (size_t)3 * E * sizeof(float);
    const size_t eb = (size_t)E * sizeof(float);
    const size_t ws = (size_t)transformer_block_train_workspace_bytes(attn_variant, B, S, E, H);
    cudalab::DeviceAlloc d_x, d_w, d_b, d_g, d_beta, d_dout, d_out, d_dx, d_dw, d_db, d_dg, d_dbeta, d_ws;
    if (int err = d_x.upload(x, xb)) return err;
    if (int err = d_w.upload(w_qkv, wb)) return err;
    if (int err = d_b.upload(b_qkv, bb)) return err;
    if (int err = d_g.upload(gamma, eb)) return err;
    if (int err = d_beta.upload(beta, eb)) return err;
    if (int err = d_dout.upload(dout, xb)) return err;
    if (int err = d_out.alloc(xb)) return err;
    if (int err = d_dx.alloc(xb)) return err;
    if (int err = d_dw.alloc(wb)) return err;
    if (int err = d_db.alloc(bb)) return err;
    if (int err = d_dg.alloc(eb)) return err;
    if (int err = d_dbeta.alloc(eb)) return err;
    if (int err = d_ws.alloc(ws)) return err;
    if (int e = transformer_block_train_step_device(attn_variant, B, S, E, H, causal, lr, d_x.as<float>(),
                                                    d_w.as<float>(), d_b.as<float>(), d_g.as<float>(),
                                                    d_beta.as<float>(), d_dout.as<float>(), d_out.as<float>(),
                                                    d_dx.as<float>(), d_dw.as<float>(), d_db.as<float>(),
                                                    d_dg.as<float>(), d_dbeta.as<float>(), d_ws.p, nullptr))
        return e;
    struct {
        void *host;
        const cudalab::DeviceAlloc &dev;
        size_t bytes;
    } back[] = {{out, d_out, xb}, {dx, d_dx, xb}, {dw_qkv, d_dw, wb}, {db_qkv, d_db, bb}, {dgamma, d_dg, eb},
                {dbeta, d_dbeta, eb}, {w_qkv, d_w, wb}, {b_qkv, d_b, bb}, {gamma, d_g, eb}, {beta, d_beta, eb}};
    // The parameters come back only when the step changed them (lr > 0).
    const int n_back = lr > 0.0f ? 10 : 6;
    for (int i = 0; i < n_back; ++i) CUDA_TRY(cudaMemcpy(back[i].host, back[i].dev.p, back[i].bytes, cudaMemcpyDeviceToHost));
    return cudalab::release_all(d_x, d_w, d_b, d_g, d_beta, d_dout, d_out, d_dx, d_dw, d_db, d_dg, d_dbeta, d_ws);
}

extern "C" cudalab_status transformer_block_backward(const char *attn_variant, int B, int S, int E, int H, int causal,
                                                     const float *x, const float *w_qkv, const float *b_qkv,
                                                     const float *gamma, const float *beta, const float *dout,
                                                     float *out, float *dx, float *dw_qkv, float *db_qkv,
                                                     float *dgamma, float *dbeta) {
    // lr = 0: the step leaves the parameters alone and never writes them back, so the casts are safe.
    return transformer_block_train_step(attn_variant, B, S, E, H, causal, 0.0f, x, const_cast<float *>(w_qkv),
                                        const_cast<float *>(b_qkv), const_cast<float *>(gamma),
                                        const_cast<float *>(beta), dout, out, dx, dw_qkv, db_qkv, dgamma, dbeta);
}
