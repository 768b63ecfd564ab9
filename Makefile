# fidelity: plain Makefile, pkg-config, one static archive that main and the
# tests link. `make` builds ./fidelity; `make test` runs every unit, fuzz
# corpus and end-to-end test; `make SANITIZE=address,undefined test` does the
# same in build-san/. Missing Debian packages are installed by `make deps`.

PKGS     := libevent libevent_pthreads libcurl jansson sqlite3 zlib libxxhash \
            libpq
TESTPKGS := cmocka
# Debian packages: what the build needs, then every real part the tests
# use (TLS upstreams served by openssl, man pages rendered by man-db and
# groff, npm for the opencode CLI and the HAR validator, chromium for the
# report's browser tests). `make deps` installs them all.
DEBS     := libevent-dev libcurl4-openssl-dev libjansson-dev libsqlite3-dev \
            zlib1g-dev libxxhash-dev libcmocka-dev pkg-config gcc make curl \
            openssl man-db groff-base nodejs npm chromium slurm-wlm munge \
            python3-torch libopenblas0-pthread python3-jsonschema \
            libpq-dev postgresql
# slurm-wlm and munge: the bisect Slurm tests start a one-node cluster.
# libpq-dev: the PostgreSQL store (src/store/db_pg.c); postgresql: the
# server the store tests start for themselves (tests/util/pgsrv.c).
# python3-jsonschema: tests/e2e/test_schema validates every command's
# --json document against its schema in docs/schema/.
# python3-torch: the small real transformer the tests serve
# (tests/model/serve.py, on the CPU); libopenblas0-pthread with it, as
# without OpenBLAS Debian's torch runs on the reference BLAS, about 30
# times slower (tests/model/README.md).
# npm tools the tests use, each installed (pinned) by its script, which
# prints the tool's path; `make deps` runs them after the Debian packages.
NPM_DEPS := tests/e2e/opencode/install.sh tests/e2e/har/install.sh
# What only the benchmarks in bench/ use, installed by `make bench-deps`:
# the peers they measure against (nginx, mitmproxy), the load generator
# (wrk), python3 for their helpers and matplotlib (the peer of
# bench/report.sh), valgrind, strace and GNU time.
BENCH_DEBS := nginx-light wrk mitmproxy python3 python3-matplotlib valgrind \
              strace time
# What only `make fuzz` uses (clang's libFuzzer), installed by
# `make fuzz-deps`.
FUZZ_DEBS := clang

CC      ?= cc
ifdef SANITIZE
BUILD   ?= build-san
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
else
BUILD   ?= build
SANFLAGS :=
endif
WERROR  ?= -Werror
OPT     ?= -O2 -g
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wwrite-strings -Wformat=2 -Wvla -Wconversion -Wno-sign-conversion \
           -Wno-format-nonliteral -Wno-format-truncation
CFLAGS  += -std=gnu17 $(OPT) $(WARN) $(WERROR) $(SANFLAGS) -MMD -MP -Isrc \
           $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS  += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm -lpthread
LDFLAGS += $(SANFLAGS)

