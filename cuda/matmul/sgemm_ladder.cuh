// The SGEMM ladder: FP32 row-major C = alpha * A·B from the tiled kernel towards cuBLAS, one rung
// at a time. matmul_kernels.cuh keeps 01-03 (shared with attention); this header holds
// 04-08 and 10-11. Every kernel takes a LadderArgs (batch index = blockIdx.z, strides in
// elements) and is exact for any m, n, k >= 0: partial tiles are zero-filled on load and masked on store.
//
// VEC template flag: true = 16-byte global accesses (float4 loads, 16-byte cp.async, float4 stores).
// It is only legal when every row of A, B and C starts on a 16-byte boundary: k % 4 == 0,
// n % 4 == 0, the three base pointers and the batch strides 16-byte aligned. Then a 4-wide chunk
// of a row is either wholly inside the matrix or wholly outside, so one test per chunk suffices.
// The host picks VEC = false otherwise (ladder_vec_ok): the same kernel with 4-byte accesses.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "check.cuh"
#include "tc_ptx.cuh"

// Blocks per SM the register allocator must leave room for: 2 for 256-thread blocks, i.e. at most
// 128 registers a thread (65536 per SM), so that two blocks' 16 warps hide each other's latency.
// Without it ptxas spends up to 180 registers on the 8×8 kernels and only one block fits.
constexpr int ladder_min_blocks(int threads) { return threads >= 512 ? 1 : 512 / threads; }

struct LadderArgs {
    int m, n, k;
    const float *A;  // m×k
    const float *B;  // k×n
    float *C;        // m×n
    float alpha;
    long long stride_a, stride_b, stride_c;  // per batch index, elements
    // 11_splitk_tail only (a 1-D grid): blocks below dp_tiles each own a whole output tile, in
    // row-major tile order over a grid `tiles_n` tiles wide; the `splits` blocks after that for
    // each remaining tile each own a slice of its k-tiles and add their part into C (zeroed first).
    int tiles_n = 0, dp_tiles = 0, splits = 1;
    // 11's uneven two-piece split (kt_big > 0, then splits = 2; matmul.cu's tail_plan says when): the
    // grid is [whole tiles | heads | rests], the largest pieces first, the smallest last (less left over).
    // Block dp_tiles + j (j < tail) is the head of tail tile j, its k-tiles [0, kt_big); block
    // dp_tiles + tail + j its rest, k-tiles [kt_big, k-tiles). Of the two, the first to finish leaves
    // its sums in partials (BM·BN floats a tile) and raises ready; the last adds them to its own and
    // stores C. arrived (flags[j]) says which is which; ready (flags[tail + j]) that the partials have
    // landed. Neither piece waits on a block that has not started, so any dispatch order ends, and C is
    // fl(fl(α·head) + fl(α·rest)) whichever is last (float addition commutes): the same bits every run.
    // The last one lowers both flags for the next launch on the stream.
    int kt_big = 0;
    unsigned *flags = nullptr;
    float *partials = nullptr;
};

// Can the 16-byte paths be used? (see VEC above)
static inline bool ladder_vec_ok(const LadderArgs &p) {
    auto aligned = [](const void *q) { return ((uintptr_t)q & 15u) == 0; };
    return p.k % 4 == 0 && p.n % 4 == 0 && aligned(p.A) && aligned(p.B) && aligned(p.C) && p.stride_a % 4 == 0 &&
           p.stride_b % 4 == 0 && p.stride_c % 4 == 0;
}

// ---------------------------------------------------------------------------------------------
// 04_blocktile_1d
//   Change: each thread computes TM = 8 outputs down one column of C instead of one output.
//   Why: 02's inner loop spends one shared load per FMA; here one Bs load feeds TM FMAs (As is a
//   warp-wide broadcast), so shared-memory traffic per FMA drops ~TM-fold and the FP32 pipe gets fed.
// ---------------------------------------------------------------------------------------------
template <int BM, int BN, int BK, int TM>
__global__ void __launch_bounds__((BM / TM) * BN) sgemm_04_blocktile_1d(const LadderArgs p) {
    constexpr int T = (BM / TM) * BN;
    static_assert(BM * BK == T && BK * BN == T, "one element of each tile per thread");
    __shared__ float As[BM * BK];  // [BM][BK]
    __shared__ float Bs[BK * BN];  // [BK][BN]
    const int m = p.m, n = p.n, k = p.k;
    const float *__restrict__ A = p.A + blockIdx.z * p.stride_a;
    const float *__restrict__ B = p.B + blockIdx.z * p.stride_b;
    float *__restrict__ C = p.C + blockIdx.z * p.stride_c;
    const int tid = threadIdx.x;
    const int tcol = tid % BN, trow = tid / BN;  // a warp shares trow: its As reads are broadcasts
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int a_r = tid / BK, a_c = tid % BK, b_r = tid / BN, b_c = tid % BN;
    float acc[TM] = {};
    for (int k0 = 0; k0 < k; k0 += BK) {
        const int ar = row0 + a_r, ak = k0 + a_c, bk = k0 + b_r, bc = col0 + b_c;
        As[a_r * BK + a_c] = (ar < m && ak < k) ? A[(size_t)ar * k + ak] : 0.0f;
        Bs[b_r * BN + b_c] = (bk < k && bc < n) ? B[(size_t)bk * n + bc] : 0.0f;
        // Each thread reads TM rows of As and a column of Bs that other threads stored.
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float b = Bs[kk * BN + tcol];
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i] += As[(trow * TM + i) * BK + kk] * b;
        }
        // The next step overwrites the tiles: everyone must be done reading them.
        __syncthreads();
    }
    const int c = col0 + tcol;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + trow * TM + i;
        if (r < m && c < n) C[(size_t)r * n + c] = p.alpha * acc[i];
    }
}

// ---------------------------------------------------------------------------------------------
// 05_blocktile_2d
//   Change: a TM×TN = 8×8 block of C per thread; per k, TM values of A and TN of B go to registers
//   and feed an outer product of TM·TN FMAs. Why: 16 shared loads now feed 64 FMAs (04: 9 per 8),
//   and the 128×128 block tile halves global/L2 traffic per FMA again.
// ---------------------------------------------------------------------------------------------
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), ladder_min_blocks((BM / TM) * (BN / TN))) sgemm_05_blocktile_2d(const LadderArgs p) {
    constexpr int T = (BM / TM) * (BN / TN);
    static_assert((BM * BK) % T == 0 && (BK * BN) % T == 0, "tiles load in whole rounds");
    __shared__ float As[BM * BK];  // [BM][BK]
    __shared__ float Bs[BK * BN];  // [BK][BN]
    const int m = p.m, n = p.n, k = p.k;
    const float *__restrict__ A = p.A + blockIdx.z * p.stride_a;
    const float *__restrict__ B = p.B + blockIdx.z * p.stride_b;
    float *__restrict__ C = p.C + blockIdx.z * p.stride_c;
    const int tid = threadIdx.x;
    const int tr = tid / (BN / TN), tc = tid % (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    float ra[TM], rb[TN];
    for (int k0 = 0; k0 < k; k0 += BK) {
#pragma unroll
        for (int it = 0; it < (BM * BK) / T; ++it) {
            const int i = tid + it * T;
            const int r = row0 + i / BK, kk = k0 + i % BK;
            As[i] = (r < m && kk < k) ? A[(size_t)r * k + kk] : 0.0f;
        }
#pragma unroll
        for (int it = 0; it < (BK * BN) / T; ++it) {
            const int i = tid + it * T;
            const int kk = k0 + i / BN, c = col0 + i % BN;
            Bs[i] = (kk < k && c < n) ? B[(size_t)kk * n + c] : 0.0f;
        }
        // The outer products read rows and columns that other threads stored.
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
#pragma unroll
            for (int i = 0; i < TM; ++i) ra[i] = As[(tr * TM + i) * BK + kk];
#pragma unroll
            for (int j = 0; j < TN; ++j) rb[j] = Bs[kk * BN + tc * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
        }
        // The next step overwrites the tiles.
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + tr * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = col0 + tc * TN + j;
            if (r < m && c < n) C[(size_t)r * n + c] = p.alpha * acc[i][j];
        }
    }
}

