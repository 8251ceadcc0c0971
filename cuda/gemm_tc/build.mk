# gemm_tc links cuBLAS for its cublas_bf16 / cublas_tf32 baselines when the Makefile found it beside
# nvcc (as cuda/matmul/build.mk does). Without it those variants report "built without cuBLAS".
ifeq ($(CUBLAS_FOUND),1)
gemm_tc_NVCCFLAGS += -DCUDALAB_HAVE_CUBLAS
gemm_tc_LDLIBS += -L$(CUBLAS_LIBDIR) -lcublas -Xlinker -rpath,$(CUBLAS_LIBDIR)
endif
# 03_wgmma needs the architecture-specific target sm_90a (wgmma, setmaxnreg): where ARCH lists 90 this
# program compiles and links 90 as compute_90a/sm_90a (the Makefile's GENCODE_SM90A) (sm_90a code runs
# on compute capability 9.0 only, which is what ARCH=90 means). Any other ARCH keeps the global
# GENCODE, and 03_wgmma then reports "needs sm_90a". CUDALAB_HAVE_SM90A tells the host code (cuda/common/tma_host.cuh).
ifneq ($(GENCODE_SM90A),)
gemm_tc_GENCODE := $(GENCODE_SM90A)
gemm_tc_NVCCFLAGS += -DCUDALAB_HAVE_SM90A
endif
