// build/bin/attention: run one attention variant on random inputs, time it, check sampled rows.
//   attention [--variant 01_naive|02_flash|03_flash_bf16|04_flash_3xtf32|05_flash_wgmma] [--config NAME]
//             [--causal] [--reps N] [--seed S] B H S D
// --config runs one of the tuning choices (attention_config_name) of 03_flash_bf16 (warps, rows per
// warp, key tile, stages) or of 05_flash_wgmma (key tile, stages, schedule), e.g. the one `invoke
// tune attention` chose; without it the variant runs its compiled default. A variant this build or
// GPU cannot run (05 without sm_90a) is a usage error that names the reason.
// Prints `result program=attention ... dtype=... tflops=... check=pass|fail`; exit 0 only when the
// check passed. The check recomputes a few query rows of a few (b, h) slabs in double precision on
// the CPU (from the bf16-rounded inputs for 03_flash_bf16) and asks ||out - ref|| / ||ref|| <= 1e-4
// for float32, 1e-2 for bf16 (harness/programs/attention.py, TOLERANCES, says why).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attention.h"
#include "check.cuh"
#include "cli.cuh"

static const char *kUsage =
    "usage: attention [--variant 01_naive|02_flash|03_flash_bf16|04_flash_3xtf32|05_flash_wgmma] [--config NAME] "
    "[--causal] "
    "[--reps N] [--seed S] B H S D";

