// matmul: the library entry points and the one variant table. The kernels live in
// cuda/shared/matmul/matmul_kernels.cuh (01-03, shared with attention) and sgemm_ladder.cuh (the ladder, 04-11).
#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <vector>

#include "matmul.h"
#include "matmul/matmul_kernels.cuh"
#include "sgemm_ladder.cuh"

#ifdef CUDALAB_HAVE_CUBLAS
#include "cublas_check.cuh"

// cuBLAS is column-major. A row-major m×n matrix is the same memory as a column-major n×m one,
// its transpose, so row-major C = A·op(B) is computed as column-major Cᵀ = op(B)ᵀ·Aᵀ: swap the
// operands and the roles of m and n. With trans_b, B (n×k row-major) read column-major is the k×n
// Bᵀ, and op(B)ᵀ = B asks cuBLAS to transpose it back.
static int cublas_sgemm(bool trans_b, int m, int n, int k, const float *A, const float *B, float *C,
                                float alpha, int batch, long long sa, long long sb, long long sc,
                                cudaStream_t stream) {
    if (m == 0 || n == 0 || batch == 0) return 0;
    if (k == 0) {  // cuBLAS leaves C alone when k = 0 (beta·C with beta = 0 is not guaranteed to write)
        for (int z = 0; z < batch; ++z)
            CUDA_TRY(cudaMemsetAsync(C + z * sc, 0, (size_t)m * n * sizeof(float), stream));
        return 0;
    }
    cublasHandle_t h;
    CUDA_TRY((cudaError_t)cublas_handle(&h));
    CUDA_TRY(cublas_status(cublasSetStream(h, stream), "cublasSetStream"));
    const float beta = 0.0f;
    const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int ldb = trans_b ? k : n;
    CUDA_TRY(cublas_status(cublasSgemmStridedBatched(h, opb, CUBLAS_OP_N, n, m, k, &alpha, B, ldb, sb, A, k, sa,
                                                     &beta, C, n, sc, batch),
                           "cublasSgemmStridedBatched"));
    return 0;
}
#endif

extern "C" int matmul_have_cublas(void) {
#ifdef CUDALAB_HAVE_CUBLAS
    return 1;
#else
    return 0;
#endif
}

