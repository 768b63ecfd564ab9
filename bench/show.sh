#!/bin/sh
# bench/show.sh: what reading a long recorded session back costs:
# `fidelity show SESSION --messages` (every request's messages, fields,
# reply and changes, texts cut to a line) and `fidelity export --format
# jsonl` (every exchange with its request body as stored), against the
# sqlite3 shell dumping the same rows (the session's xchg rows and the
# xchg_blob rows they refer to, as JSON: the bytes without the reading).
# The session: an opencode-shaped conversation (the captured 9.5k-char
# system prompt and 10 tool schemas of tests/fixtures/opencode-1.18.33/)
# of TURNS user turns, each with one tool round trip (2 exchanges a turn),
# the harness keeping the system prompt and the last WINDOW messages, so
# that a request stays the size a real one has; recorded through `fidelity
# record` in front of `fidelity sim`. Each reader runs under /usr/bin/time
# -v, output to /dev/null; best of 3 by CPU. Prints seconds, CPU, peak RSS
# and the bytes written.
#
# usage: sh bench/show.sh [TURNS]   (default 2000: 4,000 exchanges; run from
#                                    the repo root after make)
#   SHOW_BENCH_DB=FILE    read a copy of FILE (a store holding ses_bench)
#   SHOW_BENCH_KEEP=FILE  keep the recorded store in FILE
#   WINDOW=N              messages the harness keeps (default 40)
#   FIDELITY=BIN          the binary (default ./fidelity)
set -eu
for t in /usr/bin/time python3 sqlite3; do
    command -v $t >/dev/null || { echo "bench/show.sh: $t is required; run 'make bench-deps' (sqlite3: apt-get install sqlite3)" >&2; exit 2; }
done
turns=${1:-2000}
window=${WINDOW:-40}
bin=${FIDELITY:-./fidelity}
fx=tests/fixtures/opencode-1.18.33/plain-02-turn1-first-request.json
[ -x "$bin" ] || { echo "bench/show.sh: build first: make" >&2; exit 2; }
[ -r "$fx" ] || { echo "bench/show.sh: cannot read '$fx'" >&2; exit 2; }
dir=$(mktemp -d)
sim_pid=""; rec_pid=""
cleanup() {
    kill $sim_pid $rec_pid 2>/dev/null || true
    if [ -n "${SHOW_BENCH_KEEP:-}" ]; then cp "$dir/b.db" "$SHOW_BENCH_KEEP" || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
if [ -n "${SHOW_BENCH_DB:-}" ]; then
    cp "$SHOW_BENCH_DB" "$dir/b.db"
else
$bin sim --listen 127.0.0.1:0 --max-model-len 16777216 >"$dir/sim.out" 2>/dev/null &
sim_pid=$!
while ! grep -q listening "$dir/sim.out" 2>/dev/null; do sleep 0.05; done
sim_url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$dir/sim.out")
$bin record --listen 127.0.0.1:0 --upstream "$sim_url" --db "$dir/b.db" \
    >"$dir/rec.out" 2>/dev/null &
rec_pid=$!
while ! grep -q listening "$dir/rec.out" 2>/dev/null; do sleep 0.05; done
rec_url=$(sed -n 's/.*listening on \(http:[^ ]*\) .*/\1/p' "$dir/rec.out")
python3 - "$rec_url" "$fx" "$turns" "$window" <<'PY'
import json, sys, urllib.request
url, fx, turns, window = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
body = json.load(open(fx))["body"]
system, hist = body["messages"][:1], []
def send(msgs):
    b = dict(body, messages=msgs)
    req = urllib.request.Request(url + "/v1/chat/completions",
        data=json.dumps(b).encode(), headers={
            "Content-Type": "application/json", "Authorization": "Bearer sk-bench",
            "X-Session-Id": "ses_bench", "User-Agent": "bench/1.0"})
    out = ""
    for line in urllib.request.urlopen(req).read().decode().splitlines():
        if line.startswith("data: {"):
            for c in json.loads(line[6:]).get("choices", []):
                out += c.get("delta", {}).get("content") or ""
    return out
for t in range(turns):
    hist.append({"role": "user", "content":
                 "The code for door %d is %d. Please note it." % (t, 1000 + t)})
    hist = hist[-window:]
    cid = "call_%d" % t
    hist.append({"role": "assistant", "content": send(system + hist),
                 "tool_calls": [{"id": cid, "type": "function", "function": {
                     "name": "bash", "arguments": json.dumps({"command": "ls"})}}]})
    hist.append({"role": "tool", "tool_call_id": cid, "content": "file%d.txt" % t})
    hist = hist[-window:]
    while hist and hist[0]["role"] == "tool":
        hist = hist[1:]
    hist.append({"role": "assistant", "content": send(system + hist)})
PY
kill -TERM $rec_pid; wait $rec_pid 2>/dev/null || true; rec_pid=""
kill $sim_pid 2>/dev/null || true; sim_pid=""
fi
db="$dir/b.db"
# best of 3 by CPU: "wall cpu rss_kib bytes"
measure() {
    best=""
    for _ in 1 2 3; do
        /usr/bin/time -v sh -c "$1 | wc -c > '$dir/bytes'" 2>"$dir/t" >/dev/null
        w=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$dir/t" |
            awk -F: '{ if (NF == 3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
        c=$(awk -F': ' '/User time|System time/ { s += $2 } END { print s }' "$dir/t")
        r=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/t")
        b=$(cat "$dir/bytes")
        if [ "$(awk -v c="$c" -v b="$best" 'BEGIN { split(b, a, " ");
                print (b == "" || c < a[2]) ? 1 : 0 }')" = 1 ]; then
            best="$w $c $r $b"
        fi
    done
    echo "$best"
}
n=$(sqlite3 "$db" "select count(*) from xchg where session='ses_bench'")
show=$(measure "$bin show ses_bench --db '$db' --messages")
jsonl=$(measure "$bin export --db '$db' --session ses_bench --format jsonl")
peer=$(measure "sqlite3 -json '$db' \"select * from xchg where session='ses_bench'; select * from xchg_blob\"")
pr() { echo "$2" | awk -v what="$1" '{ printf "%-34s %7.2f s wall %7.2f s CPU %8d KiB peak RSS %12d bytes out\n", what, $1, $2, $3, $4 }'; }
echo "exchanges: $n in one session ($(du -k "$db" | cut -f1) KiB store, window $window messages)"
pr "fidelity show --messages" "$show"
pr "fidelity export --format jsonl" "$jsonl"
pr "sqlite3 -json (xchg rows + blobs)" "$peer"
echo "$show $jsonl $peer" | awk '{ printf "CPU ratio to sqlite3: show %.2f x, export %.2f x\n", $2 / $10, $6 / $10 }'
