/* grid_stride: the Stringer course's squareElements (sections 2.13-2.15). a[i] *= i over a
   grid-stride loop; every element processed prints one line

     Thread %d (Block %d, Thread in Block %d) processing element %d. Old value: %d, New value: %d

   on stdout (device printf, drained when the entry point synchronises), which
   harness/programs/grid_stride.py parses and checks. The multiplication wraps modulo 2^32 like
   numpy int32. Each entry point sizes the printf FIFO for n lines before it launches; the FIFO can
   only be resized before the process's first printf-ing launch, so the first call should be the
   largest. n is limited to GRID_STRIDE_MAX_N lines of trace; blocks * threads must fit an int.
   Returns a cudaError_t as int (0 = success). */
#ifndef CUDALAB_GRID_STRIDE_H
#define CUDALAB_GRID_STRIDE_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

#define GRID_STRIDE_MAX_N 1048576

/* host pointer: copy a in, run squareElements<<<blocks, threads>>>, synchronise, copy a back */
cudalab_status grid_stride_square(int *a, int n, int blocks, int threads);
/* device pointer (or managed): enqueue on stream and synchronise it, so the trace is complete */
cudalab_status grid_stride_square_dev(int *d_a, int n, int blocks, int threads, void *stream);

#ifdef __cplusplus
}
#endif
#endif
