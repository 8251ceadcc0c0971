// tc_ptx.cuh: the one header of named inline-PTX helpers: the tensor-core kernels (gemm_tc,
// attention's BF16 and 3xTF32 paths), and the cp.async and gpu-scope flags of matmul's SGEMM ladder.
// Every asm block in the lab lives here, each behind a small function with
// a one-line comment naming the PTX instruction and, for MMA operands, the fragment layout.
//
// Fragment notation used below, for one warp (lane = threadIdx.x % 32):
//   g = lane / 4 (the "group", 0..7), t = lane % 4 (the thread in the group, 0..3).
//   A bf16x2 register holds two consecutive elements of a row: the lower-numbered column in the low
//   16 bits (that is how memory lays them out, so a 32-bit load of two bf16 gives the right pair).
//
// Sections: Ampere (sm_80+: cp.async, ldmatrix, mma.sync), the swizzle helpers, and Hopper (sm_90a:
// mbarrier, TMA, wgmma, setmaxnreg), the latter only where the compiler targets sm_90a.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace tc {

// ---- addresses ---------------------------------------------------------------------------------
// PTX's .shared instructions take a 32-bit shared-window address, not a generic pointer.
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// ---- timestamps: matmul's opt-in block timeline (build with -DCUDALAB_TIMELINE) ----------------
// %globaltimer: the GPU's nanosecond clock, one for all SMs (clock64 is per SM and not aligned across
// them), so the blocks of one launch can be put on one time axis. %smid: the SM the block runs on.
__device__ __forceinline__ unsigned long long globaltimer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned smid() {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

// ---- gpu-scope flags: one block hands data to another (matmul 11's head -> rest) ----------------
// st.release.gpu.global.u32: this thread's earlier writes (and, after a bar.sync, its block's) are
// visible to any thread that reads v with an acquire. ld.acquire.gpu.global.u32: the reader's later
// loads see them. Before sm_70 there is no release/acquire: a fence and a volatile access do the job.
__device__ __forceinline__ void st_release_gpu(unsigned *flag, unsigned v) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(v) : "memory");
#else
    __threadfence();
    *(volatile unsigned *)flag = v;
#endif
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned *flag) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    return v;
#else
    const unsigned v = *(const volatile unsigned *)flag;
    __threadfence();
    return v;
#endif
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

// cp.async.ca.shared.global [dst], [src], 4: one 4-byte copy (cached in L1 too: .cg takes only 16
// bytes). The only width that can transpose a tile element by element (the SGEMM ladder's A tile).
__device__ __forceinline__ void cp_async_4(uint32_t dst_smem, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst_smem), "l"(src) : "memory");
}

// cp.async.ca.shared.global [dst], [src], 4, src_bytes: src_bytes 0 writes a zero and reads nothing.
__device__ __forceinline__ void cp_async_4_zfill(uint32_t dst_smem, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst_smem), "l"(src), "r"(src_bytes)
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

// ================================================================================================
// Hopper (sm_90a): mbarrier, TMA, wgmma, setmaxnreg
// ================================================================================================
// Compiled only for the architecture-specific target (nvcc -gencode arch=compute_90a,code=sm_90a),
// where __CUDA_ARCH_FEAT_SM90_ALL is defined; in every other pass these helpers do not exist, so a
// kernel using them guards its body the same way. The host side (CUtensorMap) is in the program.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---- mbarrier: a shared-memory barrier that counts arrivals and transferred bytes ---------------
// mbarrier.init.shared::cta.b64 [bar], count: `count` arrivals complete each phase.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// fence.mbarrier_init.release.cluster: make initialised barriers visible to the async proxy (TMA)
// before anyone uses them (follow with a __syncthreads()).
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes: one arrival, and the phase also waits
// for `bytes` to land through complete_tx (the TMA copies issued against this barrier).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// mbarrier.arrive.shared::cta.b64 _, [bar]: one plain arrival (a consumer releasing a stage).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// mbarrier.try_wait.parity.shared::cta.b64 p, [bar], parity: spin until the phase with this parity
// (0, 1, 0, ... for the barrier's 1st, 2nd, 3rd use) has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

