/* device_info: what the Stringer course's deviceQuery section reads off a GPU, plus the derived
   peaks that benchmarks use as ceilings. */
#ifndef CUDALAB_DEVICE_INFO_H
#define CUDALAB_DEVICE_INFO_H
#include "cudalab.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[256];
    int cc_major, cc_minor;
    int sm_count;
    int clock_khz;          /* peak SM clock */
    int mem_clock_khz;      /* peak memory clock */
    int bus_width_bits;
    int l2_bytes;
    long long global_mem_bytes;
    int smem_per_block;         /* default limit */
    int smem_per_block_optin;   /* after cudaFuncSetAttribute */
    int smem_per_sm;
    int regs_per_block;
    int regs_per_sm;
    int max_threads_per_block;
    int max_threads_per_sm;
    int max_blocks_per_sm;
    int warp_size;
    int fp32_lanes_per_sm;      /* from the architecture table in device_info.cu; 0 if unknown */
    double fp32_tflops;         /* sm_count * lanes * 2 (FMA) * clock */
    double fp32_inst_per_s;     /* sm_count * lanes * clock: FP32 instructions retired per second */
    double mem_bandwidth_gbs;   /* 2 (double data rate) * mem clock * bus width / 8 */
} cudalab_device_info;

cudalab_status device_info_count(int *count);
cudalab_status device_info_query(int device, cudalab_device_info *out);

#ifdef __cplusplus
}
#endif
#endif
