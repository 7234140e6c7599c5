# disco - one non-recursive Makefile.
#   make            library (build/libdisco.a, build/libdisco.so) and tools
#   make test       Check suites (SANITIZE=address or SANITIZE=thread to sanitize)
#   make bench      benchmarks -> build/bench.json
#   make demo       the main job
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
SANFLAGS := -fsanitize=thread
else
$(error SANITIZE must be address or thread)
endif

DEPS_STAMP := build/.deps-ok
PKGS       := hwloc check jansson
PKG_CFLAGS  = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS    = $(shell pkg-config --libs hwloc jansson 2>/dev/null)
CHECK_LIBS  = $(shell pkg-config --libs check 2>/dev/null)

CFLAGS   ?= $(O) -g
CFLAGS   += -std=c11 -Wall -Wextra -Werror -fPIC -D_GNU_SOURCE -Iinclude -MMD -MP $(SANFLAGS)
LDFLAGS  += $(SANFLAGS)
LDLIBS   += -lpthread -ldl -lm

VERSION  := 0.1.0
SONAME   := libdisco.so.0

LIB_SRC  := $(wildcard shm/*.c workers/*.c scheduler/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
# tools/disco-X.c is a program; tools/bench_*.c and tools/demo_*.c are the
# extra parts of disco-bench and disco-demo; demo_lib.c is the demo's library.
TOOL_SRC := $(wildcard tools/disco-*.c)
TOOLS    := $(TOOL_SRC:tools/%.c=$(BUILD)/bin/%)
BENCH_OBJ := $(patsubst tools/%.c,$(BUILD)/obj/tools/%.o,$(wildcard tools/bench_*.c))
DEMO_OBJ := $(patsubst tools/%.c,$(BUILD)/obj/tools/%.o,$(filter-out tools/demo_lib.c,$(wildcard tools/demo_*.c)))
DEMOLIB  := $(BUILD)/lib/libdisco_demo.so
TEST_SRC := $(wildcard tests/test_*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/tests/run_tests.o
TEST_BIN := $(BUILD)/bin/run_tests
TESTLIB  := $(BUILD)/lib/libdisco_testlib.so
# Programs export the whole library, so that libraries they load
# (disco.load_library) resolve disco_register_func & co. against it.
WHOLE_LIB = -rdynamic -Wl,--whole-archive $(BUILD)/libdisco.a -Wl,--no-whole-archive

.PHONY: all deps test bench demo clean format cppcheck
all: $(BUILD)/libdisco.a $(BUILD)/libdisco.so $(TOOLS) $(DEMOLIB)

deps: $(DEPS_STAMP)
$(DEPS_STAMP): tools/deps.sh
	@sh tools/deps.sh
	@mkdir -p $(@D) && touch $@

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -c $< -o $@

$(BUILD)/libdisco.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libdisco.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) $(LDFLAGS) -o $@ $^ $(PKG_LIBS) $(LDLIBS)

$(BUILD)/bin/%: $(BUILD)/obj/tools/%.o $(BUILD)/libdisco.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(WHOLE_LIB) $(PKG_LIBS) $(LDLIBS)

# disco-bench and disco-demo are several files each.
$(BUILD)/bin/disco-bench: $(BENCH_OBJ)
$(BUILD)/bin/disco-demo: $(DEMO_OBJ)

$(DEMOLIB): $(BUILD)/obj/tools/demo_lib.o
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -o $@ $<

$(TEST_BIN): $(TEST_OBJ) $(BUILD)/libdisco.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(WHOLE_LIB) $(CHECK_LIBS) $(PKG_LIBS) $(LDLIBS)

# The session tests' function library; its disco symbols come from the
# program that loads it.
$(TESTLIB): $(BUILD)/obj/testlib/testlib.o
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -o $@ $<

$(BUILD)/obj/testlib/testlib.o: tests/testlib.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -c $< -o $@

# Tests find the test library and the worker program by absolute path.
$(BUILD)/obj/tests/%.o: CFLAGS += -DDISCO_TEST_LIB='"$(abspath $(TESTLIB))"' \
    -DDISCO_TEST_WORKER='"$(abspath $(BUILD)/bin/disco-worker)"'

# Each test runs in its own process (CK_FORK=yes). Afterwards nothing of
# ours may remain in /dev/shm (disco never names segments there).
test: $(TEST_BIN) $(TOOLS) $(TESTLIB)
	CK_FORK=yes $(TEST_BIN)
	@if ls /dev/shm 2>/dev/null | grep -qi disco; then \
	    echo "FAIL: disco objects left in /dev/shm"; ls /dev/shm; exit 1; fi

bench: $(BUILD)/bin/disco-bench
	$(BUILD)/bin/disco-bench --json $(BUILD)/bench.json

demo: $(BUILD)/bin/disco-demo $(BUILD)/bin/disco-worker $(DEMOLIB)
	$(BUILD)/bin/disco-demo

format:
	clang-format -i $(wildcard include/disco/*.h shm/*.[ch] workers/*.[ch] scheduler/*.[ch] tools/*.c tests/*.[ch])

cppcheck:
	cppcheck --quiet --enable=warning,performance,portability --error-exitcode=1 \
	    --suppress=missingIncludeSystem -Iinclude shm workers scheduler tools tests

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(TOOL_SRC:tools/%.c=$(BUILD)/obj/tools/%.d) $(BENCH_OBJ:.o=.d) $(DEMO_OBJ:.o=.d)
