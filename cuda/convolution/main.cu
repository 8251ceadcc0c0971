// build/bin/convolution: one variant on random data, checked on the host.
//
//   convolution [N | H W] [--variant V] [--radius R] [--seed S] [--reps K]
//
// A 1-D variant takes N (default 1000003); a 2-D variant takes H W (default 1023 2047), or N for an
// N x N image. --radius defaults to the largest the variant's dimension accepts (8 in 1-D, 4 in 2-D).
// Input and filter are drawn in [-1, 1) from the seed (an asymmetric filter: a flipped filter fails).
// Every output is compared with the host's own sum in double, with zero padding. Ends with
//   result program=convolution variant=V dims=D n=... h=... w=... r=R ms=... max_err=... check=pass|fail
// and exits 0 only when the check passed (2 for bad arguments, 1 for a CUDA error or a failed check).
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.cuh"
#include "cli.cuh"
#include "convolution.h"

static const char *kUsage = "usage: convolution [N | H W] [--variant V] [--radius R] [--seed S] [--reps K]";

int main(int argc, char **argv) {
    const char *variant = "03_tiled_1d";
    long long radius = 0;
    bool radius_given = false;
    unsigned long long seed = 0;
    int reps = 5;
    const char *pos[2];
    int npos = 0;
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(arg, "--radius") == 0) {
            radius = cudalab_parse_int(cudalab_option_value(argc, argv, &i, kUsage), "--radius");
            radius_given = true;
        } else if (strcmp(arg, "--seed") == 0) {
            seed = cudalab_parse_seed(cudalab_option_value(argc, argv, &i, kUsage));
        } else if (strcmp(arg, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--reps");
        } else {
            cudalab_take_positional(arg, pos, &npos, 2, kUsage);
        }
    }
    const int vi = cudalab_name_index(convolution_variant_count, convolution_variant_name, variant);
    if (vi < 0)
        CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: %s)\n%s", variant,
                            cudalab_name_list(convolution_variant_count, convolution_variant_name).c_str(), kUsage);
    const int dims = convolution_variant_dims(vi);
    const int max_r = convolution_max_radius(dims);
    if (radius < 0) CUDALAB_USAGE_ERROR("--radius must be at least 0, got %lld", radius);
    if (radius > max_r) CUDALAB_USAGE_ERROR("--radius must be at most %d for a %d-D variant, got %lld", max_r, dims, radius);
    const int r = radius_given ? (int)radius : max_r;

    long long n = 1000003, h = 1, w = 1;
    if (dims == 1) {
        if (npos > 1) CUDALAB_USAGE_ERROR("a 1-D variant takes one size N, got two\n%s", kUsage);
        if (npos == 1) n = cudalab_parse_range(pos[0], "N", 1, convolution_max_n(), kUsage);
        w = n;
    } else {
        h = 1023;
        w = 2047;
        if (npos >= 1) h = cudalab_parse_range(pos[0], npos == 2 ? "H" : "N", 1, convolution_max_height(), kUsage);
        if (npos == 2) w = cudalab_parse_range(pos[1], "W", 1, convolution_max_width(), kUsage);
        if (npos == 1) w = cudalab_parse_range(pos[0], "N", 1, convolution_max_width(), kUsage);
        n = h * w;
    }

    const int side = 2 * r + 1;
    const int ntaps = dims == 1 ? side : side * side;
    std::vector<float> x(n), f(ntaps), out(n);
    CudalabRng rng(seed);
    for (long long i = 0; i < n; ++i) x[i] = rng.uniform();
    for (int j = 0; j < ntaps; ++j) f[j] = rng.uniform();

    const size_t bytes = (size_t)n * sizeof(float);
    float *dx = nullptr, *df = nullptr, *dout = nullptr;
    CUDA_CHECK(cudaMalloc(&dx, bytes));
    CUDA_CHECK(cudaMalloc(&df, ntaps * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dout, bytes));
    CUDA_CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(df, f.data(), ntaps * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK((cudaError_t)convolution_set_filter(dims, f.data(), r));
    CUDA_CHECK(cudaMemset(dout, 0xFF, bytes));  // NaN: an output the kernel never writes fails the check
    const double ms = cudalab_median_ms(
        [&] {
            return dims == 1 ? convolution_1d_f32_dev(variant, dx, n, df, r, dout, nullptr)
                             : convolution_2d_f32_dev(variant, dx, (int)h, (int)w, df, r, dout, nullptr);
        },
        reps);
    CUDA_CHECK(cudaMemcpy(out.data(), dout, bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(df));
    CUDA_CHECK(cudaFree(dout));

    // The host's sum in double, the same zero padding. A float32 sum of T products is within about
    // T units in the last place of sum |f * x| (each addition rounds once); 2 T leaves room for a fused
    // multiply-add ordering and is still far below any wrong tap or a flipped filter.
    double max_err = 0.0;
    long long bad = 0, first_bad = -1;
    double first_want = 0.0;
    for (long long p = 0; p < n; ++p) {
        const long long row = p / w, col = p % w;
        double want = 0.0, size = 0.0;
        for (int fy = 0; fy < (dims == 1 ? 1 : side); ++fy) {
            const long long y = dims == 1 ? 0 : row - r + fy;
            if (y < 0 || y >= h) continue;
            for (int fx = 0; fx < side; ++fx) {
                const long long c = col - r + fx;
                if (c < 0 || c >= w) continue;
                const double t = (double)f[fy * side + fx] * (double)x[y * w + c];
                want += t;
                size += std::fabs(t);
            }
        }
        const double err = std::fabs((double)out[p] - want);
        const double tol = 2.0 * ntaps * 5.96e-8 * size + 1e-30;
        if (!(err <= tol)) {
            if (first_bad < 0) first_bad = p, first_want = want;
            ++bad;
        }
        if (err > max_err || std::isnan(err)) max_err = std::isnan(err) ? INFINITY : err;
    }
    if (first_bad >= 0)
        fprintf(stderr, "check failed: %lld output(s) wrong, first at index %lld: got %g, expected %g\n", bad, first_bad,
                out[first_bad], first_want);
    printf("result program=convolution variant=%s dims=%d n=%lld h=%lld w=%lld r=%d ms=%.4f max_err=%.3g check=%s\n",
           variant, dims, n, h, w, r, ms, max_err, bad == 0 ? "pass" : "fail");
    return bad == 0 ? 0 : 1;
}
