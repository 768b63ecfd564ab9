#!/bin/sh
# bench/sim.sh: requests/s and latency of `fidelity sim` under wrk at 64
# connections, for small chat requests and for GET /health, beside nginx
# serving a static file of about the same size as a chat answer (one
# worker process, as the sim serves from one event loop). Prints each
# wrk summary and the sim/nginx ratio. Everything runs on 127.0.0.1 and
# everything started here is stopped on exit.
#
#   sh bench/sim.sh                 # 10 s per run
#   DURATION=30s CONNS=64 sh bench/sim.sh
set -eu
cd "$(dirname "$0")/.."
BIN=${FIDELITY_BIN:-./fidelity}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
command -v wrk >/dev/null || { echo "bench/sim.sh: 'wrk' not found; run 'make bench-deps'" >&2; exit 2; }
[ -x "$BIN" ] || make -s fidelity
tmp=$(mktemp -d)
sim_pid=""; ngx_pid=""
cleanup() {
    [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null && wait "$sim_pid" 2>/dev/null || true
    [ -n "$ngx_pid" ] && kill "$ngx_pid" 2>/dev/null || true
    sleep 0.2; rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

"$BIN" sim --listen 127.0.0.1:0 >"$tmp/sim.out" 2>"$tmp/sim.err" &
sim_pid=$!
for _ in $(seq 1 100); do
    grep -q listening "$tmp/sim.out" 2>/dev/null && break; sleep 0.05
done
port=$(sed -n 's/.*:\([0-9][0-9]*\)$/\1/p' "$tmp/sim.out" | head -n 1)
[ -n "$port" ] || { echo "bench/sim.sh: the sim did not start:" >&2; cat "$tmp/sim.err" >&2; exit 3; }
url="http://127.0.0.1:$port"

rps() { sed -n 's/^Requests\/sec:[[:space:]]*\([0-9.]*\).*/\1/p' "$1"; }
p99() { sed -n 's/^[[:space:]]*99%[[:space:]]*\([0-9.]*[a-z]*\).*/\1/p' "$1"; }

run() { # name url [script]
    name=$1; u=$2; shift 2
    echo "== $name: wrk -t$THREADS -c$CONNS -d$DURATION --latency $* $u"
    wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$@" "$u" | tee "$tmp/$name.txt"
}

curl -s -o "$tmp/answer.json" -H 'Content-Type: application/json' \
    --data '{"model":"sim","temperature":0,"max_tokens":16,"messages":[{"role":"user","content":"The access code for the blue door is 4812. What is the access code for the blue door?"}]}' \
    "$url/v1/chat/completions"
echo "chat answer ($(wc -c <"$tmp/answer.json") bytes): $(cat "$tmp/answer.json")"

run sim-chat "$url/v1/chat/completions" -s bench/sim_chat.lua
run sim-health "$url/health"

ngx_rps=""
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
    NGINX=$(command -v nginx || echo /usr/sbin/nginx)
    nport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 18080)
    mkdir -p "$tmp/www" "$tmp/ngx"
    cp "$tmp/answer.json" "$tmp/www/answer.json"
    # nginx's worker runs as an unprivileged user when started as root
    chmod 755 "$tmp" "$tmp/www"; chmod 644 "$tmp/www/answer.json"
    cat >"$tmp/nginx.conf" <<NGX
worker_processes 1;
daemon off;
pid $tmp/ngx/nginx.pid;
error_log $tmp/ngx/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $tmp/ngx; proxy_temp_path $tmp/ngx;
    fastcgi_temp_path $tmp/ngx; uwsgi_temp_path $tmp/ngx; scgi_temp_path $tmp/ngx;
    server { listen 127.0.0.1:$nport; root $tmp/www; }
}
NGX
    "$NGINX" -c "$tmp/nginx.conf" -p "$tmp/ngx" &
    ngx_pid=$!
    sleep 0.5
    run nginx-static "http://127.0.0.1:$nport/answer.json"
    ngx_rps=$(rps "$tmp/nginx-static.txt")
    if grep -q "Non-2xx" "$tmp/nginx-static.txt"; then
        echo "bench/sim.sh: nginx answered errors; see $tmp/ngx/error.log" >&2
        cat "$tmp/ngx/error.log" >&2; ngx_rps=""
    fi
else
    echo "== nginx not installed: no peer ratio (run 'make bench-deps')"
fi

echo
echo "summary ($CONNS connections, $DURATION, $THREADS wrk thread, $(nproc) cores):"
for n in sim-chat sim-health; do
    r=$(rps "$tmp/$n.txt")
    grep -q "Non-2xx" "$tmp/$n.txt" && echo "  $n: WARNING: the sim answered errors"
    line="  $n: $r requests/s, p99 $(p99 "$tmp/$n.txt")"
    if [ -n "$ngx_rps" ]; then
        line="$line, $(awk -v a="$r" -v b="$ngx_rps" 'BEGIN { printf "%.2f", a / b }') x nginx"
    fi
    echo "$line"
done
[ -n "$ngx_rps" ] && echo "  nginx-static: $ngx_rps requests/s, p99 $(p99 "$tmp/nginx-static.txt")"
exit 0
