/* reduction: out[i] = a * x[i] + y[i] over float32 arrays, with a grid-stride loop (written by
   `invoke new reduction`: a working start to change into your own program).

   Every entry point returns a cudaError_t as int (0 = success). The host-pointer form copies in, runs
   and copies out (tests, notebooks); the `_dev` form takes device pointers and a stream (NULL for the
   legacy default stream) and returns as soon as the work is queued (the bench, the profilers).

   Variants, in the order a learner meets them, selected by name through one dispatcher:
     "01_grid_stride"  a grid sized to fill the GPU once; each thread strides over the arrays
   An unknown name returns cudaErrorInvalidValue. */
#ifndef CUDALAB_REDUCTION_H
#define CUDALAB_REDUCTION_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The variant table: the Python side reads the names from here and never types them again. */
int reduction_variant_count(void);
const char *reduction_variant_name(int i); /* NULL when i is out of range */

/* out = a * x + y, n elements. blocks/threads of 0 pick the defaults (one full wave of 256-thread blocks). */
cudalab_status reduction_f32(const char *variant, float a, const float *x, const float *y, float *out, long long n);
cudalab_status reduction_f32_dev(const char *variant, float a, const float *d_x, const float *d_y, float *d_out,
                              long long n, int blocks, int threads, void *stream);

#ifdef __cplusplus
}
#endif
#endif
