#!/bin/sh
# bench/store_pg.sh: the PostgreSQL store beside the SQLite store, at the
# same load, in one run.
#
#  1. record's throughput and added latency: wrk (-t1 -cCONNS, DUR s, the
#     small JSON chat request of bench/record.sh) against the sim directly,
#     then through `fidelity record --db FILE.db`, then through `fidelity
#     record --db postgresql://...`; the added latency is the median and
#     p99 through record minus the sim's own.
#  2. audit of one long session (TURNS user turns, two exchanges each:
#     4,000 exchanges at the default 2,000), recorded into each store (the
#     client alternates between the two records, each conversation with its
#     own history), then `fidelity audit` on each; their sessions and
#     findings are compared.
#
# PostgreSQL runs in a temporary directory with its default durability
# (fsync and synchronous_commit on, as a deployment runs it), on a Unix
# socket only; as root it runs as nobody, as the tests' server does. The
# SQLite store runs as record runs it (WAL).
#
#   sh bench/store_pg.sh              # DUR=5 CONNS=8 TURNS=2000
#
# Needs wrk, python3, /usr/bin/time and PostgreSQL's server programs
# ('make deps' and 'make bench-deps').
set -eu
cd "$(dirname "$0")/.."
for t in wrk python3 /usr/bin/time; do
    command -v $t >/dev/null || { echo "bench/store_pg.sh: $t is required; run 'make bench-deps'" >&2; exit 2; }
