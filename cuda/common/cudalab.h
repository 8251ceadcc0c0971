/* Entry points every lib<prog>.so exports beside its own (built from cuda/common/cudalab.cu).
   harness/library.py appends this file to each program's cdef. */
#ifndef CUDALAB_COMMON_H
#define CUDALAB_COMMON_H
#ifdef __cplusplus
extern "C" {
#endif

/* The name ("cudaErrorInvalidValue") and message of a cudaError_t returned by an entry point. */
const char *cudalab_error_name(int code);
const char *cudalab_error_string(int code);
/* Clear a non-sticky error left by a failed launch, so the next call starts clean. */
int cudalab_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
