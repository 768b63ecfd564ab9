#!/bin/sh
# bench/model.sh: what the real model (tests/model/) costs. First, the time
# its tests add to `make test` (build/tests/model/test_real_model and test_real_bisect, wall
# and CPU, children included). Then one `fidelity drift` between two
# model servers (the golden, and routed scaling 1.0 as the candidate) with
# the servers' own CPU time read from /proc before and after, so that
# drift's positions per second are taken on drift's CPU alone. The peer
# run side by side is the servers' work on the same positions: the ratio
# printed is their CPU seconds per one of drift's.
#   sh bench/model.sh [SEQUENCES] [MAX_CONTEXT]   MODEL_TESTS=0 skips the tests
set -eu
cd "$(dirname "$0")/.."
SEQS=${1:-4}
CTX=${2:-1024}
PY=${FIDELITY_PYTHON:-}
for p in $PY python3 /usr/bin/python3; do
    if "$p" -c 'import torch' 2>/dev/null; then PY=$p; break; fi
done
"$PY" -c 'import torch' 2>/dev/null ||
    { echo "bench/model.sh: no python3 with torch; run 'make deps'" >&2; exit 2; }
command -v /usr/bin/time >/dev/null ||
    { echo "bench/model.sh: /usr/bin/time is required; run 'make bench-deps'" >&2; exit 2; }
make -s build/fidelity build/tests/model/test_real_model build/tests/model/test_real_bisect
tmp=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"

if [ "${MODEL_TESTS:-1}" = 1 ]; then
    for t in test_real_model test_real_bisect; do
        /usr/bin/time -f '%e %U %S' -o "$tmp/t" env FIDELITY_BIN="$PWD/build/fidelity" \
            build/tests/model/$t >"$tmp/tests.log" 2>&1 ||
            { cat "$tmp/tests.log"; echo "bench/model.sh: the model tests failed" >&2; exit 1; }
        set -- $(tail -n 1 "$tmp/t"); wall=$1 user=$2 sys=$3
        echo "model tests ($t): $wall s wall, $(awk "BEGIN { print $user + $sys }") s CPU (servers included)"
    done
fi

# starts serve.py with the given switches; its port in $tmp/NAME.port
serve() {
    name=$1; shift
    "$PY" tests/model/serve.py --port 0 --port-file "$tmp/$name.port" "$@" \
        >"$tmp/$name.log" 2>&1 &
    pids="$pids $!"
    eval "pid_$name=$!"
    i=0
    while [ ! -s "$tmp/$name.port" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    [ -s "$tmp/$name.port" ] || { cat "$tmp/$name.log"; exit 1; }
}
# CPU seconds (user + system) of process $1 so far
cpu_of() {
    awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}
serve golden
serve cand --routed-scaling 1.0
g0=$(cpu_of "$pid_golden"); c0=$(cpu_of "$pid_cand")
/usr/bin/time -f '%e %U %S' -o "$tmp/t" build/fidelity drift \
    --golden "http://127.0.0.1:$(cat "$tmp/golden.port")" \
    --candidate "http://127.0.0.1:$(cat "$tmp/cand.port")" \
    --sequences "$SEQS" --max-context "$CTX" --json "$tmp/d.json" \
    >"$tmp/drift.log" 2>&1 || [ $? -eq 1 ] || { cat "$tmp/drift.log"; exit 1; }
g1=$(cpu_of "$pid_golden"); c1=$(cpu_of "$pid_cand")
set -- $(tail -n 1 "$tmp/t"); wall=$1 user=$2 sys=$3
pos=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["positions"])' "$tmp/d.json")
echo "drift: $SEQS sequences of up to $CTX tokens, $pos positions compared, $wall s wall"
"$PY" - "$pos" "$user" "$sys" "$g0" "$g1" "$c0" "$c1" <<'PY'
import sys
pos, user, sys_, g0, g1, c0, c1 = map(float, sys.argv[1:])
mine = user + sys_
servers = (g1 - g0) + (c1 - c0)
print(f"  drift's own CPU: {mine:.2f} s = {pos / mine:,.0f} positions per CPU second")
print(f"  the servers' CPU: {servers:.2f} s = {pos / servers:,.0f} positions per CPU second")
print(f"  ratio: the servers spend {servers / mine:.1f} CPU seconds per one of drift's")
PY
