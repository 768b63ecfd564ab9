#!/bin/sh
# bench/record.sh: `fidelity record` against nginx (proxy_pass,
# proxy_buffering off) and mitmproxy (reverse mode), all three in front of
# the same `fidelity sim`, measured side by side with wrk at 64 connections
# for small JSON and for SSE responses. Prints requests/s, p99 latency, the
# ratios record/nginx and record/mitmproxy, the p99 added over the direct
# path, CPU time per exchange of each proxy (from /proc/PID/stat, all its
# threads), and record's resident memory with 1,000 open streams.
#
# The saturated runs go in SROUNDS rounds, each direct, record and nginx
# one after the other (mitmproxy in the first round only): this machine's
# speed drifts by 10-20 % between runs a minute apart, so the record/nginx
# ratio is taken per round, from runs seconds apart, and its median is the
# figure; every round is printed.
#
# Then the latency at equal load: in each of ROUNDS rounds, bench/pace
# drives direct, record, nginx and direct once more ("again") at the same
# time, RATE requests/s each (well below saturation), arrivals at random
# and mixed; the p99 added by a proxy is its p99 minus direct's in the same
# round, and the median over the rounds is the figure. Together, because
# this machine's CPU slows down for windows of milliseconds that make a
# p99, and runs one after the other meet different windows (bench/pace.c).
#
#   sh bench/record.sh   # DUR=10 CONNS=64 SROUNDS=3 STREAMS=1000 RATE=250
#                        # LCONNS=8 LDUR=10 ROUNDS=5
#   DUR=5 sh bench/record.sh
#   SROUNDS=0 sh bench/record.sh               # the fixed-rate runs only
#   FIDELITY_RECORD_LIBCURL=1 sh bench/record.sh   # record through libcurl
#   REDACT_ONLY=1 sh bench/record.sh           # body redaction's cost alone
#
# `make bench-deps` installs the peers (nginx, mitmproxy) and tools (wrk,
# python3); without a peer its rows are skipped, wrk and python3 are
# required.
set -eu
cd "$(dirname "$0")/.."
DUR=${DUR:-10}
CONNS=${CONNS:-64}
STREAMS=${STREAMS:-1000}
RATE=${RATE:-250}      # requests/s to each of the four targets in the
                       # fixed-rate runs (1,000 in all)
LCONNS=${LCONNS:-8}    # connections per target of the fixed-rate runs
LDUR=${LDUR:-10}       # seconds of each fixed-rate round
ROUNDS=${ROUNDS:-5}    # fixed-rate rounds (direct, record, nginx and direct
                       # again at the same time); the medians are printed
SROUNDS=${SROUNDS:-3}  # saturated rounds (direct, record, nginx in turn)
HZ=$(getconf CLK_TCK)

PATH=$PATH:/usr/sbin
need() { command -v "$1" >/dev/null 2>&1; }
for peer in nginx mitmdump; do
    need $peer || echo "bench/record.sh: $peer not installed, its rows are skipped (run 'make bench-deps')" >&2
done
need wrk || { echo "bench/record.sh: wrk is required; run 'make bench-deps'" >&2; exit 2; }
need python3 || { echo "bench/record.sh: python3 is required; run 'make bench-deps'" >&2; exit 2; }
make -s fidelity >/dev/null
# bench/pace: the fixed-rate load generator (libevent, as fidelity);
# bench/windows: how often the CPU runs slow, printed before those rounds
cc -O2 -Wall -o build/pace bench/pace.c $(pkg-config --cflags --libs libevent) -lm
cc -O2 -Wall -o build/windows bench/windows.c
# The body redaction record does on its loop before anything is kept
# (src/record/redact.c), per exchange, on opencode's request bodies.
# REDACT_ONLY=1: this figure alone (a few seconds).
cc -O2 -Wall -Isrc -o build/redact_bench bench/redact_bench.c \
    build/libfidelity.a $(pkg-config --cflags --libs jansson)
