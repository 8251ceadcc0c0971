// A named NVTX range for the lifetime of a scope: `CudalabNvtxRange r("forward");`. nsys records
// the ranges (`--trace=cuda,nvtx`) and harness/profiling/nsys.py gives each kernel the ranges its
// launch was enqueued in, so a trace can say which phase of a step each kernel belongs to.
// NVTX 3 is header-only and ships with the CUDA toolkit; with no tool attached a push or pop is one
// predictable branch, so the ranges stay in release builds. A toolkit without its headers (the pip
// wheels of a machine with no CUDA install) builds the ranges as nothing: the program is the same,
// its traces only lose the phase names.
#pragma once

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define CUDALAB_HAVE_NVTX 1
#else
#define CUDALAB_HAVE_NVTX 0
#endif

struct CudalabNvtxRange {
#if CUDALAB_HAVE_NVTX
    explicit CudalabNvtxRange(const char *name) { nvtxRangePushA(name); }
    ~CudalabNvtxRange() { nvtxRangePop(); }
#else
    explicit CudalabNvtxRange(const char *) {}
#endif
    CudalabNvtxRange(const CudalabNvtxRange &) = delete;
    CudalabNvtxRange &operator=(const CudalabNvtxRange &) = delete;
};
