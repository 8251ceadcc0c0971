/* softmax: out[r, c] = exp(s * x[r, c] - max_r) / sum_c exp(s * x[r, c] - max_r) for a row-major float32
   rows x cols matrix, where max_r is the largest s * x[r, c] of row r (numerically stable: no exponent
   is above 0, so no term overflows). s (scale) is 1 except for 05_fused_scale.

   Every entry point returns a cudaError_t as int (0 = success). The host-pointer form copies in, runs
   and copies out (tests, notebooks); the `_dev` form takes device pointers and a stream (NULL for the
   legacy default stream) and returns as soon as the work is queued (the bench, the profilers).

   Variants, in the order a learner meets them, selected by name through one dispatcher:
     "01_naive"        one thread per row, three passes (max, sum, normalise)
     "02_block_row"    one block per row, shared-memory tree reductions for the max and the sum
     "03_warp_row"     one warp per row, shuffle reductions; rows up to 1024 floats kept in registers
     "04_online"       one block per row, the online softmax: max and sum in one pass, then the write pass
     "05_fused_scale"  softmax(scale * x): float4 loads, the row in registers (up to 16384 floats), the
                       scale folded into the exponent; longer rows take 04's kernel with the scale
   An unknown name, a negative size, rows or cols above SOFTMAX_MAX_ROWS / SOFTMAX_MAX_COLS, a scale that
   is not finite, or a scale other than 1 for a variant other than 05_fused_scale returns
   cudaErrorInvalidValue. Inputs are expected finite. */
#ifndef CUDALAB_SOFTMAX_H
#define CUDALAB_SOFTMAX_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The grid's x dimension holds one block per row (2^31 - 1 at most); a column count the same. */
#define SOFTMAX_MAX_ROWS 2147483647LL
#define SOFTMAX_MAX_COLS 2147483647LL

/* The variant table: the Python side reads the names from here and never types them again. */
int softmax_variant_count(void);
const char *softmax_variant_name(int i); /* NULL when i is out of range */

/* The longest row a variant keeps in registers (read from memory once); 0 for the variants that never do. */
long long softmax_register_cols(const char *variant);

cudalab_status softmax_f32(const char *variant, const float *x, float *out, long long rows, long long cols,
                           float scale);
cudalab_status softmax_f32_dev(const char *variant, const float *d_x, float *d_out, long long rows, long long cols,
                               float scale, void *stream);

#ifdef __cplusplus
}
#endif
#endif