int main(int argc, char **argv) {
    const char *variant = nullptr, *config = nullptr;
    int causal = 0, reps = 5;
    unsigned long long seed = 0;
    const char *pos[4];
    int npos = 0;
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (strcmp(a, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(a, "--config") == 0) {
            config = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(a, "--causal") == 0) {
            causal = 1;
        } else if (strcmp(a, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--reps");
        } else if (strcmp(a, "--seed") == 0) {
            seed = cudalab_parse_seed(cudalab_option_value(argc, argv, &i, kUsage));
        } else {
            cudalab_take_positional(a, pos, &npos, 4, kUsage);
        }
    }
    if (npos != 4) CUDALAB_USAGE_ERROR("B, H, S and D are needed\n%s", kUsage);
    const int B = cudalab_parse_positive(pos[0], "B"), H = cudalab_parse_positive(pos[1], "H");
    const int S = (int)cudalab_parse_range(pos[2], "S", 1, ATTN_MAX_S), D = cudalab_parse_positive(pos[3], "D");
    const char *config_of = config ? attention_config_variant(config) : nullptr;
    if (config != nullptr && config_of == nullptr)
        CUDALAB_USAGE_ERROR("unknown --config '%s' (valid: %s)", config,
                            cudalab_name_list(attention_config_count, attention_config_name).c_str());
    if (variant == nullptr) variant = config ? config_of : "02_flash";
    if (cudalab_name_index(attention_variant_count, attention_variant_name, variant) < 0)
        CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: %s)", variant,
                            cudalab_name_list(attention_variant_count, attention_variant_name).c_str());
    if (config != nullptr && strcmp(variant, config_of) != 0)
        CUDALAB_USAGE_ERROR("--config %s chooses how %s runs; it does not apply to %s", config, config_of, variant);
    const char *runs = config ? config : variant;  // the name the library is called with
    const char *why = attention_unsupported_reason(runs);
    if (why != nullptr) CUDALAB_USAGE_ERROR("variant %s cannot run here: %s", variant, why);
    if ((long long)B * H > CUDALAB_MAX_GRID_YZ)
        CUDALAB_USAGE_ERROR("B*H must be at most %d, got %lld", CUDALAB_MAX_GRID_YZ, (long long)B * H);
    if (strcmp(variant, "02_flash") == 0 && D != 32 && D != 64 && D != 128)
        CUDALAB_USAGE_ERROR("02_flash needs D in {32, 64, 128}, got %d", D);
    if ((strcmp(variant, "03_flash_bf16") == 0 || strcmp(variant, "04_flash_3xtf32") == 0 ||
         strcmp(variant, "05_flash_wgmma") == 0) && D != 64 && D != 128)
        CUDALAB_USAGE_ERROR("%s needs D in {64, 128}, got %d", variant, D);
    const bool bf16 = attention_variant_is_bf16(variant) == 1;
    const long long ws_bytes = attention_workspace_bytes(runs, B, H, S, D);
    if (ws_bytes < 0) CUDALAB_USAGE_ERROR("invalid sizes B=%d H=%d S=%d D=%d", B, H, S, D);

    const size_t n = (size_t)B * H * S * D;
    const size_t esize = bf16 ? 2 : 4;
    CudalabRng rng((uint64_t)seed);
    std::vector<float> q(n), k(n), v(n), o(n);
    for (auto &x : q) x = rng.uniform();
    for (auto &x : k) x = rng.uniform();
    for (auto &x : v) x = rng.uniform();
    // bf16: the device gets the rounded inputs, and the reference below sees the same values.
    std::vector<uint16_t> hq, hk, hv, ho;
    if (bf16) {
        hq.resize(n), hk.resize(n), hv.resize(n), ho.resize(n);
        for (size_t i = 0; i < n; ++i) {
            hq[i] = cudalab_to_bf16(q[i]), hk[i] = cudalab_to_bf16(k[i]), hv[i] = cudalab_to_bf16(v[i]);
            q[i] = cudalab_from_bf16(hq[i]), k[i] = cudalab_from_bf16(hk[i]), v[i] = cudalab_from_bf16(hv[i]);
        }
    }
    void *dq, *dk, *dv, *dout;
    float *dws = nullptr;
    CUDA_CHECK(cudaMalloc(&dq, n * esize));
    CUDA_CHECK(cudaMalloc(&dk, n * esize));
    CUDA_CHECK(cudaMalloc(&dv, n * esize));
    CUDA_CHECK(cudaMalloc(&dout, n * esize));
    if (ws_bytes) CUDA_CHECK(cudaMalloc(&dws, (size_t)ws_bytes));
    CUDA_CHECK(cudaMemcpy(dq, bf16 ? (const void *)hq.data() : q.data(), n * esize, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dk, bf16 ? (const void *)hk.data() : k.data(), n * esize, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dv, bf16 ? (const void *)hv.data() : v.data(), n * esize, cudaMemcpyHostToDevice));
    const float scale = 1.0f / sqrtf((float)D);
    const double ms = cudalab_median_ms(
        [&] {
            if (bf16)
                return attention_forward_bf16_device(runs, B, H, S, D, causal, scale, (const cudalab_bf16 *)dq,
                                                     (const cudalab_bf16 *)dk, (const cudalab_bf16 *)dv,
                                                     (cudalab_bf16 *)dout, nullptr);
            return attention_forward_device(variant, B, H, S, D, causal, scale, (const float *)dq, (const float *)dk,
                                            (const float *)dv, (float *)dout, dws, nullptr);
        },
        reps);
    if (bf16) {
        CUDA_CHECK(cudaMemcpy(ho.data(), dout, n * esize, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; ++i) o[i] = cudalab_from_bf16(ho[i]);
    } else {
        CUDA_CHECK(cudaMemcpy(o.data(), dout, n * esize, cudaMemcpyDeviceToHost));
    }

    // Check rows {0, 1, S/2, S-1} of the first and last slab in double precision.
    double num = 0, den = 0;
    const int BH = B * H;
    const int slabs[2] = {0, BH - 1};
    const int rows[4] = {0, S > 1 ? 1 : 0, S / 2, S - 1};
    std::vector<double> sc(S);
    for (int bh : slabs) {
        const size_t base = (size_t)bh * S * D;
        for (int i : rows) {
            const int valid = causal ? i + 1 : S;
            double mx = -INFINITY;
            for (int j = 0; j < valid; ++j) {
                double acc = 0;
                for (int d = 0; d < D; ++d) acc += (double)q[base + (size_t)i * D + d] * k[base + (size_t)j * D + d];
                sc[j] = acc * (1.0 / sqrt((double)D));
                mx = fmax(mx, sc[j]);
            }
            double sum = 0;
            for (int j = 0; j < valid; ++j) sum += (sc[j] = exp(sc[j] - mx));
            for (int d = 0; d < D; ++d) {
                double acc = 0;
                for (int j = 0; j < valid; ++j) acc += sc[j] * v[base + (size_t)j * D + d];
                const double ref = acc / sum, got = o[base + (size_t)i * D + d];
                num += (got - ref) * (got - ref);
                den += ref * ref;
            }
        }
    }
    const double rel = sqrt(num) / sqrt(den);
    const bool pass = rel <= (bf16 ? 1e-2 : 1e-4);  // false for NaN too
    const double pairs = causal ? (double)S * (S + 1) / 2 : (double)S * S;
    const double flops = 4.0 * BH * pairs * D;
    printf("result program=attention variant=%s%s%s dtype=%s b=%d h=%d s=%d d=%d causal=%d ms=%.4f tflops=%.3f "
           "rel_err=%.3e check=%s\n",
           variant, config ? " config=" : "", config ? config : "", bf16 ? "bf16" : "f32", B, H, S, D, causal, ms,
           flops / (ms * 1e-3) / 1e12, rel, pass ? "pass" : "fail");
    CUDA_CHECK(cudaFree(dq));
    CUDA_CHECK(cudaFree(dk));
    CUDA_CHECK(cudaFree(dv));
    CUDA_CHECK(cudaFree(dout));
    if (dws) CUDA_CHECK(cudaFree(dws));
    return pass ? 0 : 1;
}