// ---------------------------------------------------------------------------------------------
// Ladder configurations: every compiled instantiation of a ladder kernel, with what it needs.
// The rungs 04-08, 10 and 11 each run their default entry; the tuner times the 07/08/10/11 entries and
// "09_tuned" runs its winner. One entry per line; the name spells the template arguments.
// ---------------------------------------------------------------------------------------------
namespace {

struct LadderConfig {
    const char *name;
    int bm, bn, threads;
    size_t smem;         // dynamic shared memory per block, bytes
    const void *kvec;    // the VEC = true kernel (16-byte accesses)
    const void *kscalar; // the VEC = false kernel (any alignment)
    bool split_tail = false;  // 11_splitk_tail: a 1-D grid whose partial last wave is split along k
    int bk = 0;               // k-depth of a tile (where split_tail needs it)
    // 11 only: the same kernel instantiated for the uneven cut (SPLIT = 2), VEC and not.
    const void *kvec_uneven = nullptr, *kscalar_uneven = nullptr;
};

#define LADDER_04(BM, BN, BK, TM)                                                                      \
    {"04_blocktile_1d-" #BM "x" #BN "x" #BK "-t" #TM, BM, BN, (BM / TM) * BN, 0,                        \
     (const void *)sgemm_04_blocktile_1d<BM, BN, BK, TM>, (const void *)sgemm_04_blocktile_1d<BM, BN, BK, TM>}
#define LADDER_05(BM, BN, BK, TM, TN)                                                                  \
    {"05_blocktile_2d-" #BM "x" #BN "x" #BK "-t" #TM "x" #TN, BM, BN, (BM / TM) * (BN / TN), 0,          \
     (const void *)sgemm_05_blocktile_2d<BM, BN, BK, TM, TN>, (const void *)sgemm_05_blocktile_2d<BM, BN, BK, TM, TN>}
#define LADDER_06(BM, BN, BK)                                                                          \
    {"06_vectorized-" #BM "x" #BN "x" #BK "-t8x8", BM, BN, (BM / 8) * (BN / 8), 0,                       \
     (const void *)sgemm_06_vectorized<BM, BN, BK, 8, 8, true>, (const void *)sgemm_06_vectorized<BM, BN, BK, 8, 8, false>}
#define LADDER_07(BM, BN, BK, WM, WN)                                                                  \
    {"07_warptile-" #BM "x" #BN "x" #BK "-w" #WM "x" #WN, BM, BN, (BM / WM) * (BN / WN) * 32, 0,          \
     (const void *)sgemm_07_warptile<BM, BN, BK, WM, WN, true>,                                          \
     (const void *)sgemm_07_warptile<BM, BN, BK, WM, WN, false>}
#define LADDER_08(BM, BN, BK, WM, WN, ST)                                                              \
    {"08_pipelined-" #BM "x" #BN "x" #BK "-w" #WM "x" #WN "-s" #ST, BM, BN, (BM / WM) * (BN / WN) * 32,    \
     Sgemm08Shape<BM, BN, BK, WM, WN, ST>::SMEM, (const void *)sgemm_08_pipelined<BM, BN, BK, WM, WN, ST, 0, true>, \
     (const void *)sgemm_08_pipelined<BM, BN, BK, WM, WN, ST, 0, false>}
// The first 08 (A row-major in shared memory, read along k), kept as a tuner candidate.
#define LADDER_08A(BM, BN, BK, WM, WN, ST)                                                             \
    {"08_pipelined_arow-" #BM "x" #BN "x" #BK "-w" #WM "x" #WN "-s" #ST, BM, BN, (BM / WM) * (BN / WN) * 32, \
     Sgemm08aShape<BM, BN, BK, WM, WN, ST>::SMEM,                                                      \
     (const void *)sgemm_08_pipelined_arow<BM, BN, BK, WM, WN, ST, true>,                              \
     (const void *)sgemm_08_pipelined_arow<BM, BN, BK, WM, WN, ST, false>}
// 11's twin of a configuration for the uneven cut (the same kernel at SPLIT = 2); 10 has none, and
// instantiates nothing here.
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int ST, int SPLIT, bool VEC, bool CF>
const void *ladder_uneven() {
    if constexpr (SPLIT == 1) return (const void *)sgemm_10_regtile<BM, BN, BK, WM, WN, TM, TN, ST, 2, VEC, CF>;
    else return nullptr;
}
// 10 and 11 share one kernel: KIND names it, SPLIT picks 11's split tail (0: none; 1: equal slices,
// with the SPLIT = 2 twin for the uneven cut), CF (suffix "-cf") the conflict-free A copies
// (sgemm_ladder.cuh, 10_regtile's header).
#define LADDER_10K(KIND, SPLIT, CF, SUFFIX, BM, BN, BK, WM, WN, TM, TN, ST)                              \
    {KIND "-" #BM "x" #BN "x" #BK "-w" #WM "x" #WN "-t" #TM "x" #TN "-s" #ST SUFFIX, BM, BN,                \
     (BM / WM) * (BN / WN) * 32, Sgemm10Shape<BM, BN, BK, WM, WN, TM, TN, ST>::SMEM,                    \
     (const void *)sgemm_10_regtile<BM, BN, BK, WM, WN, TM, TN, ST, SPLIT, true, CF>,                  \
     (const void *)sgemm_10_regtile<BM, BN, BK, WM, WN, TM, TN, ST, SPLIT, false, CF>, SPLIT != 0, BK,  \
     ladder_uneven<BM, BN, BK, WM, WN, TM, TN, ST, SPLIT, true, CF>(),                                 \
     ladder_uneven<BM, BN, BK, WM, WN, TM, TN, ST, SPLIT, false, CF>()}
#define LADDER_10(...) LADDER_10K("10_regtile", 0, false, "", __VA_ARGS__)
#define LADDER_10CF(...) LADDER_10K("10_regtile", 0, true, "-cf", __VA_ARGS__)
#define LADDER_11(...) LADDER_10K("11_splitk_tail", 1, false, "", __VA_ARGS__)
#define LADDER_11CF(...) LADDER_10K("11_splitk_tail", 1, true, "-cf", __VA_ARGS__)

const LadderConfig kConfigs[] = {
    LADDER_04(64, 64, 8, 8),
    LADDER_05(128, 128, 8, 8, 8),
    LADDER_06(128, 128, 8),
    LADDER_07(128, 128, 8, 64, 32),
    LADDER_07(128, 128, 8, 32, 64),
    LADDER_08(128, 128, 8, 64, 32, 3),
    LADDER_08(128, 128, 8, 64, 32, 4),
    LADDER_08(128, 128, 16, 64, 32, 2),
    LADDER_08(128, 128, 16, 64, 32, 3),
    LADDER_08(128, 128, 16, 64, 32, 4),
    LADDER_08(128, 128, 32, 64, 32, 3),
    LADDER_08(128, 128, 16, 32, 64, 3),
    LADDER_08(128, 64, 16, 64, 32, 3),
    LADDER_08(64, 128, 16, 32, 64, 3),
    LADDER_08(256, 128, 16, 64, 32, 3),
    LADDER_08(128, 256, 16, 64, 32, 3),
    LADDER_08A(128, 128, 16, 64, 32, 3),
    LADDER_08A(128, 128, 16, 64, 32, 4),
    LADDER_08A(128, 128, 32, 64, 32, 3),
    // 10: 16×8 (or 8×16) per thread. 256 threads: one block per SM; 128 threads: two.
    LADDER_10(256, 128, 16, 64, 64, 16, 8, 3),
    LADDER_10(256, 128, 8, 64, 64, 16, 8, 4),
    LADDER_10(256, 128, 32, 64, 64, 16, 8, 3),
    LADDER_10(128, 256, 16, 64, 64, 16, 8, 3),
    LADDER_10(256, 128, 16, 64, 64, 8, 16, 3),
    LADDER_10(128, 128, 16, 64, 64, 16, 8, 3),
    LADDER_10(128, 128, 32, 64, 64, 16, 8, 3),
    // Around the H100's winner 128x256x16-s3: its k-depth (8, 32) and stages (4),
    // 8x16 per thread, and the conflict-free A copies ("-cf") at 128x256, 256x128 and 128x128.
    LADDER_10(128, 256, 8, 64, 64, 16, 8, 4),
    LADDER_10(128, 256, 16, 64, 64, 16, 8, 4),
    LADDER_10(128, 256, 32, 64, 64, 16, 8, 3),
    LADDER_10(128, 256, 16, 64, 64, 8, 16, 3),
    LADDER_10(256, 128, 8, 64, 64, 16, 8, 3),
    LADDER_10CF(128, 256, 16, 64, 64, 16, 8, 3),
    LADDER_10CF(128, 256, 16, 64, 64, 16, 8, 4),
    LADDER_10CF(128, 256, 32, 64, 64, 16, 8, 3),
    LADDER_10CF(256, 128, 16, 64, 64, 16, 8, 3),
    LADDER_10CF(128, 128, 16, 64, 64, 16, 8, 3),
    LADDER_11(256, 128, 16, 64, 64, 16, 8, 3),
    LADDER_11(128, 128, 16, 64, 64, 16, 8, 3),
    // 11 on the tiles the H100's tuner picked for 10 (128x256, BK 16 and 32-cf), so
    // that 11 against 09_tuned measures the split alone.
    LADDER_11(128, 256, 16, 64, 64, 16, 8, 3),
    LADDER_11CF(128, 256, 32, 64, 64, 16, 8, 3),
    // Needs 4·(64·132 + 64·128)·4 = 266240 bytes of shared memory, more than any current GPU gives a
    // block (227 KiB on Hopper): kept so that the refusal path is exercised on every device.
    LADDER_08(128, 128, 64, 64, 32, 4),
};
constexpr int kConfigCount = (int)(sizeof(kConfigs) / sizeof(kConfigs[0]));

// The default configuration of "09_tuned" where no tuning result has been loaded: the 08 rung's.
const char *const kTunedDefault = "08_pipelined-128x128x16-w64x32-s3";

// The one variant table: the names in the order a learner meets them, and the ladder
// configuration each rung runs (nullptr: not a ladder rung; kTunedName: the tuned one).
const char *const kTunedName = "09_tuned";
struct Variant {
    const char *name;
    const char *config;
};
const Variant kVariants[] = {
    {"01_naive", nullptr},
    {"02_tiled", nullptr},
    {"03_tiled_dynamic", nullptr},
    {"04_blocktile_1d", "04_blocktile_1d-64x64x8-t8"},
    {"05_blocktile_2d", "05_blocktile_2d-128x128x8-t8x8"},
    {"06_vectorized", "06_vectorized-128x128x8-t8x8"},
    {"07_warptile", "07_warptile-128x128x8-w64x32"},
    {"08_pipelined", "08_pipelined-128x128x16-w64x32-s3"},
    {"09_tuned", kTunedName},
    {"10_regtile", "10_regtile-128x256x16-w64x64-t16x8-s3"},  // the H100 tuner's winner (+3% over 256x128)
    {"11_splitk_tail", "11_splitk_tail-128x256x32-w64x64-t16x8-s3-cf"},  // 09's H100 winner's tile: the split alone
    {"cublas", nullptr},
};
constexpr int kVariantCount = (int)(sizeof(kVariants) / sizeof(kVariants[0]));

int config_index(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < kConfigCount; ++i)
        if (strcmp(kConfigs[i].name, name) == 0) return i;
    return -1;
}