build/redact_bench "${REDACT_ITERS:-2000}" \
    tests/fixtures/opencode-1.18.33/*request*.json
[ "${REDACT_ONLY:-0}" = 1 ] && exit 0

tmp=$(mktemp -d)
pids=""
cleanup() {
    # start_server runs in a command substitution (a subshell): its
    # servers' pids are in $tmp/pids, not in $pids
    for p in $pids $(cat "$tmp/pids" 2>/dev/null); do
        kill "$p" 2>/dev/null || true
    done
    # (|| true: under dash's set -e a failing kill here, nginx gone or its
    # pid file empty, became the script's exit status, 1 or 2)
    if [ -f "$tmp/nginx.pid" ]; then
        kill "$(cat "$tmp/nginx.pid" 2>/dev/null)" 2>/dev/null || true
    fi
    sleep 0.3
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

freeport() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_server OUTFILE CMD...: runs CMD, waits for its "listening on" line,
# prints the port
start_server() {
    out=$1; shift
    "$@" >"$out" 2>"$out.err" &
    echo $! >>"$tmp/pids"
    for _ in $(seq 100); do
        if grep -q "listening on" "$out" 2>/dev/null; then
            # the first URL on the line (record prints two)
            sed -n '1s|^[^/]*//[^:]*:\([0-9]*\).*|\1|p' "$out"
            return 0
        fi
        sleep 0.1
    done
    echo "bench/record.sh: '$*' did not start" >&2
    cat "$out.err" >&2
    exit 4
}

wait_port() {
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$1/health" && return 0
        sleep 0.1
    done
    return 1
}

SIM=$(start_server "$tmp/sim.out" ./fidelity sim --listen 127.0.0.1:0)
REC=$(start_server "$tmp/rec.out" ./fidelity record --listen 127.0.0.1:0 \
    --upstream "http://127.0.0.1:$SIM" --db "$tmp/record.db")

NGX=""
if need nginx; then
    NGX=$(freeport)
    cat >"$tmp/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $tmp/nginx.pid;
