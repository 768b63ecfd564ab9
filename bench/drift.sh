#!/bin/sh
# bench/drift.sh: analysis throughput of `fidelity drift` (top-20 logprobs,
# parsing included) in positions per second and its peak memory for 1 M
# positions, with /usr/bin/time -v. drift_bench runs drift's own pipeline
# (src/drift/pipe.c, the code of `fidelity drift`'s prefill arms) with one
# worker per online CPU, its fetch lending the in-memory answers instead
# of HTTP answers (read where they are, copied only to be sanitized).
# Printed: positions per wall-clock second (the goal's figure) and per CPU
# second (all threads' CPU time); beside it the same run with a fresh copy
# of each answer per fetch, as earlier figures
# were taken (a 5.8 MB memcpy and its page faults per vLLM answer, in the
# fetch's turn: transport, not analysis); with THREADS1=1, the run on one
# thread. Peer run side by side: Python's json module parsing the same
# answers (parse only, no analysis, one core), as the ratio against ours
# per CPU second.
# Goal (issue 5): >= 1,000,000 positions/s and < 64 MB peak.
#   sh bench/drift.sh [TOTAL] [SEQ]      THREADS=N overrides the CPUs
set -eu
for t in /usr/bin/time python3; do
    command -v $t >/dev/null || { echo "bench/drift.sh: $t is required; run 'make bench-deps'" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
TOTAL=${1:-1000000}
SEQ=${2:-4096}
THREADS=${THREADS:-$(nproc)}
make -s build/libfidelity.a
PKGS="libevent libevent_pthreads libcurl jansson sqlite3 zlib libxxhash"
cc -O2 -Wall -Werror -Isrc bench/drift_bench.c build/libfidelity.a \
   $(pkg-config --cflags --libs $PKGS) -lm -lpthread -o build/drift_bench
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $THREADS threads"
for dl in sglang vllm; do
    /usr/bin/time -v build/drift_bench $dl "$TOTAL" "$SEQ" --threads "$THREADS" \
        >"$tmp/out" 2>"$tmp/time"
    wall=$(sed -n 's/.*wall [0-9.]* s = \([0-9]*\) positions\/s.*/\1/p' "$tmp/out")
    cpu=$(sed -n 's/.*CPU [0-9.]* s = \([0-9]*\) positions per CPU.*/\1/p' "$tmp/out")
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/time")
    cat "$tmp/out"
    echo "  $dl: $wall positions/s wall-clock, $cpu positions per CPU second," \
         "peak RSS ${rss} kB"
    copied=$(build/drift_bench $dl "$TOTAL" "$SEQ" --threads "$THREADS" --copy |
        sed -n 's/.*wall [0-9.]* s = \([0-9]*\) positions\/s.*/\1/p')
    echo "  $dl with a fresh copy of each answer per fetch (as taken before" \
         "session 3's last pass): $copied positions/s wall-clock"
    if [ "${THREADS1:-0}" = 1 ]; then
        build/drift_bench $dl "$TOTAL" "$SEQ" --threads 1
    fi
    build/drift_bench $dl 0 "$SEQ" --dump "$tmp/g.json"
    peer=$(python3 - "$tmp/g.json" "$SEQ" "$TOTAL" <<'PY'
import json, sys, time
text = open(sys.argv[1]).read()
seq, total = int(sys.argv[2]), int(sys.argv[3])
rounds = max(1, min(50, (total + seq - 2) // (seq - 1)))
t0 = time.process_time()
for _ in range(rounds):
    json.loads(text); json.loads(text)
dt = time.process_time() - t0
print(int(rounds * (seq - 1) / dt))
PY
)
    echo "  peer (python3 json.loads, parse only): $peer positions/s per core"
    echo "  ratio fidelity per CPU second / peer: $(awk "BEGIN{printf \"%.2f\", $cpu/$peer}")"
    echo "  goal >= 1,000,000 positions/s wall-clock: $(awk "BEGIN{print ($wall >= 1000000) ? \"met\" : \"not met\"}");" \
         "< 64 MB: $(awk "BEGIN{print ($rss < 65536) ? \"met\" : \"not met\"}")"
done
