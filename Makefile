# disco - one non-recursive Makefile.
#   make            library (build/libdisco.a, build/libdisco.so) and tools
#   make test       Check suites (SANITIZE=address or SANITIZE=thread to sanitize)
#   make bench      benchmarks -> build/bench.json
#   make demo       the main job
#   make soak       the fault soak (SOAK_SECONDS); a bounded part runs in make test
#   make valgrind   memcheck over whole sessions (demo and a short soak)
#   make python     the Python package's C extension, in place (python/disco)
#   make gpu-kit    every GPU check packed for a bare GPU machine (docs/gpu-kit.md)
# Missing Debian packages are installed first (tools/deps.sh).

CC       ?= gcc
SANITIZE ?=
O        ?= -O2

ifeq ($(SANITIZE),)
BUILD    := build
SANFLAGS :=
else ifeq ($(SANITIZE),address)
BUILD    := build/asan
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else ifeq ($(SANITIZE),thread)
BUILD    := build/tsan
SANFLAGS := -fsanitize=thread -DDISCO_NO_CLONES # ifunc resolvers run before TSan is up
else
$(error SANITIZE must be address or thread)
endif

DEPS_STAMP := build/.deps-ok
# The Debian packages are checked while the Makefile is read, the first
# time (or when tools/deps.sh changes): what is found below (Open MPI) must
# be there before it is looked for.
ifeq ($(filter clean format,$(MAKECMDGOALS)),)
ifneq ($(shell test -f $(DEPS_STAMP) && test $(DEPS_STAMP) -nt tools/deps.sh && echo ok),ok)
DEPS_RC := $(shell sh tools/deps.sh >&2; echo $$?)
ifneq ($(DEPS_RC),0)
$(error tools/deps.sh failed; see above)
endif
$(shell mkdir -p build && touch $(DEPS_STAMP))
endif
endif
PKGS       := hwloc check jansson libsodium
PKG_CFLAGS  = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS    = $(shell pkg-config --libs hwloc jansson libsodium 2>/dev/null) $(MPI_LIBS)
CHECK_LIBS  = $(shell pkg-config --libs check 2>/dev/null)

CFLAGS   ?= $(O) -g
CFLAGS   += -std=c11 -Wall -Wextra -Werror -fPIC -D_GNU_SOURCE -I. -Iinclude -MMD -MP $(SANFLAGS)
LDFLAGS  += $(SANFLAGS)
LDLIBS   += -lpthread -ldl -lm

VERSION  := 0.4.0
# The soname's number is the ABI: it changes whenever a public name or
# layout does (1: the issue 15 renames and the <disco/shm/*.h> split; 2: the
# device table's physical_id and mps, the worker view's kernel, 0.3).
SONAME   := libdisco.so.3

# Sessions across nodes (scheduler/node/) need Open MPI (mpicc, installed
# by tools/deps.sh): its link is compiled with mpicc's flags and linked
# with its libraries; without it, node_none.c refuses such sessions.
NODE_MPI_SRC := scheduler/node/node_mpi.c scheduler/node/node_msg.c scheduler/node/node_link.c \
    scheduler/node/node_fwd.c scheduler/node/node_fwd_in.c scheduler/node/node_fwd_out.c \
    scheduler/node/node_net.c scheduler/node/node_wait.c
