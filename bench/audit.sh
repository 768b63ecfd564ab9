#!/bin/sh
# bench/audit.sh: how long `fidelity audit` takes on a long recorded
# session, against the time the session itself took to record.
# An opencode-shaped conversation (the captured 9.5k-char system prompt and
# 10 tool schemas from tests/fixtures/opencode-1.18.33/) of TURNS user
# turns, each followed by one tool round trip, goes through `fidelity
# record` to `fidelity sim`; then `fidelity audit` and `fidelity sessions`
# read the store under /usr/bin/time -v (sessions three times: the
# listing as users get it after recording, from the rows record kept
# beside the store (DB-sessions) a second after its last commit; with
# those rows removed, a listing that reads every exchange; --findings,
# which runs the audit), with the ratio sessions / audit. Prints the seconds, the peak RSS
# and the ratio audit time / recording time. The sim's prefix cache holds
# the whole session (--cache-tokens): the conversation is a healthy one,
# and its audit has no warning to give.
#
# usage: sh bench/audit.sh [TURNS]    (default 100; run from the repo root)
#   AUDIT_BENCH_SCALE=1       linearity: record 2,000 turns (4,000
#                             exchanges), audit the first 1,000 exchanges
#                             and then all 4,000; print both and the ratio
#   AUDIT_BENCH_KEEP=FILE     keep the recorded store in FILE
#   AUDIT_BENCH_DB=FILE       audit a copy of FILE instead of recording one
#   FIDELITY=BIN              the binary to audit with (default ./fidelity)
set -eu
for t in /usr/bin/time python3; do
    command -v $t >/dev/null || { echo "bench/audit.sh: $t is required; run 'make bench-deps'" >&2; exit 2; }
