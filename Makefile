# cudalab build: discovers every cuda/<prog>/ that holds <prog>.cu and builds, for each,
#   build/lib/lib<prog>.so   the extern "C" entry points in <prog>.cu (loaded by harness/calling/library.py)
#   build/bin/<prog>         main.cu + <prog>.cu (run by harness/calling/runner.py)
#   build/bin/<prog>_cpu     <prog>_cpu.c with gcc, where the program has a CPU twin
#   build/ptxas/<prog>.txt   ptxas -v resource usage (registers, shared memory, spills) per kernel
# and, only when asked for with FAULTS=1, the fault build beside it (see FAULTS below).
# Adding a program needs no edit here. A program may add cuda/<prog>/build.mk, which can set
# <prog>_NVCCFLAGS and <prog>_LDLIBS (matmul uses it to link cuBLAS when it is found), and
# <prog>_GENCODE, used for that program's compile and link instead of GENCODE (gemm_tc: sm_90a).
# None of these, nor any other variable that reaches a command line, may hold a shell character: the
# Makefile refuses one in a line of its own before it builds anything (see "What reaches a shell").
#
#   make [-j] [ARCH=90 | ARCH=75,80,90] [NVCC=/path/to/nvcc]      `invoke build` is the usual way in.
#
# Reading this file writes nothing (so `make -n` is a pure question); every output is written to a
# temporary name and renamed into place; libraries and executables get a size+SHA-256 record in build/sums/.

# `make` alone builds everything, whichever rule comes first below.
.DEFAULT_GOAL := all

NVCC ?= nvcc
CC   ?= gcc
# $(CC) defaults to `cc` in make; keep gcc unless the user chose another.
ifeq ($(origin CC),default)
CC := gcc
endif
# The two compilers as one quoted shell word each: a folder with a space in its name is still one path.
NVCC_CMD = $(call shell_quote,$(NVCC))
CC_CMD = $(call shell_quote,$(CC))

comma := ,
empty :=
space := $(empty) $(empty)
# eq(a,b): non-empty when the two texts are equal (also when both are empty).
eq = $(and $(findstring x$(1)x,x$(2)x),$(findstring x$(2)x,x$(1)x))
# shell_quote(text): text as one single-quoted shell word, whatever it holds.
shell_quote = '$(subst ','\'',$(1))'

