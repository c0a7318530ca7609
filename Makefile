# torch_tpu — `make run` trains a small model on the `tpu` device; `make test` runs every test.
# Both set up what they need on a fresh machine (.venv with torch==2.13.0, the C core, the extension).
PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
BUILD  := build/tpurt
CC     := $(shell command -v ccache >/dev/null 2>&1 && echo "ccache gcc" || echo gcc)
JOBS   ?= $(shell nproc)

CFLAGS_COMMON := -std=c11 -g -fPIC -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare \
                 -ffp-contract=off -pthread -D_GNU_SOURCE -Icsrc/tpurt/include -Icsrc/tpurt
CFLAGS   ?= -O2
SAN_FLAGS := -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

TPURT_SRCS := $(shell find csrc/tpurt -name '*.c' -not -path '*/tests/*' | sort)
TPURT_HDRS := $(shell find csrc/tpurt -name '*.h')
CTEST_SRCS := $(sort $(wildcard csrc/tpurt/tests/test_*.c))

# ISA-specific kernels are compiled for their ISA and only called after a runtime CPU check.
# Host-driver kernels are written for gcc's auto-vectorizer, which needs -O3 (gcc 12 does not
# vectorize at -O2) and selects without -fno-trapping-math (FP exception flags are never read;
# results are unchanged); -ffp-contract=off keeps every ISA build bit-identical.
opt_flags = $(if $(findstring drivers/host/,$(1)),-O3 -fno-trapping-math -fno-math-errno,)
isa_flags = $(if $(findstring _avx512,$(1)),-mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c$(if $(findstring _avx512bf16,$(1)), -mavx512bf16),$(if $(findstring _avx2,$(1)),-mavx2 -mfma -mf16c,))

.PHONY: all venv lib ext build run test test-c test-sanitize test-py headers-c11 bench clean

all: build

$(VENV)/.stamp: Makefile
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q torch==2.13.0 numpy pytest setuptools wheel ninja expecttest transformers==5.23.0
	touch $@
venv: $(VENV)/.stamp
# Test-only oracle for the StableHLO printer (tests/test_stablehlo.py): jax's XLA on the CPU.
$(VENV)/.oracle: $(VENV)/.stamp
	$(VPY) -m pip install -q jax==0.10.2 jaxlib==0.10.2
	touch $@

# ---- libtpurt (C11), optimized and sanitizer builds
$(BUILD)/opt/%.o: %.c $(TPURT_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $(call opt_flags,$<) $(call isa_flags,$<) -c $< -o $@
$(BUILD)/san/%.o: %.c $(TPURT_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(SAN_FLAGS) $(call isa_flags,$<) -c $< -o $@

$(BUILD)/libtpurt.a: $(TPURT_SRCS:%.c=$(BUILD)/opt/%.o)
	@rm -f $@; ar rcs $@ $^
$(BUILD)/libtpurt-san.a: $(TPURT_SRCS:%.c=$(BUILD)/san/%.o)
	@rm -f $@; ar rcs $@ $^
lib: $(BUILD)/libtpurt.a

$(BUILD)/tests/%: csrc/tpurt/tests/%.c $(BUILD)/libtpurt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $< $(BUILD)/libtpurt.a -lm -o $@
$(BUILD)/tests-san/%: csrc/tpurt/tests/%.c $(BUILD)/libtpurt-san.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(SAN_FLAGS) $< $(BUILD)/libtpurt-san.a -lm -o $@

CTEST_BINS := $(CTEST_SRCS:csrc/tpurt/tests/%.c=$(BUILD)/tests/%)
CTEST_SAN_BINS := $(CTEST_SRCS:csrc/tpurt/tests/%.c=$(BUILD)/tests-san/%)

# The C tests use a fresh compilation-cache directory of their own (never ~/.cache/torch_tpu).
test-c: $(CTEST_BINS) headers-c11
	@rm -rf $(BUILD)/test-cache
	@set -e; for t in $(CTEST_BINS); do echo "== $$t"; \
	  TORCH_TPU_NUM_DEVICES=2 TORCH_TPU_CACHE_DIR=$(CURDIR)/$(BUILD)/test-cache $$t; done

test-sanitize: $(CTEST_SAN_BINS)
	@rm -rf $(BUILD)/test-cache-san
	@set -e; for t in $(CTEST_SAN_BINS); do echo "== $$t (asan+ubsan)"; \
	  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TORCH_TPU_NUM_DEVICES=2 \
	  TORCH_TPU_CACHE_DIR=$(CURDIR)/$(BUILD)/test-cache-san $$t; done

# Every public header must compile as pure C11 on its own.
headers-c11:
	@for h in csrc/tpurt/include/*.h; do \
	  printf '#include "%s"\nint main(void){return 0;}\n' "$$(basename $$h)" | \
	  gcc -std=c11 -pedantic -Wall -Werror -Icsrc/tpurt/include -x c - -o /dev/null || exit 1; done

# ---- the PyTorch extension (C++17 glue linked with libtpurt.a)
$(VENV)/.installed: $(VENV)/.stamp setup.py pyproject.toml
	TORCH_TPU_SKIP_EXT=1 $(VPY) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@
ext: lib $(VENV)/.installed
	MAX_JOBS=$(JOBS) $(VPY) setup.py -q build_ext --inplace
build: ext

run: build
	$(VPY) examples/train_mlp.py --device tpu --steps 300

test-py: build $(VENV)/.oracle
	$(VPY) -m pytest -q --durations=25 tests

test: build test-c test-sanitize test-py

bench: build
	$(VPY) benchmarks/run_all.py

clean:
	rm -rf build torch_tpu/_C*.so *.egg-info
