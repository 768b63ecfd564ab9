#!/bin/sh
# Records the fixture tests/fixtures/opencode-1.18.33/compaction-session.jsonl:
# the real opencode CLI (tests/e2e/opencode/install.sh) for six turns of
# `opencode run -c`, offline, against `fidelity sim` through `fidelity
# record`, with a context limit small enough that opencode compacts twice.
# The sim answers the second summary request "no earlier message"
# (POST /sim/config {"lose_summary": true} after the first compaction), so
# the fixture holds a compaction that lost the history. The exchanges are
# written as JSON lines in xchg_to_json's shape (tests/e2e/opencode/dump.c),
# the temporary project path replaced by /home/user/proj.
# With HARNESS=kilo the Kilo CLI 7.7.7 (an opencode fork: the same
# configuration, `kilo run`; tests/e2e/kilo/install.sh) plays the same
# session, with a tool call in its second turn, into
# tests/fixtures/kilo-7.7.7/compaction-session.jsonl.
# usage: sh tests/e2e/opencode/record_compaction.sh [OUT]  (from the repo root,
# after make)
set -eu
if [ "${HARNESS:-opencode}" = kilo ]; then
    out=${1:-tests/fixtures/kilo-7.7.7/compaction-session.jsonl}
    bin=$(sh tests/e2e/kilo/install.sh)
else
    out=${1:-tests/fixtures/opencode-1.18.33/compaction-session.jsonl}
    bin=$(sh tests/e2e/opencode/install.sh)
fi
F=$PWD/fidelity
d=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill $p 2>/dev/null || true; done; rm -rf "$d"' EXIT INT TERM
mkdir -p "$d/proj" "$d/home"
"$F" sim --listen 127.0.0.1:0 --reasoning >"$d/sim.out" 2>/dev/null &
pids="$pids $!"
while ! grep -q listening "$d/sim.out" 2>/dev/null; do sleep 0.05; done
sim=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$d/sim.out")
"$F" record --listen 127.0.0.1:0 --upstream "$sim" --db "$d/oc.db" >"$d/rec.out" 2>/dev/null &
rp=$!
pids="$pids $rp"
while ! grep -q listening "$d/rec.out" 2>/dev/null; do sleep 0.05; done
rec=$(sed -n 's/.*listening on \(http:[^ ]*\) .*/\1/p' "$d/rec.out")
cat >"$d/proj/opencode.json" <<JSON
{"\$schema": "https://opencode.ai/config.json", "autoupdate": false, "share": "disabled",
 "model": "mock/qwen3-test", "small_model": "mock/qwen3-test",
 "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "Mock",
   "options": {"baseURL": "$rec/v1", "apiKey": "sk-oc-not-a-secret"},
   "models": {"qwen3-test": {"name": "qwen3-test", "tool_call": true, "temperature": true,
     "limit": {"context": 12000, "output": 1000}}}}}}
JSON
filler() {
    i=0; s=""
    while [ $i -lt 60 ]; do s="$s Note $1.$i: the build step $i wrote its log to out/step$i.log."; i=$((i + 1)); done
    echo "$s"
}
run() {
    (cd "$d/proj" && HOME="$d/home" XDG_CONFIG_HOME="$d/home/.config" \
        XDG_DATA_HOME="$d/home/.local/share" XDG_CACHE_HOME="$d/home/.cache" \
        XDG_STATE_HOME="$d/home/.local/state" OPENCODE_DISABLE_AUTOUPDATE=1 \
        OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 \
        PWD="$d/proj" timeout 180 "$bin" run "$@" </dev/null >>"$d/oc.log" 2>&1)
}
compactions() {
    sqlite3 "$d/oc.db" "select count(*) from xchg where kind = 'compaction'" 2>/dev/null || echo 0
}
run "The access code for the blue door is 4812. Remember it. $(filler 1)"
if [ "${HARNESS:-opencode}" = kilo ]; then
    run -c 'Call the bash tool with {"command": "ls", "description": "List files"}.'
fi
t=2
while [ $t -le 16 ]; do
    if [ "$(compactions)" -ge 1 ]; then
        curl -s -o /dev/null -H 'content-type: application/json' \
            -d '{"lose_summary": true}' "$sim/sim/config"
    fi
    [ "$(compactions)" -ge 2 ] && break
    run -c "Please keep these notes too. $(filler $t)"
    t=$((t + 1))
done
run -c "What is the access code for the blue door?"
kill -TERM $rp; wait $rp 2>/dev/null || true
make -s build/libfidelity.a build/tests/util/rec.o build/tests/util/proc.o
cc -std=gnu17 -O1 -Isrc -Itests -o "$d/dump" tests/e2e/opencode/dump.c \
    build/tests/util/rec.o build/tests/util/proc.o build/libfidelity.a \
    $(pkg-config --libs libevent libcurl jansson sqlite3 zlib libxxhash libpq) -lm -lpthread
"$d/dump" "$d/oc.db" | sed "s#$d/proj#/home/user/proj#g; s#$d/home#/home/user#g" >"$out"
echo "$(wc -l <"$out") exchanges, $(compactions) compaction request(s) -> $out"