# NO_MPI=1 builds without it even where it is installed (the test of that
# build: the node suite skips, saying so).
ifneq ($(if $(NO_MPI),,$(shell command -v mpicc 2>/dev/null)),)
MPI_MODE   := on
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
NODE_OFF   := scheduler/node/node_none.c
else
MPI_MODE   := off
MPI_LIBS   :=
NODE_OFF   := $(NODE_MPI_SRC)
endif
LIB_SRC  := $(sort $(filter-out $(NODE_OFF),$(wildcard shm/*.c workers/*/*.c scheduler/*/*.c)))
$(NODE_MPI_SRC:%.c=$(BUILD)/obj/%.o): CFLAGS += $(MPI_CFLAGS)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
# tools/<folder>/ holds one program's parts: the file named like the program
# (disco-X.c, or disco.c for the CLI) is its main, the others are linked with
# it. Two exceptions: tools/demo/demo_lib.c and demo_decoder_lib.c are the
# demo's function library (a shared object, not linked in) and
# tools/bench/mpi_allreduce.c and mpi_node_base.c are Open MPI baselines
# (built with mpicc), tools/bench/node_bench.c a program of its own (run
# under mpirun by disco-bench). disco-demo also links bench_util.o.
PROG_DIRS := bench cli demo jsonrpc rpc-server soak worker
DEMOLIB_SRC := tools/demo/demo_lib.c tools/demo/demo_decoder_lib.c tools/demo/demo_dec_kernels.c
NOT_LINKED := $(DEMOLIB_SRC) tools/bench/mpi_allreduce.c tools/bench/mpi_node_base.c \
    tools/bench/node_bench.c
TOOL_SRC := $(wildcard tools/*/disco-*.c) tools/cli/disco.c
TOOLS    := $(addprefix $(BUILD)/bin/,$(notdir $(TOOL_SRC:.c=)))
tool_objs = $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out $(NOT_LINKED),$(wildcard tools/$(1)/*.c)))
TOOL_OBJ := $(foreach d,$(PROG_DIRS),$(call tool_objs,$(d)))
SOAK_OBJ := $(filter-out $(BUILD)/obj/tools/soak/disco-soak.o,$(call tool_objs,soak))
DEMOLIB  := $(BUILD)/lib/libdisco_demo.so
TEST_SRC := $(wildcard tests/test_*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/tests/run_tests.o
TEST_BIN := $(BUILD)/bin/run_tests
TESTLIB  := $(BUILD)/lib/libdisco_testlib.so
# Programs export the whole library, so that libraries they load
# (disco.load_library) resolve disco_register_func & co. against it.
WHOLE_LIB = -rdynamic -Wl,--whole-archive $(BUILD)/libdisco.a -Wl,--no-whole-archive

.PHONY: all deps test bench demo soak valgrind clean format cppcheck fuzz install python \
    gpu-kit gpu-kit-check
.SECONDARY: # keep object files (make would delete them as intermediates)
all: $(BUILD)/libdisco.a $(BUILD)/libdisco.so $(TOOLS) $(DEMOLIB)

deps: $(DEPS_STAMP)
$(DEPS_STAMP): tools/deps.sh
	@sh tools/deps.sh
	@mkdir -p $(@D) && touch $@

# Objects rebuild when the compile flags change (SANITIZE=, -D options).
# (BASE_CFLAGS is expanded here, so per-target additions do not touch it.)
FLAGS_STAMP := $(BUILD)/.cflags
BASE_CFLAGS := $(CFLAGS) $(SANFLAGS)
$(FLAGS_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(BASE_CFLAGS)' | cmp -s - $@ || echo '$(BASE_CFLAGS)' > $@
.PHONY: FORCE

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -c $< -o $@

$(BUILD)/libdisco.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The library is linked again when its soname changes (a stamp holds it).
SONAME_STAMP := $(BUILD)/.soname
$(SONAME_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(SONAME)' | cmp -s - $@ || echo '$(SONAME)' > $@

$(BUILD)/libdisco.so: $(LIB_OBJ) $(SONAME_STAMP)
	$(CC) -shared -Wl,-soname,$(SONAME) $(LDFLAGS) -o $@ $(filter %.o,$^) $(PKG_LIBS) $(LDLIBS)

# One link rule a program: its folder's objects and the library.
define tool_rule
$(BUILD)/bin/$(notdir $(basename $(1))): $(call tool_objs,$(patsubst tools/%/,%,$(dir $(1)))) $(BUILD)/libdisco.a
	@mkdir -p $$(@D)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $$(WHOLE_LIB) $$(PKG_LIBS) $$(LDLIBS)
endef
$(foreach s,$(TOOL_SRC),$(eval $(call tool_rule,$(s))))
$(BUILD)/bin/disco-demo: $(BUILD)/obj/tools/bench/bench_util.o

$(DEMOLIB): $(DEMOLIB_SRC:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -o $@ $^

# The soak suite runs a bounded soak with the engine disco-soak uses.
$(TEST_BIN): $(TEST_OBJ) $(SOAK_OBJ) $(BUILD)/libdisco.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(SOAK_OBJ) $(WHOLE_LIB) $(CHECK_LIBS) $(PKG_LIBS) $(LDLIBS)

# The multi-node tests' program (tests/node_prog.c, its in-worker
# communication scenarios in tests/node_comm.c), run under mpirun by
# tests/test_node.c.
NODE_PROG := $(BUILD)/bin/node_prog
ifeq ($(MPI_MODE),on) # its forged message across nodes (tests/node_p2p.c, p2p-forged)
$(BUILD)/obj/tests/node_p2p.o $(BUILD)/obj/tests/node_p2p_pieces.o: CFLAGS += $(MPI_CFLAGS) -DDISCO_TEST_MPI
endif
$(NODE_PROG): $(BUILD)/obj/tests/node_prog.o $(BUILD)/obj/tests/node_comm.o \
    $(BUILD)/obj/tests/node_p2p.o $(BUILD)/obj/tests/node_p2p_pieces.o $(BUILD)/libdisco.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(WHOLE_LIB) $(PKG_LIBS) $(LDLIBS)

# The figures across nodes (tools/bench/node_bench.c), run under mpirun by
# disco-bench; linked as node_prog is.
NODE_BENCH := $(BUILD)/bin/node_bench
$(NODE_BENCH): $(BUILD)/obj/tools/bench/node_bench.o $(BUILD)/libdisco.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(WHOLE_LIB) $(PKG_LIBS) $(LDLIBS)

# The session tests' function library; its disco symbols come from the
# program that loads it.
$(TESTLIB): $(BUILD)/obj/testlib/testlib.o $(BUILD)/obj/testlib/testlib_comm.o
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -o $@ $^

$(BUILD)/obj/testlib/%.o: tests/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -c $< -o $@

# Tests find the test library and the worker program by absolute path.
$(BUILD)/obj/tests/%.o: CFLAGS += -DDISCO_TEST_LIB='"$(abspath $(TESTLIB))"' \
    -DDISCO_TEST_WORKER='"$(abspath $(BUILD)/bin/disco-worker)"' \
    -DDISCO_TEST_BIN='"$(abspath $(BUILD)/bin)"' -DDISCO_TEST_SRC='"$(abspath .)"' \
    -DDISCO_TEST_LIBDISCO='"$(abspath $(BUILD)/libdisco.so)"'

# The JSON-RPC test runs under Debian's python3 (deps.sh installs it and the
# third-party client it imports), not another python3 earlier on PATH.
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)

# The Python package (python/disco): a CPython extension over libdisco.so,
# built for $(PYTHON) (Debian's python3 and python3-dev). `make python`
# builds it in place: python/disco/_core<EXT_SUFFIX> finds libdisco.so.3
# through its rpath, $ORIGIN/../../build (PYTHONPATH=python is all a script
# needs). `make install` links a copy whose rpath is $ORIGIN/../../.. (the
# prefix's lib/, from lib/python3/dist-packages/disco) into PYDIR.
# PY_ABI3=1 builds it for the stable ABI of Python 3.11 and later instead
# (_core.abi3.so; DP_STABLE_ABI in _core.h says why that is not the
# default: no vectorcall in 3.11's limited API).
PY_CONF    = $(shell $(PYTHON) -c 'import sysconfig as s; print(s.get_paths()["include"], s.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
PY_INCLUDE = $(word 1,$(PY_CONF))
PY_SRC    := $(wildcard python/disco/_*.c)
ifeq ($(PY_ABI3),1)
PY_EXT    := .abi3.so
PY_OBJDIR := $(BUILD)/pyobj-abi3
PY_DEFS   := -DDP_STABLE_ABI
else
PY_EXT     = $(word 2,$(PY_CONF))
PY_OBJDIR := $(BUILD)/pyobj
PY_DEFS   :=
endif
PY_OBJ    := $(PY_SRC:python/%.c=$(PY_OBJDIR)/%.o)
PY_CORE    = python/disco/_core$(PY_EXT)
PY_FILES  := $(wildcard python/disco/*.py) python/disco/disco-py-worker
PYDIR     ?= $(PREFIX)/lib/python3/dist-packages

# The extension's file names depend on $(PYTHON), which deps.sh may only
# install during this run (a bare Debian root): they are made by a second
# make, which reads this file again once the dependencies are there.
python: $(BUILD)/libdisco.so.3 | $(DEPS_STAMP)
	@$(MAKE) --no-print-directory py-ext
py-ext: $(PY_CORE)
py-install-ext: $(BUILD)/pyinst/_core$(PY_EXT)
# With PY_ABI3=1 (make test runs it): the extension's objects for the stable
# ABI, compiled only, so that a call outside 3.11's limited API fails the
# tests here, not first in the GPU kit's build (which links that build).
py-abi3-objs: $(PY_OBJ)
.PHONY: py-ext py-install-ext py-abi3-objs

$(PY_OBJDIR)/%.o: python/%.c python/disco/_core.h $(FLAGS_STAMP) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@test -n "$(PY_INCLUDE)" -a -f "$(PY_INCLUDE)/Python.h" || \
	    { echo "make python: no Python.h for $(PYTHON) (install python3-dev)"; exit 1; }
	$(CC) $(CFLAGS) $(PY_DEFS) -fvisibility=hidden -I$(PY_INCLUDE) $(PKG_CFLAGS) -c $< -o $@

# The soname's link in the build tree, for the in-place extension.
$(BUILD)/libdisco.so.3: $(BUILD)/libdisco.so
	ln -sf libdisco.so $@

$(PY_CORE): $(PY_OBJ) $(BUILD)/libdisco.so
	@rm -f python/disco/_core.*.so # the other ABI's build, which Python might prefer
	$(CC) -shared $(LDFLAGS) -o $@ $(PY_OBJ) -L$(BUILD) -l:libdisco.so \
	    -Wl,-rpath,'$$ORIGIN/../../$(BUILD)' -ldl

$(BUILD)/pyinst/_core$(PY_EXT): $(PY_OBJ) $(BUILD)/libdisco.so
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -o $@ $(PY_OBJ) -L$(BUILD) -l:libdisco.so \
	    -Wl,-rpath,'$$ORIGIN/../../..' -ldl

# The public headers compile as C++: tests/cxx_api.cpp includes the
# umbrella under g++ -std=c++17 -Wall -Wextra -Werror, calls the API and
# runs a session against libdisco.a.
CXX_API := $(BUILD)/bin/cxx_api
$(CXX_API): tests/cxx_api.cpp $(wildcard include/disco/*.h include/disco/shm/*.h) $(BUILD)/libdisco.a | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) -std=c++17 -Wall -Wextra -Werror -D_GNU_SOURCE -I. -Iinclude $(SANFLAGS) $(PKG_CFLAGS) \
	    $(LDFLAGS) -o $@ $< $(WHOLE_LIB) $(PKG_LIBS) $(LDLIBS)

# Each test runs in its own process (CK_FORK=yes). tests/arrows.py checks
# the layout on the built objects: no circles between files, no arrow up
# the layers (shm <- workers <- scheduler), no ../ includes. Afterwards
# nothing of ours may remain in /dev/shm (disco never names segments there).
# The Python tests (tests/python, pytest under $(PYTHON)) run against the
# in-place package, not in sanitized builds (the interpreter is not built
# with the sanitizer): DISCO_TEST_LIB, DISCO_WORKER and DISCO_TEST_BIN say
# where the test library, the worker program and the tools are.
PY_TEST_ENV = PYTHONPATH=$(abspath python) DISCO_QUIET=1 DISCO_TEST_LIB=$(abspath $(TESTLIB)) \
    DISCO_WORKER=$(abspath $(BUILD)/bin/disco-worker) DISCO_TEST_BIN=$(abspath $(BUILD)/bin)
test: $(TEST_BIN) $(NODE_PROG) $(BUILD)/libdisco.so $(TOOLS) $(TESTLIB) $(DEMOLIB) $(CXX_API) $(if $(SANITIZE),,python)
	CK_FORK=yes $(TEST_BIN)
	$(PYTHON) tests/arrows.py $(BUILD)/obj
	DISCO_QUIET=1 $(CXX_API)
	$(PYTHON) tests/jsonrpc_test.py $(BUILD)/bin/disco-jsonrpc $(TESTLIB)
	$(if $(SANITIZE),,$(if $(wildcard tests/python),$(PY_TEST_ENV) $(PYTHON) -m pytest -q -p no:cacheprovider tests/python))
	$(if $(SANITIZE),,$(MAKE) --no-print-directory PY_ABI3=1 py-abi3-objs)
	$(if $(SANITIZE),,sh tests/install_test.sh)
	@if ls /dev/shm 2>/dev/null | grep -qi disco; then \
	    echo "FAIL: disco objects left in /dev/shm"; ls /dev/shm; exit 1; fi

# The data-plane baseline is Open MPI's MPI_Allreduce (tools/bench/mpi_allreduce.c,
# built with mpicc, not linked with disco, run by disco-bench through mpirun).
# Debian's Open MPI is installed when mpicc or mpirun is missing (root only,
# `tools/deps.sh mpi`); without it the MPI figures are skipped and the table
# says so. Then tools/bench/py_bench.py adds the Python layer's figures
# (py_call_sync_ns beside the same rounds in C on its session,
# py_call_sync_p99_ns, py_copy_to_worker0_gbps) to bench.json beside the C
# ones of the same run (run by hand without the package, it says it skipped).
# The figures across nodes (tools/bench/bench_node.c) need a library built
# with Open MPI (MPI_MODE on, decided when the Makefile is read: Open MPI
# installed by the recipe below comes too late for it) to run node_bench,
# and mpicc for their baseline, tools/bench/mpi_node_base.c; without either
# disco-bench skips them with one line.
MPI_BENCH := $(BUILD)/bin/mpi_allreduce
MPI_CC    := mpicc $(O) -g -std=c11 -Wall -Wextra -Werror -I. -o $(MPI_BENCH) tools/bench/mpi_allreduce.c
NODE_BASE := $(BUILD)/bin/mpi_node_base
NODE_CC   := mpicc $(O) -g -std=c11 -Wall -Wextra -Werror -I. -o $(NODE_BASE) tools/bench/mpi_node_base.c
# More options for disco-bench, e.g. BENCH_ARGS="--quick --only node".
BENCH_ARGS ?=

bench: $(BUILD)/bin/disco-bench $(BUILD)/bin/disco-worker python $(if $(filter on,$(MPI_MODE)),$(NODE_BENCH))
	@sh tools/deps.sh mpi $(BUILD)/mpi-install.log
	@mpi=""; \
	if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then \
	    mkdir -p $(dir $(MPI_BENCH)); \
	    if [ $(MPI_BENCH) -nt tools/bench/mpi_allreduce.c ] && [ $(MPI_BENCH) -nt tools/bench/bench_stats.h ] || \
	       { echo "$(MPI_CC)"; $(MPI_CC); }; then \
	        mpi="--mpi $(MPI_BENCH)"; \
	    else \
	        echo "bench: mpicc failed; MPI baseline skipped"; \
	    fi; \
	    if [ "$(MPI_MODE)" != on ]; then \
	        echo "bench: disco was built without Open MPI; figures across nodes skipped"; \
	    elif [ $(NODE_BASE) -nt tools/bench/mpi_node_base.c ] && [ $(NODE_BASE) -nt tools/bench/bench_stats.h ] || \
	       { echo "$(NODE_CC)"; $(NODE_CC); }; then \
	        mpi="$$mpi --node-bench $(NODE_BENCH) --node-base $(NODE_BASE)"; \
	    else \
	        echo "bench: mpicc failed; figures across nodes skipped"; \
	    fi; \
	fi; \
	echo "$(BUILD)/bin/disco-bench --json $(BUILD)/bench.json $$mpi $(BENCH_ARGS)"; \
	$(BUILD)/bin/disco-bench --json $(BUILD)/bench.json $$mpi $(BENCH_ARGS)
	@# The Python front's figures beside the C ones (tools/bench/py_bench.py),
	@# added to bench.json.
	PYTHONPATH=python DISCO_QUIET=1 $(PYTHON) tools/bench/py_bench.py --json $(BUILD)/bench.json
	@# The peers a Python user would pick instead (mpi4py, torch gloo,
	@# multiprocessing pipes), 2 processes each, beside disco's Python figures
	@# (tools/bench/py_peers.py).
	PYTHONPATH=python DISCO_QUIET=1 $(PYTHON) tools/bench/py_peers.py --json $(BUILD)/bench.json
	@# The plots (tools/bench/plot.py, gnuplot): build/plots/*.svg.
	@sh tools/deps.sh plot $(BUILD)/plot-install.log
	$(PYTHON) tools/bench/plot.py $(BUILD)/bench.json $(BUILD)/plots $(wildcard $(BUILD)/demo.json)

demo: $(BUILD)/bin/disco-demo $(BUILD)/bin/disco-worker $(BUILD)/bin/disco $(DEMOLIB)
	$(BUILD)/bin/disco-demo --trace $(BUILD)/demo-trace.json --json $(BUILD)/demo.json
	@$(MAKE) --no-print-directory python && PYTHONPATH=python $(PYTHON) tools/demo/tp_decoder.py --json $(BUILD)/tp_decoder.json

# The fault soak (tools/soak/soak.h): SOAK_SECONDS of rounds that kill -9 a
# worker or the controller mid-call; report in build/soak.json.
SOAK_SECONDS ?= 120
soak: $(BUILD)/bin/disco-soak $(BUILD)/bin/disco-worker
	$(BUILD)/bin/disco-soak --seconds $(SOAK_SECONDS) --quiet --json $(BUILD)/soak.json

# valgrind memcheck over whole sessions: the demo's MLP and decoder (open,
# library calls, tensors, collectives, trace, close) and a short soak (worker and
# controller kills; spawned workers followed too). Each process logs to
# build/valgrind/PID.log; any memory error or definite or indirect leak in
# any of them fails the target. valgrind is installed when missing (root).
VG_DIR   := $(BUILD)/valgrind
VALGRIND := valgrind -q --trace-children=yes --leak-check=full --log-file=$(VG_DIR)/%p.log \
    --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --error-exitcode=99
VG_BAD   := Invalid|uninitialised|Uninitialised|definitely lost|indirectly lost|Mismatched|Syscall param|overlap
valgrind: $(BUILD)/bin/disco-demo $(BUILD)/bin/disco-soak $(BUILD)/bin/disco-worker $(DEMOLIB)
	@command -v valgrind >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; }
	@rm -rf $(VG_DIR) && mkdir -p $(VG_DIR)
	$(VALGRIND) $(BUILD)/bin/disco-demo --mlp-only --workers 2 --steps 3 --d-model 64 \
	    --d-ff 256 --trace $(VG_DIR)/trace.json
	$(VALGRIND) $(BUILD)/bin/disco-demo --decoder-only --workers 2 --vocab 64 --d-model 32 \
	    --layers 2 --heads 4 --d-ff 64 --tokens 4 --trace $(VG_DIR)/trace.json
	$(VALGRIND) $(BUILD)/bin/disco-soak --rounds 12 --bound-ms 5000 --quiet
	@if grep -E -l '$(VG_BAD)' $(VG_DIR)/*.log; then \
	    echo "valgrind: errors in the logs above"; exit 1; fi
	@echo "valgrind: $$(ls $(VG_DIR)/*.log | wc -l) processes, no memory errors, no definite or indirect leaks"

# The GPU kit (tools/gpu-kit/, docs/gpu-kit.md): the working tree copied to
# TEST_ROOT and built there (NO_MPI=1, PY_ABI3=1), packed with the shared
# libraries, Open MPI and run-gpu.sh into build/gpu-kit.tar.gz, which runs
# every GPU check on a GPU machine without our compiler or Debian's
# libraries once unpacked at TEST_ROOT (the tests' compiled-in paths).
# gpu-kit-check runs that kit in a bare Debian root without a GPU, twice:
# with DISCO_REQUIRE_GPU=0 every step passes or skips, by default every GPU
# step fails saying "no CUDA device" (needs root; part of .ci/run).
TEST_ROOT ?= /tmp/disco-gpu
GPU_KIT   := build/gpu-kit.tar.gz
gpu-kit:
	sh tools/gpu-kit/make-kit.sh . $(TEST_ROOT) $(GPU_KIT)
gpu-kit-check: gpu-kit
	bash tools/gpu-kit/check-kit.sh $(GPU_KIT) build/gpu-kit-check

# make install PREFIX=...: headers (with the umbrella <disco/disco.h>),
# libdisco.so.$(VERSION) with soname $(SONAME), libdisco.a, the tools, the
# demo's library (beside libdisco, where disco-demo looks for it) and
# disco.pc for pkg-config. tests/install_test.sh checks it from `make test`
# (it builds the README's example, tests/readme_example.c, both ways).
# disco.pc's Libs.private is what libdisco.a needs besides itself: hwloc,
# jansson, libsodium, the static CUDA runtime when CUDA was found, and the C
# library's parts. The linker, not pkg-config, picks the archive over the .so
# (-Wl,-Bstatic before the flags); Libs.private starts with -Wl,-Bdynamic so
# that only libdisco is linked statically, and -rdynamic so that libraries
# loaded with disco.load_library find the archive's functions.
PC_PRIVATE = -Wl,-Bdynamic -rdynamic $(PKG_LIBS) $(if $(filter on,$(CUDA_MODE)),$(CUDART)) \
    -lrt -ldl -lpthread -lm
PREFIX ?= /usr/local
install: all
	@$(MAKE) --no-print-directory py-install-ext
	install -d $(PREFIX)/include/disco/shm $(PREFIX)/lib/pkgconfig $(PREFIX)/bin
	install -m 644 include/disco/*.h $(PREFIX)/include/disco/
	install -m 644 include/disco/shm/*.h $(PREFIX)/include/disco/shm/
	install -m 755 $(BUILD)/libdisco.so $(PREFIX)/lib/libdisco.so.$(VERSION)
	ln -sf libdisco.so.$(VERSION) $(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(PREFIX)/lib/libdisco.so
	install -m 644 $(BUILD)/libdisco.a $(PREFIX)/lib/libdisco.a
	install -m 755 $(TOOLS) $(PREFIX)/bin/
	install -m 755 $(DEMOLIB) $(PREFIX)/lib/
	printf '%s\n' 'prefix=$(abspath $(PREFIX))' 'libdir=$${prefix}/lib' \
	    'includedir=$${prefix}/include' '' \
	    '# shared: cc app.c $$(pkg-config --cflags --libs disco)' \
	    '# static: cc app.c -Wl,-Bstatic $$(pkg-config --static --cflags --libs disco)' \
	    'Name: disco' \
	    'Description: one program over N worker processes on one machine' \
	    'Version: $(VERSION)' \
	    'Libs: -L$${libdir} -Wl,-rpath,$${libdir} -ldisco' \
	    'Libs.private: $(strip $(PC_PRIVATE))' 'Cflags: -I$${includedir}' \
	    > $(PREFIX)/lib/pkgconfig/disco.pc
	install -d $(PYDIR)/disco
	install -m 644 $(filter %.py,$(PY_FILES)) $(PYDIR)/disco/
	install -m 755 python/disco/disco-py-worker $(PYDIR)/disco/
	rm -f $(PYDIR)/disco/_core.*.so # an earlier install's, of the other ABI
	install -m 755 $(BUILD)/pyinst/_core$(PY_EXT) $(PYDIR)/disco/

# Every C (and C++) source and header of the project, subfolders included.
FORMAT_SRC = $(shell find shm workers scheduler include tools tests python -type f \
    \( -name '*.[ch]' -o -name '*.cpp' \) | sort)
format:
	clang-format -i $(FORMAT_SRC)

# Fuzzing (clang's libFuzzer, with ASan and UBSan): the frame codec, the
# RPC endpoint's packet parser and the server side of the authenticated
# handshake (no input may be accepted), each from a generated seed corpus,
# for FUZZ_SECONDS each. Findings land in build/fuzz/ as crash-* files.
FUZZ_DIR     := build/fuzz
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS  := -g -O1 -std=c11 -D_GNU_SOURCE -I. -Iinclude -fsanitize=fuzzer-no-link,address,undefined
FUZZ_OBJ     := $(LIB_SRC:%.c=$(FUZZ_DIR)/obj/%.o)
FUZZERS      := $(FUZZ_DIR)/fuzz_frame $(FUZZ_DIR)/fuzz_rpc $(FUZZ_DIR)/fuzz_auth
# clang and its fuzzer and sanitizer runtimes, installed when missing.
FUZZ_STAMP   := $(FUZZ_DIR)/.deps-ok

$(FUZZ_STAMP): tools/deps.sh
	@sh tools/deps.sh fuzz
	@mkdir -p $(@D) && touch $@

$(FUZZ_DIR)/obj/%.o: %.c | $(DEPS_STAMP) $(FUZZ_STAMP)
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) $(PKG_CFLAGS) -c $< -o $@

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJ) | $(FUZZ_STAMP)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(PKG_LIBS) -lpthread -ldl -lm

$(FUZZ_DIR)/make_seeds: tests/fuzz/make_seeds.c $(BUILD)/libdisco.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(BUILD)/libdisco.a $(PKG_LIBS) $(LDLIBS)

fuzz: $(FUZZERS) $(FUZZ_DIR)/make_seeds
	@mkdir -p $(FUZZ_DIR)/corpus_frame $(FUZZ_DIR)/corpus_rpc $(FUZZ_DIR)/corpus_auth
	$(FUZZ_DIR)/make_seeds $(FUZZ_DIR)/corpus_frame $(FUZZ_DIR)/corpus_rpc $(FUZZ_DIR)/corpus_auth
	cd $(FUZZ_DIR) && ./fuzz_frame -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	    -print_final_stats=1 corpus_frame 2>&1 | tail -20
	cd $(FUZZ_DIR) && ./fuzz_rpc -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	    -rss_limit_mb=6144 -malloc_limit_mb=32768 -print_final_stats=1 corpus_rpc 2>&1 | tail -20
	cd $(FUZZ_DIR) && ./fuzz_auth -max_total_time=$(FUZZ_SECONDS) -max_len=8192 \
	    -print_final_stats=1 corpus_auth 2>&1 | tail -20
	@if ls $(FUZZ_DIR)/crash-* $(FUZZ_DIR)/leak-* $(FUZZ_DIR)/timeout-* 2>/dev/null; then \
	    echo "fuzz: findings above"; exit 1; fi

cppcheck:
	cppcheck --quiet --enable=warning,performance,portability --error-exitcode=1 \
	    --suppress=missingIncludeSystem -I. -Iinclude shm workers scheduler tools tests
	cppcheck --quiet --enable=warning,performance,portability --error-exitcode=1 \
	    --suppress=missingIncludeSystem --suppress=toomanyconfigs -I. -Iinclude \
	    $(if $(PY_INCLUDE),-I$(PY_INCLUDE)) python

# ---- Documentation ---------------------------------------------------------
# `make docs`: the HTML API reference (build/docs/html/index.html) from the
# public headers, include/disco/*.h and include/disco/shm/*.h, with README.md
# and the guides in docs/ as its pages: doxygen (tools/docs/Doxyfile, warnings
# are errors: a public function, type or macro without a comment fails), the
# guides' links made to work in the HTML (tools/docs/fix_html.py), then a
# page of it opened in headless chromium, which must show the entry of
# disco_session_open (tools/docs/check.sh). doxygen and chromium are
# installed when missing (`tools/deps.sh docs`); `make test` needs neither.
# The documentation tests (doc-test, run by `make test`): every relative link
# in README.md and docs/ resolves (tests/doc_links.py), and every example in
# them is built or run (tests/doc_examples.py; how each kind of block is
# checked is at its top).
DOCS_OUT := build/docs
.PHONY: docs doc-test
docs:
	@sh tools/deps.sh docs $(DOCS_OUT)/deps.log
	$(PYTHON) tests/doc_links.py
	@rm -rf $(DOCS_OUT)/html && mkdir -p $(DOCS_OUT)
	@echo "doxygen tools/docs/Doxyfile"; doxygen tools/docs/Doxyfile || \
	    { sed 's|^$(CURDIR)/||' $(DOCS_OUT)/warnings.log; echo "make docs: doxygen warned (above)"; exit 1; }
	$(PYTHON) tools/docs/fix_html.py $(DOCS_OUT)/html
	sh tools/docs/check.sh $(DOCS_OUT)/html

doc-test: $(BUILD)/libdisco.so $(BUILD)/libdisco.so.3 $(TOOLS) $(TESTLIB) $(DEMOLIB) python
	$(PYTHON) tests/doc_links.py
	PYTHON=$(PYTHON) $(PYTHON) tests/doc_examples.py --build $(BUILD)
ifeq ($(SANITIZE),)
test: doc-test
endif

clean:
	rm -rf build python/disco/_core*.so

# CUDA, whenever the toolkit is there ($(CUDA_HOME)/include/cuda_runtime.h,
# the static runtime, libcudart_static.a, and nvcc):
# workers/device/cuda*.c are compiled against the runtime API, the allreduce
# kernels (workers/device/ar_cuda.cu) by nvcc into the library, and the
# static runtime is linked into libdisco.so, the tools and the test runner,
# so nothing needs a library path (the runtime loads the driver,
# libcuda.so.1, at run time; never -lcuda). Without the toolkit, cuda*.c
# build their "no CUDA" stubs and nothing needs nvcc.
# A stamp per mode rebuilds them when the toolkit comes or goes.
CUDA_C_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard workers/device/cuda*.c))
CUDA_HOME ?= /usr/local/cuda
NVCC      := $(CUDA_HOME)/bin/nvcc
CUDART    := $(firstword $(wildcard $(CUDA_HOME)/lib64/libcudart_static.a \
                 $(CUDA_HOME)/lib/libcudart_static.a $(CUDA_HOME)/lib/x86_64-linux-gnu/libcudart_static.a))
ifneq ($(and $(wildcard $(CUDA_HOME)/include/cuda_runtime.h),$(CUDART),$(wildcard $(NVCC))),)
CUDA_MODE := on
LDLIBS    += $(CUDART) -lrt -ldl -lpthread
$(CUDA_C_OBJ): CFLAGS += -DDISCO_HAVE_CUDA -I$(CUDA_HOME)/include
# The kernels: SASS for sm_80 and sm_90, PTX for later GPUs. The object must
# need nothing but the CUDA runtime (the library is linked by the C
# compiler): no exceptions or RTTI, and no thread-safe statics, whose guards
# live in libstdc++ (cuda_ar.c serializes the launches instead).
CUDA_OBJ  := $(BUILD)/obj/workers/device/ar_cuda.o
NVCCFLAGS := $(O) -g -std=c++17 -Werror all-warnings -D_GNU_SOURCE -I. -Iinclude \
    -Xcompiler -fPIC,-fno-exceptions,-fno-rtti,-fno-threadsafe-statics \
    -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
    -gencode arch=compute_90,code=compute_90
$(CUDA_OBJ): workers/device/ar_cuda.cu $(FLAGS_STAMP) $(BUILD)/.cuda-on | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/libdisco.a $(BUILD)/libdisco.so: $(CUDA_OBJ)
-include $(CUDA_OBJ:.o=.d)
# The demo decoder's kernels: PTX (runs on sm_80 and later), a C string in a
# header that the demo library includes and loads through the driver.
DEMO_PTX := $(BUILD)/gen/demo_dec_ptx.h
$(DEMO_PTX): tools/demo/demo_dec_cuda.cu $(BUILD)/.cuda-on
	@mkdir -p $(@D)
	$(NVCC) -std=c++17 -Werror all-warnings -arch=compute_80 --ptx $< -o $(@:.h=.ptx)
	{ echo 'static const char demo_dec_ptx[] ='; sed 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$$/\\n"/' \
	    $(@:.h=.ptx); echo ';'; } > $@
$(BUILD)/obj/tools/demo/demo_dec_kernels.o: $(DEMO_PTX)
$(BUILD)/obj/tools/demo/demo_dec_kernels.o: CFLAGS += -DDEMO_DEC_PTX='"$(DEMO_PTX)"'
else
CUDA_MODE := off
endif
$(CUDA_C_OBJ): $(BUILD)/.cuda-$(CUDA_MODE)
$(BUILD)/.cuda-$(CUDA_MODE):
	@mkdir -p $(@D) && rm -f $(BUILD)/.cuda-* && touch $@

-include $(LIB_OBJ:.o=.d) $(PY_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(DEMOLIB_SRC:%.c=$(BUILD)/obj/%.d) \
    $(BUILD)/obj/tests/node_prog.d $(BUILD)/obj/tests/node_comm.d $(BUILD)/obj/tests/node_p2p.d $(BUILD)/obj/tests/node_p2p_pieces.d $(BUILD)/obj/tools/bench/node_bench.d $(BUILD)/obj/testlib/testlib.d \
    $(BUILD)/obj/testlib/testlib_comm.d