// 09_tuned's configuration: the one holder of the tuned choice in the process (the Python side asks
// matmul_tuned_config and matmul_tuned_is_set each time and keeps no copy).
int g_tuned = -2;          // -2: not yet resolved to kTunedDefault's index
bool g_tuned_set = false;  // set by matmul_set_tuned (else the compiled default runs)
int tuned_index() {
    if (g_tuned == -2) g_tuned = config_index(kTunedDefault);
    return g_tuned;
}

// The ladder configuration a variant name runs; -1 when the name is not a ladder rung.
int ladder_config_of(const char *variant) {
    if (variant == nullptr) return -1;
    for (const Variant &v : kVariants)
        if (v.config != nullptr && strcmp(v.name, variant) == 0)
            return v.config == kTunedName ? tuned_index() : config_index(v.config);
    return -1;
}

bool is_cublas(const char *variant) { return variant != nullptr && strcmp(variant, "cublas") == 0; }

// What configuration i needs against what the current device allows (see matmul_config_info).
cudaError_t config_info(int i, int *out) {
    if (i < 0 || i >= kConfigCount) return cudaErrorInvalidValue;
    const LadderConfig &c = kConfigs[i];
    cudaFuncAttributes attr{};
    int dev = 0, smem_optin = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr, c.kvec);
    if (err != cudaSuccess) return err;
    out[0] = c.threads;
    out[1] = (int)c.smem;
    out[2] = (int)attr.sharedSizeBytes;
    out[3] = attr.numRegs;
    out[4] = attr.maxThreadsPerBlock;
    out[5] = smem_optin;
    out[6] = (int)attr.localSizeBytes;
    return cudaSuccess;
}

