// softmax: row-wise softmax of a float32 rows x cols matrix, five rungs. See softmax.h for the contract of
// each entry point.
//
// Every rung is numerically stable: it subtracts the row's maximum before exponentiating, so the largest
// exponent is exp(0) = 1 and a row whose scores reach +1000 cannot overflow (expf(1000) is +inf in float32,
// and inf / inf is NaN). The terms far below the maximum underflow to 0, which is their right value to
// float32 precision.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "check.cuh"
#include "softmax.h"

namespace {

const char *const kVariants[] = {"01_naive", "02_block_row", "03_warp_row", "04_online", "05_fused_scale"};
const int kNumVariants = (int)(sizeof(kVariants) / sizeof(kVariants[0]));
enum { kNaive, kBlockRow, kWarpRow, kOnline, kFusedScale };

int variant_id(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < kNumVariants; ++i)
        if (strcmp(name, kVariants[i]) == 0) return i;
    return -1;
}

const int kNaiveThreads = 128;     // 01: threads (= rows) per block
const int kBlockRowThreads = 256;  // 02 and 04: threads sharing one row (a power of two: the trees halve it)
const int kWarpRowWarps = 4;       // 03: rows (= warps) per block
const int kWarpRegs = 32;          // 03: values a lane keeps in registers, so rows of up to 32 * 32 = 1024
const int kFusedVec = 4;           // 05: float4s a thread keeps in registers (16 floats)
const int kFusedMaxThreads = 1024; // 05: threads per row at most, so rows of up to 1024 * 16 = 16384 in registers
const int kFusedMinBlock = 256;    // 05: short rows share a block, so a block is never smaller than this

}  // namespace

// The kernels sit outside the anonymous namespace, so that profilers show their plain names.

// 01_naive: one thread per row, three passes over the row. The simplest correct stable softmax: a
// running maximum, then the sum of exp(x - max), then each output. It is slow for two reasons that the
// later rungs remove one by one: neighbouring threads read addresses `cols` floats apart (a warp's load
// touches 32 different rows: no coalescing), and a 4096-row matrix is only 4096 threads, a few per SM.
__global__ void softmax_01_naive(const float *__restrict__ x, float *__restrict__ out, long long rows,
                                 long long cols) {
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *in = x + row * cols;
    float *o = out + row * cols;
    float m = -INFINITY;
    for (long long c = 0; c < cols; ++c) m = fmaxf(m, in[c]);
    float sum = 0.0f;
    for (long long c = 0; c < cols; ++c) sum += expf(in[c] - m);  // every term <= 1: nothing overflows
    const float inv = 1.0f / sum;                                  // sum >= 1: the maximum's own term
    for (long long c = 0; c < cols; ++c) o[c] = expf(in[c] - m) * inv;
}

// EXERCISE softmax_row: copy
// 02_block_row: one block per row. The block's threads read the row in strides of blockDim.x, so a
// warp's 32 loads are 32 consecutive floats (coalesced), and every row is a block: 4096 rows fill the GPU.
// Each reduction is a tree in shared memory: half the threads add the other half's values, then a
// quarter, ..., log2(blockDim.x) steps with a barrier after each. blockDim.x must be a power of two.
// The row is still read three times, but the second and third reads find it in L1: a 16 KB row is
// read again right after the first pass, before other rows push it out.
__global__ void softmax_02_block_row(const float *__restrict__ x, float *__restrict__ out, long long rows,
                                     long long cols) {
    extern __shared__ float red[];  // blockDim.x floats
    const long long row = blockIdx.x;
    const int t = threadIdx.x;
    const float *in = x + row * cols;
    float *o = out + row * cols;

// EXERCISE softmax_row: begin m = the row's max: each thread's max over its columns c = t, t + blockDim.x, ...
// EXERCISE softmax_row: todo (c < cols; a thread with no column must not change the max: start from the identity of
// EXERCISE softmax_row: todo max); then a tree in red[]: red[t] = m, and for half = blockDim.x / 2, ..., 1 the threads
// EXERCISE softmax_row: todo t < half keep the larger of red[t] and red[t + half], a __syncthreads() before the tree
// EXERCISE softmax_row: todo and after each step; m = red[0], and one more barrier before red[] is reused below.
    float m = -INFINITY;  // a thread with no column (cols < blockDim.x) adds nothing to the max
    for (long long c = t; c < cols; c += blockDim.x) m = fmaxf(m, in[c]);
    red[t] = m;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) red[t] = fmaxf(red[t], red[t + half]);
        __syncthreads();  // this step's results are the next step's inputs
    }
    m = red[0];
    __syncthreads();  // everyone has read the max before red[] is reused for the sums