// ---- helpers for the 16-byte rungs ----------------------------------------------------------

// Four consecutive elements of row `r` starting at column `c` of a rows×cols row-major matrix,
// zeros outside it. VEC: one 16-byte load (the chunk is wholly in or out, see the file comment).
template <bool VEC>
__device__ __forceinline__ float4 ladder_load4(const float *__restrict__ M, int rows, int cols, int r, int c) {
    if constexpr (VEC) {
        if (r < rows && c < cols) return *reinterpret_cast<const float4 *>(M + (size_t)r * cols + c);
        return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    } else {
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = (r < rows && c + i < cols) ? M[(size_t)r * cols + c + i] : 0.0f;
        return make_float4(v[0], v[1], v[2], v[3]);
    }
}

// Store alpha·(four accumulators) at row r, columns c..c+3 of C, masked to the matrix.
// One k-step's tiles for the register-loading rungs (06, 07), T threads, float4 at a time.
// A's BM×BK tile at (row0, k0) goes in transposed, As[k][r] with rows of AS floats (06: AS = BM;
// 07 pads to BM + 4), so that a thread's A fragment is a row segment like its B fragment.
template <int BM, int BK, int AS, int T, bool VEC>
__device__ __forceinline__ void ladder_load_a_t(float *As, const float *__restrict__ A, int m, int k, int row0, int k0,
                                                int tid) {
#pragma unroll
    for (int it = 0; it < (BM * BK / 4) / T; ++it) {
        const int f = tid + it * T;
        const int r = f / (BK / 4), c = (f % (BK / 4)) * 4;
        const float4 v = ladder_load4<VEC>(A, m, k, row0 + r, k0 + c);
        As[(c + 0) * AS + r] = v.x;
        As[(c + 1) * AS + r] = v.y;
        As[(c + 2) * AS + r] = v.z;
        As[(c + 3) * AS + r] = v.w;
    }
}

// B's BK×BN tile at (k0, col0), as it lies: Bs[k][c].
template <int BK, int BN, int T, bool VEC>
__device__ __forceinline__ void ladder_load_b(float *Bs, const float *__restrict__ B, int k, int n, int k0, int col0,
                                              int tid) {
#pragma unroll
    for (int it = 0; it < (BK * BN / 4) / T; ++it) {
        const int f = tid + it * T;
        const int r = f / (BN / 4), c = (f % (BN / 4)) * 4;
        *reinterpret_cast<float4 *>(&Bs[r * BN + c]) = ladder_load4<VEC>(B, k, n, k0 + r, col0 + c);
    }
}

template <bool VEC>
__device__ __forceinline__ void ladder_store4(float *__restrict__ C, int m, int n, int r, int c, float alpha,
                                              float x, float y, float z, float w) {
    if (r >= m) return;
    if constexpr (VEC) {
        if (c < n) *reinterpret_cast<float4 *>(C + (size_t)r * n + c) = make_float4(alpha * x, alpha * y,
                                                                                     alpha * z, alpha * w);
    } else {
        const float v[4] = {x, y, z, w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
            if (c + i < n) C[(size_t)r * n + c + i] = alpha * v[i];
    }
}

// ---------------------------------------------------------------------------------------------
// 06_vectorized
//   Change: 16-byte global loads (LDG.128) of both tiles, and A stored transposed (As[k][m]) so a
//   thread's 8 A values, like its 8 B values, are two LDS.128 instead of eight LDS.32.
//   Why: a quarter of the load instructions; the FMA:load-instruction ratio goes from 64:16 to 64:4.
// ---------------------------------------------------------------------------------------------
template <int BM, int BN, int BK, int TM, int TN, bool VEC>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), ladder_min_blocks((BM / TM) * (BN / TN))) sgemm_06_vectorized(const LadderArgs p) {
    constexpr int T = (BM / TM) * (BN / TN);
    static_assert(TM == 8 && TN == 8, "a thread's fragment is two float4 of A and two of B");
    static_assert((BM * BK / 4) % T == 0 && (BK * BN / 4) % T == 0, "tiles load in whole rounds of float4");
    __shared__ __align__(16) float As[BK * BM];  // [BK][BM]: transposed
    __shared__ __align__(16) float Bs[BK * BN];  // [BK][BN]
    const int m = p.m, n = p.n, k = p.k;
    const float *__restrict__ A = p.A + blockIdx.z * p.stride_a;
    const float *__restrict__ B = p.B + blockIdx.z * p.stride_b;
    float *__restrict__ C = p.C + blockIdx.z * p.stride_c;
    const int tid = threadIdx.x;
    const int tr = tid / (BN / TN), tc = tid % (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < k; k0 += BK) {
        ladder_load_a_t<BM, BK, BM, T, VEC>(As, A, m, k, row0, k0, tid);
        ladder_load_b<BK, BN, T, VEC>(Bs, B, k, n, k0, col0, tid);
        // The fragments below come from other threads' stores.
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4 *>(&As[kk * BM + tr * TM]);
            const float4 a1 = *reinterpret_cast<const float4 *>(&As[kk * BM + tr * TM + 4]);
            const float4 b0 = *reinterpret_cast<const float4 *>(&Bs[kk * BN + tc * TN]);
            const float4 b1 = *reinterpret_cast<const float4 *>(&Bs[kk * BN + tc * TN + 4]);
            const float ra[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float rb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
        }
        // The next step overwrites the tiles.
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + tr * TM + i;
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            ladder_store4<VEC>(C, m, n, r, col0 + tc * TN + j, p.alpha, acc[i][j], acc[i][j + 1], acc[i][j + 2],
                               acc[i][j + 3]);
    }
}

