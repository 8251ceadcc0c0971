# cudalab build: discovers every cuda/<prog>/ that holds <prog>.cu and builds, for each,
#   build/lib/lib<prog>.so   the extern "C" entry points in <prog>.cu (loaded by harness/library.py)
#   build/bin/<prog>         main.cu + <prog>.cu (run by harness/runner.py)
#   build/bin/<prog>_cpu     <prog>_cpu.c with gcc, where the program has a CPU twin
#   build/ptxas/<prog>.txt   ptxas -v resource usage (registers, shared memory, spills) per kernel
# Adding a program needs no edit here. A program may add cuda/<prog>/build.mk, which can set
# <prog>_NVCCFLAGS and <prog>_LDLIBS (matmul uses it to link cuBLAS when it is found), and
# <prog>_GENCODE, used for that program's compile and link instead of GENCODE (gemm_tc: sm_90a).
#
#   make [-j] [ARCH=90] [NVCC=/path/to/nvcc]      `invoke build` is the usual way in.

NVCC ?= nvcc
CC   ?= gcc
# $(CC) defaults to `cc` in make; keep gcc unless the user chose another.
ifeq ($(origin CC),default)
CC := gcc
endif

# ARCH: the visible GPU's compute capability (nvidia-smi says "9.0"), else 90. `make ARCH=80` overrides.
ifndef ARCH
ARCH := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '.[:space:]')
endif
override ARCH := $(patsubst sm_%,%,$(patsubst compute_%,%,$(strip $(ARCH))))
ifeq ($(ARCH),)
override ARCH := 90
endif
# SASS for ARCH plus PTX for the same, so a newer GPU can still JIT the code.
GENCODE := -gencode arch=compute_$(ARCH),code=[sm_$(ARCH),compute_$(ARCH)]
# PTX_ONLY=1: PTX for compute_$(ARCH) and no SASS, so the driver JIT-compiles every kernel for the GPU
# it meets. `make PTX_ONLY=1 ARCH=75` (or both exported, so `invoke build/test/demo` keep them) on an
# H100 runs the very code a T4 build holds: as near to a T4 as an H100 comes.
ifeq ($(PTX_ONLY),1)
GENCODE := -gencode arch=compute_$(ARCH),code=compute_$(ARCH)
endif

# cuBLAS, for the matmul baseline: found when both its header and its library are next to nvcc.
# nvcc --dryrun prints TOP=<its install root>, which sees through wrapper scripts.
ifndef CUDA_HOME
CUDA_HOME := $(realpath $(patsubst TOP=%,%,$(shell $(NVCC) --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | grep -o 'TOP=[^ ]*' | head -n1)))
endif
# NVIDIA's pip wheels (`pip install -e ".[toolkit]"`) put libcudadevrt.a, libcudart_static.a and the
# cuBLAS libraries in <root>/lib, while their nvcc.profile only searches targets/x86_64-linux/lib,
# which the wheels lack: pass <root>/lib to every link when it exists (a system install has lib64).
TOOLKIT_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib/libcudadevrt.a))
TOOLKIT_LDFLAGS := $(if $(TOOLKIT_LIBDIR),-L$(dir $(TOOLKIT_LIBDIR)))
CUBLAS_LIBS := $(wildcard $(CUDA_HOME)/lib64/libcublas.so* $(CUDA_HOME)/lib/libcublas.so* $(CUDA_HOME)/targets/*/lib/libcublas.so*)
CUBLAS_FOUND := $(if $(and $(wildcard $(CUDA_HOME)/include/cublas_v2.h),$(CUBLAS_LIBS)),1,)
CUBLAS_LIBDIR := $(firstword $(dir $(CUBLAS_LIBS)))
# The cuBLAS wheel ships libcublas.so.13 without the unversioned libcublas.so that -lcublas needs:
# a link to it in build/toolkit/ serves the linker; the run-time path (-rpath) stays the wheel's folder.
ifneq ($(CUBLAS_FOUND),)
ifeq ($(wildcard $(CUBLAS_LIBDIR)libcublas.so),)
CUBLAS_SONAME := $(firstword $(sort $(notdir $(CUBLAS_LIBS))))
$(shell mkdir -p build/toolkit && ln -sfn $(CUBLAS_LIBDIR)$(CUBLAS_SONAME) build/toolkit/libcublas.so)
TOOLKIT_LDFLAGS += -Lbuild/toolkit
endif
endif

# -O3 -lineinfo always (lineinfo lets ncu and compute-sanitizer point at source lines).
# Host-compiler warnings are errors. -Xptxas -v goes to a log per object, kept as build/ptxas/.
NVCCFLAGS := -O3 -lineinfo -std=c++17 $(GENCODE) -Icuda/common \
             -Xcompiler -fPIC,-Wall,-Wextra,-Werror -Xptxas -v $(EXTRA_NVCCFLAGS)
CFLAGS    := -O2 -std=c11 -Wall -Wextra -Werror
LDFLAGS   := $(TOOLKIT_LDFLAGS)

PROGRAMS := $(sort $(foreach d,$(wildcard cuda/*/),$(if $(wildcard $(d)$(notdir $(patsubst %/,%,$(d))).cu),$(notdir $(patsubst %/,%,$(d))))))
-include $(wildcard $(foreach p,$(PROGRAMS),cuda/$(p)/build.mk))

COMMON_OBJ := build/obj/common/cudalab.o

