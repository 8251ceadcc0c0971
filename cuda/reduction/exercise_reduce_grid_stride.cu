// The fixed end of exercise reduce_grid_stride's CUDA file: the entry point the check calls. `invoke exercise
// start reduce_grid_stride --track cuda` appends it to the learner's file; it is never compiled on its own.

// The check calls this with device memory: x = base + misalign (misalign floats past a 16-byte boundary, as a
// pointer into the middle of an array may be), head = the floats before x's next 16-byte boundary (as the lab's
// launcher computes it), `blocks` blocks of kThreads threads (0: one full wave of the GPU, as the lab launches
// 04, at most 4096 blocks), each block's sum to partials[blockIdx.x].
extern "C" int exercise_run(const float *base, int misalign, long long n, float *partials, int blocks, void *stream) {
    if (n <= 0) return 0;
    const float *x = base + misalign;
    long long head = (long long)(((16 - ((uintptr_t)x % 16)) % 16) / sizeof(float));
    if (head > n) head = n;
    if (blocks <= 0) {
        int dev = 0, sms = 0, per_sm = 0;
        cudaError_t err = cudaGetDevice(&dev);
        if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (err == cudaSuccess)
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reduction_04_grid_stride, kThreads, 0);
        if (err != cudaSuccess) return (int)err;
        long long g = (long long)sms * (per_sm > 0 ? per_sm : 1);
        const long long useful = cdiv(n / 4, kThreads);
        if (g > useful) g = useful;
        if (g > 4096) g = 4096;
        blocks = g < 1 ? 1 : (int)g;
    }
    reduction_04_grid_stride<<<(unsigned)blocks, kThreads, 0, (cudaStream_t)stream>>>(x, n, head, partials);
    return (int)cudaGetLastError();
}
