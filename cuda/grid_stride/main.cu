// build/bin/grid_stride: the course's grid-stride loop (sections 2.13-2.15).
//
//   grid_stride [N [BLOCKS THREADS]]        defaults: N=500, 8 blocks x 32 threads (the course's)
//
// a[i] = i on the host, then a[i] *= i on the GPU, one printed line per element:
//   Thread %d (Block %d, Thread in Block %d) processing element %d. Old value: %d, New value: %d
// then `All elements were squared? TRUE|FALSE` and
//   result program=grid_stride n=N blocks=B threads=T check=pass|fail
// Exit status: 0 when every element was squared, 1 when not (or on a CUDA error), 2 for bad argv.
#include <climits>
#include <cstdlib>

#include "grid_stride.h"
#include "check.cuh"
#include "cli.cuh"

static const char *kUsage = "usage: grid_stride [N [BLOCKS THREADS]]";

int main(int argc, char **argv) {
    long long n = 500, blocks = 8, threads = 32;
    cudalab_handle_help(argc, argv, kUsage);
    if (argc > 4) CUDALAB_USAGE_ERROR("unexpected argument '%s'\n%s", argv[4], kUsage);
    if (argc == 3) CUDALAB_USAGE_ERROR("BLOCKS and THREADS go together: give both or neither\n%s", kUsage);
    if (argc >= 2) n = cudalab_parse_int(argv[1], "N", kUsage);
    if (argc == 4) {
        blocks = cudalab_parse_int(argv[2], "BLOCKS", kUsage);
        threads = cudalab_parse_int(argv[3], "THREADS", kUsage);
    }
    if (n <= 0) CUDALAB_USAGE_ERROR("N must be a positive number of elements, got %lld", n);
    if (n > GRID_STRIDE_MAX_N)
        CUDALAB_USAGE_ERROR("N must be at most %d (each element prints a line of trace), got %lld", GRID_STRIDE_MAX_N, n);
    if (blocks <= 0) CUDALAB_USAGE_ERROR("BLOCKS must be a positive number of blocks, got %lld", blocks);
    if (threads <= 0) CUDALAB_USAGE_ERROR("THREADS must be a positive number of threads per block, got %lld", threads);

    cudalab_check_launch_shape(blocks, threads);
    if (blocks * threads > INT_MAX)
        CUDALAB_USAGE_ERROR("BLOCKS x THREADS = %lld threads: the kernel's int thread index allows at most %d",
                            blocks * threads, INT_MAX);

    int *a = nullptr;
    CUDA_CHECK(cudaMallocManaged(&a, (size_t)n * sizeof(int)));
    for (long long i = 0; i < n; ++i) a[i] = (int)i;

    // Host output written so far must leave before the device's lines, which are printed at sync.
    fflush(stdout);
    CUDA_CHECK((cudaError_t)grid_stride_square_dev(a, (int)n, (int)blocks, (int)threads, nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());

    bool ok = true;
    for (long long i = 0; i < n; ++i)
        if (a[i] != (int)(unsigned)(((unsigned long long)i * (unsigned long long)i) & 0xffffffffULL)) ok = false;
    CUDA_CHECK(cudaFree(a));

    printf("All elements were squared? %s\n", ok ? "TRUE" : "FALSE");
    printf("result program=grid_stride n=%lld blocks=%lld threads=%lld check=%s\n", n, blocks, threads,
           ok ? "pass" : "fail");
    return ok ? 0 : 1;
}