PROGRAMS := $(sort $(foreach d,$(wildcard cuda/*/),$(if $(wildcard $(d)$(notdir $(patsubst %/,%,$(d))).cu),$(notdir $(patsubst %/,%,$(d))))))

# What reaches a shell. The flag variables below are spliced into the compilers' command lines as
# words: a shell character in one would make the recipe's shell run something else. The commands
# (NVCC, CC, PYTHON) are quoted where they run instead, and may hold any character but `$` and a
# newline, as may the folders CUDA_HOME and NCCL_HOME. A value given from outside (the environment or
# the command line) is checked as it was typed, before make expands it (a `$(shell ...)` in it would
# run as make expands it); every flag variable is checked again once the programs' build.mk files
# have added to it (see _check_flags below). One line, before anything is built or written.
define _newline


endef
_shell_meta := ; & | < > ` ' " \ ( ) $$
_FLAG_VARS = ARCH EXTRA_NVCCFLAGS NVCCFLAGS CFLAGS LDFLAGS GENCODE GENCODE_SM90A PTX_ONLY FAULTS OUT \
             $(foreach p,$(PROGRAMS),$(p)_NVCCFLAGS $(p)_LDLIBS $(p)_GENCODE)
_PATH_VARS := NVCC CC PYTHON CUDA_HOME NCCL_HOME
_meta_in = $(strip $(foreach c,$(_shell_meta),$(findstring $(c),$(1))) $(if $(findstring $(_newline),$(1)),newline))
_from_outside = $(filter environment% command%,$(origin $(1)))
_refuse = $(error $(1) (from the $(if $(filter file,$(origin $(1))),makefiles,$(origin $(1)))) holds $(2): a variable that reaches the compilers' command lines may hold no shell character ($(_shell_meta) or a newline))
# _check_flags(names): stop at the first of these variables whose (expanded) text holds a shell character.
_check_flags = $(foreach v,$(1),$(if $(call _meta_in,$($(v))),$(call _refuse,$(v),$(call _meta_in,$($(v))))))
$(foreach v,$(_FLAG_VARS),$(if $(call _from_outside,$(v)),$(if $(call _meta_in,$(value $(v))),$(call _refuse,$(v),$(call _meta_in,$(value $(v)))))))
$(foreach v,$(_PATH_VARS),$(if $(call _from_outside,$(v)),$(if $(or $(findstring $$,$(value $(v))),$(findstring $(_newline),$(value $(v)))),$(error $(v) (from the $(origin $(v))) holds `$$` or a newline: a path that reaches a shell may not))))

# ARCH: the visible GPU's compute capability (nvidia-smi says "9.0"), else 90. `make ARCH=80` overrides;
# ARCH=75,80,90 builds one fat binary: SASS for each, plus PTX for the highest so newer GPUs can JIT it.
ifndef ARCH
ARCH := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '.[:space:]')
endif
ARCHS := $(patsubst sm_%,%,$(patsubst compute_%,%,$(subst $(comma),$(space),$(ARCH))))
ifeq ($(strip $(ARCHS)),)
ARCHS := 90
endif
# ARCH reaches nvcc's command lines: each entry must be a compute capability (digits, with nvcc's a or f
# suffix for the architecture-specific targets), checked here, by make, before any shell sees it.
_arch_num = $(patsubst %a,%,$(patsubst %f,%,$(1)))
_no_digits = $(subst 0,,$(subst 1,,$(subst 2,,$(subst 3,,$(subst 4,,$(subst 5,,$(subst 6,,$(subst 7,,$(subst 8,,$(subst 9,,$(1)))))))))))
_arch_bad := $(strip $(foreach a,$(ARCHS),$(if $(and $(call _arch_num,$(a)),$(if $(call _no_digits,$(call _arch_num,$(a))),,ok)),,$(a))))
ifneq ($(_arch_bad),)
$(error ARCH must be a compute capability such as 90 (not 9.0), or a comma list such as 75,80,90; got $(subst $(space),$(comma),$(strip $(ARCHS))))
endif
# In numeric order without repeats (2-digit before 3-digit capabilities), so 90,80 and 80,90 build the same.
_arch_len = $(words $(subst 0,0 ,$(subst 1,1 ,$(subst 2,2 ,$(subst 3,3 ,$(subst 4,4 ,$(subst 5,5 ,$(subst 6,6 ,$(subst 7,7 ,$(subst 8,8 ,$(subst 9,9 ,$(call _arch_num,$(1)))))))))))))
ARCHS := $(foreach n,1 2 3 4,$(sort $(foreach a,$(ARCHS),$(if $(filter $(n),$(call _arch_len,$(a))),$(a)))))
override ARCH := $(subst $(space),$(comma),$(strip $(ARCHS)))
ARCH_TOP := $(lastword $(ARCHS))
# SASS for every ARCH entry, and PTX for the highest (for one ARCH: SASS and PTX for it).
GENCODE := $(foreach a,$(filter-out $(ARCH_TOP),$(ARCHS)),-gencode arch=compute_$(a),code=sm_$(a)) \
           -gencode arch=compute_$(ARCH_TOP),code=[sm_$(ARCH_TOP),compute_$(ARCH_TOP)]
GENCODE := $(strip $(GENCODE))

# PTX_ONLY=1: PTX for each ARCH and no SASS, so the driver JIT-compiles every kernel for the GPU
# it meets. `make PTX_ONLY=1 ARCH=75` (or both exported, so `invoke build/test/demo` keep them) on an
# H100 runs the very code a T4 build holds: as near to a T4 as an H100 comes.
ifeq ($(PTX_ONLY),1)
GENCODE := $(strip $(foreach a,$(ARCHS),-gencode arch=compute_$(a),code=compute_$(a)))
endif
# Programs with Hopper-only rungs (wgmma, setmaxnreg, TMA) compile 90 as the architecture-specific
# target sm_90a. GENCODE_SM90A is GENCODE with its 90 entry made 90a, empty when ARCH lists no 90 (or
# under PTX_ONLY, whose PTX must JIT for any GPU): a program's build.mk uses it as <prog>_GENCODE, so
# `ARCH=75,80,90` keeps the Hopper rungs beside the sm_75 and sm_80 code.
ifneq ($(filter 90,$(ARCHS)),)
ifneq ($(PTX_ONLY),1)
GENCODE_SM90A := $(patsubst %=sm_90,%=sm_90a,$(subst compute_90],compute_90a],$(subst sm_90$(comma),sm_90a$(comma),$(subst compute_90$(comma),compute_90a$(comma),$(GENCODE)))))
endif
endif

# cuBLAS, for the matmul baseline: found when both its header and its library are next to nvcc.
# nvcc --dryrun prints TOP=<its install root>, which sees through wrapper scripts.
ifndef CUDA_HOME
CUDA_HOME := $(realpath $(patsubst TOP=%,%,$(shell $(call shell_quote,$(NVCC)) --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | grep -o 'TOP=[^ ]*' | head -n1)))
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
# It is made by a rule (an order-only prerequisite of every link), never while make reads this file:
# reading must write nothing, as `make -n` reads it too.
ifneq ($(CUBLAS_FOUND),)
ifeq ($(wildcard $(CUBLAS_LIBDIR)libcublas.so),)
CUBLAS_SONAME := $(firstword $(sort $(notdir $(CUBLAS_LIBS))))
CUBLAS_LINK := build/toolkit/libcublas.so
TOOLKIT_LDFLAGS += -Lbuild/toolkit
endif
endif

# -O3 -lineinfo always (lineinfo lets ncu and compute-sanitizer point at source lines).
# Host-compiler warnings are errors. -Xptxas -v goes to a log per object, kept as build/ptxas/.
# A program's folder includes only its own files, cuda/common (the lab's helpers) and cuda/shared
# (kernels that more than one program runs, as "<family>/<file>"); the dependency files (-MMD) list them.
# FAULTS=1 (on make's command line): the fault build, the product compiled with -DCUDALAB_FAULTS, which
# adds the deliberately wrong answers the tests use to show each checker rejects one (gemm_tc's dropped
# K tiles, attention's sabotaged variants, square's --skip-every and --oob, collectives' stalled rank).
# Without the flag the product has none of them. Every output then lives under build/faults/ (its own
# objects, flag stamp, ptxas logs, libraries and executables, with records in build/sums/build/faults/),
# so the two builds never overwrite each other; nothing builds it unless asked:
#   make FAULTS=1 build/faults/lib/libgemm_tc.so build/faults/bin/square
# Only the command line counts: a FAULTS variable in the environment builds the product.
OUT := build
# The flags every nvcc compile of the lab shares, in three parts. The string compiler
# (harness/compile/jit.py: inline CUDA, the notebook's %%cuda) reads the same text from `make print-nvcc`
# instead of spelling its own, so a flag changed here changes both.
NVCC_OPT      := -O3 -lineinfo -std=c++17
NVCC_INCLUDES := -Icuda/common -Icuda/shared
NVCC_HOST     := -Xcompiler -fPIC,-Wall,-Wextra,-Werror -Xptxas -v
NVCCFLAGS := $(NVCC_OPT) $(GENCODE) $(NVCC_INCLUDES) $(NVCC_HOST) $(EXTRA_NVCCFLAGS)
ifeq ($(origin FAULTS),command line)
ifeq ($(FAULTS),1)
OUT := build/faults
NVCCFLAGS += -DCUDALAB_FAULTS
else ifneq ($(filter-out 0,$(FAULTS)),)
$(error FAULTS must be 1 (the fault build, under build/faults/) or 0; got $(FAULTS))
endif
endif
CFLAGS    := -O2 -std=c11 -Wall -Wextra -Werror
LDFLAGS   := $(TOOLKIT_LDFLAGS)

-include $(wildcard $(foreach p,$(PROGRAMS),cuda/$(p)/build.mk))
# The flags as the recipes will see them, the programs' own included (see `What reaches a shell` above).
$(call _check_flags,$(_FLAG_VARS))

COMMON_OBJ := $(OUT)/obj/common/cudalab.o

# The flags are part of every object's inputs: build/.flags (build/faults/.flags for the fault build)
# holds the text of the flags the objects were built with, and each object depends on it. Reading this file only compares that text (it writes
# nothing, so `make -n`, `make arch` and a count of pending steps change nothing); where the text
# differs, the stamp's rule is forced, and it is rewritten by the build that then recompiles every
# object after it. Each program's own flags (from its build.mk) get a stamp of their own, so changing
# them rebuilds that program only.
FLAGS_STAMP := $(OUT)/.flags
FLAGS_TEXT  := $(NVCCFLAGS) | $(CFLAGS)
prog_flags_text = $($(1)_NVCCFLAGS) | $($(1)_LDLIBS)$(if $($(1)_GENCODE), | $($(1)_GENCODE))

# In a recipe, $(TMP) is its own temporary name beside $@: the recipe shell's PID keeps two makes in one
# tree (a plain `make` beside `invoke build`) apart, and an interrupted step leaves only a name that
# harness/compile/build.py sweeps once that PID is gone. Every output is written there, then renamed onto $@,
# so a torn file never has an output's name.
TMP = $@.tmp$$$$
# $(PUBLISH) renames $(TMP) onto $@, after recording its SHA-256 and size in build/sums/$@: the harness
# checks a library or executable against that record before loading or running it, and `invoke build`
# rebuilds one that does not match (a file truncated or changed after the build wrote it).
SUMS := build/sums
PUBLISH = mkdir -p $(SUMS)/$(@D) && sum=$$(sha256sum < $(TMP)) && size=$$(stat -c %s $(TMP)) \
	&& printf '%s %s\n' "$${sum%% *}" "$$size" > $(SUMS)/$(TMP) && mv -f $(TMP) $@ && mv -f $(SUMS)/$(TMP) $(SUMS)/$@

# stamp_rule(file, text): the rule that writes `text` into `file`, forced only when the file holds another
# text. The text reaches the shell as one quoted word, with make's `$` escaped. The file is read with cat,
# not `$(file <...)`: GNU make 4.3 read the shared stamp (over 200 bytes, more than make's first expansion
# buffer) wrongly at random, and a wrong read forces the stamp, so the fault build recompiled every object
# each time it was asked for.
define stamp_rule
$(1): $(if $(call eq,$(shell cat $(1) 2>/dev/null),$(2)),,FORCE)
	@mkdir -p $$(@D)
	@printf '%s\n' $(subst $$,$$$$,$(call shell_quote,$(2))) > $$(TMP) && mv -f $$(TMP) $$@
endef
$(eval $(call stamp_rule,$(FLAGS_STAMP),$(FLAGS_TEXT)))
$(foreach p,$(PROGRAMS),$(eval $(call stamp_rule,$(OUT)/obj/$(p)/.flags,$(call prog_flags_text,$(p)))))

ifdef CUBLAS_LINK
$(CUBLAS_LINK): $(if $(call eq,$(shell readlink $(CUBLAS_LINK) 2>/dev/null),$(CUBLAS_LIBDIR)$(CUBLAS_SONAME)),,FORCE)
	@mkdir -p $(@D)
	@ln -sfn $(call shell_quote,$(CUBLAS_LIBDIR)$(CUBLAS_SONAME)) $(TMP) && mv -fT $(TMP) $@
endif

# Compile one .cu; ptxas -v's report goes to <obj>.log. Diagnostics other than ptxas's report are
# shown, and on failure the whole log is shown so harness/compile/build.py can parse nvcc's file:line lines.
# The object and its dependency file are written to temporary names and renamed once nvcc succeeded.
define NVCC_COMPILE
	@mkdir -p $(@D)
	@echo "  NVCC    $<"
	@$(NVCC_CMD) $(if $(PROG_GENCODE),$(filter-out $(GENCODE),$(NVCCFLAGS)) $(PROG_GENCODE),$(NVCCFLAGS)) $(PROG_NVCCFLAGS) -MMD -MP -MT $@ -MF $(@:.o=.d).tmp$$$$ -c $< -o $(TMP) 2> $(@:.o=.log) \
	  && mv -f $(@:.o=.d).tmp$$$$ $(@:.o=.d) && mv -f $(TMP) $@ \
	  || { cat $(@:.o=.log) >&2; rm -f $(TMP) $(@:.o=.d).tmp$$$$; exit 1; }
	@grep -vE '^ptxas info|^ +[0-9]+ bytes stack frame' $(@:.o=.log) >&2 || true
endef

# A recipe that fails leaves no output under the target's name.
.DELETE_ON_ERROR:
.PHONY: all clean list arch print-nvcc FORCE
FORCE:
all: $(foreach p,$(PROGRAMS),$(OUT)/lib/lib$(p).so $(OUT)/bin/$(p) $(OUT)/ptxas/$(p).txt \
       $(if $(wildcard cuda/$(p)/$(p)_cpu.c),$(OUT)/bin/$(p)_cpu))

$(OUT)/obj/common/%.o: cuda/common/%.cu $(FLAGS_STAMP)
	$(NVCC_COMPILE)

# The executable: main.cu + <prog>.cu. A program folder without main.cu gets a rule that says so
# (make -k then goes on with the other programs).
define BIN_RULE
$(OUT)/bin/$(1): $(OUT)/obj/$(1)/main.o $(OUT)/obj/$(1)/$(1).o $(COMMON_OBJ) $(OUT)/obj/$(1)/.flags | $(CUBLAS_LINK)
	@mkdir -p $$(@D)
	@echo "  LINK    $$@"
	@$(NVCC_CMD) $(or $($(1)_GENCODE),$(GENCODE)) -o $$(TMP) $$(filter %.o,$$^) $(LDFLAGS) $$($(1)_LDLIBS) && $$(PUBLISH) || { rm -f $$(TMP); exit 1; }
endef
define NO_MAIN_RULE
$(OUT)/bin/$(1):
	@echo "cuda/$(1)/main.cu: error: missing: every program needs a main.cu for its executable $(OUT)/bin/$(1) (argv, result lines, exit status; cuda/square/main.cu is a small example)" >&2; exit 1
endef

define PROGRAM_RULES
$(OUT)/obj/$(1)/%.o: PROG_NVCCFLAGS := $$($(1)_NVCCFLAGS)
$(OUT)/obj/$(1)/%.o: PROG_GENCODE := $$($(1)_GENCODE)
$(OUT)/obj/$(1)/%.o: cuda/$(1)/%.cu $(FLAGS_STAMP) $(OUT)/obj/$(1)/.flags
	$$(NVCC_COMPILE)

$(OUT)/lib/lib$(1).so: $(OUT)/obj/$(1)/$(1).o $(COMMON_OBJ) $(OUT)/obj/$(1)/.flags | $(CUBLAS_LINK)
	@mkdir -p $$(@D)
	@echo "  LINK    $$@"
	@# Linked beside it, then renamed over it: a process that has the library loaded (a test worker,
	@# a notebook) keeps the old file, and a dlopen meanwhile sees the old or the new one, never half of one.
	@$(NVCC_CMD) $(or $($(1)_GENCODE),$(GENCODE)) -shared -o $$(TMP) $$(filter %.o,$$^) $(LDFLAGS) $$($(1)_LDLIBS) && $$(PUBLISH) || { rm -f $$(TMP); exit 1; }

$(if $(wildcard cuda/$(1)/main.cu),$(call BIN_RULE,$(1)),$(call NO_MAIN_RULE,$(1)))

$(OUT)/ptxas/$(1).txt: $(if $(wildcard cuda/$(1)/main.cu),$(OUT)/obj/$(1)/main.o) $(OUT)/obj/$(1)/$(1).o
	@mkdir -p $$(@D)
	@cat $$(^:.o=.log) > $$(TMP) && mv -f $$(TMP) $$@

$(OUT)/bin/$(1)_cpu: cuda/$(1)/$(1)_cpu.c $(FLAGS_STAMP)
	@mkdir -p $$(@D) $(OUT)/obj/$(1)
	@echo "  CC      $$<"
	@$(CC_CMD) $(CFLAGS) -MMD -MP -MT $$@ -MF $(OUT)/obj/$(1)/$(1)_cpu.d.tmp$$$$$$$$ -o $$(TMP) $$< -lm \
	  && mv -f $(OUT)/obj/$(1)/$(1)_cpu.d.tmp$$$$$$$$ $(OUT)/obj/$(1)/$(1)_cpu.d && $$(PUBLISH) \
	  || { rm -f $$(TMP) $(OUT)/obj/$(1)/$(1)_cpu.d.tmp$$$$$$$$; exit 1; }
endef
$(foreach p,$(PROGRAMS),$(eval $(call PROGRAM_RULES,$(p))))

list:
	@echo $(PROGRAMS)

arch:
	@echo $(ARCH)

# What the string compiler compiles with (harness/compile/build.py nvcc_flags reads it): the resolved ARCH,
# its GENCODE, and the shared flags in NVCCFLAGS's order (the includes relative to this folder).
print-nvcc:
	@printf '%s\n' 'ARCH=$(ARCH)' 'GENCODE=$(GENCODE)' 'NVCCFLAGS=$(NVCC_OPT) $(GENCODE) $(NVCC_INCLUDES) $(NVCC_HOST)'

clean:
	rm -rf build/obj build/lib build/bin build/ptxas build/sums build/toolkit build/.flags build/faults

-include $(shell find $(OUT)/obj -name '*.d' 2>/dev/null)
