/* transformer_block: the Stringer course's SimpleTransformer (section 4) in CUDA C.
     Q, K, V = x·Wqᵀ + bq, x·Wkᵀ + bk, x·Wvᵀ + bv     (nn.Linear(E, E) each, W is E x E, out x in)
     A       = attention(Q, K, V) over H heads of D = E/H, scale 1/sqrt(D)
     out     = LayerNorm(A + x) · gamma + beta          (eps 1e-5, biased variance, as torch)
   x and out are B x S x E row-major float32. attn_variant is the attention program's variant
   name, one of this program's table (transformer_block_variant_count / _name): "01_naive",
   "02_flash" (D in {32, 64, 128}), "03_flash_bf16" or "05_flash_wgmma" (sm_90a only; D in {64, 128}
   for both): the whole block in bf16 on
   the tensor cores (x and the weights rounded to bf16, projection on gemm_tc's 02_mma_sync with
   FP32 accumulation, bf16 flash attention, LayerNorm in FP32 on the bf16 attention output plus the
   float32 x). Status returns are cudaError_t codes, 0 = success. */
#ifndef CUDALAB_TRANSFORMER_BLOCK_H
#define CUDALAB_TRANSFORMER_BLOCK_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

int transformer_block_variant_count(void);
const char *transformer_block_variant_name(int i);
/* The bf16 variant the block runs by default here: "05_flash_wgmma" on a GPU and build with sm_90a,
   else "03_flash_bf16" (the fastest bf16 attention that runs); NULL where no bf16 path runs (sm_75). */
const char *transformer_block_bf16_variant(void);
/* NULL when the block runs attn_variant on this build and GPU, else why not ("needs sm_80: this GPU
   is sm_75", "needs sm_90a: ..."); "unknown variant" for a name not in the table. */
const char *transformer_block_unsupported_reason(const char *attn_variant);

/* Device workspace for one forward, in bytes; -1 for invalid arguments. */
long long transformer_block_workspace_bytes(const char *attn_variant, int B, int S, int E, int H);

/* Host-pointer form: copies in, runs, copies out, synchronises. w_qkv is 3E x E (Wq; Wk; Wv
   stacked), b_qkv is 3E (bq; bk; bv). */
cudalab_status transformer_block_forward(const char *attn_variant, int B, int S, int E, int H, int causal, const float *x,
                              const float *w_qkv, const float *b_qkv, const float *gamma, const float *beta,
                              float *out);
/* Device-pointer form on `stream`; workspace holds transformer_block_workspace_bytes() bytes. */
cudalab_status transformer_block_forward_device(const char *attn_variant, int B, int S, int E, int H, int causal,
                                     const float *x, const float *w_qkv, const float *b_qkv, const float *gamma,
                                     const float *beta, float *out, float *workspace, void *stream);

/* ---- training: forward + backward (+ SGD) -------------------------------------------------------
   Given dout = dL/d(out) (B x S x E), the gradients of the block's inputs and parameters: dx
   (B x S x E), dw_qkv (3E x E), db_qkv (3E), dgamma, dbeta (E). The attention trains as a pair of
   the attention program (its forward saves the log-sum-exp): the float32 variants ("01_naive",
   "02_flash") with "06_flash_bwd" (forward 02_flash: D in {32, 64, 128}), the bf16 ones
   "03_flash_bf16" with "07_flash_bwd_bf16" and "05_flash_wgmma" with "09_flash_bwd_ws" (both with
   the forward 03_flash_bf16, D in {64, 128}).
   lr: SGD's learning rate, finite and >= 0; 0 leaves the parameters alone. */

/* The attention rung the block trains with for attn_variant (above), NULL for an unknown variant. */
const char *transformer_block_train_attention(const char *attn_variant);
/* Device workspace for one training step (its forward's saved activations and the backward's
   buffers), in bytes; -1 for invalid arguments. */
long long transformer_block_train_workspace_bytes(const char *attn_variant, int B, int S, int E, int H);

/* Host-pointer forms: copy in, run, copy out, synchronise. train_step also updates w_qkv, b_qkv,
   gamma and beta in place when lr > 0 (after the gradients, which are those of the parameters it
   was given); backward is train_step with lr = 0. */
cudalab_status transformer_block_train_step(const char *attn_variant, int B, int S, int E, int H, int causal, float lr,
                                            const float *x, float *w_qkv, float *b_qkv, float *gamma, float *beta,
                                            const float *dout, float *out, float *dx, float *dw_qkv, float *db_qkv,
                                            float *dgamma, float *dbeta);
cudalab_status transformer_block_backward(const char *attn_variant, int B, int S, int E, int H, int causal,
                                          const float *x, const float *w_qkv, const float *b_qkv, const float *gamma,
                                          const float *beta, const float *dout, float *out, float *dx, float *dw_qkv,
                                          float *db_qkv, float *dgamma, float *dbeta);

/* Device-pointer forms on `stream`, workspace of transformer_block_train_workspace_bytes() bytes,
   16-byte aligned (cudaMalloc's is; any other is refused before the first launch). Every pointer is
   checked before the first launch too.
   train_step_device = train_forward_device, then backward_device, then (lr > 0) sgd_device; the
   three phases are separate so that they can be timed apart. backward_device reads what
   train_forward_device saved in the same workspace (same variant, sizes and x). */
cudalab_status transformer_block_train_step_device(const char *attn_variant, int B, int S, int E, int H, int causal,
                                                   float lr, const float *x, float *w_qkv, float *b_qkv, float *gamma,
                                                   float *beta, const float *dout, float *out, float *dx,
                                                   float *dw_qkv, float *db_qkv, float *dgamma, float *dbeta,
                                                   void *workspace, void *stream);
cudalab_status transformer_block_train_forward_device(const char *attn_variant, int B, int S, int E, int H, int causal,
                                                      const float *x, const float *w_qkv, const float *b_qkv,
                                                      const float *gamma, const float *beta, float *out,
                                                      void *workspace, void *stream);
cudalab_status transformer_block_backward_device(const char *attn_variant, int B, int S, int E, int H, int causal,
                                                 const float *x, const float *w_qkv, const float *gamma,
                                                 const float *dout, float *dx, float *dw_qkv, float *db_qkv,
                                                 float *dgamma, float *dbeta, void *workspace, void *stream);
cudalab_status transformer_block_sgd_device(int E, float lr, float *w_qkv, float *b_qkv, float *gamma, float *beta,
                                            const float *dw_qkv, const float *db_qkv, const float *dgamma,
                                            const float *dbeta, void *stream);

#ifdef __cplusplus
}
#endif
#endif
