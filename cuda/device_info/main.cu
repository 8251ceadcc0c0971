// build/bin/device_info [DEVICE]: one `device_info key=value` line per property, like deviceQuery.
#include <climits>
#include <cstdlib>

#include "device_info.h"
#include "check.cuh"
#include "cli.cuh"

static const char *kUsage = "usage: device_info [DEVICE]   (DEVICE: 0, 1, ...; default 0)";

int main(int argc, char **argv) {
    // argv first, before any CUDA call: a typo is a usage error even where there is no GPU.
    cudalab_handle_help(argc, argv, kUsage);
    if (argc > 2) CUDALAB_USAGE_ERROR("unexpected argument '%s'\n%s", argv[2], kUsage);
    const long long requested = argc == 2 ? cudalab_parse_range(argv[1], "DEVICE", 0, INT_MAX, kUsage) : 0;
    int count = 0;
    CUDA_CHECK((cudaError_t)device_info_count(&count));
    if (requested >= count) CUDALAB_USAGE_ERROR("device %lld does not exist: %d device(s) visible", requested, count);
    const int device = (int)requested;
    cudalab_device_info d;
    CUDA_CHECK((cudaError_t)device_info_query(device, &d));
    int driver = 0, runtime = 0;
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));

    printf("device_info device=%d\n", device);
    printf("device_info name=\"%s\"\n", d.name);
    printf("device_info compute_capability=%d.%d\n", d.cc_major, d.cc_minor);
    printf("device_info sm_count=%d\n", d.sm_count);
    printf("device_info clock_mhz=%.1f\n", d.clock_khz / 1e3);
    printf("device_info mem_clock_mhz=%.1f\n", d.mem_clock_khz / 1e3);
    printf("device_info global_mem_bytes=%lld\n", d.global_mem_bytes);
    printf("device_info bus_width_bits=%d\n", d.bus_width_bits);
    printf("device_info l2_bytes=%d\n", d.l2_bytes);
    printf("device_info smem_per_block=%d\n", d.smem_per_block);
    printf("device_info smem_per_block_optin=%d\n", d.smem_per_block_optin);
    printf("device_info smem_per_sm=%d\n", d.smem_per_sm);
    printf("device_info regs_per_block=%d\n", d.regs_per_block);
    printf("device_info regs_per_sm=%d\n", d.regs_per_sm);
    printf("device_info max_threads_per_block=%d\n", d.max_threads_per_block);
    printf("device_info max_threads_per_sm=%d\n", d.max_threads_per_sm);
    printf("device_info max_blocks_per_sm=%d\n", d.max_blocks_per_sm);
    printf("device_info warp_size=%d\n", d.warp_size);
    printf("device_info driver_version=%d\n", driver);
    printf("device_info runtime_version=%d\n", runtime);
    // Derived peaks (formulas in device_info.cu):
    //   fp32_tflops       = sm_count * fp32_lanes_per_sm * 2 * clock
    //   fp32_inst_per_s   = sm_count * fp32_lanes_per_sm * clock
    //   mem_bandwidth_gbs = 2 * mem_clock * bus_width_bits / 8
    printf("device_info fp32_lanes_per_sm=%d\n", d.fp32_lanes_per_sm);
    printf("device_info fp32_tflops=%.3f\n", d.fp32_tflops);
    printf("device_info fp32_inst_per_s=%.6e\n", d.fp32_inst_per_s);
    printf("device_info mem_bandwidth_gbs=%.1f\n", d.mem_bandwidth_gbs);
    return 0;
}
