// The fixed end of exercise grayscale's CUDA file: the entry point(s) the check calls. `invoke exercise start
// grayscale --track cuda` appends it to the learner's file; it is never compiled on its own.

// The check calls this with device memory: 256 threads a block, cdiv(n, 256) blocks.
extern "C" int exercise_run(const unsigned char *x, long long stride, unsigned char *out, int n, void *stream) {
    grayscale_01_1d<<<(unsigned)cdiv(n, 256), 256, 0, (cudaStream_t)stream>>>(x, stride, out, n);
    return (int)cudaGetLastError();
}
