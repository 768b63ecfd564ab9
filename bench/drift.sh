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
# Goal: >= 1,000,000 positions/s and < 64 MB peak.
#   sh bench/drift.sh [TOTAL] [SEQ]      THREADS=N overrides the CPUs
#
# The two-server case: what users wait for when both servers take time to
# answer. Two `fidelity sim` servers with the same fixed --latency-ms;
# `fidelity drift` between them (--no-cache-arm --no-store, the corpus
# below) timed three ways: as it runs now (golden and candidate asked at
# once, each server one request at a time in its serial order); one request
# at a time over both servers, the serial schedule (golden and candidate
# on one server, which drift sends one at a time: the order and the number
# of requests of the serial run); and, with FIDELITY_BEFORE=BIN, an older
# binary against the two servers. The peer, python3 (stdlib only), sends
# each server as many scoring requests of the corpus's length as drift sent
# it, both servers at once, each one at a time: the overlapped schedule,
# whose wall time is the slower server's total answer time. Goals: drift's
# wall time <= 0.55x the serial schedule's, and <= 1.05x the peer's.
#   sh bench/drift.sh wall [LATENCY_MS] [SEQUENCES] [MAX_CONTEXT]
#                        (default 300 ms, 16 sequences, 256 tokens)
set -eu
for t in /usr/bin/time python3; do
    command -v $t >/dev/null || { echo "bench/drift.sh: $t is required; run 'make bench-deps'" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
if [ "${1:-}" = wall ]; then
    LAT=${2:-300}; SEQS=${3:-16}; CTX=${4:-256}
    bin=${FIDELITY:-./build/fidelity}
    [ -x "$bin" ] || { echo "bench/drift.sh: build first: make" >&2; exit 2; }
    tmp=$(mktemp -d)
    pids=""
    trap 'kill $pids 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
    for s in a b; do
        "$bin" sim --listen 127.0.0.1:0 --latency-ms "$LAT" >"$tmp/$s.out" 2>&1 &
        pids="$pids $!"
    done
    for s in a b; do
        while ! grep -q listening "$tmp/$s.out" 2>/dev/null; do sleep 0.02; done
    done
    ua=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$tmp/a.out")
    ub=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$tmp/b.out")
    models() { python3 -c "import json,sys,urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1] + '/sim/stats'))['model_requests'])" "$1"; }
    timed() { # seconds of wall time of the command
        t0=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; t1=$(date +%s.%N)
        echo "$t1 - $t0" | bc -l
    }
    opts="--sequences $SEQS --max-context $CTX --no-cache-arm --no-store --seed 1"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); two sims at ${LAT} ms per model request; drift $opts"
    a0=$(models "$ua"); b0=$(models "$ub")
    # shellcheck disable=SC2086
    now=$(timed "$bin" drift --golden "$ua" --candidate "$ub" $opts)
    na=$(( $(models "$ua") - a0 )); nb=$(( $(models "$ub") - b0 ))
    # shellcheck disable=SC2086
    serial=$(timed "$bin" drift --golden "$ua" --candidate "$ua" $opts)
    if [ -n "${FIDELITY_BEFORE:-}" ]; then
        # shellcheck disable=SC2086
        before=$(timed "$FIDELITY_BEFORE" drift --golden "$ua" --candidate "$ub" $opts)
    fi
    peer=$(python3 - "$ua" "$ub" "$na" "$nb" "$CTX" <<'PY'
import json, sys, threading, time, urllib.request
ua, ub, na, nb, ctx = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def post(url, path, body):  # the answer's bytes, read whole (no parse)
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req).read()
ids = json.loads(post(ua, "/tokenize", {"prompt": " ".join("word%d" % i for i in range(ctx))}))["tokens"][:ctx]
spent = {}
def serve(url, n):  # n scoring requests, one at a time, as drift sends them
    t = 0.0
    for _ in range(n):
        t0 = time.perf_counter()
        post(url, "/v1/completions", {"prompt": ids, "max_tokens": 1,
                                      "prompt_logprobs": 20, "logprobs": 20})
        t += time.perf_counter() - t0
    spent[url] = t
t0 = time.perf_counter()
th = [threading.Thread(target=serve, args=a) for a in ((ua, na), (ub, nb))]
for x in th: x.start()
for x in th: x.join()
print("%.3f %.3f %.3f" % (time.perf_counter() - t0, spent[ua], spent[ub]))
PY
)
    pw=${peer%% *}; rest=${peer#* }; sa=${rest%% *}; sb=${rest#* }
    slow=$(awk "BEGIN{print ($sa > $sb) ? $sa : $sb}")
    echo "  requests to the models: golden server $na, candidate server $nb"
    printf '  fidelity drift, both servers at once:       %6.2f s\n' "$now"
    printf '  serial schedule (one request at a time):    %6.2f s\n' "$serial"
    [ -n "${before:-}" ] && printf '  %s (before):   %6.2f s\n' "$FIDELITY_BEFORE" "$before"
    printf '  peer (python3, overlapped, %d + %d requests): %6.2f s; answer time golden %.2f s, candidate %.2f s\n' "$na" "$nb" "$pw" "$sa" "$sb"
    echo "  ratio fidelity / serial schedule: $(awk "BEGIN{printf \"%.3f\", $now/$serial}") (goal <= 0.55)"
    [ -n "${before:-}" ] && echo "  ratio fidelity / before: $(awk "BEGIN{printf \"%.3f\", $now/$before}") (goal <= 0.55)"
    echo "  ratio fidelity / slower server's total answer time: $(awk "BEGIN{printf \"%.3f\", $now/$slow}") (goal <= 1.05)"
    echo "  ratio fidelity / peer wall time: $(awk "BEGIN{printf \"%.3f\", $now/$pw}")"
    exit 0
fi
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
