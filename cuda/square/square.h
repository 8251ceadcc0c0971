/* square: the Stringer course's square kernels (sections 2.7-2.12) and the 2-D square from the
   GPU MODE profiling lecture.

   Every entry point returns a cudaError_t as int (0 = success). Host-pointer forms copy in, run
   and copy out (for tests and notebooks); the `_dev` forms take device pointers and a stream
   (a cudaStream_t, NULL for the legacy default stream) and return as soon as the work is queued,
   which is what harness.measuring.timing and the profilers need.

   float32 variants, in the order a learner meets them, selected by name through one dispatcher:
     "01_naive"        one thread per element, bounds guard
     "02_grid_stride"  a grid sized to fill the GPU once; each thread strides over the array
     "03_vectorized"   grid-stride with 16-byte (float4) loads and stores; its default grid
                       gives each thread one float4 (the loop then runs once: measured fastest),
                       a smaller `blocks` makes it stride.
                       Any pointer alignment is accepted: when x and out are misaligned by the
                       same amount a scalar head of at most 3 elements brings them to a 16-byte
                       boundary; a scalar tail of at most 3 elements finishes odd lengths; when
                       their misalignments differ, no float4 access is possible for both, and the
                       variant falls back to the scalar grid-stride loop.
   An unknown name returns cudaErrorInvalidValue (harness/programs/square.py checks names first). */
#ifndef CUDALAB_SQUARE_H
#define CUDALAB_SQUARE_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The variant names above, so the Python side can check that it agrees with the library. */
int square_variant_count(void);
const char *square_variant_name(int i); /* NULL when i is out of range */

/* int32, in place, the course's semantics: a[i] = a[i] * a[i], wrapping modulo 2^32 like numpy
   int32 (the multiplication is done unsigned, so overflow is defined). threads = block size. */
cudalab_status square_int32(int *a, long long n, int threads);
cudalab_status square_int32_dev(int *d_a, long long n, int threads, void *stream);

/* float32, out of place: out[i] = x[i] * x[i]. blocks/threads of 0 pick the variant's defaults
   (01_naive ignores blocks: its grid always covers n). */
cudalab_status square_f32(const char *variant, const float *x, float *out, long long n);
cudalab_status square_f32_dev(const char *variant, const float *d_x, float *d_out, long long n, int blocks,
                              int threads, void *stream);

/* The profiling lecture's 2-D kernel: 16x16 blocks over a height x width row-major matrix. */
cudalab_status square_matrix(const float *x, float *out, int height, int width);
cudalab_status square_matrix_dev(const float *d_x, float *d_out, int height, int width, void *stream);

#ifdef CUDALAB_FAULTS
/* The fault build only (`make FAULTS=1 build/faults/lib/libsquare.so`, for the tests): while ns > 0 every
   thread of 03_vectorized sleeps about ns nanoseconds first, a slowed square for the bench's regression
   gate to catch. 0 restores normal operation. The product library has no such entry point. */
cudalab_status square_set_fault_sleep_ns(unsigned ns);
#endif

#ifdef __cplusplus
}
#endif
#endif