error_log $tmp/nginx.err;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $tmp;
    proxy_temp_path $tmp;
    upstream sim { server 127.0.0.1:$SIM; keepalive 128; }
    server {
        listen 127.0.0.1:$NGX;
        location / {
            proxy_pass http://sim;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
EOF
    nginx -c "$tmp/nginx.conf" -p "$tmp" &
    pids="$pids $!"
    NGX_PID=$!
    wait_port "$NGX" || { echo "nginx did not start" >&2; NGX=""; }
fi

MITM=""
if need mitmdump; then
    MITM=$(freeport)
    mitmdump -q --mode "reverse:http://127.0.0.1:$SIM" --listen-host 127.0.0.1 \
        --listen-port "$MITM" --set stream_large_bodies=1 \
        >"$tmp/mitm.out" 2>&1 &
    pids="$pids $!"
    MITM_PID=$!
    wait_port "$MITM" || { echo "mitmproxy did not start" >&2; MITM=""; }
fi

# the two requests: small JSON (16 tokens) and SSE with a usage chunk
printf '%s' '{"model":"m","temperature":0,"max_tokens":16,"messages":[{"role":"user","content":"Let X = 5. What is the value of X?"}]}' \
    >"$tmp/json.body"
printf '%s' '{"model":"m","temperature":0,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Let X = 5. What is the value of X?"}]}' \
    >"$tmp/sse.body"
for k in json sse; do
    cat >"$tmp/$k.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
wrk.body = '$(cat "$tmp/$k.body")'
EOF
done

SIM_PID=$(sed -n 1p "$tmp/pids")
REC_PID=$(sed -n 2p "$tmp/pids")
# cpu_ticks PID: utime + stime of PID and its children processes (nginx's
# worker), all threads
cpu_ticks() {
    t=0
    for p in "$1" $(pgrep -P "$1" 2>/dev/null); do
        [ -r "/proc/$p/stat" ] || continue
        t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{ print $12 + $13 }')))
    done
    echo "$t"
}

# writer_ticks PID: utime + stime of record's writer thread
writer_ticks() {
    for t in /proc/"$1"/task/*; do
        if [ "$(cat "$t/comm" 2>/dev/null)" = record-writer ]; then
            sed 's/.*) //' "$t/stat" | awk '{ print $12 + $13 }'
            return
        fi
    done
    echo 0
}

# parse_wrk FILE TICKS: "rps p99ms non2xx cpu_us_per_exchange p50ms p90ms"
# from wrk's --latency output; TICKS is the proxy's CPU over the run
parse_wrk() {
    awk -v ticks="$2" -v hz="$HZ" '
        / requests in / { n = $1 }
        /Requests\/sec:/ { rps = $2 }
        $1 == "50%" || $1 == "90%" || $1 == "99%" {
            v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
            if (u == "us") v /= 1000; else if (u == "s") v *= 1000
            pc[$1] = v
        }
        /Non-2xx/ { bad = $NF }
        END {
            cpu = (n > 0 && ticks > 0) ? ticks * 1e6 / hz / n : 0
            printf "%s %s %s %.0f %s %s\n", rps + 0, pc["99%"] + 0, bad + 0, cpu,
                pc["50%"] + 0, pc["90%"] + 0
        }' "$1"
}

# run KIND PORT [PID]: one saturated run (CONNS connections, DUR s)
#   -> parse_wrk's line; for record, the writer thread's CPU per exchange
#   goes to $tmp/writer_us
run() {
    w0=$( [ "${3:-}" = "$REC_PID" ] && writer_ticks "$3" || echo 0)
    t0=$( [ -n "${3:-}" ] && cpu_ticks "$3" || echo 0)
    wrk -t2 -c"$CONNS" -d"${DUR}s" --latency -s "$tmp/$1.lua" \
        "http://127.0.0.1:$2/v1/chat/completions" >"$tmp/wrk.out" 2>&1 || true
    t1=$( [ -n "${3:-}" ] && cpu_ticks "$3" || echo 0)
    w1=$( [ "${3:-}" = "$REC_PID" ] && writer_ticks "$3" || echo 0)
    awk -v ticks=$((w1 - w0)) -v hz="$HZ" '/ requests in / { n = $1 }
        END { printf "%.0f\n", (n > 0 ? ticks * 1e6 / hz / n : 0) }' \
        "$tmp/wrk.out" >"$tmp/writer_us"
    parse_wrk "$tmp/wrk.out" $((t1 - t0))
}

# settle: waits, at most 120 s, until record's writer has used no CPU for
# a second. After saturated runs it is still committing what its intake
# log holds (docs/RECORD.md), and that work would otherwise land in the
# fixed-rate rounds: in one run it did, and every target's p50 doubled.
settle() {
    w=$(writer_ticks "$REC_PID")
    n=0
    while [ "$n" -lt 120 ]; do
        sleep 1
        n=$((n + 1))
        v=$(writer_ticks "$REC_PID")
        [ "$v" = "$w" ] && break
        w=$v
    done
    echo "(record's writer idle after $n s)"
}

# col FILE TARGET N: column N of FILE's rows for TARGET (its column 2)
col() { awk -v t="$2" -v n="$3" '$2 == t { print $n }' "$1"; }

# median: the median of the numbers on standard input
median() {
    sort -g | awk '{ a[NR] = $1 } END {
        if (NR) printf "%.6g\n", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

echo "machine: $(nproc) cores, $(awk '/model name/ {sub(/.*: /, ""); print; exit}' /proc/cpuinfo)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wrk -t2 -c$CONNS -d${DUR}s, upstream fidelity sim; nginx 1 worker;"
echo "saturated: $SROUNDS rounds, each direct, record, nginx in turn (mitmproxy in"
echo "the first); fixed rate: $ROUNDS rounds, direct, record, nginx and direct again at once"
for kind in json sse; do
    # SROUNDS=0: the fixed-rate runs only
    if [ "$SROUNDS" -gt 0 ]; then
        printf '\n%s responses, %d connections, saturated\n%-10s %12s %10s %8s %14s\n' \
            "$kind" "$CONNS" target req/s p99_ms non2xx cpu_us/exchange
        : >"$tmp/sat.$kind"
        for round in $(seq "$SROUNDS"); do
            set -- direct "$SIM" "$SIM_PID" record "$REC" "$REC_PID"
            [ -n "$NGX" ] && set -- "$@" nginx "$NGX" "$NGX_PID"
            [ -n "$MITM" ] && [ "$round" = 1 ] && set -- "$@" mitmproxy "$MITM" "$MITM_PID"
            while [ $# -gt 0 ]; do
                r=$(run "$kind" "$2" "$3")
                w=0
                [ "$1" = record ] && w=$(cat "$tmp/writer_us")
                echo "$round $1 $r $w" >>"$tmp/sat.$kind"
                printf '%-10s %12s %10s %8s %14s  (round %d)\n' "$1" $(echo "$r" | cut -d' ' -f1-4) "$round"
                shift 3
            done
        done
        # per target: median requests/s, p99 and CPU over the rounds; the
        # ratio record/nginx per round (the two ran a few seconds apart, so
        # the machine's drift between rounds cancels), and its median
        for t in direct record nginx mitmproxy; do
            grep -q " $t " "$tmp/sat.$kind" || continue
            printf '%-10s %12s %10s %8s %14s  (median of %d)\n' "$t" \
                "$(col "$tmp/sat.$kind" $t 3 | median)" \
                "$(col "$tmp/sat.$kind" $t 4 | median)" \
                "$(awk -v t=$t '$2 == t { s += $5 } END { print s + 0 }' "$tmp/sat.$kind")" \
                "$(col "$tmp/sat.$kind" $t 6 | median)" \
                "$(grep -c " $t " "$tmp/sat.$kind")"
        done
        awk '{ rps[$1, $2] = $3; p99[$1, $2] = $4; cpu[$1, $2] = $6; w[$1, $2] = $9
               if ($1 > n) n = $1 }
            END {
                for (i = 1; i <= n; i++)
                    if (rps[i, "nginx"] > 0)
                        printf "%.4f ratio\n", rps[i, "record"] / rps[i, "nginx"]
                for (i = 1; i <= n; i++)
                    if (rps[i, "mitmproxy"] > 0)
                        printf "%.4f mitm\n", rps[i, "record"] / rps[i, "mitmproxy"]
                for (i = 1; i <= n; i++) {
                    printf "%.4f p99rec\n", p99[i, "record"] - p99[i, "direct"]
                    if (rps[i, "nginx"] > 0)
                        printf "%.4f p99ngx\n", p99[i, "nginx"] - p99[i, "direct"]
                    printf "%d cpurec\n%d cpuw\n%d cpusim\n", cpu[i, "record"], w[i, "record"], cpu[i, "direct"]
                    if (rps[i, "nginx"] > 0)
                        printf "%d cpungx\n", cpu[i, "nginx"]
                }
            }' "$tmp/sat.$kind" >"$tmp/derived.$kind"
        d() { awk -v k="$1" '$2 == k { print $1 }' "$tmp/derived.$kind"; }
        if [ -n "$(d ratio)" ]; then
            printf 'record/nginx req/s by round: %s; median %.2fx (goal >= 0.8)\n' \
                "$(d ratio | awk '{ printf "%s%.2fx", (NR > 1 ? " " : ""), $1 }')" "$(d ratio | median)"
        fi
        [ -n "$(d mitm)" ] && printf 'record/mitmproxy req/s: %.1fx (goal >= 10)\n' "$(d mitm | median)"
        printf 'p99 added over direct at saturation (median of rounds): record %.2f ms' "$(d p99rec | median)"
        [ -n "$(d p99ngx)" ] && printf ', nginx %.2f ms' "$(d p99ngx | median)"
        cr=$(d cpurec | median); cw=$(d cpuw | median)
        printf '\nCPU per exchange (medians): record %s us (forwarding loop %s, writer thread %s)' \
            "$cr" "$(awk -v a="$cr" -v b="$cw" 'BEGIN { print a - b }')" "$cw"
        [ -n "$(d cpungx)" ] && printf ', nginx %s us (%.1fx)' "$(d cpungx | median)" \
            "$(awk -v a="$cr" -v b="$(d cpungx | median)" 'BEGIN { print a / b }')"
        printf ', sim (upstream) %s us\n' "$(d cpusim | median)"
    fi

    # Latency at equal load: in each round bench/pace drives direct,
    # record, nginx and direct a second time ("again") at the same time,
    # RATE requests/s each, arrivals at random and mixed, LDUR s after a
    # second of warm-up; the p99 added by a proxy is its p99 minus direct's
    # in the same round, and the medians of those differences over the
    # rounds are the figures. Driven together, the targets meet the same
    # slow windows of this machine's CPU (bench/pace.c says why that
    # matters); "again" shows what a difference of two runs of one path is.
    settle
    echo "slow CPU windows (bench/windows.c, 3 s, nothing else running): $(build/windows 3)"
    printf '\n%s responses at %d requests/s to each target, all at once (bench/pace, %d connections each)\n%-10s %12s %10s %10s %10s %8s %6s\n' \
        "$kind" "$RATE" "$LCONNS" target req/s p50_ms p90_ms p99_ms errors late
    : >"$tmp/paced.$kind"
    for round in $(seq "$ROUNDS"); do
        set -- direct "$SIM" record "$REC"
        [ -n "$NGX" ] && set -- "$@" nginx "$NGX"
        set -- "$@" again "$SIM"
        targets=""
        while [ $# -gt 0 ]; do
            targets="$targets $1=http://127.0.0.1:$2/v1/chat/completions"
            shift 2
        done
        # shellcheck disable=SC2086 # targets is a list
        build/pace --rate "$RATE" --duration "$LDUR" --conns "$LCONNS" \
            --body "$tmp/$kind.body" --header "Authorization: Bearer sk-bench" \
            $targets >"$tmp/pace.out" || true
        # "NAME n=N err=E late=L p50=MS p90=MS p99=MS ..." ->
        # "round target req/s p99 errors late p50 p90"
        awk -v round="$round" -v dur="$LDUR" '{
                for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                printf "%d %s %.0f %s %s %s %s %s\n", round, $1, v["n"] / dur,
                    v["p99"], v["err"], v["late"], v["p50"], v["p90"]
            }' "$tmp/pace.out" >>"$tmp/paced.$kind"
        awk -v round="$round" '$1 == round {
                printf "%-10s %12s %10s %10s %10s %8s %6s  (round %d)\n", $2, $3, $7, $8, $4, $5, $6, round
            }' "$tmp/paced.$kind"
    done
    for t in direct record nginx again; do
        grep -q " $t " "$tmp/paced.$kind" || continue
        printf '%-10s %12s %10s %10s %10s  (median of %d)\n' "$t" \
            "$(col "$tmp/paced.$kind" $t 3 | median)" \
            "$(col "$tmp/paced.$kind" $t 7 | median)" \
            "$(col "$tmp/paced.$kind" $t 8 | median)" \
            "$(col "$tmp/paced.$kind" $t 4 | median)" \
            "$(grep -c " $t " "$tmp/paced.$kind")"
    done
    # per round: the proxy's p50/p90/p99 minus direct's in the same round
    awk '{ p50[$1, $2] = $7; p90[$1, $2] = $8; p99[$1, $2] = $4; if ($1 > n) n = $1 }
        END {
            for (i = 1; i <= n; i++)
                for (t = 1; t <= 3; t++) {
                    x = t == 1 ? "record" : t == 2 ? "nginx" : "again"
                    if (!((i, x) in p99)) continue
                    printf "%s %s %.4f %.4f %.4f\n", x, i, p50[i, x] - p50[i, "direct"],
                        p90[i, x] - p90[i, "direct"], p99[i, x] - p99[i, "direct"]
                }
        }' "$tmp/paced.$kind" >"$tmp/added.$kind"
    printf 'p99 added over direct by round: record %s' \
        "$(awk '$1 == "record" { printf "%s%+.2f", (NR > 1 ? " " : ""), $5 }' "$tmp/added.$kind")"
    grep -q '^nginx' "$tmp/added.$kind" && printf '; nginx %s' \
        "$(awk '$1 == "nginx" { printf "%s%+.2f", (n++ ? " " : ""), $5 }' "$tmp/added.$kind")"
    grep -q '^again' "$tmp/added.$kind" && printf '; direct again %s' \
        "$(awk '$1 == "again" { printf "%s%+.2f", (n++ ? " " : ""), $5 }' "$tmp/added.$kind")"
    printf ' ms\n'
    for t in record nginx again; do
        grep -q "^$t" "$tmp/added.$kind" || continue
        printf '%s added over direct at equal load (medians of the rounds): p50 %+.2f, p90 %+.2f, p99 %+.2f ms\n' \
            "$([ $t = again ] && echo "direct again (the noise floor)" || echo $t)" \
            "$(awk -v t=$t '$1 == t { print $3 }' "$tmp/added.$kind" | median)" \
            "$(awk -v t=$t '$1 == t { print $4 }' "$tmp/added.$kind" | median)" \
            "$(awk -v t=$t '$1 == t { print $5 }' "$tmp/added.$kind" | median)"
    done
    echo "(goal: record's p99 added < 1 ms; \"direct again\" is the direct path driven"
    echo " a second time alongside: what a difference of two samples of one path is)"
done
echo "exchanges recorded: $(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from xchg').fetchone()[0])" "$tmp/record.db")"

# Resident memory with STREAMS open streams: a slow sim (one token every
# 500 ms), record in front, STREAMS clients that read the first event and
# hold on.
SLOW=$(start_server "$tmp/slow.out" ./fidelity sim --listen 127.0.0.1:0 \
    --token-interval-ms 500)
REC2=$(start_server "$tmp/rec2.out" ./fidelity record --listen 127.0.0.1:0 \
    --upstream "http://127.0.0.1:$SLOW" --db "$tmp/streams.db")
REC2_PID=$(tail -n 1 "$tmp/pids")
python3 - "$REC2" "$STREAMS" "$REC2_PID" <<'EOF'
import asyncio, sys
port, n, pid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"Tell me a long story about the sea and the wind please."}]}'
req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       b"Content-Length: %d\r\n\r\n" % len(body)) + body
def rss():
    d = {}
    for line in open("/proc/%s/status" % pid):
        k, v = line.split(":", 1)
        d[k] = v.strip()
    return d["VmRSS"], d["VmHWM"]
async def one(opened):
    r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    w.write(req)
    await w.drain()
    got = await r.readuntil(b"data:")
    opened.append(1)
    await asyncio.sleep(6)
    w.close()
async def main():
    opened = []
    tasks = [asyncio.create_task(one(opened)) for _ in range(n)]
    for _ in range(100):
        await asyncio.sleep(0.1)
        if len(opened) >= n:
            break
    await asyncio.sleep(1)
    cur, peak = rss()
    print("open streams through record: %d of %d; record RSS %s (peak %s) (goal < 100 MB)" % (len(opened), n, cur, peak))
    for t in tasks:
        t.cancel()
asyncio.run(main())
EOF
