# matmul links cuBLAS for its SGEMM baseline when the Makefile found it beside nvcc
# (CUBLAS_FOUND=1, CUBLAS_LIBDIR). Without it the "cublas" variant reports cudaErrorNotSupported
# and matmul_have_cublas() returns 0, which the Python side turns into skipped tests.
ifeq ($(CUBLAS_FOUND),1)
matmul_NVCCFLAGS += -DCUDALAB_HAVE_CUBLAS
matmul_LDLIBS += -L$(CUBLAS_LIBDIR) -lcublas -Xlinker -rpath,$(CUBLAS_LIBDIR)
endif
