// gemm_tc: work in progress. For now a smoke kernel that uses every Ampere helper of tc_ptx.cuh so
// the header is known to compile.
#include "check.cuh"
#include "gemm_tc.h"
#include "tc_ptx.cuh"

static const char *const kVariants[] = {"01_wmma", "02_mma_sync", "03_wgmma", "cublas_bf16", "cublas_tf32"};

extern "C" int gemm_tc_variant_count(void) { return (int)(sizeof(kVariants) / sizeof(kVariants[0])); }
extern "C" const char *gemm_tc_variant_name(int i) {
    return i >= 0 && i < gemm_tc_variant_count() ? kVariants[i] : nullptr;
}

// One warp: a 16x16 A and a 8x16 (N x K) B tile through cp.async + ldmatrix into one mma.
__global__ void tc_ptx_smoke(const uint16_t *a, const uint16_t *b, float *c) {
    __shared__ __align__(128) uint16_t sa[16 * 64], sb[8 * 64];
    const int lane = threadIdx.x;
    if (lane < 16) tc::cp_async_16(tc::smem_u32(sa) + tc::swizzle_128b(lane, 0), a + lane * 16);
    tc::cp_async_16_zfill(tc::smem_u32(sa) + tc::swizzle_128b(lane & 15, 1), a + (lane & 15) * 16 + 8, lane < 16 ? 16 : 0);
    if (lane < 8) tc::cp_async_16(tc::smem_u32(sb) + tc::swizzle_64b(lane, 0), b + lane * 16);
    tc::cp_async_commit();
    tc::cp_async_wait<0>();
    __syncwarp();
    uint32_t fa[4], fb[2], ft[4], fu[2];
    tc::ldmatrix_x4(fa, tc::smem_u32(sa) + tc::swizzle_128b(lane & 15, lane >> 4));
    tc::ldmatrix_x2(fb, tc::smem_u32(sb) + tc::swizzle_64b(lane & 7, (lane >> 3) & 1));
    tc::ldmatrix_x4_trans(ft, tc::smem_u32(sa) + tc::swizzle_128b(lane & 15, lane >> 4));
    tc::ldmatrix_x2_trans(fu, tc::smem_u32(sb) + tc::swizzle_64b(lane & 7, (lane >> 3) & 1));
    float acc[4] = {0, 0, 0, 0};
    tc::mma_m16n8k16_bf16(acc, fa, fb, acc);
    tc::mma_m16n8k16_bf16(acc, ft, fu, acc);
    const uint32_t p = tc::pack_bf16x2(acc[0], acc[1]);
    c[lane] = acc[2] + acc[3] + tc::exp2_approx((float)(p & 0xffff));
}
