// gemm_tc's tuning configurations (the wgmma schedules, ring depths and rasters `invoke tune gemm_tc`
// times; gemm_tc_config_name reads the table), the compiled defaults and 06_wgmma_tuned's slot.
#pragma once

#include <cstring>

#include "gemm_tc/k03_wgmma.cuh"

namespace gemm_tc {

// ================================================================================================
// The tuning configurations: every (schedule, stages, raster) the tuner times
// ================================================================================================
// One named entry per choice, "<rung>-<tile>-s<stages>-g<m|n><group>": the rung whose schedule it
// uses, its block tile (fixed per kernel: 128x256x64 for 03's body, 128x128x64 per consumer for 07),
// the ring's depth, and the raster (groups of `group` tiles down M or along N). gemm_tc_config_name(i)
// reads this table; 03, 04 and 05 run their "-s4-gm8" entries, 07 its "-s6-gm8" one, 06_wgmma_tuned
// the one set by gemm_tc_set_tuned (the Python side passes the cached winner: the C side never reads
// the cache). New entries go at the end: the indices of the old ones stay put.
struct WgmmaConfig {
    const char *name;
    Schedule how;
    int stages;
    Raster raster;
};
#define GEMM_TC_CFG(rung, tile, how, s, o, g) \
    {rung "-" tile "-s" #s "-g" #o #g, Schedule::how, s, {g, (#o)[0] == 'n' ? 1 : 0}}
#define GEMM_TC_CFG_RASTERS_T(rung, tile, how, s)                                                      \
    GEMM_TC_CFG(rung, tile, how, s, m, 4), GEMM_TC_CFG(rung, tile, how, s, m, 8),                        \
        GEMM_TC_CFG(rung, tile, how, s, m, 16), GEMM_TC_CFG(rung, tile, how, s, n, 4),                   \
        GEMM_TC_CFG(rung, tile, how, s, n, 8), GEMM_TC_CFG(rung, tile, how, s, n, 16)
#define GEMM_TC_CFG_RASTERS(rung, how, s) GEMM_TC_CFG_RASTERS_T(rung, "128x256x64", how, s)
static const WgmmaConfig kWgmmaConfigs[] = {
    GEMM_TC_CFG_RASTERS("03_wgmma", PerTile, 4),           GEMM_TC_CFG_RASTERS("03_wgmma", PerTile, 3),
    GEMM_TC_CFG_RASTERS("04_wgmma_persistent", Persistent, 4), GEMM_TC_CFG_RASTERS("04_wgmma_persistent", Persistent, 3),
    GEMM_TC_CFG_RASTERS("05_wgmma_cluster", Cluster2, 4),  GEMM_TC_CFG_RASTERS("05_wgmma_cluster", Cluster2, 3),
    // 07's ring holds 32 KiB stages: 6 (its default) or 4 deep.
    GEMM_TC_CFG_RASTERS_T("07_wgmma_pingpong", "128x128x64", PingPong, 6),
    GEMM_TC_CFG_RASTERS_T("07_wgmma_pingpong", "128x128x64", PingPong, 4),
    // 08: 04's body with the TMA-store epilogue; its 32 KiB of C staging leaves room for 4 stages only.
    GEMM_TC_CFG_RASTERS("08_wgmma_tma_store", PersistentStore, 4),
    // ... and under 05's clusters of two (B multicast): "-c2" after the tile.
    GEMM_TC_CFG_RASTERS_T("08_wgmma_tma_store", "128x256x64-c2", Cluster2Store, 4),
};
#undef GEMM_TC_CFG_RASTERS_T
#undef GEMM_TC_CFG_RASTERS
#undef GEMM_TC_CFG
constexpr int kWgmmaConfigCount = (int)(sizeof(kWgmmaConfigs) / sizeof(kWgmmaConfigs[0]));

static inline int config_index(const char *name) {
    if (name == nullptr) return -1;
    for (int i = 0; i < kWgmmaConfigCount; ++i)
        if (strcmp(name, kWgmmaConfigs[i].name) == 0) return i;
    return -1;
}

// The compiled defaults: what 03, 04 and 05 always run, and what 06 runs until set_tuned_config.
static const char *const kDefault03 = "03_wgmma-128x256x64-s4-gm8";
static const char *const kDefault04 = "04_wgmma_persistent-128x256x64-s4-gm8";
static const char *const kDefault05 = "05_wgmma_cluster-128x256x64-s4-gm8";
static const char *const kDefault07 = "07_wgmma_pingpong-128x128x64-s6-gm8";
static const char *const kDefault08 = "08_wgmma_tma_store-128x256x64-s4-gm8";
static const char *const kDefaultTuned = kDefault04;  // 04 and 05 measured equal (0.952 / 0.949 of cuBLAS at 4096^3)

// 06_wgmma_tuned's configuration (per process; gemm_tc_set_tuned): the one holder of the tuned
// choice (the Python side asks gemm_tc_tuned_config and gemm_tc_tuned_is_set each time, keeps no copy).
// -1 in the slot: the compiled default, not chosen by any set.
static inline int &tuned_config_slot() {
    static int slot = -1;
    return slot;
}
static inline int tuned_config() { return tuned_config_slot() >= 0 ? tuned_config_slot() : config_index(kDefaultTuned); }
static inline bool tuned_config_is_set() { return tuned_config_slot() >= 0; }
// i: a configuration index; -1: back to the compiled default, as in a fresh process.
static inline bool set_tuned_config(int i) {
    if (i < -1 || i >= kWgmmaConfigCount) return false;
    tuned_config_slot() = i;
    return true;
}

}  // namespace gemm_tc
