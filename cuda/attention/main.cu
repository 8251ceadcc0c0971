// build/bin/attention: run one attention variant on random inputs, time it, check sampled rows.
//   attention [--variant 01_naive|02_flash] [--causal] [--reps N] [--seed S] B H S D
// Prints `result program=attention ... tflops=... check=pass|fail`; exit 0 only when the check
// passed. The check recomputes a few query rows of a few (b, h) slabs in double precision on the
// CPU and asks ||out - ref|| / ||ref|| <= 1e-4 over them (see tests/test_attention.py for why).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "attention.h"
#include "check.cuh"
#include "cli.cuh"

static void usage() {
    CUDALAB_USAGE_ERROR("usage: attention [--variant 01_naive|02_flash] [--causal] [--reps N] [--seed S] B H S D");
}

int main(int argc, char **argv) {
    const char *variant = "02_flash";
    int causal = 0, reps = 5;
    long seed = 0;
    std::vector<const char *> pos;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) variant = argv[++i];
        else if (strcmp(argv[i], "--causal") == 0) causal = 1;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = cudalab_parse_positive(argv[++i], "--reps");
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = cudalab_parse_positive(argv[++i], "--seed");
        else if (argv[i][0] == '-' && argv[i][1] == '-') usage();
        else pos.push_back(argv[i]);
    }
    if (pos.size() != 4) usage();
    const int B = cudalab_parse_positive(pos[0], "B"), H = cudalab_parse_positive(pos[1], "H");
    const int S = cudalab_parse_positive(pos[2], "S"), D = cudalab_parse_positive(pos[3], "D");
    bool known = false;
    for (int i = 0; i < attention_variant_count(); ++i) known = known || strcmp(variant, attention_variant_name(i)) == 0;
    if (!known) CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: 01_naive, 02_flash)", variant);
    if ((long long)B * H > 65535) CUDALAB_USAGE_ERROR("B*H must be at most 65535, got %lld", (long long)B * H);
    if (strcmp(variant, "02_flash") == 0 && D != 32 && D != 64 && D != 128)
        CUDALAB_USAGE_ERROR("02_flash needs D in {32, 64, 128}, got %d", D);
    const long long ws_bytes = attention_workspace_bytes(variant, B, H, S, D);
    if (ws_bytes < 0) CUDALAB_USAGE_ERROR("invalid sizes B=%d H=%d S=%d D=%d", B, H, S, D);

    const size_t n = (size_t)B * H * S * D;
    CudalabRng rng((uint64_t)seed);
    std::vector<float> q(n), k(n), v(n), o(n);
    for (auto &x : q) x = rng.uniform();
    for (auto &x : k) x = rng.uniform();
    for (auto &x : v) x = rng.uniform();
    float *dq, *dk, *dv, *dout, *dws = nullptr;
    CUDA_CHECK(cudaMalloc(&dq, n * 4));
    CUDA_CHECK(cudaMalloc(&dk, n * 4));
    CUDA_CHECK(cudaMalloc(&dv, n * 4));
    CUDA_CHECK(cudaMalloc(&dout, n * 4));
    if (ws_bytes) CUDA_CHECK(cudaMalloc(&dws, (size_t)ws_bytes));
    CUDA_CHECK(cudaMemcpy(dq, q.data(), n * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dk, k.data(), n * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dv, v.data(), n * 4, cudaMemcpyHostToDevice));
    const float scale = 1.0f / sqrtf((float)D);
    const double ms = cudalab_median_ms(
        [&] { return attention_forward_device(variant, B, H, S, D, causal, scale, dq, dk, dv, dout, dws, nullptr); },
        reps);
    CUDA_CHECK(cudaMemcpy(o.data(), dout, n * 4, cudaMemcpyDeviceToHost));

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
    const bool pass = rel <= 1e-4;  // false for NaN too
    const double flops = 4.0 * BH * (double)S * S * D;
    printf("result program=attention variant=%s b=%d h=%d s=%d d=%d causal=%d ms=%.4f tflops=%.3f rel_err=%.3e "
           "check=%s\n",
           variant, B, H, S, D, causal, ms, flops / (ms * 1e-3) / 1e12, rel, pass ? "pass" : "fail");
    CUDA_CHECK(cudaFree(dq));
    CUDA_CHECK(cudaFree(dk));
    CUDA_CHECK(cudaFree(dv));
    CUDA_CHECK(cudaFree(dout));
    if (dws) CUDA_CHECK(cudaFree(dws));
    return pass ? 0 : 1;
}
