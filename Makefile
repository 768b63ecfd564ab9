# fidelity: plain Makefile, pkg-config, one static archive that main and the
# tests link. `make` builds ./fidelity; `make test` runs every unit, fuzz
# corpus and end-to-end test; `make SANITIZE=address,undefined test` does the
# same in build-san/. Missing Debian packages are installed by `make deps`.

PKGS     := libevent libevent_pthreads libcurl jansson sqlite3 zlib libxxhash
TESTPKGS := cmocka
DEBS     := libevent-dev libcurl4-openssl-dev libjansson-dev libsqlite3-dev \
            zlib1g-dev libxxhash-dev libcmocka-dev pkg-config gcc make curl \
            openssl chromium

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
           -Wwrite-strings -Wformat=2 -Wvla -Wno-format-nonliteral -Wno-format-truncation
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

.PHONY: all deps test check-format format demo demo-sim clean golden-report
all: fidelity

$(STAMP):
	@mkdir -p $(BUILD)
	@{ pkg-config --exists $(PKGS) $(TESTPKGS) && \
	   command -v chromium >/dev/null 2>&1; } || $(MAKE) --no-print-directory deps
	@touch $@

deps:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "deps: all Debian packages present"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "deps: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else \
	  echo "deps: missing Debian packages; run:"; \
	  echo "  sudo apt-get install -y$$missing"; exit 1; \
	fi

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
# (tests/fuzz/replay.c), so the committed corpus runs in `make test`.
$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/replay.c $(LIB) | $(STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $(shell pkg-config --cflags $(PKGS)) $(LDFLAGS) \
	  -o $@ $< tests/fuzz/replay.c $(LIB) $(shell pkg-config --libs $(PKGS)) -lm -lpthread

test: $(BIN) $(TEST_BIN) $(FUZZ_BIN)
	@FIDELITY_BIN=$(abspath $(BIN)) BUILD=$(BUILD) sh tests/run.sh $(TEST_BIN) $(FUZZ_BIN)

# The report's golden files (tests/report/golden/), rewritten from seeded
# runs against fidelity sim; review the diff before committing it.
golden-report: $(BIN) $(BUILD)/tests/report/test_report_e2e
	@FIDELITY_GOLDEN_UPDATE=1 FIDELITY_BIN=$(abspath $(BIN)) BUILD=$(BUILD) \
	  sh tests/run.sh $(BUILD)/tests/report/test_report_e2e

CLANG_FORMAT ?= clang-format
FMT_FILES = $(wildcard src/*.c src/*/*.c src/*/*.h tests/*/*.c tests/*/*.h)
check-format:
	@bad=0; for f in $(FMT_FILES); do \
	  $(CLANG_FORMAT) --style=file $$f | cmp -s - $$f || { echo "check-format: '$$f' drifts; run 'make format'"; bad=1; }; \
	done; exit $$bad
format:
	$(CLANG_FORMAT) --style=file -i $(FMT_FILES)

# The main job: probe a faulty sim against a healthy one, say where and why
# it breaks. `make demo-sim` tours the sim's endpoints one request each.
demo: fidelity
	@sh scripts/probe_demo.sh
demo-sim: fidelity
	@sh scripts/demo.sh ./fidelity

clean:
	rm -rf build build-san fidelity

-include $(OBJ:.o=.d) $(BUILD)/src/main.d $(TEST_UOBJ:.o=.d)
