#!/bin/sh
# drift, offline: a pair of fidelity sims, the golden healthy and the
# candidate with one of the case's patches (default mhc-bf16: prefill
# noise that grows with position); drift says where they diverge and on
# which path. Another preset: sh examples/drift-pair.sh routed-scaling
#   sh examples/drift-pair.sh [PRESET]    (outputs in ./example-out)
. "$(dirname "$0")/lib.sh"
preset=${1:-mhc-bf16}
serve golden sim --seed 7
golden=$url
serve candidate sim --seed 7 --preset "$preset"
candidate=$url
echo "== fidelity drift --golden $golden --candidate $candidate ($preset)"
run 0 1 -- "$FIDELITY" drift --golden "$golden" --candidate "$candidate" \
    --sequences 2 --max-context 2048 --decode-tokens 16 --no-cache-arm \
    --worst 5 --db "${DB:-$OUT/demo.db}" --json "$OUT/drift.json"
echo
echo "drift: $OUT/drift.json (stored in ${DB:-$OUT/demo.db})"
