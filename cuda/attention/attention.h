/* attention: softmax(scale * Q Kᵀ) V, Q/K/V/O as B x H x S x D row-major.
   Variants (learning order, the ONE table in attention.cu, read through attention_variant_count /
   attention_variant_name):
     "01_naive"       float32; three kernels (the B·H·S·S score matrix in a workspace; the two
                      products are the matmul program's kernels)
     "02_flash"       float32; one fused kernel with an online softmax; D must be 32, 64 or 128
     "03_flash_bf16"  bf16 in and out, FP32 accumulation and softmax statistics: FlashAttention-2
                      on the tensor cores (mma.sync m16n8k16); D must be 64 or 128; scale > 0
     "04_flash_3xtf32" float32 on the tensor cores, 3xTF32 error compensation; D 64 or 128
     "05_flash_wgmma" sm_90a (Hopper) only: FlashAttention-3's design (TMA, wgmma, warp
                      specialisation, ping-pong and intra-warpgroup pipelining); bf16 as 03;
                      elsewhere cudaErrorNotSupported, attention_unsupported_reason says why
   The backward rungs, each a training pair (as a forward variant it runs the forward it pairs with,
   which saves the log-sum-exp; attention_backward* run its backward):
     "06_flash_bwd"   float32; forward 02_flash; the recurrence on the CUDA cores (dK and dV in one
                      pass over query tiles, dQ in a second pass over key tiles); D 32, 64 or 128
     "07_flash_bwd_bf16" bf16; forward 03_flash_bf16; FlashAttention-2's backward on mma.sync (dK,
                      dV in registers, dQ through FP32 atomics); D 64 or 128; scale > 0
     "08_flash_bwd_wgmma" sm_90a (Hopper) only, bf16 as 07: the same pass on wgmma and TMA (one
                      warpgroup a 64-key block, the products transposed so each result is the next
                      one's register operand); elsewhere cudaErrorNotSupported, as 05
     "09_flash_bwd_ws" sm_90a only, bf16 as 07: 08's pass warp-specialised (a producer warpgroup
                      loads by TMA and adds dQ by TMA reduce; two consumer warpgroups of 64 keys);
                      elsewhere cudaErrorNotSupported
   The fault build only (`make FAULTS=1 build/faults/lib/libattention.so`, for the tests), deliberately
   wrong: "flash_skip_last_tile" (02_flash without its last key tile), "flash_bf16_skip_last_tile" and
   "flash_bf16_no_causal_mask" (03_flash_bf16 sabotaged), "flash_bwd_no_di" and "flash_bwd_bf16_no_di"
   (06 and 07 with dS = P o dP, the rowsum(dO o O) term dropped). The product calls them unknown variants.
   Tuning-only: "flash_bf16_w8s2", "_w8s3", "_w4s2", "_w4s3" (03_flash_bf16 with warps per block and
   pipeline stages fixed), "_w4k32s2", "_w4k32s3" (32-key tiles), "_w4m2s2" (32 query rows per warp
   instead of 16) and "_w4m2k32s2", "_w4m2k32s3" (both): `invoke tune attention` picks one per head
   size and GPU (attention_config_name lists them). "flash_wgmma_<schedule>_k<keys>s<stages>" are
   05_flash_wgmma's (schedule plain, pp = ping-pong, ip = intra-warpgroup pipelining, ppip = both).
   causal != 0 masks key j > query i. scale is usually 1/sqrt(D). Status returns are cudaError_t
   codes (0 = success); bad arguments, an unknown variant or a variant of the other dtype give
   cudaErrorInvalidValue before any launch. */
