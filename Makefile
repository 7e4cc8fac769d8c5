# tern: GNU Makefile.  `make` builds build/ternd, build/tern-load,
# build/tern-journal and build/journal-bench; `make SAN=1` builds the same
# into build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer;
# `make test` installs what is missing and runs every test; `make run`
# starts ternd in the foreground; `make includes` checks the include graph.
#
# Sources are found by wildcard, so a new .c file in a module directory is
# built without editing this file.  Programs (files with main) are named
# explicitly and kept out of the libraries so tests link everything else.

PKGS     := libevent libevent_pthreads lmdb inih check
CC       ?= cc
ifeq ($(SAN),1)
BUILD    := build-asan
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT      := -O1 -g
else
BUILD    := build
SANFLAGS :=
OPT      := -O2 -g
endif

WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wformat=2 -Wvla
CFLAGS   += -std=gnu11 $(OPT) $(WARN) $(SANFLAGS) -D_GNU_SOURCE -pthread -MMD -MP \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDFLAGS  += $(SANFLAGS) -pthread
LIBS_EV  := $(shell pkg-config --libs libevent libevent_pthreads 2>/dev/null)
LIBS_CORE:= $(LIBS_EV) $(shell pkg-config --libs lmdb inih 2>/dev/null) -lm
LIBS_CHK := $(shell pkg-config --libs check 2>/dev/null)

PROGRAMS := server/main.c client/tern-load.c tools/tern-journal.c tools/journal-bench.c
BASE_SRC := $(wildcard lib/*.c)
CORE_SRC := $(filter-out $(PROGRAMS),$(wildcard protocol/*.c journal/*.c server/*.c))
CLI_SRC  := $(filter-out $(PROGRAMS),$(wildcard client/*.c))
UNIT_SRC := $(wildcard tests/unit/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
# lib/ is the base layer every other folder builds on (errors, items,
# clocks, names, CRC-32C); the server and the client library both link it.
BASE_OBJ := $(call obj,$(BASE_SRC))
CORE_OBJ := $(call obj,$(CORE_SRC))
CLI_OBJ  := $(call obj,$(CLI_SRC))
UNIT_OBJ := $(call obj,$(UNIT_SRC))

BINS := $(BUILD)/ternd
ifneq ($(wildcard client/tern-load.c),)
BINS += $(BUILD)/tern-load
endif
ifneq ($(wildcard tools/tern-journal.c),)
BINS += $(BUILD)/tern-journal
endif
ifneq ($(wildcard tools/journal-bench.c),)
BINS += $(BUILD)/journal-bench
endif

.PHONY: all run test test-unit fuzz clean deps includes
all: $(BINS) $(BUILD)/test-unit

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/libtern.a: $(CORE_OBJ) $(BASE_OBJ)
	@rm -f $@
	ar rcs $@ $^


$(BUILD)/libternclient.a: $(CLI_OBJ) $(BASE_OBJ)
	@rm -f $@
	ar rcs $@ $^ $(if $(CLI_OBJ),,/dev/null 2>/dev/null || true)

$(BUILD)/ternd: $(call obj,server/main.c) $(BUILD)/libtern.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_CORE)

$(BUILD)/tern-load: $(call obj,client/tern-load.c) $(CLI_OBJ) $(BASE_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_EV) -lm

$(BUILD)/tern-journal: $(call obj,tools/tern-journal.c) $(BUILD)/libtern.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_CORE)

$(BUILD)/journal-bench: $(call obj,tools/journal-bench.c)
	$(CC) $(LDFLAGS) -o $@ $^ -lm

# The unit runner adds every `Suite *name_suite(void)` defined in tests/unit.
$(BUILD)/suites.h: $(UNIT_SRC)
	@mkdir -p $(BUILD)
	@grep -ho '^Suite \*[a-z0-9_]*_suite(void)' $(UNIT_SRC) | \
	  sed 's/^Suite \*\([a-z0-9_]*\)_suite(void)/SUITE(\1)/' | sort > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp

$(call obj,tests/unit/runner.c): $(BUILD)/suites.h
$(call obj,tests/unit/runner.c): CFLAGS += -I$(BUILD)

$(BUILD)/test-unit: $(UNIT_OBJ) $(BUILD)/libtern.a $(CLI_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_CORE) $(LIBS_CHK)

deps:
	@tools/install-deps.sh

run: deps
	@$(MAKE) --no-print-directory all
	@mkdir -p data
	exec ./$(BUILD)/ternd -c conf/ternd.conf -d ./data

# Everything: dependencies, both builds, the include graph, unit tests,
# end-to-end, real clients, crash tests, fuzzing, tern-load and the
# sync-mode comparison.
test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory SAN=1 all
	@tests/run-all.sh

test-unit: all
	./$(BUILD)/test-unit

# Who includes whom, by folder; fails if an include runs against the
# layers (tools/client/server -> protocol -> journal -> lib).  Also a step
# of `make test`.
includes:
	@tools/include-graph -v

FUZZ_SECS ?= 600
fuzz: deps
	@tests/fuzz/run.sh $(FUZZ_SECS)

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
