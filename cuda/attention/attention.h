/* attention: softmax(scale * Q Kᵀ) V in float32, Q/K/V/O as B x H x S x D row-major.
   Variants (learning order): "01_naive" (three kernels; the B·H·S·S score matrix in a workspace;
   the two products are the matmul program's kernels) and "02_flash" (one fused kernel with an
   online softmax; D must be 32, 64 or 128). "flash_skip_last_tile" is a deliberately wrong
   02_flash for tests of the checkers. causal != 0 masks key j > query i. scale is usually
   1/sqrt(D). Entry points return a cudaError_t as int, 0 = success; bad arguments or an unknown
   variant give cudaErrorInvalidValue before any launch. */
#ifndef CUDALAB_ATTENTION_H
#define CUDALAB_ATTENTION_H
#ifdef __cplusplus
extern "C" {
#endif

int attention_variant_count(void);
const char *attention_variant_name(int i);
/* Device workspace the variant needs, in bytes (0 for flash); -1 for invalid arguments. */
long long attention_workspace_bytes(const char *variant, int B, int H, int S, int D);

/* Host-pointer form: copies in, runs, copies out, synchronises. */
int attention_forward(const char *variant, int B, int H, int S, int D, int causal, float scale, const float *q,
                      const float *k, const float *v, float *o);
/* Device-pointer form, enqueued on `stream` (NULL = legacy default stream), no synchronisation.
   workspace: attention_workspace_bytes() bytes of device memory (NULL allowed for flash). */
int attention_forward_device(const char *variant, int B, int H, int S, int D, int causal, float scale,
                             const float *q, const float *k, const float *v, float *o, float *workspace,
                             void *stream);

#ifdef __cplusplus
}
#endif
#endif
