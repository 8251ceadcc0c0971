// build/bin/attention: run one attention variant on random inputs, time it, check sampled rows.
//   attention [--variant 01_naive|02_flash|03_flash_bf16|04_flash_3xtf32|05_flash_wgmma|06_flash_bwd|
//              07_flash_bwd_bf16|08_flash_bwd_wgmma|09_flash_bwd_ws] [--config NAME] [--causal] [--reps N] [--seed S] B H S D
// A backward rung (06, 07, 08, 09) runs its forward once (saving the log-sum-exp), then times its backward
// on a random dO and checks rows {0, 1, S/2, S-1} of dQ, dK and dV of the first (b, h) slab against
// the float64 recurrence on the CPU: ||got - ref|| / ||ref|| of the three together <= 1e-4 for
// float32, 3e-2 for bf16 (harness/programs/attention.py, BACKWARD_TOLERANCES, says why). Its ms and
// tflops are the backward's, counted as 2.5 times the forward's FLOPs (five S×S×D products).
// --config runs one of the tuning choices (attention_config_name) of 03_flash_bf16 (warps, rows per
// warp, key tile, stages) or of 05_flash_wgmma (key tile, stages, schedule), e.g. the one `invoke
// tune attention` chose; without it the variant runs its compiled default. A variant this build or
// GPU cannot run (05, 08 or 09 without sm_90a) is a usage error that names the reason.
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
    "usage: attention [--variant 01_naive|02_flash|03_flash_bf16|04_flash_3xtf32|05_flash_wgmma|06_flash_bwd|"
    "07_flash_bwd_bf16|08_flash_bwd_wgmma|09_flash_bwd_ws] [--config NAME] [--causal] [--reps N] [--seed S] B H S D";

// The float64 backward of slab 0 (S×D arrays) at sampled rows: dQ rows `rows`, dK and dV rows `rows`
// (as keys). P needs every row's log-sum-exp and Di = dO_i·O_i, so those are computed for all rows
// (2·S·S·D multiply-adds); the rest only where sampled. Returns ||got - ref|| / ||ref|| over the
// sampled rows of the three gradients together.
static double backward_check(const float *q, const float *k, const float *v, const float *dout, const float *gq,
                             const float *gk, const float *gv, int S, int D, bool causal, const int (&rows)[4]) {
    const double scale = 1.0 / sqrt((double)D);
    std::vector<double> lse(S), di(S), sc(S), o(D);
    auto score = [&](int i, int j) {
        double acc = 0;
        for (int d = 0; d < D; ++d) acc += (double)q[(size_t)i * D + d] * k[(size_t)j * D + d];
        return acc * scale;
    };
    for (int i = 0; i < S; ++i) {
        const int valid = causal ? i + 1 : S;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < valid; ++j) mx = fmax(mx, sc[j] = score(i, j));
        for (int j = 0; j < valid; ++j) sum += (sc[j] = exp(sc[j] - mx));
        lse[i] = mx + log(sum);
        for (int d = 0; d < D; ++d) o[d] = 0;
        for (int j = 0; j < valid; ++j)
            for (int d = 0; d < D; ++d) o[d] += sc[j] / sum * v[(size_t)j * D + d];
        di[i] = 0;
        for (int d = 0; d < D; ++d) di[i] += (double)dout[(size_t)i * D + d] * o[d];
    }
    auto p_ds = [&](int i, int j, double &p, double &ds) {  // P_ij and dS_ij (0 where masked)
        p = ds = 0;
        if (causal && j > i) return;
        p = exp(score(i, j) - lse[i]);
        double dp = 0;
        for (int d = 0; d < D; ++d) dp += (double)dout[(size_t)i * D + d] * v[(size_t)j * D + d];
        ds = p * (dp - di[i]);
    };
    double num = 0, den = 0;
    std::vector<double> rq(D), rk(D), rv(D);
    for (int r : rows) {
        for (int d = 0; d < D; ++d) rq[d] = rk[d] = rv[d] = 0;
        for (int j = 0; j < S; ++j) {  // dQ_r = scale·Σ_j dS_rj k_j
            double p, ds;
            p_ds(r, j, p, ds);
            for (int d = 0; d < D; ++d) rq[d] += scale * ds * k[(size_t)j * D + d];
        }
        for (int i = 0; i < S; ++i) {  // dK_r = scale·Σ_i dS_ir q_i, dV_r = Σ_i P_ir dO_i
            double p, ds;
            p_ds(i, r, p, ds);
            for (int d = 0; d < D; ++d) {
                rk[d] += scale * ds * q[(size_t)i * D + d];
                rv[d] += p * dout[(size_t)i * D + d];
            }
        }
        const size_t at = (size_t)r * D;
        for (int d = 0; d < D; ++d) {
            const double e[3] = {gq[at + d] - rq[d], gk[at + d] - rk[d], gv[at + d] - rv[d]};
            for (double x : e) num += x * x;
            den += rq[d] * rq[d] + rk[d] * rk[d] + rv[d] * rv[d];
        }
    }
    return sqrt(num) / sqrt(den);
}

