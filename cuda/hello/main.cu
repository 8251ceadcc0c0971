// build/bin/hello: hello from the CPU and the GPU, and the launch shapes.
//   hello cpu | gpu | ints | shapes | loop [BLOCKS THREADS] | all
#include <cstring>
#include <cstdlib>

#include "hello.h"
#include "check.cuh"
#include "cli.cuh"

static void usage() {
    CUDALAB_USAGE_ERROR("usage: hello cpu | gpu | ints | shapes | loop [BLOCKS THREADS] | all");
}

static void run_loop(int blocks, int threads) {
    int max_threads = 0, max_grid = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerBlock, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&max_grid, cudaDevAttrMaxGridDimX, 0));
    // Check the shape before launching: an oversized block is a launch error the user should see
    // as a sentence, not as cudaErrorInvalidConfiguration after the fact.
    if (threads > max_threads)
        CUDALAB_USAGE_ERROR("THREADS=%d is more threads per block than this device allows (%d)", threads,
                            max_threads);
    if (blocks > max_grid) CUDALAB_USAGE_ERROR("BLOCKS=%d exceeds the device's grid limit (%d)", blocks, max_grid);
    CUDA_CHECK((cudaError_t)hello_loop(blocks, threads));
}

int main(int argc, char **argv) {
    if (argc < 2) usage();
    const char *what = argv[1];
    bool all = strcmp(what, "all") == 0;
    bool known = all;
    if (all || strcmp(what, "cpu") == 0) {
        known = true;
        printf("hello kernel=cpu msg=\"Hello World from the CPU!\"\n");
        fflush(stdout);
    }
    if (all || strcmp(what, "gpu") == 0) {
        known = true;
        CUDA_CHECK((cudaError_t)hello_gpu());
    }
    if (all || strcmp(what, "ints") == 0) {
        known = true;
        CUDA_CHECK((cudaError_t)hello_ints());
    }
    if (all || strcmp(what, "shapes") == 0) {
        known = true;
        CUDA_CHECK((cudaError_t)hello_shapes());
    }
    if (all || strcmp(what, "loop") == 0) {
        known = true;
        int blocks = 2, threads = 5;  // the course's <<<2,5>>>
        if (!all && argc == 4) {
            blocks = cudalab_parse_positive(argv[2], "BLOCKS");
            threads = cudalab_parse_positive(argv[3], "THREADS");
        } else if (!all && argc != 2) {
            usage();
        }
        run_loop(blocks, threads);
    }
    if (!known) usage();
    return 0;
}