done
DUR=${DUR:-5}
CONNS=${CONNS:-8}
TURNS=${TURNS:-2000}
BIN=${FIDELITY:-./fidelity}
[ -n "${FIDELITY:-}" ] || make -s fidelity >/dev/null
case "$BIN" in /*) ;; *) BIN="$PWD/$BIN" ;; esac
pgbin=$(pg_config --bindir 2>/dev/null || true)
[ -x "$pgbin/initdb" ] || pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -1)
[ -x "$pgbin/initdb" ] || { echo "bench/store_pg.sh: no PostgreSQL server programs; run 'make deps'" >&2; exit 2; }

tmp=$(mktemp -d /tmp/fidelity-bench-pg-XXXXXX)
chmod 755 "$tmp"
pids=""
asuser=""
if [ "$(id -u)" = 0 ]; then
    chown nobody "$tmp"
    asuser="su nobody -s /bin/sh -c"
fi
pgrun() { if [ -n "$asuser" ]; then $asuser "$*"; else sh -c "$*"; fi; }
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    pgrun "'$pgbin/pg_ctl' -D '$tmp/pg' -m immediate stop" >/dev/null 2>&1 || true
    sleep 0.3
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

pgrun "'$pgbin/initdb' -D '$tmp/pg' -A trust -U fid -E UTF8 --locale=C" >"$tmp/initdb.log" 2>&1 ||
    { cat "$tmp/initdb.log" >&2; exit 4; }
pgrun "'$pgbin/pg_ctl' -D '$tmp/pg' -l '$tmp/pg.log' -w -o \"-k $tmp -c listen_addresses=\" start" >/dev/null ||
    { cat "$tmp/pg.log" >&2; exit 4; }
PGURL_TP="postgresql://fid@/postgres?host=$tmp"
pgrun "'$pgbin/psql' -h '$tmp' -U fid -d postgres -qc 'create database tp' -c 'create database au'" >/dev/null
PG_TP="postgresql://fid@/tp?host=$tmp"
PG_AU="postgresql://fid@/au?host=$tmp"
: "$PGURL_TP"

# wait_listen OUTFILE -> the URL of its "listening on" line
wait_listen() {
    for _ in $(seq 300); do
        u=$(sed -n 's|.*listening on \(http://[^ ]*\).*|\1|p' "$1" 2>/dev/null | head -1)
        [ -n "$u" ] && { echo "$u"; return 0; }
        sleep 0.05
    done
    echo "bench/store_pg.sh: server did not start ($1)" >&2
    cat "$1" >&2
    exit 4
}

"$BIN" sim --listen 127.0.0.1:0 --max-model-len 16777216 --cache-tokens 4194304 >"$tmp/sim.out" 2>&1 &
pids="$pids $!"
SIM=$(wait_listen "$tmp/sim.out")

cat >"$tmp/json.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"m","temperature":0,"max_tokens":16,"messages":[{"role":"user","content":"Let X = 5. What is the value of X?"}]}'
LUA

# run_wrk URL NAME -> "req/s p50_ms p99_ms"
run_wrk() {
    wrk -t1 -c"$CONNS" -d"${DUR}s" --latency -s "$tmp/json.lua" "$1/v1/chat/completions" >"$tmp/$2.wrk"
    python3 - "$tmp/$2.wrk" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
def ms(label):
    m = re.search(r"^\s*%s%%\s+([\d.]+)(us|ms|s)\s*$" % label, t, re.M)
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == "us" else v * 1000 if u == "s" else v
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
non2 = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", t)
print("%.0f %.3f %.3f %s" % (rps, ms("50"), ms("99"), non2.group(1) if non2 else 0))
PY
}

# start_record NAME DB -> URL
start_record() {
    "$BIN" record --listen 127.0.0.1:0 --upstream "$SIM" --db "$2" \
        --intake "$tmp/$1.intake" >"$tmp/$1.rec" 2>&1 &
    pids="$pids $!"
    echo $! >"$tmp/$1.pid"
    wait_listen "$tmp/$1.rec"
}
stop_record() { kill -TERM "$(cat "$tmp/$1.pid")"; while kill -0 "$(cat "$tmp/$1.pid")" 2>/dev/null; do sleep 0.05; done; }

echo "== record at the same load: wrk -t1 -c$CONNS -d${DUR}s, small JSON chat"
direct=$(run_wrk "$SIM" direct)
U=$(start_record tps "$tmp/tp.db"); sq=$(run_wrk "$U" sqlite); stop_record tps
U=$(start_record tpp "$PG_TP"); pg=$(run_wrk "$U" pg); stop_record tpp
n_sq=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from xchg').fetchone()[0])" "$tmp/tp.db")
n_pg=$(pgrun "'$pgbin/psql' -h '$tmp' -U fid -d tp -Atc 'select count(*) from xchg'")
python3 - "$direct" "$sq" "$pg" "$n_sq" "$n_pg" <<'PY'
import sys
d, s, p = [list(map(float, a.split())) for a in sys.argv[1:4]]
print("%-28s %10s %9s %9s %14s %14s %7s" % ("", "req/s", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "non-2xx"))
print("%-28s %10.0f %9.3f %9.3f %14s %14s %7d" % ("sim directly", d[0], d[1], d[2], "", "", d[3]))
for name, r, n in (("record, SQLite store", s, sys.argv[4]), ("record, PostgreSQL store", p, sys.argv[5])):
    print("%-28s %10.0f %9.3f %9.3f %14.3f %14.3f %7d   (%s exchanges stored)" % (name, r[0], r[1], r[2], r[1] - d[1], r[2] - d[2], r[3], n))
print("ratio PostgreSQL / SQLite: throughput %.2f x, p50 %.2f x, p99 %.2f x" % (p[0] / s[0], p[1] / s[1], p[2] / s[2]))
PY

echo "== audit of one session of $TURNS turns ($((TURNS * 2)) exchanges), recorded into each store"
UA=$(start_record aus "$tmp/au.db")
UB=$(start_record aup "$PG_AU")
python3 - "$UA" "$UB" "$TURNS" <<'PY'
import json, sys, urllib.request
a, b, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
hist = {u: [{"role": "system", "content": "You are a helpful assistant. " * 20}] for u in (a, b)}
def send(url, msgs):
    req = urllib.request.Request(url + "/v1/chat/completions",
        data=json.dumps({"model": "m", "max_tokens": 16, "messages": msgs}).encode(),
        headers={"Content-Type": "application/json", "X-Session-Id": "ses_bench"})
    return json.load(urllib.request.urlopen(req))["choices"][0]["message"]["content"]
for t in range(turns):
    for u, msgs in hist.items():
        msgs.append({"role": "user", "content": "The code for door %d is %d. Please note it." % (t, 1000 + t)})
        msgs.append({"role": "assistant", "content": send(u, msgs)})
        msgs.append({"role": "user", "content": "And door %d?" % t})
        msgs.append({"role": "assistant", "content": send(u, msgs)})
PY
stop_record aus; stop_record aup
# best of 3 each, wall and CPU of the child
python3 - "$BIN" "$tmp/au.db" "$PG_AU" <<'PY'
import resource, subprocess, sys, time
def best(db):
    out = None
    for _ in range(3):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN); t0 = time.perf_counter()
        p = subprocess.run([sys.argv[1], "audit", "--db", db, "--fail-on", "never", "--json", "-"],
                           stdout=subprocess.PIPE, check=True)
        wall = time.perf_counter() - t0; r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        if out is None or wall < out[0]:
            out = (wall, cpu, p.stdout)
    return out
s = best(sys.argv[2]); p = best(sys.argv[3])
import json
def findings(raw):
    d = json.loads(raw)
    return len(d["sessions"]), sorted(json.dumps(f, sort_keys=True) for f in d["findings"])
fs, fp = findings(s[2]), findings(p[2])
print("sessions and findings alike in both stores: %s (%d session(s), %d finding(s))"
      % ("yes" if fs == fp else "NO", fs[0], len(fs[1])))
if fs != fp:
    print("  SQLite only:", [f for f in fs[1] if f not in fp[1]])
    print("  PostgreSQL only:", [f for f in fp[1] if f not in fs[1]])
print("audit, SQLite store:     %.3f s wall, %.3f s CPU (best of 3)" % s[:2])
print("audit, PostgreSQL store: %.3f s wall, %.3f s CPU (best of 3; the server's own CPU not counted)" % p[:2])
print("ratio PostgreSQL / SQLite: wall %.2f x" % (p[0] / s[0]))
PY
