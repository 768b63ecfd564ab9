#!/bin/sh
# Records tests/fixtures/continue-1.5.47/auto-compaction-session.jsonl:
# record.sh with drive_auto.py, the model given a 3,000-token context and
# 512 tokens of reply (defaultCompletionOptions), so that the Continue CLI
# compacts its history by itself before a turn. Run by hand, like record.sh.
# usage: sh tests/e2e/continue/record_auto.sh [OUT]
set -eu
DRIVER=drive_auto.py CONTEXT_LENGTH=${CONTEXT_LENGTH:-3000} \
    MAX_TOKENS=${MAX_TOKENS:-512} \
    exec sh tests/e2e/continue/record.sh \
    "${1:-tests/fixtures/continue-1.5.47/auto-compaction-session.jsonl}"
