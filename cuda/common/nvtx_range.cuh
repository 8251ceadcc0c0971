// A named NVTX range for the lifetime of a scope: `CudalabNvtxRange r("forward");`. nsys records
// the ranges (`--trace=cuda,nvtx`) and harness/profiling/nsys.py gives each kernel the ranges its
// launch was enqueued in, so a trace can say which phase of a step each kernel belongs to.
// NVTX 3 is header-only (it ships with the CUDA toolkit); with no tool attached a push or pop is one
// predictable branch, so the ranges stay in release builds.
#pragma once

#include <nvtx3/nvToolsExt.h>

struct CudalabNvtxRange {
    explicit CudalabNvtxRange(const char *name) { nvtxRangePushA(name); }
    ~CudalabNvtxRange() { nvtxRangePop(); }
    CudalabNvtxRange(const CudalabNvtxRange &) = delete;
    CudalabNvtxRange &operator=(const CudalabNvtxRange &) = delete;
};
