#!/bin/sh
# bench/golden.sh: a saved golden's size and what a comparison against it
# costs, beside the same comparison against the live golden.
# Two `fidelity sim` servers on 127.0.0.1 (golden healthy, candidate with
# routed-scaling); for each corpus size (SEQS sequences of CTX tokens,
# top-20): the saved file's bytes and bytes per 1,000 compared positions,
# then `drift` against the live golden and against the file (--decode-tokens
# 0 in the saving run and the live one: the decode path's few steps would
# only add noise to the sizes), wall seconds of each and
# their ratio. The golden's own time (answering) is what the file saves;
# the sim answers in milliseconds, so on GPU servers the ratio is larger.
#   sh bench/golden.sh [SEQS] [CTX...]      (default 4 and 1024 4096)
set -eu
cd "$(dirname "$0")/.."
make -s fidelity
SEQS=${1:-4}
shift 2>/dev/null || true
CTXS=${*:-"1024 4096"}
tmp=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pg=$(port); pc=$(port)
./fidelity sim --listen "127.0.0.1:$pg" >"$tmp/g.log" 2>&1 & pids="$pids $!"
./fidelity sim --listen "127.0.0.1:$pc" --preset routed-scaling >"$tmp/c.log" 2>&1 & pids="$pids $!"
sleep 0.5
now() { date +%s.%N; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-6s %10s %10s %12s %9s %9s %7s\n' seqs ctx positions file_kB \
    B/1k_pos live_s file_s ratio
for ctx in $CTXS; do
    f="$tmp/g$ctx.fgold"
    ./fidelity drift --golden "http://127.0.0.1:$pg" --save-golden "$f" \
        --sequences "$SEQS" --max-context "$ctx" --decode-tokens 0 >/dev/null 2>&1
    t0=$(now)
    ./fidelity drift --golden "http://127.0.0.1:$pg" --candidate "http://127.0.0.1:$pc" \
        --sequences "$SEQS" --max-context "$ctx" --decode-tokens 0 --no-store \
        --json "$tmp/live.json" >/dev/null 2>&1 || true
    t1=$(now)
    ./fidelity drift --golden-file "$f" --candidate "http://127.0.0.1:$pc" \
        --no-store --json "$tmp/file.json" >/dev/null 2>&1 || true
    t2=$(now)
    python3 - "$tmp/live.json" "$tmp/file.json" "$f" "$SEQS" "$ctx" "$t0" "$t1" "$t2" <<'PY'
import json, os, sys
live, file, f, seqs, ctx, t0, t1, t2 = sys.argv[1:]
a, b = json.load(open(live)), json.load(open(file))
b.pop("golden_file", None)
pos = a.get("positions") or int(seqs) * int(ctx)
size = os.path.getsize(f)
tl, tf = float(t1) - float(t0), float(t2) - float(t1)
print(f"{seqs:<6} {ctx:<6} {pos:>10} {size/1024:>10.0f} {size/pos*1000:>12.0f} "
      f"{tl:>9.2f} {tf:>9.2f} {tf/tl:>7.2f}" + ("" if a == b else "  (summaries differ!)"))
PY
done
