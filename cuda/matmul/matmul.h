/* matmul: float32 row-major C = A·B (GPU MODE lectures 3 and 5), the SGEMM ladder towards cuBLAS,
   and a cuBLAS SGEMM baseline.
   Variants, by name (the one table is in matmul.cu; matmul_variant_count/_name list it):
     "01_naive", "02_tiled" (tile 16 or 32), "03_tiled_dynamic" (any tile whose tile² threads and
     2·tile²·4 bytes fit the device)              -- matmul_kernels.cuh, shared with attention
     "04_blocktile_1d", "05_blocktile_2d", "06_vectorized", "07_warptile", "08_pipelined"
                                                  -- sgemm_ladder.cuh; the tile argument is ignored
     "09_tuned"   the ladder configuration chosen by `invoke tune matmul` (matmul_set_tuned), else
                  the default one (matmul_tuned_config() before any set)
     "10_regtile", "11_splitk_tail"               -- sgemm_ladder.cuh: a 16×8 thread tile,
                  then its partial last wave split along k (11 zeroes part of C and adds into it)
     "cublas"     only when built with cuBLAS.
   The ladder variants take B as k×n only (trans_b = 1 is cudaErrorInvalidValue).
   Configurations: the fixed list of compiled ladder instantiations (block/warp tile, stages),
   matmul_config_count/_name; each rung 04-08, 10 and 11 runs its default configuration.
   Statuses are cudaError_t as int (0 = success): an unknown variant or a tile the variant does not
   take is cudaErrorInvalidValue (1); a tile or configuration the device cannot hold is
   cudaErrorInvalidConfiguration (9); "cublas" without cuBLAS is cudaErrorNotSupported (801). */
#ifndef CUDALAB_MATMUL_H
#define CUDALAB_MATMUL_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the library was built against cuBLAS (the Makefile found it), else 0. */
int matmul_have_cublas(void);

/* The variant table: names in the order a learner meets them (cublas last). NULL past the end. */
int matmul_variant_count(void);
const char *matmul_variant_name(int i);

/* 0 when `variant` can run with `tile` (and op(B) = Bᵀ when trans_b) on the current device. */
cudalab_status matmul_check(const char *variant, int tile, int trans_b);

/* Host pointers: copy A (m×k) and B (k×n) in, run, copy C (m×n) out. Synchronous. */
cudalab_status matmul_host(const char *variant, int tile, int m, int n, int k, const float *a, const float *b,
                           float *c);

/* Host pointers, the general form (the attention program's use): for z < batch,
   C_z = alpha·A_z·op(B_z) with A_z m×k, op(B_z) = B_z (k×n) or B_zᵀ (B_z n×k; 01-03 and cublas
   only), operands packed one after another (batch strides m·k, k·n, m·n). */
cudalab_status matmul_host_batched(const char *variant, int tile, int trans_b, int batch, int m, int n, int k,
                                   float alpha, const float *a, const float *b, float *c);

/* Device pointers, enqueued on `stream` (a cudaStream_t; NULL = the default stream), no sync.
   What the timing loop and the profilers call. */
cudalab_status matmul_device(const char *variant, int tile, int m, int n, int k, const float *a, const float *b,
                             float *c, void *stream);

/* --- ladder configurations (the tuner's search space) --- */
int matmul_config_count(void);
const char *matmul_config_name(int i); /* e.g. "08_pipelined-128x128x16-w64x32-s3"; NULL past the end */
int matmul_config_index(const char *name); /* -1 when unknown */
/* The configuration a variant runs (04-11), -1 for the others. */
int matmul_variant_config(const char *variant);
/* What configuration i needs and what the device allows, for messages that name the limit:
   out[0] threads per block, out[1] dynamic shared bytes, out[2] static shared bytes,
   out[3] registers per thread, out[4] the most threads per block those registers allow,
   out[5] the device's shared memory per block (opt-in), out[6] local (spill) bytes per thread. */
cudalab_status matmul_config_info(int i, int *out);
/* 0 when configuration i fits the device; cudaErrorInvalidConfiguration when its shared memory or
   its registers × threads do not (matmul_config_info says which). */
cudalab_status matmul_config_check(int i);
cudalab_status matmul_config_host(int i, int m, int n, int k, const float *a, const float *b, float *c);
cudalab_status matmul_config_device(int i, int m, int n, int k, const float *a, const float *b, float *c,
                                    void *stream);
/* The largest m a variant (or configuration i) takes: the grid's y dimension holds at most
   CUDALAB_MAX_GRID_YZ (65535) blocks of the variant's rows (16 for 01_naive, the tile for 02/03, the
   configuration's block rows for 04-11; 09_tuned: the configuration it runs now), capped at INT_MAX
   (cublas). -1 for an unknown variant or configuration, or a tile below 1. */
long long matmul_max_m(const char *variant, int tile);
long long matmul_config_max_m(int i);
/* 11_splitk_tail's rule: how many pieces each of the `tail` tiles of a partial last wave is cut into,
   with `slots` blocks resident at once and `ktiles` k-tiles to a tile (1: no split). *kt_big (may be
   NULL) gets 0 for equal k-slices, or the first piece's k-tiles when the tile is cut in two uneven
   pieces. Pure arithmetic. */
long long matmul_tail_plan(long long tail, long long slots, long long ktiles, long long *kt_big);
/* The configuration "09_tuned" runs in this process, its one holder: set (checked against the device
   first; -1: back to the compiled default, as in a fresh process) and read back; matmul_tuned_is_set
   is 1 once a set has chosen one, 0 while the compiled default runs unchosen. */
cudalab_status matmul_set_tuned(int i);
int matmul_tuned_config(void);
int matmul_tuned_is_set(void);

#ifdef __cplusplus
}
#endif
#endif
