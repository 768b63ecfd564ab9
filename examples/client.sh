#!/bin/sh
# A small chat client for the record + audit walk-through: a harness
# that plays one conversation against BASE_URL (an OpenAI-compatible
# server, or fidelity record in front of one). Turn 1 states a fact in
# the sim's syntax ("The X of Y is Z."), a few turns talk of other
# things, the last asks for the fact. Each request sends the whole
# history back, the server's replies included, as chat clients do.
# Prints the last answer.
#   sh examples/client.sh http://127.0.0.1:9000
set -eu
base=${1:?usage: client.sh BASE_URL}
# the messages array (JSON) -> the reply's content as it stands in the
# JSON answer (still escaped, so it goes back into the next request as is)
ask() {
    curl -sS --fail-with-body "$base/v1/chat/completions" \
        -H 'content-type: application/json' \
        -H 'x-session-id: example-walkthrough' \
        -d "{\"model\": \"sim\", \"temperature\": 0, \"messages\": [$1]}" |
        sed -n 's/.*"content": *"\(\([^"\\]\|\\.\)*\)".*/\1/p'
}
u() { printf '{"role": "user", "content": "%s"}' "$1"; }
a() { printf '{"role": "assistant", "content": "%s"}' "$1"; }
m=$(u "The code of the blue safe is 4711. Please remember it.")
for t in "Tell me about the weather in spring." \
         "Now a word on gardening, please." \
         "And what about trains in the mountains?" \
         "What is the code of the blue safe?"; do
    reply=$(ask "$m")
    m="$m, $(a "$reply"), $(u "$t")"
done
ask "$m"
