// build/bin/gemm_tc: time one variant (or all) on random bf16 A (M x K) and B (N x K), C = A . B^T in
// float32, and check a sample of C against a double-precision product of the same bf16 inputs.
//   gemm_tc [--variant NAME|all] [--config NAME] [--reps R] M N K
// --config picks the wgmma configuration (gemm_tc_config_name: schedule, stages, raster) that
// 06_wgmma_tuned runs, and implies --variant 06_wgmma_tuned when no variant is given: the executable
// cannot read the tuning cache, so `invoke run gemm_tc` passes the cached winner this way.
// Prints `result program=gemm_tc variant=V [config=C] m= n= k= ms= tflops= relerr= check=pass|fail` per variant
// (`skip program=gemm_tc variant=V reason="..."` for one this build or GPU cannot run, under `all`);
// exit 0 only when every check passed, 2 on a bad argument or a shape the variant refuses.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.cuh"
#include "gemm_tc.h"

static const char *kUsage =
    "usage: gemm_tc [--variant 01_wmma|02_mma_sync|03_wgmma|04_wgmma_persistent|05_wgmma_cluster|06_wgmma_tuned|"
    "07_wgmma_pingpong|08_wgmma_tma_store|cublas_bf16|cublas_tf32|all] [--config NAME] [--reps R] M N K\n"
    "  --config NAME  the wgmma configuration 06_wgmma_tuned runs (\"<rung>-<tile>-s<stages>-g<m|n><group>\";\n"
    "                 a bad name lists them); implies --variant 06_wgmma_tuned";

// Tolerance on ||C - ref|| / ||ref||: bf16 products are exact in FP32, so the error is the FP32
// accumulation's, about sqrt(k) * 2^-24 (4e-6 at k = 4096); 1e-4 leaves room for the tensor cores'
// internal rounding while a dropped 64-wide K tile still costs more than 0.1 (harness/programs/gemm_tc.py).
static const double kTol = 1e-4;

