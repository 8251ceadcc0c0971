// build/bin/reduction: the sum of N float32 on the GPU, checked on the host.
//
//   reduction [N] [--variant V] [--seed S] [--reps R]     defaults: N=1000003, 04_grid_stride
//
// x is drawn in [-1, 1) from the seed. The host adds it in double (exact enough to be the truth: a
// float32 has 24 bits, a double 53) and the check allows what float32 arithmetic can lose along the
// variant's longest chain of D additions: |sum - exact| <= gamma_D * sum|x|, gamma_D = D u / (1 - D u),
// u = 2^-24 (reduction_chain gives D). Where D u >= 1 (01 past 2^24 elements) float32 promises nothing and
// the line says bound=inf. Ends with
//   result program=reduction variant=V n=N ms=... sum=... ref=... err=... bound=... check=pass|fail
// and exits 0 only when the check passed (2 for bad arguments, 1 for a CUDA error or a failed check).
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "reduction.h"
#include "check.cuh"
#include "cli.cuh"

static const char *kUsage = "usage: reduction [N] [--variant V] [--seed S] [--reps R]";

int main(int argc, char **argv) {
    long long n = 1000003;
    const char *variant = "04_grid_stride";
    unsigned long long seed = 0;
    int reps = 5;
    const char *pos[1] = {nullptr};
    int npos = 0;
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(arg, "--seed") == 0) {
            seed = cudalab_parse_seed(cudalab_option_value(argc, argv, &i, kUsage));
        } else if (strcmp(arg, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--reps");
        } else {
            cudalab_take_positional(arg, pos, &npos, 1, kUsage);
        }
    }
    if (npos > 0) n = cudalab_parse_range(pos[0], "N", 1, reduction_max_n(), kUsage);
    if (cudalab_name_index(reduction_variant_count, reduction_variant_name, variant) < 0)
        CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: %s)\n%s", variant,
                            cudalab_name_list(reduction_variant_count, reduction_variant_name).c_str(), kUsage);

    std::vector<float> x(n);
    CudalabRng rng(seed);
    double exact = 0.0, magnitude = 0.0;
    for (long long i = 0; i < n; ++i) {
        x[i] = rng.uniform();
        exact += x[i];
        magnitude += std::fabs((double)x[i]);
    }
    const size_t bytes = (size_t)n * sizeof(float);
    const size_t scratch_bytes = (size_t)reduction_scratch_floats() * sizeof(float);
    float *dx = nullptr, *dout = nullptr, *dscratch = nullptr;
    CUDA_CHECK(cudaMalloc(&dx, bytes));
    CUDA_CHECK(cudaMalloc(&dout, sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dscratch, scratch_bytes));
    CUDA_CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dout, 0xFF, sizeof(float)));  // NaN: a result never written fails the check
    const double ms =
        cudalab_median_ms([&] { return reduction_sum_f32_dev(variant, dx, n, dout, dscratch, nullptr); }, reps);
    float sum = 0.0f;
    CUDA_CHECK(cudaMemcpy(&sum, dout, sizeof(float), cudaMemcpyDeviceToHost));
    long long blocks = 0;
    int threads = 0;
    CUDA_CHECK((cudaError_t)reduction_plan(variant, n, &blocks, &threads));
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(dout));
    CUDA_CHECK(cudaFree(dscratch));

    // The host's double sum is itself off by at most n * 2^-53 * sum|x|: added to the allowance.
    const double u = std::ldexp(1.0, -24);
    const double d = (double)reduction_chain(variant, n, blocks, threads);
    const double bound = d * u < 1.0 ? d * u / (1.0 - d * u) * magnitude + (double)n * std::ldexp(1.0, -53) * magnitude
                                     : INFINITY;
    const double err = std::fabs((double)sum - exact);
    const bool pass = err <= bound;  // false for NaN
    if (!pass)
        fprintf(stderr, "check failed: sum %.9g, expected %.9g: off by %.3g, allowed %.3g\n", (double)sum, exact, err,
                bound);
    printf("result program=reduction variant=%s n=%lld ms=%.4f sum=%.9g ref=%.9g err=%.3g bound=%.3g check=%s\n",
           variant, n, ms, (double)sum, exact, err, bound, pass ? "pass" : "fail");
    return pass ? 0 : 1;
}
