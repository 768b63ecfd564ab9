#!/bin/sh
# bisect, offline: launches fidelity sim once per configuration of
# bisect-sim.ini (the four presets of the case and an inert toggle), one
# at a time, measures each against the all-off golden and ranks them.
#   sh examples/bisect.sh [MODE]    (default one-at-a-time; outputs in
#                                    ./example-out)
. "$(dirname "$0")/lib.sh"
mode=${1:-one-at-a-time}
rm -rf "$OUT/bisect.out"
echo "== fidelity bisect examples/bisect-sim.ini --mode $mode"
run 0 1 -- "$FIDELITY" bisect "$here/bisect-sim.ini" --mode "$mode" \
    --out "$OUT/bisect.out" --json "$OUT/bisect.json"
echo
echo "bisect: $OUT/bisect.json (servers' logs in $OUT/bisect.out)"
