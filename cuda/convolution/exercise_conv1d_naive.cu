// The fixed end of exercise conv1d_naive's CUDA file: the entry point(s) the check calls. `invoke exercise
// start conv1d_naive --track cuda` appends it to the learner's file; it is never compiled on its own.

// The check calls this with device memory: x and out of n floats, f of 2r+1 taps; one thread per
// output in blocks of kThreads1d, as the lab launches 01_naive_1d.
extern "C" int exercise_run(const float *x, const float *f, int r, float *out, long long n, void *stream) {
    if (n <= 0) return 0;
    conv1d_01_naive<<<(unsigned)cdiv(n, kThreads1d), kThreads1d, 0, (cudaStream_t)stream>>>(x, f, r, out, n);
    return (int)cudaGetLastError();
}
