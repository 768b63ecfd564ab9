#!/bin/sh
# bench/record_writer.sh: instructions per exchange on record's writer thread
# (parsing, reply reassembly, hashing, compression, SQLite) and on its
# forwarding loop, counted by callgrind, for the small JSON chat exchange
# and the ~15-event SSE exchange of bench/record.sh (wrk -t1 -cCONNS), and
# for a long session (one client, TURNS turns re-sending the history).
# store_batch is the storing itself, summed over the writer thread and the
# loop (which stores a lone exchange itself). Instruction counts do not
# depend on what else runs on the machine, unlike requests/s.
#
#   sh bench/record_writer.sh           # DUR=5 CONNS=8 TURNS=150
#   FIDELITY=/path/to/fidelity sh bench/record_writer.sh   # another build
#   KEEP=dir sh bench/record_writer.sh   # keep the callgrind files in dir
#
# Needs valgrind, wrk, python3.
set -eu
for t in valgrind wrk python3; do
    command -v $t >/dev/null || { echo "bench/record_writer.sh: $t is required; run 'make bench-deps'" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
DUR=${DUR:-5}
CONNS=${CONNS:-8}
BIN=${FIDELITY:-./fidelity}
[ -n "${FIDELITY:-}" ] || make -s fidelity >/dev/null
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
tmp=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    sleep 0.5
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# wait_listen OUTFILE -> port from its "listening on" line
wait_listen() {
    for _ in $(seq 300); do
        if grep -q "listening on" "$1" 2>/dev/null; then
            sed -n '1s|^[^/]*//[^:]*:\([0-9]*\).*|\1|p' "$1"
            return 0
        fi
        sleep 0.1
    done
    echo "bench/record_writer.sh: server did not start ($1)" >&2
    exit 4
}

"$BIN" sim --listen 127.0.0.1:0 >"$tmp/sim.out" 2>&1 &
pids="$pids $!"
SIM=$(wait_listen "$tmp/sim.out")

cat >"$tmp/json.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
wrk.body = '{"model":"m","temperature":0,"max_tokens":16,"messages":[{"role":"user","content":"Let X = 5. What is the value of X?"}]}'
LUA
cat >"$tmp/sse.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
wrk.body = '{"model":"m","temperature":0,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Let X = 5. What is the value of X?"}]}'
LUA

# long: one client, one X-Session-Id, TURNS chat turns re-sending the
# whole history each time (up to 2 x TURNS messages per request)
cat >"$tmp/long.py" <<'PY'
import json, sys, urllib.request
url, turns = sys.argv[1], int(sys.argv[2])
msgs = [{"role": "system", "content": "You are a helpful assistant. " * 20}]
for t in range(turns):
    msgs.append({"role": "user", "content": "Turn %d: the code for door %d is %d. What is it?" % (t, t, 1000 + t)})
    req = urllib.request.Request(url + "/v1/chat/completions",
        data=json.dumps({"model": "m", "max_tokens": 16, "messages": msgs}).encode(),
        headers={"Content-Type": "application/json", "X-Session-Id": "ses_long"})
    r = json.load(urllib.request.urlopen(req))
    msgs.append({"role": "assistant", "content": r["choices"][0]["message"]["content"]})
PY

for kind in json sse long; do
    mkdir "$tmp/$kind"
    (cd "$tmp/$kind" && exec valgrind --tool=callgrind --separate-threads=yes \
        "$BIN" record --listen 127.0.0.1:0 \
        --upstream "http://127.0.0.1:$SIM" --db "$tmp/$kind.db" \
        >"$tmp/$kind.out" 2>"$tmp/$kind.err") &
    rpid=$!
    REC=$(wait_listen "$tmp/$kind.out")
    if [ "$kind" = long ]; then
        python3 "$tmp/long.py" "http://127.0.0.1:$REC" "${TURNS:-150}"
    else
        wrk -t1 -c"$CONNS" -d"${DUR}s" -s "$tmp/$kind.lua" \
            "http://127.0.0.1:$REC/v1/chat/completions" >"$tmp/wrk.$kind" 2>&1
    fi
    kill -INT "$rpid" 2>/dev/null || true
    wait "$rpid" 2>/dev/null || true
    [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$tmp/$kind"/callgrind.out.* "$KEEP/" 2>/dev/null
    n=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from xchg').fetchone()[0])" "$tmp/$kind.db")
    sb=0
    for f in "$tmp/$kind"/callgrind.out.*; do
        ann=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null || true)
        # store_batch runs on either thread (a lone exchange is stored on
        # the loop's): summed over both, it is the cost of storing
        s=$(echo "$ann" | awk '/proxy.c:store_batch \[/ {gsub(",", "", $1); print $1; exit}')
        sb=$((sb + ${s:-0}))
        tot=$(echo "$ann" |
            awk '/writer_main|record_run/ {gsub(",", "", $1); print $1, $NF; exit}')
        [ -n "$tot" ] || continue
        set -- $tot
        printf '%-5s %-22s %8d instructions/exchange (%d exchanges)\n' \
            "$kind" "$(echo "$2" | sed 's/.*://;s/ .*//')" $(( $1 / n )) "$n"
    done
    printf '%-5s %-22s %8d instructions/exchange (both threads)\n' \
        "$kind" store_batch $(( sb / n ))
done
