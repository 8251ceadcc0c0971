// build/bin/mandelbrot: render the escape-time counts, time the kernel, check against a CPU gold.
//   mandelbrot [--variant 01_naive|02_fast] [--dtype float32|float64] [--region X0 X1 Y0 Y1]
//              [--reps N] WIDTH HEIGHT MAX_ITERS
// Prints `result program=mandelbrot ... check=pass|fail` and exits 0 only when the check passed.
// The check recomputes a lattice of pixels on the CPU with the variant's exact arithmetic
// (IEEE-rounded steps for 01_naive, float32 fma for 02_fast) and demands equal counts.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mandelbrot.h"
#include "check.cuh"
#include "cli.cuh"

static const char *kUsage =
    "usage: mandelbrot [--variant 01_naive|02_fast] [--dtype float32|float64] [--region X0 X1 Y0 Y1] "
    "[--reps N] WIDTH HEIGHT MAX_ITERS";

// CPU gold for one pixel, in the variant's arithmetic. x86-64 host code has no FMA unless asked
// for, so a*b + c below rounds twice, as the GPU's __fmul_rn/__fadd_rn do; std::fma rounds once.
template <typename T>
static uint32_t gold_naive(T x0, T sx, T y0, T sy, int col, int row, int width, int height, int max_iters) {
    const T cr = sx * (T)col / (T)width + x0;
    const T ci = sy * (T)row / (T)height + y0;
    T x = 0, y = 0;
    int n = 0;
    while (n < max_iters) {
        const T xx = x * x, yy = y * y;
        if (xx + yy > (T)4) break;
        const T xy = x * y;
        y = (xy + xy) + ci;
        x = (xx - yy) + cr;
        ++n;
    }
    return (uint32_t)n;
}

static bool gold_inside(float x, float y) { return std::fma(x, x, y * y) <= 4.0f; }
static void gold_step(float &x, float &y, float cr, float ci) {
    const float t = std::fma(-y, y, cr);
    y = std::fma(x + x, y, ci);
    x = std::fma(x, x, t);
}

static uint32_t gold_fast(float x0, float sx, float y0, float sy, int col, int row, int width, int height,
                          int max_iters, int unroll) {
    const float cr = sx * (float)col / (float)width + x0;
    const float ci = sy * (float)row / (float)height + y0;
    float x = 0, y = 0;
    int n = 0;
    while (n <= max_iters - unroll) {
        const float bx = x, by = y;
        for (int k = 0; k < unroll; ++k) gold_step(x, y, cr, ci);
        if (!gold_inside(x, y)) {
            x = bx;
            y = by;
            break;
        }
        n += unroll;
    }
    while (n < max_iters && gold_inside(x, y)) {
        gold_step(x, y, cr, ci);
        ++n;
    }
    return (uint32_t)n;
}

