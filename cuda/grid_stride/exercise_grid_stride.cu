// The fixed end of exercise grid_stride's CUDA file: the entry point(s) the check calls. `invoke exercise start
// grid_stride --track cuda` appends it to the learner's file; it is never compiled on its own.

// The check calls this with device memory and a grid of its choice, often smaller than n.
extern "C" int exercise_run(const float *x, float *out, long long n, int blocks, int threads, void *stream) {
    square_02_grid_stride<<<blocks, threads, 0, (cudaStream_t)stream>>>(x, out, n);
    return (int)cudaGetLastError();
}
