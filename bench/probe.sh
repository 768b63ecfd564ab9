#!/bin/sh
# bench/probe.sh: what `fidelity probe` costs the client, against a
# `fidelity sim` on a free port, next to curl sending the same request.
#
# 1. CPU per 128k-token case (generate, size with /tokenize, send, score,
#    store): /usr/bin/time -v of runs with 1 and N+1 cases at -j 1, the
#    difference divided by N. Peer: one curl posting the same chat body
#    (taken from --dry-run) to 1 and N+1 URLs.
# 2. Resident memory of CASES 128k-token cases at -j 16: maximum RSS from
#    /usr/bin/time -v. Peer: curl posting the body once.
#
# 3. /tokenize calls per case behind a lossy path (a sim keeping the last
#    3 turns: every failing case gets the path check, its turns counted
#    one by one): with the run's cache of /tokenize answers by content
#    hash, against the same run with the cache off
#    (FIDELITY_PROBE_TOKENIZE_CACHE=off), counted at the sim (/sim/stats).
# 4. With SCALE="1000 10000 100000" (sizes of your choice, multiples of
#    1,000 above it, at most 101,000): the peak RSS of runs of that many
#    1k-token needle cases (1,000 repeats at each of n / 1,000 depths) with
#    a baseline (the same sim) at -j 16, one run per size, and the largest
#    over the smallest:
#    whether memory stays flat with the number of cases (goal: within 10%).
#
# Usage: sh bench/probe.sh        (N=40 CASES=1000 by default)
#        SCALE="1000 10000" sh bench/probe.sh      (only part 4)
set -eu
for t in /usr/bin/time curl; do
    command -v $t >/dev/null || { echo "bench/probe.sh: $t is required; run 'make bench-deps'" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
N=${N:-40}
CASES=${CASES:-1000}
make -s fidelity >/dev/null
tmp=$(mktemp -d)
pid=
kpid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    [ -n "$kpid" ] && kill "$kpid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

./fidelity sim --listen 127.0.0.1:0 >"$tmp/sim.log" 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q listening "$tmp/sim.log" && break; sleep 0.1; done
url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$tmp/sim.log")
[ -n "$url" ] || { echo "bench: sim did not start"; exit 1; }

# tv CMD...: runs CMD under /usr/bin/time -v; sets cpu (s) and rss (KiB)
tv() {
    /usr/bin/time -v "$@" >/dev/null 2>"$tmp/tv" || {
        echo "bench: '$*' failed"; tail -5 "$tmp/tv"; exit 1; }
    cpu=$(awk -F': ' '/User time/{u=$2} /System time/{s=$2} END{print u+s}' "$tmp/tv")
    rss=$(awk -F': ' '/Maximum resident/{print $2}' "$tmp/tv")
}
# the probe command (word-split on purpose: no spaces in its parts)
probe="./fidelity probe --endpoint $url --kinds needle --lengths 128k --depths 50 --db $tmp/bench.db --fresh"

if [ -n "${SCALE:-}" ]; then
    echo "== peak RSS by number of cases (1k tokens, needle, baseline, -j 16)"
    first=""; last=""
    for n in $SCALE; do
        # n cases: up to 1,000 repeats at each of n / 1,000 depths
        if [ "$n" -le 1000 ]; then d=1; r=$n; else d=$((n / 1000)); r=1000; fi
        depths=$(seq -s, 0 $((d - 1)))
        tv ./fidelity probe --endpoint "$url" --baseline "$url" --kinds needle \
            --lengths 1k --depths "$depths" --repeats "$r" -j 16 \
            --db "$tmp/scale-$n.db" --fresh
        awk -v n="$n" -v r="$rss" -v c="$cpu" 'BEGIN{ printf "%d cases: peak RSS %.1f MiB (%s s CPU)\n", n, r / 1024, c }'
        [ -n "$first" ] || first=$rss
        last=$rss
    done
    awk -v a="$first" -v b="$last" 'BEGIN{ printf "largest / smallest: %.2f (goal <= 1.10: %s)\n", b/a, b/a <= 1.10 ? "met" : "NOT met" }'
    exit 0
fi

# shellcheck disable=SC2086
echo "== client CPU per 128k-token case (sim at $url, N=$N)"
tv $probe --repeats 1 -j 1
p1=$cpu
tv $probe --repeats $((N + 1)) -j 1
pn=$cpu
per=$(awk -v a="$p1" -v b="$pn" -v n="$N" 'BEGIN{printf "%.2f", (b-a)/n*1000}')

$probe --dry-run >"$tmp/dry"
sed -n '/^first case:/,$p' "$tmp/dry" | tail -n +2 >"$tmp/body.json"
bytes=$(wc -c <"$tmp/body.json")
urls=""
for _ in $(seq $((N + 1))); do urls="$urls $url/v1/chat/completions"; done
tv curl -sS -H 'Content-Type: application/json' --data-binary @"$tmp/body.json" "$url/v1/chat/completions"
c1=$cpu
crss=$rss
# shellcheck disable=SC2086
tv curl -sS -H 'Content-Type: application/json' --data-binary @"$tmp/body.json" $urls
cn=$cpu
cper=$(awk -v a="$c1" -v b="$cn" -v n="$N" 'BEGIN{printf "%.2f", (b-a)/n*1000}')
echo "fidelity probe: $per ms CPU per case (generate + size + send + score + store)"
echo "curl, same $bytes-byte body: $cper ms CPU per request (send only)"
awk -v p="$per" -v c="$cper" 'BEGIN{ if (c > 0) printf "ratio probe/curl: %.2f\n", p/c; else print "ratio probe/curl: curl below timer resolution" }'
awk -v p="$per" 'BEGIN{ printf "target <= 5 ms: %s\n", p <= 5 ? "met" : "NOT met" }'

echo
echo "== resident memory, $CASES cases of 128k tokens at -j 16"
tv $probe --repeats "$CASES" -j 16
prss=$rss
echo "fidelity probe: $((prss / 1024)) MiB maximum resident ($cpu s CPU)"
echo "curl, one request of the same body: $((crss / 1024)) MiB maximum resident"
awk -v p="$prss" -v c="$crss" 'BEGIN{ printf "ratio probe/curl: %.1f\n", p/c }'
awk -v p="$prss" 'BEGIN{ printf "target < 64 MiB: %s\n", p < 65536 ? "met" : "NOT met" }'

echo
echo "== /tokenize calls per case behind a lossy path (a window of 3 turns)"
./fidelity sim --listen 127.0.0.1:0 --keep-last-turns 3 >"$tmp/simk.log" 2>&1 &
kpid=$!
for _ in $(seq 50); do grep -qs listening "$tmp/simk.log" && break; sleep 0.1; done
kurl=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$tmp/simk.log")
[ -n "$kurl" ] || { echo "bench: sim did not start"; exit 1; }
tokcalls() { curl -s "$kurl/sim/stats" | sed -n 's/.*"tokenize":\([0-9]*\).*/\1/p'; }
kprobe="./fidelity probe --endpoint $kurl --kinds needle,canary,multi-needle,variables --lengths 8k,16k --depths 0,50,100 --db $tmp/k.db --fresh"
for mode in off on; do
    b=$(tokcalls)
    # shellcheck disable=SC2086
    FIDELITY_PROBE_TOKENIZE_CACHE=$mode $kprobe >"$tmp/k.out" 2>&1 || true
    a=$(tokcalls)
    cases=$(sed -n 's/^\([0-9]*\) of [0-9]* cases* finished.*/\1/p' "$tmp/k.out")
    eval "calls_$mode=\$((a - b))"
    eval "cases_$mode=\$cases"
done
kill "$kpid" 2>/dev/null || true
awk -v c="$calls_off" -v n="$cases_off" 'BEGIN{ printf "cache off (before): %d /tokenize calls for %d cases, %.1f per case\n", c, n, c/n }'
awk -v c="$calls_on" -v n="$cases_on" 'BEGIN{ printf "cache on (after):   %d /tokenize calls for %d cases, %.1f per case\n", c, n, c/n }'
awk -v a="$calls_on" -v b="$calls_off" 'BEGIN{ printf "ratio after/before: %.2f\n", a/b }'
