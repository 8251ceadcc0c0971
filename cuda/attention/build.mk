# 05_flash_wgmma needs the architecture-specific target sm_90a (wgmma, setmaxnreg, TMA): where ARCH
# lists 90 this program compiles 90 as compute_90a/sm_90a (the Makefile's GENCODE_SM90A, as gemm_tc
# does). Any other ARCH keeps the global GENCODE, and 05 then reports "needs sm_90a".
# CUDALAB_HAVE_SM90A tells the host code (cuda/common/tma_host.cuh).
ifneq ($(GENCODE_SM90A),)
attention_GENCODE := $(GENCODE_SM90A)
attention_NVCCFLAGS += -DCUDALAB_HAVE_SM90A
endif