int main(int argc, char **argv) {
    const char *variant = "01_naive";
    int dtype_bits = 32, reps = 3;
    double x0 = -2.0, x1 = 1.0, y0 = -1.5, y1 = 1.5;
    const char *pos[3];
    int npos = 0;
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (strcmp(a, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(a, "--dtype") == 0) {
            const char *d = cudalab_option_value(argc, argv, &i, kUsage);
            if (strcmp(d, "float32") == 0) dtype_bits = 32;
            else if (strcmp(d, "float64") == 0) dtype_bits = 64;
            else CUDALAB_USAGE_ERROR("--dtype must be float32 or float64, got '%s'", d);
        } else if (strcmp(a, "--region") == 0) {
            if (i + 4 >= argc) CUDALAB_USAGE_ERROR("--region needs four numbers X0 X1 Y0 Y1\n%s", kUsage);
            x0 = cudalab_parse_double(argv[++i], "X0");
            x1 = cudalab_parse_double(argv[++i], "X1");
            y0 = cudalab_parse_double(argv[++i], "Y0");
            y1 = cudalab_parse_double(argv[++i], "Y1");
        } else if (strcmp(a, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--reps");
        } else {
            cudalab_take_positional(a, pos, &npos, 3, kUsage);
        }
    }
    if (npos != 3) CUDALAB_USAGE_ERROR("WIDTH, HEIGHT and MAX_ITERS are needed\n%s", kUsage);
    const int max_edge = mandelbrot_max_edge();
    const int width = (int)cudalab_parse_range(pos[0], "WIDTH", 1, max_edge);
    const int height = (int)cudalab_parse_range(pos[1], "HEIGHT", 1, max_edge);
    const int max_iters = cudalab_parse_positive(pos[2], "MAX_ITERS");
    if (cudalab_name_index(mandelbrot_variant_count, mandelbrot_variant_name, variant) < 0)
        CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: %s)", variant,
                            cudalab_name_list(mandelbrot_variant_count, mandelbrot_variant_name).c_str());
    if (strcmp(variant, "02_fast") == 0 && dtype_bits != 32) CUDALAB_USAGE_ERROR("02_fast is float32 only");
    if (!(x1 > x0) || !(y1 > y0)) CUDALAB_USAGE_ERROR("empty region: need X0 < X1 and Y0 < Y1");

    const size_t npix = (size_t)width * height;
    uint32_t *d_out = nullptr;
    CUDA_CHECK(cudaMalloc(&d_out, npix * sizeof(uint32_t)));
    const double ms = cudalab_median_ms(
        [&] {
            return mandelbrot_render_device(variant, dtype_bits, width, height, max_iters, x0, x1, y0, y1, d_out,
                                            nullptr);
        },
        reps);
    std::vector<uint32_t> img(npix);
    CUDA_CHECK(cudaMemcpy(img.data(), d_out, npix * sizeof(uint32_t), cudaMemcpyDeviceToHost));

    unsigned long long total = 0;
    for (size_t i = 0; i < npix; ++i) total += img[i];
    // Check every pixel of a small image, a lattice of about 2^16 pixels of a large one.
    const int stride_r = height * (long long)width <= (1 << 18) ? 1 : (int)cdiv(height, 256);
    const int stride_c = height * (long long)width <= (1 << 18) ? 1 : (int)cdiv(width, 256);
    const int unroll = mandelbrot_fast_unroll();
    const float fx0 = (float)x0, fy0 = (float)y0, fsx = (float)x1 - fx0, fsy = (float)y1 - fy0;
    long long checked = 0, mismatches = 0;
    for (int r = 0; r < height; r += stride_r) {
        for (int c = 0; c < width; c += stride_c) {
            uint32_t want;
            if (strcmp(variant, "02_fast") == 0)
                want = gold_fast(fx0, fsx, fy0, fsy, c, r, width, height, max_iters, unroll);
            else if (dtype_bits == 32)
                want = gold_naive<float>(fx0, fsx, fy0, fsy, c, r, width, height, max_iters);
            else
                want = gold_naive<double>(x0, x1 - x0, y0, y1 - y0, c, r, width, height, max_iters);
            ++checked;
            if (img[(size_t)r * width + c] != want) {
                if (mismatches < 5)
                    fprintf(stderr, "mismatch at row %d col %d: gpu %u, cpu %u\n", r, c, img[(size_t)r * width + c],
                            want);
                ++mismatches;
            }
        }
    }
    const bool pass = mismatches == 0;
    printf("result program=mandelbrot variant=%s dtype=%s width=%d height=%d max_iters=%d x0=%.17g x1=%.17g "
           "y0=%.17g y1=%.17g ms=%.4f iterations=%llu giter_s=%.2f checked=%lld mismatches=%lld check=%s\n",
           variant, dtype_bits == 32 ? "float32" : "float64", width, height, max_iters, x0, x1, y0, y1, ms, total,
           ms > 0 ? total / (ms * 1e-3) / 1e9 : 0.0, checked, mismatches, pass ? "pass" : "fail");
    CUDA_CHECK(cudaFree(d_out));
    return pass ? 0 : 1;
}
