/* gemm_tc: BF16 GEMM on the tensor cores (work in progress). */
#ifndef CUDALAB_GEMM_TC_H
#define CUDALAB_GEMM_TC_H
#ifdef __cplusplus
extern "C" {
#endif

/* The variant table: names in the order a learner meets them. */
int gemm_tc_variant_count(void);
const char *gemm_tc_variant_name(int i);

#ifdef __cplusplus
}
#endif
#endif