// ---------------------------------------------------------------------------------------------
// 07_warptile
//   Change: a warp owns a WM×WN sub-tile; its lanes form an (WM/8)×(WN/8) grid and each thread's
//   8×8 outputs are 2×2 sub-blocks of 4×4, WM/2 rows and WN/2 columns apart. As rows are padded.
//   Why: a warp's LDS.128 now touches consecutive 16-byte chunks (no bank conflicts; 06's threads
//   read 32 bytes apart), and padding (not a swizzle) is enough for the one conflicting access.
// Padding, not swizzle: the conflict left is the transposing store As[k][m], where lanes with
// k-chunks 0 and 4 hit the same banks (k·BM ≡ 0 mod 32). Rows of BM + 4 floats shift chunk 4 by
// 16 banks, which removes it for BK = 8, keeps each row 16-byte aligned for the LDS.128 reads,
// and costs 4 floats a row; a swizzle would cost index arithmetic on every read instead.
// ---------------------------------------------------------------------------------------------
template <int BM, int BN, int BK, int WM, int WN, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, ladder_min_blocks((BM / WM) * (BN / WN) * 32)) sgemm_07_warptile(const LadderArgs p) {
    constexpr int T = (BM / WM) * (BN / WN) * 32;
    constexpr int LM = WM / 8, LN = WN / 8;  // the warp's lanes as an LM × LN grid
    static_assert(LM * LN == 32, "a thread owns 8×8 outputs of its warp's tile");
    static_assert((BM * BK / 4) % T == 0 && (BK * BN / 4) % T == 0, "tiles load in whole rounds of float4");
    constexpr int AS = BM + 4;  // padded row of the transposed A tile
    __shared__ __align__(16) float As[BK * AS];  // [BK][BM + 4]
    __shared__ __align__(16) float Bs[BK * BN];  // [BK][BN]
    const int m = p.m, n = p.n, k = p.k;
    const float *__restrict__ A = p.A + blockIdx.z * p.stride_a;
    const float *__restrict__ B = p.B + blockIdx.z * p.stride_b;
    float *__restrict__ C = p.C + blockIdx.z * p.stride_c;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / (BN / WN), wn = warp % (BN / WN);
    const int tm = lane / LN, tn = lane % LN;
    const int a_off = wm * WM + tm * 4, b_off = wn * WN + tn * 4;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[8][8] = {};
    for (int k0 = 0; k0 < k; k0 += BK) {
        ladder_load_a_t<BM, BK, AS, T, VEC>(As, A, m, k, row0, k0, tid);
        ladder_load_b<BK, BN, T, VEC>(Bs, B, k, n, k0, col0, tid);
        // The fragments below come from other threads' stores.
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4 *>(&As[kk * AS + a_off]);
            const float4 a1 = *reinterpret_cast<const float4 *>(&As[kk * AS + a_off + WM / 2]);
            const float4 b0 = *reinterpret_cast<const float4 *>(&Bs[kk * BN + b_off]);
            const float4 b1 = *reinterpret_cast<const float4 *>(&Bs[kk * BN + b_off + WN / 2]);
            const float ra[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float rb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += ra[i] * rb[j];
        }
        // The next step overwrites the tiles.
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = row0 + a_off + (i / 4) * (WM / 2) + i % 4;
#pragma unroll
        for (int h = 0; h < 2; ++h)
            ladder_store4<VEC>(C, m, n, r, col0 + b_off + h * (WN / 2), p.alpha, acc[i][4 * h], acc[i][4 * h + 1],
                               acc[i][4 * h + 2], acc[i][4 * h + 3]);
    }
}

// ---- cp.async (sm_80+) ------------------------------------------------------------------------
// Copies global -> shared without passing through registers (the PTX is in tc_ptx.cuh); `valid`
// false writes zeros (source size 0: nothing is read, but the pointer given is still a valid one).
// matmul also builds for GPUs older than sm_80, where the same helpers are an ordinary load and
// store and the commit/wait are no-ops (the kernel's barriers then order everything).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define LADDER_CP_ASYNC 1
#else
#define LADDER_CP_ASYNC 0
#endif

__device__ __forceinline__ void ladder_cp_async16(float *smem, const float *gmem, bool valid) {
#if LADDER_CP_ASYNC
    tc::cp_async_16_zfill(tc::smem_u32(smem), gmem, valid ? 16 : 0);
#else
    *reinterpret_cast<float4 *>(smem) = valid ? *reinterpret_cast<const float4 *>(gmem) : make_float4(0, 0, 0, 0);
#endif
}

__device__ __forceinline__ void ladder_cp_async4(float *smem, const float *gmem, bool valid) {
#if LADDER_CP_ASYNC
    tc::cp_async_4_zfill(tc::smem_u32(smem), gmem, valid ? 4 : 0);
#else
    *smem = valid ? *gmem : 0.0f;
#endif
}

// The same copies for a source known to be inside the matrix (no source-size operand, no select).
__device__ __forceinline__ void ladder_cp_async16_in(float *smem, const float *gmem) {
#if LADDER_CP_ASYNC
    tc::cp_async_16(tc::smem_u32(smem), gmem);
#else
    *reinterpret_cast<float4 *>(smem) = *reinterpret_cast<const float4 *>(gmem);
#endif
}

__device__ __forceinline__ void ladder_cp_async4_in(float *smem, const float *gmem) {
#if LADDER_CP_ASYNC
    tc::cp_async_4(tc::smem_u32(smem), gmem);
#else
    *smem = *gmem;
#endif
}

__device__ __forceinline__ void ladder_cp_async_commit() {
#if LADDER_CP_ASYNC
    tc::cp_async_commit();
#endif
}

// Wait until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void ladder_cp_async_wait() {
#if LADDER_CP_ASYNC
    tc::cp_async_wait<N>();
#endif
}

// ---------------------------------------------------------------------------------------------
// 08_pipelined
//   Change: STAGES shared buffers filled by cp.async (A transposed by 4-byte copies, B by 16-byte
//   ones); tile t+STAGES-1 is in flight while tile t is multiplied; one barrier per tile, not two.
//   Why: 07 waits for every tile's global loads between its two barriers; the copies now overlap the
//   FMAs, and the fragments of step kk+1 are read while step kk's FMAs run (two register sets).
// Shared layout as 07's (As[k][BM + 4], conflict-free both for the transposing copies and for the
// LDS.128 reads). cp.async can only transpose 4 bytes at a time, so A costs BM·BK/T copies per
// thread per tile (8 at 128×128×16) against 2 for B: a few instructions per 1024 FFMA.
// MINB: blocks per SM for __launch_bounds__ (0: ladder_min_blocks, i.e. ≤ 128 registers).
// ---------------------------------------------------------------------------------------------
template <int BM, int BN, int BK, int WM, int WN, int STAGES>
struct Sgemm08Shape {
    static constexpr int T = (BM / WM) * (BN / WN) * 32;
    static constexpr int AS = BM + 4;  // padded row of the transposed A tile
    static constexpr int A_TILE = BK * AS, B_TILE = BK * BN;
    static constexpr size_t SMEM = (size_t)STAGES * (A_TILE + B_TILE) * sizeof(float);
};

