#!/bin/sh
# bench/bisect.sh: what `fidelity bisect` costs beyond the measurement, with
# `fidelity sim` servers and the test profile.
#  1. Per configuration (one-at-a-time, 4 toggles, one slot): its wall time
#     split into the server's start-up (launch until the ready URL answers),
#     the measurement (the drift and probe runs, their own process start
#     included), and bisect's own overhead: everything else (fingerprint,
#     stop with its grace, the result file). The overhead is printed as a
#     share of the measurement.
#  2. Readiness: how much later than the sim's first 200 bisect sees it
#     (the sim's start-up polled every millisecond, in the same script).
#  3. Launches used by adaptive against one-at-a-time for n = 4, 8, 16
#     toggles with d = 1, 2, 3 culprits: the planner over every placement
#     (bench/bisect_launches.c, exact), then real launches against sim
#     servers for n = 8, counted by the server command itself.
#   sh bench/bisect.sh
set -eu
command -v python3 >/dev/null || { echo "bench/bisect.sh: python3 is required; run 'make bench-deps'" >&2; exit 2; }
cd "$(dirname "$0")/.."
make -s build/fidelity
BIN=$PWD/build/fidelity
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

# readiness: how soon after the sim first answers 200 bisect sees it. The
# sim's own start-up (fork to first 200) polled every millisecond, against
# the "ready" time bisect recorded for each configuration above.
python3 - "$BIN" "$tmp/over/out" <<'PY'
import glob, json, socket, subprocess, sys, time, urllib.request
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
starts = []
for _ in range(9):
    port = free_port()
    t0 = time.monotonic()
    p = subprocess.Popen([sys.argv[1], "sim", "--listen", "127.0.0.1:%d" % port],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            if urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port, timeout=1).status == 200:
                break
        except Exception:
            time.sleep(0.001)
    starts.append(time.monotonic() - t0)
    p.terminate(); p.wait()
ready = sorted(json.load(open(f))["timing"]["ready"]
               for f in glob.glob(sys.argv[2] + "/*.json")
               if "timing" in json.load(open(f)) and "ready" in json.load(open(f))["timing"])
starts.sort()
ms, mr = starts[len(starts)//2], ready[len(ready)//2]
print("readiness: the sim answers 200 after %.1f ms (median of %d, polled every 1 ms); "
      "bisect saw it after %.1f ms (median of %d): %.1f ms later" %
      (1000*ms, len(starts), 1000*mr, len(ready), 1000*(mr-ms)))
PY

# launches by the planner itself over every placement of the culprits
PKGS="libevent libevent_pthreads libcurl jansson sqlite3 zlib libxxhash"
cc -O2 -Wall -Werror -Isrc bench/bisect_launches.c build/libfidelity.a \
   $(pkg-config --cflags --libs $PKGS) -lm -lpthread -o build/bisect_launches
build/bisect_launches

# and real launches against sim servers: n = 8, d = 1..3 culprits (the last
# d toggles), counted by the server command itself
echo "real launches, n = 8 (golden included):"
for d in 1 2 3; do
    for m in one-at-a-time adaptive; do
        dir="$tmp/$m$d"; mkdir -p "$dir"
        {
            printf '[server]\ncommand = echo x >> %s/count; exec %s sim --listen 127.0.0.1:{port}\n' "$dir" "$BIN"
            printf 'ready_timeout = 20\nstop_grace = 3\n[measure]\nprofile = test\n'
            i=1
            while [ "$i" -le $((8 - d)) ]; do
                printf '[toggle flag%d]\nenv = FLAG%d=1\n' "$i" "$i"; i=$((i + 1))
            done
            [ "$d" -ge 3 ] && printf '[toggle indexer]\nargs = --forget-after 2048\n'
            [ "$d" -ge 2 ] && printf '[toggle splitk]\nargs = --decode-noise 1.0\n'
            printf '[toggle scale]\nargs = --logit-scale 1.2\n'
        } > "$dir/b.ini"
        start=$(date +%s)
        "$BIN" bisect "$dir/b.ini" --mode $m --out "$dir/out" --slots 1 \
            >"$dir/report" 2>/dev/null || true
        echo "  d=$d $m: $(wc -l < "$dir/count") launches, $(( $(date +%s) - start )) s: $(head -1 "$dir/report" | cut -c1-60)"
    done
done
