/* grayscale: planar RGB (uint8 CHW: the R plane, then G, then B) to an H×W uint8 image, as in
   GPU MODE lecture 3.

   The formula, pinned (all three variants and the numpy reference give identical bytes):
       y = (0.2989f·R + 0.5870f·G) + 0.1140f·B   in float32, each product and sum rounded to
                                                 nearest (no fused multiply-add), in this order
       grey = trunc(y)                           the lectures' cast to unsigned char
   Truncation and coefficients that sum to 0.9999 mean white (255, 255, 255) becomes 254.

   Variants, by name: "01_1d" (256 threads a block, cdiv(n, 256) blocks), "02_2d" (16×16 blocks
   over (w, h)), "03_vectorized" (16 pixels a thread through 16-byte loads and stores).
   Entry points return cudalab_status, a cudaError_t as int (0 = success); an unknown variant, or sizes out of
   range, give cudaErrorInvalidValue (1). */
#ifndef CUDALAB_GRAYSCALE_H
#define CUDALAB_GRAYSCALE_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The variant names above, from the one table in grayscale.cu (values, not statuses). */
int grayscale_variant_count(void);
const char *grayscale_variant_name(int i); /* NULL when i is out of range */

/* Host pointers. rgb holds 3·h·w bytes (planes packed back to back), out h·w bytes. On the
   device the planes are placed at a 16-byte pitch when align_planes is non-zero (what a caller
   who owns the layout would do), else packed like the input, so that with h·w not a multiple
   of 16 the G and B planes are misaligned and 03_vectorized takes its byte-load path. */
cudalab_status grayscale_host(const char *variant, int h, int w, const unsigned char *rgb, unsigned char *out,
                              int align_planes);

/* Device pointers, enqueued on `stream` (a cudaStream_t; NULL = default stream), no sync.
   Plane p starts at rgb + p·plane_stride bytes (plane_stride >= h·w). */
cudalab_status grayscale_device(const char *variant, int h, int w, long long plane_stride, const unsigned char *rgb,
                                unsigned char *out, void *stream);

/* The pitch grayscale_host uses for aligned planes: h·w rounded up to a multiple of 16. */
long long grayscale_aligned_stride(int h, int w);

#ifdef __cplusplus
}
#endif
#endif