template <int BM, int BN, int BK, int WM, int WN, int STAGES, int MINB, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32,
                                  MINB ? MINB : ladder_min_blocks((BM / WM) * (BN / WN) * 32))
    sgemm_08_pipelined(const LadderArgs p) {
    using S = Sgemm08Shape<BM, BN, BK, WM, WN, STAGES>;
    constexpr int T = S::T, AS = S::AS;
    constexpr int LN = WN / 8;
    static_assert((WM / 8) * LN == 32, "a thread owns 8×8 outputs of its warp's tile");
    static_assert(BK % 4 == 0 && STAGES >= 2, "float4 along k; at least double buffering");
    static_assert((BM * BK) % T == 0 && (BK * BN / 4) % T == 0, "tiles load in whole rounds");
    extern __shared__ __align__(16) float ladder_smem[];
    float *As = ladder_smem;                       // STAGES × [BK][BM + 4]
    float *Bs = ladder_smem + STAGES * S::A_TILE;  // STAGES × [BK][BN]
    const int m = p.m, n = p.n, k = p.k;
    const float *__restrict__ A = p.A + blockIdx.z * p.stride_a;
    const float *__restrict__ B = p.B + blockIdx.z * p.stride_b;
    float *__restrict__ C = p.C + blockIdx.z * p.stride_c;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / (BN / WN), wn = warp % (BN / WN);
    const int tm = lane / LN, tn = lane % LN;
    const int a_off = wm * WM + tm * 4, b_off = wn * WN + tn * 4;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int ktiles = (int)cdiv(k, BK);

    // The copies each thread issues per tile. A: element e = tid + it·T of the BM×BK tile is row
    // e / BK, column tid % BK for every it (T is a multiple of BK): one global pointer per thread,
    // moved BK floats a tile, and the row offsets are compile-time multiples of k. Lane-consecutive
    // k within a row (BK lanes read a row's 4·BK contiguous bytes), written to As[k][row]: with
    // rows of BM + 4 floats the 32 lanes land in 32 different banks for BK = 8.
    // B likewise: a fixed column per thread, rows tid / (BN/4) + it·(4T/BN), moved BK rows a tile.
    static_assert(T % BK == 0 && T % (BN / 4) == 0 && T % BN == 0, "a thread's copies keep one column");
    static_assert((BM * BK) / T <= 32, "one bit per A copy");
    constexpr int A_ROWS = T / BK;                          // rows apart between a thread's A copies
    constexpr int B_ROWS = VEC ? T / (BN / 4) : T / BN;     // rows apart between its B copies
    constexpr int B_N = VEC ? (BK * BN / 4) / T : (BK * BN) / T;
    const int a_r = tid / BK, a_c = tid % BK;
    const int b_r = VEC ? tid / (BN / 4) : tid / BN, b_c = VEC ? (tid % (BN / 4)) * 4 : tid % BN;
    const bool b_col_ok = col0 + b_c < n;
    unsigned a_rows_ok = 0;  // bit it: row a_r + it·A_ROWS of this block exists
#pragma unroll
    for (int it = 0; it < (BM * BK) / T; ++it) a_rows_ok |= (row0 + a_r + it * A_ROWS < m ? 1u : 0u) << it;
    const float *a_src = A + (size_t)min(row0 + a_r, m - 1) * k + a_c;  // tile 0; + BK per tile
    const float *b_src = B + (size_t)b_r * n + min(col0 + b_c, n - 1);  // tile 0; + BK·n per tile

    // Enqueue tile t's copies into buffer `s`; elements outside the matrices are zero-filled (the
    // source pointer of such a copy is never read, but it is kept inside the matrix all the same).
    // Most tiles lie wholly inside the matrices (all of them when the sizes are multiples of the
    // tile): those copies skip the bounds tests and the zero-fill operand.
    const bool block_inside = row0 + BM <= m && col0 + BN <= n;
    auto load_tile = [&](int s, int t) {
        const int k0 = t * BK;
        float *as = As + s * S::A_TILE + a_c * AS + a_r, *bs = Bs + s * S::B_TILE + b_r * BN + b_c;
        const float *ap = a_src + k0, *bp = b_src + (size_t)k0 * n;
        if (block_inside && k0 + BK <= k) {
#pragma unroll
            for (int it = 0; it < (BM * BK) / T; ++it) ladder_cp_async4_in(as + it * A_ROWS, ap + (size_t)it * A_ROWS * k);
#pragma unroll
            for (int it = 0; it < B_N; ++it) {
                if constexpr (VEC)
                    ladder_cp_async16_in(bs + it * B_ROWS * BN, bp + (size_t)it * B_ROWS * n);
                else
                    ladder_cp_async4_in(bs + it * B_ROWS * BN, bp + (size_t)it * B_ROWS * n);
            }
            return;
        }
        const bool a_k_ok = k0 + a_c < k;
#pragma unroll
        for (int it = 0; it < (BM * BK) / T; ++it) {
            const bool ok = a_k_ok && ((a_rows_ok >> it) & 1u);
            ladder_cp_async4(as + it * A_ROWS, ok ? ap + (size_t)it * A_ROWS * k : A, ok);
        }
#pragma unroll
        for (int it = 0; it < B_N; ++it) {
            const bool ok = b_col_ok && k0 + b_r + it * B_ROWS < k;
            if constexpr (VEC)
                ladder_cp_async16(bs + it * B_ROWS * BN, ok ? bp + (size_t)it * B_ROWS * n : B, ok);
            else
                ladder_cp_async4(bs + it * B_ROWS * BN, ok ? bp + (size_t)it * B_ROWS * n : B, ok);
        }
    };

    float acc[8][8] = {};
    // Prologue: STAGES-1 tiles in flight. Every step commits one group (empty past the last
    // tile) so that "wait until at most STAGES-2 groups remain" always means "tile t has landed".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_tile(s, s);
        ladder_cp_async_commit();
    }
    int s_use = 0, s_load = STAGES - 1;  // buffers of tile t and of tile t + STAGES - 1
    for (int t = 0; t < ktiles; ++t) {
        ladder_cp_async_wait<STAGES - 2>();
        // Tile t is now in shared memory for every thread's copies, and every thread has finished
        // multiplying tile t-1, whose buffer the copy below reuses.
        __syncthreads();
        const int tnext = t + STAGES - 1;
        if (tnext < ktiles) load_tile(s_load, tnext);
        ladder_cp_async_commit();
        s_load = s_load + 1 == STAGES ? 0 : s_load + 1;
        const float *as = As + s_use * S::A_TILE + a_off;
        const float *bs = Bs + s_use * S::B_TILE + b_off;
        s_use = s_use + 1 == STAGES ? 0 : s_use + 1;
        // Two fragment sets: step kk+1's four LDS.128 are issued before step kk's 64 FFMAs.
        float4 fa[2][2], fb[2][2];
        fa[0][0] = *reinterpret_cast<const float4 *>(as);
        fa[0][1] = *reinterpret_cast<const float4 *>(as + WM / 2);
        fb[0][0] = *reinterpret_cast<const float4 *>(bs);
        fb[0][1] = *reinterpret_cast<const float4 *>(bs + WN / 2);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const int cur = kk % 2, nxt = (kk + 1) % 2;
            if (kk + 1 < BK) {
                fa[nxt][0] = *reinterpret_cast<const float4 *>(as + (kk + 1) * AS);
                fa[nxt][1] = *reinterpret_cast<const float4 *>(as + (kk + 1) * AS + WM / 2);
                fb[nxt][0] = *reinterpret_cast<const float4 *>(bs + (kk + 1) * BN);
                fb[nxt][1] = *reinterpret_cast<const float4 *>(bs + (kk + 1) * BN + WN / 2);
            }
            const float ra[8] = {fa[cur][0].x, fa[cur][0].y, fa[cur][0].z, fa[cur][0].w,
                                 fa[cur][1].x, fa[cur][1].y, fa[cur][1].z, fa[cur][1].w};
            const float rb[8] = {fb[cur][0].x, fb[cur][0].y, fb[cur][0].z, fb[cur][0].w,
                                 fb[cur][1].x, fb[cur][1].y, fb[cur][1].z, fb[cur][1].w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += ra[i] * rb[j];
        }
    }
    ladder_cp_async_wait<0>();  // only empty groups can remain; leave none behind
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = row0 + a_off + (i / 4) * (WM / 2) + i % 4;
#pragma unroll
        for (int h = 0; h < 2; ++h)
            ladder_store4<VEC>(C, m, n, r, col0 + b_off + h * (WN / 2), p.alpha, acc[i][4 * h], acc[i][4 * h + 1],
                               acc[i][4 * h + 2], acc[i][4 * h + 3]);
    }
}

