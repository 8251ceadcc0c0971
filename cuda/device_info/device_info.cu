// device_info: query one device through the runtime, and derive its peaks.
#include <cstring>

#include "device_info.h"
#include "check.cuh"

// FP32 lanes (CUDA cores) per SM. The runtime does not report this; it is fixed per architecture
// (CUDA C Programming Guide, "Arithmetic Instructions" throughput table).
static int fp32_lanes(int major, int minor) {
    switch (major) {
        case 6: return minor == 0 ? 64 : 128;
        case 7: return 64;
        case 8: return minor == 0 ? 64 : 128;
        case 9: return 128;
        case 10: case 11: case 12: return 128;
        default: return 0;
    }
}

extern "C" cudalab_status device_info_count(int *count) {
    CUDA_TRY(cudaGetDeviceCount(count));
    return 0;
}

extern "C" cudalab_status device_info_query(int device, cudalab_device_info *out) {
    memset(out, 0, sizeof(*out));
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, device));
    static_assert(sizeof(out->name) == sizeof(prop.name), "name buffers differ");
    memcpy(out->name, prop.name, sizeof(out->name));
    out->name[sizeof(out->name) - 1] = '\0';
    // CUDA 13 dropped the clock fields from cudaDeviceProp; the attributes still carry them.
    struct { int *dst; cudaDeviceAttr attr; } attrs[] = {
        {&out->cc_major, cudaDevAttrComputeCapabilityMajor},
        {&out->cc_minor, cudaDevAttrComputeCapabilityMinor},
        {&out->sm_count, cudaDevAttrMultiProcessorCount},
        {&out->clock_khz, cudaDevAttrClockRate},
        {&out->mem_clock_khz, cudaDevAttrMemoryClockRate},
        {&out->bus_width_bits, cudaDevAttrGlobalMemoryBusWidth},
        {&out->l2_bytes, cudaDevAttrL2CacheSize},
        {&out->smem_per_block, cudaDevAttrMaxSharedMemoryPerBlock},
        {&out->smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin},
        {&out->smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor},
        {&out->regs_per_block, cudaDevAttrMaxRegistersPerBlock},
        {&out->regs_per_sm, cudaDevAttrMaxRegistersPerMultiprocessor},
        {&out->max_threads_per_block, cudaDevAttrMaxThreadsPerBlock},
        {&out->max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor},
        {&out->max_blocks_per_sm, cudaDevAttrMaxBlocksPerMultiprocessor},
        {&out->warp_size, cudaDevAttrWarpSize},
    };
    for (auto &a : attrs) CUDA_TRY(cudaDeviceGetAttribute(a.dst, a.attr, device));
    out->global_mem_bytes = (long long)prop.totalGlobalMem;

    out->fp32_lanes_per_sm = fp32_lanes(out->cc_major, out->cc_minor);
    double clock_hz = out->clock_khz * 1e3;
    // Each lane retires one FP32 instruction per clock; an FMA counts as two FLOPs.
    out->fp32_inst_per_s = (double)out->sm_count * out->fp32_lanes_per_sm * clock_hz;
    out->fp32_tflops = 2.0 * out->fp32_inst_per_s / 1e12;
    // DRAM moves data on both clock edges: bytes/s = 2 * memory clock * bus width in bytes.
    out->mem_bandwidth_gbs = 2.0 * out->mem_clock_khz * 1e3 * (out->bus_width_bits / 8.0) / 1e9;
    return 0;
}