done
turns=${1:-100}
[ -n "${AUDIT_BENCH_SCALE:-}" ] && turns=2000
bin=${FIDELITY:-./fidelity}
fx=tests/fixtures/opencode-1.18.33/plain-02-turn1-first-request.json
[ -x "$bin" ] || { echo "bench/audit.sh: build first: make" >&2; exit 2; }
[ -r "$fx" ] || { echo "bench/audit.sh: cannot read '$fx'" >&2; exit 2; }
dir=$(mktemp -d)
cleanup() {
    kill "$sim_pid" ${rec_pid:+"$rec_pid"} 2>/dev/null || true
    if [ -n "${AUDIT_BENCH_KEEP:-}" ]; then cp "$dir/b.db" "$AUDIT_BENCH_KEEP" || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
sim_pid=""
if [ -n "${AUDIT_BENCH_DB:-}" ]; then
    cp "$AUDIT_BENCH_DB" "$dir/b.db"
    start=0; end=0
else
$bin sim --listen 127.0.0.1:0 --max-model-len 16777216 --cache-tokens 4194304 >"$dir/sim.out" 2>/dev/null &
sim_pid=$!
while ! grep -q listening "$dir/sim.out" 2>/dev/null; do sleep 0.05; done
sim_url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$dir/sim.out")
$bin record --listen 127.0.0.1:0 --upstream "$sim_url" --db "$dir/b.db" \
    >"$dir/rec.out" 2>/dev/null &
rec_pid=$!
while ! grep -q listening "$dir/rec.out" 2>/dev/null; do sleep 0.05; done
rec_url=$(sed -n 's/.*listening on \(http:[^ ]*\) .*/\1/p' "$dir/rec.out")

start=$(date +%s.%N)
python3 - "$rec_url" "$fx" "$turns" <<'PY'
import json, sys, urllib.request
url, fx, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = json.load(open(fx))["body"]
msgs = body["messages"][:1]
def send(msgs):
    b = dict(body, messages=msgs)
    req = urllib.request.Request(url + "/v1/chat/completions",
        data=json.dumps(b).encode(), headers={
            "Content-Type": "application/json",
            "X-Session-Id": "ses_bench", "User-Agent": "bench/1.0"})
    out = ""
    for line in urllib.request.urlopen(req).read().decode().splitlines():
        if line.startswith("data: {"):
            d = json.loads(line[6:])
            for c in d.get("choices", []):
                out += c.get("delta", {}).get("content") or ""
    return out
for t in range(turns):
    msgs.append({"role": "user", "content":
                 "The code for door %d is %d. Please note it." % (t, 1000 + t)})
    msgs.append({"role": "assistant", "content": send(msgs)})
    cid = "call_%d" % t
    msgs.append({"role": "assistant", "content": "", "tool_calls": [
        {"id": cid, "type": "function", "function": {
            "name": "bash", "arguments": json.dumps({"command": "ls"})}}]})
    msgs.append({"role": "tool", "tool_call_id": cid,
                 "content": "file%d.txt" % t})
    msgs.append({"role": "assistant", "content": send(msgs)})
PY
end=$(date +%s.%N)
# record keeps the listing a second after its last commit (cmd_record.c's
# keeper): wait for its rows, for every exchange, before stopping it
nx=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from xchg').fetchone()[0])" "$dir/b.db")
kept_wait=0
while ! head -n 1 "$dir/b.db-sessions" 2>/dev/null | grep -q "	xchg $nx "; do
    kept_wait=$((kept_wait + 1))
    [ $kept_wait -lt 600 ] || { echo "bench/audit.sh: record kept no listing of $nx exchanges within 60 s" >&2; break; }
    sleep 0.1
done
kill -TERM $rec_pid; wait $rec_pid 2>/dev/null || true
fi

if [ -n "${AUDIT_BENCH_SCALE:-}" ]; then
    # the first 1,000 exchanges of the same session: later rows only refer
    # to earlier ones (req_base), so cutting the tail leaves a valid store
    cp "$dir/b.db" "$dir/k.db"
    python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('delete from xchg where id > 1000'); c.commit(); c.execute('vacuum')" "$dir/k.db"
    best() { # the fastest of 5 runs: "wall cpu" seconds, to the
             # microsecond (getrusage of the child; /usr/bin/time rounds
             # CPU to 10 ms, a tenth of the smaller figure)
        python3 - "$bin" "$1" <<'PY'
import os, resource, subprocess, sys, time
best = None
for _ in range(5):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.argv[1], "audit", "--db", sys.argv[2], "--fail-on",
                    "never"], stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if best is None or cpu < best[1]:
        best = (wall, cpu)
print("%.3f %.3f" % best)
PY
    }
    b1=$(best "$dir/k.db"); b4=$(best "$dir/b.db")
    t1=${b1%% *}; c1=${b1##* }; t4=${b4%% *}; c4=${b4##* }
    n4=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from xchg').fetchone()[0])" "$dir/b.db")
    echo "fidelity audit, 1000 exchanges: ${t1} s wall, ${c1} s CPU (best of 5)"
    echo "fidelity audit, $n4 exchanges: ${t4} s wall, ${c4} s CPU (best of 5)"
    echo "ratio $n4 / 1000: wall $(echo "$t4 / $t1" | bc -l | cut -c1-5), CPU $(echo "$c4 / $c1" | bc -l | cut -c1-5) (target <= 4.5)"
fi
/usr/bin/time -v $bin audit --db "$dir/b.db" --fail-on never \
    >"$dir/audit.out" 2>"$dir/audit.time"
# the listing as users get it once record has stored the session: it
# reads the rows record kept (store/slist.c); then, those rows removed, a
# listing that must read every exchange (a store record did not keep the
# listing of: another build's, a store over 64 MiB, a listing during
# traffic), which keeps its rows; --findings runs the audit
if [ -n "${AUDIT_BENCH_DB:-}" ]; then $bin sessions --db "$dir/b.db" >/dev/null; fi
/usr/bin/time -v $bin sessions --db "$dir/b.db" >/dev/null 2>"$dir/sessions.time"
rm -f "$dir/b.db-sessions"
/usr/bin/time -v $bin sessions --db "$dir/b.db" >/dev/null 2>"$dir/sessions1.time"
/usr/bin/time -v $bin sessions --findings --db "$dir/b.db" >/dev/null 2>"$dir/sessionsf.time"
secs() { sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$1" |
         awk -F: '{ if (NF == 3) print $1*3600+$2*60+$3; else print $1*60+$2 }'; }
rss() { sed -n 's/.*Maximum resident set size (kbytes): //p' "$1"; }
cpu() { awk -F': ' '/User time|System time/ { s += $2 } END { print s }' "$1"; }
rec_s=$(echo "$end - $start" | bc -l)
audit_s=$(secs "$dir/audit.time")
n=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from xchg').fetchone()[0])" "$dir/b.db")
echo "exchanges:        $n in one session ($(du -k "$dir/b.db" | cut -f1) KiB store)"
echo "fidelity audit:   ${audit_s} s, CPU $(cpu "$dir/audit.time") s, peak RSS $(rss "$dir/audit.time") KiB"
echo "fidelity sessions (the rows record kept${AUDIT_BENCH_DB:+; with AUDIT_BENCH_DB, those of an earlier listing}): $(secs "$dir/sessions.time") s, CPU $(cpu "$dir/sessions.time") s, peak RSS $(rss "$dir/sessions.time") KiB"
echo "fidelity sessions without kept rows (reads every exchange, keeps the rows): $(secs "$dir/sessions1.time") s, CPU $(cpu "$dir/sessions1.time") s, peak RSS $(rss "$dir/sessions1.time") KiB"
echo "fidelity sessions --findings (runs the audit): $(secs "$dir/sessionsf.time") s, CPU $(cpu "$dir/sessionsf.time") s"
echo "ratio sessions / audit: wall $(echo "$(secs "$dir/sessions.time") / $audit_s" | bc -l | cut -c1-5) (goal < 0.1); without kept rows / audit: $(echo "$(secs "$dir/sessions1.time") / $audit_s" | bc -l | cut -c1-5)"
if [ -z "${AUDIT_BENCH_DB:-}" ]; then
    echo "recording:        ${rec_s} s (client + record + sim)"
    echo "ratio audit / recording: $(echo "$audit_s / $rec_s" | bc -l | cut -c1-6)"
fi
tail -n 1 "$dir/audit.out"
if [ -n "${AUDIT_BENCH_SHOW:-}" ]; then cat "$dir/audit.out"; fi
