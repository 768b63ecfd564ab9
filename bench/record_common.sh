# bench/record_common.sh: what bench/record_cg.sh, record_loop.sh and
# record_timing.sh share, sourced after they set KIND (json or sse) and,
# for a paced run, RATE and CONNS: the build to measure (BIN, default
# ./fidelity, built), a temporary directory removed at exit (kept with
# KEEP=1), the small JSON or SSE request of bench/record.sh as a wrk
# script ($tmp/req.lua, with a random per-connection delay() when RATE is
# set: bench/paced.lua), port_of FILE (the port of a server's "listening
# on" line) and the sim started in front of nothing (SIM its port, SP its
# pid). The script sets RP to record's pid when it starts it; both are
# stopped at exit.
ME=bench/$(basename "$0")
need_tool() {
    command -v "$1" >/dev/null || { echo "$ME: $1 is required; run 'make bench-deps'" >&2; exit 2; }
}
need_tool wrk
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
    if [ -n "${KEEP:-}" ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
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
if [ -n "${RATE:-}" ]; then
    echo "mean_ms = $(awk -v c="$CONNS" -v r="$RATE" 'BEGIN { print 1000 * c / r }')" \
        >>"$tmp/req.lua"
    cat bench/paced.lua >>"$tmp/req.lua"
fi

port_of() {
    for _ in $(seq 150); do
        p=$(sed -n '1s|^[^/]*//[^:]*:\([0-9]*\).*|\1|p' "$1" 2>/dev/null)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.2
    done
    echo "$ME: no 'listening on' line in $1" >&2
    exit 4
}

"$BIN" sim --listen 127.0.0.1:0 >"$tmp/sim.out" 2>&1 &
SP=$!
SIM=$(port_of "$tmp/sim.out")
