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
