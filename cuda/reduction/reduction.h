/* reduction: the sum of a float32 array (PMPP chapter 10, GPU MODE lecture 9), four ways, and CUB's
   cub::DeviceReduce::Sum as the yardstick.

   Every entry point that returns cudalab_status returns a cudaError_t as int (0 = success). The
   host-pointer forms copy in, run and copy the one float back (tests, notebooks); the `_dev` forms take
   device pointers and a stream (NULL for the legacy default stream) and return as soon as the work is
   queued (the bench, the profilers).

   Variants, in the order a learner meets them, selected by name through one dispatcher (the table's
   names are read by the Python side from reduction_variant_name, never typed there):
     "01_atomic_naive"  one thread per element, each atomicAdd-ing into the one result
     "02_shared_tree"   a tree of partial sums in shared memory per block; one atomicAdd per block
     "03_warp_shuffle"  the tree inside each warp with __shfl_down_sync; shared memory only across warps
     "04_grid_stride"   a full-wave grid: each thread sums many float4s first, then the warp/block tree;
                        one partial per block, and a one-block second pass (no atomics: the same bits
                        every run on one GPU)
   All accumulate in float32. An unknown name returns cudaErrorInvalidValue. */
#ifndef CUDALAB_REDUCTION_H
#define CUDALAB_REDUCTION_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The variant table: the Python side reads the names from here and never types them again. */
int reduction_variant_count(void);
const char *reduction_variant_name(int i); /* NULL when i is out of range */

/* The largest n every entry point takes (elements), and the floats of scratch the `_dev` form needs
   (04's per-block partials; the other variants use none, but always pass a buffer of this size). */
long long reduction_max_n(void);
long long reduction_scratch_floats(void);

/* The longest chain of float32 additions any one input passes through on its way to the result, for
   `variant` over n elements launched as `blocks` blocks of `threads` threads: the D of the error bound
   |sum - exact| <= gamma_D * sum|x| (gamma_D = D u / (1 - D u), u = 2^-24). Pure arithmetic, no GPU.
   -1 for an unknown variant or a negative argument. */
long long reduction_chain(const char *variant, long long n, long long blocks, int threads);

/* The launch the dispatcher makes for `variant` at n: *blocks blocks of *threads threads (04 asks the
   device how many blocks fill it once). */
cudalab_status reduction_plan(const char *variant, long long n, long long *blocks, int *threads);

/* *out = x[0] + ... + x[n-1]. n = 0 gives 0. */
cudalab_status reduction_sum_f32(const char *variant, const float *x, long long n, float *out);
/* d_out: one float on the device. d_scratch: reduction_scratch_floats() floats on the device. d_x must
   be 4-byte aligned (any float pointer is); 04 finds its own 16-byte boundary. */
cudalab_status reduction_sum_f32_dev(const char *variant, const float *d_x, long long n, float *d_out,
                                     float *d_scratch, void *stream);

/* 02's per-block sums before its atomics add them (reduction_plan("02_shared_tree", n) blocks, at
   partials): the same tree, in an order no atomic changes, so they are the same bits every run. n >= 1. */
cudalab_status reduction_02_block_sums_f32(const float *x, long long n, float *partials);

/* The yardstick: cub::DeviceReduce::Sum. Its temporary storage is sized once (reduction_cub_temp_bytes)
   and allocated by the caller, so the timed call is the reduction alone. */
cudalab_status reduction_cub_temp_bytes(long long n, long long *bytes);
cudalab_status reduction_cub_sum_f32_dev(const float *d_x, long long n, float *d_out, void *d_temp,
                                         long long temp_bytes, void *stream);
cudalab_status reduction_cub_sum_f32(const float *x, long long n, float *out);

#ifdef __cplusplus
}
#endif
#endif
