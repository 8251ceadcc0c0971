// What the executables (cuda/<prog>/main.cu) share: argv numbers, reproducible inputs, and the
// timing loop behind their `ms=` field. Only main.cu files include this: every helper here ends the
// process on a bad argument (status 2) or a CUDA error (status 1), which a library entry point,
// returning its error to Python, must never do.
#pragma once

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.cuh"

// ---- argv numbers ----------------------------------------------------------------------------
// A typo in argv must be a sentence and status 2, not a silent 0 from atoi or a wrapped int: each
// parser takes the whole string or nothing.

// strtoll over all of s. False when s holds no number or has text after it. A value out of
// long long's range saturates (so a range check still rejects it) and sets *overflow.
static inline bool cudalab_strtoll_all(const char *s, long long *v, bool *overflow) {
    char *end = nullptr;
    errno = 0;
    *v = strtoll(s, &end, 10);
    *overflow = errno == ERANGE;
    return end != s && *end == '\0';
}

// Any integer long long holds; the caller checks its own range with its own words. `usage`, when
// given, goes on the next line of the message (square and grid_stride remind the user of theirs).
static inline long long cudalab_parse_int(const char *s, const char *what, const char *usage = nullptr) {
    long long v = 0;
    bool overflow = false;
    const bool whole = cudalab_strtoll_all(s, &v, &overflow);
    const char *nl = usage ? "\n" : "", *u = usage ? usage : "";
    if (!whole) CUDALAB_USAGE_ERROR("%s must be an integer, got '%s'%s%s", what, s, nl, u);
    if (overflow && v > 0) CUDALAB_USAGE_ERROR("%s must be at most %lld, got %s%s%s", what, LLONG_MAX, s, nl, u);
    if (overflow) CUDALAB_USAGE_ERROR("%s must be at least %lld, got %s%s%s", what, LLONG_MIN, s, nl, u);
    return v;
}

// An integer in lo..hi: "must be at least lo" / "must be at most hi" (a too-big value is not
// "not positive"), e.g. a size that must fit the int the launchers take.
static inline long long cudalab_parse_range(const char *s, const char *what, long long lo, long long hi,
                                            const char *usage = nullptr) {
    const long long v = cudalab_parse_int(s, what, usage);
    if (v > hi) CUDALAB_USAGE_ERROR("%s must be at most %lld, got %s", what, hi, s);
    if (v < lo) {
        if (lo == 1) CUDALAB_USAGE_ERROR("%s must be a positive integer, got %s", what, s);
        CUDALAB_USAGE_ERROR("%s must be at least %lld, got %s", what, lo, s);
    }
    return v;
}

// A size or a count: 1..INT_MAX, so that it fits the int the launchers take.
static inline int cudalab_parse_positive(const char *s, const char *what) {
    return (int)cudalab_parse_range(s, what, 1, INT_MAX);
}

// A random seed: any value 0..2^63-1 (0 is a seed like any other).
static inline unsigned long long cudalab_parse_seed(const char *s, const char *what = "--seed") {
    return (unsigned long long)cudalab_parse_range(s, what, 0, LLONG_MAX);
}

// ---- options -----------------------------------------------------------------------------------
// `--help` or `-h` anywhere: the usage on stdout and exit status 0 (it is what was asked for),
// before any CUDA call, so it works on a machine without a GPU too.
static inline void cudalab_handle_help(int argc, char **argv, const char *usage) {
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("%s\n", usage);
            exit(0);
        }
    }
}

// The value after option argv[*i] (and *i moves past it); a missing value is a usage error
// naming the option, rather than the option being taken for a positional argument.
static inline const char *cudalab_option_value(int argc, char **argv, int *i, const char *usage) {
    if (*i + 1 >= argc) CUDALAB_USAGE_ERROR("%s needs a value\n%s", argv[*i], usage);
    return argv[++*i];
}

// An argument that starts with '-' and is not a negative number: an option.
static inline bool cudalab_is_option(const char *a) {
    return a[0] == '-' && a[1] != '\0' && !(a[1] >= '0' && a[1] <= '9');
}

// The tail of every executable's option loop, for an argument none of its options took: an unknown
// option, or one positional argument more than the program's `max`, is a usage error naming it (exit 2);
// otherwise the string is kept in pos[*npos], for the program to parse after the loop.
static inline void cudalab_take_positional(const char *a, const char **pos, int *npos, int max, const char *usage) {
    if (cudalab_is_option(a)) CUDALAB_USAGE_ERROR("unknown option %s\n%s", a, usage);
    if (*npos >= max) CUDALAB_USAGE_ERROR("unexpected argument '%s'\n%s", a, usage);
    pos[(*npos)++] = a;
}

