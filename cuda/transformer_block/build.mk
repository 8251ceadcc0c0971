# transformer_block's bf16 path runs the fastest attention that runs on the GPU: 05_flash_wgmma on a
# Hopper GPU, which needs the architecture-specific target sm_90a (as attention/build.mk says). On
# ARCH=90 this program compiles for compute_90a/sm_90a; elsewhere the global GENCODE, and 03_flash_bf16.
ifeq ($(ARCH),90)
transformer_block_GENCODE := -gencode arch=compute_90a,code=[sm_90a,compute_90a]
transformer_block_NVCCFLAGS += -DCUDALAB_HAVE_SM90A
endif