// ---------------------------------------------------------------------------------------------
// 08_pipelined, the "arow" family (a tuner candidate, not a rung of its own)
//   The first 08: A kept row-major in shared memory (k contiguous, so 16-byte cp.async copies it)
//   and read as float4 along k: 8 LDS.128 give a thread 4 k-steps of its 8 rows, 32 registers that
//   leave no room to prefetch the next fragments under the 128-register cap. Measured 37.7 TFLOP/s.
// A tile rows are padded to BK + 4 floats and each thread's 8 rows are strided by WM/8 so that a
// warp's LDS.128 of A touches WM/8 consecutive rows whose 16-byte chunks fall in distinct banks
// (row r starts at bank 4·r·(BK+4)/4 mod 32: 0, 12, 24, 4, ... for BK = 8: all different).
// ---------------------------------------------------------------------------------------------
template <int BM, int BN, int BK, int WM, int WN, int STAGES>
struct Sgemm08aShape {
    static constexpr int T = (BM / WM) * (BN / WN) * 32;
    static constexpr int AS = BK + 4;  // padded A row
    static constexpr int A_TILE = BM * AS, B_TILE = BK * BN;
    static constexpr size_t SMEM = (size_t)STAGES * (A_TILE + B_TILE) * sizeof(float);
};

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, ladder_min_blocks((BM / WM) * (BN / WN) * 32)) sgemm_08_pipelined_arow(const LadderArgs p) {
    using S = Sgemm08aShape<BM, BN, BK, WM, WN, STAGES>;
    constexpr int T = S::T, AS = S::AS;
    constexpr int LM = WM / 8, LN = WN / 8;
    static_assert(LM * LN == 32, "a thread owns 8×8 outputs of its warp's tile");
    static_assert(BK % 4 == 0 && STAGES >= 2, "float4 along k; at least double buffering");
    static_assert((BM * BK / 4) % T == 0 && (BK * BN / 4) % T == 0, "tiles load in whole rounds of 16 bytes");
    extern __shared__ __align__(16) float ladder_smem[];
    float *As = ladder_smem;                      // STAGES × [BM][BK + 4]
    float *Bs = ladder_smem + STAGES * S::A_TILE;  // STAGES × [BK][BN]
    const int m = p.m, n = p.n, k = p.k;
    const float *__restrict__ A = p.A + blockIdx.z * p.stride_a;
    const float *__restrict__ B = p.B + blockIdx.z * p.stride_b;
    float *__restrict__ C = p.C + blockIdx.z * p.stride_c;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / (BN / WN), wn = warp % (BN / WN);
    const int tm = lane / LN, tn = lane % LN;
    const int a_row = wm * WM + tm, b_off = wn * WN + tn * 4;  // rows a_row + g·WM/2 + i·LM
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int ktiles = (int)cdiv(k, BK);

    // Enqueue tile t's copies into buffer `s`. Chunks outside the matrices are zero-filled.
    auto load_tile = [&](int s, int t) {
        const int k0 = t * BK;
        float *as = As + s * S::A_TILE, *bs = Bs + s * S::B_TILE;
        if constexpr (VEC) {
#pragma unroll
            for (int it = 0; it < (BM * BK / 4) / T; ++it) {
                const int f = tid + it * T;
                const int r = f / (BK / 4), c = (f % (BK / 4)) * 4;
                const bool ok = row0 + r < m && k0 + c < k;
                ladder_cp_async16(as + r * AS + c, ok ? A + (size_t)(row0 + r) * k + k0 + c : A, ok);
            }
#pragma unroll
            for (int it = 0; it < (BK * BN / 4) / T; ++it) {
                const int f = tid + it * T;
                const int r = f / (BN / 4), c = (f % (BN / 4)) * 4;
                const bool ok = k0 + r < k && col0 + c < n;
                ladder_cp_async16(bs + r * BN + c, ok ? B + (size_t)(k0 + r) * n + col0 + c : B, ok);
            }
        } else {
#pragma unroll
            for (int it = 0; it < (BM * BK) / T; ++it) {
                const int e = tid + it * T;
                const int r = e / BK, c = e % BK;
                const bool ok = row0 + r < m && k0 + c < k;
                ladder_cp_async4(as + r * AS + c, ok ? A + (size_t)(row0 + r) * k + k0 + c : A, ok);
            }
#pragma unroll
            for (int it = 0; it < (BK * BN) / T; ++it) {
                const int e = tid + it * T;
                const int r = e / BN, c = e % BN;
                const bool ok = k0 + r < k && col0 + c < n;
                ladder_cp_async4(bs + r * BN + c, ok ? B + (size_t)(k0 + r) * n + col0 + c : B, ok);
            }
        }
    };

    float acc[8][8] = {};
    // Prologue: STAGES-1 tiles in flight. Every step commits one group (empty past the last
    // tile) so that "wait until at most STAGES-2 groups remain" always means "tile t has landed".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_tile(s, s);
        ladder_cp_async_commit();
    }
    for (int t = 0; t < ktiles; ++t) {
        ladder_cp_async_wait<STAGES - 2>();
        // Tile t is now in shared memory for every thread's copies, and every thread has finished
        // multiplying tile t-1, whose buffer the copy below reuses.
        __syncthreads();
        const int tnext = t + STAGES - 1;
        if (tnext < ktiles) load_tile(tnext % STAGES, tnext);
        ladder_cp_async_commit();
        const float *as = As + (t % STAGES) * S::A_TILE + a_row * AS;
        const float *bs = Bs + (t % STAGES) * S::B_TILE + b_off;
#pragma unroll
        for (int kq = 0; kq < BK; kq += 4) {
            float4 a[8];  // rows a_row + (i/4)·WM/2 + (i%4)·LM, columns kq..kq+3
#pragma unroll
            for (int i = 0; i < 8; ++i)
                a[i] = *reinterpret_cast<const float4 *>(as + ((i / 4) * (WM / 2) + (i % 4) * LM) * AS + kq);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const float4 b0 = *reinterpret_cast<const float4 *>(bs + (kq + kk) * BN);
                const float4 b1 = *reinterpret_cast<const float4 *>(bs + (kq + kk) * BN + WN / 2);
                const float rb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const float ra = kk == 0 ? a[i].x : kk == 1 ? a[i].y : kk == 2 ? a[i].z : a[i].w;
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[i][j] += ra * rb[j];
                }
            }
        }
    }
    ladder_cp_async_wait<0>();  // only empty groups can remain; leave none behind
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = row0 + a_row + (i / 4) * (WM / 2) + (i % 4) * LM;
#pragma unroll
        for (int h = 0; h < 2; ++h)
            ladder_store4<VEC>(C, m, n, r, col0 + b_off + h * (WN / 2), p.alpha, acc[i][4 * h], acc[i][4 * h + 1],
                               acc[i][4 * h + 2], acc[i][4 * h + 3]);
    }
}