SRC      := $(filter-out src/main.c,$(wildcard src/*/*.c))
OBJ      := $(SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libfidelity.a
BIN      := $(BUILD)/fidelity
TEST_SRC := $(wildcard tests/*/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_UTIL:= $(filter-out $(TEST_SRC),$(wildcard tests/util/*.c))
TEST_UOBJ:= $(TEST_UTIL:%.c=$(BUILD)/%.o)
.SECONDARY: $(TEST_UOBJ)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
STAMP    := $(BUILD)/.deps-ok
TEST_STAMP := $(BUILD)/.test-deps-ok

.PHONY: all deps deps-debs bench-deps fuzz-deps fuzz test check-format format demo demo-probe demo-sim clean man completion install uninstall \
        golden golden-report
all: fidelity man completion

# $(call apt_deps,NAME,PACKAGES): the missing Debian packages installed
# with apt-get when run as root; otherwise the command to run is printed
# and NAME fails. A package counts as present when a command of its name
# is (npm comes with NodeSource's nodejs, which conflicts with Debian's).
define apt_deps
@missing=""; for p in $(2); do \
  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || \
  command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; \
done; \
if [ -z "$$missing" ]; then echo "$(1): all Debian packages present"; exit 0; fi; \
if [ "$$(id -u)" = 0 ]; then \
  echo "$(1): installing$$missing"; \
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
else \
  echo "$(1): missing Debian packages; run:"; \
  echo "  sudo apt-get install -y$$missing"; exit 1; \
fi
endef

# The build needs the libraries; the tests need everything `deps` installs,
# checked once per build directory (again when this file or a pinned
# version changes). Outside CI a part that cannot be installed leaves its
# tests skipping; under CI=true it stops here.
$(STAMP):
	@mkdir -p $(BUILD)
	@pkg-config --exists $(PKGS) $(TESTPKGS) || $(MAKE) --no-print-directory deps-debs
	@touch $@

$(TEST_STAMP): Makefile $(NPM_DEPS) | $(STAMP)
	@if $(MAKE) --no-print-directory deps; then touch $@; \
	elif [ "$${CI:-}" = true ]; then exit 1; \
	else echo "test: going on without them; the tests that need them skip"; fi

deps: deps-debs
	@for s in $(NPM_DEPS); do \
	  sh $$s >/dev/null || { echo "deps: '$$s' failed (is the npm registry reachable?)"; exit 1; }; \
	done; echo "deps: npm tools present"

deps-debs:
	$(call apt_deps,deps,$(DEBS))

bench-deps:
	$(call apt_deps,bench-deps,$(BENCH_DEBS))

# The archive's objects are compiled after the deps stamp, so pkg-config
# answers; $(MAKE) re-reads CFLAGS in a sub-make the first time.
$(BUILD)/%.o: %.c | $(STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(shell pkg-config --cflags $(PKGS)) -c -o $@ $<

$(LIB): $(OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(BUILD)/src/main.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(shell pkg-config --libs $(PKGS)) -lm -lpthread

fidelity: $(BIN)
	@if [ "$(BUILD)" = build ]; then cp $(BIN) fidelity.tmp && mv -f fidelity.tmp fidelity; fi

$(BUILD)/tests/util/%.o: tests/util/%.c | $(STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $(shell pkg-config --cflags $(PKGS) $(TESTPKGS)) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(TEST_UOBJ) $(LIB) | $(STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $(shell pkg-config --cflags $(PKGS) $(TESTPKGS)) \
	  $(LDFLAGS) -o $@ $< $(TEST_UOBJ) $(LIB) \
	  $(shell pkg-config --libs $(PKGS) $(TESTPKGS)) -lm -lpthread

# Fuzz harnesses: LLVMFuzzerTestOneInput linked with a plain replay driver
# (tests/fuzz/replay.c), so the committed corpus runs in `make test`; `make
# fuzz` links them with libFuzzer instead (FUZZ_DRIVER empty, FUZZ_LINK).
FUZZ_DRIVER ?= tests/fuzz/replay.c
FUZZ_LINK   ?=
$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_DRIVER) $(LIB) | $(STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $(shell pkg-config --cflags $(PKGS)) $(LDFLAGS) \
	  $(FUZZ_LINK) -o $@ $< $(FUZZ_DRIVER) $(LIB) \
	  $(shell pkg-config --libs $(PKGS)) -lm -lpthread

# libFuzzer (docs/FUZZ.md): every tests/fuzz/fuzz_*.c built with clang,
# -fsanitize=fuzzer,address,undefined, the library instrumented too
# (fuzzer-no-link), in build-fuzz/. `make fuzz` builds them; with
# FUZZ_SECONDS=N it runs each N seconds from its committed corpus (new
# inputs go to build-fuzz/corpus/NAME, crashes to build-fuzz/crashes/) and
# fails when one finds a crash. `make fuzz-deps` installs clang.
FUZZ_CC      ?= clang
FUZZ_DIR     := build-fuzz
FUZZ_SECONDS ?=
FUZZ_LF      := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_DIR)/fuzz/%)

fuzz-deps:
	$(call apt_deps,fuzz-deps,$(FUZZ_DEBS))

fuzz:
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || \
	  { echo "fuzz: no $(FUZZ_CC); run 'make fuzz-deps'"; exit 1; }
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_DIR) CC=$(FUZZ_CC) \
	  WERROR=-Wno-unknown-warning-option \
	  SANITIZE=fuzzer-no-link,address,undefined FUZZ_DRIVER= \
	  FUZZ_LINK=-fsanitize=fuzzer $(FUZZ_LF)
	@[ -z "$(FUZZ_SECONDS)" ] && exit 0; bad=""; \
	mkdir -p $(FUZZ_DIR)/crashes; \
	for f in $(FUZZ_LF); do n=$${f##*/fuzz_}; \
	  mkdir -p $(FUZZ_DIR)/corpus/$$n; d=""; \
	  [ -f tests/fuzz/$$n.dict ] && d=-dict=tests/fuzz/$$n.dict; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
	    $$d -artifact_prefix=$(FUZZ_DIR)/crashes/$$n- \
	    $(FUZZ_DIR)/corpus/$$n tests/fuzz/$$n >$(FUZZ_DIR)/$$n.log 2>&1; \
	  rc=$$?; \
	  runs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(FUZZ_DIR)/$$n.log); \
	  if [ $$rc -eq 0 ]; then echo "fuzz: $$n: $${runs:-?} runs, nothing found"; \
	  else echo "fuzz: $$n: FOUND something (exit $$rc), see $(FUZZ_DIR)/$$n.log"; \
	    grep -m3 -E 'ERROR|SUMMARY|fuzz_' $(FUZZ_DIR)/$$n.log; bad="$$bad $$n"; fi; \
	done; [ -z "$$bad" ] || { echo "fuzz: found in:$$bad"; exit 1; }

test: $(BIN) $(TEST_BIN) $(FUZZ_BIN) | $(TEST_STAMP)
	@FIDELITY_BIN=$(abspath $(BIN)) BUILD=$(BUILD) sh tests/run.sh $(TEST_BIN) $(FUZZ_BIN)

# Install: the binary and one man page per command. The pages are built, not
# written: `fidelity help --man [COMMAND]` turns each help text into roff,
# so they cannot drift from `fidelity help` and a command added to the table
# in src/cmd/commands.c gets its page without a change here. `make` copies
# them to man/ (like ./fidelity) for `man ./man/fidelity.1` in a clone;
# tests/cmd/test_help.c checks them, tests/e2e/test_install.c installs.
PREFIX   ?= /usr/local
bindir   ?= $(PREFIX)/bin
datadir  ?= $(PREFIX)/share
mandir   ?= $(datadir)/man
man1dir  ?= $(mandir)/man1
# Shell completion, generated the same way from the same option tables
# (`fidelity help --completion bash|zsh`, src/cmd/completion.c;
# tests/cmd/test_completion.c checks them against every parser).
bashcompdir ?= $(datadir)/bash-completion/completions
zshcompdir  ?= $(datadir)/zsh/site-functions
INSTALL  ?= install
COMMANDS := $(shell sed -n 's/^ *{"\([a-z][a-z0-9-]*\)", *cmd_.*/\1/p' src/cmd/commands.c)
MAN_PAGES:= fidelity.1 $(COMMANDS:%=fidelity-%.1)
MAN_GEN  := $(MAN_PAGES:%=$(BUILD)/man/%)

$(BUILD)/man/fidelity.1: $(BIN)
	@mkdir -p $(dir $@)
	$(BIN) help --man > $@.tmp && mv -f $@.tmp $@
$(BUILD)/man/fidelity-%.1: $(BIN)
	@mkdir -p $(dir $@)
	$(BIN) help --man $* > $@.tmp && mv -f $@.tmp $@

man: $(MAN_GEN)
	@if [ "$(BUILD)" = build ]; then mkdir -p man && rm -f man/*.1 && cp $(MAN_GEN) man/; fi

COMPLETION := $(BUILD)/completion/fidelity $(BUILD)/completion/_fidelity
$(BUILD)/completion/fidelity: $(BIN)
	@mkdir -p $(dir $@)
	$(BIN) help --completion bash > $@.tmp && mv -f $@.tmp $@
$(BUILD)/completion/_fidelity: $(BIN)
	@mkdir -p $(dir $@)
	$(BIN) help --completion zsh > $@.tmp && mv -f $@.tmp $@
completion: $(COMPLETION)

install: $(BIN) $(MAN_GEN) $(COMPLETION)
	$(INSTALL) -d $(DESTDIR)$(bindir) $(DESTDIR)$(man1dir) \
	  $(DESTDIR)$(bashcompdir) $(DESTDIR)$(zshcompdir)
	$(INSTALL) -m 755 $(BIN) $(DESTDIR)$(bindir)/fidelity
	$(INSTALL) -m 644 $(MAN_GEN) $(DESTDIR)$(man1dir)/
	$(INSTALL) -m 644 $(BUILD)/completion/fidelity $(DESTDIR)$(bashcompdir)/fidelity
	$(INSTALL) -m 644 $(BUILD)/completion/_fidelity $(DESTDIR)$(zshcompdir)/_fidelity

uninstall:
	rm -f $(DESTDIR)$(bindir)/fidelity $(MAN_PAGES:%=$(DESTDIR)$(man1dir)/%) \
	  $(DESTDIR)$(bashcompdir)/fidelity $(DESTDIR)$(zshcompdir)/_fidelity

# The report's golden files (tests/report/golden/), rewritten from seeded
# runs against fidelity sim; review the diff before committing it.
golden-report: $(BIN) $(BUILD)/tests/report/test_report_e2e \
               $(BUILD)/tests/report/test_rbisect
	@FIDELITY_GOLDEN_UPDATE=1 FIDELITY_BIN=$(abspath $(BIN)) BUILD=$(BUILD) \
	  sh tests/run.sh $(BUILD)/tests/report/test_rbisect \
	  $(BUILD)/tests/report/test_report_e2e

# Every golden file (tests/*/golden/): the commands' text and JSON
# (tests/*/test_golden_*.c), the report's sections and probe's text report,
# rewritten by their tests; review the diff before committing it.
GOLDEN_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/*/test_golden_*.c)) \
              $(BUILD)/tests/report/test_report_e2e $(BUILD)/tests/report/test_rbisect \
              $(BUILD)/tests/probe/test_report
golden: $(BIN) $(GOLDEN_BIN)
	@FIDELITY_GOLDEN_UPDATE=1 FIDELITY_BIN=$(abspath $(BIN)) BUILD=$(BUILD) \
	  sh tests/run.sh $(GOLDEN_BIN)

CLANG_FORMAT ?= clang-format
FMT_FILES = $(wildcard src/*.c src/*/*.c src/*/*.h tests/*/*.c tests/*/*.h)
check-format:
	@bad=0; for f in $(FMT_FILES); do \
	  $(CLANG_FORMAT) --style=file $$f | cmp -s - $$f || { echo "check-format: '$$f' drifts; run 'make format'"; bad=1; }; \
	done; exit $$bad
format:
	$(CLANG_FORMAT) --style=file -i $(FMT_FILES)

# The main path end to end, offline (examples/demo.sh): probe, record +
# audit, drift, bisect and the report, every output in demo-out/, and the
# man pages in man/. `make demo-probe` is the longer probe demo alone (a
# larger grid, report.html); `make demo-sim` tours the sim's endpoints one
# request each.
demo: fidelity man
	@OUT="$(CURDIR)/demo-out" FIDELITY="$(CURDIR)/fidelity" sh examples/demo.sh
demo-probe: fidelity
	@sh scripts/probe_demo.sh
demo-sim: fidelity
	@sh scripts/demo.sh ./fidelity

clean:
	rm -rf build build-san build-fuzz fidelity man demo-out example-out

-include $(OBJ:.o=.d) $(BUILD)/src/main.d $(TEST_UOBJ:.o=.d)
