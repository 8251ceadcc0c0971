// build/bin/transformer_block: the course's SimpleTransformer forward on random weights (fixed
// seed), timed, with sampled output rows checked against a double-precision CPU implementation.
//   transformer_block [--variant 01_naive|02_flash|naive|flash] [--dtype f32|bf16] [--batch B] [--seq S]...
//                     [--embed E] [--heads H] [--causal] [--seed N] [--reps N] [--train [--lr LR]]
// --train times one training step (forward saving its activations, backward, SGD with learning rate
// LR, default 1e-3) and each phase alone, and prints one line per S with the step's ms and each
// phase's ms and share (fwd_*, bwd_*, sgd_*; the shares are of the three phases' sum). The block
// trains with the attention program's training pair: 06_flash_bwd (forward 02_flash) for the float32
// variants, 07_flash_bwd_bf16 for 03_flash_bf16 and 09_flash_bwd_ws for 05_flash_wgmma (both with
// the forward 03_flash_bf16). Its check: the step's output
// rows against the CPU as above, dbeta (the column sum of dOut, dOut uniform(-1, 1)) against a double
// sum on the host, and every gradient finite; the tests check every gradient against float64.
// --dtype bf16 runs the block on the tensor cores (bf16 projection on gemm_tc's 02_mma_sync, bf16
// flash attention: 05_flash_wgmma on a Hopper GPU, else 03_flash_bf16, whichever
// transformer_block_bf16_variant() names); its check allows 2e-2 instead of 1e-4 (x and the
// weights are rounded to bf16, ~3e-3 relative each, then Q/K/V and the attention output).
// Defaults are the course's: B=32, E=256, and S=100 then S=1000 (one result line each; --seq may be
// given several times). H=4 heads of D=64 (flash needs D in {32, 64, 128}, the course's one head
// of 256 does not fit it). Weights: nn.Linear's initialisation, uniform(-1/sqrt(E), 1/sqrt(E));
// LayerNorm gamma = 1 + 0.1u, beta = 0.1u; x uniform(-1, 1); u from a splitmix64 stream.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "transformer_block.h"
#include "attention/attention_limits.h"
#include "check.cuh"
#include "cli.cuh"

static const char *kUsage =
    "usage: transformer_block [--variant 01_naive|02_flash|naive|flash] [--dtype f32|bf16] [--batch B] "
    "[--seq S]... [--embed E] [--heads H] [--causal] [--seed N] [--reps N] [--train [--lr LR]]";

// out rows (b, s) for s in `rows`, double precision, straight from the definition.
static void cpu_rows(int b, const std::vector<int> &rows, int S, int E, int H, int causal, const float *x,
                     const float *w, const float *bias, const float *gamma, const float *beta, std::vector<double> &out) {
    const int D = E / H;
    const float *xb = x + (size_t)b * S * E;
    auto proj = [&](int which, int s, std::vector<double> &dst) {  // dst[E] = x[s]·Wᵀ + b
        for (int o = 0; o < E; ++o) {
            double acc = bias[which * E + o];
            const float *wr = w + ((size_t)which * E + o) * E;
            for (int i = 0; i < E; ++i) acc += (double)xb[(size_t)s * E + i] * wr[i];
            dst[o] = acc;
        }
    };
    std::vector<std::vector<double>> K(S, std::vector<double>(E)), V(S, std::vector<double>(E));
    for (int s = 0; s < S; ++s) {
        proj(1, s, K[s]);
        proj(2, s, V[s]);
    }
    out.assign(rows.size() * E, 0.0);
    std::vector<double> q(E), y(E), sc(S);
    for (size_t ri = 0; ri < rows.size(); ++ri) {
        const int s = rows[ri];
        proj(0, s, q);
        for (int h = 0; h < H; ++h) {
            const int valid = causal ? s + 1 : S;
            double mx = -INFINITY;
            for (int j = 0; j < valid; ++j) {
                double acc = 0;
                for (int d = 0; d < D; ++d) acc += q[h * D + d] * K[j][h * D + d];
                sc[j] = acc / sqrt((double)D);
                mx = fmax(mx, sc[j]);
            }
            double sum = 0;
            for (int j = 0; j < valid; ++j) sum += (sc[j] = exp(sc[j] - mx));
            for (int d = 0; d < D; ++d) {
                double acc = 0;
                for (int j = 0; j < valid; ++j) acc += sc[j] * V[j][h * D + d];
                y[h * D + d] = acc / sum + xb[(size_t)s * E + h * D + d];
            }
        }
        double mean = 0, var = 0;
        for (int e = 0; e < E; ++e) mean += y[e];
        mean /= E;
        for (int e = 0; e < E; ++e) var += (y[e] - mean) * (y[e] - mean);
        var /= E;
        for (int e = 0; e < E; ++e) out[ri * E + e] = (y[e] - mean) / sqrt(var + 1e-5) * gamma[e] + beta[e];
    }
}

