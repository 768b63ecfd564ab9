#!/bin/sh
# bench/record_timing.sh: what a client's end waits for (the append to the
# intake log, or the commit when it is held) and the writer's phases
# (FIDELITY_RECORD_TIMING, src/record/rtiming.c), at a fixed
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
. bench/record_common.sh
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
