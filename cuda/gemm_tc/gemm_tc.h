/* gemm_tc: BF16 GEMM on the tensor cores, FP32 accumulation, against cuBLAS.
   C (m x n, float32, row-major) = A (m x k, bf16, row-major) . B^T with B given as n x k bf16
   row-major (the "TN" layout: both operands K-contiguous, like nn.Linear's weight); the cuBLAS
   baselines compute the same layout. bf16 is passed as its raw bits (cudalab_bf16, cudalab.h).
   Variants (one table, gemm_tc_variant_name): 01_wmma, 02_mma_sync, 03_wgmma, 04_wgmma_persistent,
   05_wgmma_cluster (sm_90a only: 03's kernel body, each running one entry of the configuration
   table below), 06_wgmma_tuned (the entry the tuner picked, any schedule), 07_wgmma_pingpong (sm_90a only: the ping-pong schedule, two consumer
   warpgroups taking turns on whole 128x128 tiles; also one entry of the table), 08_wgmma_tma_store
   (sm_90a only: 04 with a TMA-store epilogue through shared memory and a balanced grid), cublas_bf16
   (cublasGemmEx, bf16 in, FP32 compute), cublas_tf32 (float32 in, TF32 tensor cores).
   Status codes: an unknown variant or a shape the variant refuses is cudaErrorInvalidValue (1; see
   gemm_tc_requirement for the sentence); a variant this build or device cannot run is
   cudaErrorNotSupported (801; see gemm_tc_unsupported_reason). */
#ifndef CUDALAB_GEMM_TC_H
#define CUDALAB_GEMM_TC_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The variant table: names in the order a learner meets them. */
int gemm_tc_variant_count(void);
const char *gemm_tc_variant_name(int i);
/* The variant's kinds, space-separated: "kernel" (the lab's own: 01-08) with "wgmma" for the sm_90a
   rungs (03-08), or "cublas" (the baselines); NULL for an unknown index. */
const char *gemm_tc_variant_tags(int i);

/* 1 when the library was built against cuBLAS, else 0. */
int gemm_tc_have_cublas(void);

/* NULL when `variant` can run on the current device in this build, else why not
   ("needs sm_90a: ...", "built without cuBLAS", "unknown variant"). */
const char *gemm_tc_unsupported_reason(const char *variant);

/* NULL when `variant` takes this shape, else the rule it breaks, naming the required multiple. */
const char *gemm_tc_requirement(const char *variant, int m, int n, int k);

/* Host pointers: copy A and B in, run, copy C out. Synchronous. "cublas_tf32" widens the bf16
   inputs to float32 on the device first (exact), then runs TF32. */
cudalab_status gemm_tc_host(const char *variant, int m, int n, int k, const cudalab_bf16 *a, const cudalab_bf16 *b,
                            float *c);

/* Device pointers, enqueued on `stream` (a cudaStream_t; NULL = default), no sync: what the timing
   loop and the profilers call. Every variant but cublas_tf32. */
cudalab_status gemm_tc_device(const char *variant, int m, int n, int k, const cudalab_bf16 *a,
                              const cudalab_bf16 *b, float *c, void *stream);

/* cublas_tf32 on float32 device operands (same layout): the TF32 reference line of the bench. */
cudalab_status gemm_tc_tf32_device(int m, int n, int k, const float *a, const float *b, float *c, void *stream);

/* --- the wgmma configurations (the tuner's search space) ---
   Each is a wgmma kernel with the schedule, pipeline depth and tile raster fixed, named
   "<rung>-<tile>-s<stages>-g<m|n><group>", e.g. "04_wgmma_persistent-128x256x64-s3-gn16":
   the rung whose schedule it uses (03 one block per tile, 04 persistent, 05 clusters of two with B
   multicast: 03's kernel, 128x256x64 block tile, 3 or 4 stages of 48 KiB; 07 ping-pong: 128x128x64
   tiles per consumer warpgroup, 4 or 6 stages of 32 KiB; 08 04's kernel with the TMA-store epilogue,
   4 stages), the mbarrier ring's depth, and the order
   the tiles are handed out (groups of 4, 8 or 16 tiles down M or along N). */
int gemm_tc_config_count(void);
const char *gemm_tc_config_name(int i);     /* NULL past the end */
int gemm_tc_config_index(const char *name); /* -1 when unknown */
/* The configuration a variant runs (03-05 and 08 their "-s4-gm8" defaults, 07 "-s6-gm8", 06 the tuned one), -1 for
   the others. */
int gemm_tc_variant_config(const char *variant);
/* One configuration by index: host pointers (like gemm_tc_host) and device pointers (like gemm_tc_device).
   cudaErrorInvalidValue for an unknown index or negative sizes, cudaErrorNotSupported off sm_90a. */
cudalab_status gemm_tc_config_host(int i, int m, int n, int k, const cudalab_bf16 *a, const cudalab_bf16 *b,
                                   float *c);
cudalab_status gemm_tc_config_device(int i, int m, int n, int k, const cudalab_bf16 *a, const cudalab_bf16 *b,
                                     float *c, void *stream);
/* The configuration 06_wgmma_tuned runs in this process, its one holder: set (cudaErrorInvalidValue
   for an unknown index; -1: back to the compiled default, as in a fresh process) and read back.
   Before any set: 04's default, and gemm_tc_tuned_is_set is 0 (1 once a set has chosen one). The C
   side never reads the tuning cache; the Python side (gemm_tc.apply_tuned) and the executable's
   --config pass the winner in. */
cudalab_status gemm_tc_set_tuned(int i);
int gemm_tc_tuned_config(void);
int gemm_tc_tuned_is_set(void);

#ifdef CUDALAB_FAULTS
/* The fault build only (`make FAULTS=1 build/faults/lib/libgemm_tc.so`, for the tests): while set to
   t > 0, 02_mma_sync and 03-08 skip their last t K tiles (the tests show the checker rejects that).
   0 restores normal operation. The product library has no such entry point. */
cudalab_status gemm_tc_set_fault_drop_k_tiles(int t);
#endif

#ifdef __cplusplus
}
#endif
#endif