cudaError_t config_check(int i) {
    int info[7];
    const cudaError_t err = config_info(i, info);
    if (err != cudaSuccess) return err;
    if (info[0] > info[4]) return cudaErrorInvalidConfiguration;            // registers × threads
    if (info[1] + info[2] > info[5]) return cudaErrorInvalidConfiguration;  // shared memory
    return cudaSuccess;
}

// How 11_splitk_tail cuts the `tail` tiles of the last, partial wave (sgemm_ladder.cuh says why),
// with `slots` blocks resident and `ktiles` k-tiles a tile. Times are in tiles' times, and every
// extra block pays kSliceCost: its own pipeline fill and its way into C. A bench of 11 measured that cost on
// the H100 (4096^3, 128x256x32 tiles, s = 9: the tail took 1.12 rounds where 8/9 were modelled
// without it, c = 0.03); a rule of s = slots / tail (one round of slices) would ignore it.
// - Equal slices: s slices of 1/s take ceil(tail * s / slots) rounds of (1/s + c). The s in
//   1..min(16, k-tiles / 4) with the least time, ties to the smaller.
// - Two uneven pieces (NOTES-matmul.md): each tail tile's first kt_big k-tiles are a head, run
//   on the first `tail` slots to finish the whole tiles; the rest of its k-tiles go to the slots - tail
//   slots that finish last, q = ceil(tail / (slots - tail)) rests a slot. Time max(kt_big / k-tiles +
//   c', kRestLag + q * ((k-tiles - kt_big) / k-tiles + c')), with c' = kPieceCost: a piece's fill and
//   its hand-over, no memset and no atomics on C; and kRestLag: the rests' slots are the last to free
//   up, ~0.04 of a tile after the heads' (4096^3's block timeline: the heads started over 2011-2041 µs, the
//   rests from 2043, and 12 rests left over at the heads' end cost 72 µs). Taken only when it beats
//   the best equal split (or whole tiles) by more than 0.02 of a tile: the equal splits' costs were
//   measured at several sizes, the uneven cut's only where it pays most (4096^3), so a model's hair does not
//   switch paths.
// Decisions: 4096^3 (116 tail tiles on 132 SMs, 128 k-tiles) two pieces, kt_big = 116; 8192^3 (68,
// 256) s = 5; the executable's lecture5 shape, m = 5120, n = 256, k = 5120 (40 tiles, all tail)
// s = 3; the bench's "5120x256x5120" (m = n = 5120, k = 256: 800 tiles of 8 k-tiles, tail 8) s = 2.
// (Two shapes under one name: why the executable and NVBench once disagreed on that size.)
constexpr double kSliceCost = 0.03;
constexpr double kPieceCost = 0.01;  // predicted; a block timeline: a rest 0.0096 beyond its k-tiles
constexpr double kRestLag = 0.04;
struct TailPlan {
    long long splits = 1;  // 1: every tile whole
    long long kt_big = 0;  // > 0: two uneven pieces (splits = 2), the head's k-tiles
};
static TailPlan tail_plan(long long tail, long long slots, long long ktiles) {
    TailPlan best;
    if (tail <= 0 || slots <= 0) return best;
    const long long smax = std::max(1LL, std::min(16LL, ktiles / 4));
    double best_time = (double)cdiv(tail, slots);
    for (long long s = 2; s <= smax; ++s) {
        const double time = (double)cdiv(tail * s, slots) * (1.0 / (double)s + kSliceCost);
        if (time < best_time - 1e-9) best.splits = s, best_time = time;
    }
    if (tail < slots && smax > 1) {
        TailPlan uneven;
        double uneven_time = best_time;
        const long long q = cdiv(tail, slots - tail);
        for (long long kb = 1; kb < ktiles; ++kb) {
            const double head = (double)kb / (double)ktiles + kPieceCost;
            const double rest = kRestLag + (double)q * ((double)(ktiles - kb) / (double)ktiles + kPieceCost);
            const double time = std::max(head, rest);
            if (time < uneven_time - 1e-9) uneven.splits = 2, uneven.kt_big = kb, uneven_time = time;
        }
        if (uneven.kt_big > 0 && uneven_time < best_time - 0.02) best = uneven;
    }
    return best;
}