// ---------------------------------------------------------------------------------------------
// 10_regtile
//   Change: a 16×8 thread tile (TM×TN, 128 accumulators) instead of 8×8, with one 256-thread block
//   of 256×128 per SM (8 warps, up to 255 registers a thread) as cuBLAS's sm80 SGEMM runs; the next
//   tile's first fragments are read before the last k-step's FFMAs (the barrier moves there); the
//   outer product walks the thread tile as a serpentine.
//   Why (08/09's SASS, 128×128×32): the k-loop is 2048 FFMA + 128 LDS.128 + ~100 copy and address
//   instructions, ~89 % FFMA, yet the FMA pipe runs at ~72 %: the slots go to the 4 LDS.128 per
//   64 FFMA (12 shared wavefronts per warp k-step, 3/4 of the SM's shared bandwidth at full FFMA
//   rate), to 2.2 register-file reads per FFMA (the operand reuse cache catches one operand at most,
//   often none), and to the barrier, whose wait and the LDS after it start every tile with no FFMA
//   ready. 16×8 needs 6 LDS.128 per 128 FFMA (shared traffic per FFMA −25 %, load slots 5.9 % →
//   4.5 %); with the barrier before the last k-step, that step's 128 FFMA cover the next tile's
//   first LDS; the serpentine (row i walks j up, row i+1 walks it down) keeps one operand the same
//   for every pair of consecutive FFMA, turning at a row's end on the shared B value, so ptxas can
//   mark it .reuse and each FFMA reads at most two operands from the register banks.
// Layout and copies as 08's (As[k][BM + 4] by 4-byte cp.async, Bs[k][BN] by 16-byte ones). A
// thread's A fragment is TM/4 chunks of 4 rows, 4·LM rows apart (LM = WM/TM lanes down the warp
// tile), its B fragment TN/4 chunks 4·LN columns apart: a warp's LDS.128 reads LM (or LN)
// consecutive 16-byte chunks, broadcast to the other lanes, with no bank conflict.
// MINB: 1 block of 256 threads (2 of 128) per SM, which lets ptxas use up to 255 registers.
// CF (configurations named "...-cf"): two changes, neither to the layout the
// fragments read or to the arithmetic.
// - Conflict-free A copies. The transposing 4-byte cp.async writes As[a_c][a_r]; with rows of
//   BM + 4 floats (BM % 32 == 0) element (c, r) sits in bank (4c + r) % 32. CF = false gives a
//   warp's lanes BK consecutive k of 32/BK rows: conflict-free at BK = 8, but 2-way at BK = 16 (k and
//   k + 8 share a bank) and 4-way at BK = 32, and those writes share the shared-memory pipe with the
//   fragment reads that bound the k-loop. CF = true gives a warp 8 consecutive k of 4 consecutive
//   rows (banks 4c + r: all 32 distinct) at any BK % 8 == 0; the warps take the tile's k-groups and
//   row-groups in turn. Each row's 8 floats are one 32-byte sector, as before.
// - The k-steps of a tile unrolled by a fold (ladder_static_for) instead of #pragma unroll, which
//   nvcc honours only 8 steps at a time at BK = 32 (the SASS keeps an inner loop and its branch).
//   At BK <= 16 both give straight-line code.
// ---------------------------------------------------------------------------------------------
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int STAGES>
struct Sgemm10Shape {
    static constexpr int T = (BM / WM) * (BN / WN) * 32;
    static constexpr int AS = BM + 4;  // padded row of the transposed A tile
    static constexpr int A_TILE = BK * AS, B_TILE = BK * BN;
    static constexpr size_t SMEM = (size_t)STAGES * (A_TILE + B_TILE) * sizeof(float);
    static constexpr int MINB = T >= 256 ? 1 : 256 / T;
};

#ifdef CUDALAB_TIMELINE
// The opt-in block timeline of 10/11's kernel (`make EXTRA_NVCCFLAGS=-DCUDALAB_TIMELINE`, then
// `matmul --timeline`): for each block of the launch, 4 words: its start, the end of its main loop
// and its end (%globaltimer, ns; thread 0's view), and smid | role << 8 | tile << 32, role 0 whole
// tile, 1 head, 2 rest, 3 equal slice. It is a separate build because a value live across the main
// loop moves ptxas's schedule (measured: 1-2.6% at 8192³), so the default build carries none of it.
constexpr int kLadderTimelineBlocks = 16384;
__device__ unsigned long long ladder_timeline[4 * kLadderTimelineBlocks];
struct LadderSpan {
    unsigned long long t0, t1 = 0, info = 0;
    __device__ LadderSpan() : t0(tc::globaltimer_ns()) {}
    __device__ void loop_done(unsigned role, unsigned tile) {
        t1 = tc::globaltimer_ns();
        info = tc::smid() | role << 8 | (unsigned long long)tile << 32;
    }
    __device__ ~LadderSpan() {  // every return path of the kernel passes here
        const unsigned long long b =
            blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
        if (threadIdx.x != 0 || b >= kLadderTimelineBlocks) return;
        unsigned long long *w = ladder_timeline + 4 * b;
        w[0] = t0, w[1] = t1, w[2] = tc::globaltimer_ns(), w[3] = info;
    }
};
#endif

// f(std::integral_constant<int, I>{}) for I = 0, 1, ...: a loop unrolled by construction.
template <class F, int... I>
__device__ __forceinline__ void ladder_static_for(F &&f, std::integer_sequence<int, I...>) {
    (f(std::integral_constant<int, I>{}), ...);
}
// The value of a loop index that is an int or such a std::integral_constant.
__device__ __forceinline__ int ladder_index(int i) { return i; }
template <int I>
__device__ __forceinline__ int ladder_index(std::integral_constant<int, I>) { return I; }

// Component c (0-3) of a float4, for unrolled loops (c is a compile-time constant there).
__device__ __forceinline__ float ladder_f4(const float4 &v, int c) {
    return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}

