# tern: GNU Makefile.  `make` builds build/ternd, build/tern-load,
# build/tern-journal, build/journal-bench, build/crc-bench and build/ternctl
# (a Python script: tools/ternctl with the version written in); `make SAN=1`
# builds the same into build-asan/ with AddressSanitizer +
# UndefinedBehaviorSanitizer;
# `make test` installs what is missing and runs every test; `make run`
# starts ternd in the foreground; `make includes` checks the include graph
# and `make calls` the call graph.
# `make` also builds the man pages into build/man/ (scdoc sources in
# docs/man/); `make install` and `make uninstall` take PREFIX (default
# /usr/local) and DESTDIR.
#
# Sources are found by wildcard, so a new .c file in a module directory is
# built without editing this file.  Programs (files with main) are named
# explicitly and kept out of the libraries so tests link everything else.

PKGS     := libevent lmdb inih check libsystemd openssl libisal
CC       ?= cc
ifeq ($(SAN),1)
BUILD    := build-asan
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT      := -O1 -g
# self-checks too costly for the release build (TERN_INDEX_CHECK: each
# checkpoint's summary of the index against a walk of it, journal/jckpt.c)
CHECKS   := -DTERN_INDEX_CHECK
else
BUILD    := build
SANFLAGS :=
# ternd is linked with link-time optimisation: the request path crosses
# server/, protocol/, journal/ and lib/, and inlining across those files
# takes 4-5% of its instructions per request away.  The objects are fat
# (they hold ordinary code too), so the other programs link them as usual
# and an edit relinks only ternd slowly (make OPT='-O2 -g' builds without).
# These are GCC's options; a clang build (make CC=clang) goes without.
OPT      := -O2 -g
ifeq ($(shell $(CC) -dM -E -x c /dev/null 2>/dev/null | grep -c __clang__),0)
OPT      += -flto=auto -ffat-lto-objects
endif
CHECKS   :=
endif

WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wformat=2 -Wvla
CFLAGS   += -std=gnu11 $(OPT) $(WARN) $(SANFLAGS) $(CHECKS) -D_GNU_SOURCE -pthread -MMD -MP \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDFLAGS  += $(SANFLAGS) -pthread
LIBS_EV  := $(shell pkg-config --libs libevent 2>/dev/null)
# CRC-32C (lib/crc32c.c) hands longer buffers to Intel's ISA-L.
LIBS_ISAL:= $(shell pkg-config --libs libisal 2>/dev/null)
LIBS_CORE:= $(LIBS_EV) $(shell pkg-config --libs lmdb inih libsystemd openssl 2>/dev/null) $(LIBS_ISAL) -lm
LIBS_CHK := $(shell pkg-config --libs check 2>/dev/null)
# The client's ketama hashing takes MD5 from OpenSSL's libcrypto.
LIBS_CRYPTO := $(shell pkg-config --libs libcrypto 2>/dev/null)

PROGRAMS := server/main.c client/tern-load.c tools/tern-journal.c tools/journal-bench.c \
            tools/crc-bench.c
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
ifneq ($(wildcard tools/crc-bench.c),)
BINS += $(BUILD)/crc-bench
endif

# ternctl (Python, tools/ternctl) with the version written in.
TERN_VERSION := $(shell sed -n 's/^\#define TERN_VERSION "\(.*\)"/\1/p' lib/tern.h)
SCRIPTS := build/ternctl

# The power-cut file system of the power-cut tests (tests/powercut/): built
# where libfuse3 is installed (tools/install-deps.sh installs it).
HAVE_FUSE3 := $(shell pkg-config --exists fuse3 2>/dev/null && echo 1)
ifeq ($(HAVE_FUSE3),1)
BINS += $(BUILD)/pcfs
endif

