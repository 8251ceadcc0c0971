// build/bin/transpose: out = in^T on the GPU, checked on the host.
//
//   transpose [ROWS [COLS]] [--variant V|all] [--seed S] [--reps R]     defaults: 4099 x 2053, 04_coarsened
//
// in is drawn in [-1, 1) from the seed; out is filled with NaN before each variant runs, and every
// element of it must equal the element of in it came from, bit for bit (a transpose computes nothing,
// so there is no tolerance). One line per variant:
//   result program=transpose variant=V rows=R cols=C ms=... gbps=... bad=0 check=pass|fail
// gbps counts 8 bytes an element (4 read, 4 written) over the quick median `ms` (the lab's numbers come
// from `invoke bench`). Exit status 0 only when every check passed (2 for bad arguments, 1 for a CUDA
// error or a failed check).
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.cuh"
#include "transpose.h"

static const char *kUsage = "usage: transpose [ROWS [COLS]] [--variant V|all] [--seed S] [--reps R]";

// The usage and, on its next line, the variant table's names (for --help and every usage error).
static std::string usage_text() {
    return std::string(kUsage) + "\nvariants: " + cudalab_name_list(transpose_variant_count, transpose_variant_name) +
           ", all";
}

// One element of in per element of out, so 2^31 elements (8 GiB a matrix) is far past any GPU's
// memory: refused as an argument rather than as a failed allocation.
static const long long kMaxElements = 1LL << 31;

int main(int argc, char **argv) {
    const std::string usage = usage_text();
    const char *u = usage.c_str();
    long long rows = 4099, cols = 2053;
    const char *variant = "04_coarsened";
    unsigned long long seed = 0;
    int reps = 5;
    const char *pos[2];
    int npos = 0;
    cudalab_handle_help(argc, argv, u);
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "--variant") == 0) {
            variant = cudalab_option_value(argc, argv, &i, u);
        } else if (strcmp(arg, "--seed") == 0) {
            seed = cudalab_parse_seed(cudalab_option_value(argc, argv, &i, u));
        } else if (strcmp(arg, "--reps") == 0) {
            reps = cudalab_parse_positive(cudalab_option_value(argc, argv, &i, u), "--reps");
        } else {
            cudalab_take_positional(arg, pos, &npos, 2, u);
        }
    }
    if (npos > 0) rows = cudalab_parse_range(pos[0], "ROWS", 1, transpose_max_rows(), u);
    if (npos > 1) cols = cudalab_parse_range(pos[1], "COLS", 1, INT_MAX, u);
    if (rows * cols > kMaxElements)
        CUDALAB_USAGE_ERROR("ROWS x COLS must be at most %lld elements, got %lld x %lld", kMaxElements, rows, cols);
    std::vector<const char *> run;
    if (strcmp(variant, "all") == 0) {
        for (int v = 0; v < transpose_variant_count(); ++v) run.push_back(transpose_variant_name(v));
    } else if (cudalab_name_index(transpose_variant_count, transpose_variant_name, variant) >= 0) {
        run.push_back(variant);
    } else {
        CUDALAB_USAGE_ERROR("unknown variant '%s' (valid: %s, all)\n%s", variant,
                            cudalab_name_list(transpose_variant_count, transpose_variant_name).c_str(), u);
    }

    const long long n = rows * cols;
    std::vector<float> in(n), out(n);
    CudalabRng rng(seed);
    for (auto &x : in) x = rng.uniform();
    const size_t bytes = (size_t)n * sizeof(float);
    float *din = nullptr, *dout = nullptr;
    CUDA_CHECK(cudaMalloc(&din, bytes));
    CUDA_CHECK(cudaMalloc(&dout, bytes));
    CUDA_CHECK(cudaMemcpy(din, in.data(), bytes, cudaMemcpyHostToDevice));

    bool all_pass = true;
    for (const char *v : run) {
        CUDA_CHECK(cudaMemset(dout, 0xFF, bytes));  // NaN: an element the kernel never writes fails the check
        const double ms =
            cudalab_median_ms([&] { return transpose_f32_dev(v, din, dout, (int)rows, (int)cols, nullptr); }, reps);
        CUDA_CHECK(cudaMemcpy(out.data(), dout, bytes, cudaMemcpyDeviceToHost));
        long long bad = 0, first_bad = -1;
        // out is cols x rows: out[c][r] must be in[r][c]. Compared as bits (memcmp), so a NaN never passes.
        for (long long c = 0; c < cols; ++c) {
            for (long long r = 0; r < rows; ++r) {
                const long long o = c * rows + r;
                if (memcmp(&out[o], &in[r * cols + c], sizeof(float)) != 0) {
                    if (first_bad < 0) first_bad = o;
                    ++bad;
                }
            }
        }
        if (first_bad >= 0)
            fprintf(stderr, "check failed (%s): %lld element(s) wrong, first at out[%lld][%lld]: got %g, expected %g\n", v,
                    bad, first_bad / rows, first_bad % rows, out[first_bad], in[(first_bad % rows) * cols + first_bad / rows]);
        const double gbps = ms > 0 ? 8.0 * (double)n / (ms * 1e6) : 0.0;
        printf("result program=transpose variant=%s rows=%lld cols=%lld ms=%.4f gbps=%.1f bad=%lld check=%s\n", v, rows,
               cols, ms, gbps, bad, bad == 0 ? "pass" : "fail");
        all_pass = all_pass && bad == 0;
    }
    CUDA_CHECK(cudaFree(din));
    CUDA_CHECK(cudaFree(dout));
    return all_pass ? 0 : 1;
}