// fence.proxy.async.shared::cta: order this thread's ordinary shared-memory accesses before later
// async-proxy ones (TMA, wgmma operand reads) -- needed after st.shared data the tensor cores read.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- TMA ---------------------------------------------------------------------------------------
// cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [map, {x, y}], [bar]:
// copy the box at element (x = inner/contiguous coordinate, y = row) described by the CUtensorMap
// (a __grid_constant__ kernel parameter: pass its address) into shared memory at dst (1024-byte
// aligned for 128B swizzle), laid out as the map's swizzle says; out-of-range elements arrive as 0.
// The bytes are counted on `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *tensor_map, int x, int y, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"(tensor_map), "r"(x), "r"(y), "r"(bar)
        : "memory");
}

// The 3-D form, coordinates {x, y, z} (x contiguous): attention's Q, K and V as {D, S, B*H}, so a
// box past row S of one head reads zeros instead of the next head's rows.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void *tensor_map, int x, int y, int z, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
            dst),
        "l"(tensor_map), "r"(x), "r"(y), "r"(z), "r"(bar)
        : "memory");
}

// The same copy, multicast: the box lands at the same shared-memory offset in every CTA of the
// cluster named in `cta_mask` (bit i = cluster rank i), and each destination's mbarrier at offset
// `bar` counts its bytes. A cluster that shares one operand loads it once from L2 this way.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const void *tensor_map, int x, int y, uint32_t bar,
                                                      uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"(tensor_map), "r"(x), "r"(y), "r"(bar), "h"(cta_mask)
        : "memory");
}

// ---- TMA stores (shared -> global) --------------------------------------------------------------
// cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [map, {x, y}], [src]: write the box at
// element (x, y) of the map's tensor from shared memory at src (laid out in the map's swizzle;
// 1024-byte aligned for 128B). Elements of the box past the tensor's edge are not written, so a
// ragged last tile needs no masking. Asynchronous: the issuing thread tracks it as part of its
// current bulk group (bulk_commit closes the group).
__device__ __forceinline__ void tma_store_2d(const void *tensor_map, uint32_t src, int x, int y) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(tensor_map),
                 "r"(x), "r"(y), "r"(src)
                 : "memory");
}

// cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [map, {x, y, z}], [src]: add the
// box at src (laid out in the map's swizzle) element-wise into the map's tensor at (x, y, z), in L2,
// with the map's element type (float32 for attention's dQ accumulator). Elements past the tensor's
// edge are left alone. Asynchronous, in the issuing thread's bulk group as tma_store_2d: the source
// may be reused after bulk_wait_read. Many blocks may add into one box: each element's add is atomic.
__device__ __forceinline__ void tma_reduce_add_3d(const void *tensor_map, uint32_t src, int x, int y, int z) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
            tensor_map),
        "r"(x), "r"(y), "r"(z), "r"(src)
        : "memory");
}

// cp.async.bulk.commit_group: close this thread's open group of bulk copies.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// cp.async.bulk.wait_group.read N: wait until at most N of this thread's bulk groups still READ their
// shared-memory source (their global writes may still be in flight): the source may then be reused.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// cp.async.bulk.wait_group N: wait until at most N of this thread's bulk groups are incomplete
// (writes done and visible): before the kernel ends, so no store outlives the block's shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// st.shared.v2.f32 [addr], {a, b}: two floats into shared memory (8-byte aligned).
__device__ __forceinline__ void st_shared_f32x2(uint32_t addr, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

// ---- clusters ----------------------------------------------------------------------------------
// %cluster_ctarank: this CTA's rank within its cluster.
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

// barrier.cluster.arrive.release + wait.acquire: every thread of every CTA in the cluster arrives
// before any goes on (barrier set-up visible cluster-wide; no CTA leaves while a peer may still
// write into its shared memory or arrive on its barriers).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// mapa.shared::cluster: the address of the same shared-memory offset in cluster CTA `rank`.
__device__ __forceinline__ uint32_t cluster_map(uint32_t smem_addr, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_addr), "r"(rank));
    return r;
}

// mbarrier.arrive.shared::cluster: one arrival on a barrier of any CTA in the cluster (an address from
// cluster_map): a consumer releasing a stage that a peer multicasts into. The default .release.cta
// semantics: the stage was read by the tensor cores (wgmma, waited for), not by this thread's loads,
// so nothing of this thread's needs ordering at cluster scope. With an explicit .release.cluster on
// every stage release, 05 ran at half of 04's speed on the H100 (0.407 against 0.198 ms at 4096^3);
// with the default, at 04's (0.190 ms both).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t cluster_bar) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_bar) : "memory");
}