# Man pages: docs/man/NAME.SECTION.scd -> build/man/NAME.SECTION (scdoc).
MAN_SRC  := $(wildcard docs/man/*.scd)
MANS     := $(patsubst docs/man/%.scd,build/man/%,$(MAN_SRC))

.PHONY: all man programs run test test-unit fuzz clean deps includes calls install uninstall FORCE
all: $(BINS) $(BUILD)/test-unit $(MANS) $(SCRIPTS)
man: $(MANS)

build/ternctl: tools/ternctl lib/tern.h
	@mkdir -p build
	sed 's/^VERSION = "@VERSION@"$$/VERSION = "$(TERN_VERSION)"/' $< > $@.tmp
	chmod 755 $@.tmp
	mv $@.tmp $@

build/man/%: docs/man/%.scd
	@mkdir -p build/man
	scdoc < $< > $@.tmp || { rm -f $@.tmp; exit 1; }
	mv $@.tmp $@

# Every object is rebuilt when the compiler or its options change: the
# stamp holds them and is rewritten only when they differ.
$(BUILD)/cflags: FORCE
	@mkdir -p $(BUILD)
	@echo '$(CC) $(OPT) $(SANFLAGS) $(CHECKS) $(WARN)' > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp

$(BUILD)/obj/%.o: %.c $(BUILD)/cflags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/libtern.a: $(CORE_OBJ) $(BASE_OBJ)
	@rm -f $@
	ar rcs $@ $^


$(BUILD)/libternclient.a: $(CLI_OBJ) $(BASE_OBJ)
	@rm -f $@
	ar rcs $@ $^ $(if $(CLI_OBJ),,/dev/null 2>/dev/null || true)

$(BUILD)/ternd: $(call obj,server/main.c) $(BUILD)/libtern.a
	$(CC) $(LDFLAGS) $(OPT) -o $@ $^ $(LIBS_CORE)

$(BUILD)/tern-load: $(call obj,client/tern-load.c) $(CLI_OBJ) $(BASE_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_EV) $(LIBS_CRYPTO) $(LIBS_ISAL) -lm

$(BUILD)/tern-journal: $(call obj,tools/tern-journal.c) $(BUILD)/libtern.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_CORE)

$(BUILD)/journal-bench: $(call obj,tools/journal-bench.c)
	$(CC) $(LDFLAGS) -o $@ $^ -lm

$(call obj,tests/powercut/pcfs.c): CFLAGS += $(shell pkg-config --cflags fuse3 2>/dev/null)
$(BUILD)/pcfs: $(call obj,tests/powercut/pcfs.c)
	$(CC) $(LDFLAGS) -o $@ $^ $(shell pkg-config --libs fuse3 2>/dev/null)

$(BUILD)/crc-bench: $(call obj,tools/crc-bench.c lib/crc32c.c)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ISAL)

# The unit runner adds every `Suite *name_suite(void)` defined in tests/unit.
$(BUILD)/suites.h: $(UNIT_SRC)
	@mkdir -p $(BUILD)
	@grep -ho '^Suite \*[a-z0-9_]*_suite(void)' $(UNIT_SRC) | \
	  sed 's/^Suite \*\([a-z0-9_]*\)_suite(void)/SUITE(\1)/' | sort > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp

$(call obj,tests/unit/runner.c): $(BUILD)/suites.h
$(call obj,tests/unit/runner.c): CFLAGS += -I$(BUILD)

$(BUILD)/test-unit: $(UNIT_OBJ) $(BUILD)/libtern.a $(CLI_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_CORE) $(LIBS_CHK) $(LIBS_CRYPTO)

deps:
	@tools/install-deps.sh

# Both builds of `make test` use every core.
NPROC := $(shell nproc 2>/dev/null || echo 2)

# RUN_ARGS: more ternd options (e.g. RUN_ARGS="-p 0 -vv"; a later -d wins).
run: deps
	@$(MAKE) --no-print-directory all
	@mkdir -p data
	exec ./$(BUILD)/ternd -c conf/ternd.conf -d ./data $(RUN_ARGS)

# Everything: dependencies, both builds, the include graph, unit tests,
# end-to-end, real clients, crash tests, fuzzing, tern-load and the
# sync-mode comparison.
test: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@$(MAKE) --no-print-directory -j$(NPROC) SAN=1 all
	@tests/run-all.sh

# ---- install ----------------------------------------------------------------
# Layout: ternd in sbin, the tools in bin, man pages, the systemd unit, and
# the sample configuration (never overwriting one that exists); in DOCDIR
# the README and LICENSE, docs/ with every page the README links to, and
# examples/ with the sample configurations, the Prometheus alert rules and
# the Grafana dashboard.  The installed configuration keeps its data in
# /var/lib/tern, the directory the unit's StateDirectory=tern creates.
# Packagers: make install PREFIX=/usr DESTDIR=/tmp/pkg (with PREFIX=/usr
# the configuration goes to /etc); SERVICE_USER=NAME makes the unit run as
# that existing user instead of a dynamic one (debian/rules does both).
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/tern
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR    ?= $(PREFIX)/lib/systemd/system
STATEDIR   := /var/lib/tern
SERVICE_USER ?=
INSTALL    ?= install
CONF_DEST  := $(DESTDIR)$(SYSCONFDIR)/tern/ternd.conf
# The sample configuration as installed: data in the unit's state directory.
conf_installed = sed 's|^data_dir = .*|data_dir = $(STATEDIR)|' conf/ternd.conf
unit_installed = sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	-e 's|@STATEDIR@|$(STATEDIR)|g' \
	$(if $(SERVICE_USER),-e 's|^DynamicUser=yes$$|User=$(SERVICE_USER)\nGroup=$(SERVICE_USER)|') \
	conf/ternd.service.in
# The documentation as in the source tree, so that its links hold:
# DOCDIR/docs/ the pages, DOCDIR/examples/ what conf/ holds for users
# (DOCDIR/conf links to it, for the README's conf/ links).
DOC_PAGES  := $(wildcard docs/*.md docs/*.png)
EXAMPLES   := $(wildcard conf/*.conf)
EXAMPLES_MON := conf/prometheus/tern-alerts.yml conf/grafana/tern-dashboard.json

# What install installs, built (and nothing else: no test programs).
programs: $(BUILD)/ternd $(BUILD)/tern-load $(BUILD)/tern-journal $(MANS) $(SCRIPTS)

install: programs
	$(INSTALL) -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(SYSCONFDIR)/tern $(DESTDIR)$(DOCDIR)/docs \
		$(DESTDIR)$(DOCDIR)/examples/prometheus $(DESTDIR)$(DOCDIR)/examples/grafana \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	$(INSTALL) -m 755 $(BUILD)/ternd $(DESTDIR)$(SBINDIR)/ternd
	$(INSTALL) -m 755 $(BUILD)/tern-load $(BUILD)/tern-journal build/ternctl $(DESTDIR)$(BINDIR)/
	$(INSTALL) -m 644 build/man/*.1 $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -m 644 build/man/*.5 $(DESTDIR)$(MANDIR)/man5/
	$(INSTALL) -m 644 build/man/*.8 $(DESTDIR)$(MANDIR)/man8/
	$(unit_installed) > $(DESTDIR)$(UNITDIR)/ternd.service.tmp
	mv $(DESTDIR)$(UNITDIR)/ternd.service.tmp $(DESTDIR)$(UNITDIR)/ternd.service
	chmod 644 $(DESTDIR)$(UNITDIR)/ternd.service
	$(INSTALL) -m 644 README.md LICENSE $(DESTDIR)$(DOCDIR)/
	$(INSTALL) -m 644 $(DOC_PAGES) $(DESTDIR)$(DOCDIR)/docs/
	$(INSTALL) -m 644 $(EXAMPLES) $(DESTDIR)$(DOCDIR)/examples/
	for f in $(EXAMPLES_MON); do \
		$(INSTALL) -m 644 $$f $(DESTDIR)$(DOCDIR)/examples/$${f#conf/} || exit 1; \
	done
	ln -sfn examples $(DESTDIR)$(DOCDIR)/conf
	@if [ -e $(CONF_DEST) ]; then \
		echo "keeping the existing $(CONF_DEST)"; \
	else \
		$(conf_installed) > $(CONF_DEST).tmp && chmod 644 $(CONF_DEST).tmp && \
		mv $(CONF_DEST).tmp $(CONF_DEST) && echo "installed $(CONF_DEST)"; \
	fi

# Removes what install put in place.  The configuration goes only when it
# is still the sample as installed; the data directory is never touched.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/ternd $(DESTDIR)$(BINDIR)/tern-load \
		$(DESTDIR)$(BINDIR)/tern-journal $(DESTDIR)$(BINDIR)/ternctl \
		$(DESTDIR)$(UNITDIR)/ternd.service \
		$(patsubst build/man/%,$(DESTDIR)$(MANDIR)/man1/%,$(filter %.1,$(MANS))) \
		$(patsubst build/man/%,$(DESTDIR)$(MANDIR)/man5/%,$(filter %.5,$(MANS))) \
		$(patsubst build/man/%,$(DESTDIR)$(MANDIR)/man8/%,$(filter %.8,$(MANS))) \
		$(DESTDIR)$(DOCDIR)/README.md $(DESTDIR)$(DOCDIR)/LICENSE \
		$(patsubst docs/%,$(DESTDIR)$(DOCDIR)/docs/%,$(DOC_PAGES)) \
		$(patsubst conf/%,$(DESTDIR)$(DOCDIR)/examples/%,$(EXAMPLES) $(EXAMPLES_MON)) \
		$(DESTDIR)$(DOCDIR)/conf
	rmdir $(DESTDIR)$(DOCDIR)/examples/prometheus $(DESTDIR)$(DOCDIR)/examples/grafana \
		$(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(DOCDIR) \
		2>/dev/null || true
	@if [ -e $(CONF_DEST) ]; then \
		if $(conf_installed) | cmp -s - $(CONF_DEST); then \
			rm -f $(CONF_DEST); rmdir $(DESTDIR)$(SYSCONFDIR)/tern 2>/dev/null; \
			echo "removed the unmodified $(CONF_DEST)"; \
		else \
			echo "keeping $(CONF_DEST): it was edited"; \
		fi; \
	fi

test-unit: all
	./$(BUILD)/test-unit

# Who includes whom, by folder; fails if an include runs against the
# layers (tools/client/server -> protocol -> journal -> lib).  Also a step
# of `make test`.
includes:
	@tools/include-graph -v

# Who calls whom, file by file within each folder tools/call-graph checks,
# from nm of the built objects; fails, naming the circle, if a file calls
# a file that calls it back.  Also a step of `make test`.
calls: $(CORE_OBJ) $(call obj,server/main.c)
	@tools/call-graph --obj $(BUILD)/obj

FUZZ_SECS ?= 600
fuzz: deps
	@tests/fuzz/run.sh $(FUZZ_SECS)

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
