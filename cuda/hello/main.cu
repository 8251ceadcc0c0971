// build/bin/hello: hello from the CPU and the GPU, and the launch shapes.
//   hello cpu | gpu | ints | shapes | loop [BLOCKS THREADS] | all
#include <cstring>
#include <cstdlib>

#include "hello.h"
#include "check.cuh"
#include "cli.cuh"

static const char *kUsage = "usage: hello cpu | gpu | ints | shapes | loop [BLOCKS THREADS] | all";

static void usage() { CUDALAB_USAGE_ERROR("%s", kUsage); }

static void run_loop(int blocks, int threads) {
    cudalab_check_launch_shape(blocks, threads);
    CUDA_CHECK((cudaError_t)hello_loop(blocks, threads));
}

int main(int argc, char **argv) {
    cudalab_handle_help(argc, argv, kUsage);
    if (argc < 2) usage();
    const char *what = argv[1];
    bool all = strcmp(what, "all") == 0;
    // Only `loop` takes more arguments (BLOCKS THREADS); anything else after the word is refused.
    if (strcmp(what, "loop") != 0 && argc > 2) CUDALAB_USAGE_ERROR("unexpected argument '%s'\n%s", argv[2], kUsage);
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
            CUDALAB_USAGE_ERROR("loop takes BLOCKS and THREADS, both or neither\n%s", kUsage);
        }
        run_loop(blocks, threads);
    }
    if (!known) CUDALAB_USAGE_ERROR("unknown choice '%s'\n%s", what, kUsage);
    return 0;
}
