#!/bin/sh
# bench/probe_live.sh: the client CPU of `fidelity probe --live` per turn
# at 128k tokens of context, next to a scripted 128k-token case's, against
# a `fidelity sim` on a free port.
#
# Live: SEEDS sessions of 12 and of 16 turns with 40,000 bytes of code
# pasted a work turn; turns 13-16 are sent at 127k-140k prompt tokens. The
# difference of /usr/bin/time -v CPU, divided by SEEDS x 4 turns, is the
# CPU of a turn at 128k (build the body, send, read the reply, append it,
# score, measure). Scripted: --repeats 1 and N+1 of one 128k needle case
# (generate, size with /tokenize, send, score, store), the difference
# divided by N, as bench/probe.sh measures it.
#
# Usage: sh bench/probe_live.sh        (SEEDS=20 N=20 by default)
set -eu
command -v /usr/bin/time >/dev/null || { echo "bench/probe_live.sh: /usr/bin/time is required; run 'make bench-deps'" >&2; exit 2; }
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-20}
N=${N:-20}
make -s fidelity >/dev/null
tmp=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

./fidelity sim --listen 127.0.0.1:0 --max-model-len 1000000 >"$tmp/sim.log" 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q listening "$tmp/sim.log" && break; sleep 0.1; done
url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$tmp/sim.log")
[ -n "$url" ] || { echo "bench: sim did not start"; exit 1; }

tv() {
    /usr/bin/time -v "$@" >/dev/null 2>"$tmp/tv" || {
        echo "bench: '$*' failed"; tail -5 "$tmp/tv"; exit 1; }
    cpu=$(awk -F': ' '/User time/{u=$2} /System time/{s=$2} END{print u+s}' "$tmp/tv")
}
live="./fidelity probe --endpoint $url --live --seeds $SEEDS --turn-bytes 40000 -j 1 --no-store"
scripted="./fidelity probe --endpoint $url --kinds needle --lengths 128k --depths 50 -j 1 --no-store"

echo "== client CPU per live turn at 128k tokens (sim at $url, SEEDS=$SEEDS)"
# shellcheck disable=SC2086
tv $live --turns 12
l1=$cpu
# shellcheck disable=SC2086
tv $live --turns 16 --json "$tmp/live.json"
l2=$cpu
grep -q '"prompt_tokens": *1[23][0-9][0-9][0-9][0-9]' "$tmp/live.json" ||
    grep -q '"prompt_tokens":1[23][0-9][0-9][0-9][0-9]' "$tmp/live.json" || {
    echo "bench: the live turns did not reach 128k tokens"; exit 1; }
lper=$(awk -v a="$l1" -v b="$l2" -v n="$SEEDS" 'BEGIN{printf "%.2f", (b-a)/(n*4)*1000}')

echo "== client CPU per scripted 128k-token case (N=$N)"
# shellcheck disable=SC2086
tv $scripted --repeats 1
s1=$cpu
# shellcheck disable=SC2086
tv $scripted --repeats $((N + 1))
s2=$cpu
sper=$(awk -v a="$s1" -v b="$s2" -v n="$N" 'BEGIN{printf "%.2f", (b-a)/n*1000}')

echo "fidelity probe --live: $lper ms CPU per turn at 127k-140k tokens"
echo "fidelity probe (scripted): $sper ms CPU per 128k-token case"
awk -v l="$lper" -v s="$sper" 'BEGIN{ if (s > 0) printf "ratio live turn/scripted case: %.2f\ntarget <= 2: %s\n", l/s, l <= 2*s ? "met" : "NOT met"; else print "scripted case below timer resolution" }'