// prefetch.tensormap [map]: fetch the descriptor into the cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_map(const void *tensor_map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(tensor_map) : "memory");
}

// ---- wgmma -------------------------------------------------------------------------------------
// A shared-memory matrix descriptor (64 bits) for wgmma, K-major operand in the 128-byte swizzle
// that TMA's CU_TENSOR_MAP_SWIZZLE_128B writes: rows of 64 bf16 (128 bytes), 8-row groups of
// 1024 bytes. Fields: start address >> 4 (bits 0-13), leading-dimension byte offset >> 4 (16-29;
// unused for swizzled K-major, 1 by convention), stride-dimension byte offset >> 4 (32-45: 1024 B
// between 8-row groups), base offset (49-51: 0, the tile is 1024-aligned), swizzle mode (62-63:
// 1 = 128B). The k-th 16-wide slice of the 64-wide row starts 32*k bytes in: add 2*k to the
// descriptor (the hardware applies the XOR swizzle to the final address).
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t smem_addr) {
    uint64_t d = 0;
    d |= (uint64_t)((smem_addr & 0x3FFFF) >> 4);
    d |= (uint64_t)1 << 16;
    d |= (uint64_t)(1024 >> 4) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}

// wgmma.fence.sync.aligned: the accumulator registers written by ordinary instructions (or a
// previous wgmma's results read) are ordered before the next wgmma.mma_async of this warpgroup.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// wgmma.commit_group.sync.aligned: close the group of wgmma.mma_async issued so far.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// wgmma.wait_group.sync.aligned N: wait until at most N committed groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16: D(64x256, f32) += A(64x16) . B(16x256),
// both bf16 from shared memory through descriptors (A K-major, B K-major i.e. stored N x K), issued
// by one warpgroup (4 warps). Accumulator layout: warp w of the group holds rows 16w..16w+15; for
// n8 block j (0..31), d[4j+0..1] = D(16w+g, 8j+2t..2t+1), d[4j+2..3] = D(16w+g+8, 8j+2t..2t+1)
// (g = lane/4, t = lane%4: mma.sync's C layout, repeated along N). scale-d = 1: accumulate.
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
#define TC_F8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : TC_F8(0), TC_F8(8), TC_F8(16), TC_F8(24), TC_F8(32), TC_F8(40), TC_F8(48), TC_F8(56), TC_F8(64),
          TC_F8(72), TC_F8(80), TC_F8(88), TC_F8(96), TC_F8(104), TC_F8(112), TC_F8(120)
        : "l"(desc_a), "l"(desc_b), "r"(1));
#undef TC_F8
}

// ---- wgmma for flash attention (05_flash_wgmma): N = 64 or 128, scale-d from a register --------
// scale_d = 0 overwrites the accumulator (D = A.B), 1 accumulates (D += A.B): the first k16 step of
// S = Q.K^T passes 0, so the score registers need no zeroing.
// _ss: A and B from shared memory, both K-major (the descriptor of wgmma_desc_sw128).
// _rs_tb: A from registers (four bf16x2 per thread: exactly mma.sync m16n8k16's A fragment, warp w
// of the group holding rows 16w..16w+15), B from shared memory MN-major ("transposed", imm-trans-b
// = 1: stored K x N with N contiguous, the layout V has), descriptor wgmma_desc_sw128_mn.
// Accumulator layout as wgmma_m64n256k16_bf16: d[4j..4j+3] = rows 16w+g, 16w+g+8 of n8 block j.
#define TC_F8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : TC_F8(0), TC_F8(8), TC_F8(16), TC_F8(24)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : TC_F8(0), TC_F8(8), TC_F8(16), TC_F8(24), TC_F8(32), TC_F8(40), TC_F8(48), TC_F8(56)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_m64n64k16_rs_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : TC_F8(0), TC_F8(8), TC_F8(16), TC_F8(24)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_m64n128k16_rs_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : TC_F8(0), TC_F8(8), TC_F8(16), TC_F8(24), TC_F8(32), TC_F8(40), TC_F8(48), TC_F8(56)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}
#undef TC_F8