# The flags are part of every object's inputs: a change of ARCH or flags rewrites this stamp,
# which rebuilds everything; an unchanged build leaves it alone, so make has nothing to do.
FLAGS_STAMP := build/.flags
FLAGS_TEXT  := $(NVCCFLAGS) | $(CFLAGS)
# write_stamp(file, text): rewrite file only when its text differs, so its mtime marks real changes.
write_stamp = $(shell mkdir -p $(dir $(1)); test "$$(cat $(1) 2>/dev/null)" = '$(2)' || printf '%s\n' '$(2)' > $(1))
# Only goals that build write the stamps: `make arch ARCH=sm_80` is a question, and rewriting the stamp
# there (then back) would make the next build recompile everything.
ifneq ($(or $(filter-out arch list clean,$(MAKECMDGOALS)),$(if $(MAKECMDGOALS),,all)),)
$(call write_stamp,$(FLAGS_STAMP),$(FLAGS_TEXT))
# Each program's own flags (from its build.mk) get a stamp of their own: changing them rebuilds that program only.
$(foreach p,$(PROGRAMS),$(call write_stamp,build/obj/$(p)/.flags,$($(p)_NVCCFLAGS) | $($(p)_LDLIBS)$(if $($(p)_GENCODE), | $($(p)_GENCODE))))
endif

# Compile one .cu; ptxas -v's report goes to <obj>.log. Diagnostics other than ptxas's report are
# shown, and on failure the whole log is shown so harness/build.py can parse nvcc's file:line lines.
define NVCC_COMPILE
	@mkdir -p $(@D)
	@echo "  NVCC    $<"
	@$(NVCC) $(if $(PROG_GENCODE),$(filter-out $(GENCODE),$(NVCCFLAGS)) $(PROG_GENCODE),$(NVCCFLAGS)) $(PROG_NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@ 2> $(@:.o=.log) \
	  || { cat $(@:.o=.log) >&2; rm -f $@; exit 1; }
	@grep -vE '^ptxas info|^ +[0-9]+ bytes stack frame' $(@:.o=.log) >&2 || true
endef

.PHONY: all clean list arch
all: $(foreach p,$(PROGRAMS),build/lib/lib$(p).so build/bin/$(p) build/ptxas/$(p).txt \
       $(if $(wildcard cuda/$(p)/$(p)_cpu.c),build/bin/$(p)_cpu))

build/obj/common/%.o: cuda/common/%.cu $(FLAGS_STAMP)
	$(NVCC_COMPILE)

# The executable: main.cu + <prog>.cu. A program folder without main.cu gets a rule that says so
# (make -k then goes on with the other programs).
define BIN_RULE
build/bin/$(1): build/obj/$(1)/main.o build/obj/$(1)/$(1).o $(COMMON_OBJ) build/obj/$(1)/.flags
	@mkdir -p $$(@D)
	@echo "  LINK    $$@"
	@$(NVCC) $(or $($(1)_GENCODE),$(GENCODE)) -o $$@.tmp $$(filter %.o,$$^) $(LDFLAGS) $$($(1)_LDLIBS) && mv -f $$@.tmp $$@ || { rm -f $$@.tmp; exit 1; }
endef
define NO_MAIN_RULE
build/bin/$(1):
	@echo "cuda/$(1)/main.cu: error: missing: every program needs a main.cu for its executable build/bin/$(1) (argv, result lines, exit status; cuda/square/main.cu is a small example)" >&2; exit 1
endef

define PROGRAM_RULES
build/obj/$(1)/%.o: PROG_NVCCFLAGS := $$($(1)_NVCCFLAGS)
build/obj/$(1)/%.o: PROG_GENCODE := $$($(1)_GENCODE)
build/obj/$(1)/%.o: cuda/$(1)/%.cu $(FLAGS_STAMP) build/obj/$(1)/.flags
	$$(NVCC_COMPILE)

build/lib/lib$(1).so: build/obj/$(1)/$(1).o $(COMMON_OBJ) build/obj/$(1)/.flags
	@mkdir -p $$(@D)
	@echo "  LINK    $$@"
	@# Linked beside it, then renamed over it: a process that has the library loaded (a test worker,
	@# a notebook) keeps the old file, and a dlopen meanwhile sees the old or the new one, never half of one.
	@$(NVCC) $(or $($(1)_GENCODE),$(GENCODE)) -shared -o $$@.tmp $$(filter %.o,$$^) $(LDFLAGS) $$($(1)_LDLIBS) && mv -f $$@.tmp $$@ || { rm -f $$@.tmp; exit 1; }

$(if $(wildcard cuda/$(1)/main.cu),$(call BIN_RULE,$(1)),$(call NO_MAIN_RULE,$(1)))

build/ptxas/$(1).txt: $(if $(wildcard cuda/$(1)/main.cu),build/obj/$(1)/main.o) build/obj/$(1)/$(1).o
	@mkdir -p $$(@D)
	@cat $$(^:.o=.log) > $$@

build/bin/$(1)_cpu: cuda/$(1)/$(1)_cpu.c $(FLAGS_STAMP)
	@mkdir -p $$(@D) build/obj/$(1)
	@echo "  CC      $$<"
	@$(CC) $(CFLAGS) -MMD -MP -MF build/obj/$(1)/$(1)_cpu.d -o $$@.tmp $$< -lm && mv -f $$@.tmp $$@ || { rm -f $$@.tmp; exit 1; }
endef
$(foreach p,$(PROGRAMS),$(eval $(call PROGRAM_RULES,$(p))))

list:
	@echo $(PROGRAMS)

arch:
	@echo $(ARCH)

clean:
	rm -rf build/obj build/lib build/bin build/ptxas $(FLAGS_STAMP)

-include $(shell find build/obj -name '*.d' 2>/dev/null)