// EXERCISE softmax_row: stub float m = 0.0f;
// EXERCISE softmax_row: end

// EXERCISE softmax_row: begin inv = 1 / the row's sum of expf(in[c] - m): each thread's sum over its columns, then
// EXERCISE softmax_row: todo the same tree over red[] with + in place of the max, and inv from red[0].
    float sum = 0.0f;
    for (long long c = t; c < cols; c += blockDim.x) sum += expf(in[c] - m);
    red[t] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) red[t] += red[t + half];
        __syncthreads();
    }
    const float inv = 1.0f / red[0];
// EXERCISE softmax_row: stub const float inv = 0.0f;
// EXERCISE softmax_row: end

// EXERCISE softmax_row: begin the normalised write: o[c] = expf(in[c] - m) * inv for each of this thread's columns.
    for (long long c = t; c < cols; c += blockDim.x) o[c] = expf(in[c] - m) * inv;
// EXERCISE softmax_row: end
}
// EXERCISE softmax_row: end copy

// 03_warp_row: one warp (32 threads) per row. A warp's lanes exchange registers directly with
// __shfl_xor_sync: after 5 butterfly steps (16, 8, 4, 2, 1 lanes apart) every lane holds the warp's max
// (or sum). No shared memory and no __syncthreads: the lanes of a warp are already together.
// Rows of up to 32 * kWarpRegs = 1024 floats stay in registers, so the row is read from memory ONCE
// (one read, one write: the least traffic a softmax can move). Longer rows are looped over three times,
// as in 02, with shuffles for the reductions.
__global__ void softmax_03_warp_row(const float *__restrict__ x, float *__restrict__ out, long long rows,
                                    long long cols) {
    const int lane = threadIdx.x % 32;
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;  // a whole warp leaves together: the shuffles below see all 32 lanes
    const float *in = x + row * cols;
    float *o = out + row * cols;

    if (cols <= 32 * kWarpRegs) {
        float v[kWarpRegs];  // lane's values: columns lane, lane + 32, lane + 64, ...
        float m = -INFINITY;
#pragma unroll  // every index is a constant, so v[] lives in registers (a variable index would put it in memory)
        for (int i = 0; i < kWarpRegs; ++i) {
            const int c = i * 32 + lane;
            v[i] = c < cols ? in[c] : -INFINITY;  // -inf: exp(-inf - m) = 0 below, no test needed there
            m = fmaxf(m, v[i]);
        }
        for (int d = 16; d > 0; d /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < kWarpRegs; ++i) {
            v[i] = expf(v[i] - m);
            sum += v[i];
        }
        for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
        const float inv = 1.0f / sum;
#pragma unroll
        for (int i = 0; i < kWarpRegs; ++i) {
            const int c = i * 32 + lane;
            if (c < cols) o[c] = v[i] * inv;
        }
        return;
    }

    float m = -INFINITY;
    for (long long c = lane; c < cols; c += 32) m = fmaxf(m, in[c]);
    for (int d = 16; d > 0; d /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
    float sum = 0.0f;
    for (long long c = lane; c < cols; c += 32) sum += expf(in[c] - m);
    for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    const float inv = 1.0f / sum;
    for (long long c = lane; c < cols; c += 32) o[c] = expf(in[c] - m) * inv;
}

// EXERCISE softmax_online: copy
// Online softmax's merge of two partial results. (m, d) stands for the values seen so far: m their
// maximum, d = sum of 2^((y - m) * log2 e). Two such pairs combine by rescaling each sum to the larger
// maximum. A pair with no values yet is (-inf, 0); two of those stay (-inf, 0) (the guard keeps
// -inf - -inf = NaN out of the sum).
__device__ __forceinline__ void softmax_merge(float &m, float &d, float m2, float d2) {
// EXERCISE softmax_online: begin merge (m2, d2) into (m, d): the larger max wins, and each sum, taken relative to
// EXERCISE softmax_online: todo its own max, is brought to the merged one by exp(its max - the merged max) (exp(z) is
// EXERCISE softmax_online: todo exp2f(z * CUDALAB_LOG2E) in this kernel). Two empty pairs (-INFINITY, 0) stay as they
// EXERCISE softmax_online: todo are: -inf - -inf is NaN.
    const float mm = fmaxf(m, m2);
    if (mm == -INFINITY) return;
    d = d * exp2f((m - mm) * CUDALAB_LOG2E) + d2 * exp2f((m2 - mm) * CUDALAB_LOG2E);
    m = mm;
// EXERCISE softmax_online: end
}

// 04_online: the online softmax (Milakov and Gimelshein, 2018): ONE pass finds the max and the sum
// together. Each thread keeps a running max m and a sum d of exp(y - m); when a larger value arrives,
// the sum so far is rescaled by exp(m_old - m_new) instead of being recomputed. This is the trick that
// lets flash attention softmax a row it only ever sees a tile at a time. The block's pairs then merge in
// a shared-memory tree as in 02 (one tree instead of two), and a second pass writes the outputs: two
// reads of the row instead of three. exp(y - m) is computed as exp2((y - m) * log2 e): ex2 is the GPU's
// hardware exponential, and the subtraction comes first so that it is exact for values near the max.
// `scale` multiplies x first (fused into one FMA with the subtraction); 04 passes 1, and 05 reuses this
// kernel for rows too long for its registers. blockDim.x must be a power of two.
__global__ void softmax_04_online(const float *__restrict__ x, float *__restrict__ out, long long rows,
                                  long long cols, float scale) {
    extern __shared__ float pairs[];  // blockDim.x maxima, then blockDim.x sums
    float *red_m = pairs, *red_d = pairs + blockDim.x;
    const long long row = blockIdx.x;
    const int t = threadIdx.x;
    const float *in = x + row * cols;
    float *o = out + row * cols;

// EXERCISE softmax_online: begin the running pair of a thread that has seen no column yet: m, the max so far,
// EXERCISE softmax_online: todo must be below every value; d, the sum so far, is empty.
    float m = -INFINITY, d = 0.0f;
// EXERCISE softmax_online: stub float m = 0.0f, d = 0.0f;
// EXERCISE softmax_online: end
    for (long long c = t; c < cols; c += blockDim.x) {
        const float xc = in[c];
        const float y = scale * xc;
// EXERCISE softmax_online: begin fold y into (m, d): when y is a new max, what d summed under the old max shrinks by
// EXERCISE softmax_online: todo exp(m_old - m_new), and m = y; then add this column's term exactly as the write pass
// EXERCISE softmax_online: todo below computes it (exp(z) is exp2f(z * CUDALAB_LOG2E) in this kernel).
        if (y > m) {  // a new maximum: the terms summed so far were relative to the old one, so they shrink
            d *= exp2f((m - y) * CUDALAB_LOG2E);  // by exp(m_old - m_new); the first time, m = -inf and d = 0
            m = y;
        }
        // The term as the write pass will compute it (the same FMA), so that d is exactly their sum.
        d += exp2f(fmaf(scale, xc, -m) * CUDALAB_LOG2E);
// EXERCISE softmax_online: end
    }
    red_m[t] = m;
    red_d[t] = d;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) {
            float mm = red_m[t], dd = red_d[t];
            softmax_merge(mm, dd, red_m[t + half], red_d[t + half]);
            red_m[t] = mm;
            red_d[t] = dd;
        }
        __syncthreads();
    }
    m = red_m[0];
    const float inv = 1.0f / red_d[0];
    for (long long c = t; c < cols; c += blockDim.x) o[c] = exp2f(fmaf(scale, in[c], -m) * CUDALAB_LOG2E) * inv;
}
// EXERCISE softmax_online: end copy

