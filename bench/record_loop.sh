#!/bin/sh
# bench/record_loop.sh: what `fidelity record`'s forwarding loop costs per
# exchange, beside bench/record_cg.sh's instruction counts: CPU time per
# exchange of each of record's threads (utime + stime from
# /proc/PID/task/TID/stat across one wrk run at CONNS connections), then
# the system calls per exchange of the whole process under `strace -f -c`
# (a second, slower run with wrk -c8). record runs in front of `fidelity
# sim` with the small JSON or the SSE request of bench/record.sh.
#
#   sh bench/record_loop.sh                  # KIND=json DUR=5 CONNS=64
#   KIND=sse sh bench/record_loop.sh
#   BIN=/tmp/old-fidelity sh bench/record_loop.sh   # another build
set -eu
cd "$(dirname "$0")/.."
KIND=${KIND:-json}
DUR=${DUR:-5}
CONNS=${CONNS:-64}
. bench/record_common.sh
exchanges() { grep -o 'stopped; [0-9]*' "$1" | grep -o '[0-9]*$'; }
ticks() {
    for t in /proc/"$1"/task/*; do
        echo "$(cat "$t/comm" | tr ' ' _) $(awk '{ print $14 + $15 }' "$t/stat")"
    done
}

"$BIN" record --listen 127.0.0.1:0 --upstream "http://127.0.0.1:$SIM" \
    --db "$tmp/r.db" >"$tmp/rec.out" 2>"$tmp/rec.err" &
RP=$!
REC=$(port_of "$tmp/rec.out")
ticks "$RP" >"$tmp/t0"
wrk -t2 -c"$CONNS" -d"${DUR}s" -s "$tmp/req.lua" \
    "http://127.0.0.1:$REC/v1/chat/completions" | grep 'Requests/sec'
ticks "$RP" >"$tmp/t1"
kill "$RP"
wait "$RP" || true
RP=""
N=$(exchanges "$tmp/rec.err")
echo "$KIND exchanges: $N; CPU per exchange by thread (the loop is the"
echo "process's own name, the writer record-writer):"
paste "$tmp/t0" "$tmp/t1" | awk -v n="$N" -v hz="$(getconf CLK_TCK)" '
    { d[$1] += $4 - $2 }
    END { for (k in d) printf "  %-16s %6.1f us\n", k, d[k] * 1e6 / hz / n }'

command -v strace >/dev/null || { echo "(no strace: system calls skipped; 'make bench-deps' installs it)"; exit 0; }
rm -f "$tmp/r.db"*
strace -f -c -o "$tmp/st.txt" "$BIN" record --listen 127.0.0.1:0 \
    --upstream "http://127.0.0.1:$SIM" --db "$tmp/r.db" \
    >"$tmp/rec2.out" 2>"$tmp/rec2.err" &
RP=$!
REC=$(port_of "$tmp/rec2.out")
wrk -t1 -c8 -d3s -s "$tmp/req.lua" \
    "http://127.0.0.1:$REC/v1/chat/completions" >/dev/null
kill "$(pgrep -P "$RP")" 2>/dev/null || true
wait "$RP" || true
RP=""
N=$(exchanges "$tmp/rec2.err")
echo "system calls per exchange, all threads (strace -f -c, wrk -c8, $N exchanges):"
awk -v n="$N" '$4 ~ /^[0-9]+$/ && $NF != "total" {
    printf "  %-14s %6.2f\n", $NF, $4 / n }' "$tmp/st.txt" |
    sort -k2 -rn | head -14
awk -v n="$N" '$NF == "total" { printf "  %-14s %6.2f\n", "total", $4 / n }' \
    "$tmp/st.txt"
