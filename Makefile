# tessera — plain Makefile. `make` builds ./tessera, `make test` runs every
# test and ends with "N passed, N failed", `make demo` is the first run,
# `make bench` prints the benchmark tables.

SHELL   := /bin/bash
# Every rule is written below: without make's built-in suffix rules a no-op
# make does not search them for each of the .d files it includes.
.SUFFIXES:
CC      ?= cc
ARCH    ?= -march=native
OPT     ?= -O3
CFLAGS  ?= $(OPT) $(ARCH)
CFLAGS  += -std=c11 -D_GNU_SOURCE -fopenmp -Wall -Wextra -Wshadow \
           -Wmissing-prototypes -Wstrict-prototypes -Werror=implicit-function-declaration \
           -fno-math-errno -fno-trapping-math -MMD -MP -Isrc
LDLIBS  += -lm

# ---- feature probes (announced once per build) ----
BLAS_PC := $(shell pkg-config --exists openblas 2>/dev/null && echo openblas)
ifeq ($(BLAS_PC),openblas)
  CFLAGS += $(shell pkg-config --cflags openblas) -DTSR_OPENBLAS=1
  # The run-time path names the build pkg-config found (Debian's
  # openblas-openmp): the system's alternatives may point libopenblas.so.0
  # at the pthreads build, whose threads fight the OpenMP pool.
  LDLIBS += $(shell pkg-config --libs openblas) -Wl,-rpath,$(shell pkg-config --variable=libdir openblas)
else
  BLAS_PC := $(shell pkg-config --exists cblas 2>/dev/null && echo cblas)
  ifeq ($(BLAS_PC),cblas)
    CFLAGS += $(shell pkg-config --cflags cblas)
    LDLIBS += $(shell pkg-config --libs cblas)
  else
    BLAS_PC := none
  endif
endif

# MPI: found through pkg-config (OpenMPI's ompi-c, or mpich) or mpicc;
# NO_MPI=1 builds without it.
ifndef NO_MPI
  MPI_PC := $(shell pkg-config --exists ompi-c 2>/dev/null && echo ompi-c || (pkg-config --exists mpich 2>/dev/null && echo mpich))
  ifneq ($(MPI_PC),)
    MPI_CFLAGS := $(shell pkg-config --cflags $(MPI_PC))
    MPI_LIBS   := $(shell pkg-config --libs $(MPI_PC))
  else ifneq ($(shell command -v mpicc 2>/dev/null),)
    MPI_PC     := mpicc
    MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null || mpicc -compile_info 2>/dev/null | cut -d' ' -f2-)
    MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null || mpicc -link_info 2>/dev/null | cut -d' ' -f2-)
  endif
endif
ifneq ($(MPI_PC),)
  CFLAGS += $(MPI_CFLAGS) -DTSR_MPI=1
  LDLIBS += $(MPI_LIBS)
  MPI_MSG := MPI $(MPI_PC) ✓
else
  MPI_MSG := MPI ✗ (install libopenmpi-dev for multi-node runs)
endif

# zlib and libzstd: `prepare` reads gzip- and zstd-compressed inputs
# (NO_ZLIB=1 / NO_ZSTD=1 build without them).
ifndef NO_ZLIB
  ifeq ($(shell pkg-config --exists zlib 2>/dev/null && echo y),y)
    Z_CFLAGS += $(shell pkg-config --cflags zlib) -DTSR_ZLIB=1
    Z_LIBS   += $(shell pkg-config --libs zlib)
    Z_MSG := zlib ✓
  endif
endif
ifndef NO_ZSTD
  ifeq ($(shell pkg-config --exists libzstd 2>/dev/null && echo y),y)
    Z_CFLAGS += $(shell pkg-config --cflags libzstd) -DTSR_ZSTD=1
    Z_LIBS   += $(shell pkg-config --libs libzstd)
    ZSTD_MSG := zstd ✓
  endif
