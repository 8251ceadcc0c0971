// build/bin/matmul: time one variant (or all) on random M×K and K×N matrices and check the result.
//   matmul [--variant NAME|all] [--config NAME] [--tile T] [--reps R] [--timeline CSV] M N K
// NAME is one of the library's variant table (matmul_variant_name); --config picks the ladder
// configuration that 09_tuned runs (implies --variant 09_tuned when no variant is given).
// Prints `result program=matmul variant=V tile=T m= n= k= ms= tflops= relerr= check=pass|fail`
// per variant (ladder variants add config=...), then, for --variant all, one table; exit 0 only
// when every check passed. Sizes whose matrices cannot fit the device's free memory (or this
// machine's memory) are refused before any allocation: status 2, the need and the limit named.
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.cuh"
#include "matmul.h"

static const char *kUsage =
    "usage: matmul [--variant NAME|all] [--config NAME] [--tile T] [--reps R] [--timeline CSV] M N K";

// --timeline: one more launch after the timed ones, whose blocks (10/11's kernel) record when and on
// which SM they ran, written as CSV for `invoke plot timeline`. Only a build with -DCUDALAB_TIMELINE
// has the recorder (sgemm_ladder.cuh says why it is not in the default build).
#ifdef CUDALAB_TIMELINE
extern "C" cudalab_status matmul_timeline_clear(void);
extern "C" cudalab_status matmul_timeline_read(unsigned long long *out, int max_blocks);
extern "C" int matmul_timeline_capacity(void);
static void write_timeline(const char *path, const char *variant, int tile, int m, int n, int k, const float *dA,
                           const float *dB, float *dC) {
    const int kMax = matmul_timeline_capacity();
    CUDA_CHECK((cudaError_t)matmul_timeline_clear());
    CUDA_CHECK((cudaError_t)matmul_device(variant, tile, m, n, k, dA, dB, dC, nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<unsigned long long> w(4 * (size_t)kMax);
    CUDA_CHECK((cudaError_t)matmul_timeline_read(w.data(), kMax));
    unsigned long long t_min = ~0ull;
    int blocks = 0;
    for (int b = 0; b < kMax; ++b)
        if (w[4 * b] != 0) t_min = std::min(t_min, w[4 * b]), ++blocks;
    if (blocks == 0)
        CUDALAB_USAGE_ERROR("--timeline: variant %s recorded no blocks (only 10_regtile and 11_splitk_tail's kernel has "
                            "the recorder)",
                            variant);
    FILE *f = fopen(path, "w");
    if (f == nullptr) CUDALAB_USAGE_ERROR("--timeline: cannot write %s: %s", path, strerror(errno));
    fprintf(f, "variant,m,n,k,block,sm,role,tile,start_us,loop_end_us,end_us\n");
    static const char *kRole[] = {"whole", "head", "rest", "slice"};
    for (int b = 0; b < kMax; ++b) {
        const unsigned long long *r = &w[4 * (size_t)b];
        if (r[0] == 0) continue;
        fprintf(f, "%s,%d,%d,%d,%d,%u,%s,%llu,%.3f,%.3f,%.3f\n", variant, m, n, k, b, (unsigned)(r[3] & 0xFF),
                kRole[(r[3] >> 8) & 3], r[3] >> 32, (r[0] - t_min) * 1e-3, (r[1] - t_min) * 1e-3, (r[2] - t_min) * 1e-3);
    }
    fclose(f);
    printf("timeline program=matmul variant=%s blocks=%d file=%s\n", variant, blocks, path);
}
#endif

// The usage and, on its next line, the variant table's names (for --help and every usage error).
static std::string usage_text() {
    return std::string(kUsage) + "\nvariants: " + cudalab_name_list(matmul_variant_count, matmul_variant_name) + ", all";
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

// A ladder configuration the device cannot hold: say which limit, and by how much.
static void refuse_config(int cfg) {
    int info[7];
    CUDA_CHECK((cudaError_t)matmul_config_info(cfg, info));
    const char *name = matmul_config_name(cfg);
    if (info[0] > info[4])
        CUDALAB_USAGE_ERROR("configuration %s needs %d threads per block, but its %d registers per thread allow at "
                            "most %d on this device",
                            name, info[0], info[3], info[4]);
    CUDALAB_USAGE_ERROR("configuration %s needs %d bytes of shared memory per block; this device allows at most %d "
                        "(cudaDevAttrMaxSharedMemoryPerBlockOptin)",
                        name, info[1] + info[2], info[5]);
}

struct Row {
    std::string variant;
    double ms, tflops, relerr;
    bool pass;
};

static bool run_variant(const char *variant, int tile, int reps, int m, int n, int k, const std::vector<float> &A,
                        const std::vector<float> &B, const float *dA, const float *dB, float *dC, bool run_all,
                        std::vector<Row> &rows, const char *timeline) {
    const int ok = matmul_check(variant, tile, 0);
    if (ok == (int)cudaErrorNotSupported) {
        if (!run_all) CUDALAB_USAGE_ERROR("variant cublas: this build has no cuBLAS (see `invoke doctor`)");
        printf("skip program=matmul variant=%s reason=\"built without cuBLAS\"\n", variant);
        return true;
    }
    const int cfg = matmul_variant_config(variant);
    if (ok == (int)cudaErrorInvalidConfiguration && cfg >= 0) refuse_config(cfg);
    if (ok == (int)cudaErrorInvalidConfiguration)
        CUDALAB_USAGE_ERROR("--tile %d: %d threads per block or its shared memory is more than this device allows",
                            tile, tile * tile);
    if (ok != 0) CUDALAB_USAGE_ERROR("--tile %d is not valid for variant %s (02_tiled takes 16 or 32)", tile, variant);
    // The grid's y dimension holds at most 65535 blocks of rows: say so rather than fail the launch.
    const long long max_m = matmul_max_m(variant, tile);
    if (m > max_m) {
        if (!run_all)
            CUDALAB_USAGE_ERROR("M=%d: variant %s takes M at most %lld (the grid's y limit, %d blocks of %lld rows)",
                                m, variant, max_m, CUDALAB_MAX_GRID_YZ, max_m / CUDALAB_MAX_GRID_YZ);
        printf("skip program=matmul variant=%s reason=\"M at most %lld\"\n", variant, max_m);
        return true;
    }

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
    const double tflops = 2.0 * m * n * k / (med * 1e-3) / 1e12;
    const bool tiled = strcmp(variant, "02_tiled") == 0 || strcmp(variant, "03_tiled_dynamic") == 0;
    std::string config;
    if (cfg >= 0) config = std::string(" config=") + matmul_config_name(cfg);
    printf("result program=matmul variant=%s tile=%d%s m=%d n=%d k=%d ms=%.4f tflops=%.3f relerr=%.3e check=%s\n",
           variant, tiled ? tile : 0, config.c_str(), m, n, k, med, tflops, err, pass ? "pass" : "fail");
    fflush(stdout);
    rows.push_back({variant, med, tflops, err, pass});
#ifdef CUDALAB_TIMELINE
    if (timeline != nullptr) write_timeline(timeline, variant, tile, m, n, k, dA, dB, dC);
#else
    (void)timeline;
#endif
    return pass;
}

// Refuse sizes whose three matrices cannot fit: on the device (its free memory now) and on the host
// (this executable keeps A, B and C in host memory too). Status 2 with both numbers, never bad_alloc.
static void check_fits(int m, int n, int k) {
    const double need = 4.0 * ((double)m * k + (double)k * n + (double)m * n);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (need > (double)free_b)
        CUDALAB_USAGE_ERROR("M=%d N=%d K=%d needs %.2f GiB of device memory for A, B and C (float32); this device "
                            "has at most %.2f GiB free (of %.2f GiB)",
                            m, n, k, need / gib, free_b / gib, total_b / gib);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0 && need > (double)pages * (double)page)
        CUDALAB_USAGE_ERROR("M=%d N=%d K=%d needs %.2f GiB of host memory for A, B and C; this machine has %.2f GiB",
                            m, n, k, need / gib, (double)pages * page / gib);
}

int main(int argc, char **argv) {
    const char *variant = nullptr;
    const char *config = nullptr, *timeline = nullptr;
    int tile = 16, reps = 5;
    const char *pos[3];
    int npos = 0;
    const std::string usage_str = usage_text();
    const char *usage = usage_str.c_str();
    cudalab_handle_help(argc, argv, usage);
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (strcmp(a, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, usage);
        } else if (strcmp(a, "--config") == 0) {
            config = cudalab_option_value(argc, argv, &i, usage);
        } else if (strcmp(a, "--tile") == 0) {
            tile = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, usage), "--tile");
        } else if (strcmp(a, "--timeline") == 0) {
            timeline = cudalab_option_value(argc, argv, &i, usage);
        } else if (strcmp(a, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, usage), "--reps");
        } else {
            cudalab_take_positional(a, pos, &npos, 3, usage);
        }
    }
    if (npos != 3) CUDALAB_USAGE_ERROR("M, N and K are needed\n%s", usage);
    const int m = cudalab_parse_positive(pos[0], "M"), n = cudalab_parse_positive(pos[1], "N"),
              k = cudalab_parse_positive(pos[2], "K");
    if (variant == nullptr) variant = config ? "09_tuned" : "02_tiled";
    const bool run_all = strcmp(variant, "all") == 0;
