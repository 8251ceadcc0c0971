/* Entry points every lib<prog>.so exports beside its own (built from cuda/common/cudalab.cu).
   harness/library.py appends this file to each program's cdef. */
#ifndef CUDALAB_COMMON_H
#define CUDALAB_COMMON_H
#ifdef __cplusplus
extern "C" {
#endif

/* What an entry point returns when it reports success or failure: a cudaError_t as int, 0 = success.
   harness/library.py raises on a non-zero cudalab_status; a plain `int` return is a value. */
typedef int cudalab_status;

/* The name ("cudaErrorInvalidValue") and message of a cudaError_t returned by an entry point. */
const char *cudalab_error_name(int code);
const char *cudalab_error_string(int code);
/* Clear a non-sticky error left by a failed launch, so the next call starts clean. */
cudalab_status cudalab_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