// A coordinate: finite, since inf or nan would make every later comparison false.
static inline double cudalab_parse_double(const char *s, const char *what) {
    char *end = nullptr;
    const double v = strtod(s, &end);
    if (end == s || *end != '\0' || !std::isfinite(v))
        CUDALAB_USAGE_ERROR("%s must be a finite number, got '%s'", what, s);
    return v;
}

// ---- launch shapes ---------------------------------------------------------------------------
// An oversized block or grid is the user's choice of argv, so it is refused before any launch with
// a sentence and status 2, not reported afterwards as cudaErrorInvalidValue. blocks <= 0 means the
// program sizes the grid itself and only the block is checked.
static inline void cudalab_check_launch_shape(long long blocks, long long threads) {
    int max_threads = 0, max_grid = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerBlock, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&max_grid, cudaDevAttrMaxGridDimX, 0));
    if (threads > max_threads)
        CUDALAB_USAGE_ERROR("THREADS must be at most %d on this device (threads per block), got %lld", max_threads,
                            threads);
    if (blocks > max_grid) CUDALAB_USAGE_ERROR("BLOCKS must be at most %d on this device, got %lld", max_grid, blocks);
}

// ---- reproducible inputs ---------------------------------------------------------------------
// The same seed gives the same numbers on every host and libc (rand() does not), at a cost that
// millions of values can afford (<random>'s distributions cannot). Two generators share the one
// state word; each program keeps the one its inputs were always made with, so that its outputs,
// self-checks and recorded results do not move.
struct CudalabRng {
    uint64_t state;

    explicit CudalabRng(uint64_t seed) : state(seed) {}

    // splitmix64: attention's and transformer_block's inputs and weights.
    uint64_t next() {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform() { return to_pm1(next()); }  // [-1, 1)

    // A 64-bit LCG (Knuth's MMIX constants): matmul's matrices and grayscale's pixels. Its low
    // bits are weak, so only the top ones are used.
    uint64_t next_lcg() { return state = state * 6364136223846793005ull + 1442695040888963407ull; }
    float uniform_lcg() { return to_pm1(next_lcg()); }                      // [-1, 1)
    unsigned char byte_lcg() { return (unsigned char)(next_lcg() >> 56); }  // 0..255

    // The top 24 bits, a float's whole mantissa: exact in double, then one rounding to float.
    static float to_pm1(uint64_t z) { return (float)((z >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0); }
};

// bfloat16 inputs: the executables draw float32, round to bf16 bits (nearest even; the inputs are
// finite) for the device, and check against the float32 value of those same bits.
static inline uint16_t cudalab_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float cudalab_from_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// ---- the executables' timing loop ------------------------------------------------------------
// harness/measuring/timing.py is the benchmark loop (ARCHITECTURE.md, Measuring). This is the same method for
// the `ms=` field the executables print, so that their numbers mean what the benchmarks' do: one
// warm-up (module load, clock ramp and shared-memory opt-in are not the kernel's cost), then for
// each repetition an L2 flush (else a repetition reads what the previous one left in L2 and looks
// faster than a cold run) and a pair of events on `stream` around the launch; the median, which
// one preempted repetition cannot drag. The executables default to fewer repetitions than the
// benchmarks' 10, so their `ms=` is a quick look; bench numbers come from harness/measuring/timing.py.
// `launch()` enqueues the work on `stream` without synchronising and returns a cudaError_t or int.
template <class Launch>
static inline double cudalab_median_ms(Launch &&launch, int reps, cudaStream_t stream = 0) {
    if (reps < 1) CUDALAB_USAGE_ERROR("--reps must be a positive integer, got %d", reps);
    int device = 0, l2_bytes = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
    // Twice the L2, as harness/measuring/timing.py's L2Flusher, and at least 1 MiB where a device reports none.
    const size_t flush_bytes = std::max((size_t)2 * (size_t)l2_bytes, (size_t)1 << 20);
    void *flush = nullptr;
    CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));

    CUDA_CHECK((cudaError_t)launch());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; ++r) {
        // A different byte each time, as harness/measuring/timing.py does, so no layer can skip the memset.
        CUDA_CHECK(cudaMemsetAsync(flush, (r + 1) & 0xFF, flush_bytes, stream));
        CUDA_CHECK(cudaEventRecord(start, stream));
        CUDA_CHECK((cudaError_t)launch());
        CUDA_CHECK(cudaEventRecord(stop, stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        CUDA_CHECK(cudaEventElapsedTime(&ms[r], start, stop));
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaFree(flush));

    // The median as numpy's percentile(50) takes it: the mean of the middle two for an even count.
    std::sort(ms.begin(), ms.end());
    return reps % 2 ? ms[reps / 2] : 0.5 * ((double)ms[reps / 2 - 1] + (double)ms[reps / 2]);
}
