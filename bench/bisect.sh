#!/bin/sh
# bench/bisect.sh: what `fidelity bisect` costs beyond the measurement, with
# `fidelity sim` servers and the test profile.
#  1. Per configuration (one-at-a-time, 4 toggles, one slot): its wall time
#     split into the server's start-up (launch until the ready URL answers),
#     the measurement (the drift and probe runs, their own process start
#     included), and bisect's own overhead: everything else (fingerprint,
#     stop with its grace, the result file). The overhead is printed as a
#     share of the measurement.
#  2. Launches used by adaptive against one-at-a-time for n = 4, 8, 16
#     toggles with one culprit (the last), the golden included; counted by
#     the server command itself (one line appended per launch).
#   sh bench/bisect.sh            NS="4 8" to choose the sizes
set -eu
command -v python3 >/dev/null || { echo "bench/bisect.sh: python3 is required; run 'make bench-deps'" >&2; exit 2; }
cd "$(dirname "$0")/.."
make -s build/fidelity
BIN=$PWD/build/fidelity
NS=${NS:-4 8 16}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"

# config N DIR: N toggles, the last one the culprit
config() {
    n=$1; d=$2; mkdir -p "$d"
    {
        printf '[server]\ncommand = echo x >> %s/count; exec %s sim --listen 127.0.0.1:{port} --noise-recall-limit 0.1\n' "$d" "$BIN"
        printf 'ready_timeout = 20\nstop_grace = 3\n[measure]\nprofile = test\n'
        i=1
        while [ "$i" -lt "$n" ]; do
            printf '[toggle flag%d]\nenv = FLAG%d=1\n' "$i" "$i"; i=$((i + 1))
        done
        printf '[toggle culprit]\nargs = --prefill-noise 0.05 --noise-growth 1\n'
    } > "$d/b.ini"
}

config 4 "$tmp/over"
"$BIN" bisect "$tmp/over/b.ini" --out "$tmp/over/out" >/dev/null || true
python3 - "$tmp/over/out" <<'PY'
import glob, json, sys
rows = []
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    if "timing" not in d or "ready" not in d["timing"]:
        continue
    t = d["timing"]
    meas = d.get("drift_seconds", 0) + d.get("probe_seconds", 0)
    own = d["seconds"] - t["ready"] - meas
    rows.append((d["name"], d["seconds"], t["ready"], meas, own))
print("per configuration (s): total, server start-up, measurement, bisect's own")
for r in rows:
    print("  %-10s %6.2f %6.2f %6.2f %6.3f  (%.1f%% of the measurement)" %
          (r[0], r[1], r[2], r[3], r[4], 100 * r[4] / r[3]))
own = sorted(r[4] for r in rows); meas = sorted(r[3] for r in rows)
print("median: bisect's own %.3f s against %.2f s of measurement (%.1f%%)" %
      (own[len(own)//2], meas[len(meas)//2],
       100 * own[len(own)//2] / meas[len(meas)//2]))
PY

echo "launches with one culprit (golden included):"
for n in $NS; do
    for m in one-at-a-time adaptive; do
        config "$n" "$tmp/$m$n"
        start=$(date +%s)
        "$BIN" bisect "$tmp/$m$n/b.ini" --mode $m --out "$tmp/$m$n/out" \
            --slots 1 >"$tmp/$m$n/report" || true
        head -1 "$tmp/$m$n/report" | grep -q '^culprit: culprit' ||
            { echo "bench/bisect.sh: $m n=$n did not name the culprit" >&2; exit 1; }
        echo "  n=$n $m: $(wc -l < "$tmp/$m$n/count") launches, $(( $(date +%s) - start )) s"
    done
    echo "  (adaptive bound for one culprit: 1 + ceil(log2 $n) + 2)"
done
