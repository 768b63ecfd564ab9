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
command -v valgrind >/dev/null || { echo "bench/record_cg.sh: valgrind is required; run 'make bench-deps'" >&2; exit 2; }
. bench/record_common.sh
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
