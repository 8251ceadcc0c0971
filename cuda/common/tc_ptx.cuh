// tc_ptx.cuh: the one header of named inline-PTX helpers for tensor-core kernels (gemm_tc,
// attention's BF16 path). Every asm block in the lab lives here, each behind a small function with
// a one-line comment naming the PTX instruction and, for MMA operands, the fragment layout.
//
// Fragment notation used below, for one warp (lane = threadIdx.x % 32):
//   g = lane / 4 (the "group", 0..7), t = lane % 4 (the thread in the group, 0..3).
//   A bf16x2 register holds two consecutive elements of a row: the lower-numbered column in the low
//   16 bits (that is how memory lays them out, so a 32-bit load of two bf16 gives the right pair).
//
// Sections: Ampere (sm_80+: cp.async, ldmatrix, mma.sync) and Hopper (sm_90a: mbarrier, TMA,
// wgmma, setmaxnreg), the latter only where the compiler targets sm_90a.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace tc {

// ---- addresses ---------------------------------------------------------------------------------
// PTX's .shared instructions take a 32-bit shared-window address, not a generic pointer.
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// ================================================================================================
// Ampere (sm_80 and newer)
// ================================================================================================
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

// ---- cp.async: global -> shared without passing through registers -------------------------------
// cp.async.cg.shared.global [dst], [src], 16: one 16-byte copy, cached in L2 only (.cg), asynchronous
// until a later wait_group. dst and src must be 16-byte aligned.
__device__ __forceinline__ void cp_async_16(uint32_t dst_smem, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst_smem), "l"(src) : "memory");
}

// cp.async.cg.shared.global [dst], [src], 16, src_bytes: copies src_bytes (0..16) and zero-fills the
// rest of the 16 bytes. For ragged tails: src_bytes = 0 writes 16 zero bytes and reads nothing (src
// must still be a valid-looking address; pass the tensor's base pointer).
__device__ __forceinline__ void cp_async_16_zfill(uint32_t dst_smem, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_smem), "l"(src), "r"(src_bytes)
                 : "memory");
}

// cp.async.commit_group: close the group of cp.async issued since the last commit (one pipeline stage).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// cp.async.wait_group N: wait until at most N committed groups are still in flight (N = stages - 2
// in a multi-stage pipeline). Only this thread's copies: follow with __syncthreads() to publish.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- ldmatrix: shared -> registers in MMA fragment order -----------------------------------------
// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 b16 matrices. Lanes 8i..8i+7 give the row
// addresses (16 bytes each) of matrix i; every lane gets r[i] = matrix i's (row g, cols 2t, 2t+1).
// For an A tile (16x16, row-major, K contiguous): lane l points at row (l % 16), col 8 * (l / 16);
// then r[0..3] are exactly mma m16n8k16's a0..a3.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// ldmatrix.sync.aligned.m8n8.x2.shared.b16: two 8x8 matrices, addresses from lanes 0..15 (the
// others' are ignored but must be valid). For a B tile stored N x K (K contiguous, the "col" operand):
// lane l points at n-row (l % 8), col 8 * ((l / 8) % 2); r[0..1] are mma m16n8k16's b0, b1.
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: as ldmatrix_x4 but each 8x8 matrix is transposed on
// the way: lane gets matrix i's (rows 2t, 2t+1; col g). For a B tile stored K x N (N contiguous):
// rows given are k-rows, and the result is the "col" B fragment (b0, b1) of two n8 tiles.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16: two transposed 8x8 matrices (addresses from lanes
// 0..15): from a K x N tile (k-rows 0..15 at one n8 column block), r[0..1] are b0, b1 of one n8 tile.
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

// ---- mma.sync ----------------------------------------------------------------------------------
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: D(16x8, f32) = A(16x16, bf16) * B(16x8, bf16) + C.
//   a[0] = A(g,   2t..2t+1)   a[1] = A(g+8, 2t..2t+1)   a[2] = A(g, 2t+8..2t+9)   a[3] = A(g+8, 2t+8..)
//   b[0] = B(k = 2t..2t+1, n = g)                       b[1] = B(k = 2t+8..2t+9, n = g)
//   c[0], c[1] = C(g, 2t), C(g, 2t+1)                   c[2], c[3] = C(g+8, 2t), C(g+8, 2t+1)
// d may alias c (accumulate in place).
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                  const float (&c)[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
}

// ---- conversions and math ----------------------------------------------------------------------
// cvt.rn.bf16x2.f32 d, hi, lo: round two floats to nearest-even bf16 and pack them; `lo` lands in the
// low 16 bits (the lower column), so an accumulator pair (c[0], c[1]) packs as pack_bf16x2(c[0], c[1])
// and is then an A-fragment register (flash attention's P = softmax(S) re-used as an MMA operand).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// ex2.approx.ftz.f32: 2^x in one MUFU instruction (softmax as exp2 with log2(e) folded into the scale).
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

#endif  // sm_80+

// ---- shared-memory swizzle (plain C++, any architecture) -----------------------------------------
// Why: ldmatrix reads 8 rows of 16 bytes per 8x8 matrix in one phase. With rows of 128 bytes
// (64 bf16) all 8 rows' chunk c start in the same 4 banks: an 8-way conflict. XOR-ing the 16-byte
// chunk index with the row spreads them over all 32 banks, and cp.async writes (16-byte chunks)
// stay conflict-free too. Both writers and readers must use the same function.
//
// swizzle_128b(row, chunk): rows of 128 bytes = 8 chunks of 16 bytes; chunk' = chunk ^ (row % 8).
// This is the pattern TMA's CU_TENSOR_MAP_SWIZZLE_128B writes (for a 1024-byte-aligned tile), so an
// Ampere kernel and a Hopper one can share the address math. Returns the byte offset in the tile.
__host__ __device__ __forceinline__ uint32_t swizzle_128b(uint32_t row, uint32_t chunk) {
    return row * 128u + ((chunk ^ (row & 7u)) << 4);
}
// swizzle_64b(row, chunk): rows of 64 bytes = 4 chunks; two rows share one 128-byte bank line, so
// the XOR uses row / 2: chunk' = chunk ^ ((row / 2) % 4). Rows 0..7 at one logical chunk then land
// in 8 distinct 16-byte bank groups. (TMA's SWIZZLE_64B pattern.)
__host__ __device__ __forceinline__ uint32_t swizzle_64b(uint32_t row, uint32_t chunk) {
    return row * 64u + ((chunk ^ ((row >> 1) & 3u)) << 4);
}

}  // namespace tc