// The uneven split's workspace, kept per (device, stream) and only ever grown: launches on one stream
// run in order and can share it, launches on two streams get two. Per tail tile two flags (arrived,
// ready: LadderArgs) and one tile of partial sums. The flags are zeroed once, at allocation, and every
// launch leaves them zero (the last piece of each tile lowers them); the partials need no zeroing,
// each launch's first piece writes all of them before the last reads.
struct TailWork {
    int dev;
    cudaStream_t stream;
    long long tiles, tile_elems;
    unsigned *flags;
    float *partials;
};
std::mutex g_tail_work_mutex;
std::vector<TailWork> g_tail_work;

cudaError_t tail_work(cudaStream_t stream, long long tiles, long long tile_elems, unsigned **flags, float **partials) {
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    std::lock_guard<std::mutex> lock(g_tail_work_mutex);
    TailWork *w = nullptr;
    for (TailWork &e : g_tail_work)
        if (e.dev == dev && e.stream == stream) w = &e;
    if (w == nullptr) {
        g_tail_work.push_back(TailWork{dev, stream, 0, 0, nullptr, nullptr});
        w = &g_tail_work.back();
    }
    if (w->tiles < tiles || w->tile_elems < tile_elems) {
        tiles = std::max(tiles, w->tiles), tile_elems = std::max(tile_elems, w->tile_elems);
        if (w->flags != nullptr) {  // a launch in flight on this stream may still use the smaller one
            err = cudaStreamSynchronize(stream);
            cudaError_t e2 = cudaFree(w->flags), e3 = cudaFree(w->partials);
            if (err == cudaSuccess) err = e2 != cudaSuccess ? e2 : e3;
            w->flags = nullptr, w->partials = nullptr, w->tiles = w->tile_elems = 0;
            if (err != cudaSuccess) return err;
        }
        unsigned *f = nullptr;
        float *part = nullptr;
        err = cudaMalloc(&f, (size_t)(2 * tiles) * sizeof(unsigned));
        if (err == cudaSuccess) err = cudaMalloc(&part, (size_t)(tiles * tile_elems) * sizeof(float));
        if (err == cudaSuccess) err = cudaMemset(f, 0, (size_t)(2 * tiles) * sizeof(unsigned));
        if (err != cudaSuccess) {
            cudaFree(f);
            cudaFree(part);
            return err;
        }
        w->flags = f, w->partials = part, w->tiles = tiles, w->tile_elems = tile_elems;
    }
    *flags = w->flags;
    *partials = w->partials;
    return cudaSuccess;
}