// A backward rung: its forward once (O and the log-sum-exp), then the backward timed and checked.
static int run_backward(const char *variant, bool bf16, int B, int H, int S, int D, int causal, int reps,
                        unsigned long long seed) {
    const size_t n = (size_t)B * H * S * D, rows_n = (size_t)B * H * S;
    const size_t esize = bf16 ? 2 : 4;
    CudalabRng rng((uint64_t)seed);
    std::vector<float> h[4];  // q, k, v, dO (bf16: the rounded values, what the device sees)
    std::vector<uint16_t> hb[4];
    for (int a = 0; a < 4; ++a) {
        h[a].resize(n);
        for (auto &x : h[a]) x = rng.uniform();
        if (bf16) {
            hb[a].resize(n);
            for (size_t i = 0; i < n; ++i) h[a][i] = cudalab_from_bf16(hb[a][i] = cudalab_to_bf16(h[a][i]));
        }
    }
    const long long ws_bytes = attention_backward_workspace_bytes(variant, B, H, S, D);
    if (ws_bytes < 0) CUDALAB_USAGE_ERROR("invalid sizes B=%d H=%d S=%d D=%d", B, H, S, D);
    void *d[9];  // q, k, v, dO, O, dQ, dK, dV, workspace
    float *lse;
    for (int a = 0; a < 8; ++a) CUDA_CHECK(cudaMalloc(&d[a], n * esize));
    CUDA_CHECK(cudaMalloc(&d[8], (size_t)ws_bytes));
    CUDA_CHECK(cudaMalloc(&lse, rows_n * sizeof(float)));
    for (int a = 0; a < 4; ++a)
        CUDA_CHECK(cudaMemcpy(d[a], bf16 ? (const void *)hb[a].data() : h[a].data(), n * esize, cudaMemcpyHostToDevice));
    const float scale = 1.0f / sqrtf((float)D);
    if (bf16) {
        using P = const cudalab_bf16 *;
        CUDA_CHECK((cudaError_t)attention_forward_bf16_device(variant, B, H, S, D, causal, scale, (P)d[0], (P)d[1],
                                                              (P)d[2], (cudalab_bf16 *)d[4], lse, nullptr));
    } else {
        CUDA_CHECK((cudaError_t)attention_forward_device(variant, B, H, S, D, causal, scale, (const float *)d[0],
                                                         (const float *)d[1], (const float *)d[2], (float *)d[4], lse,
                                                         nullptr, nullptr));
    }
    const double ms = cudalab_median_ms(
        [&] {
            if (bf16) {
                using P = const cudalab_bf16 *;
                using W = cudalab_bf16 *;
                return attention_backward_bf16_device(variant, B, H, S, D, causal, scale, (P)d[0], (P)d[1], (P)d[2],
                                                      (P)d[4], (P)d[3], lse, (W)d[5], (W)d[6], (W)d[7],
                                                      (float *)d[8], nullptr);
            }
            using P = const float *;
            return attention_backward_device(variant, B, H, S, D, causal, scale, (P)d[0], (P)d[1], (P)d[2], (P)d[4],
                                             (P)d[3], lse, (float *)d[5], (float *)d[6], (float *)d[7], (float *)d[8],
                                             nullptr);
        },
        reps);
    // The gradients of slab 0 (the first S·D elements of each), widened to float.
    const size_t slab = (size_t)S * D;
    std::vector<float> g[3];
    for (int a = 0; a < 3; ++a) {
        g[a].resize(slab);
        if (bf16) {
            std::vector<uint16_t> t(slab);
            CUDA_CHECK(cudaMemcpy(t.data(), d[5 + a], slab * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < slab; ++i) g[a][i] = cudalab_from_bf16(t[i]);
        } else {
            CUDA_CHECK(cudaMemcpy(g[a].data(), d[5 + a], slab * 4, cudaMemcpyDeviceToHost));
        }
    }
    const int rows[4] = {0, S > 1 ? 1 : 0, S / 2, S - 1};
    const double rel = backward_check(h[0].data(), h[1].data(), h[2].data(), h[3].data(), g[0].data(), g[1].data(),
                                      g[2].data(), S, D, causal != 0, rows);
    const bool pass = rel <= (bf16 ? 3e-2 : 1e-4);  // false for NaN too
    const double pairs = causal ? (double)S * (S + 1) / 2 : (double)S * S;
    const double flops = 10.0 * B * H * pairs * D;
    printf("result program=attention variant=%s direction=backward dtype=%s b=%d h=%d s=%d d=%d causal=%d ms=%.4f "
           "tflops=%.3f rel_err=%.3e check=%s\n",
           variant, bf16 ? "bf16" : "f32", B, H, S, D, causal, ms, flops / (ms * 1e-3) / 1e12, rel,
           pass ? "pass" : "fail");
    for (void *p : d) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaFree(lse));
    return pass ? 0 : 1;
}

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
    if ((strcmp(variant, "02_flash") == 0 || strcmp(variant, "06_flash_bwd") == 0) && D != 32 && D != 64 && D != 128)
        CUDALAB_USAGE_ERROR("%s needs D in {32, 64, 128}, got %d", variant, D);
    if ((strcmp(variant, "03_flash_bf16") == 0 || strcmp(variant, "04_flash_3xtf32") == 0 ||
         strcmp(variant, "05_flash_wgmma") == 0 || strcmp(variant, "07_flash_bwd_bf16") == 0 ||
         strcmp(variant, "08_flash_bwd_wgmma") == 0 || strcmp(variant, "09_flash_bwd_ws") == 0) && D != 64 && D != 128)
        CUDALAB_USAGE_ERROR("%s needs D in {64, 128}, got %d", variant, D);
    const bool bf16 = attention_variant_is_bf16(variant) == 1;
    if (attention_variant_is_backward(variant) == 1) return run_backward(variant, bf16, B, H, S, D, causal, reps, seed);
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
                                                     (cudalab_bf16 *)dout, nullptr, nullptr);
            return attention_forward_device(variant, B, H, S, D, causal, scale, (const float *)dq, (const float *)dk,
                                            (const float *)dv, (float *)dout, nullptr, dws, nullptr);
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
