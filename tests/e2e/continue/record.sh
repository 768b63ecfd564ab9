#!/bin/sh
# Records tests/fixtures/continue-1.5.47/session.jsonl: the Continue CLI
# (tests/e2e/continue/install.sh) in its TUI under a pseudo-terminal
# (drive.py), offline, against `fidelity sim --reasoning` (40 ms between
# tokens) through `fidelity record`, with no session header (Continue sends
# none): a fact, a Read tool call, a reply interrupted with Esc while it
# streams (drive.py slows the sim for that turn), /compact, the question.
# The exchanges are written as JSON lines in xchg_to_json's shape
# (tests/e2e/opencode/dump.c), the temporary paths replaced. Run by hand;
# `make test` only replays the fixture (tests/audit/test_replay.c).
# usage: sh tests/e2e/continue/record.sh [OUT]  (from the repo root, after
# make; KEEP=1 keeps the temporary directory with the store and the TUI log;
# DRIVER=drive_auto.py plays another driver of this folder, CONTEXT_LENGTH
# and MAX_TOKENS set the model's defaultCompletionOptions: record_auto.sh)
set -eu
out=${1:-tests/fixtures/continue-1.5.47/session.jsonl}
driver=${DRIVER:-drive.py}
cn=$(sh tests/e2e/continue/install.sh)
F=$PWD/fidelity
d=$(mktemp -d)
[ -z "${KEEP:-}" ] || echo "record.sh: keeping $d" >&2
pids=""
trap 'for p in $pids; do kill $p 2>/dev/null || true; done; [ -n "${KEEP:-}" ] || rm -rf "$d"' EXIT INT TERM
mkdir -p "$d/proj" "$d/home"
"$F" sim --listen 127.0.0.1:0 --reasoning --token-interval-ms 40 >"$d/sim.out" 2>/dev/null &
pids="$pids $!"
while ! grep -q listening "$d/sim.out" 2>/dev/null; do sleep 0.05; done
sim=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$d/sim.out")
"$F" record --listen 127.0.0.1:0 --upstream "$sim" --db "$d/c.db" >"$d/rec.out" 2>/dev/null &
rp=$!
pids="$pids $rp"
while ! grep -q listening "$d/rec.out" 2>/dev/null; do sleep 0.05; done
rec=$(sed -n 's/.*listening on \(http:[^ ]*\) .*/\1/p' "$d/rec.out")
cat >"$d/config.yaml" <<YAML
name: local
version: 1.0.0
schema: v1
models:
  - name: sim
    provider: openai
    model: qwen3-test
    apiBase: $rec/v1
    apiKey: sk-not-a-secret
    roles: [chat, edit, apply, summarize]
YAML
if [ -n "${CONTEXT_LENGTH:-}" ]; then
    cat >>"$d/config.yaml" <<YAML
    defaultCompletionOptions:
      contextLength: $CONTEXT_LENGTH
      maxTokens: ${MAX_TOKENS:-512}
YAML
fi
timeout 600 python3 "tests/e2e/continue/$driver" "$cn" "$d/config.yaml" "$d/proj" "$d/home" "$d/tui.log" "$sim"
kill -TERM $rp; wait $rp 2>/dev/null || true
make -s build/libfidelity.a build/tests/util/rec.o build/tests/util/proc.o
cc -std=gnu17 -O1 -Isrc -Itests -o "$d/dump" tests/e2e/opencode/dump.c \
    build/tests/util/rec.o build/tests/util/proc.o build/libfidelity.a \
    $(pkg-config --libs libevent libcurl jansson sqlite3 zlib libxxhash libpq) -lm -lpthread
"$d/dump" "$d/c.db" | sed "s#$d/proj#/home/user/proj#g; s#$d/home#/home/user#g; s#$d#/tmp/run#g" >"$out"
echo "$(wc -l <"$out") exchanges -> $out"