endif
Z_MSG    ?= zlib ✗
ZSTD_MSG ?= zstd ✗
CFLAGS += $(Z_CFLAGS)
LDLIBS += $(Z_LIBS)

# oneDNN (libdnnl-dev): fp32 products where it is faster than the own
# kernel and OpenBLAS (kernels/dnnl); NO_DNNL=1 builds without it.
ifndef NO_DNNL
  ifneq ($(wildcard /usr/include/dnnl.h),)
    CFLAGS += -DTSR_DNNL=1
    LDLIBS += -ldnnl
    DNNL_MSG := oneDNN ✓
  endif
endif
DNNL_MSG ?= oneDNN ✗

SRC_DIRS := core kernels model optim train data io comm parallel plan
LIB_SRC  := $(foreach d,$(SRC_DIRS),$(wildcard src/$(d)/*.c))
CLI_SRC  := $(wildcard src/cli/*.c)
BUILD    := build
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libtessera.a

TEST_SRC := $(wildcard tests/*/test_*.c)
# the MPI test runs through mpirun (tests/comm/test_mpi.sh), not directly
ifneq ($(MPI_PC),)
  MPI_TESTS := tests/comm/test_mpi.sh tests/cli/test_netns.sh
else
  TEST_SRC := $(filter-out tests/comm/test_comm_mpi.c,$(TEST_SRC))
endif
TEST_BIN := $(filter-out $(BUILD)/tests/comm/test_comm_mpi,$(TEST_SRC:%.c=$(BUILD)/%))
TEST_BUILD := $(TEST_SRC:%.c=$(BUILD)/%)
TEST_SHARED := tests/data/tok_cases.c
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o) $(TEST_SHARED:%.c=$(BUILD)/%.o)

.PHONY: all test test-run test-portable demo bench clean features check-asan fuzz
all: features tessera

features:
	@if [ "$(BLAS_PC)" = none ]; then \
	  echo "tessera build: no CBLAS found: run scripts/deps.sh (installs libopenblas-openmp-dev and pkg-config)"; exit 1; fi
	@printf 'tessera build: CBLAS %s ✓  OpenMP ✓  %s  %s  %s  %s  (%s)\n' "$(BLAS_PC)" "$(MPI_MSG)" "$(Z_MSG)" "$(ZSTD_MSG)" "$(DNNL_MSG)" \
	  "$(CC) $(OPT) $(ARCH)"

tessera: $(CLI_OBJ) $(LIB) | features
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(LIB): $(LIB_OBJ)
	@rm -f $@
	$(Q)ar rcs $@ $^

# V=1 shows the full commands.
Q := $(if $(V),,@)

$(BUILD)/%.o: %.c | features
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

# A test is its own .c file, plus any .c file listed below as shared by
# tests (TEST_SHARED), each compiled to an object as the library's sources
# are, so that its .d names every header it includes, the harness's too.
$(TEST_OBJ): $(BUILD)/%.o: %.c | features
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -Itests -c -o $@ $<
$(TEST_BUILD): %: %.o $(LIB)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS)

# The parsers' tests again under AddressSanitizer and UBSan (part of make test).
ASAN_DIR   := $(BUILD)/asan
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
ASAN_TESTS := tests/core/test_core tests/kernels/test_vmath tests/kernels/test_gemm_pack tests/io/test_safetensors tests/io/test_checkpoint tests/data/test_bpe tests/data/test_spm tests/data/test_loader tests/data/test_mixture tests/parallel/test_offload
ASAN_BIN   := $(ASAN_TESTS:%=$(ASAN_DIR)/%)
ASAN_OBJ   := $(LIB_SRC:%.c=$(ASAN_DIR)/%.o)
ASAN_TOBJ  := $(ASAN_TESTS:%=$(ASAN_DIR)/%.o) $(TEST_SHARED:%.c=$(ASAN_DIR)/%.o)
$(ASAN_DIR)/src/%.o: src/%.c | features
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  ASAN  $<")
	$(Q)$(CC) $(filter-out $(OPT),$(CFLAGS)) $(ASAN_FLAGS) -c -o $@ $<