template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int STAGES, int SPLIT, bool VEC, bool CF = false>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, Sgemm10Shape<BM, BN, BK, WM, WN, TM, TN, STAGES>::MINB)
    sgemm_10_regtile(const LadderArgs p) {
#ifdef CUDALAB_TIMELINE
    LadderSpan span;
#endif
    using S = Sgemm10Shape<BM, BN, BK, WM, WN, TM, TN, STAGES>;
    constexpr int T = S::T, AS = S::AS;
    constexpr int LM = WM / TM, LN = WN / TN;  // the warp's lanes as an LM × LN grid
    constexpr int GM = TM / 4, GN = TN / 4;    // 16-byte chunks in a thread's A and B fragments
    static_assert(TM % 4 == 0 && TN % 4 == 0 && LM * LN == 32, "a warp's lanes tile its warp tile in 4-wide chunks");
    static_assert(BK % 4 == 0 && STAGES >= 2, "float4 along k; at least double buffering");
    static_assert((BM * BK) % T == 0 && (BK * BN / 4) % T == 0, "tiles load in whole rounds");
    extern __shared__ __align__(16) float ladder_smem[];
    float *As = ladder_smem;                       // STAGES × [BK][BM + 4]
    float *Bs = ladder_smem + STAGES * S::A_TILE;  // STAGES × [BK][BN]
    const int m = p.m, n = p.n, k = p.k;
    const float *__restrict__ A = p.A + blockIdx.z * p.stride_a;
    const float *__restrict__ B = p.B + blockIdx.z * p.stride_b;
    float *__restrict__ C = p.C + blockIdx.z * p.stride_c;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / (BN / WN), wn = warp % (BN / WN);
    const int tm = lane / LN, tn = lane % LN;
    const int a_off = wm * WM + tm * 4, b_off = wn * WN + tn * 4;
    // The block's output tile and its k-tiles [kt0, kt0 + ktiles) (11_splitk_tail: see LadderArgs).
    int by = blockIdx.y, bx = blockIdx.x, kt0 = 0, ktiles = (int)cdiv(k, BK);
    bool partial = false;  // true: add alpha·(this slice's sum) into C instead of storing
    // SPLIT 2, the uneven cut: the tail tile j this block is the head (rest) of. It is a template
    // value of its own so that SPLIT 1 (equal slices) compiles to the code it had before the cut
    // existed: one more live value in the main loop moved ptxas's schedule and cost 1-2.6% at 8192³
    // on some H100s and H200s (bench/results/h100/NOTES-matmul.md).
    int head = -1, rest = -1, tail = 0;
    if constexpr (SPLIT == 2) {
        int tile = blockIdx.x;
        tail = (int)((gridDim.x - (unsigned)p.dp_tiles) / 2);
        if (tile >= p.dp_tiles + tail) {
            rest = tile - p.dp_tiles - tail, tile = p.dp_tiles + rest, kt0 = p.kt_big, ktiles -= p.kt_big;
        } else if (tile >= p.dp_tiles) {
            head = tile - p.dp_tiles, ktiles = p.kt_big;
        }
        by = tile / p.tiles_n;
        bx = tile % p.tiles_n;
    } else if constexpr (SPLIT == 1) {
        int tile = blockIdx.x;
        if (tile >= p.dp_tiles) {
            const int piece = tile - p.dp_tiles, part = piece % p.splits;
            tile = p.dp_tiles + piece / p.splits;
            const int kt_all = ktiles;
            kt0 = (int)((long long)part * kt_all / p.splits);
            ktiles = (int)((long long)(part + 1) * kt_all / p.splits) - kt0;
            partial = true;
        }
        by = tile / p.tiles_n;
        bx = tile % p.tiles_n;
    }
    const int row0 = by * BM, col0 = bx * BN;

    // The copies, as 08's: one column of the tile per thread, its rows A_ROWS (B_ROWS) apart. Why
    // 08's load_tile is repeated below instead of shared: the two moved into one __device__ function
    // measured 6% slower on the H100 (10_regtile-128x256x16: 46.8 against 49.9 TFLOP/s at 4096^3;
    // ptxas allocated the kernels' registers differently), so each kernel keeps its own lambda.
    static_assert(T % BK == 0 && T % (BN / 4) == 0 && T % BN == 0, "a thread's copies keep one column");
    static_assert((BM * BK) / T <= 32, "one bit per A copy");
    constexpr int A_ROWS = T / BK;
    constexpr int B_ROWS = VEC ? T / (BN / 4) : T / BN;
    constexpr int B_N = VEC ? (BK * BN / 4) / T : (BK * BN) / T;
    static_assert(!CF || (BK % 8 == 0 && (T / 32) % (BK / 8) == 0 && BM % 32 == 0),
                  "CF: a warp copies 4 rows x 8 k; the warps cover the tile's k-groups evenly");
    // Row and column (k) of this thread's first A copy; CF: see the header comment.
    const int a_r = CF ? (warp / (BK / 8)) * 4 + lane / 8 : tid / BK;
    const int a_c = CF ? (warp % (BK / 8)) * 8 + lane % 8 : tid % BK;
    const int b_r = VEC ? tid / (BN / 4) : tid / BN, b_c = VEC ? (tid % (BN / 4)) * 4 : tid % BN;
    const bool b_col_ok = col0 + b_c < n;
    unsigned a_rows_ok = 0;  // bit it: row a_r + it·A_ROWS of this block exists
#pragma unroll
    for (int it = 0; it < (BM * BK) / T; ++it) a_rows_ok |= (row0 + a_r + it * A_ROWS < m ? 1u : 0u) << it;
    const float *a_src = A + (size_t)min(row0 + a_r, m - 1) * k + a_c;  // k-tile 0; + BK per k-tile
    const float *b_src = B + (size_t)b_r * n + min(col0 + b_c, n - 1);  // k-tile 0; + BK·n per k-tile
    const bool block_inside = row0 + BM <= m && col0 + BN <= n;
    // Enqueue the block's t-th k-tile into buffer `s`; outside the matrices zero-filled (08's comment).
    auto load_tile = [&](int s, int t) {
        const int k0 = (kt0 + t) * BK;
        float *as = As + s * S::A_TILE + a_c * AS + a_r, *bs = Bs + s * S::B_TILE + b_r * BN + b_c;
        const float *ap = a_src + k0, *bp = b_src + (size_t)k0 * n;
        if (block_inside && k0 + BK <= k) {
#pragma unroll
            for (int it = 0; it < (BM * BK) / T; ++it) ladder_cp_async4_in(as + it * A_ROWS, ap + (size_t)it * A_ROWS * k);
#pragma unroll
            for (int it = 0; it < B_N; ++it) {
                if constexpr (VEC)
                    ladder_cp_async16_in(bs + it * B_ROWS * BN, bp + (size_t)it * B_ROWS * n);
                else
                    ladder_cp_async4_in(bs + it * B_ROWS * BN, bp + (size_t)it * B_ROWS * n);
            }
            return;
        }
        const bool a_k_ok = k0 + a_c < k;
#pragma unroll
        for (int it = 0; it < (BM * BK) / T; ++it) {
            const bool ok = a_k_ok && ((a_rows_ok >> it) & 1u);
            ladder_cp_async4(as + it * A_ROWS, ok ? ap + (size_t)it * A_ROWS * k : A, ok);
        }
#pragma unroll
        for (int it = 0; it < B_N; ++it) {
            const bool ok = b_col_ok && k0 + b_r + it * B_ROWS < k;
            if constexpr (VEC)
                ladder_cp_async16(bs + it * B_ROWS * BN, ok ? bp + (size_t)it * B_ROWS * n : B, ok);
            else
                ladder_cp_async4(bs + it * B_ROWS * BN, ok ? bp + (size_t)it * B_ROWS * n : B, ok);
        }
    };

    float acc[TM][TN] = {};
    float4 fa[2][GM], fb[2][GN];  // fragments of the step being multiplied and of the next one
    // A thread's fragments of step kk of the tile in buffer s, into register set `r`.
    auto load_frags = [&](int r, int s, int kk) {
        const float *as = As + s * S::A_TILE + kk * AS + a_off;
        const float *bs = Bs + s * S::B_TILE + kk * BN + b_off;
#pragma unroll
        for (int g = 0; g < GM; ++g) fa[r][g] = *reinterpret_cast<const float4 *>(as + g * (4 * LM));
#pragma unroll
        for (int g = 0; g < GN; ++g) fb[r][g] = *reinterpret_cast<const float4 *>(bs + g * (4 * LN));
    };

    // Prologue: STAGES-1 tiles in flight (every step commits one group, empty past the last tile,
    // so "at most STAGES-2 groups pending" always means "the next tile has landed").
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_tile(s, s);
        ladder_cp_async_commit();
    }
    if (ktiles > 0) {
        ladder_cp_async_wait<STAGES - 2>();
        // Tile 0 has landed for every thread's copies.
        __syncthreads();
        load_frags(0, 0, 0);
    }
    int s_use = 0, s_load = STAGES - 1;  // buffers of tile t and of tile t + STAGES - 1
    for (int t = 0; t < ktiles; ++t) {
        // Buffer s_load held tile t-1: every thread read its last fragments before the barrier
        // that preceded this tile's first fragments, so it can be refilled now.
        if (t + STAGES - 1 < ktiles) load_tile(s_load, t + STAGES - 1);
        ladder_cp_async_commit();
        s_load = s_load + 1 == STAGES ? 0 : s_load + 1;
        const int s_next = s_use + 1 == STAGES ? 0 : s_use + 1;
        // Step kk of the tile (kk: an int, or a std::integral_constant where CF unrolls by a fold).
        auto kstep = [&](auto kk_c) {
            const int kk = ladder_index(kk_c);
            const int cur = kk % 2, nxt = (kk + 1) % 2;
            if (kk + 1 < BK) {
                load_frags(nxt, s_use, kk + 1);
            } else if (t + 1 < ktiles) {
                ladder_cp_async_wait<STAGES - 2>();
                // Tile t+1 has landed for every thread's copies, and every thread holds tile t's
                // last fragments in registers: from here on, tile t's buffer may be refilled.
                __syncthreads();
                load_frags(nxt, s_next, 0);
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                const float a = ladder_f4(fa[cur][i / 4], i % 4);
#pragma unroll
                for (int jj = 0; jj < TN; ++jj) {
                    const int j = (i % 2) ? TN - 1 - jj : jj;  // serpentine: see the header comment
                    acc[i][j] = fmaf(a, ladder_f4(fb[cur][j / 4], j % 4), acc[i][j]);
                }
            }
        };
        if constexpr (CF) {
            ladder_static_for(kstep, std::make_integer_sequence<int, BK>{});
        } else {
#pragma unroll
            for (int kk = 0; kk < BK; ++kk) kstep(kk);
        }
        s_use = s_next;
    }
    ladder_cp_async_wait<0>();  // only empty groups can remain; leave none behind