#ifndef CUDALAB_ATTENTION_H
#define CUDALAB_ATTENTION_H
#include "cudalab.h"
/* ATTN_MAX_S, the longest sequence (shared with transformer_block). */
#include "attention/attention_limits.h"
#ifdef __cplusplus
extern "C" {
#endif

int attention_variant_count(void);
const char *attention_variant_name(int i);
/* 03_flash_bf16's tuning choices (the "flash_bf16_w..." names above), a table like the variants'. */
int attention_config_count(void);
const char *attention_config_name(int i);
/* The variant a tuning choice configures ("03_flash_bf16" or "05_flash_wgmma"), NULL for another name. */
const char *attention_config_variant(const char *config);
/* NULL when the variant (or tuning choice) can run on this build and device, else why not
   ("needs sm_90a: ..."); "unknown variant" for a name the library does not know. */
const char *attention_unsupported_reason(const char *variant);
/* 1 when the variant (or tuning choice, or the fault build's variant) takes bf16 arrays, 0 for
   float32, -1 for a name this library does not know. */
int attention_variant_is_bf16(const char *variant);
/* 1 for a backward rung (06, 07, 08, 09), 0 for a forward-only variant, -1 for a name this library does not know. */
int attention_variant_is_backward(const char *variant);
/* The table's i-th variant's kinds, space-separated: "bf16" (takes bf16 arrays), "backward" (a training
   pair's backward rung); NULL for an index out of the table. */
const char *attention_variant_tags(int i);
/* Device workspace the variant needs, in bytes (0 for flash); -1 for invalid arguments. */
long long attention_workspace_bytes(const char *variant, int B, int H, int S, int D);
/* Device workspace the backward of a backward rung needs, in bytes; -1 for invalid arguments or a
   variant that is no backward rung. */
long long attention_backward_workspace_bytes(const char *variant, int B, int H, int S, int D);

/* float32 variants. Host-pointer form: copies in, runs, copies out, synchronises.
   lse: NULL, or B*H*S floats that receive ln sum_j exp(scale q_i.k_j) per query row, what the
   backward needs: 02_flash and 06_flash_bwd save it (03_flash_bf16, its tuning choices and
   07_flash_bwd_bf16, 08_flash_bwd_wgmma and 09_flash_bwd_ws in the bf16 forms); any other variant given one
   returns cudaErrorInvalidValue. */
cudalab_status attention_forward(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                 const float *q, const float *k, const float *v, float *o, float *lse);
/* Device-pointer form, enqueued on `stream` (NULL = legacy default stream), no synchronisation.
   workspace: attention_workspace_bytes() bytes of device memory (NULL allowed for flash). */
cudalab_status attention_forward_device(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                        const float *q, const float *k, const float *v, float *o, float *lse,
                                        float *workspace, void *stream);

/* bf16 variants (03_flash_bf16): the same two forms on cudalab_bf16 arrays (ml_dtypes.bfloat16). */
cudalab_status attention_forward_bf16(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                      const cudalab_bf16 *q, const cudalab_bf16 *k, const cudalab_bf16 *v,
                                      cudalab_bf16 *o, float *lse);
cudalab_status attention_forward_bf16_device(const char *variant, int B, int H, int S, int D, int causal,
                                             float scale, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                             const cudalab_bf16 *v, cudalab_bf16 *o, float *lse, void *stream);

/* The backward of a backward rung: dq, dk, dv (the arrays' dtype, B x H x S x D) from q, k, v, the
   forward's o and lse, and dout, the gradient of the loss with respect to o. Host-pointer forms
   copy in, run and copy out; device-pointer forms are enqueued on `stream` with `workspace` of
   attention_backward_workspace_bytes() bytes. Sizes, scale > 0, the variant (a backward rung of
   the arrays' dtype) and the pointers (non-NULL, 16-byte aligned) are checked before any launch. */
cudalab_status attention_backward(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                  const float *q, const float *k, const float *v, const float *o, const float *dout,
                                  const float *lse, float *dq, float *dk, float *dv);
cudalab_status attention_backward_device(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                         const float *q, const float *k, const float *v, const float *o,
                                         const float *dout, const float *lse, float *dq, float *dk, float *dv,
                                         float *workspace, void *stream);
cudalab_status attention_backward_bf16(const char *variant, int B, int H, int S, int D, int causal, float scale,
                                       const cudalab_bf16 *q, const cudalab_bf16 *k, const cudalab_bf16 *v,
                                       const cudalab_bf16 *o, const cudalab_bf16 *dout, const float *lse,
                                       cudalab_bf16 *dq, cudalab_bf16 *dk, cudalab_bf16 *dv);
cudalab_status attention_backward_bf16_device(const char *variant, int B, int H, int S, int D, int causal,
                                              float scale, const cudalab_bf16 *q, const cudalab_bf16 *k,
                                              const cudalab_bf16 *v, const cudalab_bf16 *o, const cudalab_bf16 *dout,
                                              const float *lse, cudalab_bf16 *dq, cudalab_bf16 *dk, cudalab_bf16 *dv,
                                              float *workspace, void *stream);

#ifdef __cplusplus
}
#endif
#endif
