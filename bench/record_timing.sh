#!/bin/sh
# bench/record_timing.sh: where a stored exchange's held end waits, phase
# by phase (FIDELITY_RECORD_TIMING, src/record/rtiming.c), at a fixed
# request rate well below saturation: `fidelity record` in front of
# `fidelity sim`, wrk paced with a Lua delay() per connection, the small
# JSON (or SSE) request of bench/record.sh. Prints record's percentile
# lines (ms; batch and inline are counts).
#
#   sh bench/record_timing.sh        # KIND=json RATE=1000 CONNS=8 DUR=10
#   KIND=sse sh bench/record_timing.sh
#   BIN=/tmp/old-fidelity sh bench/record_timing.sh   # another build
set -eu
cd "$(dirname "$0")/.."
KIND=${KIND:-json}
RATE=${RATE:-1000}
CONNS=${CONNS:-8}
DUR=${DUR:-10}
command -v wrk >/dev/null || { echo "bench/record_timing.sh: wrk is required" >&2; exit 2; }
if [ -z "${BIN:-}" ]; then
    make -s fidelity >/dev/null
    BIN=./fidelity
fi
tmp=$(mktemp -d)
SP=""
RP=""
cleanup() {
    [ -n "$RP" ] && kill "$RP" 2>/dev/null || true
    [ -n "$SP" ] && kill "$SP" 2>/dev/null || true
    sleep 0.2
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

if [ "$KIND" = sse ]; then
    extra=',"stream":true,"stream_options":{"include_usage":true}'
else
    extra=',"max_tokens":16'
fi
cat >"$tmp/req.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
wrk.body = '{"model":"m","temperature":0$extra,"messages":[{"role":"user","content":"Let X = 5. What is the value of X?"}]}'
function delay() return $(awk -v c="$CONNS" -v r="$RATE" 'BEGIN { printf "%d", 1000 * c / r }') end
LUA

port_of() {
    for _ in $(seq 150); do
        p=$(sed -n '1s|^[^/]*//[^:]*:\([0-9]*\).*|\1|p' "$1" 2>/dev/null)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.2
    done
    echo "bench/record_timing.sh: no 'listening on' line in $1" >&2
    exit 4
}

"$BIN" sim --listen 127.0.0.1:0 >"$tmp/sim.out" 2>&1 &
SP=$!
SIM=$(port_of "$tmp/sim.out")
FIDELITY_RECORD_TIMING=1 "$BIN" record --listen 127.0.0.1:0 \
    --upstream "http://127.0.0.1:$SIM" --db "$tmp/r.db" \
    >"$tmp/rec.out" 2>"$tmp/rec.err" &
RP=$!
REC=$(port_of "$tmp/rec.out")
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
wrk -t2 -c"$CONNS" -d"${DUR}s" --latency -s "$tmp/req.lua" \
    "http://127.0.0.1:$REC/v1/chat/completions" |
    grep -E 'Requests/sec|  99%'
kill "$RP"
wait "$RP" || true
RP=""
grep -vE 'listening|stopped' "$tmp/rec.err" || true