#ifdef CUDALAB_TIMELINE
    span.loop_done(partial ? 3u : head >= 0 ? 1u : rest >= 0 ? 2u : 0u, (unsigned)(by * (SPLIT ? p.tiles_n : (int)gridDim.x) + bx));
#endif
    if (SPLIT == 1 && partial) {
        // Several blocks own slices of this tile's k: each adds its part (C was zeroed before).
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int r = row0 + a_off + (i / 4) * (4 * LM) + i % 4;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int c = col0 + b_off + (j / 4) * (4 * LN) + j % 4;
                if (r < m && c < n) atomicAdd(C + (size_t)r * n + c, p.alpha * acc[i][j]);
            }
        }
        return;
    }
    if constexpr (SPLIT == 2) if (head >= 0 || rest >= 0) {
        // The hand-over of LadderArgs: the first of the tile's two pieces to get here parks its sums,
        // the last adds them. The partials keep each thread's accumulators in its own order, float4 c
        // of thread tid at c·T + tid: whole-warp 512-byte runs, and no index arithmetic on C's edges.
        const int j = head >= 0 ? head : rest;
        // Thread 0 takes the ticket; the barrier's OR hands its answer to the whole block.
        const bool first = __syncthreads_or(tid == 0 && atomicAdd(p.flags + j, 1u) == 0u) != 0;
        float4 *ws = reinterpret_cast<float4 *>(p.partials) + (size_t)j * (BM * BN / 4) + tid;
        if (first) {
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int h = 0; h < GN; ++h)
                    __stcg(ws + (i * GN + h) * T,
                           make_float4(__fmul_rn(p.alpha, acc[i][4 * h]), __fmul_rn(p.alpha, acc[i][4 * h + 1]),
                                       __fmul_rn(p.alpha, acc[i][4 * h + 2]), __fmul_rn(p.alpha, acc[i][4 * h + 3])));
            // Every thread's stores, then (the barrier orders them first) one gpu-scope release.
            __syncthreads();
            if (tid == 0) tc::st_release_gpu(p.flags + tail + j, 1u);
            return;
        }
        // The other piece has arrived, so it is running its stores: this wait is a few µs at most.
        if (tid == 0)
            while (tc::ld_acquire_gpu(p.flags + tail + j) == 0u) __nanosleep(64);
        __syncthreads();
        // Four rows' partials, then those rows of C: the stores to C (which may alias the partials, as far
        // as the compiler knows) keep the next rows' loads behind them, so few registers are live here.
        // C = fl(fl(α·mine) + fl(α·theirs)), rounded step by step (__fmul_rn/__fadd_rn: no FMA contraction),
        // is the same whichever piece is last. And this epilogue decides how ptxas colours the main loop's
        // registers: with α·(mine + theirs) instead, 3337 of its 4096 FFMAs read two non-reused sources
        // from one register bank (691 now) and every tile ran 8% slower (test_sass.py counts them).
#pragma unroll
        for (int i0 = 0; i0 < TM; i0 += 4) {
            float4 v[4][GN];
#pragma unroll
            for (int ii = 0; ii < 4; ++ii)
#pragma unroll
                for (int h = 0; h < GN; ++h) v[ii][h] = __ldcg(ws + ((i0 + ii) * GN + h) * T);
#pragma unroll
            for (int ii = 0; ii < 4; ++ii) {
                const int i = i0 + ii, r = row0 + a_off + (i / 4) * (4 * LM) + i % 4;
#pragma unroll
                for (int h = 0; h < GN; ++h)
                    ladder_store4<VEC>(C, m, n, r, col0 + b_off + h * (4 * LN), 1.0f,
                                       __fadd_rn(v[ii][h].x, __fmul_rn(p.alpha, acc[i][4 * h])),
                                       __fadd_rn(v[ii][h].y, __fmul_rn(p.alpha, acc[i][4 * h + 1])),
                                       __fadd_rn(v[ii][h].z, __fmul_rn(p.alpha, acc[i][4 * h + 2])),
                                       __fadd_rn(v[ii][h].w, __fmul_rn(p.alpha, acc[i][4 * h + 3])));
            }
        }
        if (tid == 0) p.flags[j] = 0u, p.flags[tail + j] = 0u;  // kernels on the stream run in order
        return;
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + a_off + (i / 4) * (4 * LM) + i % 4;
#pragma unroll
        for (int h = 0; h < GN; ++h)
            ladder_store4<VEC>(C, m, n, r, col0 + b_off + h * (4 * LN), p.alpha, acc[i][4 * h], acc[i][4 * h + 1],
                               acc[i][4 * h + 2], acc[i][4 * h + 3]);
    }
}

// ---------------------------------------------------------------------------------------------
// 11_splitk_tail
//   Change: 10's kernel on a 1-D grid whose last, partly filled wave is split along k. With P
//   blocks resident at once (SMs × blocks per SM) and N output tiles, the first N - N mod P tiles
//   run whole, as in 10; each of the N mod P tiles left is cut as matmul.cu's tail_plan says, one
//   block a piece. Either into s equal slices of its k-tiles (the s <= 16 that finishes the tail
//   soonest, counting each slice's measured cost), which add their sums into C (atomicAdd; the rows
//   of C holding those tiles are zeroed first). Or, when the tail fills more than half the slots,
//   into two uneven pieces: a long head and a short rest per tail tile, handed out after the whole
//   tiles (grid [whole | heads | rests]): the first slots to free up take the heads, the
//   last ones several rests each, and the second piece of a tile to finish adds the first's parked
//   sums (LadderArgs; the SPLIT = 2 instantiation). 4096³: 116 heads of 116 of 128 k-tiles and 116
//   rests of 12 on 16 SMs: the timeline's makespan 2656 µs against 2808 for the first order and a
//   perfect balance of 2621 (bench/results/h100/NOTES-matmul.md).
//   Sizes whose whole grid is one partial wave (N < P: the small sizes) are all tail. Where
//   nothing pays, nothing is split and 11 runs as 10.
//   Why: 10's 256×128 tiles leave waves partly idle. 5120×256×5120 is 800 tiles for 132 SMs:
//   6 full waves and one of 8 tiles, i.e. 7 waves' time for 6.06 waves' work (87 %); with the 8
//   tail tiles cut 16 ways along their 16 k-tiles the last wave is 128 blocks of one k-tile each,
//   ~1/16 of a wave. 1024³ is 32 tiles for 132 SMs (24 %): split 4 ways, 128 blocks. The price is
//   a memset of the tail rows and k-slice sums that meet in C in whatever order the atomics land
//   (the tail tiles are not bit-reproducible run to run; still a float32 sum of k products). The
//   two uneven pieces need neither: the second to finish adds the first's parked sums, and the sum
//   is the same whichever that is.
// The host (ladder_run) picks dp_tiles, splits and kt_big; batch > 1 runs unsplit.
// ---------------------------------------------------------------------------------------------
