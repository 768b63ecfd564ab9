#!/bin/sh
# make demo: start the built-in sim on a free port, send one request of each
# kind it serves, and stop it (also on Ctrl-C or failure).
set -eu
bin=${1:-./fidelity}
out=$(mktemp); pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -f "$out"; }
trap cleanup EXIT INT TERM
"$bin" sim --listen 127.0.0.1:0 >"$out" 2>&1 & pid=$!
for i in $(seq 50); do grep -q listening "$out" && break; sleep 0.1; done
url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$out")
[ -n "$url" ] || { echo "demo: sim did not start"; cat "$out"; exit 1; }
echo "== fidelity sim at $url"
show() { echo; echo "== $1 $2"; shift 2; curl -sS "$@"; echo; }
show GET /v1/models "$url/v1/models"
show POST /v1/chat/completions "$url/v1/chat/completions" -d '{"messages":[
 {"role":"user","content":"The access code for the blue door is 4812."},
 {"role":"assistant","content":"Noted."},
 {"role":"user","content":"What is the access code for the blue door?"}],"temperature":0}'
show POST "/v1/chat/completions (keep-last-turns 1: the reported bug)" \
  "$url/sim/config" -d '{"keep_last_turns":1}' -o /dev/null
curl -sS "$url/v1/chat/completions" -d '{"messages":[
 {"role":"user","content":"write a tic tac toe game in python"},
 {"role":"assistant","content":"Here it is."},
 {"role":"user","content":"to a file"}],"temperature":0}'; echo
curl -sS "$url/sim/config" -d '{"reset":true}' -o /dev/null
show POST "/v1/chat/completions (stream)" "$url/v1/chat/completions" -d '{"messages":[
 {"role":"user","content":"hello"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0}'
show POST /tokenize "$url/tokenize" -d '{"prompt":"The access code is 4812."}'
show POST /detokenize "$url/detokenize" -d '{"tokens":[160633,24942660,3736,24947250,15022296,15742076,62]}'
show POST "/v1/completions (echo + logprobs)" "$url/v1/completions" -d '{"prompt":"a b c a b","max_tokens":2,"echo":true,"logprobs":1}'
show POST "/generate (sglang)" "$url/generate" -d '{"text":"a b c a b","sampling_params":{"max_new_tokens":2},"return_logprob":true,"logprob_start_len":0}'
show GET /sim/stats "$url/sim/stats"
