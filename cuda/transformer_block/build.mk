# transformer_block's bf16 path runs the fastest attention that runs on the GPU: 05_flash_wgmma on a
# Hopper GPU, which needs the architecture-specific target sm_90a (as attention/build.mk says). On
# an ARCH that lists 90 this program compiles 90 as sm_90a (GENCODE_SM90A); elsewhere the global GENCODE, and 03_flash_bf16.
ifneq ($(GENCODE_SM90A),)
transformer_block_GENCODE := $(GENCODE_SM90A)
transformer_block_NVCCFLAGS += -DCUDALAB_HAVE_SM90A
endif
