/* histogram: counts of uint8 values into 256 bins (PMPP chapter 9), with three kernels that fix, in
   turn, the two costs of counting with atomics: contention (many threads adding to one bin at once)
   and the number of atomics that reach global memory. CUB's DeviceHistogram::HistogramEven is the
   ceiling the bench times beside them.

   Every entry point returns a cudaError_t as int (0 = success). The host-pointer form copies in, runs
   and copies out (tests, notebooks); the `_dev` form takes device pointers and a stream (NULL for the
   legacy default stream) and returns as soon as the work is queued (the bench, the profilers). The
   counts are uint32 and exact; n is at most 2^31 - 1, so no bin can overflow.

   Variants, in the order a learner meets them, selected by name through one dispatcher:
     "01_global_atomics"  one thread per byte, one atomicAdd on the global bins per byte
     "02_shared_private"  one thread per byte; each block counts into its own bins in shared memory,
                          then adds each non-zero bin to the global ones with one atomic
     "03_coarsened"       a grid that fills the GPU once; each thread strides over 16-byte loads and
                          counts into one of 32 interleaved copies of the bins (its lane's), so no two
                          lanes of a warp ever touch one shared bank or one counter
   An unknown name returns cudaErrorInvalidValue. */
#ifndef CUDALAB_HISTOGRAM_H
#define CUDALAB_HISTOGRAM_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The variant table: the Python side reads the names from here and never types them again. */
int histogram_variant_count(void);
const char *histogram_variant_name(int i); /* NULL when i is out of range */

/* bins[0..255] = how many of in[0..n) hold each value. The bins are overwritten (zeroed on the device
   first), so whatever they held before does not matter. blocks/threads of 0 pick the variant's
   defaults; 01 and 02 run one thread per byte and take blocks = 0 only. */
cudalab_status histogram_u8(const char *variant, const unsigned char *in, long long n, unsigned int *bins);
cudalab_status histogram_u8_dev(const char *variant, const unsigned char *d_in, long long n, unsigned int *d_bins,
                                int blocks, int threads, void *stream);

/* CUB's cub::DeviceHistogram::HistogramEven over the same 256 bins: the ceiling. The device form takes
   temporary storage of at least histogram_cub_temp_bytes(n) bytes, allocated once by the caller. */
cudalab_status histogram_cub_temp_bytes(long long n, unsigned long long *bytes);
cudalab_status histogram_cub_u8_dev(const unsigned char *d_in, long long n, unsigned int *d_bins, void *d_temp,
                                    unsigned long long temp_bytes, void *stream);
cudalab_status histogram_cub_u8(const unsigned char *in, long long n, unsigned int *bins);

#ifdef __cplusplus
}
#endif
#endif