// 11_splitk_tail's plan: with P blocks resident at once and N tiles, the last N mod P tiles are cut
// as tail_plan says. Equal slices add into C, so the rows of C those tiles cover are zeroed on
// `stream` first; two uneven pieces hand over through tail_work's flags and partials instead.
// s = 1 (or batch > 1): every tile whole, as 10. Fills p's tiles_n, dp_tiles, splits, kt_big, flags
// and partials.
cudaError_t split_tail_plan(const void *kernel, const LadderConfig &c, int batch, int m, int n, int k, float *C,
                            LadderArgs *p, cudaStream_t stream) {
    const long long gx = cdiv(n, c.bn), gy = cdiv(m, c.bm), tiles = gx * gy, ktiles = cdiv(k, c.bk);
    int dev = 0, sms = 0, per_sm = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, c.threads, c.smem);
    if (err != cudaSuccess) return err;
    const long long slots = (long long)sms * std::max(per_sm, 1), tail = tiles % slots;
    TailPlan plan = tail_plan(tail, slots, ktiles);
    if (batch != 1 || plan.splits < 2 || tiles + tail * (plan.splits - 1) > 0x7fffffffLL) plan = TailPlan{};
    p->tiles_n = (int)gx;
    p->dp_tiles = (int)(plan.splits > 1 ? tiles - tail : tiles);
    p->splits = (int)plan.splits;
    p->kt_big = (int)plan.kt_big;
    if (plan.kt_big > 0) return tail_work(stream, tail, (long long)c.bm * c.bn, &p->flags, &p->partials);
    if (plan.splits > 1) {
        const long long r0 = (p->dp_tiles / gx) * c.bm;  // first row of C that a split tile covers
        err = cudaMemsetAsync(C + r0 * n, 0, (size_t)(m - r0) * n * sizeof(float), stream);
        if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
}

// Enqueue configuration i on `stream`. Device pointers; nothing to do (m, n or batch 0) launches
// nothing; k = 0 launches and writes zeros.
cudaError_t ladder_run(int i, bool trans_b, int batch, int m, int n, int k, float alpha, const float *A,
                       const float *B, float *C, long long sa, long long sb, long long sc, cudaStream_t stream) {
    if (i < 0 || i >= kConfigCount || trans_b) return cudaErrorInvalidValue;
    if (m < 0 || n < 0 || k < 0 || batch < 0) return cudaErrorInvalidValue;
    cudaError_t err = config_check(i);
    if (err != cudaSuccess) return err;
    if (m == 0 || n == 0 || batch == 0) return cudaSuccess;
    const LadderConfig &c = kConfigs[i];
    const long long gy = cdiv(m, c.bm), gx = cdiv(n, c.bn);
    if (gy > CUDALAB_MAX_GRID_YZ || batch > CUDALAB_MAX_GRID_YZ || gx > 0x7fffffffLL) return cudaErrorInvalidValue;
    LadderArgs p{m, n, k, A, B, C, alpha, sa, sb, sc};
    const void *kernel = ladder_vec_ok(p) ? c.kvec : c.kscalar;
    err = cudalab_allow_dynamic_smem(kernel, c.smem);
    if (err != cudaSuccess) return err;
    dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)batch);
    if (c.split_tail) {
        err = split_tail_plan(kernel, c, batch, m, n, k, C, &p, stream);
        if (err != cudaSuccess) return err;
        if (p.kt_big > 0) {  // the uneven cut runs the kernel's SPLIT = 2 twin
            kernel = ladder_vec_ok(p) ? c.kvec_uneven : c.kscalar_uneven;
            err = cudalab_allow_dynamic_smem(kernel, c.smem);
            if (err != cudaSuccess) return err;
        }
        grid = dim3((unsigned)(p.dp_tiles + (gx * gy - p.dp_tiles) * p.splits), 1, (unsigned)batch);
    }
    void *args[] = {&p};
    err = cudaLaunchKernel(kernel, grid, dim3(c.threads), args, c.smem, stream);
    if (err != cudaSuccess) return err;
    return cudaGetLastError();
}