// ||out - ref|| / ||ref|| over up to 4096 sampled entries (always including the last, most ragged).
static double sampled_relerr(const std::vector<float> &A, const std::vector<float> &B, const std::vector<float> &C,
                             int m, int n, int k) {
    const long long total = (long long)m * n, samples = std::min<long long>(total, 4096);
    double num = 0, den = 0;
    for (long long s = 0; s < samples; ++s) {
        const long long idx = samples == total ? s : (s == samples - 1 ? total - 1 : (s * 2654435761ll) % total);
        const int i = (int)(idx / n), j = (int)(idx % n);
        double ref = 0;
        for (int p = 0; p < k; ++p) ref += (double)A[(size_t)i * k + p] * (double)B[(size_t)j * k + p];
        const double d = (double)C[idx] - ref;
        num += d * d;
        den += ref * ref;
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Operands {
    std::vector<float> A, B;   // the bf16 values, widened (for the reference)
    uint16_t *dA, *dB;         // bf16 bits on the device
    float *fA, *fB;            // the same values as float32 (cublas_tf32's operands)
    float *dC;
};

static bool run_variant(const char *variant, int reps, int m, int n, int k, const Operands &op, bool run_all) {
    const char *why = gemm_tc_unsupported_reason(variant);
    if (why != nullptr) {
        if (!run_all) CUDALAB_USAGE_ERROR("variant %s cannot run here: %s", variant, why);
        printf("skip program=gemm_tc variant=%s reason=\"%s\"\n", variant, why);
        return true;
    }
    const char *req = gemm_tc_requirement(variant, m, n, k);
    if (req != nullptr) {
        if (!run_all) CUDALAB_USAGE_ERROR("variant %s refuses m=%d n=%d k=%d: %s", variant, m, n, k, req);
        printf("skip program=gemm_tc variant=%s reason=\"%s\"\n", variant, req);
        return true;
    }
    const bool tf32 = strcmp(variant, "cublas_tf32") == 0;
    std::vector<float> C((size_t)m * n);
    // Poison C (0xFF bytes are NaN) so an element the kernel never writes fails the check.
    CUDA_CHECK(cudaMemset(op.dC, 0xFF, C.size() * sizeof(float)));
    const double med = cudalab_median_ms(
        [&] {
            return tf32 ? gemm_tc_tf32_device(m, n, k, op.fA, op.fB, op.dC, nullptr)
                        : gemm_tc_device(variant, m, n, k, op.dA, op.dB, op.dC, nullptr);
        },
        reps);
    CUDA_CHECK(cudaMemcpy(C.data(), op.dC, C.size() * sizeof(float), cudaMemcpyDeviceToHost));
    const double err = sampled_relerr(op.A, op.B, C, m, n, k);
    const bool pass = std::isfinite(err) && err <= kTol;
    const int cfg = gemm_tc_variant_config(variant);
    const std::string config = cfg >= 0 ? std::string(" config=") + gemm_tc_config_name(cfg) : std::string();
    printf("result program=gemm_tc variant=%s%s m=%d n=%d k=%d ms=%.4f tflops=%.3f relerr=%.3e check=%s\n", variant,
           config.c_str(), m, n, k, med, 2.0 * m * n * k / (med * 1e-3) / 1e12, err, pass ? "pass" : "fail");
    fflush(stdout);
    return pass;
}

int main(int argc, char **argv) {
    const char *variant = nullptr, *config = nullptr;
    int reps = 5, npos = 0;
    const char *pos[3];
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (strcmp(a, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(a, "--config") == 0) {
            config = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(a, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--reps");
        } else {
            cudalab_take_positional(a, pos, &npos, 3, kUsage);
        }
    }
    if (npos != 3) CUDALAB_USAGE_ERROR("M, N and K are needed\n%s", kUsage);
    const int m = cudalab_parse_positive(pos[0], "M"), n = cudalab_parse_positive(pos[1], "N"),
              k = cudalab_parse_positive(pos[2], "K");
    if (variant == nullptr) variant = config ? "06_wgmma_tuned" : "02_mma_sync";
    const bool run_all = strcmp(variant, "all") == 0;
    if (config != nullptr) {
        const int cfg = gemm_tc_config_index(config);
        if (cfg < 0) CUDALAB_USAGE_ERROR("unknown --config '%s' (valid: %s)", config,
                                         cudalab_name_list(gemm_tc_config_count, gemm_tc_config_name).c_str());
        if (!run_all && strcmp(variant, "06_wgmma_tuned") != 0)
            CUDALAB_USAGE_ERROR("--config chooses what 06_wgmma_tuned runs; it does not apply to %s", variant);
        CUDA_CHECK((cudaError_t)gemm_tc_set_tuned(cfg));  // a table lookup: no CUDA call yet
    }
    if (!run_all) {
        if (cudalab_name_index(gemm_tc_variant_count, gemm_tc_variant_name, variant) < 0)
            CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: %s, all)", variant,
                                cudalab_name_list(gemm_tc_variant_count, gemm_tc_variant_name).c_str());
        // A shape the variant refuses is argv alone: refused here, before the first CUDA call.
        const char *req = gemm_tc_requirement(variant, m, n, k);
        if (req != nullptr) CUDALAB_USAGE_ERROR("variant %s refuses m=%d n=%d k=%d: %s", variant, m, n, k, req);
    }

    Operands op;
    op.A.resize((size_t)m * k);
    op.B.resize((size_t)n * k);
    std::vector<uint16_t> hA(op.A.size()), hB(op.B.size());
    CudalabRng ra(0x9E3779B97F4A7C15ull ^ 1), rb(0x9E3779B97F4A7C15ull ^ 2);
    for (size_t i = 0; i < hA.size(); ++i) op.A[i] = cudalab_from_bf16(hA[i] = cudalab_to_bf16(ra.uniform()));
    for (size_t i = 0; i < hB.size(); ++i) op.B[i] = cudalab_from_bf16(hB[i] = cudalab_to_bf16(rb.uniform()));
    CUDA_CHECK(cudaMalloc(&op.dA, hA.size() * 2));
    CUDA_CHECK(cudaMalloc(&op.dB, hB.size() * 2));
    CUDA_CHECK(cudaMalloc(&op.fA, op.A.size() * 4));
    CUDA_CHECK(cudaMalloc(&op.fB, op.B.size() * 4));
    CUDA_CHECK(cudaMalloc(&op.dC, (size_t)m * n * 4));
    CUDA_CHECK(cudaMemcpy(op.dA, hA.data(), hA.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(op.dB, hB.data(), hB.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(op.fA, op.A.data(), op.A.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(op.fB, op.B.data(), op.B.size() * 4, cudaMemcpyHostToDevice));
    bool pass = true;
    if (run_all) {
        for (int i = 0; i < gemm_tc_variant_count(); ++i)
            pass = run_variant(gemm_tc_variant_name(i), reps, m, n, k, op, true) && pass;
    } else {
        pass = run_variant(variant, reps, m, n, k, op, false);
    }
    CUDA_CHECK(cudaFree(op.dA));
    CUDA_CHECK(cudaFree(op.dB));
    CUDA_CHECK(cudaFree(op.fA));
    CUDA_CHECK(cudaFree(op.fB));
    CUDA_CHECK(cudaFree(op.dC));
    return pass ? 0 : 1;
}
