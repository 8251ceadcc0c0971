/* Entry points every lib<prog>.so exports beside its own (built from cuda/common/cudalab.cu).
   harness/calling/library.py appends this file to each program's cdef. */
#ifndef CUDALAB_COMMON_H
#define CUDALAB_COMMON_H
#ifdef __cplusplus
#include <cstdint>
#else
#include <stdint.h>
#endif
#ifdef __cplusplus
extern "C" {
#endif

/* What an entry point returns when it reports success or failure: a cudaError_t as int, 0 = success.
   harness/calling/library.py raises on a non-zero cudalab_status; a plain `int` return is a value. */
typedef int cudalab_status;

/* A bfloat16 value as its raw 16 bits (sign, 8 exponent bits, 7 mantissa bits: the top half of a
   float32). C has no bfloat16 type; the kernels reinterpret these bits as __nv_bfloat16, and
   harness/calling/library.py maps a `cudalab_bf16 *` parameter to an ml_dtypes.bfloat16 numpy array. */
typedef uint16_t cudalab_bf16;

/* The name ("cudaErrorInvalidValue") and message of a cudaError_t returned by an entry point. */
const char *cudalab_error_name(int code);
const char *cudalab_error_string(int code);
/* Clear a non-sticky error left by a failed launch, so the next call starts clean. */
cudalab_status cudalab_clear_error(void);
/* After a failure: 0 when the context still works, else the sticky error that lost it. */
cudalab_status cudalab_context_check(void);

#ifdef __cplusplus
}
#endif
#endif
