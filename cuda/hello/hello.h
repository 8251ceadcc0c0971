/* hello: the Stringer course's first kernels (section 2.3-2.6). Every line a kernel prints is
   tagged `hello kernel=... block=... thread=... global=...` so harness.calling.parse can read it.
   Each entry point launches, synchronises (which drains the printf FIFO) and returns a
   cudaError_t as int, 0 on success. */
#ifndef CUDALAB_HELLO_H
#define CUDALAB_HELLO_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

cudalab_status hello_gpu(void);                     /* helloGPU<<<1,1>>> */
cudalab_status hello_ints(void);                    /* printInts<<<1,1>>>: one thread prints 0..9 */
cudalab_status hello_shapes(void);                  /* kernelA..D: <<<1,1>>>, <<<1,10>>>, <<<10,1>>>, <<<10,10>>> */
cudalab_status hello_loop(int blocks, int threads); /* loop<<<blocks,threads>>>: each thread prints its global index */

#ifdef __cplusplus
}
#endif
#endif
