// build/bin/matmul: time one variant (or all) on random M×K and K×N matrices and check the result.
//   matmul [--variant 01_naive|02_tiled|03_tiled_dynamic|cublas|all] [--tile T] [--reps R] M N K
// Prints `result program=matmul variant=V tile=T m= n= k= ms= tflops= relerr= check=pass|fail`
// per variant; exit 0 only when every check passed.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.cuh"
#include "cli.cuh"
#include "matmul.h"

static void usage() {
    CUDALAB_USAGE_ERROR("usage: matmul [--variant 01_naive|02_tiled|03_tiled_dynamic|cublas|all] [--tile T] "
                        "[--reps R] M N K");
}

// Uniform in [-1, 1), repeatable (cli.cuh says why this generator).
static void fill(std::vector<float> &v, unsigned seed) {
    CudalabRng rng(0x9E3779B97F4A7C15ull ^ seed);
    for (auto &x : v) x = rng.uniform_lcg();
}

// ||out - ref|| / ||ref|| over up to 4096 sampled entries, the reference in double. The full
// product is O(mnk) on the CPU (minutes at 4096³); a sample spread over the matrix still catches
// wrong indexing, unwritten tiles and ragged-edge mistakes, which touch whole rows or columns.
static double sampled_relerr(const std::vector<float> &A, const std::vector<float> &B, const std::vector<float> &C,
                             int m, int n, int k) {
    const long long total = (long long)m * n;
    const long long samples = std::min<long long>(total, 4096);
    double num = 0, den = 0;
    for (long long s = 0; s < samples; ++s) {
        // Stride through the matrix with a step coprime-ish to n so rows and columns both vary;
        // the last element (bottom-right, the most ragged) is always included.
        long long idx = samples == total ? s : (s == samples - 1 ? total - 1 : (s * 2654435761ll) % total);
        int i = (int)(idx / n), j = (int)(idx % n);
        double ref = 0;
        for (int p = 0; p < k; ++p) ref += (double)A[(size_t)i * k + p] * (double)B[(size_t)p * n + j];
        double d = (double)C[idx] - ref;
        num += d * d;
        den += ref * ref;
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

static bool run_variant(const char *variant, int tile, int reps, int m, int n, int k, const std::vector<float> &A,
                        const std::vector<float> &B, const float *dA, const float *dB, float *dC, bool run_all) {
    const int ok = matmul_check(variant, tile, 0);
    if (ok == (int)cudaErrorNotSupported) {
        if (!run_all) CUDALAB_USAGE_ERROR("variant cublas: this build has no cuBLAS (see `invoke doctor`)");
        printf("skip program=matmul variant=%s reason=\"built without cuBLAS\"\n", variant);
        return true;
    }
    if (ok == (int)cudaErrorInvalidConfiguration)
        CUDALAB_USAGE_ERROR("--tile %d: %d threads per block or its shared memory is more than this device allows",
                            tile, tile * tile);
    if (ok != 0) CUDALAB_USAGE_ERROR("--tile %d is not valid for variant %s (02_tiled takes 16 or 32)", tile, variant);

    std::vector<float> C((size_t)m * n);
    // Poison C so an element the kernel never writes cannot pass the check by accident.
    CUDA_CHECK(cudaMemset(dC, 0xFF, C.size() * sizeof(float)));
    const double med =
        cudalab_median_ms([&] { return matmul_device(variant, tile, m, n, k, dA, dB, dC, nullptr); }, reps);
    CUDA_CHECK(cudaMemcpy(C.data(), dC, C.size() * sizeof(float), cudaMemcpyDeviceToHost));
    const double err = sampled_relerr(A, B, C, m, n, k);
    // float32 sums of k products of numbers in [-1, 1): the error grows like sqrt(k)·eps ≈ 4e-6 at
    // k = 4096, so 1e-5 holds with room up to k of a few tens of thousands.
    const bool pass = std::isfinite(err) && err <= 1e-5;
    printf("result program=matmul variant=%s tile=%d m=%d n=%d k=%d ms=%.4f tflops=%.3f relerr=%.3e check=%s\n",
           variant, strcmp(variant, "01_naive") == 0 || strcmp(variant, "cublas") == 0 ? 0 : tile, m, n, k, med,
           2.0 * m * n * k / (med * 1e-3) / 1e12, err, pass ? "pass" : "fail");
    fflush(stdout);
    return pass;
}

int main(int argc, char **argv) {
    const char *variant = "02_tiled";
    int tile = 16, reps = 5;
    int pos[3], npos = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) {
            variant = argv[++i];
        } else if (strcmp(argv[i], "--tile") == 0 && i + 1 < argc) {
            tile = cudalab_parse_positive(argv[++i], "--tile");
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = cudalab_parse_positive(argv[++i], "--reps");
        } else if (argv[i][0] == '-' && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            usage();
        } else {
            if (npos == 3) usage();
            static const char *names[3] = {"M", "N", "K"};
            pos[npos] = cudalab_parse_positive(argv[i], names[npos]);
            ++npos;
        }
    }
    if (npos != 3) usage();
    const int m = pos[0], n = pos[1], k = pos[2];
    static const char *all[] = {"01_naive", "02_tiled", "03_tiled_dynamic", "cublas"};
    const bool run_all = strcmp(variant, "all") == 0;
    if (!run_all) {
        bool known = false;
        for (const char *v : all) known = known || strcmp(v, variant) == 0;
        if (!known)
            CUDALAB_USAGE_ERROR("unknown variant '%s' (01_naive, 02_tiled, 03_tiled_dynamic, cublas, all)", variant);
    }

    std::vector<float> A((size_t)m * k), B((size_t)k * n);
    fill(A, 1);
    fill(B, 2);
    float *dA, *dB, *dC;
    CUDA_CHECK(cudaMalloc(&dA, A.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dB, B.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dC, (size_t)m * n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dA, A.data(), A.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB, B.data(), B.size() * sizeof(float), cudaMemcpyHostToDevice));
    bool pass = true;
    if (run_all) {
        for (const char *v : all) pass = run_variant(v, tile, reps, m, n, k, A, B, dA, dB, dC, true) && pass;
    } else {
        pass = run_variant(variant, tile, reps, m, n, k, A, B, dA, dB, dC, false);
    }
    CUDA_CHECK(cudaFree(dA));
    CUDA_CHECK(cudaFree(dB));
    CUDA_CHECK(cudaFree(dC));
    return pass ? 0 : 1;
}
