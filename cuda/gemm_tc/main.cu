// build/bin/gemm_tc: work in progress.
#include "check.cuh"
#include "gemm_tc.h"

int main(int, char **) { CUDALAB_USAGE_ERROR("gemm_tc: not implemented yet"); }
