// The fixed end of exercise reduce_tree's CUDA file: the entry point the check calls. `invoke exercise start
// reduce_tree --track cuda` appends it to the learner's file; it is never compiled on its own.

// The check calls this with device memory: one block of kThreads threads per 2 * kThreads elements (as the
// lab launches 02), each block's sum to partials[blockIdx.x].
extern "C" int exercise_run(const float *x, long long n, float *partials, void *stream) {
    if (n <= 0) return 0;
    const unsigned blocks = (unsigned)cdiv(n, 2 * kThreads);
    reduction_02_block_sums<<<blocks, kThreads, 0, (cudaStream_t)stream>>>(x, n, partials);
    return (int)cudaGetLastError();
}