#ifndef CUDALAB_TIMELINE
    if (timeline != nullptr)
        CUDALAB_USAGE_ERROR("--timeline: this build has no block recorder; build one with "
                            "`make EXTRA_NVCCFLAGS=-DCUDALAB_TIMELINE build/bin/matmul` (a build of its own: it "
                            "rebuilds everything)");
#endif
    if (timeline != nullptr && run_all) CUDALAB_USAGE_ERROR("--timeline takes one variant, not all");
    if (!run_all) {
        if (cudalab_name_index(matmul_variant_count, matmul_variant_name, variant) < 0)
            CUDALAB_USAGE_ERROR("unknown variant '%s' (%s, all)", variant,
                                cudalab_name_list(matmul_variant_count, matmul_variant_name).c_str());
    }
    const int cfg = config != nullptr ? matmul_config_index(config) : -1;
    if (config != nullptr) {
        if (cfg < 0)
            CUDALAB_USAGE_ERROR("unknown configuration '%s' (%s)", config,
                                cudalab_name_list(matmul_config_count, matmul_config_name).c_str());
    }
    // 02_tiled's tile is argv alone (16 or 32), so it is refused before the first CUDA call; the
    // limits that depend on the device (threads, shared memory) are checked against it below.
    if ((run_all || strcmp(variant, "02_tiled") == 0) && tile != 16 && tile != 32)
        CUDALAB_USAGE_ERROR("--tile %d is not valid for variant 02_tiled (it takes 16 or 32)", tile);
    if (config != nullptr) {
        const int rc = matmul_set_tuned(cfg);
        if (rc == (int)cudaErrorInvalidConfiguration) refuse_config(cfg);
        CUDA_CHECK((cudaError_t)rc);
    }
    check_fits(m, n, k);

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
    std::vector<Row> rows;
    if (run_all) {
        for (int i = 0; i < matmul_variant_count(); ++i)
            pass = run_variant(matmul_variant_name(i), tile, reps, m, n, k, A, B, dA, dB, dC, true, rows, nullptr) && pass;
        // One table: every variant against cuBLAS from this same run (when it ran).
        double cublas = 0;
        for (const Row &r : rows)
            if (r.variant == "cublas") cublas = r.tflops;
        printf("\n%-18s %10s %9s %9s %10s %6s\n", "variant", "ms", "TFLOP/s", "x cuBLAS", "relerr", "check");
        for (const Row &r : rows) {
            char ratio[32] = "-";
            if (cublas > 0) snprintf(ratio, sizeof ratio, "%.3f", r.tflops / cublas);
            printf("%-18s %10.4f %9.3f %9s %10.2e %6s\n", r.variant.c_str(), r.ms, r.tflops, ratio, r.relerr,
                   r.pass ? "pass" : "FAIL");
        }
    } else {
        pass = run_variant(variant, tile, reps, m, n, k, A, B, dA, dB, dC, false, rows, timeline);
    }
    CUDA_CHECK(cudaFree(dA));
    CUDA_CHECK(cudaFree(dB));
    CUDA_CHECK(cudaFree(dC));
    return pass ? 0 : 1;
}
