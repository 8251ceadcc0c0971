# 05_flash_wgmma needs the architecture-specific target sm_90a (wgmma, setmaxnreg, TMA): on ARCH=90
# this program compiles and links for compute_90a/sm_90a instead of the global GENCODE (as gemm_tc
# does). Any other ARCH keeps the global GENCODE, and 05 then reports "needs sm_90a".
# CUDALAB_HAVE_SM90A tells the host code (cuda/common/tma_host.cuh).
ifeq ($(ARCH),90)
attention_GENCODE := -gencode arch=compute_90a,code=[sm_90a,compute_90a]
attention_NVCCFLAGS += -DCUDALAB_HAVE_SM90A
endif
