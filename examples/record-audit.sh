#!/bin/sh
# record + audit, offline: a faulty serving path (fidelity sim keeping
# only the last 2 turns of each conversation, as a server or gateway
# with a too-small window does), fidelity record in front of it, a small
# client (client.sh) playing one conversation through the proxy, then
# what audit finds and what show says the server received.
#   sh examples/record-audit.sh        (outputs in ./example-out)
. "$(dirname "$0")/lib.sh"
# DB: the store to record into (default a fresh OUT/record.db)
db=${DB:-$OUT/record.db}
[ -n "${DB:-}" ] || rm -f "$db" "$db"-* "$db".spill.jsonl
serve faulty sim --keep-last-turns 2
upstream=$url
serve proxy record --upstream "$upstream" --db "$db"
echo "== a client talks to the proxy $url (-> $upstream, --keep-last-turns 2)"
answer=$(sh "$here/client.sh" "$url")
echo "   last answer: $answer"
stop proxy
echo
echo "== fidelity audit --db $db"
run 1 -- "$FIDELITY" audit --db "$db" --json "$OUT/audit.json"
echo
echo "== fidelity show example-walkthrough (turn by turn; --messages for"
echo "   what each request sent)"
run 0 -- "$FIDELITY" show example-walkthrough --db "$db" \
    --json "$OUT/show.json"
echo
echo "store: $db"
echo "audit: $OUT/audit.json"
echo "show:  $OUT/show.json"