// The one dispatcher: every entry point comes through here.
cudaError_t dispatch(const char *variant, int tile, bool trans_b, int batch, int m, int n, int k, float alpha,
                     const float *A, const float *B, float *C, cudaStream_t stream) {
    const long long sa = (long long)m * k, sb = (long long)k * n, sc = (long long)m * n;
    if (is_cublas(variant)) {
#ifdef CUDALAB_HAVE_CUBLAS
        if (m < 0 || n < 0 || k < 0 || batch < 0) return cudaErrorInvalidValue;
        return (cudaError_t)cublas_sgemm(trans_b, m, n, k, A, B, C, alpha, batch, sa, sb, sc, stream);
#else
        return cudaErrorNotSupported;
#endif
    }
    const int cfg = ladder_config_of(variant);
    if (cfg >= 0) return ladder_run(cfg, trans_b, batch, m, n, k, alpha, A, B, C, sa, sb, sc, stream);
    return matmul_launch(variant, tile, trans_b, m, n, k, A, B, C, alpha, batch, sa, sb, sc, stream);
}

// Copy in, run `launch` (which enqueues on the default stream), copy out; buffers freed on every path.
template <class Launch>
int host_roundtrip(size_t na, size_t nb, size_t nc, const float *a, const float *b, float *c, Launch &&launch) {
    if (nc == 0) return 0;
    // Freed on every path: by release_all after a success (a failing free is reported), by the
    // destructors after an early return (the first error is the one reported). With k = 0 nothing
    // reads A or B.
    cudalab::DeviceAlloc dA, dB, dC;
    if (int err = dA.upload(a, na * sizeof(float))) return err;
    if (int err = dB.upload(b, nb * sizeof(float))) return err;
    if (int err = dC.alloc(nc * sizeof(float))) return err;
    CUDA_TRY(launch(dA.as<float>(), dB.as<float>(), dC.as<float>()));
    CUDA_TRY(cudaMemcpy(c, dC.p, nc * sizeof(float), cudaMemcpyDeviceToHost));
    return cudalab::release_all(dA, dB, dC);
}

}  // namespace

extern "C" int matmul_variant_count(void) { return kVariantCount; }

extern "C" const char *matmul_variant_name(int i) { return i >= 0 && i < kVariantCount ? kVariants[i].name : nullptr; }

extern "C" int matmul_config_count(void) { return kConfigCount; }

extern "C" const char *matmul_config_name(int i) { return i >= 0 && i < kConfigCount ? kConfigs[i].name : nullptr; }

extern "C" int matmul_config_index(const char *name) { return config_index(name); }

extern "C" int matmul_variant_config(const char *variant) { return ladder_config_of(variant); }

extern "C" cudalab_status matmul_config_info(int i, int *out) {
    if (out == nullptr) return (int)cudaErrorInvalidValue;
    return (int)config_info(i, out);
}

extern "C" cudalab_status matmul_config_check(int i) { return (int)config_check(i); }

extern "C" cudalab_status matmul_set_tuned(int i) {
    if (i == -1) {  // back to the compiled default, as in a fresh process
        g_tuned = -2;
        g_tuned_set = false;
        return 0;
    }
    const cudaError_t err = config_check(i);
    if (err != cudaSuccess) return (int)err;
    g_tuned = i;
    g_tuned_set = true;
    return 0;
}

extern "C" int matmul_tuned_config(void) { return tuned_index(); }
extern "C" int matmul_tuned_is_set(void) { return g_tuned_set ? 1 : 0; }

extern "C" long long matmul_config_max_m(int i) {
    if (i < 0 || i >= kConfigCount) return -1;
    return std::min<long long>(INT_MAX, (long long)CUDALAB_MAX_GRID_YZ * kConfigs[i].bm);
}

extern "C" long long matmul_tail_plan(long long tail, long long slots, long long ktiles, long long *kt_big) {
    const TailPlan plan = tail_plan(tail, slots, ktiles);
    if (kt_big != nullptr) *kt_big = plan.kt_big;
    return plan.splits;
}