// The relative error of sampled output rows (0, S/2, S-1 of the first and last batch element)
// against cpu_rows.
static double sampled_rows_error(int B, int S, int E, int H, int causal, const std::vector<float> &x,
                                 const std::vector<float> &out, const std::vector<float> &w,
                                 const std::vector<float> &bias, const std::vector<float> &gamma,
                                 const std::vector<float> &beta) {
    const std::vector<int> rows = {0, S / 2, S - 1};
    double num = 0, den = 0;
    for (int b : {0, B - 1}) {
        std::vector<double> ref;
        cpu_rows(b, rows, S, E, H, causal, x.data(), w.data(), bias.data(), gamma.data(), beta.data(), ref);
        for (size_t ri = 0; ri < rows.size(); ++ri)
            for (int e = 0; e < E; ++e) {
                const double got = out[((size_t)b * S + rows[ri]) * E + e], want = ref[ri * E + e];
                num += (got - want) * (got - want);
                den += want * want;
            }
    }
    return sqrt(num) / sqrt(den);
}

// --train: one S. Checked first (one step from the seed's parameters), then timed: the whole step,
// and each phase alone (the backward and SGD phases reuse what the previous launches left in the
// workspace; the timed steps keep updating the parameters, which changes no kernel's work).
static bool train_step(const char *variant, bool bf16, int B, int S, int E, int H, int causal, float lr, int reps,
                       CudalabRng &rng, const std::vector<float> &w, const std::vector<float> &bias,
                       const std::vector<float> &gamma, const std::vector<float> &beta) {
    const long long ws = transformer_block_train_workspace_bytes(variant, B, S, E, H);
    if (ws < 0) CUDALAB_USAGE_ERROR("invalid sizes B=%d S=%d E=%d H=%d", B, S, E, H);
    const size_t n = (size_t)B * S * E, nw = w.size(), nb = bias.size();
    std::vector<float> x(n), dout(n), out(n), dx(n), dw(nw), db(nb), dgamma(E), dbeta(E);
    for (auto &t : x) t = rng.uniform();
    for (auto &t : dout) t = rng.uniform();
    // Device buffers: x, W, b, gamma, beta, dOut, out, dx, dW, db, dgamma, dbeta, workspace.
    const size_t sizes[] = {n, nw, nb, (size_t)E, (size_t)E, n, n, n, nw, nb, (size_t)E, (size_t)E};
    float *d[12];
    for (int i = 0; i < 12; ++i) CUDA_CHECK(cudaMalloc(&d[i], sizes[i] * 4));
    void *dws = nullptr;
    CUDA_CHECK(cudaMalloc(&dws, (size_t)ws));
    const std::vector<float> *in[] = {&x, &w, &bias, &gamma, &beta, &dout};
    for (int i = 0; i < 6; ++i) CUDA_CHECK(cudaMemcpy(d[i], in[i]->data(), sizes[i] * 4, cudaMemcpyHostToDevice));
    float *dX = d[0], *dW = d[1], *dB = d[2], *dG = d[3], *dBeta = d[4], *dOut = d[5], *dO = d[6];
    float *gX = d[7], *gW = d[8], *gB = d[9], *gG = d[10], *gBeta = d[11];
    auto step = [&] {
        return transformer_block_train_step_device(variant, B, S, E, H, causal, lr, dX, dW, dB, dG, dBeta, dOut, dO, gX,
                                                   gW, gB, gG, gBeta, dws, nullptr);
    };
    CUDA_CHECK((cudaError_t)step());
    CUDA_CHECK(cudaMemcpy(out.data(), dO, n * 4, cudaMemcpyDeviceToHost));
    float *host_grads[] = {dx.data(), dw.data(), db.data(), dgamma.data(), dbeta.data()};
    for (int i = 0; i < 5; ++i)
        CUDA_CHECK(cudaMemcpy(host_grads[i], d[7 + i], sizes[7 + i] * 4, cudaMemcpyDeviceToHost));
    const double rel = sampled_rows_error(B, S, E, H, causal, x, out, w, bias, gamma, beta);
    // dbeta = Σ_tokens dOut: float32 sums of B·S terms (a pass over chunks of rows, then one over
    // the chunks), ~1e-6 relative, on either path.
    double num = 0, den = 0;
    for (int e = 0; e < E; ++e) {
        double want = 0;
        for (size_t t = 0; t < (size_t)B * S; ++t) want += dout[t * E + e];
        num += (dbeta[e] - want) * (dbeta[e] - want);
        den += want * want;
    }
    const double dbeta_err = sqrt(num) / sqrt(den);
    bool finite = true;
    for (const auto *g : {&dx, &dw, &db, &dgamma, &dbeta})
        for (float t : *g) finite = finite && std::isfinite(t);
    const bool pass = rel <= (bf16 ? 2e-2 : 1e-4) && dbeta_err <= 1e-5 && finite;

    const double ms = cudalab_median_ms(step, reps);
    const double fwd = cudalab_median_ms(
        [&] {
            return transformer_block_train_forward_device(variant, B, S, E, H, causal, dX, dW, dB, dG, dBeta, dO, dws,
                                                          nullptr);
        },
        reps);
    const double bwd = cudalab_median_ms(
        [&] {
            return transformer_block_backward_device(variant, B, S, E, H, causal, dX, dW, dG, dOut, gX, gW, gB, gG,
                                                     gBeta, dws, nullptr);
        },
        reps);
    const double sgd = lr > 0 ? cudalab_median_ms(
                                    [&] {
                                        return transformer_block_sgd_device(E, lr, dW, dB, dG, dBeta, gW, gB, gG,
                                                                            gBeta, nullptr);
                                    },
                                    reps)
                              : 0.0;
    const double sum = fwd + bwd + sgd;
    printf("result program=transformer_block mode=train variant=%s attention=%s dtype=%s batch=%d seq=%d embed=%d "
           "heads=%d causal=%d lr=%g ms=%.4f fwd_ms=%.4f bwd_ms=%.4f sgd_ms=%.4f fwd_pct=%.1f bwd_pct=%.1f "
           "sgd_pct=%.1f rel_err=%.3e dbeta_err=%.3e check=%s\n",
           variant, transformer_block_train_attention(variant), bf16 ? "bf16" : "f32", B, S, E, H, causal, lr, ms,
           fwd, bwd, sgd, 100 * fwd / sum, 100 * bwd / sum, 100 * sgd / sum, rel, dbeta_err, pass ? "pass" : "fail");
    fflush(stdout);
    for (float *p : d) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaFree(dws));
    return pass;
}

