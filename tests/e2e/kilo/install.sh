#!/bin/sh
# Installs the Kilo CLI (npm package @kilocode/cli, pinned) under this
# directory's node_modules/ (gitignored), for recording the fixture of
# tests/e2e/opencode/record_compaction.sh (HARNESS=kilo). Prints the path
# of the binary on success. Needs npm and the registry; exits 1 otherwise.
set -eu
VERSION=7.7.7
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/node_modules/.bin/kilo"
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$VERSION"; then
    echo "$bin"; exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "install.sh: npm not found" >&2; exit 1; }
cd "$here"
[ -f package.json ] || echo '{"name":"fidelity-kilo-e2e","private":true}' > package.json
npm install --no-audit --no-fund --loglevel=error "@kilocode/cli@$VERSION" >&2
"$bin" --version >/dev/null 2>&1 || { echo "install.sh: '$bin' does not run" >&2; exit 1; }
echo "$bin"
