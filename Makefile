# fsc: one entry point. make | make test | make demo | make bench | make fuzz | make install PREFIX=... | make uninstall PREFIX=...
# (make test prints the line coverage of lib/, backends/ and sim/ at its end)
# Variants build into their own folder: make BUILD=build/asan SAN=address,undefined
CC       ?= cc
BUILD    ?= build
PREFIX   ?= /usr/local
SAN      ?=
COVERAGE ?=
OPT      ?= -O2
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
# -fvisibility=hidden: the library exports only what its public headers declare (lib/include/fsc/export.h)
CFLAGS   += -std=c11 $(OPT) -g -fPIC -fvisibility=hidden -pthread -D_GNU_SOURCE $(WARN) -Ilib/include -Ilib
LDLIBS   += -lcjson -lz -lnettle -lpcre2-8 -lopenblas -lm -lpthread -ldl
ifneq ($(SAN),)
CFLAGS   += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=$(SAN)
endif
ifneq ($(COVERAGE),)
CFLAGS   += --coverage
LDFLAGS  += --coverage
endif

# The version, from its one place (lib/include/fsc/version.h): libfsc.so.MAJOR.MINOR.PATCH, SONAME libfsc.so.MAJOR
version   = $(shell sed -n 's/^\#define FSC_VERSION_$(1) \([0-9]*\).*/\1/p' lib/include/fsc/version.h)
VERSION  := $(call version,MAJOR).$(call version,MINOR).$(call version,PATCH)
SONAME   := libfsc.so.$(call version,MAJOR)
LIB_SO   := $(BUILD)/libfsc.so.$(VERSION)

