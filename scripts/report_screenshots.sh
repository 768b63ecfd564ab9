#!/bin/sh
# The screenshots in docs/REPORT.md: the demo's page (scripts/probe_demo.sh:
# a sim that drops the middle of prompts past 8k tokens against a healthy
# one) and a bisect page (`fidelity bisect` over four toggles of
# `fidelity sim`, one of them the culprit, drawn by `fidelity report
# --bisect`), taken with Debian's headless chromium at 1024 pixels wide
# into docs/img/. About a minute.
#   sh scripts/report_screenshots.sh
set -eu
cd "$(dirname "$0")/.."
make -s fidelity >/dev/null
command -v chromium >/dev/null || { echo "report_screenshots: chromium is required (make deps)" >&2; exit 2; }
bin=$PWD/fidelity
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p docs/img

shot() { # PAGE PNG HEIGHT
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --no-first-run --user-data-dir="$tmp/chromium" \
        --window-size=1024,"$3" --screenshot="$2" "file://$1" >/dev/null 2>&1
    echo "$2"
}

REPORT=$tmp/demo.html sh scripts/probe_demo.sh >"$tmp/demo.log" 2>&1
shot "$tmp/demo.html" docs/img/report-demo.png 2600

cat >"$tmp/bisect.ini" <<INI
[server]
command = exec $bin sim --listen 127.0.0.1:{port} --noise-recall-limit 0.1
ready_timeout = 20
stop_grace = 3
[measure]
profile = test

[toggle unread-flag]
args = --seed 0
path = prefill

[toggle fp8-gemm]
args = --prefill-noise 0.003
path = prefill

[toggle mhc-bf16]
args = --prefill-noise 0.05 --noise-growth 1
path = decode

[toggle splitk-decode]
args = --decode-noise 0.3
path = both
INI
code=0
"$bin" bisect "$tmp/bisect.ini" --out "$tmp/out" --json "$tmp/bisect.json" \
    >"$tmp/bisect.log" 2>&1 || code=$?
[ -s "$tmp/bisect.json" ] || { echo "report_screenshots: bisect failed ($code)"; cat "$tmp/bisect.log"; exit 1; }
"$bin" report --db "$tmp/none.db" --bisect "$tmp/bisect.json" -o "$tmp/bisect.html" >/dev/null
shot "$tmp/bisect.html" docs/img/report-bisect.png 760
