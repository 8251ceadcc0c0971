// The fixed end of exercise square's CUDA file: the entry point(s) the check calls. `invoke exercise start
// square --track cuda` appends it to the learner's file; it is never compiled on its own.

// The check calls this with device memory: one thread per element, cdiv(n, threads) blocks.
extern "C" int exercise_run(int *d_a, long long n, int threads, void *stream) {
    if (n <= 0) return 0;
    square_int32_kernel<<<(unsigned)cdiv(n, threads), threads, 0, (cudaStream_t)stream>>>(d_a, n);
    return (int)cudaGetLastError();
}

// The course's program as one function (its main() without the printing): host holds n ints.
extern "C" int exercise_managed(int *host, long long n, int threads) {
// EXERCISE square: begin allocate n ints of managed memory (cudaMallocManaged: one pointer valid on the host and
// EXERCISE square: todo the device); copy host into it; launch square_int32_kernel on it over cdiv(n, threads) blocks
// EXERCISE square: todo of `threads`; check the launch (cudaGetLastError); wait for the kernel
// EXERCISE square: todo (cudaDeviceSynchronize: the host may not read managed memory a kernel is still writing); copy
// EXERCISE square: todo the result back into host; cudaFree it. Return the first CUDA error as an int, 0 if none.
    int *a = nullptr;
    cudaError_t err = cudaMallocManaged(&a, (size_t)n * sizeof(int));
    if (err != cudaSuccess) return (int)err;
    for (long long i = 0; i < n; ++i) a[i] = host[i];
    square_int32_kernel<<<(unsigned)cdiv(n, threads), threads>>>(a, n);
    err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err == cudaSuccess)
        for (long long i = 0; i < n; ++i) host[i] = a[i];
    const cudaError_t ferr = cudaFree(a);
    return (int)(err != cudaSuccess ? err : ferr);
// EXERCISE square: stub (void)host; (void)n; (void)threads; return 0;
// EXERCISE square: end
}
