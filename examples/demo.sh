#!/bin/sh
# `make demo`: the main path end to end, offline, in under a minute:
#   1. probe a faulty sim (drops the middle of prompts past 2k tokens)
#      against a healthy one: where recall breaks and why
#   2. record + audit a short session through a faulty path (a server
#      keeping only the last 2 turns): what audit finds
#   3. drift of a preset (mhc-bf16) against a healthy sim: which path
#   4. bisect of examples/bisect-sim.ini: which patch it is
#   5. the report of all of it: one HTML page
# Every output goes to OUT (default ./demo-out); each step prints where.
#   sh examples/demo.sh
OUT=${OUT:-$PWD/demo-out}
. "$(dirname "$0")/lib.sh"
DB=$OUT/demo.db
export DB OUT
rm -rf "$DB" "$DB"-* "$DB".spill.jsonl "$OUT/bisect.out"
t0=$(date +%s)

echo "=== 1. probe: a faulty sim against a healthy one"
serve healthy sim
healthy=$url
serve faulty sim --context-limit 2048 --overflow middle
faulty=$url
echo "    healthy $healthy, faulty $faulty (--context-limit 2048 --overflow middle)"
run 1 -- "$FIDELITY" probe --endpoint "$faulty" --baseline "$healthy" \
    --kinds needle,multi-needle --lengths 1k,2k,4k,8k --depths 0,25,50,75,100 \
    --db "$DB" --json "$OUT/probe.json"
stop healthy
stop faulty
echo "probe: $OUT/probe.json (exit 1: the faulty endpoint failed, as it should)"

echo
echo "=== 2. record + audit: a short session through a faulty path"
sh "$here/record-audit.sh"

echo
echo "=== 3. drift: a preset against a healthy sim"
sh "$here/drift-pair.sh" mhc-bf16

echo
echo "=== 4. bisect: the four presets and an inert toggle"
sh "$here/bisect.sh"

echo
echo "=== 5. the report of all of it"
run 0 -- "$FIDELITY" report --db "$DB" -o "$OUT/report.html"

echo
echo "=== where everything went ($(($(date +%s) - t0)) s)"
echo "store       $DB (probe and drift runs, the recorded session)"
echo "probe       $OUT/probe.json"
echo "audit       $OUT/audit.json    show $OUT/show.json"
echo "drift       $OUT/drift.json"
echo "bisect      $OUT/bisect.json   (servers' logs in $OUT/bisect.out/)"
echo "report      $OUT/report.html   (one self-contained page: open it)"
echo "man pages   man/ (man ./man/fidelity-probe.1)"
