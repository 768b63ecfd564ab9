#!/bin/sh
# Records tests/fixtures/kilo-7.7.7/session.jsonl: the Kilo CLI 7.7.7
# (tests/e2e/kilo/install.sh) for a few turns of `kilo run` and
# `kilo run -c`, each prompt on stdin, offline, against `fidelity sim
# --reasoning` through `fidelity record`, with a 12,000-token context so
# that Kilo compacts once: a fact, a tool call (the sim calls `read` on
# "Call the read tool with ..."; `--auto` lets Kilo run it and send the
# result back), a long reply interrupted with SIGINT while it streams (the
# sim slowed to 300 ms a token for that turn through POST /sim/config), a
# turn after it, notes until Kilo compacts, the question. The exchanges are
# written as JSON lines in xchg_to_json's shape (tests/e2e/opencode/dump.c),
# the temporary paths replaced. Run by hand; `make test` only replays it.
# usage: sh tests/e2e/kilo/record.sh [OUT]  (from the repo root, after make;
# KEEP=1 keeps the temporary directory with the store and Kilo's output)
set -eu
out=${1:-tests/fixtures/kilo-7.7.7/session.jsonl}
bin=$(sh tests/e2e/kilo/install.sh)
F=$PWD/fidelity
d=$(mktemp -d)
[ -z "${KEEP:-}" ] || echo "record.sh: keeping $d" >&2
pids=""
trap 'for p in $pids; do kill $p 2>/dev/null || true; done; [ -n "${KEEP:-}" ] || rm -rf "$d"' EXIT INT TERM
mkdir -p "$d/proj" "$d/home"
printf 'Deploy window: Thursday 14:00. Owner: Dana.\n' >"$d/proj/notes.txt"
"$F" sim --listen 127.0.0.1:0 --reasoning >"$d/sim.out" 2>/dev/null &
pids="$pids $!"
while ! grep -q listening "$d/sim.out" 2>/dev/null; do sleep 0.05; done
sim=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$d/sim.out")
"$F" record --listen 127.0.0.1:0 --upstream "$sim" --db "$d/k.db" >"$d/rec.out" 2>/dev/null &
rp=$!
pids="$pids $rp"
while ! grep -q listening "$d/rec.out" 2>/dev/null; do sleep 0.05; done
rec=$(sed -n 's/.*listening on \(http:[^ ]*\) .*/\1/p' "$d/rec.out")
cat >"$d/proj/opencode.json" <<JSON
{"\$schema": "https://opencode.ai/config.json", "autoupdate": false, "share": "disabled",
 "model": "mock/qwen3-test", "small_model": "mock/qwen3-test",
 "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "Mock",
   "options": {"baseURL": "$rec/v1", "apiKey": "sk-kilo-not-a-secret"},
   "models": {"qwen3-test": {"name": "qwen3-test", "tool_call": true, "temperature": true,
     "limit": {"context": 12000, "output": 1000}}}}}}
JSON
filler() {
    i=0; s=""
    while [ $i -lt 60 ]; do s="$s Note $1.$i: the build step $i wrote its log to out/step$i.log."; i=$((i + 1)); done
    echo "$s"
}
env_run() {
    cd "$d/proj" && exec env HOME="$d/home" XDG_CONFIG_HOME="$d/home/.config" \
        XDG_DATA_HOME="$d/home/.local/share" XDG_CACHE_HOME="$d/home/.cache" \
        XDG_STATE_HOME="$d/home/.local/state" OPENCODE_DISABLE_AUTOUPDATE=1 \
        OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 \
        PWD="$d/proj" "$@" >>"$d/kilo.log" 2>&1
}
# say PROMPT [ARGS]: one turn, the prompt on stdin
say() {
    p=$1; shift
    echo "$p" | (env_run timeout 180 "$bin" run --auto "$@")
}
simcfg() {
    curl -s -o /dev/null -H 'content-type: application/json' -d "$1" "$sim/sim/config"
}
model_requests() {
    curl -s "$sim/sim/stats" | sed -n 's/.*"model_requests": *\([0-9]*\).*/\1/p'
}
count() {
    sqlite3 "$d/k.db" "select count(*) from xchg where $1" 2>/dev/null || echo 0
}
# interrupt PROMPT: a turn of `kilo run -c` stopped as Ctrl-C in a terminal
# stops it: SIGINT to its process group while the reply streams. Kilo runs
# in a process group of its own with SIGINT at its default (sh starts a
# background job with SIGINT ignored), the sim slowed to 300 ms a token,
# and the signal comes 7 s after the request reached the sim.
interrupt() {
    simcfg '{"token_interval_ms": 300}'
    n=$(model_requests)
    echo "$1" | (env_run python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.setpgid(0, 0)
os.execvp(sys.argv[1], sys.argv[1:])' "$bin" run --auto -c) &
    kp=$!
    i=0
    while [ "$(model_requests)" -le "$n" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    sleep 7
    kill -INT -$kp 2>/dev/null || true
    i=0
    while kill -0 $kp 2>/dev/null && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
    kill -TERM -$kp 2>/dev/null || true
    wait $kp 2>/dev/null || true
    simcfg '{"token_interval_ms": 0}'
}
say "The access code for the blue door is 4812. Remember it."
say 'Call the read tool with {"filePath": "notes.txt"}' -c
interrupt "Write a Python program for a tic-tac-toe game, with a long explanation."
say "Now make it save the results to a file." -c
t=2
while [ $t -le 16 ] && [ "$(count "kind = 'compaction'")" -lt 1 ]; do
    say "Please keep these notes too. $(filler $t)" -c
    t=$((t + 1))
done
say "What is the access code for the blue door?" -c
kill -TERM $rp; wait $rp 2>/dev/null || true
make -s build/libfidelity.a build/tests/util/rec.o build/tests/util/proc.o
cc -std=gnu17 -O1 -Isrc -Itests -o "$d/dump" tests/e2e/opencode/dump.c \
    build/tests/util/rec.o build/tests/util/proc.o build/libfidelity.a \
    $(pkg-config --libs libevent libcurl jansson sqlite3 zlib libxxhash libpq) -lm -lpthread
r=${d#/}
"$d/dump" "$d/k.db" | sed "s#$d/proj#/home/user/proj#g; s#$d/home#/home/user#g; s#$d#/tmp/run#g;
    s#$r/proj#home/user/proj#g; s#$r#tmp/run#g" >"$out"
echo "$(wc -l <"$out") exchanges, $(count "kind = 'compaction'") compaction(s) -> $out"
