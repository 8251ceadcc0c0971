/* matmul: float32 row-major C = A·B (GPU MODE lectures 3 and 5), plus a cuBLAS SGEMM baseline.
   Variants, by name: "01_naive", "02_tiled" (tile 16 or 32), "03_tiled_dynamic" (any tile whose
   tile² threads and 2·tile²·4 bytes fit the device), "cublas" (only when built with cuBLAS).
   Every function returns a cudaError_t as int (0 = success); an unknown variant or a tile the
   variant does not take is cudaErrorInvalidValue (1); a tile the device cannot hold is
   cudaErrorInvalidConfiguration (9); "cublas" without cuBLAS is cudaErrorNotSupported (801). */
#ifndef CUDALAB_MATMUL_H
#define CUDALAB_MATMUL_H
#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the library was built against cuBLAS (the Makefile found it), else 0. */
int matmul_have_cublas(void);

/* 0 when `variant` can run with `tile` (and op(B) = Bᵀ when trans_b) on the current device. */
int matmul_check(const char *variant, int tile, int trans_b);

/* Host pointers: copy A (m×k) and B (k×n) in, run, copy C (m×n) out. Synchronous. */
int matmul_host(const char *variant, int tile, int m, int n, int k, const float *a, const float *b, float *c);

/* Host pointers, the general form the shared kernels support (the attention program's use):
   for z < batch, C_z = alpha·A_z·op(B_z) with A_z m×k, op(B_z) = B_z (k×n) or B_zᵀ (B_z n×k),
   operands packed one after another (batch strides m·k, k·n, m·n). */
int matmul_host_batched(const char *variant, int tile, int trans_b, int batch, int m, int n, int k, float alpha,
                        const float *a, const float *b, float *c);

/* Device pointers, enqueued on `stream` (a cudaStream_t; NULL = the default stream), no sync.
   What the timing loop and the profilers call. */
int matmul_device(const char *variant, int tile, int m, int n, int k, const float *a, const float *b, float *c,
                  void *stream);

#ifdef __cplusplus
}
#endif
#endif