extern "C" long long matmul_max_m(const char *variant, int tile) {
    if (is_cublas(variant)) return INT_MAX;
    const int cfg = ladder_config_of(variant);
    if (cfg >= 0) return matmul_config_max_m(cfg);
    const int id = matmul_variant_id(variant);
    if (id == 0 || (id != MATMUL_01_NAIVE && tile < 1)) return -1;
    return std::min<long long>(INT_MAX, (long long)CUDALAB_MAX_GRID_YZ * matmul_block_edge(id, tile));
}

extern "C" cudalab_status matmul_check(const char *variant, int tile, int trans_b) {
    if (is_cublas(variant)) return matmul_have_cublas() ? 0 : (int)cudaErrorNotSupported;
    const int cfg = ladder_config_of(variant);
    if (cfg >= 0) return trans_b ? (int)cudaErrorInvalidValue : (int)config_check(cfg);
    return (int)matmul_check_tile(variant, tile, trans_b != 0);
}

extern "C" cudalab_status matmul_device(const char *variant, int tile, int m, int n, int k, const float *a,
                                        const float *b, float *c, void *stream) {
    CUDA_TRY(dispatch(variant, tile, false, 1, m, n, k, 1.0f, a, b, c, (cudaStream_t)stream));
    return 0;
}

extern "C" cudalab_status matmul_config_device(int i, int m, int n, int k, const float *a, const float *b, float *c,
                                               void *stream) {
    CUDA_TRY(ladder_run(i, false, 1, m, n, k, 1.0f, a, b, c, (long long)m * k, (long long)k * n, (long long)m * n,
                        (cudaStream_t)stream));
    return 0;
}

extern "C" cudalab_status matmul_host_batched(const char *variant, int tile, int trans_b, int batch, int m, int n,
                                              int k, float alpha, const float *a, const float *b, float *c) {
    if (m < 0 || n < 0 || k < 0 || batch < 0) return (int)cudaErrorInvalidValue;
    // Refuse bad variants and tiles before allocating anything.
    const int ok = matmul_check(variant, tile, trans_b);
    if (ok != 0) return ok;
    return host_roundtrip((size_t)batch * m * k, (size_t)batch * k * n, (size_t)batch * m * n, a, b, c,
                          [&](float *dA, float *dB, float *dC) {
                              return dispatch(variant, tile, trans_b != 0, batch, m, n, k, alpha, dA, dB, dC, 0);
                          });
}

extern "C" cudalab_status matmul_host(const char *variant, int tile, int m, int n, int k, const float *a,
                                      const float *b, float *c) {
    return matmul_host_batched(variant, tile, 0, 1, m, n, k, 1.0f, a, b, c);
}

extern "C" cudalab_status matmul_config_host(int i, int m, int n, int k, const float *a, const float *b, float *c) {
    if (m < 0 || n < 0 || k < 0) return (int)cudaErrorInvalidValue;
    const cudaError_t err = config_check(i);
    if (err != cudaSuccess) return (int)err;
    return host_roundtrip((size_t)m * k, (size_t)k * n, (size_t)m * n, a, b, c, [&](float *dA, float *dB, float *dC) {
        return ladder_run(i, false, 1, m, n, k, 1.0f, dA, dB, dC, (long long)m * k, (long long)k * n,
                          (long long)m * n, 0);
    });
}

#ifdef CUDALAB_TIMELINE
// The block timeline (sgemm_ladder.cuh's LadderSpan): cleared before a launch, read after it.
extern "C" cudalab_status matmul_timeline_clear(void) {
    void *p = nullptr;
    CUDA_TRY(cudaGetSymbolAddress(&p, ladder_timeline));
    CUDA_TRY(cudaMemset(p, 0, sizeof(ladder_timeline)));
    return 0;
}
// How many blocks it holds (a launch's later blocks are not recorded).
extern "C" int matmul_timeline_capacity(void) { return kLadderTimelineBlocks; }
// Up to max_blocks blocks' 4 words into out; blocks that did not run (or a kernel without the
// instrumentation) read as zeros.
extern "C" cudalab_status matmul_timeline_read(unsigned long long *out, int max_blocks) {
    const size_t words = 4 * (size_t)std::min(max_blocks, kLadderTimelineBlocks);
    CUDA_TRY(cudaMemcpyFromSymbol(out, ladder_timeline, words * sizeof(unsigned long long)));
    return 0;
}
#endif
