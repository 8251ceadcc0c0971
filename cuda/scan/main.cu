// build/bin/scan: a prefix sum of 32-bit integers on the GPU, checked on the host.
//
//   scan [N] [--variant V] [--exclusive] [--seed S] [--reps R]     defaults: N=1000003, 03_decoupled_lookback
//
// x is drawn over all of uint32 from the seed, so the running sums wrap modulo 2^32 many times: the
// check is exact (every element compared with the host's own running sum) and covers the wrap-around.
// Ends with
//   result program=scan variant=V n=N exclusive=0|1 ms=... gbps=... mismatches=M check=pass|fail
// and exits 0 only when the check passed (2 for bad arguments, 1 for a CUDA error or a failed check).
// gbps counts 8 bytes an element (x read, out written), from the quick ms printout.
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "scan.h"
#include "check.cuh"
#include "cli.cuh"

static const char *kUsage = "usage: scan [N] [--variant V] [--exclusive] [--seed S] [--reps R]";

int main(int argc, char **argv) {
    long long n = 1000003;
    const char *variant = "03_decoupled_lookback";
    int exclusive = 0;
    unsigned long long seed = 0;
    int reps = 5;
    const char *pos[1];
    int npos = 0;
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(arg, "--exclusive") == 0) {
            exclusive = 1;
        } else if (strcmp(arg, "--seed") == 0) {
            seed = cudalab_parse_seed(cudalab_option_value(argc, argv, &i, kUsage));
        } else if (strcmp(arg, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--reps");
        } else {
            cudalab_take_positional(arg, pos, &npos, 1, kUsage);
        }
    }
    if (npos > 0) n = cudalab_parse_range(pos[0], "N", 1, scan_max_n(), kUsage);
    if (cudalab_name_index(scan_variant_count, scan_variant_name, variant) < 0)
        CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: %s)\n%s", variant,
                            cudalab_name_list(scan_variant_count, scan_variant_name).c_str(), kUsage);

    std::vector<unsigned> x(n), out(n);
    CudalabRng rng(seed);
    for (long long i = 0; i < n; ++i) x[i] = (unsigned)(rng.next() >> 32);
    const size_t bytes = (size_t)n * sizeof(unsigned);
    const long long work_bytes = scan_workspace_bytes(variant, n);
    unsigned *dx = nullptr, *dout = nullptr;
    void *dwork = nullptr;
    CUDA_CHECK(cudaMalloc(&dx, bytes));
    CUDA_CHECK(cudaMalloc(&dout, bytes));
    CUDA_CHECK(cudaMalloc(&dwork, work_bytes > 0 ? (size_t)work_bytes : 1));
    CUDA_CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dout, 0xA5, bytes));  // a byte pattern: an element never written fails the check
    CUDA_CHECK(cudaMemset(dwork, 0xA5, work_bytes > 0 ? (size_t)work_bytes : 1));  // the launcher must clear it
    const double ms = cudalab_median_ms(
        [&] { return scan_u32_dev(variant, dx, dout, n, exclusive, dwork, work_bytes, nullptr); }, reps);
    CUDA_CHECK(cudaMemcpy(out.data(), dout, bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(dout));
    CUDA_CHECK(cudaFree(dwork));

    long long bad = 0, first_bad = -1;
    unsigned run = 0, want_first = 0;
    for (long long i = 0; i < n; ++i) {
        const unsigned before = run;
        run += x[i];  // unsigned: wraps modulo 2^32, as the GPU's sums do
        const unsigned want = exclusive ? before : run;
        if (out[i] != want) {
            if (first_bad < 0) {
                first_bad = i;
                want_first = want;
            }
            ++bad;
        }
    }
    if (first_bad >= 0)
        fprintf(stderr, "check failed: %lld element(s) wrong, first at index %lld: got %u, expected %u\n", bad,
                first_bad, out[first_bad], want_first);
    const double gbps = ms > 0 ? 8.0 * (double)n / (ms * 1e6) : 0.0;
    printf("result program=scan variant=%s n=%lld exclusive=%d ms=%.4f gbps=%.1f mismatches=%lld check=%s\n", variant,
           n, exclusive, ms, gbps, bad, bad == 0 ? "pass" : "fail");
    return bad == 0 ? 0 : 1;
}
