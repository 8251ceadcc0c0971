/* transpose: out = in^T for a row-major float32 matrix of rows x cols (out is cols x rows), the
   classic lesson in coalescing and shared-memory bank conflicts (NVIDIA's "An Efficient Matrix
   Transpose in CUDA C/C++").

   Every entry point returns a cudaError_t as int (0 = success). The host-pointer form copies in, runs
   and copies out (tests, notebooks); the `_dev` form takes device pointers and a stream (NULL for the
   legacy default stream) and returns as soon as the work is queued (the bench, the profilers).

   Variants, in the order a learner meets them, selected by name through one dispatcher:
     "01_naive"        one thread per element, 32x32 blocks: reads along a row (coalesced), writes
                       down a column of out (one 32-byte sector per thread: strided)
     "02_shared_tile"  a 32x32 tile staged through shared memory: both global sides coalesced, but a
                       warp reads a column of the tile, 32 addresses in one bank (32-way conflict)
     "03_padded"       the same with tile[32][33]: a column's 32 floats fall in 32 different banks
     "04_coarsened"    03 with 32x8 threads, each moving 4 elements: a quarter of the threads and
                       barriers, four loads in flight per thread
   Any rows and cols work (the edge tiles are guarded); an unknown name, a negative size, a null
   pointer or more rows than the grid's y axis holds (transpose_max_rows) return cudaErrorInvalidValue. */
#ifndef CUDALAB_TRANSPOSE_H
#define CUDALAB_TRANSPOSE_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The variant table: the Python side reads the names from here and never types them again. */
int transpose_variant_count(void);
const char *transpose_variant_name(int i); /* NULL when i is out of range */

/* The tile's edge (32) and the most rows one launch takes (gridDim.y's limit times the tile). */
int transpose_tile(void);
long long transpose_max_rows(void);

/* out (cols x rows) = in (rows x cols)^T, both row-major and not overlapping. */
cudalab_status transpose_f32(const char *variant, const float *in, float *out, int rows, int cols);
cudalab_status transpose_f32_dev(const char *variant, const float *d_in, float *d_out, int rows, int cols,
                                 void *stream);

#ifdef __cplusplus
}
#endif
#endif
