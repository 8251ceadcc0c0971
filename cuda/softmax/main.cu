// build/bin/softmax: row-wise softmax of a random rows x cols float32 matrix on the GPU, checked on the host.
//
//   softmax [ROWS] [COLS] [--variant V|all] [--scale S] [--span A] [--seed SEED] [--reps R]
//   defaults: ROWS=4096, COLS=4096, 05_fused_scale, scale 1, span 10
//
// x is drawn uniformly in [-A, A) from the seed (--span 1000: scores whose exp would overflow float32
// without the max subtracted). --scale is 05_fused_scale's (softmax(scale * x)); the other variants
// compute softmax(x). Every row is compared with the host's own softmax in double: ||out - ref|| / ||ref||
// at most TOL, which is 1e-5, or 2e-9 per column for 01_naive, whose one running sum of the whole row
// rounds more the longer the row. Ends with one line per variant
//   result program=softmax variant=V rows=R cols=C scale=S ms=... max_row_err=... check=pass|fail
// and exits 0 only when every check passed (2 for bad arguments, 1 for a CUDA error or a failed check).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.cuh"
#include "softmax.h"

static const char *kUsage =
    "usage: softmax [ROWS] [COLS] [--variant V|all] [--scale S] [--span A] [--seed SEED] [--reps R]";

// The host's softmax of one row in double, with the same scale.
static void host_row(const float *x, double *ref, long long cols, double scale) {
    double m = -INFINITY, sum = 0.0;
    for (long long c = 0; c < cols; ++c) m = std::max(m, scale * x[c]);
    for (long long c = 0; c < cols; ++c) sum += ref[c] = std::exp(scale * x[c] - m);
    for (long long c = 0; c < cols; ++c) ref[c] /= sum;
}

int main(int argc, char **argv) {
    long long rows = 4096, cols = 4096;
    const char *variant = "05_fused_scale";
    double scale = 1.0, span = 10.0;
    bool scale_given = false;
    unsigned long long seed = 0;
    int reps = 5;
    const char *pos[2];
    int npos = 0;
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(arg, "--scale") == 0) {
            scale = cudalab_parse_double(cudalab_option_value(argc, argv, &i, kUsage), "--scale");
            scale_given = true;
        } else if (strcmp(arg, "--span") == 0) {
            span = cudalab_parse_double(cudalab_option_value(argc, argv, &i, kUsage), "--span");
            if (!(span > 0.0 && span <= 1e30)) CUDALAB_USAGE_ERROR("--span must be in (0, 1e30], got %g", span);
        } else if (strcmp(arg, "--seed") == 0) {
            seed = cudalab_parse_seed(cudalab_option_value(argc, argv, &i, kUsage));
        } else if (strcmp(arg, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--reps");
        } else {
            cudalab_take_positional(arg, pos, &npos, 2, kUsage);
        }
    }
    if (npos > 0) rows = cudalab_parse_range(pos[0], "ROWS", 1, INT_MAX, kUsage);
    if (npos > 1) cols = cudalab_parse_range(pos[1], "COLS", 1, INT_MAX, kUsage);
    // The host holds x, out and a double reference row: refuse what would not fit a 32-bit count of
    // floats rather than fail in an allocation halfway.
    if (rows * cols > (long long)INT_MAX)
        CUDALAB_USAGE_ERROR("ROWS * COLS must be at most %d, got %lld\n%s", INT_MAX, rows * cols, kUsage);
    const bool all = strcmp(variant, "all") == 0;
    if (!all && cudalab_name_index(softmax_variant_count, softmax_variant_name, variant) < 0)
        CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: %s, all)\n%s", variant,
                            cudalab_name_list(softmax_variant_count, softmax_variant_name).c_str(), kUsage);
    if (scale_given && (all || strcmp(variant, "05_fused_scale") != 0))
        CUDALAB_USAGE_ERROR("--scale is 05_fused_scale's: the other variants compute softmax(x)\n%s", kUsage);
    if (std::fabs(scale) > 3.0e38) CUDALAB_USAGE_ERROR("--scale must fit a float, got %g", scale);

    const long long n = rows * cols;
    std::vector<float> x(n), out(n);
    CudalabRng rng(seed);
    for (long long i = 0; i < n; ++i) x[i] = (float)(span * rng.uniform());
    const size_t bytes = (size_t)n * sizeof(float);
    float *dx = nullptr, *dout = nullptr;
    CUDA_CHECK(cudaMalloc(&dx, bytes));
    CUDA_CHECK(cudaMalloc(&dout, bytes));
    CUDA_CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));

    std::vector<double> ref(cols);
    bool all_pass = true;
    for (int v = 0; v < softmax_variant_count(); ++v) {
        const char *name = softmax_variant_name(v);
        if (!all && strcmp(name, variant) != 0) continue;
        CUDA_CHECK(cudaMemset(dout, 0xFF, bytes));  // NaN: an element the kernel never writes fails the check
        const double ms = cudalab_median_ms(
            [&] { return softmax_f32_dev(name, dx, dout, rows, cols, (float)scale, nullptr); }, reps);
        CUDA_CHECK(cudaMemcpy(out.data(), dout, bytes, cudaMemcpyDeviceToHost));

        const double tol = strcmp(name, "01_naive") == 0 ? std::max(1e-5, 2e-9 * (double)cols) : 1e-5;
        double max_err = 0.0;
        long long bad = 0, first_bad = -1;
        for (long long r = 0; r < rows; ++r) {
            host_row(&x[r * cols], ref.data(), cols, (double)(float)scale);
            // Each row's ||out - ref|| / ||ref||, the tests' measure; a NaN anywhere (an unwritten
            // element) makes the row's error NaN, which fails the comparison below.
            double num = 0.0, den = 0.0;
            for (long long c = 0; c < cols; ++c) {
                const double e = (double)out[r * cols + c] - ref[c];
                num += e * e;
                den += ref[c] * ref[c];
            }
            const double err = std::sqrt(num / den);
            if (!(err <= tol)) {
                if (first_bad < 0) first_bad = r;
                ++bad;
            }
            if (!(err <= max_err)) max_err = std::isnan(err) ? INFINITY : err;
        }
        if (first_bad >= 0)
            fprintf(stderr, "%s: check failed: %lld row(s) off by more than %g relative, the first is row %lld\n", name,
                    bad, tol, first_bad);
        printf("result program=softmax variant=%s rows=%lld cols=%lld scale=%g ms=%.4f max_row_err=%.3g check=%s\n",
               name, rows, cols, (double)(float)scale, ms, max_err, bad == 0 ? "pass" : "fail");
        all_pass = all_pass && bad == 0;
    }
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(dout));
    return all_pass ? 0 : 1;
}
