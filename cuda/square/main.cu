// build/bin/square: the course's managed-memory solution (section 2.10).
//
//   square [N [THREADS]] [--print K]
//
// Fills a[i] = i + 1 on the host (1..N, like square_cpu), squares it on the GPU with one thread per
// element, synchronises, and checks every element on the host. Ends with
//   result program=square variant=managed_int32 n=N threads=T blocks=B kernel_ms=... mismatches=M check=pass|fail
// and exits 0 only when the check passed (2 for bad arguments, 1 for a CUDA error or a failed check).
//
// The fault build alone (-DCUDALAB_FAULTS: `make FAULTS=1 build/faults/bin/square`) takes two more
// flags, so that the checks around this program can be shown to work; the product refuses them as unknown:
//   --skip-every K  the kernel leaves every K-th element unsquared: the host check must fail (exit 1).
//   --oob           the kernel's guard lets one thread write one element past the end of the
//                   allocation: a planted bug for compute-sanitizer memcheck, which must report it.
//                   Without the sanitizer the stray write usually lands in the page the allocation
//                   was rounded up to and the check still passes; when N*4 bytes is a whole number
//                   of pages it may instead fault. Never use it outside that test.
#include <climits>
#include <cstdlib>
#include <cstring>

#include "square.h"
#include "check.cuh"
#include "cli.cuh"

#ifdef CUDALAB_FAULTS
extern "C" int square_int32_test_dev(int *d_a, long long n, int threads, int skip_every, int oob, void *stream);

static const char *kUsage = "usage: square [N [THREADS]] [--print K] [--skip-every K] [--oob]";
#else
static const char *kUsage = "usage: square [N [THREADS]] [--print K]";
#endif

// What the kernel must have produced from a[i] = i + 1, computed independently of it (64-bit
// product reduced modulo 2^32, i.e. numpy int32's wrap-around).
static int expected(long long i) {
    long long v = i + 1;
    return (int)(unsigned)((unsigned long long)(v * v) & 0xffffffffULL);
}

// The value of the option at argv[*i] (which moves past it): a positive integer.
static long long positive_option(int argc, char **argv, int *i) {
    const char *opt = argv[*i];
    long long v = cudalab_parse_int(cudalab_option_value(argc, argv, i, kUsage), opt, kUsage);
    if (v <= 0) CUDALAB_USAGE_ERROR("%s must be positive, got %lld", opt, v);
    return v;
}

int main(int argc, char **argv) {
    long long n = 100000, threads = 256, print_rows = 0;
#ifdef CUDALAB_FAULTS
    long long skip_every = 0;
    bool oob = false;
#endif
    const char *pos[2];  // N, THREADS
    int npos = 0;
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (strcmp(a, "--print") == 0) {
            print_rows = positive_option(argc, argv, &i);
#ifdef CUDALAB_FAULTS
        } else if (strcmp(a, "--skip-every") == 0) {
            skip_every = positive_option(argc, argv, &i);
        } else if (strcmp(a, "--oob") == 0) {
            oob = true;
#endif
        } else {
            cudalab_take_positional(a, pos, &npos, 2, kUsage);
        }
    }
    if (npos > 0) n = cudalab_parse_int(pos[0], "N", kUsage);
    if (npos > 1) threads = cudalab_parse_int(pos[1], "THREADS", kUsage);
    if (n <= 0) CUDALAB_USAGE_ERROR("N must be a positive number of elements, got %lld", n);
    if (n > INT_MAX) CUDALAB_USAGE_ERROR("N must be at most %d (the values 1..N are int), got %lld", INT_MAX, n);
    if (threads <= 0) CUDALAB_USAGE_ERROR("THREADS must be a positive number of threads per block, got %lld", threads);
    if (threads > INT_MAX) CUDALAB_USAGE_ERROR("THREADS must be at most %d, got %lld", INT_MAX, threads);
#ifdef CUDALAB_FAULTS
    if (skip_every > INT_MAX) CUDALAB_USAGE_ERROR("--skip-every must be at most %d", INT_MAX);
#endif

    cudalab_check_launch_shape(0, threads);  // the grid is cdiv(N, THREADS), sized by the program

    // Managed memory: one pointer valid on the host and the device; pages migrate on first touch.
    // Exactly n ints, the amount this run needs.
    int *a = nullptr;
    CUDA_CHECK(cudaMallocManaged(&a, (size_t)n * sizeof(int)));
    for (long long i = 0; i < n; ++i) a[i] = (int)(i + 1);

    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start));
#ifdef CUDALAB_FAULTS
    CUDA_CHECK((cudaError_t)square_int32_test_dev(a, n, (int)threads, (int)skip_every, oob ? 1 : 0, nullptr));
#else
    CUDA_CHECK((cudaError_t)square_int32_dev(a, n, (int)threads, nullptr));
#endif
    CUDA_CHECK(cudaEventRecord(stop));
    // The host may not read managed memory the kernel is still writing: wait for it.
    CUDA_CHECK(cudaDeviceSynchronize());
    float kernel_ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&kernel_ms, start, stop));

    long long mismatches = 0, first_bad = -1;
    for (long long i = 0; i < n; ++i) {
        if (a[i] != expected(i)) {
            if (first_bad < 0) first_bad = i;
            ++mismatches;
        }
    }
    if (print_rows > 0) {
        printf("%12s -> %12s\n", "Original", "Squared");
        for (long long i = 0; i < n && i < print_rows; ++i) printf("%12lld -> %12d\n", i + 1, a[i]);
    }
    if (first_bad >= 0)
        fprintf(stderr, "check failed: %lld element(s) wrong, first at index %lld: got %d, expected %d\n", mismatches,
                first_bad, a[first_bad], expected(first_bad));

    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaFree(a));

#ifdef CUDALAB_FAULTS
    const char *test_only = oob ? " test_only=oob" : (skip_every ? " test_only=skip_every" : "");
#else
    const char *test_only = "";
#endif
    printf("result program=square variant=managed_int32 n=%lld threads=%lld blocks=%lld kernel_ms=%.4f mismatches=%lld%s "
           "check=%s\n",
           n, threads, cdiv(n, threads), kernel_ms, mismatches, test_only, mismatches == 0 ? "pass" : "fail");
    return mismatches == 0 ? 0 : 1;
}
