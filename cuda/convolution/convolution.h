/* convolution: 1-D and 2-D convolution of float32 data with a (2r+1)-tap (or (2r+1)x(2r+1)) filter,
   zero padding at the edges, out the same shape as the input (PMPP chapter 7).

   What is computed, exactly (PMPP's formula, which is a cross-correlation: the filter is NOT flipped):
     1-D  out[i]    = sum_{j=0}^{2r}             f[j]                * x[i - r + j]
     2-D  out[y][x] = sum_{fy=0}^{2r} sum_{fx=0}^{2r} f[fy*(2r+1)+fx] * in[y - r + fy][x - r + fx]
   with x (in) taken as 0 outside the array. numpy's np.convolve(x, f[::-1], "same") is the same thing
   for len(x) >= 2r+1 (np.convolve flips its second argument).

   Every entry point returns a cudaError_t as int (0 = success). The host-pointer forms copy in, load
   the filter, run and copy out (tests, notebooks); the `_dev` forms take device pointers and a stream
   (NULL for the legacy default stream) and return as soon as the work is queued (the bench, profilers).

   Variants, in the order a learner meets them, selected by name through one dispatcher per dimension:
     "01_naive_1d"     one thread per output, the filter read from global memory
     "02_constant_1d"  the same, the filter in __constant__ memory (one broadcast read per tap per warp)
     "03_tiled_1d"     the block's inputs and their halo in shared memory; 8 outputs a thread from a
                       register window read with 16-byte shared loads
     "04_naive_2d"     one thread per output, 32x8 blocks, filter from global memory
     "05_constant_2d"  the same with the filter in __constant__ memory
     "06_tiled_2d"     a 32x64 output tile plus its halo in shared memory, 8 outputs a thread down a column
     "07_vec_1d"       03's tile with every global load and store a float4 (512 contiguous bytes a warp
                       instruction), the halo rounded up to whole float4s
     "08_vec_2d"       a 128x64 tile moved in float4s, a float4 of outputs in each of 8 rows a thread, a
                       one-float4 halo on each side
   An unknown name, or a name of the other dimension, returns cudaErrorInvalidValue.

   The constant and tiled variants read the filter from __constant__ memory, one slot per radius: the
   host-pointer forms load it themselves; before a `_dev` call of those variants, load it with
   convolution_set_filter (what PMPP's cudaMemcpyToSymbol does once before the launches). The `_dev`
   forms of 01 and 04 read d_filter, a device array of the taps. 03_tiled_1d stores float4s: d_out must
   be 16-byte aligned (cudaMalloc's always are); otherwise it returns cudaErrorInvalidValue. 07_vec_1d and
   08_vec_2d take any pointers: where d_x or d_out is off the 16-byte grid, or (08) w is not a multiple
   of 4, they run the same tile 4 bytes at a time. */
#ifndef CUDALAB_CONVOLUTION_H
#define CUDALAB_CONVOLUTION_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The variant table: the Python side reads the names from here and never types them again. */
int convolution_variant_count(void);
const char *convolution_variant_name(int i); /* NULL when i is out of range */
int convolution_variant_dims(int i);         /* 1 or 2; 0 when i is out of range */

/* The limits the launchers accept, so Python checks them before any launch: the largest radius for
   `dims` (8 for 1-D, 4 for 2-D), the longest 1-D input, the largest 2-D height and width. */
int convolution_max_radius(int dims);
long long convolution_max_n(void);
int convolution_max_height(void);
int convolution_max_width(void);
/* The shape of 03_tiled_1d (dims 1) and 06_tiled_2d (dims 2), for their Python twins and the picture:
   what = 0 threads per block in x, 1 threads per block in y, 2 outputs per thread. -1 for anything
   else. (07 and 08 have no twin: their shapes stay in convolution.cu.) */
int convolution_tiling(int dims, int what);

/* Copy a host filter of (2r+1) (dims 1) or (2r+1)^2 (dims 2) taps into __constant__ memory, the slot of
   radius r. Synchronous. */
cudalab_status convolution_set_filter(int dims, const float *filter, int r);

/* 1-D: out[n], x[n], filter[2r+1]. */
cudalab_status convolution_1d_f32(const char *variant, const float *x, long long n, const float *filter, int r,
                                  float *out);
cudalab_status convolution_1d_f32_dev(const char *variant, const float *d_x, long long n, const float *d_filter, int r,
                                      float *d_out, void *stream);

/* 2-D, row-major h x w: out[h*w], x[h*w], filter[(2r+1)*(2r+1)] row-major. */
cudalab_status convolution_2d_f32(const char *variant, const float *x, int h, int w, const float *filter, int r,
                                  float *out);
cudalab_status convolution_2d_f32_dev(const char *variant, const float *d_x, int h, int w, const float *d_filter, int r,
                                      float *d_out, void *stream);

#ifdef __cplusplus
}
#endif
#endif
