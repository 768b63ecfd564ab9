#!/bin/sh
# The probe part of `make demo`: builds fidelity, starts two `fidelity sim`
# processes on free ports (a healthy one, and one that silently drops the
# middle of any prompt past 8k tokens), runs `fidelity probe` with the
# faulty one as endpoint and the healthy one as baseline on a small grid,
# prints where the faulty one breaks and why, writes the HTML report
# (report.html in the repository root, or $REPORT) and prints its path, and
# stops both sims (also on Ctrl-C or failure).
set -eu
cd "$(dirname "$0")/.."
make -s fidelity >/dev/null
bin=./fidelity
tmp=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME [sim options]: sets $url to the new sim's base URL
start() {
    name=$1
    shift
    "$bin" sim --listen 127.0.0.1:0 "$@" >"$tmp/$name.log" 2>&1 &
    pids="$pids $!"
    for _ in $(seq 50); do
        grep -q listening "$tmp/$name.log" && break
        sleep 0.1
    done
    url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$tmp/$name.log")
    [ -n "$url" ] || { echo "demo: sim '$name' did not start"; cat "$tmp/$name.log"; exit 1; }
}

report=${REPORT:-$PWD/report.html}
start healthy
healthy=$url
start faulty --context-limit 8192 --overflow middle
faulty=$url
echo "== healthy sim: $healthy"
echo "== faulty sim:  $faulty (--context-limit 8192 --overflow middle)"
echo
# The faulty endpoint must fail the run: exit 1, the summary line saying
# which rule decided. Anything else is a broken demo.
code=0
"$bin" probe --endpoint "$faulty" --baseline "$healthy" \
    --kinds needle,multi-needle,canary,first-message,variables \
    --lengths 2k,4k,8k,16k,32k --depths 0,25,50,75,100 \
    --db "$tmp/demo.db" --json "$tmp/probe.json" --report "$report" || code=$?
if [ "$code" != 1 ]; then
    echo "demo: probe exited $code on the faulty endpoint; expected 1"
    exit 1
fi
echo
echo "== probe exited 1 on the faulty endpoint, as it should (a check failed)"
echo "== in short"
jq_missing=1
command -v jq >/dev/null 2>&1 && jq_missing=0
if [ $jq_missing = 0 ]; then
    jq -r '.results.kinds[] | "\(.kind): pass \(.passed)/\(.cases), effective length (RULER) \(.effective_length.ruler) tokens, truncated-by-server \(.outcomes["truncated-by-server"]), missed \(.outcomes.missed)"' "$tmp/probe.json"
    jq -r '"endpoint vs baseline: p = \(.comparison.overall.p_value) (\(if .comparison.overall.significant then "significant" else "not significant" end))"' "$tmp/probe.json"
else
    echo "(install jq for a one-line summary per kind; the report above has it all)"
fi
echo
echo "== the pictures (one self-contained HTML file, no script):"
echo "$report"