// The maximum (or sum) of one row's value from each of the `warps` warps that share the row, `part`
// holding each warp's own result at [warp]; every thread gets the answer. The barrier makes the warps'
// writes visible; the reads are broadcasts (all lanes read one address).
__device__ __forceinline__ float softmax_row_max(float v, float *part, int warp, int warps) {
    for (int d = 16; d > 0; d /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    if (warps == 1) return v;
    if (threadIdx.x % 32 == 0) part[warp] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < warps; ++w) v = fmaxf(v, part[w]);
    return v;
}

__device__ __forceinline__ float softmax_row_sum(float v, float *part, int warp, int warps) {
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    if (warps == 1) return v;
    if (threadIdx.x % 32 == 0) part[warp] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < warps; ++w) v += part[w];
    return v;
}

// 05_fused_scale: softmax(scale * x), the form attention uses (scale = 1/sqrt(head dim)), with the scale
// folded into the exponent's FMA instead of a separate pass over x. blockDim.x threads (a power of two,
// >= 32) share a row, blockDim.y rows share a block, and each thread keeps up to kFusedVec float4s of its
// row in registers: the row is read from DRAM once, in 16-byte loads (all of a thread's loads issued
// before the first is used), and written once. Reductions: shuffles within a warp, then one small shared
// array across the row's warps, with separate arrays for the max and the sum so that no barrier is needed
// between them. `vec` is 0 when rows are not 16-byte aligned (cols % 4 != 0 or a misaligned pointer):
// then each thread holds the same number of scalars, read at strides of blockDim.x (still coalesced).
// Rows past the end still reach every barrier: only their loads and stores are switched off.
// __launch_bounds__(1024): registers capped so that a 1024-thread block (rows of 8193-16384) can launch.
__global__ void __launch_bounds__(1024) softmax_05_fused_scale(const float *__restrict__ x, float *__restrict__ out,
                                                               long long rows, long long cols, float scale, int vec) {
    __shared__ float part_m[32], part_d[32];  // [row in block * warps per row + warp]
    const int t = threadIdx.x, tx = blockDim.x;
    const int warps = tx / 32, warp = t / 32;
    const long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y;
    const bool live = row < rows;
    const float *in = x + (live ? row : 0) * cols;
    float *o = out + (live ? row : 0) * cols;

    float v[4 * kFusedVec];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kFusedVec; ++i) {
        if (vec) {
            const long long c = 4LL * ((long long)i * tx + t);
            float4 q = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
            if (live && c < cols) q = *reinterpret_cast<const float4 *>(in + c);
            v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const long long c = (long long)(4 * i + k) * tx + t;
                v[4 * i + k] = live && c < cols ? in[c] : -INFINITY;
            }
        }
    }
    // The max of scale * x (scale may be negative: then it is scale times the row's minimum).
