#!/bin/sh
# bench/record_cg.sh: instructions per exchange of `fidelity record`'s two
# threads, the forwarding loop (record_run) and the store writer
# (writer_main), under valgrind's callgrind: record in front of `fidelity
# sim`, wrk -t1 -c8 for DUR seconds with the small JSON or the SSE request
# of bench/record.sh. Independent of the load on the machine, so it is the
# figure to compare before and after a change.
#
#   sh bench/record_cg.sh                    # KIND=json DUR=5
#   KIND=sse sh bench/record_cg.sh
#   BIN=/tmp/old-fidelity sh bench/record_cg.sh   # another build
#   FIDELITY_RECORD_LIBCURL=1 sh bench/record_cg.sh  # libcurl upstream
set -eu
cd "$(dirname "$0")/.."
KIND=${KIND:-json}
DUR=${DUR:-5}
command -v valgrind >/dev/null || { echo "bench/record_cg.sh: valgrind is required" >&2; exit 2; }
command -v wrk >/dev/null || { echo "bench/record_cg.sh: wrk is required" >&2; exit 2; }
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
    [ -n "${KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
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
LUA

port_of() {
    for _ in $(seq 150); do
        p=$(sed -n '1s|^[^/]*//[^:]*:\([0-9]*\).*|\1|p' "$1" 2>/dev/null)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.2
    done
    echo "bench/record_cg.sh: no 'listening on' line in $1" >&2
    exit 4
}

"$BIN" sim --listen 127.0.0.1:0 >"$tmp/sim.out" 2>&1 &
SP=$!
SIM=$(port_of "$tmp/sim.out")
valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$tmp/cg.%p" "$BIN" record --listen 127.0.0.1:0 \
    --upstream "http://127.0.0.1:$SIM" --db "$tmp/r.db" \
    >"$tmp/rec.out" 2>"$tmp/rec.err" &
RP=$!
REC=$(port_of "$tmp/rec.out")
wrk -t1 -c8 -d"${DUR}s" -s "$tmp/req.lua" \
    "http://127.0.0.1:$REC/v1/chat/completions" | grep 'Requests/sec'
kill "$RP"
wait "$RP" || true
RP=""
# valgrind writes the per-thread profiles as it exits: wait until they
# stop growing
prev=""
for _ in $(seq 50); do
    cur=$(ls -l "$tmp"/cg.* 2>/dev/null | awk '{ s += $5 } END { print NR ":" s }')
    [ "$cur" = "$prev" ] && ls "$tmp"/cg.*-01 >/dev/null 2>&1 && break
    prev=$cur
    sleep 0.3
done
N=$(grep -o 'stopped; [0-9]*' "$tmp/rec.err" | grep -o '[0-9]*$')
echo "$KIND exchanges: $N"
# store_batch runs on either thread (a lone exchange is stored on the
# loop's): its sum over both is the cost of storing, wherever it ran, and
# "loop only" is record_run without the store_batch calls on the loop's
# thread, the forwarding loop's own cost whatever the writer's load
for f in "$tmp"/cg.*; do
    callgrind_annotate --inclusive=yes "$f" 2>/dev/null |
        grep -E "proxy.c:(record_run|writer_main|store_batch) \[" |
        sed "s|^|$(basename "$f") |" || true
done | awk -v n="$N" '{
    x = $2; gsub(",", "", x)
    f = $0; sub(/ \[.*/, "", f); sub(/.*:/, "", f)
    v[$1 " " f] = x
    if (f == "store_batch") { sb += x; next }
    printf "%-12s %8.0f instructions per exchange\n", f, x / n
    if (f == "record_run") loop = $1
} END {
    printf "%-12s %8.0f instructions per exchange (both threads)\n",
        "store_batch", sb / n
    if (loop != "")
        printf "%-12s %8.0f instructions per exchange (loop only)\n",
            "record_run", (v[loop " record_run"] - v[loop " store_batch"]) / n }'
