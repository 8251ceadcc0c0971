// The fault build: the product compiled with -DCUDALAB_FAULTS (`make FAULTS=1 build/faults/...`), which
// adds the deliberately wrong answers the tests use to show that each checker rejects one. Only tests
// build it; the product (build/lib, build/bin) has none of its switches.
//
// CUDALAB_FAULT(x): `x` in the fault build, the constant 0 in the product, so a kernel written as
// `cdiv(K, BK) - CUDALAB_FAULT(drop_last_k_tiles)` is, in the product, exactly the kernel without the fault.
#pragma once

#ifdef CUDALAB_FAULTS
#define CUDALAB_FAULT(x) (x)
#else
#define CUDALAB_FAULT(x) 0
#endif

// CUDALAB_FAULT_SLEEP(ns): in the fault build, the calling thread sleeps about `ns` nanoseconds
// (__nanosleep, sm_70 and later) when ns > 0: a kernel slowed on purpose, which the bench's regression
// gate (`invoke bench --compare`) must call SLOWER. In the product it is nothing, and `ns` is not even
// evaluated, so it may name a variable that only the fault build declares.
#ifdef CUDALAB_FAULTS
#define CUDALAB_FAULT_SLEEP(ns)                   \
    do {                                          \
        if ((ns) > 0) __nanosleep((unsigned)(ns)); \
    } while (0)
#else
#define CUDALAB_FAULT_SLEEP(ns) \
    do {                        \
    } while (0)
#endif