#pragma unroll
    for (int j = 0; j < 4 * kFusedVec; ++j)
        if (v[j] != -INFINITY) m = fmaxf(m, scale * v[j]);
    m = softmax_row_max(m, part_m + threadIdx.y * warps, warp, warps);

    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 4 * kFusedVec; ++j) {
        // fmaf rounds scale * x - m once: exact enough even where scale * x is near +-1000.
        v[j] = v[j] == -INFINITY ? 0.0f : exp2f(fmaf(scale, v[j], -m) * CUDALAB_LOG2E);
        sum += v[j];
    }
    sum = softmax_row_sum(sum, part_d + threadIdx.y * warps, warp, warps);
    const float inv = 1.0f / sum;
    if (!live) return;  // after the last barrier

#pragma unroll
    for (int i = 0; i < kFusedVec; ++i) {
        if (vec) {
            const long long c = 4LL * ((long long)i * tx + t);
            if (c < cols)
                *reinterpret_cast<float4 *>(o + c) =
                    make_float4(v[4 * i] * inv, v[4 * i + 1] * inv, v[4 * i + 2] * inv, v[4 * i + 3] * inv);
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const long long c = (long long)(4 * i + k) * tx + t;
                if (c < cols) o[c] = v[4 * i + k] * inv;
            }
        }
    }
}

namespace {

// 05's threads per row: the fewest (a power of two, at least a warp) that hold the row in registers.
int fused_threads(long long cols) {
    int tx = 32;
    while ((long long)tx * 4 * kFusedVec < cols && tx < kFusedMaxThreads) tx *= 2;
    return tx;
}

bool aligned16(const void *p) { return ((uintptr_t)p % 16) == 0; }

}  // namespace