// The same four behind one name per operand source, for kernels templated on N.
template <int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    static_assert(N == 64 || N == 128, "wgmma_ss: N = 64 or 128");
    if constexpr (N == 64) wgmma_m64n64k16_ss(d, desc_a, desc_b, scale_d);
    else wgmma_m64n128k16_ss(d, desc_a, desc_b, scale_d);
}
template <int N>
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    static_assert(N == 64 || N == 128, "wgmma_rs_tb: N = 64 or 128");
    if constexpr (N == 64) wgmma_m64n64k16_rs_tb(d, a, desc_b, scale_d);
    else wgmma_m64n128k16_rs_tb(d, a, desc_b, scale_d);
}

// An MN-major operand (B stored K x N, N contiguous) in the 128-byte swizzle TMA writes for a box of
// 64 bf16 columns: each 128-byte row holds 64 consecutive N at one k, 8 rows (k .. k+7) form a
// 1024-byte swizzle atom. The stride-dimension offset is then the step between 8-row groups along K
// (1024 B) and the leading-dimension offset the step between 64-column panels along N (`panel_bytes`,
// the size of one TMA box; unused when N = 64). The k16 step kk starts 2 * 1024 * kk bytes in.
__device__ __forceinline__ uint64_t wgmma_desc_sw128_mn(uint32_t smem_addr, uint32_t panel_bytes) {
    uint64_t d = 0;
    d |= (uint64_t)((smem_addr & 0x3FFFF) >> 4);
    d |= (uint64_t)((panel_bytes >> 4) & 0x3FFF) << 16;
    d |= (uint64_t)(1024 >> 4) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}

// Keep the compiler from moving reads of wgmma results above the wgmma_wait that makes them valid
// (the asm that waits names no registers): an empty asm that "rewrites" each register, placed after
// the wait, orders every later use behind it.
template <int N>
__device__ __forceinline__ void reg_fence(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// The same for an A fragment in registers (wgmma reads it asynchronously too: fenced after the wait,
// its registers stay live, so nothing else is allocated to them while the tensor cores read them).
template <int N>
__device__ __forceinline__ void reg_fence(uint32_t (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
}

// bar.sync / bar.arrive id, count: a named barrier (ids 1..15; 0 is __syncthreads) for `count`
// threads (a multiple of 32). arrive counts this warp in without waiting: the ping-pong schedule of
// two warpgroups hands the tensor cores from one to the other with one sync and one arrive each.
__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(uint32_t id, uint32_t count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// ---- registers ---------------------------------------------------------------------------------
// setmaxnreg.dec / .inc.sync.aligned.u32 N: a warpgroup gives registers back to the SM's pool (the
// TMA producer needs few) or takes them (the MMA consumers hold 128 accumulators each). Needs a
// register cap at entry (__launch_bounds__(threads, 1)); N a multiple of 8 in 24..256.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace tc

// ================================================================================================
// TF32 (sm_80+), added by the attention program for its 3xTF32 FP32 flash variant
// ================================================================================================
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
namespace tc {

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: D(16x8, f32) = A(16x8, tf32) * B(8x8, tf32) + C.
// Operands are 32-bit floats whose low 13 mantissa bits the tensor core ignores.
//   a[0] = A(g, t)   a[1] = A(g+8, t)   a[2] = A(g, t+4)   a[3] = A(g+8, t+4)
//   b[0] = B(k = t, n = g)              b[1] = B(k = t+4, n = g)
//   c[0], c[1] = C(g, 2t), C(g, 2t+1)   c[2], c[3] = C(g+8, 2t), C(g+8, 2t+1)
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                 const float (&c)[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
}

// Split x into hi + lo for error-compensated "3xTF32" products (a·b ~ ahi·bhi + ahi·blo + alo·bhi):
// hi is x rounded to tf32's 10 mantissa bits (round half away from zero on the magnitude bits, two
// integer instructions instead of cvt.rna.tf32.f32), lo = x - hi exactly (|lo| <= 2^-11 |x|), which
// the MMA then truncates to tf32: the product keeps ~21 bits. Plain C++, no PTX instruction.
__device__ __forceinline__ void split_tf32(float x, uint32_t &hi, uint32_t &lo) {
    const uint32_t h = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    hi = h;
    lo = __float_as_uint(x - __uint_as_float(h));
}

}  // namespace tc
#endif  // sm_80+ (TF32)