int main(int argc, char **argv) {
    const char *variant = "02_flash";
    const char *dtype = "f32";
    int B = 32, E = 256, H = 4, causal = 0, reps = 5, no_positionals = 0, train = 0;
    double lr = 1e-3;
    bool lr_given = false;
    unsigned long long seed = 0;
    std::vector<int> seqs;
    cudalab_handle_help(argc, argv, kUsage);
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (strcmp(a, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(a, "--dtype") == 0) {
            dtype = cudalab_option_value(argc, argv, &i, kUsage);
        } else if (strcmp(a, "--batch") == 0) {
            B = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--batch");
        } else if (strcmp(a, "--seq") == 0) {
            seqs.push_back((int)cudalab_parse_range(cudalab_option_value(argc, argv, &i, kUsage), "--seq", 1, ATTN_MAX_S));
        } else if (strcmp(a, "--embed") == 0) {
            E = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--embed");
        } else if (strcmp(a, "--heads") == 0) {
            H = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--heads");
        } else if (strcmp(a, "--causal") == 0) {
            causal = 1;
        } else if (strcmp(a, "--train") == 0) {
            train = 1;
        } else if (strcmp(a, "--lr") == 0) {
            lr = cudalab_parse_double(cudalab_option_value(argc, argv, &i, kUsage), "--lr");
            lr_given = true;
        } else if (strcmp(a, "--seed") == 0) {
            seed = cudalab_parse_seed(cudalab_option_value(argc, argv, &i, kUsage));
        } else if (strcmp(a, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, kUsage), "--reps");
        } else {
            cudalab_take_positional(a, nullptr, &no_positionals, 0, kUsage);  // every input is an option
        }
    }
    if (strcmp(variant, "naive") == 0) variant = "01_naive";
    if (strcmp(variant, "flash") == 0) variant = "02_flash";
    if (cudalab_name_index(transformer_block_variant_count, transformer_block_variant_name, variant) < 0)
        CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: %s, or naive, flash)", variant,
                            cudalab_name_list(transformer_block_variant_count, transformer_block_variant_name).c_str());
    // --dtype bf16 where no bf16 path runs (a T4, or a build for sm_75): the float32 block instead,
    // said once on stderr (the result line then says dtype=f32).
    bool bf16_fallback = false;
    if (strcmp(dtype, "bf16") == 0) {
        variant = transformer_block_bf16_variant();
        if (variant == nullptr) variant = "02_flash", bf16_fallback = true;
    } else if (strcmp(dtype, "f32") != 0) CUDALAB_USAGE_ERROR("unknown --dtype '%s' (valid: f32, bf16)", dtype);
    const bool bf16 = strcmp(variant, "03_flash_bf16") == 0 || strcmp(variant, "05_flash_wgmma") == 0;
    // --dtype bf16's argv rules hold whichever block then runs: a T4 refuses what an A100 would.
    if ((bf16 || bf16_fallback) && E / H != 64 && E / H != 128)
        CUDALAB_USAGE_ERROR("--dtype bf16 needs a head size E/H in {64, 128}, got %d", E / H);
    if (E % H != 0) CUDALAB_USAGE_ERROR("--embed %d is not a multiple of --heads %d", E, H);
    if (strcmp(variant, "02_flash") == 0 && E / H != 32 && E / H != 64 && E / H != 128)
        CUDALAB_USAGE_ERROR("02_flash needs a head size E/H in {32, 64, 128}, got %d", E / H);
    if (lr_given && !train) CUDALAB_USAGE_ERROR("--lr needs --train");
    if (lr < 0) CUDALAB_USAGE_ERROR("--lr must be >= 0, got %g", lr);
    // The step takes lr as a float: one past FLT_MAX would become inf (refused by the library after
    // the buffers are allocated), a positive one below the smallest float would become 0 (no update).
    if (lr > FLT_MAX || (lr > 0 && (float)lr == 0.0f))
        CUDALAB_USAGE_ERROR("--lr must be 0 or a positive float32 (%g to %g), got %g", (double)FLT_TRUE_MIN,
                            (double)FLT_MAX, lr);
    // Every size is checked here, before the first CUDA call: a bad second --seq must not come
    // after the first one's result line (nor, without a GPU, after the `invoke doctor` message).
    // B·H first: the training check below fails for it too, and would blame the head size.
    if ((long long)B * H > CUDALAB_MAX_GRID_YZ)
        CUDALAB_USAGE_ERROR("--batch times --heads must be at most %d, got %lld", CUDALAB_MAX_GRID_YZ,
                            (long long)B * H);
    if (train && transformer_block_train_workspace_bytes(variant, B, 1, E, H) < 0)
        CUDALAB_USAGE_ERROR("--train: the block trains with %s, which needs a head size E/H in {%s}, got %d",
                            transformer_block_train_attention(variant), bf16 ? "64, 128" : "32, 64, 128", E / H);
    if (seqs.empty()) seqs = {100, 1000};
    for (int S : seqs)
        if (transformer_block_workspace_bytes(variant, B, S, E, H) < 0 ||
            (train && transformer_block_train_workspace_bytes(variant, B, S, E, H) < 0))
            CUDALAB_USAGE_ERROR("invalid sizes B=%d S=%d E=%d H=%d", B, S, E, H);
    if (bf16_fallback)
        fprintf(stderr, "note: --dtype bf16: no bf16 path runs here (%s); running the float32 block (02_flash)\n",
                transformer_block_unsupported_reason("03_flash_bf16"));
    else if (const char *why = transformer_block_unsupported_reason(variant))
        CUDALAB_USAGE_ERROR("variant %s cannot run here: %s", variant, why);

    // Weights first, from the seed alone, so that every S sees the same layer.
    CudalabRng rng((uint64_t)seed);
    const float wscale = 1.0f / sqrtf((float)E);
    std::vector<float> w((size_t)3 * E * E), bias(3 * E), gamma(E), beta(E);
    for (auto &t : w) t = rng.uniform() * wscale;
    for (auto &t : bias) t = rng.uniform() * wscale;
    for (auto &t : gamma) t = 1.0f + 0.1f * rng.uniform();
    for (auto &t : beta) t = 0.1f * rng.uniform();
    bool all_pass = true;
    for (int S : seqs) {
        if (train) {
            all_pass = train_step(variant, bf16, B, S, E, H, causal, (float)lr, reps, rng, w, bias, gamma, beta) &&
                       all_pass;
            continue;
        }
        const long long ws = transformer_block_workspace_bytes(variant, B, S, E, H);
        if (ws < 0) CUDALAB_USAGE_ERROR("invalid sizes B=%d S=%d E=%d H=%d", B, S, E, H);
        const size_t n = (size_t)B * S * E;
        std::vector<float> x(n), out(n);
        for (auto &t : x) t = rng.uniform();
        float *dx, *dw, *db, *dg, *dbeta, *dout, *dws;
        CUDA_CHECK(cudaMalloc(&dx, n * 4));
        CUDA_CHECK(cudaMalloc(&dw, w.size() * 4));
        CUDA_CHECK(cudaMalloc(&db, bias.size() * 4));
        CUDA_CHECK(cudaMalloc(&dg, E * 4));
        CUDA_CHECK(cudaMalloc(&dbeta, E * 4));
        CUDA_CHECK(cudaMalloc(&dout, n * 4));
        CUDA_CHECK(cudaMalloc(&dws, (size_t)ws));
        CUDA_CHECK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(db, bias.data(), bias.size() * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(dg, gamma.data(), E * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(dbeta, beta.data(), E * 4, cudaMemcpyHostToDevice));
        const double ms = cudalab_median_ms(
            [&] {
                return transformer_block_forward_device(variant, B, S, E, H, causal, dx, dw, db, dg, dbeta, dout, dws,
                                                        nullptr);
            },
            reps);
        CUDA_CHECK(cudaMemcpy(out.data(), dout, n * 4, cudaMemcpyDeviceToHost));
        const double rel = sampled_rows_error(B, S, E, H, causal, x, out, w, bias, gamma, beta);
        const bool pass = rel <= (bf16 ? 2e-2 : 1e-4);
        all_pass = all_pass && pass;
        printf("result program=transformer_block variant=%s dtype=%s batch=%d seq=%d embed=%d heads=%d causal=%d ms=%.4f "
               "rel_err=%.3e check=%s\n",
               variant, bf16 ? "bf16" : "f32", B, S, E, H, causal, ms, rel, pass ? "pass" : "fail");
        fflush(stdout);
        for (float *p : {dx, dw, db, dg, dbeta, dout, dws}) CUDA_CHECK(cudaFree(p));
    }
    return all_pass ? 0 : 1;
}
