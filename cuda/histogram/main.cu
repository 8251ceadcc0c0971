// build/bin/histogram: 256-bin counts of N random bytes on the GPU, checked on the host.
//
//   histogram [N] [--variant V|cub] [--input uniform|skewed] [--seed S] [--reps R]
//       defaults: N=1000003, 03_coarsened, uniform
//
// `--variant cub` runs the ceiling, CUB's DeviceHistogram::HistogramEven, through the same check, so
// that a profiler sees CUB's kernels beside ours (its temporary storage allocated before the timing).
//
// uniform: every byte drawn from 0..255; skewed: 90% of the bytes are 0 (a mostly black image: the
// contention case), the rest uniform. The host counts the same bytes and every one of the 256 bins must
// match exactly. Ends with
//   result program=histogram variant=V input=I n=N ms=... mismatches=K check=pass|fail
// and exits 0 only when the check passed (2 for bad arguments, 1 for a CUDA error or a failed check).
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.cuh"
#include "cli.cuh"
#include "histogram.h"

static const char *kUsage = "usage: histogram [N] [--variant V|cub] [--input uniform|skewed] [--seed S] [--reps R]";

int main(int argc, char **argv) {
    long long n = 1000003;
    const char *variant = "03_coarsened";
    const char *input = "uniform";
    unsigned long long seed = 0;
    int reps = 5;
    const char *pos[1];
    int npos = 0;
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(arg, "--input") == 0) {
            input = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(arg, "--seed") == 0) {
            seed = cudalab_parse_seed(cudalab_option_value(argc, argv, &i, kUsage));
        } else if (strcmp(arg, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--reps");
        } else {
            cudalab_take_positional(arg, pos, &npos, 1, kUsage);
        }
    }
    if (npos > 0) n = cudalab_parse_range(pos[0], "N", 1, INT_MAX, kUsage);
    const bool cub = strcmp(variant, "cub") == 0;
    if (!cub && cudalab_name_index(histogram_variant_count, histogram_variant_name, variant) < 0)
        CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: %s, cub)\n%s", variant,
                            cudalab_name_list(histogram_variant_count, histogram_variant_name).c_str(), kUsage);
    const bool skewed = strcmp(input, "skewed") == 0;
    if (!skewed && strcmp(input, "uniform") != 0)
        CUDALAB_USAGE_ERROR("--input must be uniform or skewed, got '%s'\n%s", input, kUsage);

    std::vector<unsigned char> in(n);
    std::vector<unsigned long long> want(256, 0);
    CudalabRng rng(seed);
    for (long long i = 0; i < n; ++i) {
        const uint64_t r = rng.next();
        // skewed: the top 24 bits pick "hot" 90% of the time; the low byte is the uniform value.
        const bool hot = skewed && (r >> 40) < (uint64_t)(0.9 * 16777216.0);
        in[i] = hot ? 0 : (unsigned char)(r & 0xFF);
        ++want[in[i]];
    }
    unsigned char *din = nullptr;
    unsigned int *dbins = nullptr;
    CUDA_CHECK(cudaMalloc(&din, (size_t)n));
    CUDA_CHECK(cudaMalloc(&dbins, 256 * sizeof(unsigned int)));
    CUDA_CHECK(cudaMemcpy(din, in.data(), (size_t)n, cudaMemcpyHostToDevice));
    // Poison: the entry point must zero the bins itself, or every count comes out wrong.
    CUDA_CHECK(cudaMemset(dbins, 0xFF, 256 * sizeof(unsigned int)));
    unsigned long long temp_bytes = 0;
    void *dtemp = nullptr;
    if (cub) {
        CUDA_CHECK((cudaError_t)histogram_cub_temp_bytes(n, &temp_bytes));
        CUDA_CHECK(cudaMalloc(&dtemp, temp_bytes > 0 ? temp_bytes : 1));
    }
    const double ms = cudalab_median_ms(
        [&] {
            return cub ? histogram_cub_u8_dev(din, n, dbins, dtemp, temp_bytes, nullptr)
                       : histogram_u8_dev(variant, din, n, dbins, 0, 0, nullptr);
        },
        reps);
    std::vector<unsigned int> got(256);
    CUDA_CHECK(cudaMemcpy(got.data(), dbins, 256 * sizeof(unsigned int), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(din));
    CUDA_CHECK(cudaFree(dbins));
    if (dtemp != nullptr) CUDA_CHECK(cudaFree(dtemp));

    int bad = 0, first_bad = -1;
    for (int b = 0; b < 256; ++b) {
        if ((unsigned long long)got[b] != want[b]) {
            if (first_bad < 0) first_bad = b;
            ++bad;
        }
    }
    if (first_bad >= 0)
        fprintf(stderr, "check failed: %d bin(s) wrong, first bin %d: got %u, expected %llu\n", bad, first_bad,
                got[first_bad], want[first_bad]);
    printf("result program=histogram variant=%s input=%s n=%lld ms=%.4f mismatches=%d check=%s\n", variant, input, n,
           ms, bad, bad == 0 ? "pass" : "fail");
    return bad == 0 ? 0 : 1;
}
