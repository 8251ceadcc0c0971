# collectives links NCCL for its nccl_* variants and the process-per-rank path, found the way
# cuda/matmul/build.mk finds cuBLAS, in this order:
#   NCCL_HOME=<dir> (make NCCL_HOME=...), a folder with include/nccl.h and lib/libnccl.so.2;
#   NVIDIA's wheel nvidia-nccl-cu13 (`pip install -e ".[nccl]"`) in $(PYTHON)'s site-packages:
#     nvidia/nccl/include/nccl.h and nvidia/nccl/lib/libnccl.so.2 (no unversioned libnccl.so, hence
#     -l:libnccl.so.2, and an rpath to the wheel's folder so the loader finds it at run time);
#   a system install (/usr/include/nccl.h beside libnccl.so.2 in /usr/lib/x86_64-linux-gnu or /usr/lib64),
#     or one beside nvcc.
# Without any, the program still builds: the nccl_* variants report "built without NCCL" and
# collectives_have_nccl() returns 0, which the Python side turns into refusals and skipped tests.
PYTHON ?= python3
ifndef NCCL_HOME
# nvidia.nccl may be a namespace package (no __file__): its first __path__ entry is the folder.
NCCL_HOME := $(shell $(call shell_quote,$(PYTHON)) -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null)
endif
NCCL_PAIRS := $(NCCL_HOME)/include:$(NCCL_HOME)/lib /usr/include:/usr/lib/x86_64-linux-gnu \
              /usr/include:/usr/lib64 $(CUDA_HOME)/include:$(CUDA_HOME)/lib64
# The first (include, lib) pair that has both nccl.h and libnccl.so.2.
nccl_pair_ok = $(and $(wildcard $(word 1,$(subst :, ,$(1)))/nccl.h),$(wildcard $(word 2,$(subst :, ,$(1)))/libnccl.so.2))
NCCL_PAIR := $(firstword $(foreach p,$(NCCL_PAIRS),$(if $(call nccl_pair_ok,$(p)),$(p))))
ifneq ($(NCCL_PAIR),)
NCCL_INCDIR := $(word 1,$(subst :, ,$(NCCL_PAIR)))
NCCL_LIBDIR := $(word 2,$(subst :, ,$(NCCL_PAIR)))
collectives_NVCCFLAGS += -DCUDALAB_HAVE_NCCL $(if $(filter /usr/include,$(NCCL_INCDIR)),,-I$(NCCL_INCDIR))
collectives_LDLIBS += -L$(NCCL_LIBDIR) -l:libnccl.so.2 -Xlinker -rpath,$(NCCL_LIBDIR)
endif
# The tensor-parallel block's GEMMs are gemm_tc's wgmma rung on a Hopper (cuda/shared/gemm_tc/wgmma_launch.cuh),
# which needs the architecture-specific target: where ARCH lists 90, compile and link 90 as
# compute_90a/sm_90a (the Makefile's GENCODE_SM90A) and tell the host code (CUDALAB_HAVE_SM90A), as
# cuda/gemm_tc/build.mk does. Any other ARCH keeps the global GENCODE, and the block runs 02_mma_sync.
ifneq ($(GENCODE_SM90A),)
collectives_GENCODE := $(GENCODE_SM90A)
collectives_NVCCFLAGS += -DCUDALAB_HAVE_SM90A
endif