extern "C" int softmax_variant_count(void) { return kNumVariants; }

extern "C" const char *softmax_variant_name(int i) { return (i >= 0 && i < kNumVariants) ? kVariants[i] : nullptr; }

extern "C" long long softmax_register_cols(const char *variant) {
    switch (variant_id(variant)) {
        case kWarpRow: return 32LL * kWarpRegs;
        case kFusedScale: return (long long)kFusedMaxThreads * 4 * kFusedVec;
        default: return 0;
    }
}

extern "C" cudalab_status softmax_f32_dev(const char *variant, const float *d_x, float *d_out, long long rows,
                                          long long cols, float scale, void *stream) {
    const int v = variant_id(variant);
    if (v < 0 || rows < 0 || cols < 0 || rows > SOFTMAX_MAX_ROWS || cols > SOFTMAX_MAX_COLS)
        return (int)cudaErrorInvalidValue;
    if (!std::isfinite(scale) || (v != kFusedScale && scale != 1.0f)) return (int)cudaErrorInvalidValue;
    if (rows == 0 || cols == 0) return 0;
    if (d_x == nullptr || d_out == nullptr) return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (v) {
        case kNaive:
            softmax_01_naive<<<(unsigned)cdiv(rows, kNaiveThreads), kNaiveThreads, 0, s>>>(d_x, d_out, rows, cols);
            break;
        case kBlockRow:
            softmax_02_block_row<<<(unsigned)rows, kBlockRowThreads, kBlockRowThreads * sizeof(float), s>>>(
                d_x, d_out, rows, cols);
            break;
        case kWarpRow:
            softmax_03_warp_row<<<(unsigned)cdiv(rows, kWarpRowWarps), 32 * kWarpRowWarps, 0, s>>>(d_x, d_out, rows,
                                                                                                  cols);
            break;
        case kOnline:
            softmax_04_online<<<(unsigned)rows, kBlockRowThreads, 2 * kBlockRowThreads * sizeof(float), s>>>(
                d_x, d_out, rows, cols, 1.0f);
            break;
        default:
            if (cols > softmax_register_cols(variant)) {  // too long for registers: stream it, online
                softmax_04_online<<<(unsigned)rows, kBlockRowThreads, 2 * kBlockRowThreads * sizeof(float), s>>>(
                    d_x, d_out, rows, cols, scale);
            } else {
                const int tx = fused_threads(cols);
                const int ty = tx >= kFusedMinBlock ? 1 : kFusedMinBlock / tx;
                const int vec = cols % 4 == 0 && aligned16(d_x) && aligned16(d_out);
                softmax_05_fused_scale<<<(unsigned)cdiv(rows, ty), dim3(tx, ty), 0, s>>>(d_x, d_out, rows, cols, scale,
                                                                                          vec);
            }
    }
    CUDA_TRY_LAUNCH();
    return 0;
}

extern "C" cudalab_status softmax_f32(const char *variant, const float *x, float *out, long long rows, long long cols,
                                      float scale) {
    const int v = variant_id(variant);
    if (v < 0 || rows < 0 || cols < 0 || rows > SOFTMAX_MAX_ROWS || cols > SOFTMAX_MAX_COLS)
        return (int)cudaErrorInvalidValue;
    if (!std::isfinite(scale) || (v != kFusedScale && scale != 1.0f)) return (int)cudaErrorInvalidValue;
    if (rows == 0 || cols == 0) return 0;
    if (x == nullptr || out == nullptr) return (int)cudaErrorInvalidValue;
    const size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
    cudalab::DeviceAlloc dx, dout;
    if (int err = dx.upload(x, bytes)) return err;
    if (int err = dout.alloc(bytes)) return err;
    // Poisoned with NaN bytes: an output the kernel never writes cannot pass for a right one.
    CUDA_TRY(cudaMemset(dout.p, 0xFF, bytes));
    if (int err = softmax_f32_dev(variant, dx.as<float>(), dout.as<float>(), rows, cols, scale, nullptr)) return err;
    CUDA_TRY(cudaDeviceSynchronize());
    CUDA_TRY(cudaMemcpy(out, dout.p, bytes, cudaMemcpyDeviceToHost));
    return cudalab::release_all(dx, dout);
}
