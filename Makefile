# tessera — plain Makefile. `make` builds ./tessera, `make test` runs every
# test and ends with "N passed, N failed", `make demo` is the first run,
# `make bench` prints the benchmark tables.

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
  LDLIBS += $(shell pkg-config --libs openblas)
else
  BLAS_PC := $(shell pkg-config --exists cblas 2>/dev/null && echo cblas)
  ifeq ($(BLAS_PC),cblas)
    CFLAGS += $(shell pkg-config --cflags cblas)
    LDLIBS += $(shell pkg-config --libs cblas)
  else
    BLAS_PC := none
  endif
endif

SRC_DIRS := core kernels model train data io
LIB_SRC  := $(foreach d,$(SRC_DIRS),$(wildcard src/$(d)/*.c))
CLI_SRC  := $(wildcard src/cli/*.c)
BUILD    := build
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libtessera.a

TEST_SRC := $(wildcard tests/*/test_*.c)
TEST_BIN := $(TEST_SRC:%.c=$(BUILD)/%)

.PHONY: all test demo bench clean features
all: features tessera

features:
	@if [ "$(BLAS_PC)" = none ]; then \
	  echo "tessera build: no CBLAS found: run scripts/deps.sh (installs libopenblas-openmp-dev and pkg-config)"; exit 1; fi
	@printf 'tessera build: CBLAS %s ✓  OpenMP ✓  (%s)\n' "$(BLAS_PC)" "$(CC) $(OPT) $(ARCH)"

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

$(BUILD)/tests/%: tests/%.c $(LIB) tests/test.h tests/ref.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -Itests -o $@ $< $(LIB) $(LDLIBS)

test: tessera $(TEST_BIN)
	@bash tests/run.sh $(TEST_BIN) tests/cli/test_cli.sh

demo:
	bash scripts/deps.sh
	$(MAKE) tessera
	bash scripts/demo.sh

bench: tessera $(BENCH_BIN)
	@bash bench/run.sh

clean:
	rm -rf $(BUILD) tessera

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)

BENCH_BIN := $(BUILD)/bench/bench_train $(BUILD)/bench/sgemm $(BUILD)/bench/bench_tokenizer
$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)
