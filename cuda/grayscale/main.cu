// build/bin/grayscale: convert a random H×W RGB image with one variant (or all), time it, and
// compare every byte with a CPU reference that uses the same pinned float32 arithmetic.
//   grayscale [--variant 01_1d|02_2d|03_vectorized|all] [--reps R] H W
// Prints `result program=grayscale variant=V h= w= ms= gbs= mismatches= check=pass|fail` per
// variant (GB/s counts 4 bytes a pixel: 3 read, 1 written); exit 0 only when every check passed.
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.cuh"
#include "cli.cuh"
#include "grayscale.h"

static const char *kUsage = "usage: grayscale [--variant 01_1d|02_2d|03_vectorized|all] [--reps R] H W";

// 02_2d's grid has one row of blocks per 16 image rows, and gridDim.y is limited.
static bool too_tall_for_2d(int h) { return cdiv(h, 16) > CUDALAB_MAX_GRID_YZ; }

// The reference: each product and sum its own statement, rounded to float32 (x86-64 has no FMA
// unless asked for with -mfma, so the host compiler cannot fuse them either).
static unsigned char grey_gold(unsigned char r, unsigned char g, unsigned char b) {
    volatile float pr = 0.2989f * (float)r, pg = 0.5870f * (float)g, pb = 0.1140f * (float)b;
    volatile float s = pr + pg;
    volatile float y = s + pb;
    return (unsigned char)y;
}

static bool run_variant(const char *variant, int reps, int h, int w, const std::vector<unsigned char> &x,
                        const std::vector<unsigned char> &gold, const unsigned char *dx, long long stride,
                        unsigned char *dout) {
    const size_t n = (size_t)h * w;
    // Poison the output so an unwritten pixel shows up as a mismatch.
    CUDA_CHECK(cudaMemset(dout, 0xAB, n));
    const double med =
        cudalab_median_ms([&] { return grayscale_device(variant, h, w, stride, dx, dout, nullptr); }, reps);
    std::vector<unsigned char> out(n);
    CUDA_CHECK(cudaMemcpy(out.data(), dout, n, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += out[i] != gold[i];
    (void)x;
    printf("result program=grayscale variant=%s h=%d w=%d ms=%.4f gbs=%.1f mismatches=%zu check=%s\n", variant, h, w,
           med, 4.0 * n / (med * 1e-3) / 1e9, bad, bad == 0 ? "pass" : "fail");
    fflush(stdout);
    return bad == 0;
}

int main(int argc, char **argv) {
    const char *variant = "03_vectorized";
    int reps = 5, npos = 0;
    const char *pos[2];
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(argv[i], "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--reps");
        } else {
            cudalab_take_positional(argv[i], pos, &npos, 2, kUsage);
        }
    }
    if (npos != 2) CUDALAB_USAGE_ERROR("H and W are needed\n%s", kUsage);
    const int h = cudalab_parse_positive(pos[0], "H"), w = cudalab_parse_positive(pos[1], "W");
    if ((long long)h * w > INT_MAX)
        CUDALAB_USAGE_ERROR("H*W must be at most %d pixels, got %lld", INT_MAX, (long long)h * w);
    const bool run_all = strcmp(variant, "all") == 0;
    if (!run_all && cudalab_name_index(grayscale_variant_count, grayscale_variant_name, variant) < 0)
        CUDALAB_USAGE_ERROR("unknown variant '%s' (%s, all)", variant,
                            cudalab_name_list(grayscale_variant_count, grayscale_variant_name).c_str());
    if (!run_all && strcmp(variant, "02_2d") == 0 && too_tall_for_2d(h))
        CUDALAB_USAGE_ERROR("H must be at most %d for 02_2d (16 rows a block, %d blocks), got %d",
                            16 * CUDALAB_MAX_GRID_YZ, CUDALAB_MAX_GRID_YZ, h);

    const size_t n = (size_t)h * w;
    std::vector<unsigned char> x(3 * n), gold(n);
    CudalabRng rng(0x2545F4914F6CDD1Dull);
    for (auto &v : x) v = rng.byte_lcg();
    for (size_t i = 0; i < n; ++i) gold[i] = grey_gold(x[i], x[i + n], x[i + 2 * n]);
    const long long stride = grayscale_aligned_stride(h, w);
    unsigned char *dx, *dout;
    CUDA_CHECK(cudaMalloc(&dx, (size_t)(3 * stride)));
    CUDA_CHECK(cudaMalloc(&dout, n));
    CUDA_CHECK(cudaMemcpy2D(dx, (size_t)stride, x.data(), n, n, 3, cudaMemcpyHostToDevice));
    bool pass = true;
    for (int i = 0; i < grayscale_variant_count(); ++i) {
        const char *v = grayscale_variant_name(i);
        if (!run_all && strcmp(v, variant) != 0) continue;
        if (strcmp(v, "02_2d") == 0 && too_tall_for_2d(h)) continue;  // only under `all`: said above otherwise
        pass = run_variant(v, reps, h, w, x, gold, dx, stride, dout) && pass;
    }
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(dout));
    return pass ? 0 : 1;
}