$(ASAN_DIR)/libtessera.a: $(ASAN_OBJ)
	@rm -f $@
	$(Q)ar rcs $@ $^
$(ASAN_TOBJ): $(ASAN_DIR)/%.o: %.c | features
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  ASAN  $<")
	$(Q)$(CC) $(filter-out $(OPT),$(CFLAGS)) $(ASAN_FLAGS) -Itests -c -o $@ $<
$(ASAN_BIN): %: %.o $(ASAN_DIR)/libtessera.a
	@$(if $(Q),echo "  ASAN  $@")
	$(Q)$(CC) $(filter-out $(OPT),$(CFLAGS)) $(ASAN_FLAGS) -o $@ $(filter %.o,$^) $(ASAN_DIR)/libtessera.a $(LDLIBS)

# The tokenizer tests share their harness (reference cases, whole files,
# round trips).
TOK_TESTS := tests/data/test_bpe tests/data/test_spm
$(TOK_TESTS:%=$(BUILD)/%): $(BUILD)/tests/data/tok_cases.o
$(TOK_TESTS:%=$(ASAN_DIR)/%): $(ASAN_DIR)/tests/data/tok_cases.o

# The command itself under both sanitizers: tests/cli/test_asan_cli.sh runs
# the hardening and corpora tests with it.
ASAN_CLI := $(ASAN_DIR)/tessera
$(ASAN_CLI): $(CLI_SRC:%.c=$(ASAN_DIR)/%.o) $(ASAN_DIR)/libtessera.a
	@$(if $(Q),echo "  ASAN  $@")
	$(Q)$(CC) $(filter-out $(OPT),$(CFLAGS)) $(ASAN_FLAGS) -o $@ $^ $(LDLIBS)

check-asan: tessera $(ASAN_BIN)
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 bash tests/run.sh $(ASAN_BIN)

# `make test` sets the machine up first (as `make demo` does), then builds
# and runs in a fresh make that probes the installed libraries.
test:
	@bash scripts/deps.sh
	@$(MAKE) --no-print-directory test-run

test-run: tessera $(TEST_BUILD) $(ASAN_BIN) $(ASAN_CLI)
	@ASAN_OPTIONS=detect_leaks=1 bash tests/run.sh $(TEST_BIN) tests/cli/test_cli.sh tests/cli/test_dp.sh tests/cli/test_tp.sh tests/cli/test_pp.sh tests/cli/test_precision.sh tests/cli/test_llama.sh tests/cli/test_qwen2.sh tests/cli/test_hardening.sh tests/cli/test_hardening_config.sh tests/cli/test_hardening_hf.sh tests/cli/test_profile.sh tests/cli/test_trace.sh tests/cli/test_plot.sh tests/cli/test_corpora.sh tests/cli/test_hardening_corpora.sh tests/cli/test_hardening_misc.sh tests/cli/test_restart.sh tests/cli/test_spike.sh tests/cli/test_ckpt_async.sh tests/cli/test_offload.sh tests/cli/test_offload_params.sh tests/cli/test_sample.sh tests/cli/test_docmask.sh tests/cli/test_same_model.sh tests/cli/test_mixture.sh tests/cli/test_asan_cli.sh $(ASAN_BIN) $(MPI_TESTS)

# The portable build: -march=x86-64-v3 (AVX2/FMA, no AVX-512), where linear
# layers run on OpenBLAS and bf16 multiplies in fp32, built apart in
# $(BUILD)/x86-64-v3 and its kernel and model tests run (CI runs it).
PORT_DIR   := $(BUILD)/x86-64-v3
PORT_TESTS := tests/kernels/test_kernels tests/kernels/test_lookup_loss_adamw tests/model/test_defer tests/kernels/test_gemm_pack tests/kernels/test_gemm_bf16 tests/kernels/test_act16 tests/kernels/test_gemm_sumsq tests/kernels/test_bf16_strips tests/kernels/test_threads tests/kernels/test_attention_bf16 tests/model/test_model tests/parallel/test_norm_sums tests/train/test_train
test-portable:
	@$(MAKE) --no-print-directory BUILD=$(PORT_DIR) ARCH=-march=x86-64-v3 $(PORT_TESTS:%=$(PORT_DIR)/%)
	@bash tests/run.sh $(PORT_TESTS:%=$(PORT_DIR)/%)

