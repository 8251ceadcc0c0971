/* mandelbrot: the Stringer course's Mandelbrot kernel (section 3.1) in CUDA C.
   Pixel (row, col) of a width x height image maps to
       c = (x0 + (x1 - x0) * col / width,  y0 + (y1 - y0) * row / height)
   and its value is the number of iterations z = z^2 + c actually computed, starting from z = 0,
   while |z|^2 <= 4 and at most max_iters times: a count in 1..max_iters.
   Variants (learning order):
     "01_naive"  the course's kernel, 16x16 blocks, float32 (dtype_bits 32) or float64 (64);
                 IEEE-rounded operations only (no FMA contraction), so numpy reproduces it bit for bit.
     "02_fast"   float32 only: fused multiply-adds, the escape test once every few iterations.
   The render entry points return cudalab_status, a cudaError_t as int (0 = success); bad sizes, an empty or non-finite
   region, an unknown variant or an unsupported dtype give cudaErrorInvalidValue before any launch. */
#ifndef CUDALAB_MANDELBROT_H
#define CUDALAB_MANDELBROT_H
#include <stdint.h>
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Values, not statuses: the variant table, 02_fast's unroll, the largest width or height. */
int mandelbrot_variant_count(void);
const char *mandelbrot_variant_name(int i);
/* Iterations 02_fast runs between two escape tests (the SASS count divides its loop by this). */
int mandelbrot_fast_unroll(void);
/* The largest WIDTH or HEIGHT (the grid's y limit, with a margin). */
int mandelbrot_max_edge(void);

/* Host-pointer form: out is height*width uint32 in host memory, row-major. Synchronises. */
cudalab_status mandelbrot_render(const char *variant, int dtype_bits, int width, int height, int max_iters,
                                 double x0, double x1, double y0, double y1, uint32_t *out);
/* Device-pointer form: d_out is height*width uint32 in device memory; enqueued on `stream`
   (NULL = legacy default stream), no synchronisation. */
cudalab_status mandelbrot_render_device(const char *variant, int dtype_bits, int width, int height, int max_iters,
                                        double x0, double x1, double y0, double y1, uint32_t *d_out,
                                        void *stream);

#ifdef __cplusplus
}
#endif
#endif
