// build/bin/reduction: out = a * x + y on the GPU, checked on the host.
//
//   reduction [N] [--variant V] [--a A] [--seed S] [--reps R]     defaults: N=1000003, 01_grid_stride, a=2
//
// x and y are drawn in [-1, 1) from the seed; every element of out is compared with the host's own
// a * x + y (a float32 fused multiply-add may round once where the host rounds twice: the tolerance
// is a few units in the last place). Ends with
//   result program=reduction variant=V n=N ms=... max_err=... check=pass|fail
// and exits 0 only when the check passed (2 for bad arguments, 1 for a CUDA error or a failed check).
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "reduction.h"
#include "check.cuh"
#include "cli.cuh"

static const char *kUsage = "usage: reduction [N] [--variant V] [--a A] [--seed S] [--reps R]";

int main(int argc, char **argv) {
    long long n = 1000003;
    const char *variant = "01_grid_stride";
    double a = 2.0;
    unsigned long long seed = 0;
    int reps = 5;
    const char *pos[1];
    int npos = 0;
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(arg, "--a") == 0) {
            a = cudalab_parse_double(cudalab_option_value(argc, argv, &i, kUsage), "--a");
        } else if (strcmp(arg, "--seed") == 0) {
            seed = cudalab_parse_seed(cudalab_option_value(argc, argv, &i, kUsage));
        } else if (strcmp(arg, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--reps");
        } else {
            cudalab_take_positional(arg, pos, &npos, 1, kUsage);
        }
    }
    if (npos > 0) n = cudalab_parse_range(pos[0], "N", 1, INT_MAX, kUsage);
    bool known = false;
    for (int v = 0; v < reduction_variant_count(); ++v) known = known || strcmp(variant, reduction_variant_name(v)) == 0;
    if (!known) CUDALAB_USAGE_ERROR("unknown variant '%s'\n%s", variant, kUsage);

    std::vector<float> x(n), y(n), out(n);
    CudalabRng rng(seed);
    for (long long i = 0; i < n; ++i) {
        x[i] = rng.uniform();
        y[i] = rng.uniform();
    }
    const size_t bytes = (size_t)n * sizeof(float);
    float *dx = nullptr, *dy = nullptr, *dout = nullptr;
    CUDA_CHECK(cudaMalloc(&dx, bytes));
    CUDA_CHECK(cudaMalloc(&dy, bytes));
    CUDA_CHECK(cudaMalloc(&dout, bytes));
    CUDA_CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dout, 0xFF, bytes));  // NaN: an element the kernel never writes fails the check
    const double ms = cudalab_median_ms(
        [&] { return reduction_f32_dev(variant, (float)a, dx, dy, dout, n, 0, 0, nullptr); }, reps);
    CUDA_CHECK(cudaMemcpy(out.data(), dout, bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(dy));
    CUDA_CHECK(cudaFree(dout));

    double max_err = 0.0;
    long long bad = 0, first_bad = -1;
    for (long long i = 0; i < n; ++i) {
        const double want = (double)(float)a * x[i] + y[i];
        const double err = std::fabs((double)out[i] - want);
        // |a x| + |y| bounds the size of the terms: 4 units in float32's last place of it.
        const double tol = 4.0 * 5.96e-8 * (std::fabs((double)(float)a * x[i]) + std::fabs((double)y[i])) + 1e-30;
        if (!(err <= tol)) {
            if (first_bad < 0) first_bad = i;
            ++bad;
        }
        if (err > max_err || std::isnan(err)) max_err = std::isnan(err) ? INFINITY : err;
    }
    if (first_bad >= 0)
        fprintf(stderr, "check failed: %lld element(s) wrong, first at index %lld: got %g, expected %g\n", bad,
                first_bad, out[first_bad], (double)(float)a * x[first_bad] + y[first_bad]);
    printf("result program=reduction variant=%s n=%lld ms=%.4f max_err=%.3g check=%s\n", variant, n, ms, max_err,
           bad == 0 ? "pass" : "fail");
    return bad == 0 ? 0 : 1;
}