# libFuzzer targets for the safetensors, meta.json, checkpoint, shard,
# --config and Hugging Face model directory readers and prepare's
# decompressing reader (clang), each run for FUZZ_SECONDS from the seed
# corpus in fuzz/corpus, with zlib and libzstd when the build found them.
FUZZ_SECONDS ?= 20
FUZZ_CC      ?= clang
FUZZ_SRC     := src/core/check.c src/core/half.c src/core/prof.c src/core/trace.c src/core/timer.c src/core/json.c src/core/fileio.c src/core/checksum.c src/io/safetensors.c \
                src/io/checkpoint.c src/io/checkpoint_read.c src/data/shard.c src/cli/flags.c src/io/meta.c src/model/config.c \
                src/io/hf_dir.c src/io/hf_gpt2.c src/io/hf_model.c src/io/weights.c src/model/params.c src/model/arch.c src/data/zread.c
FUZZ_TARGETS := safetensors meta ckpt shard config hfdir zread
fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)/fuzz/corpus_$$t; \
	  echo "fuzz $$t: $(FUZZ_SECONDS) s"; \
	  $(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	    $(BUILD)/fuzz/corpus_$$t fuzz/corpus/$$t >$(BUILD)/fuzz/$$t.log 2>&1; rc=$$?; \
	  grep -E "DONE|ERROR|SUMMARY" $(BUILD)/fuzz/$$t.log | tail -3; \
	  if [ $$rc -ne 0 ]; then echo "fuzz $$t: FAILED (log: $(BUILD)/fuzz/$$t.log)"; exit 1; fi; \
	done
	@echo "fuzz: no crash"

# The readers are built instrumented from FUZZ_SRC; what they call beyond
# it (the architectures' tables, in the model code with the kernels) links
# from the library, whose copies of FUZZ_SRC's files the linker never pulls.
$(BUILD)/fuzz/%: fuzz/%.c fuzz/fuzz_file.c $(FUZZ_SRC) $(LIB)
	@mkdir -p $(dir $@)
	@echo "  FUZZ  $<"
	$(Q)$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Isrc $(Z_CFLAGS) -o $@ $< fuzz/fuzz_file.c \
	  $(FUZZ_SRC) $(LIB) -fopenmp $(LDLIBS)

demo:
	bash scripts/deps.sh
	$(MAKE) tessera
	bash scripts/demo.sh

BENCH_BIN := $(BUILD)/bench/bench_train $(BUILD)/bench/sgemm $(BUILD)/bench/peaks $(BUILD)/bench/ceilings $(BUILD)/bench/bench_bf16 $(BUILD)/bench/bench_tokenizer $(BUILD)/bench/bench_gemm
ifneq ($(MPI_PC),)
  BENCH_BIN += $(BUILD)/bench/mpi_allreduce
endif
# oneDNN's matmul against tessera's products (bench/bench_dnnl.c): built
# where libdnnl-dev is installed (scripts/deps.sh).
DNNL_H := $(wildcard /usr/include/dnnl.h /usr/local/include/dnnl.h)
ifneq ($(DNNL_H),)
  BENCH_BIN += $(BUILD)/bench/bench_dnnl
endif
bench: tessera $(BENCH_BIN)
	@bash bench/run.sh

clean:
	rm -rf $(BUILD) tessera

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(ASAN_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(ASAN_TOBJ:.o=.d)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/bench/bench_dnnl: bench/bench_dnnl.c $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) -ldnnl $(LDLIBS)