LIB_SRC  := $(filter-out $(EXCLUDE),$(sort $(wildcard lib/*/*.c) $(wildcard backends/cpu/*.c) $(wildcard backends/count/*.c) $(wildcard sim/*.c)))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# Code only tests use (tests/*.c other than test_*.c; none at the moment), linked into every test
TESTLIB_SRC := $(sort $(filter-out tests/test_%,$(wildcard tests/*.c)))
TESTLIB_OBJ := $(TESTLIB_SRC:%.c=$(BUILD)/obj/%.o)
# (plan_tool.c is fsc-plan, linked with the trainer's parts below: PLANNER)
EX_SRC   := $(sort $(filter-out examples/plan_tool.c,$(wildcard examples/*.c)))
EXAMPLES := $(EX_SRC:examples/%.c=$(BUILD)/%)
# The sampler (examples/sample.c): generates text from a model file the trainer saved; make install installs it
SAMPLER  := $(BUILD)/sample
PLANNER  := $(BUILD)/fsc-plan
# The JSON reader of tools/plot and tools/trace_merge (tools/fsc_jsonl.c, on cJSON)
JSONL    := $(BUILD)/fsc-jsonl
BENCH_SRC:= $(sort $(wildcard bench/*.c))
BENCHES  := $(BENCH_SRC:bench/%.c=$(BUILD)/%)
PUBLIC_HEADERS := $(wildcard lib/include/fsc/*.h)
PLUGIN_HEADERS := $(wildcard lib/include/fsc/plugin/*.h)
HEADERS  := $(PUBLIC_HEADERS) $(PLUGIN_HEADERS) $(wildcard lib/*/*.h) $(wildcard sim/*.h) $(wildcard backends/cpu/*.h)

.PHONY: all lib deps test check demo bench fuzz install uninstall clean cuda cuda-if-found mpi plot gpu-kit
all: lib $(TRAINER) $(PLANNER) $(JSONL) $(EXAMPLES) $(BENCHES) $(TESTS) cuda-if-found mpi
lib: $(BUILD)/libfsc.a $(BUILD)/libfsc.so

$(BUILD)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# libfsc.a holds one relocatable object: the library partially linked (ld -r), its hidden symbols then made
# local, so that a program's own cpu_gemm or sim_barrier neither collides with nor replaces the library's.
$(BUILD)/obj/libfsc.o: $(LIB_OBJ)
	$(LD) -r -o $@ $^
	objcopy --localize-hidden $@

$(BUILD)/libfsc.a: $(BUILD)/obj/libfsc.o
	@rm -f $@
	ar rcs $@ $<

# The shared library, with its SONAME and the two links to it (-z defs: no undefined symbol left)
$(LIB_SO): $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,$(SONAME) $(if $(SAN),,-Wl,-z,defs) -o $@ $^ $(LDLIBS)

$(BUILD)/libfsc.so: $(LIB_SO)
	ln -sf libfsc.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

# The tests call internal functions: they link every object as it was compiled, with the tests' own code.
$(BUILD)/libfsc_internal.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/obj/tests/%.o: tests/%.c $(wildcard tests/*.h) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -c $< -o $@

$(BUILD)/libfsc_tests.a: $(TESTLIB_OBJ)
	@rm -f $@
	@mkdir -p $(@D)
	ar rcs $@ $^

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libfsc_tests.a $(BUILD)/libfsc_internal.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< -o $@ $(LDFLAGS) $(BUILD)/libfsc_tests.a $(BUILD)/libfsc_internal.a -lcmocka $(LDLIBS)

# test_stream_faults fails allocations of its own choosing: the library's malloc and aligned_alloc go through it
$(BUILD)/tests/test_stream_faults: LDFLAGS += -Wl,--wrap=malloc -Wl,--wrap=aligned_alloc

$(BUILD)/%: examples/%.c $(wildcard examples/*.h) $(BUILD)/libfsc.a
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(BUILD)/libfsc.a $(LDLIBS)

# The trainer is fsc-train (a GPT-2 or a Llama on token files): its main, examples/train_gpt.c, and its parts,
# examples/train/*.c (one header, train.h); build/train_gpt stays, a link to it, for the scripts and tests that name it.
TRAINER  := $(BUILD)/fsc-train
TRAIN_SRC := examples/train_gpt.c $(sort $(wildcard examples/train/*.c))
$(TRAINER): $(TRAIN_SRC) $(wildcard examples/*.h examples/train/*.h) $(BUILD)/libfsc.a
	$(CC) $(CFLAGS) $(TRAIN_SRC) -o $@ $(LDFLAGS) $(BUILD)/libfsc.a $(LDLIBS)
$(BUILD)/train_gpt: $(TRAINER)
	ln -sf fsc-train $@
# A program that registers its own model family and runs the trainer on it (fsc_train_main; docs/models.md)
$(BUILD)/train_family: examples/train_family.c $(TRAIN_SRC) $(wildcard examples/*.h examples/train/*.h) $(BUILD)/libfsc.a
	$(CC) $(CFLAGS) -DFSC_TRAIN_NO_MAIN -Iexamples $< $(TRAIN_SRC) -o $@ $(LDFLAGS) $(BUILD)/libfsc.a $(LDLIBS)
# The planner is fsc-plan (examples/plan_tool.c, docs/planning.md).
# It parses fsc-train's options with the trainer's own table, checks and job (examples/train: PLAN_SRC).
PLAN_SRC := examples/plan_tool.c $(addprefix examples/train/,options.c config.c checks.c models.c job.c)
$(PLANNER): $(PLAN_SRC) $(wildcard examples/*.h examples/train/*.h) $(BUILD)/libfsc.a
	$(CC) $(CFLAGS) $(PLAN_SRC) -o $@ $(LDFLAGS) $(BUILD)/libfsc.a $(LDLIBS)

$(JSONL): tools/fsc_jsonl.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -lcjson -lm

$(BUILD)/%: bench/%.c $(wildcard bench/*.h) $(BUILD)/libfsc.a
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(BUILD)/libfsc.a $(LDLIBS)

# The CUDA plug-in, whenever nvcc is present: sm_90 code plus compute_90 PTX for newer GPUs
# (CUDA_ARCH overrides). No FMA contraction, so elementwise kernels round exactly as the CPU backend.
# cuBLAS and NCCL are found in either layout: the toolkit's (CUDA_HOME, NCCL_HOME, /usr/local/cuda) or the
# pip wheels' (site-packages/nvidia/cu13/lib holding libcublas.so.13 only, nvidia/nccl/include). The plug-in
# links cuBLAS (with a RUNPATH to the folder it was found in) and loads NCCL with dlopen when a communicator
# is opened (backends/cuda/nccl_load.cu), so one GPU never needs NCCL. `make` skips the plug-in without
# nvcc; `make cuda` asked for by name fails instead.
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NCCL_HOME ?=
WHEELS    := $(wildcard /usr/lib/python3*/site-packages/nvidia /usr/local/lib/python3*/*-packages/nvidia \
               /opt/*/.venv/lib/python3*/site-packages/nvidia $(HOME)/.local/lib/python3*/site-packages/nvidia)
first_dir  = $(firstword $(foreach d,$(2),$(if $(wildcard $(d)/$(1)),$(d))))
NCCL_INC  := $(call first_dir,nccl.h,$(NCCL_HOME)/include $(CUDA_HOME)/include /usr/include $(WHEELS:%=%/nccl/include))
CUBLAS_DIR:= $(call first_dir,libcublas.so*,$(CUDA_HOME)/lib64 $(CUDA_HOME)/lib /usr/lib/x86_64-linux-gnu \
               $(WHEELS:%=%/cu13/lib) $(WHEELS:%=%/cublas/lib))
# -lcublas where the unversioned link exists, else the versioned file itself (the wheels ship only that)
CUBLAS_LIB:= $(if $(wildcard $(CUBLAS_DIR)/libcublas.so),-lcublas,-l:$(notdir $(lastword $(sort $(wildcard $(CUBLAS_DIR)/libcublas.so.*[0-9])))))
CUDA_SRC  := $(sort $(wildcard backends/cuda/*.cu))
CUDA_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o)
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS := -O2 -g -std=c++17 --fmad=false -Werror all-warnings $(CUDA_ARCH) -Ilib/include -Ilib \
             $(if $(NCCL_INC),-I$(NCCL_INC)) -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror,-Wno-unused-parameter
# cuda-if-found: what `make` and the test suite build (nothing, with a note, without nvcc)
ifneq ($(NVCC),)
cuda-if-found: cuda
cuda: $(BUILD)/libfsc_cuda.so
$(BUILD)/obj/backends/cuda/%.o: backends/cuda/%.cu $(wildcard backends/cuda/*.h) $(HEADERS)
	@test -n "$(NCCL_INC)" || { echo "make cuda: nccl.h not found (set NCCL_HOME, or CUDA_HOME to a toolkit holding it)"; exit 2; }
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
# -z nodelete: dlclose never unmaps it (NCCL and CUDA keep threads and state that outlive a handle)
$(BUILD)/libfsc_cuda.so: $(CUDA_OBJ)
	@test -n "$(CUBLAS_DIR)" || { echo "make cuda: libcublas not found (set CUDA_HOME)"; exit 2; }
	$(NVCC) -shared $(CUDA_ARCH) -o $@ $^ -L$(CUBLAS_DIR) $(CUBLAS_LIB) -ldl -Xlinker -z,defs -Xlinker -z,nodelete \
	        -Xlinker -rpath,$(CUBLAS_DIR)
else
cuda-if-found:
	@echo "nvcc not found: skipping the CUDA plug-in (make cuda builds it, with NVCC=path or CUDA_HOME set)"
cuda:
	@echo "make cuda: nvcc not found (on PATH or in /usr/local/cuda/bin); install the CUDA toolkit or set NVCC=path/to/nvcc" >&2
	@exit 2
endif

# The MPI plug-in (one process per rank on the cpu device), whenever mpicc is present. Programs load it with
# dlopen, so only this file links MPI. It compiles in the core's queue of started calls (lib/core/comm_queue.c,
# which calls nothing else of the library), shared with the simulator.
MPICC   ?= $(shell command -v mpicc 2>/dev/null)
MPI_SRC := $(sort $(wildcard backends/mpi/*.c)) lib/core/comm_queue.c
ifneq ($(MPICC),)
mpi: $(BUILD)/libfsc_mpi.so
$(BUILD)/libfsc_mpi.so: $(MPI_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(CFLAGS) -shared $(LDFLAGS) $(if $(SAN),,-Wl,-z,defs) -o $@ $(MPI_SRC) -lm
else
mpi:
	@echo "mpicc not found: skipping the MPI plug-in (apt-get install libopenmpi-dev openmpi-bin)"
endif

# The kit for a lent GPU machine (ci/gpu_kit.sh, into .gpu/); run there with ci/gpu_check.sh (backends/cuda/README.md)
gpu-kit:
	@sh ci/gpu_kit.sh

deps:
	@sh ci/deps.sh

# The test suite: normal build (with coverage counters), AddressSanitizer + UBSan, ThreadSanitizer for the
# threaded simulator, then a coverage summary.
test: deps
	@sh ci/test.sh

# Run the suite of one build variant (used by ci/test.sh).
check: $(TESTS) $(TRAINER) $(PLANNER) $(JSONL) $(EXAMPLES) mpi
	@sh ci/run_tests.sh $(BUILD)/tests "$(TESTS_FILTER)"

demo: deps
	@$(MAKE) --no-print-directory lib $(BUILD)/train_gpt mpi
	@sh ci/demo.sh $(BUILD)

bench: deps
	@$(MAKE) --no-print-directory OPT="-O3 -march=native" BUILD=build/bench lib $(BENCHES:$(BUILD)/%=build/bench/%) build/bench/train_gpt build/bench/fsc-train build/bench/fsc-plan mpi
	@sh ci/bench.sh build/bench

# The trainer's --log as a picture (tools/plot; gnuplot, installed here, not needed by make test):
#   make plot LOG=run.jsonl OUT=run.png
plot:
	@test -n "$(LOG)" -a -n "$(OUT)" || { echo "usage: make plot LOG=run.jsonl OUT=run.png|run.svg"; exit 2; }
	@sh ci/deps.sh plot
	@$(MAKE) --no-print-directory $(JSONL)
	@FSC_JSONL=$(JSONL) sh tools/plot "$(LOG)" "$(OUT)"

FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_SECONDS ?= 20
fuzz: deps
	@sh ci/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_SRC)

# The public headers, the plug-in ABI headers in include/fsc/plugin/, both libraries (the shared one as
# libfsc.so.X.Y.Z with the links libfsc.so.X and libfsc.so), the CUDA and MPI plug-ins when built (it builds
# the MPI one when mpicc is found, not the CUDA one: make cuda first; it prints which it installed or skipped,
# and why), fsc.pc; the programs in bin/ (fsc-train, fsc-ckpt: examples/ckpt_tool.c, fsc-sample, fsc-tokenize:
# examples/tokenize.c, fsc-plan: examples/plan_tool.c), the default
# corpus and the GPT-2 vocabulary in share/fsc/ (where an installed fsc-train finds the corpus without --data and
# fsc_bpe_load_default the vocabulary; plug-ins are looked up in ../lib).
INSTALL_PROGRAMS := $(TRAINER):fsc-train $(BUILD)/ckpt_tool:fsc-ckpt $(SAMPLER):fsc-sample $(BUILD)/tokenize:fsc-tokenize \
                    $(PLANNER):fsc-plan
install: lib $(foreach p,$(INSTALL_PROGRAMS),$(firstword $(subst :, ,$(p)))) mpi
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/fsc
	$(foreach p,$(INSTALL_PROGRAMS),install -m 755 $(firstword $(subst :, ,$(p))) $(DESTDIR)$(PREFIX)/bin/$(lastword $(subst :, ,$(p)));)
	install -m 644 examples/data/coriolanus.txt examples/data/gpt2.tiktoken.gz $(DESTDIR)$(PREFIX)/share/fsc/
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/fsc/plugin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(BUILD)/libfsc.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libfsc.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libfsc.so
	@for p in cuda:nvcc mpi:mpicc; do f=libfsc_$${p%%:*}.so; \
	  if [ -f $(BUILD)/$$f ]; then install -m 755 $(BUILD)/$$f $(DESTDIR)$(PREFIX)/lib/ && echo "installed the plug-in lib/$$f"; \
	  else echo "skipped the plug-in $$f: not built (make $${p%%:*}; it needs $${p#*:})"; fi; done
	install -m 644 $(PUBLIC_HEADERS) $(DESTDIR)$(PREFIX)/include/fsc/
	install -m 644 $(PLUGIN_HEADERS) $(DESTDIR)$(PREFIX)/include/fsc/plugin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' ci/fsc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/fsc.pc
	@echo "installed into $(DESTDIR)$(PREFIX): bin/fsc-train bin/fsc-ckpt bin/fsc-sample bin/fsc-tokenize bin/fsc-plan, lib/libfsc.a lib/libfsc.so*, include/fsc/, lib/pkgconfig/fsc.pc, share/fsc/coriolanus.txt share/fsc/gpt2.tiktoken.gz"

# Removes exactly what install puts there (the same PREFIX and DESTDIR), then the folders it made if empty.
INSTALLED_FILES := $(foreach p,$(INSTALL_PROGRAMS),bin/$(lastword $(subst :, ,$(p)))) share/fsc/coriolanus.txt share/fsc/gpt2.tiktoken.gz \
                   lib/libfsc.a lib/libfsc.so.$(VERSION) lib/$(SONAME) lib/libfsc.so lib/libfsc_cuda.so lib/libfsc_mpi.so \
                   $(PUBLIC_HEADERS:lib/include/%=include/%) $(PLUGIN_HEADERS:lib/include/%=include/%) lib/pkgconfig/fsc.pc
uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALLED_FILES))
	-rmdir $(addprefix $(DESTDIR)$(PREFIX)/,include/fsc/plugin include/fsc share/fsc lib/pkgconfig) 2>/dev/null

clean:
	rm -rf build
