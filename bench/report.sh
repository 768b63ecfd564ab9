#!/bin/sh
# bench/report.sh: how long `fidelity report` takes to draw a 10,000-case
# probe run, and how big the page is, beside matplotlib drawing the same
# heatmaps to SVG from the run's JSON (bench/report_mpl.py; Debian's
# python3-matplotlib, which `make bench-deps` installs).
#
# 1. Two `fidelity sim` on free ports (healthy; faulty: --context-limit 2048
#    --overflow middle), one probe run of CASES cases (needle, multi-needle,
#    canary, variables at 1k, 2k, 4k x depths 0-100 by 10, temperature 0.6,
#    REPEATS per cell) with the healthy one as baseline, stored and written
#    as JSON. The run itself is not timed.
# 2. `fidelity report --db` from the store, ROUNDS times 20 runs: wall and
#    CPU (user + system) time per run, medians, and the size of the page. Target: under
#    2 s and under 5 MB.
# 3. bench/report_mpl.py on the JSON, ROUNDS times after one warm-up run
#    (matplotlib's font cache): the same times and the SVGs' total size.
# CPU time is the figure to compare on a shared machine: wall time there
# includes waiting for a core.
#
# Usage: sh bench/report.sh   (REPEATS=76 -> 10,032 cases, ROUNDS=5,
#                              PYTHON=/usr/bin/python3, OLD_BIN=path of
#                              another fidelity build to compare with)
set -eu
cd "$(dirname "$0")/.."
REPEATS=${REPEATS:-76}
# Debian's interpreter, where python3-matplotlib is (a pyenv python3 first
# in PATH would not have it)
PYTHON=${PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-5}
make -s fidelity >/dev/null
tmp=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start() {
    name=$1
    shift
    ./fidelity sim --listen 127.0.0.1:0 "$@" >"$tmp/$name.log" 2>&1 &
    pids="$pids $!"
    for _ in $(seq 50); do grep -q listening "$tmp/$name.log" && break; sleep 0.1; done
    url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$tmp/$name.log")
    [ -n "$url" ] || { echo "bench: sim '$name' did not start"; exit 1; }
}
start healthy
healthy=$url
start faulty --context-limit 2048 --overflow middle
faulty=$url

echo "== probe run ($REPEATS repeats per cell; not timed)"
./fidelity probe --endpoint "$faulty" --baseline "$healthy" \
    --kinds needle,multi-needle,canary,variables --lengths 1k,2k,4k \
    --depths 0,10,20,30,40,50,60,70,80,90,100 --temperature 0.6 \
    --repeats "$REPEATS" -j 8 --db "$tmp/b.db" --json "$tmp/probe.json" \
    >"$tmp/probe.out" 2>&1 || true
grep -E '^[0-9]+ of [0-9]+ cases finished' "$tmp/probe.out" || {
    echo "bench: the probe run did not finish"; tail -5 "$tmp/probe.out"; exit 1; }

# median of the numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

# timed CMD...: appends "wall cpu" (seconds; cpu = user + system) per run
# to $tfile, CMD having made $div runs (time(1) counts in 10 ms steps)
timed() {
    /usr/bin/time -f '%e %U %S' -o "$tmp/one.t" "$@" >"$tmp/one.out"
    awk -v d="$div" '{printf "%.4f %.4f\n", $1 / d, ($2 + $3) / d}' \
        "$tmp/one.t" >>"$tfile"
}
tfile=$tmp/f.t
div=20
for _ in $(seq "$ROUNDS"); do
    timed sh -c 'for i in $(seq 20); do
        ./fidelity report --db "$1" --no-drift --no-audit -o "$2" >/dev/null
    done' sh "$tmp/b.db" "$tmp/report.html"
done
ft=$(cut -d' ' -f1 "$tmp/f.t" | median)
fc=$(cut -d' ' -f2 "$tmp/f.t" | median)
fsize=$(stat -c %s "$tmp/report.html")
echo "fidelity report: median wall $ft s, CPU $fc s of $ROUNDS; page $fsize bytes"

# OLD_BIN: another build of fidelity (say of the last release) drawing the
# same stored run, for a change's cost: its times, size and the ratios
if [ -n "${OLD_BIN:-}" ]; then
    tfile=$tmp/o.t
    for _ in $(seq "$ROUNDS"); do
        timed sh -c 'for i in $(seq 20); do
            "$3" report --db "$1" --no-drift --no-audit -o "$2" >/dev/null
        done' sh "$tmp/b.db" "$tmp/old.html" "$OLD_BIN"
    done
    ot=$(cut -d' ' -f1 "$tmp/o.t" | median)
    oc=$(cut -d' ' -f2 "$tmp/o.t" | median)
    osize=$(stat -c %s "$tmp/old.html")
    echo "OLD_BIN report: median wall $ot s, CPU $oc s of $ROUNDS; page $osize bytes"
    echo "ratio (this / OLD_BIN): wall $(echo "$ft / $ot" | bc -l | xargs printf '%.3f'), CPU $(echo "$fc / $oc" | bc -l | xargs printf '%.3f'), size $(echo "$fsize / $osize" | bc -l | xargs printf '%.3f')"
fi

if ! "$PYTHON" -c 'import matplotlib' 2>/dev/null; then
    echo "matplotlib: not installed (apt-get install python3-matplotlib, or make bench-deps)"
    exit 0
fi
"$PYTHON" bench/report_mpl.py "$tmp/probe.json" "$tmp/mpl" >/dev/null # font cache
tfile=$tmp/m.t
div=1
for _ in $(seq "$ROUNDS"); do
    rm -rf "$tmp/mpl"
    timed "$PYTHON" bench/report_mpl.py "$tmp/probe.json" "$tmp/mpl"
done
nf=$(cat "$tmp/one.out")
mt=$(cut -d' ' -f1 "$tmp/m.t" | median)
mc=$(cut -d' ' -f2 "$tmp/m.t" | median)
msize=$(cat "$tmp/mpl"/*.svg | wc -c)
echo "matplotlib: median wall $mt s, CPU $mc s of $ROUNDS; $nf SVG figures, $msize bytes"
echo "ratio (fidelity / matplotlib): wall $(echo "$ft / $mt" | bc -l | xargs printf '%.3f'), CPU $(echo "$fc / $mc" | bc -l | xargs printf '%.3f')"
