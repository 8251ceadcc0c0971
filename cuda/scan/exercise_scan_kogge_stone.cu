// The fixed end of exercise scan_kogge_stone's CUDA file: the entry point(s) the check calls. `invoke exercise
// start scan_kogge_stone --track cuda` appends it to the learner's file; it is never compiled on its own.
// One launch of the tile kernel, as the lab's first pass launches it, without the totals and the pass across
// tiles: the check compares each tile's own scan, so a mistake shows in the tile it is made in.

// The check calls this with device memory: every tile of 1024 scanned on its own, one block of 1024 threads each.
extern "C" int exercise_run(const unsigned *x, unsigned *out, long long n, int exclusive, void *stream) {
    if (n <= 0) return 0;
    scan_01_kogge_stone<<<(unsigned)cdiv(n, kKoggeStoneThreads), kKoggeStoneThreads, 0, (cudaStream_t)stream>>>(
        x, out, n, exclusive, nullptr);
    return (int)cudaGetLastError();
}
