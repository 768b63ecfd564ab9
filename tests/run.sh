#!/bin/sh
# Runs every test binary given on the command line, each in its own process
# with a time limit, prints their output, and ends with one summary line:
# "N passed, N failed" (tests counted from cmocka's own summaries; a fuzz
# corpus replay counts as one test). Exits non-zero if anything failed.
set -u
limit=${TEST_TIMEOUT:-600}
passed=0; failed=0; broken=""
log=$(mktemp); trap 'rm -f "$log"' EXIT
for t in "$@"; do
    name=$(basename "$t")
    case "$name" in
    fuzz_*)
        corpus="tests/fuzz/${name#fuzz_}"
        if timeout "$limit" "$t" "$corpus" >"$log" 2>&1; then
            passed=$((passed + 1)); echo "ok    $name: $(tail -n 1 "$log")"
        else
            failed=$((failed + 1)); broken="$broken $name"; cat "$log"
            echo "FAIL  $name"
        fi
        continue;;
    esac
    echo "== $name"
    start=$(date +%s)
    timeout "$limit" "$t" >"$log" 2>&1
    rc=$?
    cat "$log"
    echo "-- $name: $(($(date +%s) - start))s"
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    passed=$((passed + p)); failed=$((failed + f))
    if [ $rc -ne 0 ]; then
        [ "$f" -eq 0 ] && failed=$((failed + 1))
        broken="$broken $name"
        [ $rc -eq 124 ] && echo "FAIL  $name: timed out after ${limit}s"
    fi
done
[ -n "$broken" ] && echo "failing:$broken"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ -z "$broken" ]
